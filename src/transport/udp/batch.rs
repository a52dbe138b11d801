//! Batched UDP I/O: many datagrams per system call.
//!
//! Sending: datagrams are laid out `stride` (= `-l`) bytes apart in one buffer
//! allocated once, then handed to the kernel with one `sendmmsg()`. With UDP GSO
//! (`UDP_SEGMENT`), a run of consecutive datagrams goes out as one message that the
//! kernel cuts into datagrams of `stride` bytes (every one but the last of a message is
//! full-sized, so a short datagram ends its message). A datagram counts as sent only
//! once the kernel took it: a partial `sendmmsg()` moves on from the first message it
//! did not take.
//!
//! Receiving: one `recvmmsg()` fills up to `slots` buffers; with UDP GRO
//! (`UDP_GRO`), one buffer may hold several datagrams that arrived back to back, which
//! the kernel says with their segment size; [`RecvBatch::next_datagram`] hands them out one by
//! one, so every datagram is accounted for on its own.
//!
//! The bookkeeping (how datagrams are grouped into messages, how a partial send
//! advances, how a GRO buffer is cut) is pure and unit-tested; the system calls are
//! passed in as closures.

use super::cmsg::{gro_segment_size, rx_timestamp_ns, ControlBuffer};
use crate::stream::buffer::DataBuffer;
use std::io;
use std::ops::Range;

/// Most segments the kernel accepts in one GSO message (`UDP_MAX_SEGMENTS`).
pub const MAX_GSO_SEGMENTS: usize = 64;
/// Most payload bytes of one GSO message: one IPv4 datagram's worth.
pub const MAX_GSO_BYTES: usize = 65_507;
/// Bytes of a receive buffer with GRO: the largest datagram the kernel coalesces.
pub const GRO_SLOT_BYTES: usize = 65_535;
/// Receive buffers of a batch of `batch` datagrams with GRO: a buffer holds up to 64
/// datagrams, and a few keep the batch in cache.
pub fn gro_slots(batch: usize) -> usize {
    batch.div_ceil(32).clamp(1, 4)
}

/// Most messages passed to one `sendmmsg()`/`recvmmsg()` (the kernel's `UIO_MAXIOV`).
pub const MAX_MESSAGES: usize = 1024;

/// A run of queued datagrams sent as one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    /// Index of its first datagram in the batch.
    pub first: usize,
    pub count: usize,
    pub bytes: usize,
}

/// Groups datagrams of lengths `lens` (stored `stride` bytes apart) into messages:
/// one each without GSO; with GSO, runs of at most [`MAX_GSO_SEGMENTS`] datagrams and
/// [`MAX_GSO_BYTES`] bytes in which every datagram but the last is `stride` long.
pub fn plan_messages(lens: &[usize], stride: usize, gso: bool, out: &mut Vec<Message>) {
    out.clear();
    for (i, &len) in lens.iter().enumerate() {
        if let Some(m) = out.last_mut() {
            let last_full = lens[m.first + m.count - 1] == stride;
            if gso && last_full && m.count < MAX_GSO_SEGMENTS && m.bytes + len <= MAX_GSO_BYTES {
                m.count += 1;
                m.bytes += len;
                continue;
            }
        }
        out.push(Message {
            first: i,
            count: 1,
            bytes: len,
        });
    }
}

/// What one `sendmmsg()` did with the messages it was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// The kernel took the first `n` messages (n >= 1).
    Messages(usize),
    /// The first message was dropped by a local firewall (EPERM): gone as if lost on
    /// the wire, and accounted for as such by the receiver.
    FirstDropped,
}

/// `UDP_SEGMENT` control message: the segment size of a GSO send.
#[repr(C)]
#[derive(Clone, Copy)]
struct SegmentCmsg {
    hdr: libc::cmsghdr,
    size: u16,
    /// Pads to `CMSG_SPACE(sizeof(u16))`.
    _pad: [u8; 6],
}

/// `mmsghdr`s and `iovec`s, rebuilt before every call to point at the batch's
/// buffers; allocated once.
struct Scratch {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
}

