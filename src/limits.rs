//! What a server allows one test to ask for, and how the server watches a running test.
//!
//! [`Limits`] are checked once, on the validated settings, before the server answers
//! `Ready`: a test beyond them is refused before any data flows, with the limit named.
//! Some limits cannot be checked up front because the settings carry no such figure:
//! - `--max-time`: a `--time` above it is refused up front; the [`Watchdog`] also aborts
//!   a test that runs longer (e.g. a slow size-bounded one);
//! - `--max-mb` on a time-bounded run (`--time`), whose volume is not known ahead: the
//!   [`Watchdog`] aborts it once it has moved more;
//! - `--max-rate`: a client's `-b` above it is refused up front; a client that asks for
//!   no rate is served, but the server reads its data no faster than the cap (all streams
//!   together), so TCP flow control holds the client to it — see [`RatePacer`].
//!
//! The watchdog also ends a test whose data stopped moving for the idle time-out, even
//! when a receiving thread is blocked writing (e.g. MPRTT ACKs to a client that reads
//! none), so no client can hold the server for longer than that.

use crate::settings::Settings;
use crate::stats::histogram_bytes;
use crate::stream::sender::{LOCKFREE_QUEUE_CAPACITY, MUTEX_QUEUE_CAPACITY};
use crate::transport::settings::TransportSettings;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use thiserror::Error;

/// Raises this process's soft limit on open files to its hard limit: a run of many
/// flows holds a descriptor per connection on each end, more than the soft limit of
/// 1024 many systems start with. Returns the limit now in force.
pub fn raise_open_files_limit() -> std::io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid rlimit the call fills in.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            ..limit
        };
        // SAFETY: `raised` is a valid rlimit; the kernel copies it.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        limit = raised;
    }
    Ok(limit.rlim_cur)
}

/// Default for [`Limits::max_sockets`]: every data socket costs the server a descriptor
/// and a thread.
pub const DEFAULT_MAX_SOCKETS: u32 = 1024;

/// Default for [`Limits::max_memory_mib`].
pub const DEFAULT_MAX_MEMORY_MIB: u64 = 256;

/// What a data thread holds besides its figures: the stack it touches and its share of
/// the allocator's per-thread memory (about 0.1 MiB a stream for 256 streams of 1-byte
/// packets on Linux, docs/limits.md).
pub const THREAD_BYTES: u64 = 128 << 10;

/// What one test may ask of this server. `None` means no limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most MB (2^20 B) one test may send, all streams together (`--max-mb`).
    pub max_mb: Option<u64>,
    /// Longest one test may run once its data flows (`--max-time`); the server aborts it.
    pub max_time: Option<Duration>,
    /// Most data streams (`-t`) one test may open (`--max-streams`).
    pub max_streams: Option<u32>,
    /// Most data sockets (`-t` × `-n`) one test may open (`--max-sockets`).
    pub max_sockets: u32,
    /// Fastest the server reads one test's data, bits/s over all streams
    /// (`--max-rate`).
    pub max_rate: Option<u64>,
    /// Most MiB one test may make the server set aside for its packet buffers and
    /// latency histograms ([`server_memory_bytes`], `--max-memory`).
    pub max_memory_mib: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_mb: None,
            max_time: None,
            max_streams: None,
            max_sockets: DEFAULT_MAX_SOCKETS,
            max_rate: None,
            max_memory_mib: DEFAULT_MAX_MEMORY_MIB,
        }
    }
}

