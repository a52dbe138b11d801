//! The MAC addresses of a flow's frames: the interface's own, and the next hop's from
//! the kernel's neighbour table, found through rtnetlink (the route to the peer for
//! the gateway, if any, then the neighbour entry of the next hop). Where the kernel has
//! no entry yet, a datagram sent through the kernel to the next hop makes it resolve
//! one (ARP or neighbour discovery, the kernel's own), waited for a bounded time.
//!
//! Netlink is spoken directly over a libc socket: two requests and a few attributes,
//! less code than a netlink crate's types, and nothing more to keep up to date.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use super::frame::Mac;

const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
/// Neighbour states in which the entry's address is not usable.
const NUD_UNUSABLE: u16 = 0x01 | 0x20; // INCOMPLETE | FAILED
/// How long to wait for the kernel to resolve the next hop.
pub const RESOLVE_WITHIN: Duration = Duration::from_secs(3);

/// A netlink route socket.
struct Netlink {
    fd: OwnedFd,
    seq: u32,
}

/// Appends attribute `kind` holding `data` to `msg`, aligned to 4 bytes.
fn push_attr(msg: &mut Vec<u8>, kind: u16, data: &[u8]) {
    let len = 4 + data.len();
    msg.extend_from_slice(&(len as u16).to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(data);
    msg.resize(msg.len().next_multiple_of(4), 0);
}

/// The attributes in `bytes`, as (kind, data); stops at the first that does not fit.
pub(crate) fn attrs(mut bytes: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while bytes.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([bytes[0], bytes[1]]));
        let kind = u16::from_ne_bytes([bytes[2], bytes[3]]) & 0x3fff;
        if len < 4 || len > bytes.len() {
            break;
        }
        out.push((kind, &bytes[4..len]));
        bytes = &bytes[len.next_multiple_of(4).min(bytes.len())..];
    }
    out
}

/// The messages in a netlink datagram, as (type, payload); stops at the first that
/// does not fit.
fn messages(mut bytes: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while bytes.len() >= 16 {
        let len = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        let kind = u16::from_ne_bytes([bytes[4], bytes[5]]);
        if len < 16 || len > bytes.len() {
            break;
        }
        out.push((kind, &bytes[16..len]));
        bytes = &bytes[len.next_multiple_of(4).min(bytes.len())..];
    }
    out
}

fn ip_bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(ip) => ip.octets().into(),
        IpAddr::V6(ip) => ip.octets().into(),
    }
}

fn family(ip: IpAddr) -> u8 {
    if ip.is_ipv4() {
        libc::AF_INET as u8
    } else {
        libc::AF_INET6 as u8
    }
}

impl Netlink {
    fn open() -> io::Result<Netlink> {
        // SAFETY: plain socket(2); the descriptor is checked and owned below.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor just returned, owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        socket2::SockRef::from(&fd).set_read_timeout(Some(Duration::from_secs(2)))?;
        Ok(Netlink { fd, seq: 0 })
    }

