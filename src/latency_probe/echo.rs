//! The server's end of a probe session: one UDP socket that echoes the client's probes
//! with the server's receive and send times, until the time asked for is over or the
//! control connection closes.

use super::datagram::{wall_ns, Probe, PROBE_LEN};
use crate::transport::udp::cmsg::{
    enable_rx_timestamps, rx_timestamp_ns, ControlBuffer, CONTROL_BYTES,
};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// How often the echo looks at the control connection and the clock when no probe comes.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// One probe session's socket.
pub struct Echo {
    sock: UdpSocket,
    /// The control connection's peer: the only address echoes go to.
    peer: IpAddr,
    token: u64,
}

impl Echo {
    /// A socket on `local` (the control connection's own address), any port, for
    /// probes from `peer` carrying `token`.
    pub fn bind(local: IpAddr, peer: IpAddr, token: u64) -> io::Result<Echo> {
        let sock = UdpSocket::bind(SocketAddr::new(local.to_canonical(), 0))?;
        sock.set_nonblocking(true)?;
        // The kernel's receive time: a probe that waited for this thread (a busy host)
        // is not counted as time on the network.
        enable_rx_timestamps(&sock)?;
        Ok(Echo {
            sock,
            peer: peer.to_canonical(),
            token,
        })
    }

    /// The port the client sends its probes to.
    pub fn port(&self) -> io::Result<u16> {
        Ok(self.sock.local_addr()?.port())
    }

    /// Echoes probes until `until`, or until `control` is readable: the client closed it
    /// (or said something, which it never does in a probe session). Returns how many
    /// probes were echoed.
    pub fn run(&self, until: Instant, control: &impl AsRawFd) -> io::Result<u64> {
        let mut echoed = 0u64;
        let mut buf = [0u8; PROBE_LEN + 1];
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(echoed);
            }
            let mut pfds = [
                libc::pollfd {
                    fd: self.sock.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: control.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let wait_ms = left.min(LOOK_EVERY).as_millis().max(1) as libc::c_int;
            // SAFETY: `pfds` is a valid array of pollfds of the length given.
            let rc = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, wait_ms) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if pfds[1].revents != 0 {
                return Ok(echoed);
            }
            if pfds[0].revents != 0 {
                echoed += self.echo_waiting(&mut buf)?;
            }
        }
    }

    /// Echoes every probe waiting on the socket; drops anything else.
    fn echo_waiting(&self, buf: &mut [u8; PROBE_LEN + 1]) -> io::Result<u64> {
        let mut echoed = 0;
        loop {
            let (len, from, stamped) = match recv_stamped(&self.sock, buf) {
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(echoed),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // An ICMP error from an earlier echo: nothing to answer.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) => return Err(e),
            };
            let received = stamped.unwrap_or_else(wall_ns);
            if from.ip().to_canonical() != self.peer {
                continue;
            }
            let Some(probe) = buf.get(..len).and_then(|b| Probe::decode(b, self.token)) else {
                continue;
            };
            let echo = Probe {
                server_recv_ns: received,
                server_send_ns: wall_ns(),
                ..probe
            };
            // A full socket buffer or an unreachable client loses this echo: the client
            // counts it as lost.
            if self.sock.send_to(&echo.encode(), from).is_ok() {
                echoed += 1;
            }
        }
    }
}

/// One datagram on `sock` into `buf`: its whole length, its sender and the kernel's
/// receive time (ns since the Unix epoch), if the kernel gave one.
fn recv_stamped(sock: &UdpSocket, buf: &mut [u8]) -> io::Result<(usize, SocketAddr, Option<u64>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = ControlBuffer::default();
    // SAFETY: all-zero is a valid sockaddr_storage and msghdr.
    let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut name as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = CONTROL_BYTES;
    // SAFETY: `msg` points at `name`, `iov` (over the exclusively borrowed `buf`) and
    // `control`, all live for the call, with their lengths.
    let rc = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_TRUNC) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel filled `name` with `msg_namelen` bytes of a socket address.
    let from = unsafe { socket2::SockAddr::new(name, msg.msg_namelen) }
        .as_socket()
        .ok_or_else(|| io::Error::other("a datagram from no IP address"))?;
    let used = msg.msg_controllen.min(CONTROL_BYTES);
    Ok((rc as usize, from, rx_timestamp_ns(&control.0[..used])))
}
