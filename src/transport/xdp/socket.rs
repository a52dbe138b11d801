//! One AF_XDP socket bound to one queue of an interface, with its UMEM (the frames it
//! shares with the kernel) and its four rings, through the `xdpilone` crate: frames to
//! send are taken from a free list and come back through the completion ring; frames
//! received come through the RX ring and go back to the kernel through the fill ring.
//!
//! Zero-copy is asked for first and copy mode taken where the driver has none (veth
//! has none); need_wakeup is always asked for, so the kernel is called only when it
//! says it needs to be. With busy polling the socket prefers it
//! (`SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL`, `SO_BUSY_POLL_BUDGET`).

use std::collections::VecDeque;
use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use xdpilone::xdp::XdpDesc;
use xdpilone::{DeviceQueue, IfInfo, RingRx, RingTx, SocketConfig, Umem, UmemConfig, User};

/// Bytes of each frame: one page, so a datagram's frame never straddles two.
pub const FRAME_SIZE: u32 = 4096;
/// Frames in each ring (and for receiving and for sending each).
const RING: u32 = 2048;
/// Descriptors read from the RX ring at a time.
const RX_BATCH: u32 = 64;
/// Busy polling: how long the kernel may poll the queue per call, in µs, and how many
/// packets it handles per poll.
const BUSY_POLL_US: libc::c_int = 20;
const BUSY_POLL_BUDGET: libc::c_int = 64;
const SO_PREFER_BUSY_POLL: libc::c_int = 69;
const SO_BUSY_POLL_BUDGET: libc::c_int = 70;

/// The UMEM's memory: anonymous, page-aligned, unmapped when dropped.
struct Area {
    ptr: NonNull<u8>,
    len: usize,
}

