//! Thin wrappers over the system calls the STREAM needs and std does not offer:
//! `poll()` and TCP socket options.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

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
    // SAFETY: the pointer and length describe a live c_int on our stack; the fd is
    // borrowed from an open socket.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Re-arms TCP_QUICKACK, which Linux clears after it sends an ACK.
#[inline]
pub(crate) fn tcp_quickack(fd: &impl AsRawFd) -> io::Result<()> {
    set_int_opt(fd, libc::IPPROTO_TCP, libc::TCP_QUICKACK, 1)
}

/// Reads `TCP_INFO`: (retransmitted segments in total, congestion window in bytes,
/// smoothed RTT in µs, RTT variation in µs).
pub(crate) fn tcp_info(fd: &impl AsRawFd) -> io::Result<(u64, u64, u32, u32)> {
    // SAFETY: tcp_info is plain old data; zeroed is a valid value for it.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the pointer and length describe `info`, exclusively borrowed for the
    // call; the kernel writes at most `len` bytes and updates `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((
        u64::from(info.tcpi_total_retrans),
        u64::from(info.tcpi_snd_cwnd) * u64::from(info.tcpi_snd_mss),
        info.tcpi_rtt,
        info.tcpi_rttvar,
    ))
}
