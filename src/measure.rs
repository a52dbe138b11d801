//! The command line's measurement output: which sinks a run feeds (human, `--json`,
//! `--json-stream`, `--csv`, `--plot`), and `--sweep`. The library computes and
//! renders; this module only chooses what goes to stdout and files.

use anyhow::{Context, Result};
use fperf::client::{self, ClientConfig};
use fperf::output::csv::Csv;
use fperf::output::iperf3_json::Iperf3Json;
use fperf::output::json::Json;
use fperf::output::json_document::{
    self, DocLabels, RunDoc, StartTime, SweepDoc, SweepRecord, UnderLoadRunDoc,
};
use fperf::output::json_stream::JsonStream;
use fperf::output::plot::{hosts, plot_title, run_label, Plot};
use fperf::output::progress::{Forecast, Progress, ERASE_LINE};
use fperf::output::sfnt::{Preamble, Sfnt};
use fperf::output::text::Text;
use fperf::output::under_load;
use fperf::output::{Sink, Sinks};
use fperf::settings::Settings;
use fperf::sweep::{self, Sweep, SweepParam, SweepRow};
use fperf::under_load::spec::UnderLoadSpec;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What stdout carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The original report layout, with interval lines (`-i`).
    Human,
    /// One JSON document at the end.
    Json,
    /// One JSON document at the end, in iperf3's layout.
    Iperf3Json,
    /// One JSON object per line per event.
    JsonStream,
}

/// The layout of a sweep's table (`--table`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Table {
    /// fperf's: a row per value, columns padded to line up.
    Fperf,
    /// sfnt-pingpong's: a preamble, then tab-separated rows in ns, as half and whole
    /// round trips.
    Sfnt,
}

/// Which run of a sweep a run is.
pub struct SweepStep {
    pub param: SweepParam,
    pub value: u64,
    /// The sweep's first value: the table's preamble goes before its row.
    pub first: bool,
}

/// The output options of the command line.
pub struct Output {
    pub mode: Mode,
    pub csv: Option<std::path::PathBuf>,
    /// `--plot`: the SVG file to draw the run's latency distribution (or the sweep) in.
    pub plot: Option<std::path::PathBuf>,
    pub sweep: Option<Sweep>,
    /// `--under-load`: latency under load instead of one test.
    pub under_load: Option<Box<UnderLoadSpec>>,
    /// `--table`: the layout of a sweep's table on stdout.
    pub table: Table,
    /// The server as given on the command line, and its port.
    pub server: (String, u16),
    /// Stderr is a terminal and stdout the report without interval lines: a progress
    /// line (or a sweep's step) shows on stderr while a run goes on.
    pub progress: bool,
    /// `--title` and `--extra-data`, for the JSON documents.
    pub labels: DocLabels,
    /// Nothing bounded the run: it lasts the default time, and the header says so.
    pub length_defaulted: bool,
}

/// What a header says of a run that was given no length: how long it lasts.
pub fn length_note(settings: &Settings) -> Option<String> {
    let ms = settings.time_ms?;
    Some(format!(
        "for {} s (default; -m or --time to change)",
        ms as f64 / 1000.0
    ))
}

