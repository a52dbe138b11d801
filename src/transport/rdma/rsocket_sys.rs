//! librdmacm's rsocket calls, loaded at run time (fperf builds and runs TCP and UDP
//! without rdma-core): the [`SocketCalls`] table that runs the TCP STREAM over
//! rsockets, and the set-up calls (`rsocket`, `rbind`, `rlisten`, `raccept`,
//! `rconnect`) that make them.
//!
//! rsockets take no `SO_RCVTIMEO`/`SO_SNDTIMEO`, so the STREAM keeps them non-blocking
//! and waits in `rpoll()` after `EAGAIN` (see [`crate::transport::tcp::stream`]),
//! polling without sleeping for up to `SPIN` first.

use crate::stream::socket_calls::{std_to_sockaddr, DataSocket, SocketCalls};
use std::io;
use std::net::SocketAddr;
use std::sync::OnceLock;

/// The library the calls come from.
pub const LIBRARY: &str = "librdmacm.so.1";

/// How long a wait on rsockets polls before it may sleep. `rpoll()` spins only 10 µs
/// before it sleeps on the device's completion channel, and a round trip that waits
/// there can wake several times slower than one that polls; perftest and rsockets'
/// own `rstream` never stop polling, and fperf's verbs and libfabric paths spin before
/// they nap.
const SPIN: std::time::Duration = std::time::Duration::from_millis(20);

type SocketFn = unsafe extern "C" fn(libc::c_int, libc::c_int, libc::c_int) -> libc::c_int;
type BindFn =
    unsafe extern "C" fn(libc::c_int, *const libc::sockaddr, libc::socklen_t) -> libc::c_int;
type ListenFn = unsafe extern "C" fn(libc::c_int, libc::c_int) -> libc::c_int;
type AcceptFn =
    unsafe extern "C" fn(libc::c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> libc::c_int;

/// librdmacm's rsocket calls.
pub struct Rsockets {
    /// The data calls, for [`DataSocket`]s.
    pub calls: SocketCalls,
    socket: SocketFn,
    bind: BindFn,
    listen: ListenFn,
    accept: AcceptFn,
    connect: BindFn,
    /// Keeps the calls above valid: never unloaded.
    _lib: libloading::Library,
}

/// Looks up `name` in `lib` as a `T`.
///
/// # Safety
/// `T` must be the function pointer type of the C symbol `name`.
unsafe fn symbol<T: Copy>(lib: &libloading::Library, name: &str) -> io::Result<T> {
    // SAFETY: the caller gives the symbol's true type.
    let sym = unsafe { lib.get::<T>(name.as_bytes()) }.map_err(|e| {
        io::Error::new(
            io::ErrorKind::Unsupported,
            format!("{LIBRARY} lacks {name}: {e}"),
        )
    })?;
    Ok(*sym)
}

fn load() -> io::Result<Rsockets> {
    // SAFETY: loading librdmacm only runs its own initializers.
    let lib = unsafe { libloading::Library::new(LIBRARY) }.map_err(|e| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("cannot load {LIBRARY} ({e}); install it with `apt-get install librdmacm1 ibverbs-providers`"),
        )
    })?;
    // SAFETY (every lookup): librdmacm's rsocket.h declares each r* call with the
    // signature of its libc namesake, which is the type given here.
    unsafe {
        let calls = SocketCalls {
            name: "rsocket",
            kernel: false,
            spin: SPIN,
            recv: symbol(&lib, "rrecv")?,
            send: symbol(&lib, "rsend")?,
            poll: symbol(&lib, "rpoll")?,
            setsockopt: symbol(&lib, "rsetsockopt")?,
            getsockopt: symbol(&lib, "rgetsockopt")?,
            shutdown: symbol(&lib, "rshutdown")?,
            close: symbol(&lib, "rclose")?,
            fcntl: symbol(&lib, "rfcntl")?,
            getsockname: symbol(&lib, "rgetsockname")?,
            getpeername: symbol(&lib, "rgetpeername")?,
        };
        Ok(Rsockets {
            calls,
            socket: symbol(&lib, "rsocket")?,
            bind: symbol(&lib, "rbind")?,
            listen: symbol(&lib, "rlisten")?,
            accept: symbol(&lib, "raccept")?,
            connect: symbol(&lib, "rconnect")?,
            _lib: lib,
        })
    }
}

/// The rsocket calls, loaded on first use (once per process).
pub fn rsockets() -> io::Result<&'static Rsockets> {
    static LOADED: OnceLock<Result<Rsockets, String>> = OnceLock::new();
    LOADED
        .get_or_init(|| load().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| io::Error::new(io::ErrorKind::NotFound, e.clone()))
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

impl Rsockets {
    /// A new stream rsocket for `addr`'s family.
    fn socket(&'static self, addr: SocketAddr) -> io::Result<DataSocket> {
        let family = if addr.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        // SAFETY: plain call with constant arguments.
        let fd = check(unsafe { (self.socket)(family, libc::SOCK_STREAM, 0) })?;
        // SAFETY: `fd` is the new rsocket, owned by nobody else.
        Ok(unsafe { DataSocket::from_raw(fd, &self.calls) })
    }

    fn bind(&self, sock: &DataSocket, addr: SocketAddr) -> io::Result<()> {
        let (sa, len) = std_to_sockaddr(addr);
        // SAFETY: `sa` holds a socket address of `len` bytes; the fd is an rsocket.
        check(unsafe {
            (self.bind)(
                raw(sock),
                (&sa as *const libc::sockaddr_storage).cast(),
                len,
            )
        })
        .map(drop)
    }

    /// A non-blocking rsocket listening on `addr` (`SO_REUSEADDR`, so a session that
    /// follows another's can bind at once).
    pub fn listen(&'static self, addr: SocketAddr, backlog: i32) -> io::Result<DataSocket> {
        let sock = self.socket(addr)?;
        sock.set_int_opt(libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
        self.bind(&sock, addr)?;
        // SAFETY: plain call on an rsocket.
        check(unsafe { (self.listen)(raw(&sock), backlog) })?;
        sock.set_nonblocking(true)?;
        Ok(sock)
    }

    /// One connection from `listener` (non-blocking: `WouldBlock` when none waits).
    pub fn accept(&'static self, listener: &DataSocket) -> io::Result<DataSocket> {
        // SAFETY: null address and length pointers ask for no peer address.
        let fd = check(unsafe {
            (self.accept)(raw(listener), std::ptr::null_mut(), std::ptr::null_mut())
        })?;
        // SAFETY: `fd` is the accepted rsocket, owned by nobody else.
        Ok(unsafe { DataSocket::from_raw(fd, &self.calls) })
    }

    /// A blocking rsocket connected to `addr`, from `bind` if given.
    pub fn connect(
        &'static self,
        addr: SocketAddr,
        bind: Option<std::net::IpAddr>,
    ) -> io::Result<DataSocket> {
        let sock = self.socket(addr)?;
        if let Some(ip) = bind {
            self.bind(&sock, SocketAddr::new(ip, 0))?;
        }
        let (sa, len) = std_to_sockaddr(addr);
        // SAFETY: `sa` holds a socket address of `len` bytes; the fd is an rsocket.
        check(unsafe {
            (self.connect)(
                raw(&sock),
                (&sa as *const libc::sockaddr_storage).cast(),
                len,
            )
        })?;
        Ok(sock)
    }
}

fn raw(sock: &DataSocket) -> libc::c_int {
    std::os::fd::AsRawFd::as_raw_fd(sock)
}
