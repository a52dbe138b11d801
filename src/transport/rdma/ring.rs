//! Buffer-ring and credit bookkeeping shared by the RDMA STREAMs (libfabric and verbs).
//!
//! Pure data structures, no device and no library: how one endpoint's registered region
//! is laid out in slots ([`RingLayout`]), the peer's receive ring as an RDMA writer sees
//! it ([`RemoteRing`]), and the credits that keep a verbs sender from ever overrunning
//! the receives its peer posted ([`Credits`]), with the immediate data that carries
//! them ([`Imm`]) or the trailer of a message found by polling ([`Trailer`]), what
//! answers each MPRTT request ([`answer_of`]), and what each send slot already holds
//! ([`SendSlots`]). The STREAMs drive these; the unit tests below check them alone.

pub use crate::stream::reply::Reply;
use bytes::Bytes;
use std::ops::{Deref, Range};

/// Bytes of send (and of receive) slots per endpoint, at most.
const RING_BYTES: usize = 16 << 20;
/// Fewest and most slots per ring.
pub const RING_SLOTS_MIN: usize = 2;
pub const RING_SLOTS_MAX: usize = 64;
/// Small slots for control messages (ACK, FIN, credits).
pub const CONTROL_SLOTS: usize = 16;
/// Bytes per control slot.
pub const CONTROL_SLOT_BYTES: usize = 8;

/// Slots per ring for packets of `pktsize` bytes.
pub fn ring_slots(pktsize: usize) -> usize {
    (RING_BYTES / pktsize.max(1)).clamp(RING_SLOTS_MIN, RING_SLOTS_MAX)
}

/// Most bytes one endpoint of either RDMA STREAM registers for slots of `slot_bytes`
/// (the larger of a packet and a reply, see [`slot_bytes`]): both rings, with
/// at least [`CREDIT_RING_MIN`] slots of at least 8 bytes (a verbs FIN), the control
/// slots, and a credit slot beside each receive.
pub fn endpoint_bytes_at_most(slot_bytes: usize) -> u64 {
    let slots = ring_slots(slot_bytes).max(CREDIT_RING_MIN);
    let rings = 2 * slots * slot_bytes.max(8);
    (rings + (CONTROL_SLOTS + slots) * CONTROL_SLOT_BYTES) as u64
}

/// Where each operation of an endpoint belongs: slot `i` of one ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    Send(usize),
    Recv(usize),
    Control(usize),
}

/// The layout of an endpoint's registered region and of its operation contexts:
/// `send` slots, then `recv` slots, then the control slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingLayout {
    pub slot_bytes: usize,
    pub send: usize,
    pub recv: usize,
}

impl RingLayout {
    pub fn new(pktsize: usize) -> RingLayout {
        let n = ring_slots(pktsize);
        RingLayout {
            slot_bytes: pktsize.max(1),
            send: n,
            recv: n,
        }
    }

    /// Operation contexts (work request ids) needed.
    pub fn contexts(&self) -> usize {
        self.send + self.recv + CONTROL_SLOTS
    }

    /// Bytes of the registered region.
    pub fn region_bytes(&self) -> usize {
        (self.send + self.recv) * self.slot_bytes + CONTROL_SLOTS * CONTROL_SLOT_BYTES
    }

    /// The slot of context index `i`, if it is one.
    pub fn slot(&self, i: usize) -> Option<Slot> {
        if i < self.send {
            Some(Slot::Send(i))
        } else if i < self.send + self.recv {
            Some(Slot::Recv(i - self.send))
        } else if i < self.contexts() {
            Some(Slot::Control(i - self.send - self.recv))
        } else {
            None
        }
    }

    /// The context index of `slot`.
    pub fn index(&self, slot: Slot) -> usize {
        match slot {
            Slot::Send(i) => i,
            Slot::Recv(i) => self.send + i,
            Slot::Control(i) => self.send + self.recv + i,
        }
    }

