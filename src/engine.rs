//! The data loops both roles run: sending a stream's bytes ([`drive`]) and receiving
//! them ([`receive`]). The client sends and the server receives; with `--reverse` the
//! roles swap, and with `--bidir` each end runs both.

use crate::interval::Meter;
use crate::limits::{RatePacer, TestWatch};
use crate::settings::Settings;
use crate::stats::datagrams::DatagramCounts;
use crate::stats::StreamStats;
use crate::stream::buffer::DataBuffer;
use crate::stream::Timeout;
use crate::transport::figures::{TransportFigures, TransportInForce};
use crate::transport::stream::Stream;
use crate::transport::Role;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What driving one stream produced.
pub(crate) struct Driven {
    /// Where the counted figures begin (after the warm-up with `--omit`).
    pub(crate) start: Instant,
    pub(crate) stats: StreamStats,
    pub(crate) transport: TransportFigures,
    pub(crate) interrupted: bool,
    /// The receiving peer closed the connection before every byte was sent.
    pub(crate) peer_closed: bool,
    /// When the last send was handed over, where the sending time ends there (see
    /// [`Stream::sent_on_handover`]); `None` where it ends at the peer's confirmation.
    pub(crate) handed_over: Option<Instant>,
    /// Datagrams of the warm-up ([`crate::interval::Totals::warm_up`]).
    pub(crate) warm_up: DatagramCounts,
}

/// Where a sending stream's time ends, given the peer's confirmation: at its hand-over
/// when it has one, with the wait for the confirmation after it.
pub(crate) fn sending_end(
    handed_over: Option<Instant>,
    confirmed: Instant,
) -> (Instant, Option<Duration>) {
    match handed_over {
        Some(t) => (t, Some(confirmed.saturating_duration_since(t))),
        None => (confirmed, None),
    }
}

