//! Outputs: every way a client's run is shown, each one [`Sink`] fed the same typed
//! events (the run started, an interval ended, the run ended).
//!
//! - [`text::Text`]: the human report, with interval lines;
//! - [`json::Json`]: one JSON document at the end (`--json`);
//! - [`iperf3_json::Iperf3Json`]: the same in iperf3's `-J` layout (`--json=iperf3`);
//! - [`json_stream::JsonStream`]: one JSON object per event and line (`--json-stream`);
//! - [`csv::Csv`]: a row per stream and interval (`--csv`);
//! - [`plot::Plot`]: the latency distribution as an SVG picture (`--plot`);
//! - [`sfnt::Sfnt`]: a ping-pong sweep in sfnt-pingpong's table (`--table sfnt`);
//! - [`progress::Progress`]: a one-line indicator on a terminal while the run goes on;
//! - [`openmetrics::OpenMetrics`]: the figures as Prometheus metrics (`fperf exporter`).
//!
//! What the sinks render, and the server's and a sweep's reports with them:
//! [`report`], the human-readable report; [`json_document`], the JSON documents and
//! their schema; [`csv_rows`], the CSV rows; [`svg`], the pictures.
//!
//! A new output is one new file implementing [`Sink`]. Sinks write only to the writer
//! or file they are given: the library never prints on its own.

pub mod csv;
pub mod csv_rows;
pub mod iperf3_json;
pub mod json;
pub mod json_document;
pub mod json_stream;
pub mod openmetrics;
pub mod plot;
pub mod progress;
pub mod report;
pub mod sfnt;
pub mod svg;
pub mod text;
pub mod under_load;

use crate::client::{ClientOutcome, RunObserver, StreamInfo};
use crate::output::json_document::StartTime;
use crate::results::IntervalResult;
use crate::settings::Settings;
use crate::transport::Role;
use anyhow::Result;

/// A run whose data streams are connected.
pub struct RunStart<'a> {
    pub settings: &'a Settings,
    pub start: &'a StartTime,
    pub streams: &'a [StreamInfo],
}

/// A run that ended, with both ends' figures.
pub struct RunEnd<'a> {
    pub settings: &'a Settings,
    pub start: &'a StartTime,
    pub outcome: &'a ClientOutcome,
}

/// One output of a client's run. Every method has a default that ignores the event.
pub trait Sink {
    /// The data streams are connected.
    fn start(&mut self, _run: &RunStart) -> Result<()> {
        Ok(())
    }

    /// The data streams started; `watch` counts each one's bytes so far.
    fn started(&mut self, _watch: &std::sync::Arc<crate::limits::TestWatch>) {}

    /// A reporting interval (`-i`) of one side ended.
    fn interval(&mut self, _settings: &Settings, _role: Role, _r: &IntervalResult) -> Result<()> {
        Ok(())
    }

    /// The run ended.
    fn end(&mut self, _run: &RunEnd) -> Result<()> {
        Ok(())
    }

    /// No more events will come (after [`Sink::end`], or instead of it): write out
    /// whatever is buffered.
    fn close(&mut self) -> Result<()> {
        Ok(())
    }
}

/// The sinks of one run, fed together. A sink that fails is fed no more; the first
/// failure is reported by [`Sinks::end`] or [`Sinks::close`].
pub struct Sinks {
    settings: Settings,
    start: StartTime,
    sinks: Vec<Box<dyn Sink>>,
    /// Per sink: it failed.
    failed: Vec<bool>,
    first_error: Option<anyhow::Error>,
}

impl Sinks {
    /// Sinks for a run of `settings` that started at `start`.
    pub fn new(settings: &Settings, start: StartTime, sinks: Vec<Box<dyn Sink>>) -> Sinks {
        Sinks {
            settings: settings.clone(),
            start,
            failed: vec![false; sinks.len()],
            sinks,
            first_error: None,
        }
    }

    /// Tells every sink the run ended, then closes them.
    pub fn end(mut self, outcome: &ClientOutcome) -> Result<()> {
        let run = RunEnd {
            settings: &self.settings,
            start: &self.start,
            outcome,
        };
        feed(
            &mut self.sinks,
            &mut self.failed,
            &mut self.first_error,
            |s| s.end(&run),
        );
        self.close()
    }