impl Output {
    /// The sinks of one run: the human report or JSON on stdout (`stdout`), the CSV
    /// file, and for a single run the plot. A sweep's runs (`sweep`) report in rows,
    /// so stdout has only their `--json-stream` events, or the row of `--table sfnt`.
    pub fn sinks(
        &self,
        settings: &Settings,
        start: StartTime,
        sweep: Option<SweepStep>,
    ) -> Result<Sinks> {
        let sweep_run = sweep.is_some();
        let mut sinks: Vec<Box<dyn Sink>> = Vec::new();
        // First, so its line is erased before any other sink writes the report.
        if self.progress && !sweep_run {
            sinks.push(Box::new(Progress::new(
                settings,
                Box::new(std::io::stderr()),
            )));
        }
        if let Some(forecast) = Forecast::new(settings).filter(|_| !sweep_run) {
            sinks.push(Box::new(forecast));
        }
        match self.mode {
            Mode::Human if !sweep_run => {
                let note = length_note(settings).filter(|_| self.length_defaulted);
                sinks.push(Box::new(Text::new(Stdout, note)));
            }
            Mode::Json if !sweep_run => {
                sinks.push(Box::new(Json::new(Stdout, self.labels.clone())));
            }
            Mode::Iperf3Json => {
                let (host, port) = self.server.clone();
                let sink = Iperf3Json::new(Stdout, host, port, self.labels.clone());
                sinks.push(Box::new(sink));
            }
            Mode::JsonStream => sinks.push(Box::new(JsonStream::new(Stdout))),
            _ => {}
        }
        if let Some(path) = &self.csv {
            let file = File::create(path)
                .with_context(|| format!("cannot create --csv file {}", path.display()))?;
            sinks.push(Box::new(Csv::new(
                BufWriter::new(file),
                &settings.percentiles,
            )?));
        }
        if let Some(path) = self.plot.as_ref().filter(|_| !sweep_run) {
            let server = fperf::client::join_host_port(&self.server.0, self.server.1);
            sinks.push(Box::new(Plot::new(path.clone(), server)));
        }
        if let Some(step) = sweep.filter(|_| self.table == Table::Sfnt) {
            let preamble = step.first.then(|| Preamble {
                command_line: command_line(),
                server: format!("{}:{}", self.server.0, self.server.1),
            });
            sinks.push(Box::new(Sfnt::new(
                Stdout, step.param, step.value, preamble,
            )));
        }
        Ok(Sinks::new(settings, start, sinks))
    }
}

