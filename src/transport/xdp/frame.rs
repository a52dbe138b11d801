//! Ethernet frames of one UDP flow, as AF_XDP sends and receives them: the Ethernet,
//! IPv4 or IPv6 and UDP headers built in front of a payload and checked on arrival,
//! checksums included. Pure functions, no I/O.

use std::net::{IpAddr, SocketAddr};
use std::ops::Range;

/// Bytes of an Ethernet header (no VLAN tag).
pub const ETH_LEN: usize = 14;
/// Bytes of an IPv4 header without options.
pub const IPV4_LEN: usize = 20;
/// Bytes of an IPv6 header without extension headers.
pub const IPV6_LEN: usize = 40;
/// Bytes of a UDP header.
pub const UDP_LEN: usize = 8;
const ETHERTYPE_IPV4: [u8; 2] = [0x08, 0x00];
const ETHERTYPE_IPV6: [u8; 2] = [0x86, 0xdd];
const PROTO_UDP: u8 = 17;
/// Hop limit (IPv4 TTL) of the datagrams sent: Linux's default.
const HOP_LIMIT: u8 = 64;

/// A MAC address.
pub type Mac = [u8; 6];

/// Both ends of one UDP flow, as seen from this end: what a frame sent carries and what
/// a frame received must carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flow {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub local_mac: Mac,
    /// The next hop's MAC: the peer's on the same link, else the gateway's.
    pub next_hop_mac: Mac,
}

/// Why a frame received was not a datagram of the flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Not IPv4 or IPv6 carrying UDP of the flow's addresses and ports (the XDP
    /// program lets only those through, so this is a stray frame).
    NotTheFlow,
    /// Shorter than its headers say, or a header that does not add up.
    Malformed,
    /// The IPv4 header's or the UDP checksum is wrong.
    BadChecksum,
}

impl Flow {
    /// Whether the flow is over IPv6.
    pub fn ipv6(&self) -> bool {
        self.remote.ip().to_canonical().is_ipv6()
    }

    /// Bytes of headers in front of each payload.
    pub fn headers_len(&self) -> usize {
        ETH_LEN + if self.ipv6() { IPV6_LEN } else { IPV4_LEN } + UDP_LEN
    }