// SAFETY: the raw pointers inside `hdrs` and `iovs` point into buffers owned by the same
// batch and are rewritten before every system call that reads them; nothing
// dereferences them between calls, so moving the batch to another thread is sound.
unsafe impl Send for Scratch {}

impl Scratch {
    fn with_capacity(n: usize) -> Scratch {
        Scratch {
            hdrs: Vec::with_capacity(n),
            iovs: Vec::with_capacity(n),
        }
    }
}

/// A zeroed `mmsghdr` (all pointers null, all lengths zero).
fn empty_mmsghdr() -> libc::mmsghdr {
    // SAFETY: mmsghdr is plain old data (pointers and integers); all-zero is valid.
    unsafe { std::mem::zeroed() }
}

/// Datagrams queued for one `sendmmsg()`.
pub struct SendBatch {
    arena: DataBuffer,
    stride: usize,
    capacity: usize,
    gso: bool,
    /// Length of each queued datagram.
    lens: Vec<usize>,
    plan: Vec<Message>,
    cmsgs: Vec<SegmentCmsg>,
    scratch: Scratch,
}

impl SendBatch {
    /// A batch of up to `capacity` datagrams of at most `stride` bytes.
    pub fn new(capacity: usize, stride: usize, gso: bool) -> io::Result<SendBatch> {
        let capacity = capacity.max(1);
        let stride = stride.max(1);
        // SAFETY: cmsghdr is plain old data; all-zero is valid.
        let hdr: libc::cmsghdr = unsafe { std::mem::zeroed() };
        Ok(SendBatch {
            arena: DataBuffer::zeroed(capacity * stride)?,
            stride,
            capacity,
            gso,
            lens: Vec::with_capacity(capacity),
            plan: Vec::with_capacity(capacity),
            cmsgs: vec![
                SegmentCmsg {
                    hdr,
                    size: 0,
                    _pad: [0; 6]
                };
                if gso { capacity } else { 0 }
            ],
            scratch: Scratch::with_capacity(capacity),
        })
    }

    pub fn len(&self) -> usize {
        self.lens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }

    pub fn is_full(&self) -> bool {
        self.lens.len() == self.capacity
    }

    /// The buffer of the next datagram, `len` bytes (at most `stride`); queue it with
    /// [`SendBatch::push`] once written. Call only when not full.
    pub fn next_slot(&mut self, len: usize) -> &mut [u8] {
        let at = self.lens.len() * self.stride;
        &mut self.arena[at..at + len.min(self.stride)]
    }

    /// Queues the datagram just written into [`SendBatch::next_slot`].
    pub fn push(&mut self, len: usize) {
        debug_assert!(!self.is_full());
        self.lens.push(len.min(self.stride));
    }

