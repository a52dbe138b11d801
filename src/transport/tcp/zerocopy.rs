//! Zero-copy sending for the TCP STREAM (`--zerocopy=msg|splice`).
//!
//! - `msg`: `send(MSG_ZEROCOPY)`. The kernel pins the user pages and later posts a
//!   completion on the socket's error queue; completions are reaped without blocking
//!   every [`REAP_EVERY`] sends, when the kernel refuses more (`ENOBUFS`), and all of
//!   them before the writer is dropped. The kernel also says whether it had to copy
//!   after all: on loopback it always does (the receiving socket may hold the data
//!   indefinitely), which [`ZeroCopyCounts::copied`] shows.
//! - `splice`: `vmsplice()` the user pages into a pipe, then `splice()` the pipe into
//!   the socket: two system calls per pipe-full instead of one `write()`, but on
//!   loopback the receiver's `read()` copies straight from the sender's pages.
//!
//! Either way the kernel reads the buffer after the call returned (with `splice`, until
//! the peer has read the data): the caller must not change or free a buffer it sent
//! until the peer has received it. fperf sends one constant buffer and does not check
//! payload contents, so it never depends on this.

use serde::{Deserialize, Serialize};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// How a TCP sender hands bytes to the kernel (`--zerocopy`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize,
)]
#[schemars(rename = "zerocopy")]
#[serde(rename_all = "lowercase")]
pub enum ZeroCopy {
    /// Plain `write()`: the kernel copies the buffer.
    #[default]
    Off,
    /// `send(MSG_ZEROCOPY)`, completions reaped from the socket's error queue.
    Msg,
    /// `vmsplice()` the buffer into a pipe, then `splice()` the pipe into the socket.
    Splice,
}

/// Sends between two non-blocking reaps of MSG_ZEROCOPY completions.
const REAP_EVERY: u64 = 64;
/// Longest a dropped writer waits for the kernel to release its pages.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// Pipe size asked for with `splice`: a 128 KiB message fits in one round.
const PIPE_BYTES: libc::c_int = 1 << 20;

// Linux UAPI values (linux/errqueue.h) the libc crate does not export.
const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

/// What the kernel reported about MSG_ZEROCOPY sends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZeroCopyCounts {
    /// `send()` calls that moved bytes (each gets one completion).
    pub issued: u64,
    /// Completions reaped.
    pub completed: u64,
    /// Completions for which the kernel copied the data after all.
    pub copied: u64,
}

/// A zero-copy writer for one TCP socket; each sending thread owns its own.
pub(crate) enum ZeroCopyWriter {
    Msg { fd: RawFd, counts: ZeroCopyCounts },
    Splice { read: OwnedFd, write: OwnedFd },
}

impl ZeroCopyWriter {
    /// A writer for `sock` in `mode`; `None` for [`ZeroCopy::Off`].
    pub fn new(mode: ZeroCopy, sock: &impl AsRawFd) -> io::Result<Option<ZeroCopyWriter>> {
        match mode {
            ZeroCopy::Off => Ok(None),
            ZeroCopy::Msg => {
                crate::stream::sys::set_int_opt(sock, libc::SOL_SOCKET, libc::SO_ZEROCOPY, 1)?;
                Ok(Some(ZeroCopyWriter::Msg {
                    fd: sock.as_raw_fd(),
                    counts: ZeroCopyCounts::default(),
                }))
            }
            ZeroCopy::Splice => {
                let mut fds = [0 as libc::c_int; 2];
                // SAFETY: `fds` has room for the two descriptors pipe2 writes.
                if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } < 0
                {
                    return Err(io::Error::last_os_error());
                }
                // SAFETY: pipe2 succeeded, so both descriptors are open and ours alone.
                let (read, write) =
                    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
                // A bigger pipe means fewer calls per message; a smaller one still works
                // (messages then go through in pipe-sized pieces), so a refusal is fine.
                // SAFETY: F_SETPIPE_SZ on a pipe we own takes an int argument.
                unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES) };
                Ok(Some(ZeroCopyWriter::Splice { read, write }))
            }
        }
    }

    /// Writes all of `buf` to `sock`, calling `wait` after `EAGAIN` (it polls for
    /// POLLOUT, or spins, and fails once the deadline passed or the run was aborted).
    pub fn write_all(
        &mut self,
        sock: RawFd,
        buf: &[u8],
        wait: &mut dyn FnMut() -> io::Result<()>,
    ) -> io::Result<()> {
        match self {
            ZeroCopyWriter::Msg { counts, .. } => msg_write_all(sock, buf, counts, wait),
            ZeroCopyWriter::Splice { read, write } => {
                splice_write_all(sock, read.as_raw_fd(), write.as_raw_fd(), buf, wait)
            }
        }
    }

    /// MSG_ZEROCOPY figures (all zero for `splice`).
    #[cfg(test)]
    pub fn counts(&self) -> ZeroCopyCounts {
        match self {
            ZeroCopyWriter::Msg { counts, .. } => *counts,
            ZeroCopyWriter::Splice { .. } => ZeroCopyCounts::default(),
        }
    }
}