/// What one test makes the server set aside, at most: the packet buffers of its
/// streams and sockets, and the latency histograms of its streams. A receiving stream
/// records one distribution; a stream the server sends on through sender threads
/// records the submit latency and one send distribution per socket (each sender thread
/// keeps its own), and its queue holds references to up to its capacity of requests.
/// With `-i` each distribution is held three times (the running figures, the last
/// interval's and the one being taken), with `--omit` once more. UDP's
/// `--rx-timestamps` adds two distributions per stream. Each thread (one per
/// stream, and one per socket of a sending stream) adds [`THREAD_BYTES`].
pub fn server_memory_bytes(s: &Settings) -> u64 {
    let streams = u64::from(s.nstreams);
    let (distributions, queues, threads) = if s.asynchronous() {
        let sending = (0..s.nstreams).filter(|&k| s.server_sends_on(k)).count() as u64;
        let senders = sending * u64::from(s.nsockets);
        let queue = (MUTEX_QUEUE_CAPACITY.max(LOCKFREE_QUEUE_CAPACITY)
            * std::mem::size_of::<bytes::Bytes>()) as u64;
        (
            streams + sending + senders,
            sending * queue,
            streams + senders,
        )
    } else {
        (streams, 0, streams)
    };
    let distributions = distributions + streams * s.transport.extra_distributions();
    let copies = 1 + 2 * u64::from(s.interval_ms.is_some()) + u64::from(s.omit_ms.is_some());
    let histograms = distributions * copies * histogram_bytes();
    s.buffer_bytes()
        .saturating_add(histograms)
        .saturating_add(queues)
        .saturating_add(threads * THREAD_BYTES)
}

/// What the kernel lets each TCP socket's buffers grow to by autotuning, each way:
/// the maximum of `net.ipv4.tcp_rmem` and of `net.ipv4.tcp_wmem`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelBuffers {
    pub receive: u64,
    pub send: u64,
}

impl KernelBuffers {
    /// Linux's own defaults, where the host's cannot be read.
    pub const LINUX_DEFAULTS: KernelBuffers = KernelBuffers {
        receive: 6 << 20,
        send: 4 << 20,
    };

    /// This host's.
    pub fn of_host() -> KernelBuffers {
        let most = |path: &str| {
            std::fs::read_to_string(path)
                .ok()
                .and_then(|text| text.split_whitespace().nth(2)?.parse::<u64>().ok())
        };
        KernelBuffers {
            receive: most("/proc/sys/net/ipv4/tcp_rmem")
                .unwrap_or(KernelBuffers::LINUX_DEFAULTS.receive),
            send: most("/proc/sys/net/ipv4/tcp_wmem").unwrap_or(KernelBuffers::LINUX_DEFAULTS.send),
        }
    }
}

/// Fewest bytes a data socket's kernel buffer is held to when the budget shares out:
/// a receive buffer much smaller stalls TCP (its window falls under one segment, 64 KiB
/// on loopback), so a test whose share would be less is refused instead. A thousand
/// flows need 125 MiB of it.
pub const LEAST_SOCKET_BUFFER: u64 = 128 << 10;

/// What a TCP or UDP test's data sockets may make the server's kernel hold, within
/// what `left` of the budget leaves them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketBuffers {
    /// For all the test's data sockets together.
    pub bytes: u64,
    /// The buffer, each way, the server holds each data socket to, where autotuning
    /// (TCP) or fperf's own size (UDP) could take more than the socket's share; `None`:
    /// that fits (or the window is the client's `-w`).
    pub cap: Option<u64>,
}

/// The kernel's part of a TCP or UDP test: each data socket's buffer the way its data
/// goes (the server's send buffer on a stream it sends on, its receive buffer on one it
/// receives on, both for request and response), at the window `-w` asks for (the
/// kernel keeps twice what is set, for its bookkeeping), or where none is set at what
/// the kernel lets it grow to (TCP: autotuning's maximum; UDP: twice the size fperf sets
/// itself), held down to an equal share of `left` when that is less. The other way
/// carries only acknowledgements (TCP) or nothing (UDP). `None` for an RDMA test.
pub fn socket_buffers(
    s: &Settings,
    left: u64,
    kernel: KernelBuffers,
) -> Option<Result<SocketBuffers, u64>> {
    let (window, grows_to) = match &s.transport {
        TransportSettings::Tcp(tcp) => (tcp.sockets.window, kernel),
        TransportSettings::Udp(udp) => {
            let own = udp.own_buffer_in_kernel(s.flows.then_some(s.nsockets as usize));
            let own = KernelBuffers {
                receive: own,
                send: own,
            };
            (udp.sockets.window, own)
        }
        TransportSettings::Rdma(_) => return None,
    };
    let per_stream = u64::from(s.nsockets);
    let both_ways = s.workload.mprtt();
    let (mut sending, mut receiving) = (0u64, 0u64);
    for k in 0..s.nstreams {
        if both_ways || s.server_sends_on(k) {
            sending += per_stream;
        }
        if both_ways || !s.server_sends_on(k) {
            receiving += per_stream;
        }
    }
    let buffers = sending + receiving;
    if let Some(window) = window {
        let bytes = buffers.saturating_mul(2 * u64::from(window));
        return Some(match bytes <= left {
            true => Ok(SocketBuffers { bytes, cap: None }),
            false => Err(bytes),
        });
    }
    let grown = sending * grows_to.send + receiving * grows_to.receive;
    let share = left / buffers.max(1);
    Some(if grown <= left {
        Ok(SocketBuffers {
            bytes: grown,
            cap: None,
        })
    } else if share >= LEAST_SOCKET_BUFFER {
        Ok(SocketBuffers {
            bytes: buffers * share,
            cap: Some(share),
        })
    } else {
        Err(buffers * LEAST_SOCKET_BUFFER)
    })
}

