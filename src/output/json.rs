//! `--json`: the whole run as one JSON document at the end (see docs/json.md).

use super::{RunEnd, Sink};
use crate::output::json_document::{to_document, DocLabels, RunDoc};
use anyhow::Result;
use std::io::Write;

/// One JSON document, written to `out` when the run ends.
pub struct Json<W: Write> {
    out: W,
    labels: DocLabels,
}

impl<W: Write> Json<W> {
    pub fn new(out: W, labels: DocLabels) -> Json<W> {
        Json { out, labels }
    }
}

impl<W: Write> Sink for Json<W> {
    fn end(&mut self, run: &RunEnd) -> Result<()> {
        let doc = RunDoc {
            labels: self.labels.clone(),
            ..RunDoc::new(run.settings, run.start.clone(), run.outcome)
        };
        writeln!(self.out, "{}", to_document(&doc))?;
        Ok(self.out.flush()?)
    }
}
