//! What a UDP data datagram carries and how a receiver accounts for the datagrams it
//! reads. Pure functions and plain data, no I/O: tested on synthetic sequences.
//!
//! # The datagram header
//! Every data datagram starts with up to [`HEADER_LEN`] bytes of header, all
//! little-endian: sequence number (u64), stream index (u32), send time (u64, ns since
//! the Unix epoch). `-l` is the whole UDP payload, header included, so a run of
//! `-l N` moves exactly N bytes per datagram. A datagram shorter than the header
//! carries only its first bytes: `-l 12` drops the send time, and below 8 bytes the
//! sequence number itself is cut to its low `8 * len` bits (`-l 1`: the sequence
//! modulo 256). The receiver widens a cut sequence number back to the full value
//! nearest the highest one seen ([`extend_seq`]); that is exact while no gap or
//! reordering spans half the cut range (128 datagrams for `-l 1`).
//!
//! # Accounting
//! [`SeqTracker`] classifies every datagram as new, out of order (new, but below the
//! highest sequence seen), duplicate (seen before) or foreign (not of this stream).
//! Loss is computed only once the sender has said how many datagrams it sent (over
//! the reliable control connection): `lost = sent - (received - duplicates)`, never
//! below zero. Out-of-order datagrams are never counted as lost.
//!
//! # Replies (MPRTT)
//! A request is answered by one datagram, of one of two kinds ([`ReplyDatagram`], for a [`Reply`]). A sized
//! reply (`-r`, and `--response-size N`) is N bytes that start with the request's
//! sequence number, little-endian, cut to the reply's length like a short header's
//! (N = 1: the original 1-byte ACK, the sequence modulo 256); the rest is zeros. An
//! echo (`--echo`) is the request itself, byte for byte. The sender takes a reply for
//! its request only if it has the right length and starts with the request's sequence
//! number (an echo: is the request, its send time aside, which a resent copy changes);
//! any other datagram is counted and read past, as a late reply to an earlier request.

use crate::stats::datagrams::DatagramCounts;
use crate::stream::reply::Reply;

/// Bytes of a full header.
pub const HEADER_LEN: usize = 20;
/// Bytes of the sequence number (the first field).
const SEQ_LEN: usize = 8;
/// End of the stream index field.
const STREAM_END: usize = 12;
/// Datagrams below the highest sequence seen whose arrival is remembered, for
/// duplicate detection. Older ones are assumed new (and counted out of order).
pub const WINDOW: u64 = 1 << 16;

/// The header of one data datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub seq: u64,
    pub stream: u32,
    /// Send time, ns since the Unix epoch.
    pub sent_ns: u64,
}

impl Header {
    /// Writes the first `out.len().min(HEADER_LEN)` bytes of the header into `out`;
    /// returns how many were written.
    pub fn encode(&self, out: &mut [u8]) -> usize {
        let mut full = [0u8; HEADER_LEN];
        full[..SEQ_LEN].copy_from_slice(&self.seq.to_le_bytes());
        full[SEQ_LEN..STREAM_END].copy_from_slice(&self.stream.to_le_bytes());
        full[STREAM_END..].copy_from_slice(&self.sent_ns.to_le_bytes());
        let n = out.len().min(HEADER_LEN);
        out[..n].copy_from_slice(&full[..n]);
        n
    }
}

/// What a datagram says about itself; the fields it was too short to carry are `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The sequence number, or its low `seq_bits` bits.
    pub seq: u64,
    pub seq_bits: u32,
    pub stream: Option<u32>,
    pub sent_ns: Option<u64>,
}

/// Reads the header of `datagram`; `None` for an empty datagram.
pub fn decode(datagram: &[u8]) -> Option<Decoded> {
    if datagram.is_empty() {
        return None;
    }
    let mut seq = [0u8; SEQ_LEN];
    let n = datagram.len().min(SEQ_LEN);
    seq[..n].copy_from_slice(&datagram[..n]);
    let field = |range: std::ops::Range<usize>| datagram.get(range);
    Some(Decoded {
        seq: u64::from_le_bytes(seq),
        seq_bits: 8 * n as u32,
        stream: field(SEQ_LEN..STREAM_END)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes),
        sent_ns: field(STREAM_END..HEADER_LEN)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes),
    })
}