/// A test asked for more than the server allows.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum LimitError {
    #[error(
        "the test would send {asked} MB in total but this server allows at most {max} MB \
         per test (--max-mb)"
    )]
    Mb { asked: u64, max: u64 },
    #[error(
        "the test asks for {asked} streams{} but this server allows at most {max} \
         (--max-streams)",
        if *.bidir { " (--bidir: half of them each way)" } else { "" }
    )]
    Streams { asked: u32, max: u32, bidir: bool },
    #[error(
        "the test asks for {asked} data sockets (streams × sockets) but this server allows \
         at most {max} (--max-sockets)"
    )]
    Sockets { asked: u64, max: u32 },
    #[error(
        "the test asks to run {asked_ms} ms but this server allows at most {max_ms} ms per \
         test (--max-time)"
    )]
    Time { asked_ms: u64, max_ms: u64 },
    #[error(
        "the test needs {asked} MiB of the server for its packet buffers, latency histograms, \
         threads and the kernel's socket buffers (by its streams, sockets, packet size, -i \
         and -w) but this server allows at most {max} MiB per test (--max-memory)"
    )]
    Memory { asked: u64, max: u64 },
    #[error(
        "the test asks for {asked} bit/s in total (--bitrate × streams) but this server \
         allows at most {max} bit/s (--max-rate)"
    )]
    Rate { asked: u64, max: u64 },
}

impl Limits {
    /// The buffer, each way, the server holds each of a TCP or UDP test's data sockets to, so
    /// that what the kernel holds for them stays within `--max-memory` (see
    /// [`socket_buffers`]); `None` where autotuning fits or `-w` sets it.
    pub fn socket_buffer_cap(&self, s: &Settings) -> Option<u64> {
        let budget = self.max_memory_mib.saturating_mul(1 << 20);
        let left = budget.saturating_sub(server_memory_bytes(s));
        socket_buffers(s, left, KernelBuffers::of_host())?.ok()?.cap
    }

    /// Checks validated settings against the limits; the first one exceeded is returned.
    pub fn check(&self, s: &Settings) -> Result<(), LimitError> {
        if let Some(max) = self.max_streams {
            if s.nstreams > max {
                return Err(LimitError::Streams {
                    asked: s.nstreams,
                    max,
                    bidir: s.first_server_stream().is_some(),
                });
            }
        }
        let sockets = u64::from(s.nstreams) * u64::from(s.nsockets);
        if sockets > u64::from(self.max_sockets) {
            return Err(LimitError::Sockets {
                asked: sockets,
                max: self.max_sockets,
            });
        }
        let memory = server_memory_bytes(s);
        let budget = self.max_memory_mib.saturating_mul(1 << 20);
        let kernel =
            match socket_buffers(s, budget.saturating_sub(memory), KernelBuffers::of_host()) {
                Some(Ok(buffers)) => buffers.bytes,
                Some(Err(needed)) => needed,
                None => 0,
            };
        let memory = memory.saturating_add(kernel);
        if memory > budget {
            return Err(LimitError::Memory {
                asked: memory.div_ceil(1 << 20),
                max: self.max_memory_mib,
            });
        }
        if let (Some(max), None) = (self.max_mb, s.time_ms) {
            let asked = s.mb.saturating_mul(u64::from(s.nstreams));
            if asked > max {
                return Err(LimitError::Mb { asked, max });
            }
        }
        if let (Some(max), Some(rate)) = (self.max_rate, s.rate_bps) {
            let asked = rate.saturating_mul(u64::from(s.nstreams));
            if asked > max {
                return Err(LimitError::Rate { asked, max });
            }
        }
        if let (Some(max), Some(asked_ms)) = (self.max_time, s.time_ms) {
            let max_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
            if asked_ms > max_ms {
                return Err(LimitError::Time { asked_ms, max_ms });
            }
        }
        Ok(())
    }
}