    /// Closes every sink.
    fn close(mut self) -> Result<()> {
        feed(
            &mut self.sinks,
            &mut self.failed,
            &mut self.first_error,
            |s| s.close(),
        );
        match self.first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Gives `event` to every sink that has not failed, noting the first failure.
fn feed(
    sinks: &mut [Box<dyn Sink>],
    failed: &mut [bool],
    first_error: &mut Option<anyhow::Error>,
    mut event: impl FnMut(&mut dyn Sink) -> Result<()>,
) {
    for (sink, failed) in sinks.iter_mut().zip(failed.iter_mut()) {
        if *failed {
            continue;
        }
        if let Err(e) = event(sink.as_mut()) {
            *failed = true;
            first_error.get_or_insert(e);
        }
    }
}

impl RunObserver for Sinks {
    fn connected(&mut self, streams: &[StreamInfo]) {
        let run = RunStart {
            settings: &self.settings,
            start: &self.start,
            streams,
        };
        feed(
            &mut self.sinks,
            &mut self.failed,
            &mut self.first_error,
            |s| s.start(&run),
        );
    }

    fn started(&mut self, watch: &std::sync::Arc<crate::limits::TestWatch>) {
        feed(
            &mut self.sinks,
            &mut self.failed,
            &mut self.first_error,
            |s| {
                s.started(watch);
                Ok(())
            },
        );
    }

    fn interval(&mut self, role: Role, result: &IntervalResult) {
        let settings = &self.settings;
        feed(
            &mut self.sinks,
            &mut self.failed,
            &mut self.first_error,
            |s| s.interval(settings, role, result),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// Records the events it is fed; fails on the interval numbered `fail_at`.
    struct Recorder {
        events: Rc<RefCell<Vec<String>>>,
        fail_at: Option<u32>,
    }

    impl Sink for Recorder {
        fn start(&mut self, run: &RunStart) -> Result<()> {
            self.events
                .borrow_mut()
                .push(format!("start {}", run.streams.len()));
            Ok(())
        }

        fn interval(&mut self, _: &Settings, role: Role, r: &IntervalResult) -> Result<()> {
            if self.fail_at == Some(r.index) {
                anyhow::bail!("disk full at {}", r.index);
            }
            self.events
                .borrow_mut()
                .push(format!("{role:?} {}", r.index));
            Ok(())
        }

        fn close(&mut self) -> Result<()> {
            self.events.borrow_mut().push("close".into());
            Ok(())
        }
    }

    fn interval(index: u32) -> IntervalResult {
        IntervalResult {
            index,
            start_ns: 0,
            end_ns: 1,
            omitted: false,
            total: crate::results::Figures::new(
                &crate::stats::StreamStats::default(),
                std::time::Duration::ZERO,
                &crate::percentiles::Percentiles::default(),
            ),
            reverse_total: None,
            streams: Vec::new(),
            cpu: None,
        }
    }

    #[test]
    fn every_sink_gets_every_event_until_it_fails_and_its_first_error_is_reported() {
        let (good, bad) = (Rc::default(), Rc::default());
        let mut sinks = Sinks::new(
            &Settings::default(),
            StartTime::now(),
            vec![
                Box::new(Recorder {
                    events: Rc::clone(&good),
                    fail_at: None,
                }),
                Box::new(Recorder {
                    events: Rc::clone(&bad),
                    fail_at: Some(1),
                }),
            ],
        );
        sinks.connected(&[]);
        for i in 0..3 {
            sinks.interval(Role::Client, &interval(i));
        }
        sinks.interval(Role::Server, &interval(3));
        let err = sinks.close().expect_err("the second sink failed");
        assert_eq!(err.to_string(), "disk full at 1");
        assert_eq!(
            *good.borrow(),
            ["start 0", "Client 0", "Client 1", "Client 2", "Server 3", "close"]
        );
        assert_eq!(*bad.borrow(), ["start 0", "Client 0"]);
    }
}