    /// Sends request `kind` with `flags` and `body`; returns the payloads of the answer's
    /// messages of type `answer`, until the kernel says it is done (one message
    /// without a dump).
    fn request(
        &mut self,
        kind: u16,
        flags: u16,
        body: &[u8],
        answer: u16,
    ) -> io::Result<Vec<Vec<u8>>> {
        self.seq += 1;
        let mut msg = Vec::with_capacity(16 + body.len());
        msg.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
        msg.extend_from_slice(&kind.to_ne_bytes());
        msg.extend_from_slice(&(flags | libc::NLM_F_REQUEST as u16).to_ne_bytes());
        msg.extend_from_slice(&self.seq.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(body);
        // SAFETY: `msg` is live for the call and its length is passed; the kernel is
        // the destination (an unbound netlink socket's default).
        let rc = unsafe { libc::send(self.fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        let dump = flags & (libc::NLM_F_DUMP as u16) != 0;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            // SAFETY: `buf` is live and exclusively borrowed; its length is passed.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            for (t, payload) in messages(&buf[..n as usize]) {
                match t {
                    t if t == libc::NLMSG_DONE as u16 => return Ok(out),
                    t if t == libc::NLMSG_ERROR as u16 => {
                        let code = payload
                            .get(..4)
                            .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                            .unwrap_or(0);
                        if code != 0 {
                            return Err(io::Error::from_raw_os_error(-code));
                        }
                        return Ok(out);
                    }
                    t if t == answer => out.push(payload.to_vec()),
                    _ => {}
                }
            }
            if !dump && !out.is_empty() {
                return Ok(out);
            }
        }
    }

    /// The next hop towards `dst` out of interface `ifindex`: the route's gateway, or
    /// `dst` itself on the link.
    fn next_hop(&mut self, dst: IpAddr, ifindex: u32) -> io::Result<IpAddr> {
        let mut body = vec![0u8; 12];
        body[0] = family(dst);
        body[1] = if dst.is_ipv4() { 32 } else { 128 };
        push_attr(&mut body, RTA_DST, &ip_bytes(dst));
        push_attr(&mut body, RTA_OIF, &ifindex.to_ne_bytes());
        let routes = self.request(libc::RTM_GETROUTE, 0, &body, libc::RTM_NEWROUTE)?;
        let route = routes.first().ok_or_else(|| io::Error::other("no route"))?;
        let gateway = attrs(route.get(12..).unwrap_or(&[]))
            .into_iter()
            .find(|(kind, _)| *kind == RTA_GATEWAY)
            .and_then(|(_, data)| ip_from(data));
        Ok(gateway.unwrap_or(dst))
    }

    /// The usable MAC address the kernel's neighbour table holds for `ip` on
    /// `ifindex`, if any.
    fn neighbour(&mut self, ip: IpAddr, ifindex: u32) -> io::Result<Option<Mac>> {
        let mut body = vec![0u8; 12];
        body[0] = family(ip);
        body[4..8].copy_from_slice(&(ifindex as i32).to_ne_bytes());
        let dump = libc::NLM_F_DUMP as u16;
        let entries = self.request(libc::RTM_GETNEIGH, dump, &body, libc::RTM_NEWNEIGH)?;
        Ok(entries
            .iter()
            .find_map(|entry| neighbour_mac(entry, ip, ifindex)))
    }
}

fn ip_from(data: &[u8]) -> Option<IpAddr> {
    match data.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(data).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(data).ok()?)),
        _ => None,
    }
}

/// The MAC of a neighbour table entry (`struct ndmsg` and its attributes) if it is
/// `ip`'s on `ifindex` and usable.
pub(crate) fn neighbour_mac(entry: &[u8], ip: IpAddr, ifindex: u32) -> Option<Mac> {
    let head = entry.get(..12)?;
    let index = i32::from_ne_bytes([head[4], head[5], head[6], head[7]]);
    let state = u16::from_ne_bytes([head[8], head[9]]);
    if index != ifindex as i32 || state & NUD_UNUSABLE != 0 || state == 0 {
        return None;
    }
    let found = attrs(&entry[12..]);
    let dst = found
        .iter()
        .find(|(k, _)| *k == NDA_DST)
        .and_then(|(_, d)| ip_from(d))?;
    if dst != ip {
        return None;
    }
    let mac = found.iter().find(|(k, _)| *k == NDA_LLADDR)?.1;
    mac.try_into().ok()
}