/// Refuses a `-b` so slow that a stream's data stops for nearly `idle`, the time-out
/// after which either end gives up on a test whose data stopped (`--idle-timeout`): the
/// longest silence is one packet's time at the rate, or the whole of a shorter
/// time-bounded test. (Nearly: a packet due just before the time-out may arrive after it.)
pub fn check_paced_silence(s: &Settings, idle: Duration) -> Result<(), String> {
    let Some(rate) = s.rate_bps else {
        return Ok(());
    };
    let pkt = u64::from(s.pktsize);
    let gap = Duration::from_secs_f64(pkt as f64 * 8.0 / rate.max(1) as f64);
    let silence = match (s.time_ms, s.byte_limit()) {
        (Some(ms), _) => gap.min(Duration::from_millis(ms)),
        (None, Some(bytes)) if bytes > pkt => gap,
        _ => return Ok(()),
    };
    let allowed = idle.mul_f64(0.9);
    if silence < allowed {
        return Ok(());
    }
    let largest = (rate as f64 * allowed.as_secs_f64() / 8.0) as u64;
    let smaller = match largest {
        0 => String::new(),
        1 => "1-byte packets (-l 1), ".to_string(),
        n => format!("packets of at most {n} bytes (-l), "),
    };
    Err(format!(
        "at -b {} a {pkt}-byte packet goes every {:.1}s, but each end gives up on a test \
         whose data stops for {}s (--idle-timeout): use {smaller}a higher -b, or a longer \
         --idle-timeout on both ends",
        crate::units::bit_rate(rate as f64 / 8.0),
        gap.as_secs_f64(),
        idle.as_secs_f64()
    ))
}

/// Paces the reading of one test's data to a rate cap, across all its streams.
#[derive(Debug)]
pub struct RatePacer {
    bits_per_sec: u64,
    start: Instant,
    bytes: AtomicU64,
}

/// Longest single sleep while pacing, so an abort is noticed in time.
const PACE_SLICE: Duration = Duration::from_millis(50);

impl RatePacer {
    /// A pacer for `bits_per_sec`, starting now.
    pub fn new(bits_per_sec: u64) -> RatePacer {
        RatePacer {
            bits_per_sec: bits_per_sec.max(1),
            start: Instant::now(),
            bytes: AtomicU64::new(0),
        }
    }

    /// Counts `n` bytes just read and sleeps until the cap allows them, or `abort`.
    pub fn pace(&self, n: usize, abort: &AtomicBool) {
        let total = self.bytes.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        self.wait(total, None, abort);
    }

    /// Sleeps until `total` bytes are due at the rate, but no later than `wake` (if
    /// given) or `abort`. Returns whether they are due (or `abort` is set).
    pub fn wait(&self, total: u64, wake: Option<Instant>, abort: &AtomicBool) -> bool {
        let due_secs = total as f64 * 8.0 / self.bits_per_sec as f64;
        let due = self.start + Duration::from_secs_f64(due_secs.min(1e9));
        loop {
            let now = Instant::now();
            if now >= due || abort.load(Ordering::Relaxed) {
                return true;
            }
            if wake.is_some_and(|w| now >= w) {
                return false;
            }
            let until = wake.map_or(due, |w| w.min(due));
            std::thread::sleep((until - now).min(PACE_SLICE));
        }
    }
}

