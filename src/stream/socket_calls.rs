//! The socket calls a byte-stream STREAM makes, as a table of function pointers, and
//! [`DataSocket`], a connected socket driven through one such table.
//!
//! The TCP STREAM ([`crate::transport::tcp::stream`]) does all its data-socket I/O
//! through a `DataSocket`: with [`LIBC`] it is a kernel TCP socket; with librdmacm's `r*`
//! calls (see [`crate::transport::rdma::rsocket_sys`]) it is an rsocket, and the same
//! STREAM code runs over RDMA. The r* calls take the same arguments as their libc
//! namesakes, so one table type describes both.

use std::io;
use std::mem::size_of;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, RawFd};
use std::time::{Duration, Instant};

type RecvFn =
    unsafe extern "C" fn(libc::c_int, *mut libc::c_void, libc::size_t, libc::c_int) -> isize;
type SendFn =
    unsafe extern "C" fn(libc::c_int, *const libc::c_void, libc::size_t, libc::c_int) -> isize;
type PollFn = unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, libc::c_int) -> libc::c_int;
type SetSockOptFn = unsafe extern "C" fn(
    libc::c_int,
    libc::c_int,
    libc::c_int,
    *const libc::c_void,
    libc::socklen_t,
) -> libc::c_int;
type GetSockOptFn = unsafe extern "C" fn(
    libc::c_int,
    libc::c_int,
    libc::c_int,
    *mut libc::c_void,
    *mut libc::socklen_t,
) -> libc::c_int;
type ShutdownFn = unsafe extern "C" fn(libc::c_int, libc::c_int) -> libc::c_int;
type CloseFn = unsafe extern "C" fn(libc::c_int) -> libc::c_int;
type FcntlFn = unsafe extern "C" fn(libc::c_int, libc::c_int, ...) -> libc::c_int;
type SockNameFn =
    unsafe extern "C" fn(libc::c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> libc::c_int;

/// The calls that drive one kind of socket.
pub struct SocketCalls {
    /// What the sockets are, for messages ("TCP", "rsocket").
    pub name: &'static str,
    /// Kernel sockets: `SO_RCVTIMEO`/`SO_SNDTIMEO`, `TCP_INFO`, `TCP_QUICKACK`,
    /// zero-copy and busy polling apply. rsockets support none of these.
    pub kernel: bool,
    /// How long a wait polls without sleeping before it may sleep (zero: at once).
    pub spin: Duration,
    pub recv: RecvFn,
    pub send: SendFn,
    pub poll: PollFn,
    pub setsockopt: SetSockOptFn,
    pub getsockopt: GetSockOptFn,
    pub shutdown: ShutdownFn,
    pub close: CloseFn,
    pub fcntl: FcntlFn,
    pub getsockname: SockNameFn,
    pub getpeername: SockNameFn,
}

/// Polls a spinning wait makes before it yields between polls.
const SPIN_POLLS: u32 = 200;

/// The kernel's socket calls.
pub static LIBC: SocketCalls = SocketCalls {
    name: "TCP",
    kernel: true,
    spin: Duration::ZERO,
    recv: libc::recv,
    send: libc::send,
    poll: libc::poll,
    setsockopt: libc::setsockopt,
    getsockopt: libc::getsockopt,
    shutdown: libc::shutdown,
    close: libc::close,
    fcntl: libc::fcntl,
    getsockname: libc::getsockname,
    getpeername: libc::getpeername,
};

/// `rc` of a call that sets errno on failure, as a result.
fn check(rc: isize) -> io::Result<usize> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// A connected socket and the table of calls that drive it; closed on drop with the
/// table's `close`.
pub struct DataSocket {
    fd: RawFd,
    calls: &'static SocketCalls,
}

impl DataSocket {
    /// Takes ownership of `fd`, an open socket of `calls`' kind.
    ///
    /// # Safety
    /// `fd` must be an open socket that `calls` drives, owned by nobody else.
    pub unsafe fn from_raw(fd: RawFd, calls: &'static SocketCalls) -> DataSocket {
        DataSocket { fd, calls }
    }

    pub fn calls(&self) -> &'static SocketCalls {
        self.calls
    }

    /// One `recv()` with `flags`.
    pub fn recv(&self, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
        // SAFETY: the pointer and length describe `buf`, exclusively borrowed for the
        // call; `self.fd` is open (owned until drop) and of the table's kind.
        check(unsafe { (self.calls.recv)(self.fd, buf.as_mut_ptr().cast(), buf.len(), flags) })
    }

    /// One `send()` with `flags`.
    pub fn send(&self, buf: &[u8], flags: libc::c_int) -> io::Result<usize> {
        // SAFETY: the pointer and length describe `buf`, borrowed for the call; the fd
        // is open and of the table's kind.
        check(unsafe { (self.calls.send)(self.fd, buf.as_ptr().cast(), buf.len(), flags) })
    }

    /// `poll()` over `fds` (sockets of this one's kind) for up to `ms` (negative: with
    /// no limit); returns the number of ready entries. EINTR counts as none ready. With
    /// the table's `spin`, it first polls without sleeping for up to that long.
    pub fn poll(&self, fds: &mut [libc::pollfd], ms: i32) -> io::Result<usize> {
        let spin = self.calls.spin;
        if spin.is_zero() || ms == 0 {
            return poll_with(self.calls, fds, ms);
        }
        let limit = u64::try_from(ms).map_or(spin, |ms| spin.min(Duration::from_millis(ms)));
        let start = Instant::now();
        let mut polls = 0u32;
        loop {
            let ready = poll_with(self.calls, fds, 0)?;
            if ready > 0 {
                return Ok(ready);
            }
            let spent = start.elapsed();
            if spent >= limit {
                let left = if ms < 0 {
                    ms
                } else {
                    let spent = i32::try_from(spent.as_millis()).unwrap_or(ms);
                    ms.saturating_sub(spent).max(0)
                };
                return poll_with(self.calls, fds, left);
            }
            // Spin a little, then let whatever else waits for this CPU run.
            polls += 1;
            if polls < SPIN_POLLS {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Waits until this socket is ready for `events` or `ms` pass; returns whether it
    /// became ready (errors and hang-ups count as ready).
    pub fn poll_one(&self, events: libc::c_short, ms: i32) -> io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.fd,
            events,
            revents: 0,
        };
        Ok(self.poll(std::slice::from_mut(&mut pfd), ms)? > 0)
    }

    /// Sets a socket option to the bytes of `value`.
    pub fn set_opt<T>(&self, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
        // SAFETY: the pointer and length describe `value`, borrowed for the call; the fd
        // is open and of the table's kind.
        let rc = unsafe {
            (self.calls.setsockopt)(
                self.fd,
                level,
                name,
                (value as *const T).cast(),
                size_of::<T>() as libc::socklen_t,
            )
        };
        check(rc as isize).map(drop)
    }

    /// Sets an integer socket option.
    pub fn set_int_opt(&self, level: libc::c_int, name: libc::c_int, v: i32) -> io::Result<()> {
        self.set_opt(level, name, &(v as libc::c_int))
    }

    /// Sets a time-out option (`SO_RCVTIMEO`, `SO_SNDTIMEO`). A zero `timeout` would
    /// mean "forever" to the kernel, so callers pass at least a microsecond.
    pub fn set_timeout_opt(&self, name: libc::c_int, timeout: Duration) -> io::Result<()> {
        let tv = libc::timeval {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_usec: libc::suseconds_t::from(timeout.subsec_micros() as i32),
        };
        self.set_opt(libc::SOL_SOCKET, name, &tv)
    }

    /// Reads an integer socket option.
    pub fn int_opt(&self, level: libc::c_int, name: libc::c_int) -> io::Result<i32> {
        let mut v: libc::c_int = 0;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: the pointer and length describe `v`, exclusively borrowed for the
        // call; the fd is open and of the table's kind.
        let rc = unsafe {
            (self.calls.getsockopt)(
                self.fd,
                level,
                name,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        check(rc as isize)?;
        Ok(v)
    }

    /// The pending error (`SO_ERROR`), if any.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        let v = self.int_opt(libc::SOL_SOCKET, libc::SO_ERROR)?;
        Ok((v != 0).then(|| io::Error::from_raw_os_error(v)))
    }

    /// Sets or clears `O_NONBLOCK`.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        // SAFETY: F_GETFL takes no argument; the fd is open and of the table's kind.
        let flags = check(unsafe { (self.calls.fcntl)(self.fd, libc::F_GETFL) } as isize)?;
        let flags = flags as libc::c_int;
        let want = if on {
            flags | libc::O_NONBLOCK
        } else {
            flags & !libc::O_NONBLOCK
        };
        if want != flags {
            // SAFETY: F_SETFL takes an int; the fd is open and of the table's kind.
            check(unsafe { (self.calls.fcntl)(self.fd, libc::F_SETFL, want) } as isize)?;
        }
        Ok(())
    }

    /// Sets `TCP_NODELAY`.
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.set_int_opt(libc::IPPROTO_TCP, libc::TCP_NODELAY, i32::from(on))
    }

    /// Shuts down the sending side: the peer reads end of stream.
    pub fn shutdown_write(&self) -> io::Result<()> {
        // SAFETY: plain call on an open fd of the table's kind.
        check(unsafe { (self.calls.shutdown)(self.fd, libc::SHUT_WR) } as isize).map(drop)
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.name_of(self.calls.getsockname)
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.name_of(self.calls.getpeername)
    }

    fn name_of(&self, call: SockNameFn) -> io::Result<SocketAddr> {
        // SAFETY: sockaddr_storage is plain old data; zeroed is a valid value for it.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: the pointer and length describe `storage`, exclusively borrowed for
        // the call; the callee writes at most `len` bytes and updates it.
        let rc = unsafe {
            call(
                self.fd,
                (&mut storage as *mut libc::sockaddr_storage).cast(),
                &mut len,
            )
        };
        check(rc as isize)?;
        sockaddr_to_std(&storage)
    }
}

