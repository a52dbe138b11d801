//! Thin wrappers over the system calls the STREAM needs and std does not offer:
//! `poll()`, socket buffer sizes and TCP socket options.

use crate::stats::buffer_grant::BufferGrant;
use socket2::SockRef;
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Waits until `fd` is ready for `events` (POLLIN/POLLOUT) or `ms` elapse.
/// Returns whether it became ready (errors and hang-ups count as ready, so that the
/// following read/write reports them).
pub(crate) fn poll_one(fd: RawFd, events: libc::c_short, ms: i32) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    Ok(poll_many(std::slice::from_mut(&mut pfd), ms)? > 0)
}

/// `poll()` over `fds`; returns the number of ready entries. EINTR counts as none ready.
pub(crate) fn poll_many(fds: &mut [libc::pollfd], ms: i32) -> io::Result<usize> {
    // SAFETY: `fds` is a valid, exclusively borrowed slice of pollfd for the duration
    // of the call, and its length is passed alongside.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if rc < 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(err);
    }
    Ok(rc as usize)
}

/// Sets an integer socket option.
pub(crate) fn set_int_opt(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    set_opt(fd, level, name, &value)
}

/// Sets a socket option whose value is `value`, laid out as the kernel reads it (an
/// integer, or a `repr(C)` struct).
fn set_opt<T>(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: the pointer and length describe `value`, borrowed for the call; the fd
    // is borrowed from an open socket.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Caps the rate at which the kernel sends `sock`'s packets (`SO_MAX_PACING_RATE`), in
/// bytes per second. TCP paces to it on its own; UDP only under the fq qdisc. The
/// kernel takes the 64-bit value since Linux 5.x and reads the low half before.
pub(crate) fn set_max_pacing_rate<S: AsFd>(sock: &S, bytes_per_sec: u64) -> io::Result<()> {
    let fd = sock.as_fd();
    set_opt(
        &fd,
        libc::SOL_SOCKET,
        libc::SO_MAX_PACING_RATE,
        &bytes_per_sec,
    )
}

/// Most time's worth of a paced TCP socket's rate it holds unsent (see
/// [`bound_paced_backlog`]).
const PACED_BACKLOG_MS: u64 = 50;

/// Lets a TCP socket paced at `bytes_per_sec` (`--fq-rate`) hold at most about
/// [`PACED_BACKLOG_MS`] of that rate unsent (`TCP_NOTSENT_LOWAT`): a write blocks while
/// more waits. Otherwise the socket takes megabytes far faster than the pace sends
/// them, and at low rates the end of a test waits seconds or minutes while they drain.
pub(crate) fn bound_paced_backlog<S: AsRawFd>(sock: &S, bytes_per_sec: u64) -> io::Result<()> {
    let bytes = bytes_per_sec.saturating_mul(PACED_BACKLOG_MS) / 1000;
    let bytes = libc::c_int::try_from(bytes.max(1)).unwrap_or(libc::c_int::MAX);
    set_int_opt(sock, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, bytes)
}

/// Sends `sock`'s packets through the network interface `name` only
/// (`SO_BINDTODEVICE`, `--bind-dev`), whatever the routes say.
pub(crate) fn bind_device<S: AsFd>(sock: &S, name: &str) -> io::Result<()> {
    SockRef::from(sock)
        .bind_device(Some(name.as_bytes()))
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot send through network interface {name} (--bind-dev): {e}"),
            )
        })
}

/// The kernel's `struct in6_flowlabel_req` (linux/in6.h), which libc does not define.
#[repr(C)]
struct FlowLabelRequest {
    dst: [u8; 16],
    /// Network order.
    label: u32,
    action: u8,
    share: u8,
    flags: u16,
    expires: u16,
    linger: u16,
    pad: u32,
}

/// Has `sock` send IPv6 packets to `dst` with the flow label `label` (its low 20 bits),
/// as iperf3's `-L` does: the label is taken (created, shareable) and the socket sends
/// the one its peer's address names (`IPV6_FLOWINFO_SEND`).
pub(crate) fn take_flow_label<S: AsFd>(
    sock: &S,
    dst: std::net::Ipv6Addr,
    label: u32,
) -> io::Result<()> {
    const IPV6_FL_A_GET: u8 = 0;
    const IPV6_FL_S_ANY: u8 = 255;
    const IPV6_FL_F_CREATE: u16 = 1;
    let request = FlowLabelRequest {
        dst: dst.octets(),
        label: (label & 0xFFFFF).to_be(),
        action: IPV6_FL_A_GET,
        share: IPV6_FL_S_ANY,
        flags: IPV6_FL_F_CREATE,
        expires: 0,
        linger: 0,
        pad: 0,
    };
    let fd = sock.as_fd();
    set_opt(&fd, libc::IPPROTO_IPV6, libc::IPV6_FLOWLABEL_MGR, &request).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot take IPv6 flow label {label} (-L): {e}"),
        )
    })?;
    set_int_opt(&fd, libc::IPPROTO_IPV6, libc::IPV6_FLOWINFO_SEND, 1)
}

/// Which socket buffer to size.
#[derive(Clone, Copy)]
pub(crate) enum Direction {
    Receive,
    Send,
}

impl Direction {
    fn option_name(self) -> &'static str {
        match self {
            Direction::Receive => "SO_RCVBUF",
            Direction::Send => "SO_SNDBUF",
        }
    }

    fn sysctl(self) -> &'static str {
        match self {
            Direction::Receive => "net.core.rmem_max",
            Direction::Send => "net.core.wmem_max",
        }
    }
}

/// Whether this process runs its local user's own tests (`fperf -c`), whose windows
/// may go past the host's maximum; a server's, a mesh server's and an exporter's tests
/// are a peer's, and their windows never do.
static LOCAL_USERS_OWN: AtomicBool = AtomicBool::new(false);