/// The MAC address of interface `iface`.
pub fn interface_mac(iface: &str) -> io::Result<Mac> {
    let sock = UdpSocket::bind("0.0.0.0:0").or_else(|_| UdpSocket::bind("[::]:0"))?;
    // SAFETY: `ifreq` is plain data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    if iface.len() >= req.ifr_name.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name too long",
        ));
    }
    for (d, s) in req.ifr_name.iter_mut().zip(iface.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: SIOCGIFHWADDR reads the name and writes the address inside `req`.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel filled the hardware address member of the union.
    let data = unsafe { req.ifr_ifru.ifru_hwaddr.sa_data };
    let mut mac = [0u8; 6];
    for (m, d) in mac.iter_mut().zip(data.iter()) {
        *m = *d as u8;
    }
    Ok(mac)
}

/// The MAC address of the next hop from interface `ifindex` (named `iface` in errors)
/// towards `peer`, as the kernel's neighbour table has it; if the table has none, the
/// kernel is made to resolve it, and waited for at most [`RESOLVE_WITHIN`].
pub fn next_hop_mac(iface: &str, ifindex: u32, peer: SocketAddr) -> io::Result<Mac> {
    let peer_ip = peer.ip().to_canonical();
    let fail = |e: io::Error| {
        io::Error::new(
            e.kind(),
            format!("--xdp: the next hop towards {peer_ip} on {iface}: {e}"),
        )
    };
    let mut nl = Netlink::open().map_err(fail)?;
    let hop = nl.next_hop(peer_ip, ifindex).map_err(fail)?;
    let start = Instant::now();
    let mut nudged = false;
    loop {
        if let Some(mac) = nl.neighbour(hop, ifindex).map_err(fail)? {
            return Ok(mac);
        }
        if start.elapsed() >= RESOLVE_WITHIN {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "--xdp: the kernel found no MAC address for the next hop {hop} on {iface} \
                     within {}s",
                    RESOLVE_WITHIN.as_secs()
                ),
            ));
        }
        if !nudged {
            // A datagram to the discard port makes the kernel resolve the address.
            nudged = true;
            let any: SocketAddr = match hop {
                IpAddr::V4(_) => "0.0.0.0:0".parse().map_err(io::Error::other)?,
                IpAddr::V6(_) => "[::]:0".parse().map_err(io::Error::other)?,
            };
            let sock = UdpSocket::bind(any)?;
            crate::stream::sys::bind_device(&sock, iface)?;
            let _ = sock.send_to(&[], SocketAddr::new(hop, 9));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_and_a_neighbour_entry_are_read_as_the_kernel_lays_them_out() {
        let mut entry = vec![0u8; 12];
        entry[0] = libc::AF_INET as u8;
        entry[4..8].copy_from_slice(&7i32.to_ne_bytes());
        entry[8..10].copy_from_slice(&0x02u16.to_ne_bytes()); // REACHABLE
        push_attr(&mut entry, NDA_DST, &[10, 0, 0, 2]);
        push_attr(&mut entry, NDA_LLADDR, &[2, 0, 0, 0, 0, 9]);
        let ip: IpAddr = "10.0.0.2".parse().unwrap();
        assert_eq!(neighbour_mac(&entry, ip, 7), Some([2, 0, 0, 0, 0, 9]));
        assert_eq!(neighbour_mac(&entry, ip, 8), None, "another interface");
        assert_eq!(neighbour_mac(&entry, "10.0.0.3".parse().unwrap(), 7), None);
        entry[8..10].copy_from_slice(&0x01u16.to_ne_bytes()); // INCOMPLETE
        assert_eq!(neighbour_mac(&entry, ip, 7), None);
        // A cut attribute ends the list instead of reading past it.
        assert_eq!(attrs(&[8, 0, 1, 0, 1, 2]), Vec::new());
        assert_eq!(neighbour_mac(&entry[..5], ip, 7), None);
    }

    #[test]
    fn the_route_to_loopback_has_no_gateway() {
        let mut nl = Netlink::open().expect("netlink");
        let lo = "127.0.0.1".parse().unwrap();
        assert_eq!(nl.next_hop(lo, 1).expect("route to 127.0.0.1"), lo);
        assert_eq!(interface_mac("lo").expect("lo's MAC"), [0; 6]);
    }
}