/// Sends the stream's bytes: with `send()` for one socket and the mutex queue, with
/// `send_submit()` otherwise (as the original design does). The buffer is allocated once,
/// page-aligned (see [`DataBuffer`]).
/// A time-bounded run sends whole packets until its deadline. With a schedule, the
/// clock is read once per send and a queued send waits no longer than the next boundary
/// (a synchronous `send()` cannot be cut short without tearing a packet).
///
/// `progress`, the test's watch and this stream's index, hears of every packet sent (and
/// on a server may pace to its rate cap). On the server (`role`), a peer that resets
/// the stream ended the test early; on the client it is a failure.
///
/// `shared_budget`: bytes that every stream holding it may still send, together (an
/// iperf3 client's `-n`): each whole send takes its bytes from it while any are left,
/// and once it is spent the stream stays open, sending nothing, until `abort` (the
/// client ends the test once it has read them all).
pub(crate) fn drive(
    stream: &mut dyn Stream,
    settings: &Settings,
    mut meter: Meter,
    abort: &AtomicBool,
    progress: (&TestWatch, usize),
    role: Role,
    shared_budget: Option<&AtomicU64>,
) -> io::Result<Driven> {
    let pkt = settings.pktsize as usize;
    // Time-bounded runs have no byte limit; u64::MAX bytes is never reached.
    let mut left = settings.byte_limit().unwrap_or(u64::MAX);
    let payload = DataBuffer::filled(pkt, 0xa5)?.into_bytes();
    let timed = meter.active();
    let deadline = meter.deadline();
    let asynchronous = settings.asynchronous();
    // `-b`: sleep until each packet is due at the target rate (a pacer per stream).
    let pacer = settings.rate_bps.map(RatePacer::new);
    let mut sent_bytes = 0u64;
    let mut result = Ok(());
    'sending: while left > 0 {
        let mut n = left.min(pkt as u64) as usize;
        if let Some(budget) = shared_budget {
            n = take_from(budget, n);
            if n == 0 {
                wait_for(abort);
                break;
            }
        }
        let sent = if asynchronous {
            // Without a schedule the clock is not read here at all.
            let wait = if timed {
                let now = Instant::now();
                next_wake(&meter, deadline, now).map(|w| w.saturating_duration_since(now))
            } else {
                None
            };
            let timeout = wait.map_or(Timeout::Forever, |w| {
                Timeout::Millis(u32::try_from(w.as_millis()).unwrap_or(u32::MAX).max(1))
            });
            match stream.send_submit(payload.slice(..n), timeout) {
                Ok(()) => true,
                // The queue stayed full up to a boundary: report, then try again.
                Err(e) if e.kind() == io::ErrorKind::TimedOut && wait.is_some() => false,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        } else {
            // The same immutable buffer every time: a transport that sends from memory
            // of its own may keep it there (see `Stream::send_shared`).
            let short;
            let packet = if n == pkt {
                &payload
            } else {
                short = payload.slice(..n);
                &short
            };
            if let Err(e) = stream.send_shared(packet, Timeout::Forever) {
                result = Err(e);
                break;
            }
            true
        };
        if !sent {
            // Not sent: its bytes go back for a later send.
            if let Some(budget) = shared_budget {
                budget.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
        if sent {
            left -= n as u64;
            sent_bytes += n as u64;
            progress.0.received(progress.1, sent_bytes, n);
        }
        // With a pacer, sleeps until the bytes sent are due; it wakes at every boundary
        // and at the deadline, so that a slow rate still reports each interval and the
        // test still ends on time.
        loop {
            let due = match &pacer {
                Some(p) => {
                    let wake = timed
                        .then(|| next_wake(&meter, deadline, Instant::now()))
                        .flatten();
                    p.wait(sent_bytes, wake, abort)
                }
                None => true,
            };
            if timed {
                // A synchronous send's latency already read the clock as it returned
                // (not so when the queue sent it, or a pacer slept since).
                let now = match (asynchronous, &pacer) {
                    (false, None) => stream.last_send_end(),
                    _ => None,
                }
                .unwrap_or_else(Instant::now);
                // Boundaries first: a send blocked across one still reports it.
                meter.tick(now, &*stream);
                if deadline.is_some_and(|d| now >= d) {
                    break 'sending;
                }
            }
            if due {
                break;
            }
        }
    }
    // A `--reverse` client that stops reading (Ctrl-C) resets the connection (UDP: its
    // closed port answers with ICMP port unreachable): the test ended early, and the
    // server still reports what it sent.
    let peer_closed = role == Role::Server
        && matches!(&result, Err(e) if matches!(
            e.kind(),
            io::ErrorKind::ConnectionReset
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::ConnectionRefused
        ));
    let finished = stream.finish_sending(Timeout::Forever);
    let handed_over = stream.sent_on_handover().then(Instant::now);
    let interrupted = matches!(&result, Err(e) if e.kind() == io::ErrorKind::Interrupted)
        || matches!(&finished, Err(e) if e.kind() == io::ErrorKind::Interrupted);
    if !interrupted && !peer_closed {
        result?;
        finished?;
    }
    let totals = meter.finish(Instant::now(), &*stream);
    Ok(Driven {
        start: totals.from,
        stats: totals.stats,
        transport: totals.transport,
        interrupted,
        peer_closed,
        handed_over,
        warm_up: totals.warm_up,
    })
}

/// Takes a whole send of `n` bytes from `budget` while any of it is left: `n`, or 0
/// once it is spent. A last send is never cut short: iperf3's clients of 3.16 and later
/// read whole blocks, so they would never count a short one, and iperf3's own server
/// sends whole blocks too (a volume of whole blocks is sent exactly).
fn take_from(budget: &AtomicU64, n: usize) -> usize {
    let before = budget
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
            Some(left.saturating_sub(n as u64))
        })
        .unwrap_or(0);
    if before > 0 {
        n
    } else {
        0
    }
}

