//! `--csv`: a row per stream and client interval (`-i`), or without `-i` a row per
//! stream for the whole run, for spreadsheets and scripts; the columns are
//! [`crate::output::csv_rows::header`]'s.

use super::{RunEnd, Sink};
use crate::output::csv_rows::{header, rows};
use crate::percentiles::Percentiles;
use crate::results::{IntervalResult, StreamInterval};
use crate::settings::Settings;
use crate::transport::Role;
use anyhow::{Context, Result};
use std::io::Write;

/// CSV rows, written to `out`.
pub struct Csv<W: Write> {
    out: W,
    /// An interval's rows were written: the run's own rows are not needed.
    had_intervals: bool,
}

impl<W: Write> Csv<W> {
    /// Writes the header line of a run reporting `percentiles` at once.
    pub fn new(mut out: W, percentiles: &Percentiles) -> Result<Csv<W>> {
        writeln!(out, "{}", header(percentiles)).context("cannot write the --csv file")?;
        Ok(Csv {
            out,
            had_intervals: false,
        })
    }
}

impl<W: Write> Sink for Csv<W> {
    fn interval(&mut self, settings: &Settings, role: Role, r: &IntervalResult) -> Result<()> {
        if role == Role::Client {
            self.had_intervals = true;
            self.out
                .write_all(rows(role, settings, r).as_bytes())
                .context("cannot write the --csv file")?;
        }
        Ok(())
    }

    /// Without intervals, the whole run is the one interval: a row per stream.
    fn end(&mut self, run: &RunEnd) -> Result<()> {
        if self.had_intervals {
            return Ok(());
        }
        let client = &run.outcome.client;
        let whole = IntervalResult {
            index: 0,
            start_ns: 0,
            end_ns: client.total.duration_ns,
            omitted: false,
            total: client.total.clone(),
            reverse_total: client.reverse_total.clone(),
            streams: client
                .streams
                .iter()
                .map(|s| StreamInterval {
                    index: s.index,
                    start_ns: 0,
                    end_ns: s.figures.duration_ns,
                    figures: s.figures.clone(),
                })
                .collect(),
            cpu: client.cpu,
        };
        self.out
            .write_all(rows(Role::Client, run.settings, &whole).as_bytes())
            .context("cannot write the --csv file")
    }

    fn close(&mut self) -> Result<()> {
        self.out.flush().context("cannot write the --csv file")
    }
}