/// The full sequence number whose low `bits` bits are `cut`, chosen nearest to
/// `reference` (the highest sequence seen so far).
pub fn extend_seq(cut: u64, bits: u32, reference: u64) -> u64 {
    if bits >= 64 {
        return cut;
    }
    let span = 1u64 << bits;
    let candidate = (reference & !(span - 1)) | (cut & (span - 1));
    let mut best = candidate;
    for other in [candidate.checked_sub(span), candidate.checked_add(span)]
        .into_iter()
        .flatten()
    {
        if other.abs_diff(reference) < best.abs_diff(reference) {
            best = other;
        }
    }
    best
}

/// How a [`Reply`] travels as a datagram: the ACK and a sized reply are a datagram of
/// their size that starts with the request's sequence number (as much of it as fits);
/// an echo is the request itself.
pub struct ReplyDatagram;

impl ReplyDatagram {
    /// Writes the ACK or sized reply to datagram `seq` into `out`, which holds
    /// [`Reply::len`] bytes: its sequence number (its other bytes are left as they are).
    /// An echo is the request itself, which the caller sends as it is.
    pub fn encode_sized(seq: u64, out: &mut [u8]) {
        let n = out.len().min(SEQ_LEN);
        out[..n].copy_from_slice(&seq.to_le_bytes()[..n]);
    }

    /// Whether `reply`, a datagram of `len` bytes of which `reply` holds the first,
    /// answers `request` (as sent, its header aside), datagram `seq` of stream `stream`,
    /// with `kind`.
    pub fn answers(
        kind: Reply,
        reply: &[u8],
        len: usize,
        request: &[u8],
        seq: u64,
        stream: u32,
    ) -> bool {
        if len != kind.len(request.len()) || reply.len() != len {
            return false;
        }
        let mut header = [0u8; HEADER_LEN];
        Header {
            seq,
            stream,
            sent_ns: 0,
        }
        .encode(&mut header);
        match kind {
            Reply::Ack | Reply::Sized(_) => {
                let n = len.min(SEQ_LEN);
                reply[..n] == header[..n]
            }
            Reply::Echo => {
                // The send time is not compared: a resent copy carries a later one.
                let n = len.min(STREAM_END);
                reply[..n] == header[..n] && reply.get(HEADER_LEN..) == request.get(HEADER_LEN..)
            }
        }
    }
}

/// How one datagram was classified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// The highest sequence so far (gaps before it may still be filled).
    InOrder,
    /// New, but below the highest sequence seen.
    OutOfOrder,
    /// Seen before: a retransmission or a network duplicate.
    Duplicate,
    /// Empty, or of another stream: not accounted.
    Foreign,
}

/// A receiver's view of one stream's sequence numbers.
#[derive(Clone, Debug)]
pub struct SeqTracker {
    stream: u32,
    /// Arrival bits of sequences `highest - WINDOW + 1 ..= highest`, at `seq % WINDOW`.
    seen: Vec<u64>,
    highest: Option<u64>,
    /// RFC 3550 jitter state: the previous transit time and the running estimate.
    last_transit_ns: Option<i128>,
    jitter_ns: Option<f64>,
    pub counts: DatagramCounts,
}

impl SeqTracker {
    /// A tracker for datagrams of stream `stream`.
    pub fn new(stream: u32) -> SeqTracker {
        SeqTracker {
            stream,
            seen: vec![0; (WINDOW / 64) as usize],
            highest: None,
            last_transit_ns: None,
            jitter_ns: None,
            counts: DatagramCounts::default(),
        }
    }

    /// Accounts for one datagram read at `arrival_ns` (ns since the Unix epoch).
    /// Returns its class and its (widened) sequence number.
    pub fn on_datagram(&mut self, datagram: &[u8], arrival_ns: u64) -> (Arrival, u64) {
        let Some(d) = decode(datagram) else {
            self.counts.foreign += 1;
            return (Arrival::Foreign, 0);
        };
        if d.stream.is_some_and(|s| s != self.stream) {
            self.counts.foreign += 1;
            return (Arrival::Foreign, d.seq);
        }
        let seq = extend_seq(d.seq, d.seq_bits, self.highest.unwrap_or(0));
        let transit = d
            .sent_ns
            .map(|sent| i128::from(arrival_ns) - i128::from(sent));
        (self.on_numbered(seq, transit), seq)
    }

