//! `--io-uring`: a TCP STREAM's data calls go through an io_uring instead of
//! `send(2)`/`recv(2)`, one submission and one completion per call, so a run measures
//! what io_uring's socket path costs or saves against the system calls on this kernel.
//!
//! Each thread that moves data (the receiving path, each sender thread) has a ring of
//! its own. A call that may wait is linked to a time-out (`IORING_OP_LINK_TIMEOUT`)
//! of one slice, as the blocking socket's kernel time-out bounds a `recv()`: when it
//! fires the call is cancelled and fails with `WouldBlock`, and the caller checks its
//! deadline and the abort flag before waiting again. A call that must not wait passes
//! `MSG_DONTWAIT`.

use io_uring::{opcode, squeue, types, IoUring};
use std::io;
use std::os::fd::RawFd;

/// Entries of each ring: a call uses two (the operation and its time-out).
const RING_ENTRIES: u32 = 4;
/// `user_data` of the data operation; its linked time-out has another.
const OP: u64 = 1;
const TIMEOUT: u64 = 2;

/// One thread's io_uring for one socket's data calls.
pub struct Ring {
    ring: IoUring,
}

impl Ring {
    pub fn new() -> io::Result<Ring> {
        let ring = IoUring::new(RING_ENTRIES).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "--io-uring: cannot set up an io_uring ({e}); the kernel may lack it \
                     or forbid it (sysctl kernel.io_uring_disabled)"
                ),
            )
        })?;
        Ok(Ring { ring })
    }

    /// One `recv()` of `fd` into `buf` with `flags`: waits at most `wait_ms` if given
    /// (then fails with `WouldBlock`), else does not wait at all.
    pub fn recv(
        &mut self,
        fd: RawFd,
        buf: &mut [u8],
        flags: libc::c_int,
        wait_ms: Option<u32>,
    ) -> io::Result<usize> {
        let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
        let op = opcode::Recv::new(types::Fd(fd), buf.as_mut_ptr(), len)
            .flags(flags | no_wait(wait_ms))
            .build();
        // SAFETY: `buf` is borrowed mutably for the whole call, and `run` returns only
        // once the operation's completion has been reaped.
        unsafe { self.run(op, wait_ms) }
    }

    /// One `send()` of `buf` on `fd` with `flags`, waiting as [`Ring::recv`] does.
    pub fn send(
        &mut self,
        fd: RawFd,
        buf: &[u8],
        flags: libc::c_int,
        wait_ms: Option<u32>,
    ) -> io::Result<usize> {
        let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
        let op = opcode::Send::new(types::Fd(fd), buf.as_ptr(), len)
            .flags(flags | no_wait(wait_ms))
            .build();
        // SAFETY: as in `recv`: `buf` outlives the operation.
        unsafe { self.run(op, wait_ms) }
    }

    /// Submits `op` (linked to a time-out of `wait_ms` if given) and waits for its
    /// completion and its time-out's.
    ///
    /// # Safety
    /// The memory `op` points to must stay valid until this returns.
    unsafe fn run(&mut self, op: squeue::Entry, wait_ms: Option<u32>) -> io::Result<usize> {
        let timespec = wait_ms.map(|ms| {
            types::Timespec::new()
                .sec(u64::from(ms / 1000))
                .nsec((ms % 1000) * 1_000_000)
        });
        {
            let mut sq = self.ring.submission();
            let pushed = match &timespec {
                Some(ts) => {
                    let linked = op.flags(squeue::Flags::IO_LINK).user_data(OP);
                    let timeout = opcode::LinkTimeout::new(ts).build().user_data(TIMEOUT);
                    // SAFETY: the caller keeps the operation's memory valid, and `ts`
                    // lives until both completions are reaped below.
                    unsafe { sq.push_multiple(&[linked, timeout]) }
                }
                // SAFETY: as above.
                None => unsafe { sq.push(&op.user_data(OP)) },
            };
            if pushed.is_err() {
                // Every call reaps what it submitted, so the queue is never full.
                return Err(io::Error::other("io_uring submission queue full"));
            }
        }
        let mut pending = if timespec.is_some() { 2 } else { 1 };
        let mut result = None;
        while pending > 0 {
            match self.ring.submit_and_wait(pending) {
                Ok(_) => {}
                // A signal, or the kernel short of resources for a moment: the
                // submitted entries stay submitted; wait for them again.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) => {}
                Err(e) => return Err(e),
            }
            for cqe in self.ring.completion() {
                pending -= 1;
                if cqe.user_data() == OP {
                    result = Some(cqe.result());
                }
            }
        }
        match result {
            Some(n) if n >= 0 => Ok(n as usize),
            // The linked time-out fired first: the slice passed with nothing done.
            Some(e) if -e == libc::ECANCELED => Err(io::ErrorKind::WouldBlock.into()),
            Some(e) => Err(io::Error::from_raw_os_error(-e)),
            None => Err(io::Error::other(
                "io_uring completed a call it was not given",
            )),
        }
    }
}

/// `MSG_DONTWAIT` for a call that must not wait (`wait_ms` is `None`), else no flag.
pub(crate) fn no_wait(wait_ms: Option<u32>) -> libc::c_int {
    if wait_ms.is_some() {
        0
    } else {
        libc::MSG_DONTWAIT
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::time::{Duration, Instant};

    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    #[test]
    fn sends_and_receives_the_exact_bytes() {
        let (mut client, server) = pair();
        let mut ring = Ring::new().unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            client.read_to_end(&mut got).unwrap();
            got
        });
        let mut sent = 0;
        while sent < data.len() {
            sent += ring
                .send(
                    server.as_raw_fd(),
                    &data[sent..],
                    libc::MSG_NOSIGNAL,
                    Some(100),
                )
                .or_else(|e| match e.kind() {
                    io::ErrorKind::WouldBlock => Ok(0),
                    _ => Err(e),
                })
                .unwrap();
        }
        drop(server);
        assert_eq!(reader.join().unwrap(), data);

        let (mut client, server) = pair();
        client.write_all(b"hello").unwrap();
        let mut buf = [0u8; 16];
        let n = ring
            .recv(server.as_raw_fd(), &mut buf, 0, Some(1000))
            .unwrap();
        assert_eq!(&buf[..n], b"hello");
        drop(client);
        let n = ring
            .recv(server.as_raw_fd(), &mut buf, 0, Some(1000))
            .unwrap();
        assert_eq!(n, 0, "end of stream");
    }

    #[test]
    fn a_wait_ends_after_its_slice_and_no_wait_never_waits() {
        let (mut client, server) = pair();
        let mut ring = Ring::new().unwrap();
        let mut buf = [0u8; 8];
        let start = Instant::now();
        let e = ring
            .recv(server.as_raw_fd(), &mut buf, 0, Some(50))
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert!(start.elapsed() >= Duration::from_millis(50));
        let e = ring
            .recv(server.as_raw_fd(), &mut buf, 0, None)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        // The ring is still usable after both.
        client.write_all(b"x").unwrap();
        assert_eq!(
            ring.recv(server.as_raw_fd(), &mut buf, 0, Some(1000))
                .unwrap(),
            1
        );
    }
}