    /// Sends every queued datagram: `send` performs one `sendmmsg()` on the messages
    /// still to go (waiting for room itself) and says what the kernel took; `sent` is
    /// told each datagram's length once the kernel took it, in order. On error the
    /// datagrams not yet sent stay queued.
    pub fn flush(
        &mut self,
        mut send: impl FnMut(&mut [libc::mmsghdr]) -> io::Result<Sent>,
        mut sent: impl FnMut(usize),
    ) -> io::Result<()> {
        if self.lens.is_empty() {
            return Ok(());
        }
        plan_messages(&self.lens, self.stride, self.gso, &mut self.plan);
        self.build();
        let mut next = 0;
        let result = 'calls: loop {
            if next == self.plan.len() {
                break Ok(());
            }
            let end = (next + MAX_MESSAGES).min(self.plan.len());
            let took = match send(&mut self.scratch.hdrs[next..end]) {
                Ok(Sent::Messages(0)) => {
                    break Err(io::Error::other("sendmmsg() sent no message"));
                }
                Ok(Sent::Messages(n)) => {
                    let n = n.min(end - next);
                    for (h, m) in self.scratch.hdrs[next..next + n]
                        .iter()
                        .zip(&self.plan[next..])
                    {
                        if h.msg_len as usize != m.bytes {
                            break 'calls Err(io::Error::other(format!(
                                "UDP sent {} of a {}-byte message",
                                h.msg_len, m.bytes
                            )));
                        }
                    }
                    n
                }
                Ok(Sent::FirstDropped) => 1,
                Err(e) => break Err(e),
            };
            for m in &self.plan[next..next + took] {
                for d in m.first..m.first + m.count {
                    sent(self.lens[d]);
                }
            }
            next += took;
        };
        // Keep what was not sent, in order, at the front.
        let done = self.plan.get(next).map_or(self.lens.len(), |m| m.first);
        if done > 0 {
            self.lens.drain(..done);
            self.arena.copy_within(
                done * self.stride..(done + self.lens.len()) * self.stride,
                0,
            );
        }
        result
    }

    /// Points one `mmsghdr` (and `iovec`, and with GSO a `UDP_SEGMENT` control message)
    /// at each planned message.
    fn build(&mut self) {
        let base = self.arena.as_mut_ptr();
        self.scratch.iovs.clear();
        for m in &self.plan {
            self.scratch.iovs.push(libc::iovec {
                // SAFETY: `first * stride + bytes` is within the arena (planned from
                // queued datagrams, each within its own slot).
                iov_base: unsafe { base.add(m.first * self.stride) }.cast(),
                iov_len: m.bytes,
            });
        }
        self.scratch.hdrs.clear();
        for (k, m) in self.plan.iter().enumerate() {
            let mut h = empty_mmsghdr();
            h.msg_hdr.msg_iov = &mut self.scratch.iovs[k];
            h.msg_hdr.msg_iovlen = 1;
            if self.gso && m.count > 1 {
                let c = &mut self.cmsgs[k];
                c.hdr.cmsg_len = std::mem::size_of::<libc::cmsghdr>() + 2;
                c.hdr.cmsg_level = libc::SOL_UDP;
                c.hdr.cmsg_type = libc::UDP_SEGMENT;
                c.size = u16::try_from(self.stride).unwrap_or(u16::MAX);
                h.msg_hdr.msg_control = (c as *mut SegmentCmsg).cast();
                h.msg_hdr.msg_controllen = std::mem::size_of::<SegmentCmsg>();
            }
            self.scratch.hdrs.push(h);
        }
    }
}

/// The bytes of segment `offset..` of a received buffer of `len` bytes whose datagrams
/// are `segment` bytes long (0: the buffer is one datagram). `None` past the end.
pub fn segment_at(len: usize, segment: usize, offset: usize) -> Option<Range<usize>> {
    if offset >= len {
        return None;
    }
    let end = if segment == 0 {
        len
    } else {
        (offset + segment).min(len)
    };
    Some(offset..end)
}

/// Datagrams read by one `recvmmsg()`, handed out one at a time.
pub struct RecvBatch {
    arena: DataBuffer,
    slot_bytes: usize,
    slots: usize,
    gro: bool,
    /// `--rx-timestamps`: each slot's kernel receive time is read.
    stamps: bool,
    /// Per filled slot: bytes read, GRO segment size (0: one datagram) and kernel
    /// receive time.
    filled: Vec<(usize, usize, Option<u64>)>,
    /// Next datagram: slot index and offset in it.
    at: usize,
    offset: usize,
    cmsgs: Vec<ControlBuffer>,
    scratch: Scratch,
    /// Buffers read that held more than one datagram (GRO).
    coalesced: u64,
}

impl RecvBatch {
    /// `slots` buffers of `slot_bytes` each (with `gro`, [`GRO_SLOT_BYTES`] each); with
    /// `stamps`, each datagram's kernel receive time is read too.
    pub fn new(slots: usize, slot_bytes: usize, gro: bool, stamps: bool) -> io::Result<RecvBatch> {
        let slots = slots.clamp(1, MAX_MESSAGES);
        let slot_bytes = if gro {
            GRO_SLOT_BYTES
        } else {
            slot_bytes.max(1)
        };
        Ok(RecvBatch {
            arena: DataBuffer::zeroed(slots * slot_bytes)?,
            slot_bytes,
            slots,
            gro,
            stamps,
            filled: Vec::with_capacity(slots),
            at: 0,
            offset: 0,
            cmsgs: vec![ControlBuffer::default(); if gro || stamps { slots } else { 0 }],
            scratch: Scratch::with_capacity(slots),
            coalesced: 0,
        })
    }

