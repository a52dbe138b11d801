//! The command line's measurement output: which printer a run uses (human, `--json`,
//! `--json-stream`), the `--csv` file, and `--sweep`. The library computes; this module
//! only chooses what goes to stdout and files.

use anyhow::{bail, Context, Result};
use fperf::client::{self, ClientConfig, ClientOutcome, RunObserver, StreamInfo};
use fperf::json::{self, Event, IntervalDoc, RunDoc, StartTime, SweepDoc, SweepRecord};
use fperf::report::{self, interval_line};
use fperf::results::{IntervalResult, Role};
use fperf::settings::Settings;
use fperf::sweep::{self, Sweep, SweepParam, SweepRow};
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
}

impl Output {
    /// The output options `cli` asks for.
    pub fn from_cli(cli: &crate::Cli) -> Result<Output> {
        let mode = match (cli.json, cli.json_stream) {
            (true, _) => Mode::Json,
            (_, true) => Mode::JsonStream,
            _ => Mode::Human,
        };
        let sweep = cli.sweep.as_deref().map(sweep::parse).transpose()?;
        // Made now, so a path that cannot be written fails before the test, not after.
        if let Some(path) = &cli.plot {
            File::create(path)
                .with_context(|| format!("cannot create --plot file {}", path.display()))?;
        }
        Ok(Output {
            mode,
            csv: cli.csv.clone(),
            plot: cli.plot.clone(),
            sweep,
        })
    }
}

/// Prints a run's progress as it goes on.
pub struct Printer {
    settings: Settings,
    mode: Mode,
    /// A sweep prints rows only.
    quiet: bool,
    csv: Option<BufWriter<File>>,
    csv_error: Option<std::io::Error>,
    start: StartTime,
}

impl Printer {
    /// A printer for one run; creates the CSV file and writes its header.
    pub fn new(settings: &Settings, output: &Output, start: StartTime) -> Result<Printer> {
        let csv = match &output.csv {
            Some(path) => {
                let mut f = BufWriter::new(
                    File::create(path)
                        .with_context(|| format!("cannot create --csv file {}", path.display()))?,
                );
                writeln!(f, "{}", fperf::csv::HEADER)?;
                Some(f)
            }
            None => None,
        };
        Ok(Printer {
            settings: settings.clone(),
            mode: output.mode,
            quiet: false,
            csv,
            csv_error: None,
            start,
        })
    }

    /// Flushes the CSV file; reports a write that failed during the run.
    pub fn finish(mut self) -> Result<()> {
        if let Some(f) = &mut self.csv {
            if let Err(e) = f.flush() {
                self.csv_error.get_or_insert(e);
            }
        }
        match self.csv_error {
            Some(e) => bail!("cannot write the --csv file: {e}"),
            None => Ok(()),
        }
    }
}

impl RunObserver for Printer {
    fn connected(&mut self, streams: &[StreamInfo]) {
        match self.mode {
            Mode::Human if !self.quiet => {
                let list: Vec<_> = streams
                    .iter()
                    .map(|s| (s.index, s.local.clone(), s.peer.clone()))
                    .collect();
                let congestion = streams.first().and_then(|s| s.congestion.as_deref());
                out!(
                    "{}",
                    report::client_header(&self.settings, &list, congestion)
                );
            }
            Mode::JsonStream => {
                let ev = Event::start(&self.settings, self.start.clone(), streams);
                outln!("{}", json::to_line(&ev));
            }
            _ => {}
        }
        let _ = std::io::stdout().flush();
    }

    fn interval(&mut self, role: Role, result: &IntervalResult) {
        match self.mode {
            Mode::Human if !self.quiet && role == Role::Client => {
                outln!("{}", interval_line(role, &self.settings, result));
            }
            Mode::JsonStream => {
                let ev = Event::Interval {
                    side: role,
                    interval: Box::new(IntervalDoc::new(result, &self.settings, role)),
                };
                outln!("{}", json::to_line(&ev));
            }
            _ => {}
        }
        let _ = std::io::stdout().flush();
        if role == Role::Client {
            if let Some(f) = &mut self.csv {
                if let Err(e) =
                    f.write_all(fperf::csv::rows(role, &self.settings, result).as_bytes())
                {
                    self.csv_error.get_or_insert(e);
                }
            }
        }
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
    let mprtt = cfg.settings.mprtt;
    if output.mode == Mode::Human {
        outln!("{}", sweep::header(sweep.param, mprtt));
    }
    let mut records = Vec::new();
    let mut rows = Vec::new();
    for &value in &sweep.values {
        let settings = sweep.param.apply(&cfg.settings, value);
        settings
            .validate()
            .with_context(|| format!("--sweep {}={value}", sweep.param.name()))?;
        let run_cfg = ClientConfig {
            settings: settings.clone(),
            ..cfg.clone()
        };
        let start = StartTime::now();
        let mut printer = Printer::new(&settings, output, start.clone())?;
        printer.quiet = true;
        // The server frees a test's slot before it sends the figures, so the next value's
        // test is never refused as "server busy" by the previous one.
        let outcome = client::run_observed(&run_cfg, abort.clone(), &mut printer)
            .with_context(|| format!("{}={value}", sweep.param.name()))?;
        printer.finish()?;
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

/// What a picture's title says the run was: protocol, workload, packet size, streams
/// (less what a sweep varies).
pub fn run_label(settings: &Settings, swept: Option<SweepParam>) -> String {
    let workload = match (settings.crr, settings.echo, settings.mprtt) {
        (true, _, _) => " --crr",
        (_, true, _) => " --echo",
        (_, _, true) => " -r",
        _ => "",
    };
    let mut label = format!("{}{workload}", settings.protocol.name());
    if swept != Some(SweepParam::PktSize) {
        label += &format!(", {} B packets", settings.pktsize);
    }
    if swept != Some(SweepParam::NStreams) {
        label += &format!(", {} stream(s)", settings.nstreams);
    }
    label
}

/// `--plot` of a single run: the client's send latency (mprtt with `-r`) by percentile.
pub fn plot_run(
    path: &std::path::Path,
    settings: &Settings,
    outcome: &ClientOutcome,
) -> Result<()> {
    let label = report::latency_label(settings);
    let count = outcome.client.total.send_latency.map_or(0, |l| l.count);
    let title = format!("fperf {}: {label} by percentile", run_label(settings, None));
    let curve = outcome.send_latency.quantile_curve();
    fperf::plot::latency_distribution(path, &title, label, &curve, count)
}