impl Drop for ZeroCopyWriter {
    fn drop(&mut self) {
        // The kernel may still read the caller's pages: wait (bounded) until it says it
        // is done, so a buffer freed after the STREAM is gone is no longer in use.
        if let ZeroCopyWriter::Msg { fd, counts } = self {
            let deadline = Instant::now() + FLUSH_TIMEOUT;
            while counts.completed < counts.issued && Instant::now() < deadline {
                // POLLERR is reported whenever the error queue holds something.
                if crate::stream::sys::poll_one(*fd, 0, 10).is_err() || reap(*fd, counts).is_err() {
                    break;
                }
            }
        }
    }
}

fn msg_write_all(
    sock: RawFd,
    mut buf: &[u8],
    counts: &mut ZeroCopyCounts,
    wait: &mut dyn FnMut() -> io::Result<()>,
) -> io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: `buf` is a live slice; the kernel reads at most `buf.len()` bytes (and,
        // with MSG_ZEROCOPY, keeps reading them until the completion: see module doc).
        let rc = unsafe {
            libc::send(
                sock,
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_ZEROCOPY | libc::MSG_NOSIGNAL,
            )
        };
        if rc > 0 {
            buf = &buf[rc as usize..];
            counts.issued += 1;
            continue;
        }
        if rc == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => {}
            Some(libc::EAGAIN) => {
                reap(sock, counts)?;
                wait()?;
            }
            // Too many pages pinned: wait for the kernel to release some.
            Some(libc::ENOBUFS) => {
                if reap(sock, counts)? == 0 {
                    crate::stream::sys::poll_one(sock, 0, 1)?;
                }
            }
            _ => return Err(e),
        }
    }
    if counts.issued - counts.completed >= REAP_EVERY {
        reap(sock, counts)?;
    }
    Ok(())
}

/// Reads every completion queued on `sock`'s error queue without blocking; returns how
/// many were read.
fn reap(sock: RawFd, counts: &mut ZeroCopyCounts) -> io::Result<u64> {
    let mut reaped = 0;
    loop {
        // Room for one cmsghdr carrying a sock_extended_err (plus its offender address).
        let mut control = [0u64; 16];
        // SAFETY: msghdr is plain data; all-zero means no name and no iovec.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: `msg` points at `control`, which outlives the call.
        let rc = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) => Ok(reaped),
                Some(libc::EINTR) => continue,
                _ => Err(e),
            };
        }
        // SAFETY: the kernel filled `msg.msg_control` with `msg_controllen` bytes of
        // well-formed cmsgs; CMSG_FIRSTHDR/NXTHDR stay within them.
        let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        while !cmsg.is_null() {
            // SAFETY: `cmsg` is non-null and inside the control buffer (see above).
            let (level, kind) = unsafe { ((*cmsg).cmsg_level, (*cmsg).cmsg_type) };
            let is_err = (level == libc::SOL_IP && kind == libc::IP_RECVERR)
                || (level == libc::SOL_IPV6 && kind == libc::IPV6_RECVERR);
            if is_err {
                // SAFETY: an IP(V6)_RECVERR cmsg carries a sock_extended_err; the data
                // may be unaligned, hence read_unaligned.
                let err = unsafe {
                    std::ptr::read_unaligned(
                        libc::CMSG_DATA(cmsg).cast::<libc::sock_extended_err>(),
                    )
                };
                if err.ee_origin == SO_EE_ORIGIN_ZEROCOPY && err.ee_errno == 0 {
                    // ee_info..=ee_data is the range of send() calls completed.
                    let n = u64::from(err.ee_data.wrapping_sub(err.ee_info)) + 1;
                    counts.completed += n;
                    reaped += n;
                    if err.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0 {
                        counts.copied += n;
                    }
                }
            }
            // SAFETY: as for CMSG_FIRSTHDR.
            cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
        }
    }
}