/// `poll()` through `calls` over `fds`; EINTR counts as none ready.
pub fn poll_with(calls: &SocketCalls, fds: &mut [libc::pollfd], ms: i32) -> io::Result<usize> {
    // SAFETY: `fds` is a valid, exclusively borrowed slice of pollfd for the duration
    // of the call, and its length is passed alongside.
    let rc = unsafe { (calls.poll)(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    match check(rc as isize) {
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        other => other,
    }
}

/// A socket address the kernel (or librdmacm) wrote, as std's type.
pub fn sockaddr_to_std(storage: &libc::sockaddr_storage) -> io::Result<SocketAddr> {
    match libc::c_int::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says `storage` holds a sockaddr_in, which it can.
            let a: &libc::sockaddr_in = unsafe { &*(storage as *const _ as *const _) };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Ok(SocketAddr::new(ip.into(), u16::from_be(a.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says `storage` holds a sockaddr_in6, which it can.
            let a: &libc::sockaddr_in6 = unsafe { &*(storage as *const _ as *const _) };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            Ok(SocketAddr::new(ip.into(), u16::from_be(a.sin6_port)))
        }
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not an IP socket address",
        )),
    }
}

/// `addr` as a C socket address and its length.
pub fn std_to_sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    let sa: socket2::SockAddr = addr.into();
    // SAFETY: sockaddr_storage is plain old data; zeroed is a valid value for it.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = sa.len() as usize;
    // SAFETY: `sa` holds `len` valid bytes of a socket address, and `storage` is large
    // enough for any (both are sockaddr_storage-sized at most).
    unsafe {
        std::ptr::copy_nonoverlapping(
            sa.as_ptr().cast::<u8>(),
            (&mut storage as *mut libc::sockaddr_storage).cast::<u8>(),
            len.min(size_of::<libc::sockaddr_storage>()),
        );
    }
    (storage, len as libc::socklen_t)
}

