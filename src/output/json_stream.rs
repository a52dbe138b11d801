//! `--json-stream`: one JSON object per line and event, as it happens: `start`, each
//! side's `interval`s, then `end` with the whole run's document.

use super::{RunEnd, RunStart, Sink};
use crate::output::json_document::{to_line, Event, IntervalDoc, RunDoc};
use crate::results::IntervalResult;
use crate::settings::Settings;
use crate::transport::Role;
use anyhow::Result;
use std::io::Write;

/// JSON lines, written to `out` (flushed after each event).
pub struct JsonStream<W: Write> {
    out: W,
}

impl<W: Write> JsonStream<W> {
    pub fn new(out: W) -> JsonStream<W> {
        JsonStream { out }
    }

    fn line(&mut self, event: &Event) -> Result<()> {
        writeln!(self.out, "{}", to_line(event))?;
        Ok(self.out.flush()?)
    }
}

impl<W: Write> Sink for JsonStream<W> {
    fn start(&mut self, run: &RunStart) -> Result<()> {
        self.line(&Event::start(run.settings, run.start.clone(), run.streams))
    }

    fn interval(&mut self, settings: &Settings, role: Role, r: &IntervalResult) -> Result<()> {
        self.line(&Event::Interval {
            side: role,
            interval: Box::new(IntervalDoc::new(r, settings, role)),
        })
    }

    fn end(&mut self, run: &RunEnd) -> Result<()> {
        self.line(&Event::End {
            result: Box::new(RunDoc::new(run.settings, run.start.clone(), run.outcome)),
        })
    }
}