/// This process runs its local user's own tests: see [`set_window`].
pub fn allow_forced_buffers() {
    LOCAL_USERS_OWN.store(true, Ordering::Relaxed);
}

/// Asks for `size` bytes of socket buffer. With `force`, first with the `*FORCE`
/// option, which lets root exceed `net.core.{r,w}mem_max`; else, or if that fails,
/// with the plain one, which the kernel caps there. Returns what was asked and what
/// the kernel granted (so a cap is reported).
pub(crate) fn size_buffer<S: AsFd + AsRawFd>(
    sock: &S,
    dir: Direction,
    size: usize,
    force: bool,
) -> io::Result<BufferGrant> {
    let (forced, plain) = match dir {
        Direction::Receive => (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        Direction::Send => (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    };
    let value = libc::c_int::try_from(size).unwrap_or(libc::c_int::MAX);
    if !force || set_int_opt(sock, libc::SOL_SOCKET, forced, value).is_err() {
        set_int_opt(sock, libc::SOL_SOCKET, plain, value)?;
    }
    let s = SockRef::from(sock);
    let reported = match dir {
        Direction::Receive => s.recv_buffer_size()?,
        Direction::Send => s.send_buffer_size()?,
    };
    // Linux doubles the value set (for its own bookkeeping) and reports the double.
    Ok(BufferGrant {
        requested: size as u64,
        granted: (reported / 2) as u64,
    })
}

/// `--window`: both socket buffers of a data socket at `size` bytes, past the host's
/// maximum only for the local user's own tests ([`allow_forced_buffers`]); returns the
/// receive and send grants. Less than asked is an error, as in iperf3: figures measured
/// with a smaller window would answer another question than the one asked.
pub(crate) fn set_window<S: AsFd + AsRawFd>(
    sock: &S,
    size: usize,
) -> io::Result<(BufferGrant, BufferGrant)> {
    let own = LOCAL_USERS_OWN.load(Ordering::Relaxed);
    let mut grants = [BufferGrant::default(); 2];
    for (grant, dir) in grants.iter_mut().zip([Direction::Receive, Direction::Send]) {
        *grant = size_buffer(sock, dir, size, own)?;
        if grant.capped() {
            let how = match own {
                true => format!("raise {} or run as root", dir.sysctl()),
                // A peer's test never goes past the host's maximum.
                false => format!("the most {} allows on the server's host", dir.sysctl()),
            };
            return Err(io::Error::other(format!(
                "the kernel granted {} of {}B, not the {}B --window asked for ({how})",
                dir.option_name(),
                grant.granted,
                grant.requested,
            )));
        }
    }
    Ok((grants[0], grants[1]))
}

/// Marks the packets of `sock` with the TOS byte `tos`: `IP_TOS` on an IPv4 socket,
/// `IPV6_TCLASS` on an IPv6 one (and `IP_TOS` too, for IPv4 peers it reaches mapped).
pub(crate) fn set_tos<S: AsFd>(sock: &S, tos: u8) -> io::Result<()> {
    let s = SockRef::from(sock);
    if s.domain()? == socket2::Domain::IPV6 {
        s.set_tclass_v6(u32::from(tos))?;
        // Fails on a socket that is IPv6 only; those reach no IPv4 peer.
        let _ = s.set_tos(u32::from(tos));
        Ok(())
    } else {
        s.set_tos(u32::from(tos))
    }
}

/// Forbids fragmenting the datagrams of the connected UDP socket `sock`
/// (`--dont-fragment`): IPv4 datagrams leave with DF set and IPv6 ones whole, so a send
/// larger than the path's MTU fails instead of being cut up on the way. Returns the
/// largest UDP payload the path's MTU takes as the kernel knows it now.
pub(crate) fn forbid_fragments<S: AsFd>(sock: &S) -> io::Result<usize> {
    let s = SockRef::from(sock);
    let v6_socket = s.domain()? == socket2::Domain::IPV6;
    // An IPv6 socket reaches an IPv4 peer (mapped) by IPv4's rules and headers.
    let v4_peer = (s.peer_addr()?.as_socket()).is_some_and(|a| a.ip().to_canonical().is_ipv4());
    let fd = &sock.as_fd();
    if v6_socket {
        set_int_opt(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        )?;
    }
    if v4_peer {
        set_int_opt(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )?;
    }
    let mtu = match v6_socket {
        true => get_int_opt(fd, libc::IPPROTO_IPV6, libc::IPV6_MTU)?,
        false => get_int_opt(fd, libc::IPPROTO_IP, libc::IP_MTU)?,
    };
    let headers = if v4_peer { 20 + 8 } else { 40 + 8 };
    Ok(usize::try_from(mtu).unwrap_or(0).saturating_sub(headers))
}

/// Reads an integer socket option.
fn get_int_opt(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the pointer and length describe `value`, exclusively borrowed for the
    // call; the kernel writes at most `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value)
}

/// Makes the kernel fail a TCP connection whose sent data stays unacknowledged for
/// `timeout` (`TCP_USER_TIMEOUT`): a peer that vanished (killed host, pulled cable)
/// then turns a blocked send into an error instead of hours of retransmissions.
pub(crate) fn set_user_timeout(sock: &std::net::TcpStream, timeout: Duration) -> io::Result<()> {
    socket2::SockRef::from(sock).set_tcp_user_timeout(Some(timeout))
}

/// Re-arms TCP_QUICKACK, which Linux clears after it sends an ACK.
#[inline]
pub(crate) fn tcp_quickack(fd: &impl AsRawFd) -> io::Result<()> {
    set_int_opt(fd, libc::IPPROTO_TCP, libc::TCP_QUICKACK, 1)
}