    /// Accounts for a datagram numbered `seq` whose transit time (arrival less send time,
    /// on any clocks that tick alike) is `transit_ns`, if it carried a send time.
    pub fn on_numbered(&mut self, seq: u64, transit_ns: Option<i128>) -> Arrival {
        let arrival = self.on_seq(seq);
        if matches!(arrival, Arrival::InOrder | Arrival::OutOfOrder) {
            if let Some(transit) = transit_ns {
                self.on_transit(transit);
            }
        }
        arrival
    }

    /// The highest sequence number seen, if any.
    pub fn highest(&self) -> Option<u64> {
        self.highest
    }

    /// Accounts for `n` datagrams that were not of this stream, read without decoding.
    pub fn on_foreign(&mut self, n: u64) {
        self.counts.foreign += n;
    }

    /// Accounts for sequence number `seq`.
    pub fn on_seq(&mut self, seq: u64) -> Arrival {
        self.counts.received += 1;
        let arrival = match self.highest {
            Some(h) if seq <= h => {
                if h - seq >= WINDOW {
                    // Too old to remember: assumed new.
                    Arrival::OutOfOrder
                } else if self.test_and_set(seq) {
                    Arrival::Duplicate
                } else {
                    Arrival::OutOfOrder
                }
            }
            _ => {
                // Forget the slots the window slides over, then mark this one.
                let from = self.highest.map_or(0, |h| h + 1);
                if seq - from >= WINDOW {
                    self.seen.fill(0);
                } else {
                    for s in from..seq {
                        self.clear(s);
                    }
                }
                self.highest = Some(seq);
                self.test_and_set(seq);
                Arrival::InOrder
            }
        };
        match arrival {
            Arrival::Duplicate => self.counts.duplicates += 1,
            Arrival::OutOfOrder => self.counts.out_of_order += 1,
            Arrival::InOrder | Arrival::Foreign => {}
        }
        arrival
    }

    /// Datagrams received once each.
    pub fn unique(&self) -> u64 {
        self.counts.received - self.counts.duplicates
    }

    /// The sender said it sent `sent` datagrams: works out the loss.
    pub fn finish(&mut self, sent: u64) {
        self.counts.peer_sent = sent;
        self.counts.lost = sent.saturating_sub(self.unique());
    }

    /// Datagram figures so far.
    pub fn counts(&self) -> DatagramCounts {
        let mut c = self.counts;
        c.jitter_ns = self.jitter_ns;
        // Numbers run from 0.
        c.numbered = self.highest.map_or(0, |h| h.saturating_add(1));
        c
    }

    /// RFC 3550 interarrival jitter: J += (|D| - J) / 16, where D is the change in
    /// transit time between consecutive datagrams. Clock offsets between the hosts
    /// cancel out in D.
    fn on_transit(&mut self, transit_ns: i128) {
        if let Some(last) = self.last_transit_ns {
            let d = (transit_ns - last).unsigned_abs() as f64;
            let j = self.jitter_ns.unwrap_or(0.0);
            self.jitter_ns = Some(j + (d - j) / 16.0);
        }
        self.last_transit_ns = Some(transit_ns);
    }

    fn slot(seq: u64) -> (usize, u64) {
        let bit = seq % WINDOW;
        ((bit / 64) as usize, 1u64 << (bit % 64))
    }

    fn test_and_set(&mut self, seq: u64) -> bool {
        let (word, mask) = Self::slot(seq);
        let was = self.seen[word] & mask != 0;
        self.seen[word] |= mask;
        was
    }