    /// Writes the headers of a datagram of `payload_len` bytes into `frame`, whose
    /// payload already sits at [`Flow::headers_len`]; returns the frame's length.
    /// `ident` is the IPv4 identification field. `frame` must hold headers and payload.
    pub fn write_headers(&self, frame: &mut [u8], payload_len: usize, ident: u16) -> usize {
        let hdr = self.headers_len();
        let udp_len = UDP_LEN + payload_len;
        frame[0..6].copy_from_slice(&self.next_hop_mac);
        frame[6..12].copy_from_slice(&self.local_mac);
        let udp_at = hdr - UDP_LEN;
        let (src, dst) = (
            self.local.ip().to_canonical(),
            self.remote.ip().to_canonical(),
        );
        match (src, dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                frame[12..14].copy_from_slice(&ETHERTYPE_IPV4);
                let ip = &mut frame[ETH_LEN..ETH_LEN + IPV4_LEN];
                ip[0] = 0x45;
                ip[1] = 0;
                ip[2..4].copy_from_slice(&((IPV4_LEN + udp_len) as u16).to_be_bytes());
                ip[4..6].copy_from_slice(&ident.to_be_bytes());
                // Don't fragment: each datagram fits one frame.
                ip[6..8].copy_from_slice(&[0x40, 0]);
                ip[8] = HOP_LIMIT;
                ip[9] = PROTO_UDP;
                ip[10..12].copy_from_slice(&[0, 0]);
                ip[12..16].copy_from_slice(&src.octets());
                ip[16..20].copy_from_slice(&dst.octets());
                let sum = fold(sum_bytes(0, ip));
                ip[10..12].copy_from_slice(&(!sum).to_be_bytes());
            }
            _ => {
                let (src, dst) = (v6_octets(src), v6_octets(dst));
                frame[12..14].copy_from_slice(&ETHERTYPE_IPV6);
                let ip = &mut frame[ETH_LEN..ETH_LEN + IPV6_LEN];
                ip[0..4].copy_from_slice(&[0x60, 0, 0, 0]);
                ip[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
                ip[6] = PROTO_UDP;
                ip[7] = HOP_LIMIT;
                ip[8..24].copy_from_slice(&src);
                ip[24..40].copy_from_slice(&dst);
            }
        }
        let udp = &mut frame[udp_at..udp_at + UDP_LEN];
        udp[0..2].copy_from_slice(&self.local.port().to_be_bytes());
        udp[2..4].copy_from_slice(&self.remote.port().to_be_bytes());
        udp[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
        udp[6..8].copy_from_slice(&[0, 0]);
        let sum = udp_checksum(&frame[ETH_LEN..hdr + payload_len], self.ipv6());
        // A computed 0 goes as all ones: 0 means "no checksum" over IPv4.
        let sum = if sum == 0 { 0xffff } else { sum };
        frame[udp_at + 6..udp_at + 8].copy_from_slice(&sum.to_be_bytes());
        hdr + payload_len
    }

    /// The payload of `frame` if it is a datagram from the flow's remote end to its
    /// local end with correct checksums.
    pub fn payload(&self, frame: &[u8]) -> Result<Range<usize>, Refused> {
        let ipv6 = self.ipv6();
        let hdr = self.headers_len();
        if frame.len() < hdr {
            return Err(Refused::NotTheFlow);
        }
        let (ethertype, src, dst): (_, Vec<u8>, Vec<u8>) = match self.remote.ip().to_canonical() {
            IpAddr::V4(remote) => (
                ETHERTYPE_IPV4,
                remote.octets().into(),
                v4_octets(self.local),
            ),
            IpAddr::V6(remote) => (
                ETHERTYPE_IPV6,
                remote.octets().into(),
                v6_octets(self.local.ip()).into(),
            ),
        };
        if frame[12..14] != ethertype {
            return Err(Refused::NotTheFlow);
        }
        let ip = &frame[ETH_LEN..];
        let udp_at = hdr - UDP_LEN;
        let ip_total = if ipv6 {
            if ip[0] >> 4 != 6 || ip[6] != PROTO_UDP || ip[8..24] != src || ip[24..40] != dst {
                return Err(Refused::NotTheFlow);
            }
            IPV6_LEN + usize::from(u16::from_be_bytes([ip[4], ip[5]]))
        } else {
            let fragment = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff;
            if ip[0] != 0x45 || ip[9] != PROTO_UDP || fragment != 0 {
                return Err(Refused::NotTheFlow);
            }
            if ip[12..16] != src || ip[16..20] != dst {
                return Err(Refused::NotTheFlow);
            }
            if fold(sum_bytes(0, &ip[..IPV4_LEN])) != 0xffff {
                return Err(Refused::BadChecksum);
            }
            usize::from(u16::from_be_bytes([ip[2], ip[3]]))
        };
        let udp = &frame[udp_at..];
        let (sport, dport) = (
            u16::from_be_bytes([udp[0], udp[1]]),
            u16::from_be_bytes([udp[2], udp[3]]),
        );
        if sport != self.remote.port() || dport != self.local.port() {
            return Err(Refused::NotTheFlow);
        }
        let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
        let ip_len = if ipv6 { IPV6_LEN } else { IPV4_LEN };
        // Ethernet pads short frames: the IP and UDP lengths say where the datagram ends.
        if udp_len < UDP_LEN || ip_total != ip_len + udp_len || ETH_LEN + ip_total > frame.len() {
            return Err(Refused::Malformed);
        }
        let end = udp_at + udp_len;
        let stated = u16::from_be_bytes([udp[6], udp[7]]);
        // IPv4 may leave the UDP checksum out (0); IPv6 may not.
        if (stated != 0 || ipv6) && udp_checksum(&frame[ETH_LEN..end], ipv6) != 0 {
            return Err(Refused::BadChecksum);
        }
        Ok(hdr..end)
    }
}

fn v4_octets(addr: SocketAddr) -> Vec<u8> {
    match addr.ip().to_canonical() {
        IpAddr::V4(ip) => ip.octets().into(),
        IpAddr::V6(ip) => ip.octets().into(),
    }
}

fn v6_octets(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(ip) => ip.to_ipv6_mapped().octets(),
        IpAddr::V6(ip) => ip.octets(),
    }
}

/// Adds `bytes` as big-endian 16-bit words to `sum` (ones' complement, unfolded).
fn sum_bytes(mut sum: u64, bytes: &[u8]) -> u64 {
    let mut words = bytes.chunks_exact(2);
    for w in &mut words {
        sum += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        sum += u64::from(*last) << 8;
    }
    sum
}