/// Why the server stopped a running test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// No data moved for the idle time-out.
    Idle(Duration),
    /// The test ran past `--max-time`.
    MaxTime(Duration),
    /// A time-bounded test moved more than `--max-mb` (MB).
    MaxMb(u64),
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::Idle(d) => write!(
                f,
                "no data moved for {}s: the client is gone or stuck (--idle-timeout)",
                d.as_secs_f64()
            ),
            StopReason::MaxTime(d) => write!(
                f,
                "test aborted: it ran past this server's limit of {}s per test (--max-time)",
                d.as_secs_f64()
            ),
            StopReason::MaxMb(mb) => write!(
                f,
                "test aborted: it moved more than this server's limit of {mb} MB per test \
                 (--max-mb)"
            ),
        }
    }
}

/// A byte counter on cache lines of its own: each receiving thread stores to its counter
/// after every read, and counters sharing a line would bounce it between the cores
/// (128 bytes: the adjacent-line prefetcher pairs 64-byte lines).
#[derive(Debug, Default)]
#[repr(align(128))]
struct StreamProgress(AtomicU64);

/// What the receiving threads of one test share with the session thread: bytes received
/// per stream (each thread writes only its own counter) and the rate cap.
#[derive(Debug)]
pub struct TestWatch {
    progress: Vec<StreamProgress>,
    pacer: Option<RatePacer>,
    abort: Arc<AtomicBool>,
}

impl TestWatch {
    /// A watch over `nstreams` streams, pacing to `max_rate` bits/s if given; `abort`
    /// cuts pacing short.
    pub fn new(nstreams: usize, max_rate: Option<u64>, abort: Arc<AtomicBool>) -> TestWatch {
        TestWatch {
            progress: (0..nstreams).map(|_| StreamProgress::default()).collect(),
            pacer: max_rate.map(RatePacer::new),
            abort,
        }
    }

    /// What every stream has counted so far, together.
    pub fn total(&self) -> u64 {
        self.progress
            .iter()
            .map(|p| p.0.load(Ordering::Relaxed))
            .sum()
    }

    /// What stream `index`'s receiver has counted so far.
    pub fn stream_total(&self, index: usize) -> u64 {
        self.progress
            .get(index)
            .map_or(0, |p| p.0.load(Ordering::Relaxed))
    }

    /// Called by stream `index`'s receiver after `n` more bytes, `total` in all.
    pub fn received(&self, index: usize, total: u64, n: usize) {
        if let Some(p) = self.progress.get(index) {
            p.0.store(total, Ordering::Relaxed);
        }
        if let Some(pacer) = &self.pacer {
            pacer.pace(n, &self.abort);
        }
    }
}

/// Watches a running test from the session thread: total bytes received and elapsed
/// time.
pub struct Watchdog<'a> {
    progress: &'a [StreamProgress],
    idle: Duration,
    max_time: Option<Duration>,
    /// Most MB the test may move (time-bounded tests, whose volume is not announced).
    max_mb: Option<u64>,
    started: Instant,
    last_total: u64,
    last_change: Instant,
}

impl<'a> Watchdog<'a> {
    /// Starts watching now.
    pub fn new(
        watch: &'a TestWatch,
        idle: Duration,
        max_time: Option<Duration>,
        max_mb: Option<u64>,
    ) -> Self {
        let now = Instant::now();
        Watchdog {
            progress: &watch.progress,
            idle,
            max_time,
            max_mb,
            started: now,
            last_total: 0,
            last_change: now,
        }
    }

    /// Whether the test must be stopped now.
    pub fn check(&mut self) -> Option<StopReason> {
        let now = Instant::now();
        if let Some(max) = self.max_time {
            if now.duration_since(self.started) > max {
                return Some(StopReason::MaxTime(max));
            }
        }
        let total: u64 = self
            .progress
            .iter()
            .map(|p| p.0.load(Ordering::Relaxed))
            .sum();
        if let Some(mb) = self.max_mb {
            if total > mb.saturating_mul(crate::settings::MB) {
                return Some(StopReason::MaxMb(mb));
            }
        }
        if total != self.last_total {
            self.last_total = total;
            self.last_change = now;
        } else if now.duration_since(self.last_change) > self.idle {
            return Some(StopReason::Idle(self.idle));
        }
        None
    }
}

