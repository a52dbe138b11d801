//! The `fperf` command: flags in, one validated configuration out, then the library's
//! server or client, with reports printed here.

use anyhow::{bail, Context, Result};
use cli::Config;
use fperf::client::{self, ClientConfig, ClientOutcome};
use fperf::exporter::{Exporter, ExporterEvent};
use fperf::log_limit::{LogLimit, LogVerdict};
use fperf::mesh::MeshEvent;
use fperf::output::report;
use fperf::peer_text::printable;
use fperf::settings::{Settings, MAX_NSTREAMS};
use fperf::sysinfo;
use measure::Output;

/// `print!` for the report: when stdout is closed (e.g. `fperf ... | head -1`) the
/// process ends quietly instead of panicking, as command-line filters do.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::write_stdout(format_args!($($arg)*))
    };
}

/// `println!` with the same behaviour as [`out!`].
macro_rules! outln {
    () => {
        out!("\n")
    };
    ($($arg:tt)*) => {{
        out!($($arg)*);
        out!("\n");
    }};
}

mod cli;
mod generate;
mod measure;
mod pidfile;
mod redirect;
use fperf::server::{Server, ServerConfig, ServerEvent};
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // A flag error exits 2, as one that does not parse; a failed run exits 1.
    let refused = |problems: &[String]| {
        for problem in problems {
            eprintln!("fperf: {problem}");
        }
        ExitCode::from(2)
    };
    let cli = match cli::parse_every_problem(&args) {
        cli::Parsed::Run(cli) => cli,
        cli::Parsed::Shown(help) => {
            // --help and --version.
            let _ = help.print();
            return ExitCode::SUCCESS;
        }
        cli::Parsed::Refused(problems) => return refused(&problems),
    };
    if let Some(what) = cli.generate() {
        return generate::write_stdout(what);
    }
    let config = match cli.config() {
        Ok(config) => config,
        Err(e) => {
            let text = format!("{e:#}");
            let problems: Vec<String> = text.lines().map(|l| format!("error: {l}")).collect();
            return refused(&problems);
        }
    };
    let (logfile, prefix) = cli.output_redirect();
    if let Some(path) = logfile {
        if let Err(e) = redirect::log_to(path) {
            eprintln!("fperf: error: {e:#}");
            return ExitCode::FAILURE;
        }
    }
    let prefix = Some(prefix).filter(|p| !p.is_empty());
    let stamper = match prefix.as_ref().map(redirect::Stamper::install).transpose() {
        Ok(stamper) => stamper,
        Err(e) => {
            eprintln!("fperf: error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let pidfile = match cli.pidfile().map(pidfile::PidFile::create).transpose() {
        Ok(pidfile) => pidfile,
        Err(e) => {
            eprintln!("fperf: error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    // Best effort: where it cannot be raised, a run of more flows than the limit allows
    // fails with the kernel's "too many open files", naming the cause.
    let _ = fperf::limits::raise_open_files_limit();
    let removal = pidfile.as_ref().and_then(pidfile::PidFile::removal);
    let code = match run(config, removal) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fperf: error: {e:#}");
            ExitCode::FAILURE
        }
    };
    drop(pidfile);
    if let Some(stamper) = stamper {
        stamper.finish();
    }
    code
}

/// Runs `config`. A second Ctrl-C ends the process at once and removes the pid file
/// (`removal`) as it goes.
fn run(config: Config, removal: Option<pidfile::PidFileRemoval>) -> Result<ExitCode> {
    let interrupted = Arc::new(AtomicBool::new(false));
    // Registered before the handler that sets the flag, so the first Ctrl-C finds it
    // unset (and sets it) and the second ends the process.
    let armed = interrupted.clone();
    // SAFETY: the handler makes only async-signal-safe calls (an atomic load, the
    // removal's open/read/close/unlink, _exit) and allocates nothing.
    unsafe {
        signal_hook::low_level::register(signal_hook::consts::SIGINT, move || {
            if armed.load(Ordering::SeqCst) {
                if let Some(r) = &removal {
                    r.remove_now();
                }
                signal_hook::low_level::exit(130);
            }
        })
    }?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, interrupted.clone())?;
    // Registered before the flag's handler, so that a run the flag stops finds it set.
    // SAFETY: the handler makes one atomic store.
    unsafe {
        signal_hook::low_level::register(signal_hook::consts::SIGTERM, || {
            fperf::output::text::SIGTERM_RECEIVED.store(true, Ordering::Relaxed);
        })
    }?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, interrupted.clone())?;
    // The local user's own tests may ask for buffers past the host's maximum (as root);
    // a server's, a mesh's and an exporter's tests are others' and never do.
    if matches!(
        config,
        Config::Client { .. } | Config::Iperf3 { .. } | Config::Loopback { .. }
    ) {
        fperf::stream::allow_forced_buffers();
    }
    match config {
        Config::Server { server, json } => {
            let one_off = server.one_off;
            let streams = server.limits.max_streams.unwrap_or(MAX_NSTREAMS);
            let server = Server::bind(server)?;
            let listening = Listening::of(&server, streams)?;
            let mut out = std::io::stdout();
            // Whether the last test failed: an error since the last test began.
            let mut failed = false;
            let mut note = |ev: &ServerEvent| match ev {
                ServerEvent::Started { .. } => failed = false,
                ServerEvent::ClientError { .. } => failed = true,
                _ => {}
            };
            if json {
                let mut printer = ServerJsonPrinter::default();
                server.run(&interrupted, &mut |ev| {
                    note(&ev);
                    printer.print(&mut out, ev)
                })?;
            } else {
                let mut printer = ServerPrinter {
                    one_off,
                    listening,
                    ..ServerPrinter::default()
                };
                server.run(&interrupted, &mut |ev| {
                    note(&ev);
                    printer.print(&mut out, ev)
                })?;
            }
            Ok(ExitCode::from(u8::from(one_off && failed)))
        }
        Config::Conf(client) => {
            let server = client::conf(&client)?;
            out!(
                "{}",
                sysinfo::side_by_side(&sysinfo::SystemFacts::collect(), &server)
            );
            Ok(ExitCode::SUCCESS)
        }
        Config::Client { client, output } => run_client(&client, interrupted, &output),
        Config::Iperf3 { client, output } => {
            let start = fperf::output::json_document::StartTime::now();
            let mut sinks = output.sinks(&client.settings, start, None)?;
            let outcome = fperf::client::iperf3::run_observed(&client, interrupted, &mut sinks)?;
            sinks.end(&outcome)?;
            Ok(ExitCode::from(if outcome.interrupted { 130 } else { 0 }))
        }
        Config::Loopback {
            server,
            client,
            output,
        } => loopback(*server, &client, interrupted, &output),
        Config::Mesh(mesh) => run_mesh(&mesh, &interrupted),
        Config::Exporter(config) => {
            let exporter = Exporter::bind(config)?;
            if let Some(addr) = exporter.local_addr() {
                outln!("Exporter listening on http://{addr}/ (probes: /probe?target=HOST[:PORT])");
            }
            let limit = Mutex::new(LogLimit::default());
            exporter.run(
                &interrupted,
                Arc::new(move |event| log_exporter_event(&limit, event)),
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Runs a mesh, with its progress on stderr, then writes what it measured.
fn run_mesh(run: &cli::MeshRun, abort: &AtomicBool) -> Result<ExitCode> {
    let hosts = &run.config.hosts;
    let report = fperf::mesh::run(&run.config, abort, &mut |event| {
        match event {
        MeshEvent::Round {
            index,
            rounds,
            pairs,
            done,
            total,
        } => eprintln!(
            "fperf mesh: round {index} of {rounds}: {pairs} {} at once ({done} of {total} pairs done)",
            if pairs == 1 { "test" } else { "tests" }
        ),
        MeshEvent::Pair {
            result,
            done,
            total,
        } => {
            if let Err(why) = &result.outcome {
                eprintln!(
                    "fperf mesh: {} -> {} failed: {why}",
                    hosts[result.from].name, hosts[result.to].name
                );
            }
            if done == total {
                eprintln!("fperf mesh: {done} of {total} pairs done");
            }
        }
    }
    });
    if let Some(path) = &run.csv {
        std::fs::write(path, report.csv())
            .with_context(|| format!("cannot write --csv {}", path.display()))?;
    }
    if let Some(path) = &run.plot {
        fperf::mesh::heatmap::draw(path, &report)?;
    }
    if run.json {
        outln!("{:#}", report.json());
    } else {
        out!("{}", report.text());
    }
    if abort.load(Ordering::Relaxed) {
        return Ok(ExitCode::from(130));
    }
    let failed = report.pairs.iter().filter(|p| p.outcome.is_err()).count();
    if failed > 0 && failed == report.pairs.len() {
        bail!("no pair could be measured ({failed} of {failed} failed)");
    }
    if failed > 0 {
        eprintln!(
            "fperf mesh: {failed} of {} pairs failed (each named above)",
            report.pairs.len()
        );
    }
    let outliers = report.outliers.len();
    if run.fail_on_outliers && outliers > 0 {
        eprintln!("fperf mesh: {outliers} outliers flagged (--fail-on-outliers)");
    }
    Ok(if failed > 0 || (run.fail_on_outliers && outliers > 0) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The exporter's log: why a probe failed or was refused, one line each on stderr,
/// within `limit` (anyone who reaches the exporter provokes them).
fn log_exporter_event(limit: &Mutex<LogLimit>, event: ExporterEvent) {
    let Ok(mut limit) = limit.lock() else {
        return;
    };
    let line = match event {
        ExporterEvent::ProbeFailed {
            target: None,
            reason,
        } => format!("probe failed: {}", printable(&reason.to_string())),
        ExporterEvent::ProbeFailed {
            target: Some(target),
            reason,
        } => format!(
            "probe of {target:?} failed: {}",
            printable(&reason.to_string())
        ),
        ExporterEvent::ProbeRefused { max } => {
            format!("probe refused: {max} probes are running (--max-probes)")
        }
        ExporterEvent::ConnectionRefused { peer, crowded } => {
            format!("connection from {peer} refused: {crowded}")
        }
    };
    log_limited(
        &mut limit,
        "fperf exporter",
        "failed or refused requests",
        &line,
        || {},
    );
}

/// Writes `line`, which a peer provoked, to stderr after `prefix` if `limit` lets it
/// through; the lines it leaves out (`what` names them) are announced and counted.
/// `before` runs first whenever anything is written. Returns whether anything was.
fn log_limited(
    limit: &mut LogLimit,
    prefix: &str,
    what: &str,
    line: &str,
    before: impl FnOnce(),
) -> bool {
    match limit.admit(std::time::Instant::now()) {
        LogVerdict::Write { left_out } => {
            before();
            if left_out > 0 {
                eprintln!("{prefix}: {left_out} more {what} were not logged");
            }
            eprintln!("{prefix}: {line}");
            true
        }
        LogVerdict::LeaveOut { first: true } => {
            before();
            let secs = limit.window_secs();
            eprintln!(
                "{prefix}: over {} {what} within {secs} s: until the {secs} s are up, more \
                 are counted, not logged",
                limit.burst()
            );
            true
        }
        LogVerdict::LeaveOut { first: false } => false,
    }
}

/// Runs the client (or a sweep of clients) and prints its report.
fn run_client(cfg: &ClientConfig, abort: Arc<AtomicBool>, output: &Output) -> Result<ExitCode> {
    if let Some(sweep) = &output.sweep {
        return measure::run_sweep(cfg, abort, output, sweep);
    }
    if let Some(spec) = &output.under_load {
        return measure::run_under_load(cfg, abort, output, spec);
    }
    // Checks RDMA is usable here before contacting the server, and names the provider.
    let settings = Settings {
        transport: fperf::transport::prepare(&cfg.settings.transport)?,
        ..cfg.settings.clone()
    };
    let cfg = &ClientConfig {
        settings: settings.clone(),
        ..cfg.clone()
    };
    let start = fperf::output::json_document::StartTime::now();
    let mut sinks = output.sinks(&settings, start, None)?;
    let outcome: ClientOutcome = client::run_observed(cfg, abort, &mut sinks)?;
    sinks.end(&outcome)?;
    if outcome.interrupted {
        return Ok(ExitCode::from(130));
    }
    Ok(ExitCode::SUCCESS)
}

/// Starts a server on loopback in this process, runs the client against it, then prints
/// the server's report too.
fn loopback(
    server: ServerConfig,
    client: &ClientConfig,
    abort: Arc<AtomicBool>,
    output: &Output,
) -> Result<ExitCode> {
    let server = Server::bind(server)?;
    let stop = Arc::new(AtomicBool::new(false));
    let server_text = Arc::new(Mutex::new(Vec::<u8>::new()));
    let handle = {
        let (stop, text) = (stop.clone(), server_text.clone());
        std::thread::spawn(move || {
            let mut printer = ServerPrinter {
                loopback: true,
                ..ServerPrinter::default()
            };
            let mut buf = Vec::new();
            let r = server.run(&stop, &mut |ev| {
                printer.print(&mut buf, ev);
                if let Ok(mut t) = text.lock() {
                    t.append(&mut buf);
                }
            });
            r.map_err(|e| e.to_string())
        })
    };
    let code = run_client(client, abort, output);
    stop.store(true, Ordering::Relaxed);
    let served = handle
        .join()
        .map_err(|_| anyhow::anyhow!("server thread panicked"))?;
    if let Err(e) = served {
        bail!("loopback server: {e}");
    }
    if output.mode != measure::Mode::Human {
        // Machine-readable output holds the server's figures already; stdout is only it.
        return code;
    }
    let text = server_text.lock().map(|t| t.clone()).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    // A server that reported nothing (the test failed before it began) adds no lines.
    if !text.trim_end().is_empty() {
        outln!();
        out!("{}", text.trim_end());
        outln!();
    }
    code
}

/// What a server says when it listens: the first time where it listens and which ports
/// its tests may use, after that where it listens.
#[derive(Default)]
struct Listening {
    first: String,
    again: String,
}

impl Listening {
    /// The lines of `server`, whose tests open at most `streams` streams. A test uses
    /// the base port and, stream i, the TCP and UDP ports base+i; with -w or --flows
    /// stream 0 uses base+N, and --crr's stream i base+1+i: the highest is base+N.
    fn of(server: &Server, streams: u32) -> Result<Listening> {
        let addr = server.local_addr()?;
        let port = u32::from(addr.port());
        let last = (port + streams.min(MAX_NSTREAMS)).min(u32::from(u16::MAX));
        let again = format!("Server listening on {addr}");
        let iperf3 = match server.iperf3_addr().transpose()? {
            Some(iperf3) => format!("; iperf3 clients on {iperf3} (TCP and UDP)"),
            None => String::new(),
        };
        let first = format!(
            "{again}; its tests use TCP and UDP ports {port}-{last}: stream i on {port}+i \
             (--crr: {port}+1+i; -w, --flows: stream 0 on {port}+N of N streams){iperf3}"
        );
        Ok(Listening { first, again })
    }
}

/// Prints server events in the original report layout.
#[derive(Default)]
struct ServerPrinter {
    /// What the server says when it listens.
    listening: Listening,
    /// `Server listening on ...` was the last line printed: the next test's header
    /// follows it.
    listening_shown: bool,
    in_test: bool,
    /// The server of `--loopback`: its report follows the client's, without the wait
    /// for clients.
    loopback: bool,
    /// Client errors are logged within it.
    errors: LogLimit,
    /// A one-off server (`-1`): it says it listens once, and stops after a test
    /// instead of listening again.
    one_off: bool,
    /// `Server listening on ...` was printed once.
    listened: bool,
}

impl ServerPrinter {
    fn print(&mut self, out: &mut dyn Write, ev: ServerEvent) {
        match ev {
            ServerEvent::Listening => {
                // A blank line ends the test's report (the client's line may follow
                // its body).
                if std::mem::take(&mut self.in_test) {
                    let _ = writeln!(out);
                }
                let again = self.one_off && self.listened;
                if !self.listening_shown && !self.loopback && !again {
                    self.say_listening(out);
                }
            }
            ServerEvent::Started {
                settings,
                from,
                in_force,
            } => {
                self.in_test = true;
                let header = report::server_header(&settings, &from, &in_force);
                // The header follows `Server listening on ...` (said again after
                // interval lines of tests in parallel); under --loopback there is none.
                if self.loopback {
                    let _ = write!(out, "Server:{header}");
                } else {
                    if !self.listening_shown {
                        self.say_listening(out);
                    }
                    let _ = write!(out, "{}", header.trim_start());
                }
                self.listening_shown = false;
            }
            ServerEvent::Interval {
                settings,
                result,
                client,
            } => {
                // Tests in parallel: the line says whose it is.
                if let Some(client) = client {
                    self.listening_shown = false;
                    let _ = write!(out, "{client}: ");
                }
                let line =
                    report::interval_line(fperf::transport::Role::Server, &settings, &result);
                let _ = writeln!(out, "{line}");
            }
            ServerEvent::Finished { settings, result } => {
                let _ = write!(out, "{}", report::server_body(&settings, &result));
            }
            ServerEvent::ClientFigures { settings, result } => {
                let _ = write!(out, "{}", report::peer_line(&settings, &result, 9));
            }
            ServerEvent::MeshTest {
                coordinator,
                peer,
                settings,
                result,
            } => {
                self.listening_shown = false;
                self.in_test = true;
                let _ = writeln!(out, "mesh test for {coordinator} towards {peer}:");
                let _ = write!(out, "{}", report::peer_line(&settings, &result, 9));
            }
            ServerEvent::ClientError { peer, error } => {
                let wrote = log_limited(
                    &mut self.errors,
                    "fperf",
                    "client errors",
                    &format!("client {peer}: {error}"),
                    || {
                        let _ = out.flush();
                    },
                );
                if wrote {
                    self.say_listening_again(out);
                }
            }
            ServerEvent::LeftOut { intervals, errors } => {
                self.errors.count_left_out(errors);
                if intervals > 0 {
                    let _ = out.flush();
                    eprintln!(
                        "fperf: {intervals} interval reports were left out: the output did \
                         not keep up with them"
                    );
                    self.say_listening_again(out);
                }
            }
        }
        let _ = out.flush();
    }

    /// `Server listening on ...`, with the ports tests use the first time.
    fn say_listening(&mut self, out: &mut dyn Write) {
        let line = match self.listened {
            true => &self.listening.again,
            false => &self.listening.first,
        };
        let _ = writeln!(out, "{line}");
        self.listening_shown = true;
        self.listened = true;
    }

    /// After a line on stderr: between tests, `Server listening on ...` again.
    fn say_listening_again(&mut self, out: &mut dyn Write) {
        if !self.in_test && !self.loopback && !self.one_off {
            self.say_listening(out);
        }
    }
}

/// Prints each test a server ran as one JSON document on one line (`fperf -s --json`);
/// errors go to stderr as in the text layout.
#[derive(Default)]
struct ServerJsonPrinter {
    /// The client of the test being reported.
    client: String,
    /// Client errors are logged within it.
    errors: LogLimit,
}

impl ServerJsonPrinter {
    fn print(&mut self, out: &mut dyn Write, ev: ServerEvent) {
        match ev {
            ServerEvent::Started { from, .. } => self.client = from,
            ServerEvent::Finished { settings, result } => {
                let doc = fperf::output::json_document::ServerTestDoc::new(
                    &settings,
                    std::mem::take(&mut self.client),
                    &result,
                );
                print_json_line(out, &doc);
            }
            ServerEvent::MeshTest {
                coordinator,
                peer,
                settings,
                result,
            } => {
                let doc = fperf::output::json_document::ServerMeshTestDoc::new(
                    &settings,
                    coordinator,
                    peer,
                    &result,
                );
                print_json_line(out, &doc);
            }
            ServerEvent::ClientError { peer, error } => {
                let line = format!("client {peer}: {error}");
                log_limited(&mut self.errors, "fperf", "client errors", &line, || {});
            }
            // No interval is printed here: only the errors left out count.
            ServerEvent::LeftOut { errors, .. } => self.errors.count_left_out(errors),
            ServerEvent::Listening
            | ServerEvent::Interval { .. }
            | ServerEvent::ClientFigures { .. } => {}
        }
    }
}

/// Writes `doc` as one line of JSON.
fn print_json_line(out: &mut dyn Write, doc: &impl serde::Serialize) {
    match serde_json::to_string(doc) {
        Ok(line) => exit_if_closed(writeln!(out, "{line}").and_then(|()| out.flush())),
        Err(e) => eprintln!("fperf: a test's JSON document: {e}"),
    }
}

/// Writes report text to stdout; a closed stdout ends the process (exit 0).
fn write_stdout(args: std::fmt::Arguments) {
    let mut stdout = std::io::stdout().lock();
    exit_if_closed(stdout.write_fmt(args).and_then(|()| stdout.flush()));
}

/// Ends the process (exit 0) when a write to stdout found it closed: whoever read the
/// report stopped reading. Other errors are left to the next write.
fn exit_if_closed(written: std::io::Result<()>) {
    if written.is_err_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) {
        std::process::exit(0);
    }
}