    /// Byte offset of `slot` in the region.
    pub fn offset(&self, slot: Slot) -> usize {
        match slot {
            Slot::Send(i) => i * self.slot_bytes,
            Slot::Recv(i) => (self.send + i) * self.slot_bytes,
            Slot::Control(i) => (self.send + self.recv) * self.slot_bytes + i * CONTROL_SLOT_BYTES,
        }
    }
}

/// A packet to send, borrowed for the call: plain bytes, or a piece of shared immutable
/// bytes, which a ring may keep in a send slot and send again without copying them in
/// (see [`SendSlots`]). Borrowed, not cloned: a clone of shared bytes costs two atomic
/// operations per message, on a path that runs once per round trip.
#[derive(Clone, Copy, Debug)]
pub struct Packet<'a> {
    bytes: &'a [u8],
    /// What `bytes` are a piece of, if they are shared.
    shared: Option<&'a Bytes>,
}

impl<'a> Packet<'a> {
    /// Plain bytes.
    pub fn borrowed(bytes: &'a [u8]) -> Packet<'a> {
        Packet {
            bytes,
            shared: None,
        }
    }

    /// All of `bytes`.
    pub fn shared(bytes: &'a Bytes) -> Packet<'a> {
        Packet {
            bytes,
            shared: Some(bytes),
        }
    }

    /// The packet in pieces of at most `size` bytes (one ring slot each), in order.
    pub fn chunks(self, size: usize) -> impl Iterator<Item = Packet<'a>> {
        let shared = self.shared;
        self.bytes
            .chunks(size.max(1))
            .map(move |bytes| Packet { bytes, shared })
    }
}

impl Deref for Packet<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.bytes
    }
}

/// What each send slot of a ring holds. A slot that was filled from shared bytes keeps
/// a handle to them: while the handle lives those bytes cannot change nor their memory
/// be reused, so the same bytes (same address and length) need not be copied in again.
/// A bulk sender sends one buffer over and over, so its slots are filled once. Slots
/// keep at most one ring's worth of a caller's buffers alive.
#[derive(Debug)]
pub struct SendSlots {
    held: Vec<Option<Bytes>>,
}

impl SendSlots {
    pub fn new(slots: usize) -> SendSlots {
        SendSlots {
            held: vec![None; slots],
        }
    }

    /// Puts `chunk` into send slot `i`, whose bytes are `slot` (at least as long),
    /// unless the slot already holds exactly those bytes.
    pub fn fill(&mut self, i: usize, slot: &mut [u8], chunk: &Packet<'_>) {
        let same = |h: &Bytes| h.as_ptr() == chunk.as_ptr() && h.len() == chunk.len();
        let held = self.held.get_mut(i);
        let holds = held.as_deref().and_then(Option::as_ref);
        if chunk.shared.is_some() && holds.is_some_and(same) {
            return;
        }
        slot[..chunk.len()].copy_from_slice(chunk);
        if let Some(held) = held {
            *held = chunk.shared.map(|b| b.slice_ref(chunk.bytes));
        }
    }

    /// Readies send slot `to`, whose reply goes at byte `at` of `region`, with
    /// `answer`'s reply to the request at `request` in `region`: for an echo the
    /// request's bytes, for an ACK its one byte, else what the slot holds. Returns the
    /// reply's length.
    pub fn stage_reply(
        &mut self,
        region: &mut [u8],
        answer: Reply,
        request: Range<usize>,
        to: usize,
        at: usize,
    ) -> usize {
        let len = request.len();
        match answer {
            Reply::Echo => region.copy_within(request, at),
            Reply::Ack => region[at] = 1,
            Reply::Sized(_) => return answer.len(len),
        }
        if let Some(held) = self.held.get_mut(to) {
            *held = None;
        }
        answer.len(len)
    }
}

/// The peer's receive ring as a writer sees it: which slot is next and how many are
/// free (credits). A slot is reused only once the peer said it consumed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteRing {
    addr: u64,
    key: u64,
    slots: usize,
    slot_bytes: u64,
    next: usize,
    credits: usize,
}

