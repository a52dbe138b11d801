//! A one-line progress indicator for a terminal: the bytes moved so far, the rate over
//! the last second, the time elapsed and, for a run bounded by `-m` or `--time`, about
//! how long is left. It is rewritten about once a second and erased before the report,
//! so it never reaches a pipe or a file (the command line feeds it only a terminal).

use super::{RunEnd, Sink};
use crate::limits::TestWatch;
use crate::settings::Settings;
use crate::units::{bit_rate, size};
use anyhow::Result;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the line is rewritten.
const EVERY: Duration = Duration::from_secs(1);
/// Erases the line the cursor is on: back to its start, then clear to its end.
pub const ERASE_LINE: &str = "\r\x1b[K";

/// The indicator, drawn on `out` by a thread of its own while the streams run.
pub struct Progress {
    settings: Settings,
    out: Option<Box<dyn Write + Send>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// An indicator for a run of `settings`, drawn on `out` (a terminal).
    pub fn new(settings: &Settings, out: Box<dyn Write + Send>) -> Progress {
        Progress {
            settings: settings.clone(),
            out: Some(out),
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        }
    }

    /// Stops the thread, which erases its line.
    fn finish(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Sink for Progress {
    fn started(&mut self, watch: &Arc<TestWatch>) {
        let Some(out) = self.out.take() else { return };
        let (watch, stop) = (Arc::clone(watch), Arc::clone(&self.stop));
        let bounds = Bounds::of(&self.settings);
        self.thread = std::thread::Builder::new()
            .name("fperf-progress".into())
            .spawn(move || draw(out, &watch, &stop, bounds))
            .ok();
    }

    fn end(&mut self, _run: &RunEnd) -> Result<()> {
        self.finish();
        Ok(())
    }

    fn close(&mut self) -> Result<()> {
        self.finish();
        Ok(())
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// What bounds the run: its time, or the bytes all its streams move.
#[derive(Clone, Copy)]
struct Bounds {
    time: Option<Duration>,
    bytes: Option<u64>,
}

impl Bounds {
    fn of(settings: &Settings) -> Bounds {
        Bounds {
            time: settings.time_ms.map(Duration::from_millis),
            bytes: settings
                .byte_limit()
                .map(|b| b.saturating_mul(u64::from(settings.nstreams))),
        }
    }

    /// About how long is left after `elapsed`, having moved `moved` bytes at `rate`
    /// bytes/s.
    fn left(&self, elapsed: Duration, moved: u64, rate: f64) -> Option<Duration> {
        match (self.time, self.bytes) {
            (Some(time), _) => Some(time.saturating_sub(elapsed)),
            (None, Some(bytes)) if rate > 0.0 => Some(Duration::from_secs_f64(
                bytes.saturating_sub(moved) as f64 / rate,
            )),
            _ => None,
        }
    }
}

/// Rewrites the line every [`EVERY`] until `stop`, then erases it.
fn draw(mut out: Box<dyn Write + Send>, watch: &TestWatch, stop: &AtomicBool, bounds: Bounds) {
    let start = Instant::now();
    let (mut then, mut before) = (start, 0u64);
    let mut next = start + EVERY;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now < next {
            std::thread::sleep((next - now).min(Duration::from_millis(50)));
            continue;
        }
        next += EVERY;
        let moved = watch.total();
        let secs = now.saturating_duration_since(then).as_secs_f64();
        let rate = if secs > 0.0 {
            moved.saturating_sub(before) as f64 / secs
        } else {
            0.0
        };
        (then, before) = (now, moved);
        let elapsed = now.saturating_duration_since(start);
        let left = bounds
            .left(elapsed, moved, rate)
            .map_or_else(String::new, |l| {
                format!(", about {:.0}s left", l.as_secs_f64())
            });
        let _ = write!(
            out,
            "{ERASE_LINE}{} so far, {} now, {}s{left}",
            size(moved as f64),
            bit_rate(rate),
            elapsed.as_secs()
        );
        let _ = out.flush();
    }
    let _ = write!(out, "{ERASE_LINE}");
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left_follows_the_runs_bound() {
        let timed = Bounds {
            time: Some(Duration::from_secs(10)),
            bytes: None,
        };
        assert_eq!(
            timed.left(Duration::from_secs(3), 0, 0.0),
            Some(Duration::from_secs(7))
        );
        let sized = Bounds {
            time: None,
            bytes: Some(1000),
        };
        assert_eq!(
            sized.left(Duration::from_secs(1), 400, 100.0),
            Some(Duration::from_secs(6))
        );
        assert_eq!(sized.left(Duration::from_secs(1), 400, 0.0), None);
    }
}
