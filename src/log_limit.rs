//! A bound on the log lines that peers can provoke (a refused or failed connection
//! each): a flood of connections must not flood the log, where it would bury the
//! reports and, under journald, use up the service's rate limit for every line.
//!
//! At most `burst` lines are written in each window; the rest are counted, and the
//! count is logged before the next line written, as the kernel's `printk_ratelimit`
//! does.

use std::time::{Duration, Instant};

/// The window of the default limit, the one for lines peers provoke.
pub const PEER_LOG_WINDOW: Duration = Duration::from_secs(10);
/// The lines per window of the default limit.
pub const PEER_LOG_BURST: u32 = 100;

/// What to do with one line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogVerdict {
    /// Write it, after saying that `left_out` lines were left out before it (if any).
    Write { left_out: u64 },
    /// Leave it out. `first`: the first line left out in its window, which the log
    /// announces, so that a flood that stops is seen before the count is.
    LeaveOut { first: bool },
}

/// Counts the lines of one log against its limit. The default is the limit of the
/// lines peers provoke: [`PEER_LOG_BURST`] per [`PEER_LOG_WINDOW`].
#[derive(Debug)]
pub struct LogLimit {
    window: Duration,
    burst: u32,
    window_start: Option<Instant>,
    written: u32,
    left_out: u64,
}

impl Default for LogLimit {
    fn default() -> LogLimit {
        LogLimit::new(PEER_LOG_WINDOW, PEER_LOG_BURST)
    }
}

impl LogLimit {
    /// At most `burst` lines in each `window`.
    pub fn new(window: Duration, burst: u32) -> LogLimit {
        LogLimit {
            window,
            burst,
            window_start: None,
            written: 0,
            left_out: 0,
        }
    }

    /// The window, in whole seconds (for the log's own lines).
    pub fn window_secs(&self) -> u64 {
        self.window.as_secs()
    }

    /// The lines per window.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// Counts `lines` that never reached this log (left out before it) with those it
    /// left out itself.
    pub fn count_left_out(&mut self, lines: u64) {
        self.left_out = self.left_out.saturating_add(lines);
    }

    /// Whether a line that comes at `now` is written.
    pub fn admit(&mut self, now: Instant) -> LogVerdict {
        let expired = self.window_start.map_or(true, |start| {
            now.saturating_duration_since(start) >= self.window
        });
        if expired {
            self.window_start = Some(now);
            self.written = 0;
        }
        if self.written < self.burst {
            self.written += 1;
            return LogVerdict::Write {
                left_out: std::mem::take(&mut self.left_out),
            };
        }
        let first = self.written == self.burst;
        if first {
            // Marks the announcement made; later lines of the window are only counted.
            self.written += 1;
        }
        self.left_out = self.left_out.saturating_add(1);
        LogVerdict::LeaveOut { first }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_written_then_lines_are_counted_until_the_window_ends() {
        let t0 = Instant::now();
        let mut limit = LogLimit::new(Duration::from_secs(10), 3);
        for _ in 0..3 {
            assert_eq!(limit.admit(t0), LogVerdict::Write { left_out: 0 });
        }
        assert_eq!(limit.admit(t0), LogVerdict::LeaveOut { first: true });
        for _ in 0..4 {
            let later = t0 + Duration::from_secs(9);
            assert_eq!(limit.admit(later), LogVerdict::LeaveOut { first: false });
        }
        // A new window: the count comes with its first line, and only once.
        let next = t0 + Duration::from_secs(10);
        assert_eq!(limit.admit(next), LogVerdict::Write { left_out: 5 });
        assert_eq!(limit.admit(next), LogVerdict::Write { left_out: 0 });
    }

    #[test]
    fn lines_left_out_before_the_log_are_counted_with_the_next_line() {
        let t0 = Instant::now();
        let mut limit = LogLimit::default();
        limit.count_left_out(7);
        assert_eq!(limit.admit(t0), LogVerdict::Write { left_out: 7 });
        assert_eq!(limit.admit(t0), LogVerdict::Write { left_out: 0 });
    }

    #[test]
    fn a_quiet_log_writes_every_line() {
        let t0 = Instant::now();
        let mut limit = LogLimit::default();
        for i in 0..1000u32 {
            let at = t0 + PEER_LOG_WINDOW / PEER_LOG_BURST * i;
            assert_eq!(limit.admit(at), LogVerdict::Write { left_out: 0 }, "{i}");
        }
    }
}