/// Hands the memory the allocator keeps free back to the system (glibc keeps what
/// freed threads and large frees leave in its arenas until asked).
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_open_files_limit_is_raised_to_the_hard_limit() {
        let now = raise_open_files_limit().expect("rlimit");
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `limit` is a valid rlimit the call fills in.
        assert_eq!(
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
            0
        );
        assert_eq!((limit.rlim_cur, limit.rlim_max), (now, now));
    }
    use crate::workload::{Reply, Workload};

    #[test]
    fn a_rate_that_leaves_the_data_silent_past_the_idle_time_out_is_refused() {
        let idle = Duration::from_secs(10);
        let paced = |rate, pktsize, time_ms, mb| Settings {
            rate_bps: Some(rate),
            pktsize,
            time_ms,
            mb,
            ..Settings::default()
        };
        // 32 KiB at 1 kbit/s: one packet every 262 s.
        let e = check_paced_silence(&paced(1000, 32768, Some(10_000), 1), idle).expect_err("slow");
        assert!(
            e.contains("every 262.1s") && e.contains("at most 1125 bytes (-l)"),
            "{e}"
        );
        assert!(e.contains("--idle-timeout"), "{e}");
        // A test shorter than the time-out ends before anything gives up.
        assert_eq!(
            check_paced_silence(&paced(1000, 32768, Some(1_000), 1), idle),
            Ok(())
        );
        // One packet per stream leaves no silence between packets.
        assert_eq!(
            check_paced_silence(&paced(1000, 1 << 20, None, 1), idle),
            Ok(())
        );
        let e = check_paced_silence(&paced(1000, 1 << 19, None, 1), idle).expect_err("two");
        assert!(e.contains("every 4194.3s"), "{e}");
        // 13.1 s between packets: too long for 10 s, not for 30 s.
        let s = paced(20_000, 32768, Some(60_000), 1);
        assert!(check_paced_silence(&s, idle).is_err());
        assert_eq!(check_paced_silence(&s, Duration::from_secs(30)), Ok(()));
        // Within nine tenths of the time-out: 8.7 s passes, 9.2 s does not.
        assert_eq!(
            check_paced_silence(&paced(30_000, 32768, None, 4), idle),
            Ok(())
        );
        assert!(check_paced_silence(&paced(28_500, 32768, None, 4), idle).is_err());
        let e = check_paced_silence(&paced(1, 32768, None, 4), idle).expect_err("1 bit/s");
        assert!(e.contains("1-byte packets (-l 1)"), "{e}");
        assert_eq!(check_paced_silence(&Settings::default(), idle), Ok(()));
    }

    #[test]
    fn each_limit_is_named_when_exceeded() {
        let limits = Limits {
            max_mb: Some(100),
            max_streams: Some(2),
            max_sockets: 8,
            ..Limits::default()
        };
        let s = |nstreams, nsockets, mb| Settings {
            nstreams,
            nsockets,
            mb,
            ..Settings::default()
        };
        assert_eq!(limits.check(&s(2, 4, 50)), Ok(()));
        let e = limits.check(&s(3, 1, 1)).expect_err("streams");
        assert!(e.to_string().contains("--max-streams"), "{e}");
        assert!(!e.to_string().contains("--bidir"), "{e}");
        let bidir = Settings {
            workload: Workload::Bidir,
            ..s(4, 1, 1)
        };
        let e = limits.check(&bidir).expect_err("bidir streams");
        assert!(
            e.to_string()
                .starts_with("the test asks for 4 streams (--bidir: half of them each way)"),
            "{e}"
        );
        let e = limits.check(&s(2, 5, 1)).expect_err("sockets");
        assert!(e.to_string().contains("--max-sockets"), "{e}");
        let e = limits.check(&s(2, 1, 51)).expect_err("mb");
        assert!(e.to_string().contains("102 MB"), "{e}");
        assert!(e.to_string().contains("--max-mb"), "{e}");
        let timed = |ms| Settings {
            time_ms: Some(ms),
            mb: 1 << 20,
            ..Settings::default()
        };
        let capped = Limits {
            max_time: Some(Duration::from_secs(10)),
            ..limits.clone()
        };
        // A time-bounded run announces no volume: --max-mb is the watchdog's to enforce.
        assert_eq!(capped.check(&timed(10_000)), Ok(()));
        let e = capped.check(&timed(10_001)).expect_err("over --max-time");
        assert!(e.to_string().contains("--max-time"), "{e}");
    }

    #[test]
    fn a_test_beyond_the_memory_limit_is_refused_whatever_sets_its_size() {
        use crate::transport::rdma::settings::RdmaSettings;
        use crate::transport::settings::TransportSettings;
        use crate::transport::udp::settings::UdpSettings;
        let limits = Limits::default();
        let run = |nstreams, pktsize, transport| Settings {
            nstreams,
            pktsize,
            transport,
            ..Settings::default()
        };
        let tcp = || TransportSettings::Tcp(Default::default());
        let udp = || TransportSettings::Udp(UdpSettings::default());
        let rdma = || TransportSettings::Rdma(RdmaSettings::default());
        // The defaults, and many streams of small packets, fit.
        assert_eq!(limits.check(&Settings::default()), Ok(()));
        assert_eq!(limits.check(&run(256, 32 << 10, tcp())), Ok(()));
        assert_eq!(limits.check(&run(256, 1400, udp())), Ok(()));
        // The default UDP batch shrinks to fit; large packets on many sockets do not.
        assert_eq!(limits.check(&run(64, 65_000, udp())), Ok(()));
        for (settings, what) in [
            (
                run(16, 32 << 20, tcp()),
                "TCP: 16 streams of 32 MiB packets",
            ),
            (run(64, 1 << 20, rdma()), "RDMA: 64 rings of 1 MiB slots"),
            (
                run(
                    64,
                    8_000,
                    TransportSettings::Udp(UdpSettings {
                        batch: Some(512),
                        ..UdpSettings::default()
                    }),
                ),
                "UDP: batches of 512 datagrams of 8 kB on 64 streams",
            ),
        ] {
            let e = limits.check(&settings).expect_err(what);
            assert!(matches!(e, LimitError::Memory { .. }), "{what}: {e}");
            assert!(e.to_string().contains("--max-memory"), "{what}: {e}");
            // TCP's and UDP's sockets each need their least kernel buffer besides.
            let least = u64::from(settings.nstreams) * LEAST_SOCKET_BUFFER;
            let asked = server_memory_bytes(&settings) + least;
            let raised = Limits {
                max_memory_mib: asked.div_ceil(1 << 20),
                ..Limits::default()
            };
            assert_eq!(raised.check(&settings), Ok(()), "{what}");
        }
        // Intervals hold each histogram three times: 216 streams of them fit with their
        // sockets' kernel buffers, 220 not.
        let intervals = |nstreams| Settings {
            interval_ms: Some(512),
            ..run(nstreams, 32 << 10, tcp())
        };
        assert_eq!(limits.check(&intervals(216)), Ok(()));
        assert!(server_memory_bytes(&intervals(216)) > 3 * 216 * histogram_bytes());
        let e = limits
            .check(&intervals(220))
            .expect_err("220 streams with -i");
        assert!(matches!(e, LimitError::Memory { .. }), "{e}");
        // A server that sends through sender threads counts each one's figures.
        let reverse = |nsockets| Settings {
            nsockets,
            workload: Workload::Reverse,
            ..run(64, 32 << 10, tcp())
        };
        let one = server_memory_bytes(&reverse(1));
        let four = server_memory_bytes(&reverse(4));
        assert!(four - one > 64 * 4 * histogram_bytes(), "{one} {four}");
        // Kernel receive times: two distributions more per stream.
        let stamped = |rx_timestamps| {
            server_memory_bytes(&run(
                8,
                1400,
                TransportSettings::Udp(UdpSettings {
                    rx_timestamps,
                    ..UdpSettings::default()
                }),
            ))
        };
        assert_eq!(stamped(true) - stamped(false), 8 * 2 * histogram_bytes());
    }

    #[test]
    fn the_kernels_socket_buffers_count_and_are_shared_out_within_the_budget() {
        use crate::transport::settings::TransportSettings;
        const MIB: u64 = 1 << 20;
        let kernel = KernelBuffers {
            receive: 6 * MIB,
            send: 4 * MIB,
        };
        let tcp = |nstreams, nsockets, window: Option<u32>, workload| {
            let mut transport = crate::transport::tcp::settings::TcpSettings::default();
            transport.sockets.window = window;
            Settings {
                nstreams,
                nsockets,
                workload,
                transport: TransportSettings::Tcp(transport),
                ..Settings::default()
            }
        };
        let bulk = |nstreams, nsockets, window| tcp(nstreams, nsockets, window, Workload::Bulk);
        // Room for autotuning's maximum: nothing held down; the receive buffer counts
        // where the server receives, the send buffer where it sends, both for MPRTT.
        let fits = |bytes| Some(Ok(SocketBuffers { bytes, cap: None }));
        assert_eq!(
            socket_buffers(&bulk(4, 1, None), 200 * MIB, kernel),
            fits(24 * MIB)
        );
        let reverse = tcp(4, 1, None, Workload::Reverse);
        assert_eq!(socket_buffers(&reverse, 200 * MIB, kernel), fits(16 * MIB));
        let rr = tcp(4, 1, None, Workload::RoundTrip(Reply::Ack));
        assert_eq!(socket_buffers(&rr, 200 * MIB, kernel), fits(40 * MIB));
        // 512 sockets share 200 MiB: 400 KiB each.
        let shared = socket_buffers(&bulk(128, 4, None), 200 * MIB, kernel)
            .expect("TCP")
            .expect("fits");
        assert_eq!(shared.cap, Some(400 << 10));
        assert!(shared.bytes <= 200 * MIB);
        // Too little for the least buffer each: refused, with what it would need.
        assert_eq!(
            socket_buffers(&bulk(256, 4, None), 100 * MIB, kernel),
            Some(Err(1024 * LEAST_SOCKET_BUFFER))
        );
        // A window counts twice, and is never held down.
        assert_eq!(
            socket_buffers(&bulk(1, 1, Some(16 << 20)), 200 * MIB, kernel),
            fits(32 * MIB)
        );
        assert_eq!(
            socket_buffers(&bulk(1, 1, Some(256 << 20)), 200 * MIB, kernel),
            Some(Err(512 * MIB))
        );
        // -w 256M is refused with the budget named.
        let e = Limits::default()
            .check(&bulk(1, 1, Some(256 << 20)))
            .expect_err("-w 256M");
        assert!(e.to_string().contains("--max-memory"), "{e}");
        assert!(e.to_string().contains("socket buffers"), "{e}");
        // UDP: fperf's own 16 MiB each way, which the kernel doubles, on each socket the
        // server receives on; shared out past the budget, and refused below the least.
        let udp = |nstreams| Settings {
            nstreams,
            transport: TransportSettings::Udp(Default::default()),
            ..Settings::default()
        };
        assert_eq!(socket_buffers(&udp(2), 200 * MIB, kernel), fits(64 * MIB));
        let shared = socket_buffers(&udp(16), 200 * MIB, kernel)
            .expect("UDP")
            .expect("shared");
        assert_eq!(shared.cap, Some(200 * MIB / 16));
        assert_eq!(
            socket_buffers(&udp(1), 0, kernel),
            Some(Err(LEAST_SOCKET_BUFFER))
        );
        let rdma = Settings {
            transport: TransportSettings::Rdma(Default::default()),
            ..Settings::default()
        };
        assert_eq!(socket_buffers(&rdma, 0, kernel), None);
    }

    #[test]
    fn watchdog_sees_idle_and_max_time() {
        let watch = TestWatch::new(2, None, Arc::default());
        let mut w = Watchdog::new(&watch, Duration::from_millis(100), None, None);
        assert_eq!(w.check(), None);
        std::thread::sleep(Duration::from_millis(60));
        watch.received(1, 10, 10);
        assert_eq!(w.check(), None);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(w.check(), None, "progress 60 ms ago");
        std::thread::sleep(Duration::from_millis(60));
        assert!(matches!(w.check(), Some(StopReason::Idle(_))));
        let mut w = Watchdog::new(&watch, Duration::from_secs(60), Some(Duration::ZERO), None);
        std::thread::sleep(Duration::from_millis(2));
        assert!(matches!(w.check(), Some(StopReason::MaxTime(_))));
        let mut w = Watchdog::new(&watch, Duration::from_secs(60), None, Some(0));
        watch.received(0, 1 << 20, 1 << 20);
        assert!(matches!(w.check(), Some(StopReason::MaxMb(0))));
    }
}