/// Waits until `abort` is set.
fn wait_for(abort: &AtomicBool) {
    while !abort.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// When a wait from `now` must end: the meter's next boundary or the deadline, if any.
fn next_wake(meter: &Meter, deadline: Option<Instant>, now: Instant) -> Option<Instant> {
    [meter.until_due(now).map(|d| now + d), deadline]
        .into_iter()
        .flatten()
        .min()
}

/// What a stream's thread hands back: a receiving one's, or with `--reverse` a
/// sending one's on the server.
pub(crate) struct Received {
    pub(crate) stats: StreamStats,
    pub(crate) transport: TransportFigures,
    pub(crate) local: String,
    pub(crate) peer: String,
    /// What the stream's sockets ended up with (a sending stream's, see
    /// [`TransportInForce::sending`]).
    pub(crate) in_force: TransportInForce,
    /// The time the figures cover: the first byte received to the last, or the first
    /// sent to the peer's confirmation of the last.
    pub(crate) span: Option<(Instant, Instant)>,
    /// Cut short by the abort flag: the figures cover what was done until then.
    pub(crate) interrupted: bool,
    /// A sending stream whose time ends at its last send: the wait for the peer's
    /// confirmation after it (see [`sending_end`]).
    pub(crate) drain: Option<Duration>,
    /// Datagrams of the warm-up ([`crate::interval::Totals::warm_up`]).
    pub(crate) warm_up: DatagramCounts,
}

/// Who a stream's figures belong to: its local and peer addresses and what its sockets
/// ended up with, named before the stream is driven (once the peer closed, the socket no
/// longer knows its peer).
pub(crate) struct StreamNames {
    local: String,
    peer: String,
    in_force: TransportInForce,
}

impl StreamNames {
    pub(crate) fn of(stream: &dyn Stream) -> StreamNames {
        StreamNames {
            local: stream.local_addr(),
            peer: stream.peer_addr(),
            in_force: stream.facts().in_force.sending(),
        }
    }
}

impl Received {
    /// A sending stream's figures: what `driven` sent, from its start to the peer's
    /// confirmation `confirmed` (or to its hand-over, see [`sending_end`]).
    pub(crate) fn sent(driven: Driven, names: StreamNames, confirmed: Instant) -> Received {
        let (end, drain) = sending_end(driven.handed_over, confirmed);
        Received {
            stats: driven.stats,
            transport: driven.transport,
            local: names.local,
            peer: names.peer,
            in_force: names.in_force,
            span: Some((driven.start, end)),
            interrupted: driven.interrupted,
            drain,
            warm_up: driven.warm_up,
        }
    }
}

/// The most bytes a size-bounded stream may deliver before the server calls it a
/// protocol violation.
#[derive(Clone, Copy)]
pub(crate) struct Ceiling {
    /// The stream's bytes as the settings announce them.
    pub(crate) announced: u64,
    /// `announced`, times the copies MPRTT retries may legitimately deliver.
    most: u64,
}

impl Ceiling {
    pub(crate) fn new(settings: &Settings, announced: u64) -> Ceiling {
        Ceiling {
            announced,
            most: announced.saturating_mul(settings.packet_copies()),
        }
    }
}

/// Receives on one stream until the client ends it, publishing progress (and pacing to
/// the rate cap) through `watch`, the test's watch and this stream's index. `ceiling`
/// bounds the bytes a size-bounded run may deliver (MPRTT retries may repeat packets);
/// a time-bounded run has none and sends whole packets only. With intervals, a receive
/// waits no longer than the next boundary, so an idle stream still reports on time.
pub(crate) fn receive(
    mut stream: Box<dyn Stream>,
    pktsize: usize,
    ceiling: Option<Ceiling>,
    idle: Duration,
    mut meter: Meter,
    watch: (&TestWatch, usize),
) -> io::Result<Received> {
    let mut buf = DataBuffer::zeroed(stream.recv_len(pktsize.max(1)))?;
    let mut total = 0u64;
    let timed = meter.active();
    let mut last_data = Instant::now();
    // The clock as of the last return from recv(): one read per packet.
    let mut now = last_data;
    let ms = |d: Duration| u32::try_from(d.as_millis()).unwrap_or(u32::MAX).max(1);
    let mut interrupted = false;
    loop {
        let wait = match timed.then(|| meter.until_due(now)) {
            Some(Some(until)) => until.min(idle),
            _ => idle,
        };
        // Only the byte count is used: the data need not be copied out.
        match stream.recv_counted(&mut buf, Timeout::Millis(ms(wait))) {
            Ok(0) => break,
            Ok(n) => {
                let before = total;
                total += n as u64;
                watch.0.received(watch.1, total, n);
                if let Some(c) = &ceiling {
                    if total > c.most {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "the client sent more than the {} bytes it announced",
                                c.announced
                            ),
                        ));
                    }
                    // The last packet of a run may be short: acknowledge it once whole.
                    if before < c.announced && total >= c.announced {
                        stream.ack_partial()?;
                    }
                }
                if timed {
                    // The clock the receive's latency read as it returned.
                    now = stream.last_recv_end().unwrap_or_else(Instant::now);
                    last_data = now;
                    meter.tick(now, &*stream);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut && last_data.elapsed() < idle => {
                now = Instant::now();
                meter.tick(now, &*stream);
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no data from the client for {}s (--idle-timeout)",
                        idle.as_secs_f64()
                    ),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                interrupted = true;
                break;
            }
            Err(e) => return Err(e),
        }
    }
    let totals = meter.finish(Instant::now(), &*stream);
    let span = totals.stats.first_recv.zip(totals.stats.last_recv);
    let facts = stream.facts();
    Ok(Received {
        stats: totals.stats,
        transport: totals.transport,
        local: stream.local_addr(),
        peer: stream.peer_addr(),
        in_force: facts.in_force,
        span,
        interrupted,
        drain: None,
        warm_up: totals.warm_up,
    })
}