impl RemoteRing {
    pub fn new(addr: u64, key: u64, slots: usize, slot_bytes: u64) -> RemoteRing {
        RemoteRing {
            addr,
            key,
            slots,
            slot_bytes,
            next: 0,
            credits: slots,
        }
    }

    /// The key of the peer's registered ring.
    pub fn key(&self) -> u64 {
        self.key
    }

    /// Takes the next slot if the peer has one free: (slot, its RMA address).
    pub fn take(&mut self) -> Option<(usize, u64)> {
        if self.credits == 0 {
            return None;
        }
        self.credits -= 1;
        let slot = self.next;
        self.next = (self.next + 1) % self.slots;
        Some((slot, self.addr + slot as u64 * self.slot_bytes))
    }

    /// The address of the next slot, without taking it (the verbs writer's slots are
    /// paid for by [`Credits`] instead).
    pub fn take_uncounted(&mut self) -> (usize, u64) {
        let slot = self.next;
        self.next = (self.next + 1) % self.slots;
        (slot, self.addr + slot as u64 * self.slot_bytes)
    }

    /// The peer consumed `n` slots.
    pub fn credit(&mut self, n: usize) -> Result<(), String> {
        if self.credits + n > self.slots {
            return Err(format!(
                "the peer returned {n} credits, more than it was owed"
            ));
        }
        self.credits += n;
        Ok(())
    }
}

/// What a verbs message is, in the top bits of its immediate data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImmKind {
    /// A data message (a SEND, or an RDMA WRITE into the next ring slot).
    Data,
    /// An MPRTT acknowledgement: one byte.
    Ack,
    /// End of stream; the payload holds the count of data messages (8 bytes, LE).
    Fin,
    /// Nothing but returned credits.
    Credit,
    /// An MPRTT reply with a payload (`--echo`, `--response-size`), into a ring slot as
    /// data is.
    Reply,
}

/// The immediate data every verbs message carries: its kind and the receives its
/// sender re-posted since it last said so (piggy-backed credits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Imm {
    pub kind: ImmKind,
    pub credits: u32,
}

/// Bits of the immediate data holding the credits.
const IMM_CREDIT_BITS: u32 = 28;
const IMM_CREDIT_MASK: u32 = (1 << IMM_CREDIT_BITS) - 1;

impl Imm {
    /// The 32 bits sent (the wire carries them big-endian: `to_be` before posting,
    /// `from_be` on the completion).
    pub fn encode(self) -> u32 {
        let kind = match self.kind {
            ImmKind::Data => 1,
            ImmKind::Ack => 2,
            ImmKind::Fin => 3,
            ImmKind::Credit => 4,
            ImmKind::Reply => 5,
        };
        (kind << IMM_CREDIT_BITS) | (self.credits & IMM_CREDIT_MASK)
    }

    /// Reads immediate data from the peer; `None` for a kind fperf never sends.
    pub fn decode(raw: u32) -> Option<Imm> {
        let kind = match raw >> IMM_CREDIT_BITS {
            1 => ImmKind::Data,
            2 => ImmKind::Ack,
            3 => ImmKind::Fin,
            4 => ImmKind::Credit,
            5 => ImmKind::Reply,
            _ => return None,
        };
        Some(Imm {
            kind,
            credits: raw & IMM_CREDIT_MASK,
        })
    }
}

/// Bytes of a [`Trailer`].
pub const TRAILER_BYTES: usize = 12;

/// What follows each message a verbs endpoint writes by RDMA WRITE, without immediate
/// data, so the receiver gets no completion for it: the message ends at the end of its
/// ring slot, followed by this trailer, and the receiver finds it by polling the slot's
/// last bytes for the next sequence number, as `ib_write_lat` polls its buffer. Devices place a message's bytes in order (what `ib_write_lat` relies
/// on too), so the sequence number, written last, lands last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trailer {
    /// Bytes of the message before the trailer.
    pub len: u32,
    /// What the message is and the credits it returns, as immediate data says.
    pub imm: u32,
    /// The writer's count of such messages on this queue pair, this one included.
    pub seq: u32,
}

