//! Control messages that come with a received datagram: the kernel's receive time
//! (`--rx-timestamps`, `SO_TIMESTAMPING`) and UDP GRO's segment size. Both are read
//! from a control buffer the kernel filled, so every length in it is checked before
//! it is used.

use std::io;
use std::net::{Ipv4Addr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// `SO_TIMESTAMPING` (and its control message, `SCM_TIMESTAMPING`) with a 64-bit
/// `time_t`, as on every 64-bit Linux this builds for.
const SO_TIMESTAMPING: libc::c_int = 37;

/// Bytes of a control buffer that holds both a receive time (three `timespec`s) and a
/// GRO segment size, each with its header.
pub const CONTROL_BYTES: usize = 128;

/// A control buffer of [`CONTROL_BYTES`], aligned as control messages are.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct ControlBuffer(pub [u8; CONTROL_BYTES]);

impl Default for ControlBuffer {
    fn default() -> Self {
        ControlBuffer([0; CONTROL_BYTES])
    }
}

/// Asks the kernel to stamp every datagram `sock` receives with its software receive
/// time (`CLOCK_REALTIME`, taken as the packet enters the stack), handed to `recvmsg()`
/// as a control message.
pub fn enable_rx_timestamps<S: AsRawFd>(sock: &S) -> io::Result<()> {
    keep_stamping_on();
    set_rx_timestamps(sock)
}

/// The kernel switches receive stamping on for the whole host from a work queue when
/// the first socket asks, and off when the last one closes: datagrams that arrive
/// meanwhile carry no time. So one socket of this process asks for the life of the
/// process, and first waits (at most [`STAMPING_WAIT`]) until a datagram it sends
/// itself over loopback comes back stamped. If that fails, a run's first datagrams may
/// carry no time, and are then no sample.
fn keep_stamping_on() {
    static KEEPER: OnceLock<Option<UdpSocket>> = OnceLock::new();
    KEEPER.get_or_init(|| {
        let sock = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).ok()?;
        sock.connect(sock.local_addr().ok()?).ok()?;
        sock.set_read_timeout(Some(Duration::from_millis(10)))
            .ok()?;
        set_rx_timestamps(&sock).ok()?;
        let mut buf = [0u8; 1];
        let mut control = ControlBuffer::default();
        let until = Instant::now() + STAMPING_WAIT;
        while Instant::now() < until {
            sock.send(b"t").ok()?;
            if let Ok((_, used)) = recv_with_control(sock.as_raw_fd(), &mut buf, &mut control, 0) {
                if rx_timestamp_ns(&control.0[..used]).is_some() {
                    return Some(sock);
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        None
    });
}

/// Longest wait for the kernel to switch receive stamping on.
const STAMPING_WAIT: Duration = Duration::from_secs(1);

fn set_rx_timestamps<S: AsRawFd>(sock: &S) -> io::Result<()> {
    let flags = libc::SOF_TIMESTAMPING_RX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE;
    let value = libc::c_int::try_from(flags).unwrap_or(0);
    // SAFETY: a valid fd, a pointer to a live c_int and its size.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_TIMESTAMPING,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("cannot enable kernel receive timestamps (SO_TIMESTAMPING): {e}"),
        ));
    }
    Ok(())
}

/// The data of the first control message of `level` and `kind` in `control`.
fn find(control: &[u8], level: libc::c_int, kind: libc::c_int) -> Option<&[u8]> {
    let hdr_len = std::mem::size_of::<libc::cmsghdr>();
    let align = std::mem::size_of::<usize>();
    let mut at = 0;
    while at + hdr_len <= control.len() {
        let word = |from: usize, n: usize| control.get(from..from + n);
        let len = usize::from_ne_bytes(word(at, align)?.try_into().ok()?);
        let lvl = i32::from_ne_bytes(word(at + align, 4)?.try_into().ok()?);
        let typ = i32::from_ne_bytes(word(at + align + 4, 4)?.try_into().ok()?);
        if len < hdr_len {
            return None;
        }
        if lvl == level && typ == kind {
            return control.get(at + hdr_len..at + len);
        }
        at = at.checked_add(len.div_ceil(align) * align)?;
    }
    None
}

/// The segment size in a control buffer's `UDP_GRO` message, if any.
pub fn gro_segment_size(control: &[u8]) -> Option<usize> {
    let data = find(control, libc::SOL_UDP, libc::UDP_GRO)?;
    let v = i32::from_ne_bytes(data.get(..4)?.try_into().ok()?);
    usize::try_from(v).ok()
}