    fn clear(&mut self, seq: u64) {
        let (word, mask) = Self::slot(seq);
        self.seen[word] &= !mask;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::buffer_grant::BufferGrant;

    #[test]
    fn a_snapshot_before_the_senders_count_says_sent_and_lost_by_the_numbers() {
        let mut t = SeqTracker::new(0);
        for seq in [0, 1, 3, 4] {
            t.on_seq(seq);
        }
        let warm_up = t.counts().by_numbers();
        assert_eq!((warm_up.peer_sent, warm_up.lost), (5, 1), "2 is missing");
        for seq in 5..10 {
            t.on_seq(seq);
        }
        t.finish(12);
        let after = t.counts().since(&warm_up);
        assert_eq!(
            (after.peer_sent, after.received, after.lost),
            (7, 5, 2),
            "10 and 11 never came"
        );
        // Once the sender's count is known, or with nothing numbered, it stands.
        assert_eq!(t.counts().by_numbers(), t.counts());
        let nothing = DatagramCounts::default();
        assert_eq!(nothing.by_numbers(), nothing);
    }

    #[test]
    fn a_sized_reply_carries_as_much_of_the_sequence_as_fits() {
        let seq = 0x0102_0304_0506_0708u64 + 0x1_0000_0000_0000;
        let mut ack = [0u8; 1];
        ReplyDatagram::encode_sized(seq, &mut ack);
        assert_eq!(ack, [0x08], "the original 1-byte ACK");
        let mut big = vec![0u8; 4096];
        ReplyDatagram::encode_sized(seq, &mut big);
        assert_eq!(big[..8], seq.to_le_bytes());
        assert!(big[8..].iter().all(|&b| b == 0));
        let request = [0u8; 100];
        let sized = Reply::Sized(4096);
        assert!(ReplyDatagram::answers(sized, &big, 4096, &request, seq, 3));
        assert!(
            !ReplyDatagram::answers(sized, &big, 4096, &request, seq + 1, 3),
            "a late reply"
        );
        assert!(
            !ReplyDatagram::answers(sized, &big[..4000], 4000, &request, seq, 3),
            "too short"
        );
        assert!(
            !ReplyDatagram::answers(sized, &big, 5000, &request, seq, 3),
            "cut by the buffer"
        );
        assert!(ReplyDatagram::answers(
            Reply::Ack,
            &ack,
            1,
            &request,
            seq,
            3
        ));
        assert!(!ReplyDatagram::answers(
            Reply::Ack,
            &ack,
            1,
            &request,
            seq + 1,
            3
        ));
    }

    #[test]
    fn an_echo_must_be_the_request_its_send_time_aside() {
        let mut request: Vec<u8> = (0..64u8).collect();
        let header = Header {
            seq: 77,
            stream: 2,
            sent_ns: 1000,
        };
        header.encode(&mut request);
        let echo = Reply::Echo;
        assert!(ReplyDatagram::answers(echo, &request, 64, &request, 77, 2));
        // A resent copy's echo has a later send time: still the answer.
        let mut resent = request.clone();
        Header {
            sent_ns: 2000,
            ..header
        }
        .encode(&mut resent);
        assert!(ReplyDatagram::answers(echo, &resent, 64, &request, 77, 2));
        assert!(
            !ReplyDatagram::answers(echo, &request, 64, &request, 78, 2),
            "a late echo"
        );
        assert!(
            !ReplyDatagram::answers(echo, &request, 64, &request, 77, 1),
            "another stream's"
        );
        let mut changed = request.clone();
        changed[40] ^= 1;
        assert!(
            !ReplyDatagram::answers(echo, &changed, 64, &request, 77, 2),
            "its payload changed"
        );
        assert!(
            !ReplyDatagram::answers(echo, &request[..63], 63, &request, 77, 2),
            "too short"
        );
        // Requests shorter than the header carry and echo only its first bytes.
        let mut tiny = [0u8; 3];
        Header { seq: 77, ..header }.encode(&mut tiny);
        assert!(ReplyDatagram::answers(echo, &tiny, 3, &tiny, 77, 2));
        assert!(!ReplyDatagram::answers(echo, &tiny, 3, &tiny, 78, 2));
    }

    fn datagram(seq: u64, stream: u32, len: usize) -> Vec<u8> {
        let mut d = vec![0xa5u8; len];
        Header {
            seq,
            stream,
            sent_ns: 1_000 + seq,
        }
        .encode(&mut d);
        d
    }

    #[test]
    fn full_header_roundtrips() {
        let h = Header {
            seq: 0x0102_0304_0506_0708,
            stream: 7,
            sent_ns: u64::MAX - 3,
        };
        let mut buf = [0u8; 64];
        assert_eq!(h.encode(&mut buf), HEADER_LEN);
        let d = decode(&buf).expect("decodes");
        assert_eq!(
            d,
            Decoded {
                seq: h.seq,
                seq_bits: 64,
                stream: Some(7),
                sent_ns: Some(u64::MAX - 3)
            }
        );
    }

    #[test]
    fn short_datagrams_carry_what_fits() {
        let h = Header {
            seq: 0x1234_5678_9abc,
            stream: 3,
            sent_ns: 99,
        };
        for len in 1..HEADER_LEN {
            let mut buf = vec![0u8; len];
            assert_eq!(h.encode(&mut buf), len);
            let d = decode(&buf).expect("decodes");
            let bits = 8 * len.min(8) as u32;
            let mask = if bits == 64 {
                u64::MAX
            } else {
                (1 << bits) - 1
            };
            assert_eq!(d.seq, h.seq & mask, "len {len}");
            assert_eq!(d.seq_bits, bits);
            assert_eq!(d.stream, (len >= 12).then_some(3));
            assert_eq!(d.sent_ns, None);
        }
        assert_eq!(decode(&[]), None);
    }

    #[test]
    fn cut_sequences_widen_to_the_nearest_value() {
        assert_eq!(extend_seq(5, 8, 0), 5);
        assert_eq!(extend_seq(0, 8, 255), 256);
        assert_eq!(extend_seq(255, 8, 256), 255);
        assert_eq!(extend_seq(3, 8, 1000), 1027);
        assert_eq!(extend_seq(0xff, 8, 1024 + 2), 1023);
        assert_eq!(extend_seq(7, 64, 12345), 7);
        assert_eq!(extend_seq(0x0001, 16, 0xffff), 0x1_0001);
        // Never below zero.
        assert_eq!(extend_seq(250, 8, 2), 250);
    }

    fn run(seqs: &[u64], sent: u64) -> DatagramCounts {
        let mut t = SeqTracker::new(0);
        for &s in seqs {
            t.on_seq(s);
        }
        t.finish(sent);
        t.counts()
    }

    #[test]
    fn in_order_run_has_no_loss() {
        let seqs: Vec<u64> = (0..100_000).collect();
        let c = run(&seqs, 100_000);
        assert_eq!(
            (c.received, c.lost, c.duplicates, c.out_of_order),
            (100_000, 0, 0, 0)
        );
    }

    #[test]
    fn reordering_is_not_loss() {
        // 0 2 1 4 3 6 5 ...: every other datagram late by one.
        let mut seqs = vec![0u64];
        for k in (1..999).step_by(2) {
            seqs.extend([k + 1, k]);
        }
        let c = run(&seqs, seqs.len() as u64);
        assert_eq!(c.lost, 0);
        assert_eq!(c.duplicates, 0);
        assert_eq!(c.out_of_order, 499);
        assert_eq!(c.received, 999);
    }

    #[test]
    fn duplicates_are_counted_and_never_make_loss_negative() {
        let seqs = [0, 1, 1, 2, 2, 2, 3];
        let c = run(&seqs, 4);
        assert_eq!(
            (c.received, c.duplicates, c.lost, c.out_of_order),
            (7, 3, 0, 0)
        );
        // More unique datagrams than the sender claims: loss stays zero.
        let c = run(&[0, 1, 2, 3, 4], 3);
        assert_eq!(c.lost, 0);
    }

    #[test]
    fn gaps_are_loss_unless_filled_later() {
        let c = run(&[0, 1, 5, 6, 9], 10);
        assert_eq!((c.lost, c.out_of_order, c.duplicates), (5, 0, 0));
        let c = run(&[0, 1, 5, 6, 9, 2, 3, 4, 7, 8], 10);
        assert_eq!((c.lost, c.out_of_order, c.duplicates), (0, 5, 0));
        // The last datagrams lost: only the sender's count reveals them.
        let c = run(&[0, 1, 2], 10);
        assert_eq!(c.lost, 7);
        assert!((c.loss_percent() - 70.0).abs() < 1e-9);
    }

    #[test]
    fn the_window_forgets_slots_it_slides_over() {
        let mut t = SeqTracker::new(0);
        assert_eq!(t.on_seq(3), Arrival::InOrder);
        // Same slot as 3, one window later: new, and 3's bit must not make it a dup.
        assert_eq!(t.on_seq(3 + WINDOW), Arrival::InOrder);
        assert_eq!(t.on_seq(3 + WINDOW), Arrival::Duplicate);
        assert_eq!(
            t.on_seq(4),
            Arrival::OutOfOrder,
            "too old to tell: assumed new"
        );
        assert_eq!(t.on_seq(5 + WINDOW), Arrival::InOrder);
        assert_eq!(t.on_seq(4 + WINDOW), Arrival::OutOfOrder);
        assert_eq!(t.on_seq(4 + WINDOW), Arrival::Duplicate);
        // A jump of more than a window clears everything.
        assert_eq!(t.on_seq(10 * WINDOW), Arrival::InOrder);
        assert_eq!(t.on_seq(10 * WINDOW - 1), Arrival::OutOfOrder);
    }

    #[test]
    fn one_byte_datagrams_are_tracked_through_wraps() {
        // -l 1 with stop-and-wait retransmissions: seq mod 256 on the wire.
        let mut t = SeqTracker::new(0);
        let mut sent = 0u64;
        for seq in 0..2000u64 {
            sent += 1;
            let copies = if seq % 97 == 0 { 2 } else { 1 };
            for _ in 0..copies {
                t.on_datagram(&datagram(seq, 0, 1), 0);
            }
        }
        t.finish(sent);
        let c = t.counts();
        assert_eq!(c.received, 2000 + 21);
        assert_eq!(c.duplicates, 21);
        assert_eq!((c.lost, c.out_of_order, c.foreign), (0, 0, 0));
    }

    #[test]
    fn datagrams_of_other_streams_and_empty_ones_are_foreign() {
        let mut t = SeqTracker::new(1);
        assert_eq!(t.on_datagram(&datagram(0, 1, 100), 0).0, Arrival::InOrder);
        assert_eq!(t.on_datagram(&datagram(1, 2, 100), 0).0, Arrival::Foreign);
        assert_eq!(t.on_datagram(&[], 0).0, Arrival::Foreign);
        assert_eq!(t.counts().foreign, 2);
        assert_eq!(t.counts().received, 1);
    }

    #[test]
    fn jitter_follows_rfc3550() {
        let mut t = SeqTracker::new(0);
        // Transit alternates 100 and 200 ns: |D| = 100 each step after the first.
        for seq in 0..1000u64 {
            let d = datagram(seq, 0, 64);
            let sent = 1_000 + seq;
            let transit = if seq % 2 == 0 { 100 } else { 200 };
            t.on_datagram(&d, sent + transit);
        }
        let j = t.counts().jitter_ns.expect("timed datagrams");
        assert!((j - 100.0).abs() < 1.0, "jitter {j}");
        // One-byte datagrams carry no send time: jitter is unknown, not zero.
        let mut t = SeqTracker::new(0);
        for seq in 0..10 {
            t.on_datagram(&datagram(seq, 0, 1), 5);
        }
        assert_eq!(t.counts().jitter_ns, None);
        assert!(t.counts().report_lines(9).contains("jitter=n/a"));
    }

    #[test]
    fn merged_counts_add_up_and_keep_the_smallest_grant() {
        let mut a = DatagramCounts {
            received: 5,
            lost: 1,
            peer_sent: 6,
            rcvbuf: BufferGrant {
                requested: 100,
                granted: 100,
            },
            ..DatagramCounts::default()
        };
        let b = DatagramCounts {
            received: 4,
            duplicates: 2,
            peer_sent: 2,
            rcvbuf: BufferGrant {
                requested: 100,
                granted: 50,
            },
            ..DatagramCounts::default()
        };
        a.merge(&b);
        assert_eq!(
            (a.received, a.duplicates, a.lost, a.peer_sent),
            (9, 2, 1, 8)
        );
        assert!(a.rcvbuf.capped());
        let lines = a.report_lines(9);
        assert!(lines.starts_with("datagrams: sent=8  received=9  lost=1 (12.50%)  duplicated=2  out-of-order=0  jitter=n/a (datagrams too short to carry a send time)\n"), "{lines}");
        assert!(
            lines.contains("capped SO_RCVBUF at 50B of the 100B"),
            "{lines}"
        );
        // Cut short before the sender said how many it sent: no loss figure is made up.
        let cut = DatagramCounts {
            received: 5,
            ..DatagramCounts::default()
        };
        assert!(cut.report_lines(9).starts_with(
            "datagrams: sent=unknown  received=5  lost=unknown (the sender's count never arrived)  duplicated=0"
        ));
    }
}
