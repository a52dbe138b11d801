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

/// A run bounded by volume that its first second's rate says will last longer than
/// this gets a note on stderr.
pub const LONG_RUN: Duration = Duration::from_secs(300);

/// After the first second of a run bounded by volume (`-m`, `--transactions`), a note
/// on stderr if at that second's rate the run would last more than [`LONG_RUN`]: how
/// long, and how to bound it. Whatever stdout and stderr are.
pub struct Forecast {
    bounds: Bounds,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Forecast {
    /// A forecast for a run of `settings`; `None` for a run bounded by time.
    pub fn new(settings: &Settings) -> Option<Forecast> {
        let bounds = Bounds::of(settings);
        bounds.time.is_none().then(|| Forecast {
            bounds,
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        })
    }

    fn finish(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Sink for Forecast {
    fn started(&mut self, watch: &Arc<TestWatch>) {
        let (watch, stop, bounds) = (Arc::clone(watch), Arc::clone(&self.stop), self.bounds);
        self.thread = std::thread::Builder::new()
            .name("fperf-forecast".into())
            .spawn(move || {
                let start = Instant::now();
                while start.elapsed() < EVERY {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                let elapsed = start.elapsed();
                let moved = watch.total();
                let rate = moved as f64 / elapsed.as_secs_f64();
                if let Some(note) = bounds.long_run_note(elapsed, moved, rate) {
                    // Over the progress line, if one is drawn: it is drawn again.
                    use std::io::IsTerminal;
                    let erase = if std::io::stderr().is_terminal() {
                        ERASE_LINE
                    } else {
                        ""
                    };
                    eprintln!("{erase}fperf: note: {note}");
                }
            })
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

impl Drop for Forecast {
    fn drop(&mut self) {
        self.finish();
    }
}

impl Bounds {
    /// What to tell the user when, after `elapsed`, having moved `moved` bytes at `rate`
    /// bytes/s, the run would last longer than [`LONG_RUN`].
    fn long_run_note(&self, elapsed: Duration, moved: u64, rate: f64) -> Option<String> {
        let bytes = self.bytes?;
        let total = elapsed + self.left(elapsed, moved, rate)?;
        (total > LONG_RUN).then(|| {
            format!(
                "at its first second's rate ({}) this run of {} takes about {}; \
                 --time SECS or a smaller -m bounds it (Ctrl-C ends it with the figures so far)",
                bit_rate(rate),
                size(bytes as f64),
                duration_words(total)
            )
        })
    }
}

/// `d` in the largest unit that keeps it above 1: "7 min", "2.2 h", "3.1 days".
fn duration_words(d: Duration) -> String {
    let secs = d.as_secs_f64();
    match secs {
        s if s < 120.0 => format!("{s:.0} s"),
        s if s < 7200.0 => format!("{:.0} min", s / 60.0),
        s if s < 172_800.0 => format!("{:.1} h", s / 3600.0),
        s => format!("{:.1} days", s / 86_400.0),
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

    #[test]
    fn a_run_forecast_past_five_minutes_says_so_and_how_to_bound_it() {
        let ten_gib = Bounds {
            time: None,
            bytes: Some(10 << 30),
        };
        let second = Duration::from_secs(1);
        // 1 MB/s: about 3 hours.
        let note = ten_gib
            .long_run_note(second, 1 << 20, f64::from(1 << 20))
            .expect("a note");
        assert!(note.contains("2.8 h") && note.contains("--time"), "{note}");
        // 1 GB/s: 10 s.
        assert_eq!(
            ten_gib.long_run_note(second, 1 << 30, f64::from(1 << 30)),
            None
        );
        assert_eq!(duration_words(Duration::from_secs(400)), "7 min");
        assert_eq!(duration_words(Duration::from_secs(400_000)), "4.6 days");
    }
}