impl Trailer {
    pub fn encode(self) -> [u8; TRAILER_BYTES] {
        let mut b = [0u8; TRAILER_BYTES];
        b[..4].copy_from_slice(&self.len.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b[8..].copy_from_slice(&self.seq.to_le_bytes());
        b
    }

    pub fn decode(b: [u8; TRAILER_BYTES]) -> Trailer {
        let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Trailer {
            len: word(0),
            imm: word(4),
            seq: word(8),
        }
    }
}

/// How [`Reply`] travels over RDMA: the ACK as an immediate, without payload (so a
/// 1-byte `--response-size` reply is the ACK); a reply with a payload (an echo, a sized
/// reply) fills a receive slot of the requester's ring, so slots hold the larger of a
/// packet and a reply, and a reply is one message whatever its size.
pub fn answer_of(reply: Option<Reply>) -> Option<Reply> {
    match reply? {
        Reply::Sized(0 | 1) => Some(Reply::Ack),
        other => Some(other),
    }
}

/// Bytes of a ring slot for packets of `pktsize` bytes and their replies, if any.
pub fn slot_bytes(answer: Option<Reply>, pktsize: usize) -> usize {
    match answer {
        Some(Reply::Sized(n)) => pktsize.max(n as usize),
        _ => pktsize,
    }
}

/// Checks `reply` from the peer against the `request` it answers as `answer`: its
/// length, and for an echo its bytes.
pub fn check_reply(answer: Reply, reply: &[u8], request: &[u8]) -> Result<(), String> {
    let want = answer.len(request.len());
    if reply.len() != want {
        return Err(format!(
            "a reply of {} bytes to a request of {}, where {want} were due",
            reply.len(),
            request.len()
        ));
    }
    if answer == Reply::Echo && reply != request {
        let at = reply.iter().zip(request).position(|(a, b)| a != b);
        return Err(format!(
            "an echo that differs from its request (first at byte {})",
            at.unwrap_or(0)
        ));
    }
    Ok(())
}

/// Fewest receives a ring using [`Credits`] may have (see there why).
pub const CREDIT_RING_MIN: usize = 3;

/// Send credits of one verbs queue pair: how many messages this end may still send
/// without the peer running out of posted receives (which would be an RNR error), and
/// how many of its own receives it re-posted without telling the peer yet.
///
/// Every message consumes one of the peer's posted receives, so every message costs a
/// credit. Credits come back in the immediate data of any message the peer sends. So
/// that credits never deadlock, the last credit is kept for a message that carries
/// nothing but credits ([`Credits::take_for_credit`]): data, ACK and FIN messages need
/// two ([`Credits::take`]). A credit-only message is due once a quarter of the ring,
/// and at least two receives, were re-posted unreported ([`Credits::credit_due`]).
/// At least two: a credit-only message costs the sender one credit, so one carrying a
/// single credit would gain nothing, and two ends short of credits would bounce such
/// messages forever. A quarter: a sender held back (one credit left) means its peer
/// holds, has in flight or has re-posted unreported all but one of its receives, so
/// once the peer's application consumed what it holds, a credit-only message is due
/// (the threshold is at most the ring minus one for rings of [`CREDIT_RING_MIN`] or
/// more). Of two ends at rest, the one that sent last has a credit left for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credits {
    /// Receives the peer keeps posted (its ring).
    peer_ring: u32,
    /// Messages this end may still send.
    available: u32,
    /// This end's receives re-posted and not yet reported to the peer.
    unreported: u32,
    /// Unreported receives that make a credit-only message due.
    threshold: u32,
}

impl Credits {
    /// Credits towards a peer that posted `peer_ring` receives, for an end that posts
    /// `own_ring`.
    pub fn new(peer_ring: u32, own_ring: u32) -> Credits {
        Credits {
            peer_ring,
            available: peer_ring,
            unreported: 0,
            threshold: (own_ring / 4).max(2),
        }
    }

