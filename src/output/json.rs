//! `--json`: the whole run as one JSON document at the end (see docs/json.md).

use super::{RunEnd, Sink};
use crate::json::{to_document, RunDoc};
use anyhow::Result;
use std::io::Write;

/// One JSON document, written to `out` when the run ends.
pub struct Json<W: Write> {
    out: W,
}

impl<W: Write> Json<W> {
    pub fn new(out: W) -> Json<W> {
        Json { out }
    }
}

impl<W: Write> Sink for Json<W> {
    fn end(&mut self, run: &RunEnd) -> Result<()> {
        let doc = RunDoc::new(run.settings, run.start.clone(), run.outcome);
        writeln!(self.out, "{}", to_document(&doc))?;
        Ok(self.out.flush()?)
    }
}
