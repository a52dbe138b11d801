//! `--csv`: a row per stream and client interval (`-i`), for spreadsheets and scripts;
//! the columns are [`crate::csv::HEADER`]'s.

use super::Sink;
use crate::csv::{rows, HEADER};
use crate::results::{IntervalResult, Role};
use crate::settings::Settings;
use anyhow::{Context, Result};
use std::io::Write;

/// CSV rows, written to `out`.
pub struct Csv<W: Write> {
    out: W,
}

impl<W: Write> Csv<W> {
    /// Writes the header line at once.
    pub fn new(mut out: W) -> Result<Csv<W>> {
        writeln!(out, "{HEADER}").context("cannot write the --csv file")?;
        Ok(Csv { out })
    }
}

impl<W: Write> Sink for Csv<W> {
    fn interval(&mut self, settings: &Settings, role: Role, r: &IntervalResult) -> Result<()> {
        if role == Role::Client {
            self.out
                .write_all(rows(role, settings, r).as_bytes())
                .context("cannot write the --csv file")?;
        }
        Ok(())
    }

    fn close(&mut self) -> Result<()> {
        self.out.flush().context("cannot write the --csv file")
    }
}