impl Area {
    fn new(len: usize) -> io::Result<Area> {
        // SAFETY: an anonymous private mapping, no address asked for; checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast()).ok_or_else(|| io::Error::other("mmap gave NULL"))?;
        Ok(Area { ptr, len })
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once, after the UMEM that used it
        // (fields drop in order).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// How the socket ended up bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    pub zero_copy: bool,
    pub need_wakeup: bool,
    pub busy_poll: bool,
}

/// An AF_XDP socket on one queue. The rings drop before the UMEM, and the UMEM before
/// its memory.
pub struct XskSocket {
    rx: RingRx,
    tx: RingTx,
    device: DeviceQueue,
    _user: User,
    _umem: Umem,
    area: Area,
    /// Frames free to send from, by address.
    free_tx: Vec<u64>,
    /// Descriptors read from the RX ring and not yet handed out.
    received: VecDeque<XdpDesc>,
    /// Frames sent since the last wake-up of the TX path.
    unkicked: u32,
    pub bound: Bound,
}

// SAFETY: the socket owns its rings, its UMEM and their memory alone; nothing else
// points into them, so moving the whole to another thread is sound.
unsafe impl Send for XskSocket {}

/// Turns an errno of the AF_XDP calls into a sentence.
fn xdp_error(what: &str, errno: libc::c_int) -> io::Error {
    let e = io::Error::from_raw_os_error(errno);
    let why = match errno {
        libc::EPERM | libc::EACCES => {
            "not permitted: AF_XDP needs root, or CAP_NET_ADMIN and CAP_BPF (and CAP_NET_RAW)"
                .to_string()
        }
        libc::EAFNOSUPPORT => "this kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS)".into(),
        _ => e.to_string(),
    };
    io::Error::new(e.kind(), format!("--xdp: cannot {what}: {why}"))
}

impl XskSocket {
    /// Opens a socket on queue `queue` of interface `iface`: zero-copy if the driver
    /// has it, else copy mode.
    pub fn open(iface: &str, queue: u32, busy_poll: bool) -> io::Result<XskSocket> {
        match XskSocket::open_with(iface, queue, busy_poll, SocketConfig::XDP_BIND_ZEROCOPY) {
            Ok(sock) => Ok(sock),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) | Some(libc::EPROTONOSUPPORT)
                ) =>
            {
                XskSocket::open_with(iface, queue, busy_poll, SocketConfig::XDP_BIND_COPY).map_err(
                    |e| match e.raw_os_error() {
                        Some(n) => xdp_error(
                            &format!("bind an AF_XDP socket to {iface} queue {queue}"),
                            n,
                        ),
                        None => e,
                    },
                )
            }
            Err(e) => match e.raw_os_error() {
                Some(n) => Err(xdp_error(&format!("open an AF_XDP socket on {iface}"), n)),
                None => Err(e),
            },
        }
    }

    /// [`XskSocket::open`] with bind flags `mode` (zero-copy or copy); errors keep
    /// their errno.
    fn open_with(iface: &str, queue: u32, busy_poll: bool, mode: u16) -> io::Result<XskSocket> {
        let errno = |e: xdpilone::Errno| io::Error::from_raw_os_error(e.get_raw());
        let frames = 2 * RING;
        let area = Area::new((frames * FRAME_SIZE) as usize)?;
        let config = UmemConfig {
            fill_size: RING,
            complete_size: RING,
            frame_size: FRAME_SIZE,
            headroom: 0,
            flags: 0,
        };
        let slice = NonNull::slice_from_raw_parts(area.ptr, area.len);
        // SAFETY: the area is page-aligned, `len` bytes long and outlives the UMEM
        // (declared after it in `XskSocket`).
        let umem = unsafe { Umem::new(config, slice) }.map_err(errno)?;
        let mut info = IfInfo::invalid();
        let name = CString::new(iface)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name"))?;
        info.from_name(&name).map_err(|e| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("--xdp: no interface {iface} ({e})"),
            )
        })?;
        info.set_queue(queue);
        let sock = xdpilone::Socket::with_shared(&info, &umem).map_err(errno)?;
        let mut device = umem.fq_cq(&sock).map_err(errno)?;
        let bind_flags = mode | SocketConfig::XDP_BIND_NEED_WAKEUP;
        let user = umem
            .rx_tx(
                &sock,
                &SocketConfig {
                    rx_size: std::num::NonZeroU32::new(RING),
                    tx_size: std::num::NonZeroU32::new(RING),
                    bind_flags,
                },
            )
            .map_err(errno)?;
        let rx = user.map_rx().map_err(errno)?;
        let tx = user.map_tx().map_err(errno)?;
        umem.bind(&user).map_err(errno)?;
        // The first half of the frames receive, the second half send.
        {
            let mut fill = device.fill(RING);
            let n = fill.insert((0..RING).map(|i| u64::from(i * FRAME_SIZE)));
            fill.commit();
            if n != RING {
                return Err(io::Error::other("the fill ring took too few frames"));
            }
        }
        let free_tx = (RING..frames).map(|i| u64::from(i * FRAME_SIZE)).collect();
        let fd = user.as_raw_fd();
        if busy_poll {
            for (opt, value) in [
                (SO_PREFER_BUSY_POLL, 1),
                (libc::SO_BUSY_POLL, BUSY_POLL_US),
                (SO_BUSY_POLL_BUDGET, BUSY_POLL_BUDGET),
            ] {
                crate::stream::sys::set_int_opt(&fd, libc::SOL_SOCKET, opt, value)
                    .map_err(|e| io::Error::new(e.kind(), format!("--xdp: busy polling: {e}")))?;
            }
        }
        Ok(XskSocket {
            rx,
            tx,
            device,
            _user: user,
            _umem: umem,
            area,
            free_tx,
            received: VecDeque::with_capacity(RX_BATCH as usize),
            unkicked: 0,
            bound: Bound {
                zero_copy: mode == SocketConfig::XDP_BIND_ZEROCOPY,
                need_wakeup: true,
                busy_poll,
            },
        })
    }

    /// The socket's descriptor (to put in the XSKMAP and to poll).
    pub fn fd(&self) -> RawFd {
        self.tx.as_raw_fd()
    }

    /// The frame at UMEM address `addr`, `len` bytes, checked to lie in the UMEM.
    fn frame_mut(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        let start = usize::try_from(addr).ok()?;
        if start.checked_add(len)? > self.area.len {
            return None;
        }
        // SAFETY: `start..start + len` lies within the mapping (checked above), and a
        // frame is ours while it is off the kernel's rings, as this one is.
        Some(unsafe { std::slice::from_raw_parts_mut(self.area.ptr.as_ptr().add(start), len) })
    }

    /// A free frame to send from, taking back what the kernel finished sending; `None`
    /// while every frame is in flight.
    pub fn tx_frame(&mut self) -> Option<(u64, &mut [u8])> {
        if self.free_tx.is_empty() {
            self.reclaim();
        }
        let addr = self.free_tx.pop()?;
        let frame = self.frame_mut(addr, FRAME_SIZE as usize)?;
        Some((addr, frame))
    }

    /// Returns to the free list frames the kernel has sent.
    pub fn reclaim(&mut self) {
        let mut done = self.device.complete(RING);
        while let Some(addr) = done.read() {
            self.free_tx.push(addr & !u64::from(FRAME_SIZE - 1));
        }
        done.release();
    }

    /// Puts the frame at `addr`, `len` bytes, on the TX ring; `false` if the ring is full
    /// (the frame stays ours: the caller gives it back with [`XskSocket::unsend`]).
    pub fn transmit(&mut self, addr: u64, len: u32) -> bool {
        let mut tx = self.tx.transmit(1);
        let sent = tx.insert_once(XdpDesc {
            addr,
            len,
            options: 0,
        });
        tx.commit();
        drop(tx);
        if sent {
            self.unkicked += 1;
        }
        sent
    }

    /// Gives back a frame taken with [`XskSocket::tx_frame`] and not sent.
    pub fn unsend(&mut self, addr: u64) {
        self.free_tx.push(addr);
    }

    /// Frames on the TX ring not yet kicked.
    pub fn unkicked(&self) -> u32 {
        self.unkicked
    }

    /// Tells the kernel to send what is on the TX ring, if it needs telling.
    pub fn kick(&mut self) {
        if self.unkicked > 0 && (self.tx.needs_wakeup() || !self.bound.need_wakeup) {
            self.tx.wake();
        }
        self.unkicked = 0;
    }

    /// Tells the kernel to send what is on the TX ring, asked or not.
    pub fn force_kick(&mut self) {
        self.tx.wake();
        self.unkicked = 0;
    }

    /// Frames the kernel has not finished sending.
    pub fn in_flight(&self) -> usize {
        RING as usize - self.free_tx.len()
    }

    /// The next frame received, as its UMEM address and length; `None` if none is
    /// there. Give it back with [`XskSocket::recycle`].
    pub fn receive(&mut self) -> Option<(u64, usize)> {
        if self.received.is_empty() {
            let mut rx = self.rx.receive(RX_BATCH);
            while let Some(desc) = rx.read() {
                self.received.push_back(desc);
            }
            rx.release();
        }
        let desc = self.received.pop_front()?;
        Some((desc.addr, desc.len as usize))
    }

    /// The bytes of a frame [`XskSocket::receive`] returned.
    pub fn received_frame(&mut self, addr: u64, len: usize) -> &[u8] {
        match self.frame_mut(addr, len) {
            Some(frame) => frame,
            None => &[],
        }
    }

    /// Gives the frame at `addr` back to the kernel to receive into.
    pub fn recycle(&mut self, addr: u64) {
        let mut fill = self.device.fill(1);
        fill.insert_once(addr & !u64::from(FRAME_SIZE - 1));
        fill.commit();
    }
}