    /// The next datagram read and not yet handed out (an empty one too: it is
    /// accounted as foreign), with its kernel receive time in ns since the Unix epoch
    /// (with `stamps`; GRO's datagrams share their buffer's).
    pub fn next_datagram(&mut self) -> Option<(&[u8], Option<u64>)> {
        while let Some(&(len, segment, stamp)) = self.filled.get(self.at) {
            let base = self.at * self.slot_bytes;
            if len == 0 {
                self.at += 1;
                return Some((&self.arena[base..base], stamp));
            }
            if let Some(r) = segment_at(len, segment, self.offset) {
                self.offset = r.end;
                return Some((&self.arena[base + r.start..base + r.end], stamp));
            }
            self.at += 1;
            self.offset = 0;
        }
        None
    }

    /// Buffers read so far that held more than one datagram (GRO).
    pub fn coalesced(&self) -> u64 {
        self.coalesced
    }

    /// Whether every datagram read was handed out.
    pub fn is_empty(&self) -> bool {
        match self.filled.get(self.at) {
            None => true,
            Some(&(len, _, _)) => len > 0 && self.offset >= len && self.at + 1 == self.filled.len(),
        }
    }

    /// Reads a batch once the previous one was handed out: `recv` performs one
    /// `recvmmsg()` and returns how many messages it filled (`None`: nothing to read).
    /// Returns whether anything was read.
    pub fn fill(
        &mut self,
        recv: impl FnOnce(&mut [libc::mmsghdr]) -> io::Result<Option<usize>>,
    ) -> io::Result<bool> {
        self.filled.clear();
        self.at = 0;
        self.offset = 0;
        self.build();
        let Some(n) = recv(&mut self.scratch.hdrs)? else {
            return Ok(false);
        };
        for k in 0..n.min(self.slots) {
            let h = &self.scratch.hdrs[k];
            let len = (h.msg_len as usize).min(self.slot_bytes);
            let control = match self.cmsgs.get(k) {
                Some(c) => &c.0[..h.msg_hdr.msg_controllen.min(c.0.len())],
                None => &[],
            };
            let segment = if self.gro {
                gro_segment_size(control).unwrap_or(0)
            } else {
                0
            };
            let stamp = if self.stamps {
                rx_timestamp_ns(control)
            } else {
                None
            };
            if segment > 0 && segment < len {
                self.coalesced += 1;
            }
            self.filled.push((len, segment, stamp));
        }
        Ok(n > 0)
    }