/// Folds a ones'-complement sum to 16 bits.
fn fold(mut sum: u64) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The UDP checksum of the IP packet `packet` (IP header, UDP header and payload,
/// exactly): the complement of the sum over the pseudo-header and the datagram. Over a
/// datagram whose checksum field is filled in, it is 0 when the checksum is right.
fn udp_checksum(packet: &[u8], ipv6: bool) -> u16 {
    let (ip_len, addrs) = if ipv6 {
        (IPV6_LEN, &packet[8..40])
    } else {
        (IPV4_LEN, &packet[12..20])
    };
    let datagram = &packet[ip_len..];
    let mut sum = sum_bytes(0, addrs);
    sum += u64::from(PROTO_UDP);
    sum += datagram.len() as u64;
    sum = sum_bytes(sum, datagram);
    !fold(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(local: &str, remote: &str) -> Flow {
        Flow {
            local: local.parse().unwrap(),
            remote: remote.parse().unwrap(),
            local_mac: [2, 0, 0, 0, 0, 1],
            next_hop_mac: [2, 0, 0, 0, 0, 2],
        }
    }

    /// The other end's view of `f`.
    fn reversed(f: &Flow) -> Flow {
        Flow {
            local: f.remote,
            remote: f.local,
            local_mac: f.next_hop_mac,
            next_hop_mac: f.local_mac,
        }
    }

    fn build(f: &Flow, payload: &[u8]) -> Vec<u8> {
        let mut frame = vec![0u8; f.headers_len() + payload.len()];
        frame[f.headers_len()..].copy_from_slice(payload);
        let n = f.write_headers(&mut frame, payload.len(), 7);
        assert_eq!(n, frame.len());
        frame
    }

    #[test]
    fn an_ipv4_frame_carries_the_checksums_worked_by_hand() {
        // 10.0.0.1:5000 -> 10.0.0.2:6000, "hi".
        let f = flow("10.0.0.1:5000", "10.0.0.2:6000");
        let frame = build(&f, b"hi");
        assert_eq!(frame.len(), 14 + 20 + 8 + 2);
        assert_eq!(&frame[12..14], &[0x08, 0x00]);
        // IPv4 header checksum: verified by summing to all ones.
        assert_eq!(fold(sum_bytes(0, &frame[14..34])), 0xffff);
        // UDP checksum of the pseudo-header and datagram, worked by hand:
        // 0x0a00+0x0001+0x0a00+0x0002+0x0011+0x000a (pseudo) + 0x1388+0x1770+0x000a
        // (header) + 0x6869 ("hi") = 0xa789, so the checksum is !0xa789 = 0x5876.
        assert_eq!(&frame[40..42], &[0x58, 0x76]);
        assert_eq!(reversed(&f).payload(&frame), Ok(42..44));
    }

    #[test]
    fn frames_round_trip_over_both_ip_versions_and_odd_lengths() {
        for (a, b) in [
            ("192.168.1.10:40000", "192.168.1.20:5201"),
            ("[fd00::1]:40000", "[fd00::2]:5201"),
        ] {
            let f = flow(a, b);
            for len in [0usize, 1, 19, 20, 1471] {
                let payload: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
                let frame = build(&f, &payload);
                let range = reversed(&f).payload(&frame).expect("its own flow");
                assert_eq!(&frame[range], &payload[..]);
                // Ethernet padding after the datagram is not payload.
                let mut padded = frame.clone();
                padded.resize(frame.len().max(60) + 4, 0);
                assert_eq!(reversed(&f).payload(&padded).map(|r| r.len()), Ok(len));
            }
        }
    }

    #[test]
    fn foreign_corrupt_or_cut_frames_are_refused() {
        let f = flow("10.0.0.1:5000", "10.0.0.2:6000");
        let frame = build(&f, b"payload!");
        let them = reversed(&f);
        // Our own frame, as the sender sees it, is not from the peer.
        assert_eq!(f.payload(&frame), Err(Refused::NotTheFlow));
        let other_port = flow("10.0.0.1:5001", "10.0.0.2:6000");
        assert_eq!(
            them.payload(&build(&other_port, b"x")),
            Err(Refused::NotTheFlow)
        );
        let mut flipped = frame.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(them.payload(&flipped), Err(Refused::BadChecksum));
        let mut bad_ip = frame.clone();
        bad_ip[22] ^= 1; // the TTL
        assert_eq!(them.payload(&bad_ip), Err(Refused::BadChecksum));
        assert_eq!(
            them.payload(&frame[..frame.len() - 1]),
            Err(Refused::Malformed)
        );
        assert_eq!(them.payload(&frame[..20]), Err(Refused::NotTheFlow));
        // A checksum of 0 over IPv4 is "none": accepted; over IPv6 refused.
        let mut none = frame.clone();
        none[40..42].copy_from_slice(&[0, 0]);
        assert_eq!(them.payload(&none), Ok(42..50));
        let f6 = flow("[fd00::1]:5000", "[fd00::2]:6000");
        let mut none6 = build(&f6, b"x");
        none6[60..62].copy_from_slice(&[0, 0]);
        assert_eq!(reversed(&f6).payload(&none6), Err(Refused::BadChecksum));
        // A fragment goes to the kernel, which reassembles it.
        let mut fragment = frame;
        fragment[20] = 0x20;
        assert_eq!(them.payload(&fragment), Err(Refused::NotTheFlow));
    }
}
