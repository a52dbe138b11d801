//! What every STREAM is built of: time-outs and deadlines, packet buffers, the sender
//! threads and their queues, CPU affinity, epoll, the socket calls, and the per-packet
//! reply of a round-trip run with its accounting. The STREAM itself
//! ([`crate::transport::stream::Stream`]) and its options are the transport layer's:
//! each transport implements it, and what it reports of its sockets names every
//! transport's own figures.

pub mod affinity;
pub mod buffer;
pub(crate) mod epoll;
pub mod reply;
pub mod sender;
pub mod socket_calls;
pub(crate) mod sys;

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub use sys::allow_forced_buffers;

/// Default bytes per send of bulk TCP and RDMA.
pub const DEFAULT_PKTSIZE: u32 = 32768;
/// Largest bytes-per-send accepted (a buffer of this size is allocated per socket).
pub const MAX_PKTSIZE: u32 = 64 << 20;

/// How long a STREAM call may block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timeout {
    /// Do not block: fail with `WouldBlock` if the call cannot proceed at once.
    NonBlocking,
    /// Block until done or failed.
    Forever,
    /// Block at most this many milliseconds, then fail with `TimedOut`.
    Millis(u32),
}

impl Timeout {
    /// The original design's convention: 0 = do not block, negative = block forever, N = N ms.
    pub fn from_millis(ms: i64) -> Self {
        match ms {
            0 => Timeout::NonBlocking,
            m if m < 0 => Timeout::Forever,
            m => Timeout::Millis(u32::try_from(m).unwrap_or(u32::MAX)),
        }
    }

    /// Converts to a [`Deadline`] starting now.
    pub fn deadline(self) -> Deadline {
        self.deadline_from(Instant::now)
    }

    /// [`Timeout::deadline`] starting at the time `now` gives, asked only when the timeout
    /// needs a clock: a call that has just read the clock for its latency passes that
    /// reading instead of reading again.
    pub fn deadline_from(self, now: impl FnOnce() -> Instant) -> Deadline {
        match self {
            Timeout::NonBlocking => Deadline::Now,
            Timeout::Forever => Deadline::Never,
            Timeout::Millis(ms) => Deadline::At(now() + Duration::from_millis(u64::from(ms))),
        }
    }
}

/// A point in time after which a blocking call gives up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deadline {
    Now,
    Never,
    At(Instant),
}

/// Longest single sleep in `poll()`, so that blocked calls notice an abort in time.
const POLL_SLICE_MS: i32 = 100;

impl Deadline {
    /// The `poll()` timeout for the next wait, or the error to return if none is left.
    pub(crate) fn poll_ms(self) -> io::Result<i32> {
        self.poll_ms_from(Instant::now)
    }

    /// [`Deadline::poll_ms`] as of the time `now` gives, asked only for `At`.
    pub(crate) fn poll_ms_from(self, now: impl FnOnce() -> Instant) -> io::Result<i32> {
        match self {
            Deadline::Now => Err(io::ErrorKind::WouldBlock.into()),
            Deadline::Never => Ok(POLL_SLICE_MS),
            Deadline::At(t) => {
                let left = t.saturating_duration_since(now());
                if left.is_zero() {
                    return Err(io::ErrorKind::TimedOut.into());
                }
                let ms = left.as_millis().min(POLL_SLICE_MS as u128) as i32;
                Ok(ms.max(1))
            }
        }
    }

    /// Whether the deadline has passed (never true for `Never`).
    pub fn expired(self) -> bool {
        match self {
            Deadline::Now => true,
            Deadline::Never => false,
            Deadline::At(t) => Instant::now() >= t,
        }
    }
}

/// Fails with `Interrupted` once `flag` is set.
#[inline]
pub(crate) fn check_abort(flag: &AtomicBool) -> io::Result<()> {
    if flag.load(Ordering::Relaxed) {
        Err(io::Error::new(io::ErrorKind::Interrupted, "stream aborted"))
    } else {
        Ok(())
    }
}

/// `addr` with an IPv4-mapped IPv6 address (from a dual-stack socket) shown as IPv4.
pub fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// A socket address for reports: canonical, or `?` when the socket cannot say.
pub(crate) fn addr_text(addr: io::Result<SocketAddr>) -> String {
    addr.map_or_else(|_| "?".into(), |a| canonical(a).to_string())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The local address of the socket behind `stream`'s raw fd, as reports show one.
    pub(crate) fn bound_addr(stream: &impl std::os::fd::AsRawFd) -> String {
        // SAFETY: the fd stays open while `stream` lives; the SockRef does not close it.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(stream.as_raw_fd()) };
        let local = socket2::SockRef::from(&fd).local_addr().expect("local");
        canonical(local.as_socket().expect("inet")).to_string()
    }

    #[test]
    fn a_deadline_starts_at_the_reading_it_is_given_and_reads_no_clock_without_one() {
        let t0 = Instant::now();
        assert_eq!(
            Timeout::Millis(250).deadline_from(|| t0),
            Deadline::At(t0 + Duration::from_millis(250))
        );
        let no_clock = || -> Instant { panic!("a timeout without a deadline read the clock") };
        assert_eq!(Timeout::Forever.deadline_from(no_clock), Deadline::Never);
        assert_eq!(Timeout::NonBlocking.deadline_from(no_clock), Deadline::Now);
    }

    #[test]
    fn poll_time_is_what_is_left_as_of_the_reading_it_is_given() {
        let t0 = Instant::now();
        let deadline = Deadline::At(t0 + Duration::from_millis(250));
        // More than a slice left: one slice.
        assert_eq!(deadline.poll_ms_from(|| t0).unwrap(), POLL_SLICE_MS);
        assert_eq!(
            deadline
                .poll_ms_from(|| t0 + Duration::from_millis(240))
                .unwrap(),
            10
        );
        // Under a millisecond left still sleeps one (poll(0) would spin).
        assert_eq!(
            deadline
                .poll_ms_from(|| t0 + Duration::from_micros(249_500))
                .unwrap(),
            1
        );
        let passed = deadline.poll_ms_from(|| t0 + Duration::from_millis(250));
        assert_eq!(passed.unwrap_err().kind(), io::ErrorKind::TimedOut);
        let no_clock = || -> Instant { panic!("a deadline that is not a time read the clock") };
        assert_eq!(
            Deadline::Never.poll_ms_from(no_clock).unwrap(),
            POLL_SLICE_MS
        );
        let now = Deadline::Now.poll_ms_from(no_clock);
        assert_eq!(now.unwrap_err().kind(), io::ErrorKind::WouldBlock);
    }
}