impl From<TcpStream> for DataSocket {
    fn from(sock: TcpStream) -> DataSocket {
        DataSocket {
            fd: sock.into_raw_fd(),
            calls: &LIBC,
        }
    }
}

impl AsRawFd for DataSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl AsFd for DataSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd stays open while `self` lives (closed only in drop).
        unsafe { BorrowedFd::borrow_raw(self.fd) }
    }
}

impl Drop for DataSocket {
    fn drop(&mut self) {
        // SAFETY: the fd is owned by this value and closed exactly once, here.
        unsafe { (self.calls.close)(self.fd) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair() -> (DataSocket, DataSocket) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (s, _) = l.accept().expect("accept");
        (c.into(), s.into())
    }

    #[test]
    fn libc_table_moves_bytes_and_reports_end_of_stream() {
        let (c, s) = pair();
        assert_eq!(c.send(b"hello", libc::MSG_NOSIGNAL).expect("send"), 5);
        assert!(s.poll_one(libc::POLLIN, 5000).expect("poll"));
        let mut buf = [0u8; 16];
        assert_eq!(s.recv(&mut buf, 0).expect("recv"), 5);
        assert_eq!(&buf[..5], b"hello");
        c.shutdown_write().expect("shutdown");
        assert!(s.poll_one(libc::POLLIN, 5000).expect("poll"));
        assert_eq!(s.recv(&mut buf, 0).expect("recv"), 0);
        assert_eq!(c.local_addr().expect("local"), s.peer_addr().expect("peer"));
        assert!(c.take_error().expect("so_error").is_none());
        assert!(c.calls().kernel);
    }

    #[test]
    fn libc_table_nonblocking_and_options_reach_the_kernel() {
        let (c, s) = pair();
        s.set_nonblocking(true).expect("nonblocking");
        let mut buf = [0u8; 4];
        let e = s.recv(&mut buf, 0).expect_err("nothing sent yet");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        s.set_nonblocking(false).expect("blocking");
        s.set_timeout_opt(libc::SO_RCVTIMEO, Duration::from_millis(20))
            .expect("rcvtimeo");
        let e = s.recv(&mut buf, 0).expect_err("times out");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        c.set_nodelay(true).expect("nodelay");
        assert!(!s.poll_one(libc::POLLIN, 0).expect("poll"));
    }

    mod spinning {
        use super::*;
        use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
        use std::sync::Mutex;

        /// Calls of [`fake_poll`] so far, which one is ready (0: none), and the time-out
        /// the last one was given.
        static POLLS: AtomicU32 = AtomicU32::new(0);
        static READY_AT: AtomicU32 = AtomicU32::new(0);
        static LAST_MS: AtomicI32 = AtomicI32::new(0);
        /// The cases share the counters above: one at a time.
        static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

        unsafe extern "C" fn fake_poll(
            fds: *mut libc::pollfd,
            _: libc::nfds_t,
            ms: libc::c_int,
        ) -> libc::c_int {
            let n = POLLS.fetch_add(1, Ordering::SeqCst) + 1;
            LAST_MS.store(ms, Ordering::SeqCst);
            if n == READY_AT.load(Ordering::SeqCst) {
                // SAFETY: `DataSocket::poll` passes its one-entry slice.
                unsafe { (*fds).revents = libc::POLLIN };
                1
            } else {
                0
            }
        }

        unsafe extern "C" fn no_close(_: libc::c_int) -> libc::c_int {
            0
        }

        /// Kernel calls but a counting `poll` (which touches no descriptor) and a
        /// `close` that closes nothing, with a spin of 30 ms.
        static SPINNING: SocketCalls = SocketCalls {
            name: "spinning",
            kernel: false,
            spin: Duration::from_millis(30),
            recv: libc::recv,
            send: libc::send,
            poll: fake_poll,
            setsockopt: libc::setsockopt,
            getsockopt: libc::getsockopt,
            shutdown: libc::shutdown,
            close: no_close,
            fcntl: libc::fcntl,
            getsockname: libc::getsockname,
            getpeername: libc::getpeername,
        };

        /// Polls for `ms` with the `ready_at`th call ready; returns what the poll returned,
        /// the calls made, the last call's time-out and the time taken.
        fn poll(ms: i32, ready_at: u32) -> (usize, u32, i32, Duration) {
            POLLS.store(0, Ordering::SeqCst);
            READY_AT.store(ready_at, Ordering::SeqCst);
            LAST_MS.store(0, Ordering::SeqCst);
            // SAFETY: the table's calls never use the descriptor.
            let sock = unsafe { DataSocket::from_raw(-1, &SPINNING) };
            let mut fds = [libc::pollfd {
                fd: -1,
                events: libc::POLLIN,
                revents: 0,
            }];
            let start = Instant::now();
            let ready = sock.poll(&mut fds, ms).expect("poll");
            let took = start.elapsed();
            (
                ready,
                POLLS.load(Ordering::SeqCst),
                LAST_MS.load(Ordering::SeqCst),
                took,
            )
        }

        #[test]
        fn a_spinning_table_polls_without_sleeping_first_then_sleeps_for_what_is_left() {
            let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
            // Ready while spinning: every call was one that does not sleep.
            let (ready, calls, last, _) = poll(1000, 5);
            assert_eq!((ready, calls, last), (1, 5, 0));
            // Never ready: it spins 30 ms, then one call may sleep for the rest of 100 ms.
            let (ready, calls, last, took) = poll(100, 0);
            assert_eq!(ready, 0);
            assert!(calls > 2, "{calls} polls");
            assert!(took >= Duration::from_millis(30), "{took:?}");
            assert!((1..=70).contains(&last), "then slept up to {last} ms");
            // With no limit, the last call has none either.
            assert_eq!(poll(-1, 0).2, -1);
            // With nothing to wait for, one call and no spin.
            assert_eq!(poll(0, 0).1, 1);
        }
    }

    #[test]
    fn socket_addresses_convert_both_ways() {
        for a in ["127.0.0.1:5201", "[::1]:80", "[fe80::1]:65535"] {
            let addr: SocketAddr = a.parse().expect("addr");
            let (storage, _) = std_to_sockaddr(addr);
            let back = sockaddr_to_std(&storage).expect("back");
            assert_eq!(back.ip(), addr.ip());
            assert_eq!(back.port(), addr.port());
        }
    }
}