/// How fperf was started, as a shell would take it back: arguments with spaces or
/// quotes are single-quoted.
fn command_line() -> String {
    let quote = |a: String| {
        let plain = a
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_=.,:/*+@%".contains(c));
        if plain && !a.is_empty() {
            a
        } else {
            format!("'{}'", a.replace('\'', r"'\''"))
        }
    };
    std::env::args().map(quote).collect::<Vec<_>>().join(" ")
}

/// The process's stdout for the sinks: a closed stdout ends the process (exit 0), as
/// for every report line ([`crate::write_stdout`]).
struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        crate::exit_if_closed(std::io::stdout().write_all(buf));
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        crate::exit_if_closed(std::io::stdout().flush());
        Ok(())
    }
}

/// Runs one measurement per sweep value (one per test of `--tests` and value) against
/// the same server; prints one row per value (or, with `--json`, one document with one
/// record per value).
pub fn run_sweep(
    cfg: &ClientConfig,
    abort: Arc<AtomicBool>,
    output: &Output,
    sweep: &Sweep,
) -> Result<ExitCode> {
    let mprtt = cfg.settings.workload.mprtt();
    let tests = sweep.tests_per_value();
    let table = output.mode == Mode::Human && output.table == Table::Fperf;
    if table && sweep.tests.is_empty() {
        outln!("{}", sweep::header(sweep.param, mprtt));
    } else if table {
        outln!("{}", sweep::tests_header(sweep.param, &sweep.tests));
    }
    let mut records = Vec::new();
    // Per value, each test's row.
    let mut rows: Vec<Vec<SweepRow>> = Vec::new();
    let runs = sweep.values.len() * tests.len();
    let mut stopped = false;
    let server = client::join_host_port(&output.server.0, output.server.1);
    // The plot's title names the ends as the first run found them.
    let mut ends = None;
    for (step, &value) in sweep.values.iter().enumerate() {
        let mut record = SweepRecord {
            value,
            result: None,
            tests: Default::default(),
        };
        let mut value_rows = Vec::new();
        for (i, test) in tests.iter().enumerate() {
            let name = test.map_or(String::new(), |t| format!(" {}", t.name()));
            if output.progress {
                eprint!(
                    "{ERASE_LINE}running {}={value}{name} ({} of {runs})",
                    sweep.param.name(),
                    step * tests.len() + i + 1,
                );
            }
            let settings = sweep.run_settings(&cfg.settings, value, *test)?;
            let run_cfg = ClientConfig {
                settings: settings.clone(),
                ..cfg.clone()
            };
            let start = StartTime::now();
            let mut sinks = output.sinks(
                &settings,
                start.clone(),
                Some(SweepStep {
                    param: sweep.param,
                    value,
                    first: step == 0,
                }),
            )?;
            // The server frees a test's slot before it sends the figures, so the next
            // run is never refused as "server busy" by the previous one.
            let outcome = client::run_observed(&run_cfg, abort.clone(), &mut sinks)
                .with_context(|| format!("{}={value}{name}", sweep.param.name()))?;
            if output.progress {
                eprint!("{ERASE_LINE}");
            }
            sinks.end(&outcome)?;
            ends.get_or_insert_with(|| hosts(&outcome, &server));
            value_rows.push(SweepRow::new(value, &settings, &outcome.client.total));
            let doc = RunDoc::new(&settings, start, &outcome);
            match test {
                Some(test) => {
                    record.tests.insert(test.name(), doc);
                }
                None => record.result = Some(doc),
            }
            if outcome.interrupted || abort.load(Ordering::Relaxed) {
                stopped = true;
                break;
            }
        }
        // What finished of a value cut short is still its row.
        finish_row(output, sweep, &value_rows);
        records.push(record);
        rows.push(value_rows);
        if stopped {
            break;
        }
    }
    if let Some(path) = &output.plot {
        let what: Vec<&str> = match tests.as_slice() {
            [None] if mprtt => vec!["mprtt"],
            [None] => vec!["bandwidth"],
            _ => sweep.tests.iter().map(|t| t.name()).collect(),
        };
        let title = plot_title(
            ends.as_deref().unwrap_or(&server),
            &run_label(&cfg.settings, Some(sweep.param)),
            &format!("{} by {}", what.join(", "), sweep.param.name()),
        );
        let series: Vec<fperf::output::svg::Series> = tests
            .iter()
            .enumerate()
            .map(|(i, test)| fperf::output::svg::Series {
                test: *test,
                mprtt: test.map_or(mprtt, |t| t.mprtt()),
                rows: rows.iter().filter_map(|r| r.get(i).cloned()).collect(),
            })
            .collect();
        fperf::output::svg::sweep(path, &title, sweep.param, &series)?;
    }
    if output.mode == Mode::Json {
        let doc = SweepDoc {
            schema_version: json_document::SCHEMA_VERSION,
            fperf_version: fperf::VERSION,
            labels: output.labels.clone(),
            sweep: json_document::SweepSpecDoc {
                parameter: sweep.param.name(),
                values: sweep.values.clone(),
                tests: sweep.tests.iter().map(|t| t.name()).collect(),
            },
            records,
        };
        outln!("{}", json_document::to_document(&doc));
    }
    if abort.load(Ordering::Relaxed) {
        return Ok(ExitCode::from(130));
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints a value's row of the fperf table, once all its tests ran.
fn finish_row(output: &Output, sweep: &Sweep, rows: &[SweepRow]) {
    if output.mode != Mode::Human || output.table != Table::Fperf {
        return;
    }
    let line = match rows {
        [] => return,
        [row] if sweep.tests.is_empty() => sweep::row(row),
        _ => sweep::tests_row(rows[0].value, &sweep.tests, rows),
    };
    outln!("{line}");
    let _ = std::io::stdout().flush();
}

/// Runs `--under-load`'s phases, then writes what they measured: the table (or the
/// JSON document, or `--json-stream`'s lines), the CSV rows and the picture.
pub fn run_under_load(
    cfg: &ClientConfig,
    abort: Arc<AtomicBool>,
    output: &Output,
    spec: &UnderLoadSpec,
) -> Result<ExitCode> {
    let start = StartTime::now();
    if output.mode == Mode::Human {
        let phases: Vec<String> = spec
            .phases()
            .iter()
            .map(|(kind, len)| format!("{} {} s", kind.name(), len.as_secs_f64()))
            .collect();
        eprintln!("Latency under load: {}", phases.join(", "));
    }
    let run = fperf::under_load::run(cfg, spec, abort)?;
    let doc = UnderLoadRunDoc::new(&run, start, output.labels.clone());
    match output.mode {
        Mode::Human => out!("{}", under_load::text(&run)),
        Mode::Json | Mode::Iperf3Json => outln!("{}", json_document::to_document(&doc)),
        Mode::JsonStream => {
            for event in under_load::stream_events(&run, doc) {
                outln!("{}", json_document::to_line(&event));
            }
        }
    }
    if let Some(path) = &output.csv {
        under_load::write_csv(path, &run)?;
    }
    if let Some(path) = &output.plot {
        under_load::plot(path, &run)?;
    }
    Ok(ExitCode::from(if run.interrupted { 130 } else { 0 }))
}