/// The kernel's software receive time in a control buffer, in ns since the Unix epoch:
/// the first of `SCM_TIMESTAMPING`'s three `timespec`s (the others are hardware
/// times, not asked for). `None` if there is none, or it is zero.
pub fn rx_timestamp_ns(control: &[u8]) -> Option<u64> {
    let data = find(control, libc::SOL_SOCKET, SO_TIMESTAMPING)?;
    let sec = i64::from_ne_bytes(data.get(..8)?.try_into().ok()?);
    let nsec = i64::from_ne_bytes(data.get(8..16)?.try_into().ok()?);
    let ns = u64::try_from(sec)
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(u64::try_from(nsec).ok()?)?;
    (ns > 0).then_some(ns)
}

/// `recv()` of one datagram on `fd` with its control messages: its whole length (of
/// which `buf` holds what fits: `MSG_TRUNC` is added to `flags`) and the bytes of
/// `control` the kernel filled.
pub fn recv_with_control(
    fd: libc::c_int,
    buf: &mut [u8],
    control: &mut ControlBuffer,
    flags: libc::c_int,
) -> io::Result<(usize, usize)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: all-zero is a valid msghdr (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = CONTROL_BYTES;
    // SAFETY: `msg` points at `iov` (over the exclusively borrowed `buf`) and at
    // `control`, both live for the call, with their lengths.
    let rc = unsafe { libc::recvmsg(fd, &mut msg, flags | libc::MSG_TRUNC) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((rc as usize, msg.msg_controllen.min(CONTROL_BYTES)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A control message of `level`/`kind` holding `data`, padded as the kernel pads.
    fn message(level: i32, kind: i32, data: &[u8]) -> Vec<u8> {
        let hdr = std::mem::size_of::<libc::cmsghdr>();
        let mut m = Vec::new();
        m.extend_from_slice(&(hdr + data.len()).to_ne_bytes());
        m.extend_from_slice(&level.to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(data);
        m.resize(m.len().div_ceil(8) * 8, 0);
        m
    }

    #[test]
    fn a_receive_time_and_a_segment_size_are_found_in_any_order() {
        let mut stamp = Vec::new();
        for v in [1_700_000_000i64, 250, 0, 0, 9, 9] {
            stamp.extend_from_slice(&v.to_ne_bytes());
        }
        let time = message(libc::SOL_SOCKET, SO_TIMESTAMPING, &stamp);
        let gro = message(libc::SOL_UDP, libc::UDP_GRO, &1400i32.to_ne_bytes());
        for control in [[time.clone(), gro.clone()].concat(), [gro, time].concat()] {
            assert_eq!(rx_timestamp_ns(&control), Some(1_700_000_000_000_000_250));
            assert_eq!(gro_segment_size(&control), Some(1400));
        }
    }

    #[test]
    fn short_or_hostile_control_buffers_give_nothing() {
        let time = message(libc::SOL_SOCKET, SO_TIMESTAMPING, &[0u8; 48]);
        assert_eq!(rx_timestamp_ns(&time), None, "a zero time is no time");
        let short = message(libc::SOL_SOCKET, SO_TIMESTAMPING, &[1u8; 12]);
        assert_eq!(rx_timestamp_ns(&short), None);
        let mut huge = message(libc::SOL_UDP, libc::UDP_GRO, &[0u8; 4]);
        huge[..8].copy_from_slice(&usize::MAX.to_ne_bytes());
        assert_eq!(gro_segment_size(&huge), None);
        assert_eq!(gro_segment_size(&huge[..10]), None);
        let mut tiny = huge.clone();
        tiny[..8].copy_from_slice(&3usize.to_ne_bytes());
        assert_eq!(gro_segment_size(&tiny), None);
        let mut negative = Vec::new();
        for v in [-5i64, 0, 0, 0, 0, 0] {
            negative.extend_from_slice(&v.to_ne_bytes());
        }
        let before_1970 = message(libc::SOL_SOCKET, SO_TIMESTAMPING, &negative);
        assert_eq!(rx_timestamp_ns(&before_1970), None);
    }

    #[test]
    fn a_loopback_datagram_carries_its_kernel_receive_time() {
        let a = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let b = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        enable_rx_timestamps(&b).expect("timestamps");
        let before = std::time::SystemTime::now();
        a.send_to(b"ping", b.local_addr().expect("addr"))
            .expect("send");
        let mut buf = [0u8; 2];
        let mut control = ControlBuffer::default();
        let (len, used) =
            recv_with_control(b.as_raw_fd(), &mut buf, &mut control, 0).expect("recv");
        let after = std::time::SystemTime::now();
        assert_eq!(len, 4, "the whole length, though 2 bytes were read");
        let ns = rx_timestamp_ns(&control.0[..used])
            .unwrap_or_else(|| panic!("no receive time in {:?}", &control.0[..used]));
        let epoch = |t: std::time::SystemTime| {
            t.duration_since(std::time::UNIX_EPOCH)
                .expect("after 1970")
                .as_nanos() as u64
        };
        assert!((epoch(before)..=epoch(after)).contains(&ns), "{ns}");
    }
}
