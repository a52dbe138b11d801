//! The command line's measurement output: which sinks a run feeds (human, `--json`,
//! `--json-stream`, `--csv`, `--plot`), and `--sweep`. The library computes and
//! renders; this module only chooses what goes to stdout and files.

use anyhow::{Context, Result};
use fperf::client::{self, ClientConfig};
use fperf::json::{self, RunDoc, StartTime, SweepDoc, SweepRecord};
use fperf::output::csv::Csv;
use fperf::output::iperf3_json::Iperf3Json;
use fperf::output::json::Json;
use fperf::output::json_stream::JsonStream;
use fperf::output::plot::{run_label, Plot};
use fperf::output::progress::{Progress, ERASE_LINE};
use fperf::output::text::Text;
use fperf::output::{Sink, Sinks};
use fperf::results::Role;
use fperf::settings::Settings;
use fperf::sweep::{self, Sweep, SweepRow};
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

/// The output options of the command line.
pub struct Output {
    pub mode: Mode,
    pub csv: Option<std::path::PathBuf>,
    /// `--plot`: the SVG file to draw the run's latency distribution (or the sweep) in.
    pub plot: Option<std::path::PathBuf>,
    pub sweep: Option<Sweep>,
    /// The server as given on the command line, and its port.
    pub server: (String, u16),
    /// Stderr is a terminal and stdout the report without interval lines: a progress
    /// line (or a sweep's step) shows on stderr while a run goes on.
    pub progress: bool,
}

impl Output {
    /// The sinks of one run: the human report or JSON on stdout (`stdout`), the CSV
    /// file, and for a single run the plot. A sweep's runs (`sweep_run`) report in
    /// rows, so stdout has only their `--json-stream` events.
    pub fn sinks(&self, settings: &Settings, start: StartTime, sweep_run: bool) -> Result<Sinks> {
        let mut sinks: Vec<Box<dyn Sink>> = Vec::new();
        // First, so its line is erased before any other sink writes the report.
        if self.progress && !sweep_run {
            sinks.push(Box::new(Progress::new(
                settings,
                Box::new(std::io::stderr()),
            )));
        }
        match self.mode {
            Mode::Human if !sweep_run => sinks.push(Box::new(Text::new(Stdout))),
            Mode::Json if !sweep_run => sinks.push(Box::new(Json::new(Stdout))),
            Mode::Iperf3Json => {
                let (host, port) = self.server.clone();
                sinks.push(Box::new(Iperf3Json::new(Stdout, host, port)));
            }
            Mode::JsonStream => sinks.push(Box::new(JsonStream::new(Stdout))),
            _ => {}
        }
        if let Some(path) = &self.csv {
            let file = File::create(path)
                .with_context(|| format!("cannot create --csv file {}", path.display()))?;
            sinks.push(Box::new(Csv::new(BufWriter::new(file))?));
        }
        if let Some(path) = self.plot.as_ref().filter(|_| !sweep_run) {
            sinks.push(Box::new(Plot::new(path.clone())));
        }
        Ok(Sinks::new(settings, start, sinks))
    }
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

/// Runs one measurement per sweep value against the same server; prints one row per
/// value (or, with `--json`, one document with one record per value).
pub fn run_sweep(
    cfg: &ClientConfig,
    abort: Arc<AtomicBool>,
    output: &Output,
    sweep: &Sweep,
) -> Result<ExitCode> {
    let mprtt = cfg.settings.workload.mprtt();
    if output.mode == Mode::Human {
        outln!("{}", sweep::header(sweep.param, mprtt));
    }
    let mut records = Vec::new();
    let mut rows = Vec::new();
    for (step, &value) in sweep.values.iter().enumerate() {
        if output.progress {
            eprint!(
                "{ERASE_LINE}running {}={value} ({} of {})",
                sweep.param.name(),
                step + 1,
                sweep.values.len()
            );
        }
        let settings = sweep.param.apply(&cfg.settings, value);
        settings
            .validate()
            .with_context(|| format!("--sweep {}={value}", sweep.param.name()))?;
        let run_cfg = ClientConfig {
            settings: settings.clone(),
            ..cfg.clone()
        };
        let start = StartTime::now();
        let mut sinks = output.sinks(&settings, start.clone(), true)?;
        // The server frees a test's slot before it sends the figures, so the next value's
        // test is never refused as "server busy" by the previous one.
        let outcome = client::run_observed(&run_cfg, abort.clone(), &mut sinks)
            .with_context(|| format!("{}={value}", sweep.param.name()))?;
        sinks.close()?;
        if output.progress {
            eprint!("{ERASE_LINE}");
        }
        let total = &outcome.client.total;
        let secs = total.duration_ns as f64 / 1e9;
        // The client's own end: the receiving one with --reverse.
        let (bytes, latency) = if Role::Client.sends(&settings) {
            (total.bytes_sent, total.send_latency)
        } else {
            (total.bytes_received, total.recv_latency)
        };
        let row = SweepRow {
            value,
            bits_per_second: if secs > 0.0 {
                bytes as f64 * 8.0 / secs
            } else {
                0.0
            },
            latency,
            iterations: latency.map_or(0, |l| l.count),
            transactions_per_second: total.transactions_per_second(&settings, Role::Client),
        };
        if output.mode == Mode::Human {
            outln!("{}", sweep::row(&row));
            let _ = std::io::stdout().flush();
        }
        records.push(SweepRecord {
            value,
            result: RunDoc::new(&settings, start, &outcome),
        });
        rows.push(row);
        if outcome.interrupted || abort.load(Ordering::Relaxed) {
            break;
        }
    }
    if let Some(path) = &output.plot {
        let title = format!(
            "fperf {}: {} by {}",
            run_label(&cfg.settings, Some(sweep.param)),
            if mprtt { "mprtt" } else { "bandwidth" },
            sweep.param.name()
        );
        fperf::plot::sweep(path, &title, sweep.param, &rows, mprtt)?;
    }
    if output.mode == Mode::Json {
        let doc = SweepDoc {
            schema_version: json::SCHEMA_VERSION,
            fperf_version: fperf::VERSION,
            sweep: json::SweepSpecDoc {
                parameter: sweep.param.name(),
                values: sweep.values.clone(),
            },
            records,
        };
        outln!("{}", json::to_document(&doc));
    }
    if abort.load(Ordering::Relaxed) {
        return Ok(ExitCode::from(130));
    }
    Ok(ExitCode::SUCCESS)
}