    /// Messages this end may still send (the last one only for credits).
    pub fn available(&self) -> u32 {
        self.available
    }

    /// Takes a credit for a data, ACK or FIN message, if one is free beyond the one
    /// kept for credits; returns the credits to piggy-back on it.
    pub fn take(&mut self) -> Option<u32> {
        if self.available < 2 {
            return None;
        }
        self.available -= 1;
        Some(std::mem::take(&mut self.unreported))
    }

    /// Whether a credit-only message is due and may be sent.
    pub fn credit_due(&self) -> bool {
        self.available >= 1 && self.unreported >= self.threshold
    }

    /// Takes the credit for a credit-only message; returns the credits it carries.
    pub fn take_for_credit(&mut self) -> Option<u32> {
        if !self.credit_due() {
            return None;
        }
        self.available -= 1;
        Some(std::mem::take(&mut self.unreported))
    }

    /// This end re-posted `n` receives.
    pub fn reposted(&mut self, n: u32) {
        self.unreported = self.unreported.saturating_add(n);
    }

    /// The peer returned `n` credits; more than it was ever owed is a protocol error.
    pub fn returned(&mut self, n: u32) -> Result<(), String> {
        match self.available.checked_add(n) {
            Some(a) if a <= self.peer_ring => {
                self.available = a;
                Ok(())
            }
            _ => Err(format!(
                "the peer returned {n} credits with {} of {} in hand: more than it was owed",
                self.available, self.peer_ring
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_takes_shared_bytes_once_and_anything_else_every_time() {
        let mut slots = SendSlots::new(2);
        let mut slot = [0u8; 8];
        let payload = Bytes::from_static(b"abcdefgh");
        slots.fill(0, &mut slot, &Packet::shared(&payload.slice(..6)));
        assert_eq!(&slot, b"abcdef\0\0");
        // The same bytes again: not copied, so a mark made since stays.
        slot[0] = b'X';
        slots.fill(0, &mut slot, &Packet::shared(&payload.slice(..6)));
        assert_eq!(&slot, b"Xbcdef\0\0");
        // Other bytes, or the same ones at another length, are copied.
        slots.fill(0, &mut slot, &Packet::shared(&payload.slice(..4)));
        assert_eq!(&slot, b"abcdef\0\0");
        slot[0] = b'X';
        slots.fill(
            0,
            &mut slot,
            &Packet::shared(&Bytes::copy_from_slice(b"abcd")),
        );
        assert_eq!(&slot, b"abcdef\0\0");
        // Borrowed bytes are copied every time and forget what the slot held.
        slot[0] = b'X';
        slots.fill(0, &mut slot, &Packet::borrowed(b"ab"));
        assert_eq!(&slot, b"abcdef\0\0");
        let shared = Packet::shared(&payload);
        // A slot past those counted is filled every time, and remembered by none.
        slots.fill(5, &mut slot, &shared);
        slot[0] = b'X';
        slots.fill(5, &mut slot, &shared);
        assert_eq!(&slot, b"abcdefgh");
    }

    #[test]
    fn an_echo_staged_in_a_send_slot_is_the_request_and_the_slot_is_filled_again_after() {
        let layout = RingLayout {
            slot_bytes: 8,
            send: 2,
            recv: 2,
        };
        let mut region = vec![0u8; layout.region_bytes()];
        let mut slots = SendSlots::new(layout.send);
        let payload = Bytes::from_static(b"abcdefgh");
        let shared = Packet::shared(&payload);
        let send0 = layout.offset(Slot::Send(0));
        slots.fill(0, &mut region[send0..send0 + 8], &shared);
        let recv1 = layout.offset(Slot::Recv(1));
        region[recv1..recv1 + 8].copy_from_slice(b"XYZ12345");
        let request = recv1..recv1 + 3;
        let n = slots.stage_reply(&mut region, Reply::Echo, request.clone(), 0, send0);
        assert_eq!((n, &region[send0..send0 + 8]), (3, &b"XYZdefgh"[..]));
        slots.fill(0, &mut region[send0..send0 + 8], &shared);
        assert_eq!(&region[send0..send0 + 8], b"abcdefgh");
        // A sized reply leaves the slot as it is.
        let sized = slots.stage_reply(&mut region, Reply::Sized(6), request.clone(), 0, send0);
        assert_eq!((sized, &region[send0..send0 + 8]), (6, &b"abcdefgh"[..]));
        // ... and it still holds the shared bytes, so they are not copied in again.
        region[send0] = b'Q';
        slots.fill(0, &mut region[send0..send0 + 8], &shared);
        assert_eq!(&region[send0..send0 + 8], b"Qbcdefgh");
        // An ACK is its one byte, here at the slot's end; the slot is filled again after.
        let ack = slots.stage_reply(&mut region, Reply::Ack, request, 0, send0 + 7);
        assert_eq!((ack, &region[send0..send0 + 8]), (1, &b"Qbcdefg\x01"[..]));
        slots.fill(0, &mut region[send0..send0 + 8], &shared);
        assert_eq!(&region[send0..send0 + 8], b"abcdefgh");
    }

    #[test]
    fn a_trailer_reads_back_as_written() {
        let t = Trailer {
            len: 64,
            imm: Imm {
                kind: ImmKind::Reply,
                credits: 3,
            }
            .encode(),
            seq: u32::MAX,
        };
        let raw = t.encode();
        assert_eq!(&raw[8..], &[0xff; 4], "the sequence number comes last");
        assert_eq!(Trailer::decode(raw), t);
    }

    #[test]
    fn packets_split_into_slots_in_order() {
        let bytes = Bytes::from_static(b"0123456789");
        for packet in [Packet::borrowed(&bytes[..]), Packet::shared(&bytes)] {
            let pieces: Vec<Vec<u8>> = packet.chunks(4).map(|c| c.to_vec()).collect();
            assert_eq!(pieces, [&b"0123"[..], b"4567", b"89"]);
            assert_eq!(packet.chunks(10).count(), 1);
            // A piece splits again from where it starts.
            let second = packet.chunks(4).nth(1).expect("a second piece");
            let pieces: Vec<Vec<u8>> = second.chunks(3).map(|c| c.to_vec()).collect();
            assert_eq!(pieces, [&b"456"[..], b"7"]);
        }
        assert_eq!(Packet::borrowed(&[]).chunks(4).count(), 0);
    }

    #[test]
    fn ring_sizes_stay_within_bounds() {
        assert_eq!(ring_slots(1), RING_SLOTS_MAX);
        assert_eq!(ring_slots(32768), RING_SLOTS_MAX);
        assert_eq!(ring_slots(1 << 20), 16);
        assert_eq!(ring_slots(64 << 20), RING_SLOTS_MIN);
    }

    #[test]
    fn contexts_map_back_to_their_slots() {
        let l = RingLayout::new(1000);
        for slot in [
            Slot::Send(0),
            Slot::Send(l.send - 1),
            Slot::Recv(0),
            Slot::Recv(l.recv - 1),
            Slot::Control(0),
            Slot::Control(CONTROL_SLOTS - 1),
        ] {
            assert_eq!(l.slot(l.index(slot)), Some(slot));
        }
        assert_eq!(l.slot(l.contexts()), None);
        // Slots do not overlap and fit in the region.
        assert_eq!(l.offset(Slot::Recv(0)), l.send * 1000);
        assert_eq!(
            l.offset(Slot::Control(CONTROL_SLOTS - 1)) + CONTROL_SLOT_BYTES,
            l.region_bytes()
        );
    }

    #[test]
    fn remote_ring_hands_out_slots_only_against_credits() {
        let mut r = RemoteRing::new(1000, 7, 3, 100);
        assert_eq!(r.take(), Some((0, 1000)));
        assert_eq!(r.take(), Some((1, 1100)));
        assert_eq!(r.take(), Some((2, 1200)));
        assert_eq!(r.take(), None, "no credit left");
        r.credit(2).expect("owed");
        assert_eq!(r.take(), Some((0, 1000)), "wraps around");
        assert_eq!(r.take(), Some((1, 1100)));
        assert_eq!(r.take(), None);
        assert!(r.credit(4).is_err(), "more credits than slots lent");
        let mut u = RemoteRing::new(0, 1, 2, 10);
        assert_eq!(u.take_uncounted(), (0, 0));
        assert_eq!(u.take_uncounted(), (1, 10));
        assert_eq!(u.take_uncounted(), (0, 0));
    }

    #[test]
    fn immediate_data_roundtrips_and_refuses_unknown_kinds() {
        for kind in [
            ImmKind::Data,
            ImmKind::Ack,
            ImmKind::Fin,
            ImmKind::Credit,
            ImmKind::Reply,
        ] {
            for credits in [0, 1, 64, IMM_CREDIT_MASK] {
                let imm = Imm { kind, credits };
                assert_eq!(Imm::decode(imm.encode()), Some(imm));
            }
        }
        assert_eq!(Imm::decode(0), None);
        assert_eq!(Imm::decode(0xf000_0000), None);
        assert_eq!(Imm::decode(u32::MAX), None);
    }

    #[test]
    fn replies_are_checked_against_their_requests() {
        assert_eq!(answer_of(None), None);
        assert_eq!(answer_of(Some(Reply::Sized(1))), Some(Reply::Ack));
        assert_eq!(answer_of(Some(Reply::Echo)), Some(Reply::Echo));
        assert_eq!(answer_of(Some(Reply::Sized(300))), Some(Reply::Sized(300)));
        assert_eq!(slot_bytes(Some(Reply::Sized(300)), 100), 300);
        assert_eq!(slot_bytes(Some(Reply::Sized(30)), 100), 100);
        assert_eq!(slot_bytes(Some(Reply::Echo), 100), 100);
        assert_eq!(slot_bytes(None, 100), 100);
        let request = [1u8, 2, 3];
        assert_eq!(check_reply(Reply::Echo, &request, &request), Ok(()));
        let e = check_reply(Reply::Echo, &[1, 9, 3], &request).expect_err("differs");
        assert!(e.contains("at byte 1"), "{e}");
        assert!(check_reply(Reply::Echo, &request[..2], &request).is_err());
        assert_eq!(check_reply(Reply::Sized(5), &[0; 5], &request), Ok(()));
        let e = check_reply(Reply::Sized(5), &[0; 4], &request).expect_err("short");
        assert!(e.contains("4 bytes") && e.contains("5 were due"), "{e}");
        assert_eq!(check_reply(Reply::Ack, &[1], &request), Ok(()));
    }

    #[test]
    fn the_last_credit_is_kept_for_credit_messages() {
        let mut c = Credits::new(4, 4);
        assert_eq!(c.take(), Some(0));
        assert_eq!(c.take(), Some(0));
        assert_eq!(c.take(), Some(0));
        assert_eq!(c.available(), 1);
        assert_eq!(c.take(), None, "the last credit is reserved");
        assert!(!c.credit_due(), "nothing to report");
        assert_eq!(c.take_for_credit(), None);
        c.reposted(1);
        assert!(!c.credit_due(), "one credit alone is not worth a message");
        c.reposted(1);
        assert!(c.credit_due(), "two, a quarter of 4 at least");
        assert_eq!(c.take_for_credit(), Some(2));
        assert_eq!(c.available(), 0);
        assert!(!c.credit_due());
        c.returned(4).expect("owed 4");
        assert_eq!(c.available(), 4);
        assert!(c.returned(1).is_err(), "never more than the peer's ring");
        assert!(c.returned(u32::MAX).is_err(), "no overflow");
    }

    #[test]
    fn credits_piggy_back_on_the_next_message() {
        let mut c = Credits::new(64, 64);
        c.reposted(3);
        assert!(!c.credit_due(), "below a quarter of the ring");
        assert_eq!(c.take(), Some(3));
        assert_eq!(c.take(), Some(0), "reported once only");
        c.reposted(16);
        assert!(c.credit_due());
    }

    /// Two ends exchanging messages through simulated receive queues: whatever the
    /// order of sends, no message ever finds its peer without a posted receive, and
    /// neither end stalls for want of credits while the other has some to give; for
    /// rings of every size fperf can pick and applications that consume late.
    #[test]
    fn simulated_exchange_never_overruns_posted_receives() {
        for ring in [CREDIT_RING_MIN as u32, 4, 5, 8, 16, 64] {
            for lazy in [1, 2, 5] {
                simulate(ring, lazy, 0);
            }
            for seed in 1..20 {
                simulate(ring, 1, seed);
            }
        }
    }

    /// One simulated run: end 0 sends 1000 data messages, end 1 acknowledges each;
    /// applications consume what they hold only every `lazy` steps; with a `seed`,
    /// pseudo-random choices also decide how many messages arrive per step and which
    /// end consumes.
    fn simulate(ring: u32, lazy: u32, seed: u64) {
        let mut rng = seed;
        let mut roll = move |n: u64| {
            if seed == 0 {
                return 1;
            }
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (rng >> 33) % n
        };
        struct End {
            credits: Credits,
            posted: u32,
            ring: u32,
            /// Messages received and not yet consumed by the application.
            held: u32,
        }
        let mut ends = [0, 1].map(|_| End {
            credits: Credits::new(ring, ring),
            posted: ring,
            ring,
            held: 0,
        });
        // Deterministic runs consume on every `lazy` step (`roll` answers 1).
        // In flight: (to, credits carried, is data).
        let mut wire: std::collections::VecDeque<(usize, u32, bool)> = Default::default();
        let mut data_sent = 0u32;
        let mut acks_sent = 0u32;
        let mut steps = 0;
        // End 0 sends 1000 data messages, end 1 acknowledges each (MPRTT-like load).
        let mut acks_owed = 0u32;
        while (data_sent < 1000 || acks_owed > 0 || !wire.is_empty()) && steps < 100_000 {
            steps += 1;
            // Deliver one message (or, randomly, none or two).
            for _ in 0..roll(3) {
                let Some((to, carried, data)) = wire.pop_front() else {
                    break;
                };
                let e = &mut ends[to];
                assert!(e.posted > 0, "a message found no posted receive (RNR)");
                e.posted -= 1;
                e.held += 1;
                e.credits
                    .returned(carried)
                    .expect("credits stay within the ring");
                if data {
                    acks_owed += 1;
                }
            }
            // Applications consume what they hold and re-post, now and then.
            for e in ends.iter_mut() {
                if steps % lazy != 0 || roll(2) == 0 {
                    continue;
                }
                let n = e.held;
                e.held = 0;
                e.posted += n;
                assert!(e.posted <= e.ring);
                e.credits.reposted(n);
            }
            // Data from 0, ACKs from 1, credits from either when due.
            if data_sent < 1000 {
                if let Some(c) = ends[0].credits.take() {
                    wire.push_back((1, c, true));
                    data_sent += 1;
                }
            }
            if acks_owed > 0 {
                if let Some(c) = ends[1].credits.take() {
                    wire.push_back((0, c, false));
                    acks_owed -= 1;
                    acks_sent += 1;
                }
            }
            for (i, e) in ends.iter_mut().enumerate() {
                if e.credits.credit_due() {
                    let c = e.credits.take_for_credit().expect("due");
                    wire.push_back((1 - i, c, false));
                }
            }
        }
        assert_eq!(
            data_sent, 1000,
            "ring {ring}, lazy {lazy}: the sender stalled"
        );
        assert_eq!(acks_sent, 1000, "ring {ring}, lazy {lazy}");
    }
}