    fn build(&mut self) {
        let base = self.arena.as_mut_ptr();
        self.scratch.iovs.clear();
        for k in 0..self.slots {
            self.scratch.iovs.push(libc::iovec {
                // SAFETY: slot `k` lies within the arena (`slots * slot_bytes` bytes).
                iov_base: unsafe { base.add(k * self.slot_bytes) }.cast(),
                iov_len: self.slot_bytes,
            });
        }
        self.scratch.hdrs.clear();
        for k in 0..self.slots {
            let mut h = empty_mmsghdr();
            h.msg_hdr.msg_iov = &mut self.scratch.iovs[k];
            h.msg_hdr.msg_iovlen = 1;
            if let Some(c) = self.cmsgs.get_mut(k) {
                h.msg_hdr.msg_control = c.0.as_mut_ptr().cast();
                h.msg_hdr.msg_controllen = c.0.len();
            }
            self.scratch.hdrs.push(h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(lens: &[usize], stride: usize, gso: bool) -> Vec<Message> {
        let mut out = Vec::new();
        plan_messages(lens, stride, gso, &mut out);
        out
    }

    #[test]
    fn without_gso_every_datagram_is_a_message() {
        let p = plan(&[100, 100, 40], 100, false);
        assert_eq!(p.len(), 3);
        assert_eq!(
            p[2],
            Message {
                first: 2,
                count: 1,
                bytes: 40
            }
        );
    }

    #[test]
    fn gso_groups_full_datagrams_and_a_short_one_ends_its_message() {
        let p = plan(&[100, 100, 40, 100, 100], 100, true);
        assert_eq!(
            p,
            vec![
                Message {
                    first: 0,
                    count: 3,
                    bytes: 240
                },
                Message {
                    first: 3,
                    count: 2,
                    bytes: 200
                },
            ]
        );
        // 1472-byte datagrams: 44 fit in one 65507-byte message.
        let p = plan(&[1472; 100], 1472, true);
        assert_eq!(
            p.iter().map(|m| m.count).collect::<Vec<_>>(),
            vec![44, 44, 12]
        );
        assert!(p.iter().all(|m| m.bytes <= MAX_GSO_BYTES));
        // Small datagrams: at most 64 segments per message.
        let p = plan(&[10; 130], 10, true);
        assert_eq!(
            p.iter().map(|m| m.count).collect::<Vec<_>>(),
            vec![64, 64, 2]
        );
    }

    /// Fills a batch with datagrams whose first byte is their index.
    fn filled(n: usize, stride: usize, gso: bool) -> SendBatch {
        let mut b = SendBatch::new(n, stride, gso).unwrap();
        for i in 0..n {
            b.next_slot(stride)[0] = i as u8;
            b.push(stride);
        }
        b
    }

    /// The first byte of each message's buffer, as the kernel would read it.
    fn first_bytes(hdrs: &[libc::mmsghdr]) -> Vec<u8> {
        hdrs.iter()
            .map(|h| {
                // SAFETY: test only; the iovec points at a live arena slot.
                unsafe { *((*h.msg_hdr.msg_iov).iov_base as *const u8) }
            })
            .collect()
    }

    #[test]
    fn partial_sendmmsg_returns_resume_where_the_kernel_stopped() {
        let mut b = filled(10, 8, false);
        // The kernel takes 3, then 1, then drops one (EPERM), then the rest.
        let script = [Sent::Messages(3), Sent::Messages(1), Sent::FirstDropped];
        let mut calls = 0;
        let mut offered = Vec::new();
        let mut sent = Vec::new();
        b.flush(
            |hdrs| {
                offered.push(first_bytes(hdrs)[0]);
                let s = script
                    .get(calls)
                    .copied()
                    .unwrap_or(Sent::Messages(hdrs.len()));
                if let Sent::Messages(n) = s {
                    for h in &mut hdrs[..n] {
                        h.msg_len = 8;
                    }
                }
                calls += 1;
                Ok(s)
            },
            |len| sent.push(len),
        )
        .expect("flush");
        assert_eq!(
            offered,
            vec![0, 3, 4, 5],
            "each call starts at the first unsent"
        );
        assert_eq!(sent.len(), 10, "every datagram accounted once");
        assert!(b.is_empty());
    }

    #[test]
    fn a_failed_sendmmsg_keeps_the_unsent_datagrams_queued_in_order() {
        let mut b = filled(6, 4, false);
        let mut n = 0;
        let err = b
            .flush(
                |hdrs| {
                    if n == 0 {
                        n += 1;
                        for h in &mut hdrs[..2] {
                            h.msg_len = 4;
                        }
                        Ok(Sent::Messages(2))
                    } else {
                        Err(io::Error::from_raw_os_error(libc::EIO))
                    }
                },
                |_| {},
            )
            .expect_err("second call fails");
        assert_eq!(err.raw_os_error(), Some(libc::EIO));
        assert_eq!(b.len(), 4);
        let mut left = Vec::new();
        b.flush(
            |hdrs| {
                left = first_bytes(hdrs);
                for h in hdrs.iter_mut() {
                    h.msg_len = 4;
                }
                Ok(Sent::Messages(hdrs.len()))
            },
            |_| {},
        )
        .expect("retry");
        assert_eq!(left, vec![2, 3, 4, 5]);
    }

    #[test]
    fn gso_messages_carry_their_segment_size() {
        let mut b = filled(5, 100, true);
        b.flush(
            |hdrs| {
                assert_eq!(hdrs.len(), 1, "five full datagrams, one message");
                let h = &hdrs[0].msg_hdr;
                // SAFETY: test only; msg_iov and msg_control point into the batch.
                let (iov_len, c) = unsafe {
                    (
                        (*h.msg_iov).iov_len,
                        &*(h.msg_control as *const SegmentCmsg),
                    )
                };
                assert_eq!(iov_len, 500);
                assert_eq!(
                    (c.hdr.cmsg_level, c.hdr.cmsg_type),
                    (libc::SOL_UDP, libc::UDP_SEGMENT)
                );
                assert_eq!(c.size, 100);
                hdrs[0].msg_len = 500;
                Ok(Sent::Messages(1))
            },
            |_| {},
        )
        .expect("flush");
    }

    #[test]
    fn gro_buffers_are_cut_into_their_datagrams() {
        assert_eq!(segment_at(10, 0, 0), Some(0..10));
        assert_eq!(segment_at(10, 0, 10), None);
        let cuts: Vec<_> = std::iter::successors(segment_at(3 * 1472 + 100, 1472, 0), |r| {
            segment_at(3 * 1472 + 100, 1472, r.end)
        })
        .map(|r| r.len())
        .collect();
        assert_eq!(cuts, vec![1472, 1472, 1472, 100]);
    }

    #[test]
    fn recv_batch_hands_out_every_segment_of_every_slot() {
        let mut b = RecvBatch::new(3, 64, false, false).unwrap();
        b.gro = true; // parse as if GRO were on, with small slots
        b.cmsgs = vec![ControlBuffer::default(); 3];
        b.fill(|hdrs| {
            assert_eq!(hdrs.len(), 3);
            hdrs[0].msg_len = 30; // 3 datagrams of 10
            hdrs[1].msg_len = 7; // one datagram, no GRO message
            for (k, h) in hdrs.iter_mut().enumerate().take(2) {
                h.msg_hdr.msg_controllen = 0;
                if k == 0 {
                    // SAFETY: test only; msg_control points at this slot's buffer.
                    let c = unsafe { &mut *(h.msg_hdr.msg_control as *mut ControlBuffer) };
                    let hl = std::mem::size_of::<libc::cmsghdr>();
                    c.0[..8].copy_from_slice(&(hl + 4).to_ne_bytes());
                    c.0[8..12].copy_from_slice(&libc::SOL_UDP.to_ne_bytes());
                    c.0[12..16].copy_from_slice(&libc::UDP_GRO.to_ne_bytes());
                    c.0[hl..hl + 4].copy_from_slice(&10i32.to_ne_bytes());
                    h.msg_hdr.msg_controllen = hl + 8;
                }
            }
            Ok(Some(2))
        })
        .expect("fill");
        let mut sizes = Vec::new();
        while let Some((d, _)) = b.next_datagram() {
            sizes.push(d.len());
        }
        assert_eq!(sizes, vec![10, 10, 10, 7]);
        assert!(b.is_empty());
    }

    #[test]
    fn control_messages_other_than_gro_are_skipped() {
        let hl = std::mem::size_of::<libc::cmsghdr>();
        let mut buf = vec![0u8; 64];
        // A 4-byte IP_TOS-like message first, then UDP_GRO = 1472.
        buf[..8].copy_from_slice(&(hl + 4).to_ne_bytes());
        buf[8..12].copy_from_slice(&libc::IPPROTO_IP.to_ne_bytes());
        buf[12..16].copy_from_slice(&libc::IP_TOS.to_ne_bytes());
        let next = (hl + 4).div_ceil(8) * 8;
        buf[next..next + 8].copy_from_slice(&(hl + 4).to_ne_bytes());
        buf[next + 8..next + 12].copy_from_slice(&libc::SOL_UDP.to_ne_bytes());
        buf[next + 12..next + 16].copy_from_slice(&libc::UDP_GRO.to_ne_bytes());
        buf[next + hl..next + hl + 4].copy_from_slice(&1472i32.to_ne_bytes());
        assert_eq!(gro_segment_size(&buf), Some(1472));
        assert_eq!(gro_segment_size(&buf[..next]), None);
        assert_eq!(gro_segment_size(&[]), None);
    }
}