fn splice_write_all(
    sock: RawFd,
    pipe_read: RawFd,
    pipe_write: RawFd,
    mut buf: &[u8],
    wait: &mut dyn FnMut() -> io::Result<()>,
) -> io::Result<()> {
    while !buf.is_empty() {
        let iov = libc::iovec {
            iov_base: buf.as_ptr() as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // The pipe is empty here (every earlier round spliced all it took), so this
        // takes min(buf, pipe size) bytes.
        // SAFETY: `iov` describes the live slice `buf`; vmsplice without SPLICE_F_GIFT
        // only reads it (the kernel references the pages: see module doc).
        let taken = unsafe { libc::vmsplice(pipe_write, &iov, 1, libc::SPLICE_F_NONBLOCK) };
        if taken < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        let taken = taken as usize;
        let mut pending = taken;
        while pending > 0 {
            // SAFETY: plain descriptors and null offsets (both ends are streams).
            let rc = unsafe {
                libc::splice(
                    pipe_read,
                    std::ptr::null_mut(),
                    sock,
                    std::ptr::null_mut(),
                    pending,
                    libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
                )
            };
            if rc > 0 {
                pending -= rc as usize;
                continue;
            }
            if rc == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => {}
                Some(libc::EAGAIN) => wait()?,
                _ => return Err(e),
            }
        }
        buf = &buf[taken..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};

    /// Sends `n` copies of a patterned 128 KiB buffer in `mode` and checks every byte.
    fn roundtrip(mode: ZeroCopy, n: usize) -> ZeroCopyCounts {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let reader = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            let mut got = Vec::new();
            s.read_to_end(&mut got).expect("read");
            got
        });
        let sock = TcpStream::connect(addr).expect("connect");
        sock.set_nonblocking(true).expect("nonblocking");
        let buf: Vec<u8> = (0..128 * 1024).map(|i| (i % 251) as u8).collect();
        let fd = sock.as_raw_fd();
        let mut w = ZeroCopyWriter::new(mode, &sock)
            .expect("writer")
            .expect("a mode other than off");
        let mut wait = || {
            crate::stream::sys::poll_one(fd, libc::POLLOUT, 1000)?;
            Ok(())
        };
        for _ in 0..n {
            w.write_all(fd, &buf, &mut wait).expect("write_all");
        }
        let counts = w.counts();
        drop(w);
        sock.shutdown(std::net::Shutdown::Write).expect("shutdown");
        let got = reader.join().expect("join");
        assert_eq!(got.len(), n * buf.len());
        assert!(got.chunks(buf.len()).all(|c| c == &buf[..]));
        counts
    }

    #[test]
    fn splice_moves_every_byte_in_order() {
        roundtrip(ZeroCopy::Splice, 200);
    }

    #[test]
    fn msg_zerocopy_moves_every_byte_and_reaps_completions() {
        let counts = roundtrip(ZeroCopy::Msg, 200);
        assert!(counts.issued >= 200, "{counts:?}");
        assert!(counts.completed <= counts.issued, "{counts:?}");
        assert!(counts.copied <= counts.completed, "{counts:?}");
        // Loopback: the kernel says whether it copied anyway (it does on Linux).
        eprintln!("MSG_ZEROCOPY over loopback: {counts:?}");
    }
}
