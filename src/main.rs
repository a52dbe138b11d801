//! The `fperf` command: flags in, one validated configuration out, then the library's
//! server or client, with reports printed here.

use anyhow::{bail, Result};
use clap::{ArgGroup, Parser};
use fperf::client::{self, ClientConfig, ClientOutcome};
use fperf::report;
use fperf::server::{Server, ServerConfig, ServerEvent};
use fperf::settings::{
    Protocol, QueueKind, RdmaApi, Settings, DEFAULT_ACK_TIMEOUT_MS, DEFAULT_MB, DEFAULT_PKTSIZE,
    DEFAULT_PORT,
};
use std::io::Write;
use std::net::IpAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// 'fperf' measures UDP/TCP/RDMA bandwidth and latency.
///
/// Start `fperf -s` on one host, then `fperf -c HOST` on another: the client sends
/// --mb MB per stream and both ends print what they measured. `fperf --loopback` runs
/// both ends in one process on 127.0.0.1.
#[derive(Parser, Debug)]
#[command(name = "fperf", version, about, long_about = None)]
#[command(group(ArgGroup::new("role").required(true).args(["server", "client", "loopback"])))]
struct Cli {
    /// Run as server: wait for clients, report each test, serve the next one.
    #[arg(short = 's', long)]
    server: bool,

    /// Run as client against HOST (name, IPv4 or IPv6 address).
    #[arg(short = 'c', long, value_name = "HOST")]
    client: Option<String>,

    /// Run server and client in this process over loopback (127.0.0.1), printing both
    /// reports.
    #[arg(long)]
    loopback: bool,

    /// Number of data STREAMs, each driven by its own thread; stream i uses port
    /// PORT+i.
    #[arg(short = 't', long, value_name = "N", default_value_t = 1)]
    nstreams: u32,

    /// Sockets inside each STREAM (1..=100), each with its own sender thread. With
    /// more than one the client sends through the queue (send_submit).
    #[arg(short = 'n', long, value_name = "N", default_value_t = 1)]
    nsockets: u32,

    /// Use UDP (default TCP).
    #[arg(short = 'u', long, conflicts_with = "rdma")]
    udp: bool,

    /// Use RDMA (default TCP).
    #[arg(short = 'R', long)]
    rdma: bool,

    /// RDMA device name (default: the first one found). Needs -R.
    #[arg(short = 'D', long, value_name = "DEV", requires = "rdma")]
    rdmadev: Option<String>,

    /// RDMA programming interface: ibverbs (the seed's default), cm, rsocket, or ofi
    /// (libfabric; the only one this build implements). Needs -R.
    #[arg(long, value_name = "API", requires = "rdma", value_parser = ["ibverbs", "cm", "rsocket", "ofi"])]
    rdma_api: Option<String>,

    /// libfabric provider for --rdma-api ofi (verbs, efa, tcp, shm, "tcp;ofi_rxm", ...;
    /// default: the first of verbs, efa, tcp that works). Needs -R.
    #[arg(long, value_name = "NAME", requires = "rdma")]
    ofi_provider: Option<String>,

    /// RDMA: move the data with RDMA WRITEs into the receiver's buffer ring (with
    /// immediate data) instead of SEND/RECV. Needs -R.
    #[arg(long, requires = "rdma")]
    rdma_write: bool,

    /// MB (2^20 bytes) to send per stream.
    #[arg(short = 'm', long, value_name = "N", default_value_t = DEFAULT_MB)]
    mb: u64,

    /// "Most-practical round-trip time": wait for a 1-byte ACK after each packet and
    /// report its round trip as mprtt.
    #[arg(short = 'r', long)]
    mprtt: bool,

    /// Bytes per send.
    #[arg(short = 'l', long, value_name = "BYTES", default_value_t = DEFAULT_PKTSIZE)]
    pktsize: u32,

    /// Queue inside a STREAM: 1 = mutex queue (default), 0 = lock-free SPSC queue
    /// (one socket, always asynchronous sending).
    #[arg(short = 'q', long, value_name = "0|1", default_value_t = 1,
          value_parser = clap::value_parser!(u8).range(0..=1))]
    qtype: u8,

    /// TCP only: set TCP_NODELAY (disable Nagle's algorithm) on both ends.
    #[arg(short = 'd', long)]
    nodelay: bool,

    /// TCP only: set TCP_QUICKACK (disable delayed ACKs) on both ends, re-armed after
    /// every receive.
    #[arg(short = 'a', long)]
    quickack: bool,

    /// Base port: control and stream 0; stream i uses PORT+i.
    #[arg(short = 'p', long, value_name = "PORT", default_value_t = DEFAULT_PORT)]
    port: u16,

    /// UDP with -r: ms to wait for a datagram's ACK before sending it again (up to 10
    /// times) [default: 100].
    #[arg(long, value_name = "MS")]
    ack_timeout: Option<u32>,

    /// Local address to bind: the server listens only there; the client sends from it.
    #[arg(short = 'B', long, value_name = "ADDR")]
    bind: Option<IpAddr>,
}

impl Cli {
    /// The validated run settings.
    fn settings(&self) -> Result<Settings> {
        let protocol = match (self.udp, self.rdma) {
            (true, _) => Protocol::Udp,
            (_, true) => Protocol::Rdma,
            _ => Protocol::Tcp,
        };
        let Some(queue) = QueueKind::from_qtype(self.qtype) else {
            bail!("--qtype must be 0 or 1");
        };
        if self.server
            && (self.rdmadev.is_some() || self.rdma_api.is_some() || self.ofi_provider.is_some())
        {
            bail!("--rdmadev, --rdma-api and --ofi-provider are client options; the server uses what the client asks for");
        }
        let rdma_api = match self.rdma_api.as_deref() {
            Some("cm") => RdmaApi::Cm,
            Some("rsocket") => RdmaApi::Rsocket,
            Some("ofi") => RdmaApi::Ofi,
            _ => RdmaApi::Ibverbs,
        };
        if self.ofi_provider.is_some() && rdma_api != RdmaApi::Ofi {
            bail!("--ofi-provider needs --rdma-api ofi");
        }
        let nsockets = if queue == QueueKind::LockFree && self.nsockets > 1 {
            eprintln!(
                "fperf: note: the lock-free queue (-q 0) drives one socket; --nsockets forced to 1"
            );
            1
        } else {
            self.nsockets
        };
        if self.ack_timeout.is_some() && !(self.udp && self.mprtt) {
            bail!("--ack-timeout applies to UDP with MPRTT only: use it with -u -r");
        }
        let s = Settings {
            protocol,
            nstreams: self.nstreams,
            nsockets,
            mb: self.mb,
            pktsize: self.pktsize,
            mprtt: self.mprtt,
            queue,
            nodelay: self.nodelay,
            quickack: self.quickack,
            rdma_api,
            rdma_device: self.rdmadev.clone(),
            ofi_provider: self.ofi_provider.clone(),
            rdma_write: self.rdma_write,
            ack_timeout_ms: self.ack_timeout.unwrap_or(DEFAULT_ACK_TIMEOUT_MS),
        };
        s.validate()?;
        Ok(s)
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // clap's message may span lines (e.g. a list of missing flags): keep it to one.
            let text = e.render().to_string();
            let message: Vec<&str> = text
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            let message = message.join(" ");
            eprintln!(
                "fperf: {} (see fperf --help)",
                message.trim_start_matches("error: ")
            );
            return ExitCode::from(2);
        }
    };
    match run(&cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fperf: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<ExitCode> {
    // Server mode takes its settings from each client; checking the flags given still
    // catches a mistyped combination before anything starts.
    let settings = cli.settings()?;
    let interrupted = Arc::new(AtomicBool::new(false));
    // A second Ctrl-C ends the process at once.
    signal_hook::flag::register_conditional_shutdown(
        signal_hook::consts::SIGINT,
        130,
        interrupted.clone(),
    )?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, interrupted.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, interrupted.clone())?;

    if cli.server {
        let server = Server::bind(ServerConfig {
            bind: cli.bind,
            port: cli.port,
            ..ServerConfig::default()
        })?;
        let mut printer = ServerPrinter::default();
        let mut out = std::io::stdout();
        server.run(&interrupted, &mut |ev| printer.print(&mut out, ev))?;
        let _ = writeln!(out);
        return Ok(ExitCode::SUCCESS);
    }
    if cli.loopback {
        return loopback(cli, settings, interrupted);
    }
    let host = cli.client.clone().unwrap_or_default();
    let mut cfg = ClientConfig::new(host, cli.port, settings);
    cfg.bind = cli.bind;
    run_client(&cfg, interrupted)
}

/// Runs the client and prints its report.
fn run_client(cfg: &ClientConfig, abort: Arc<AtomicBool>) -> Result<ExitCode> {
    // Checks RDMA is usable here before contacting the server, and names the provider.
    let settings = fperf::transport::prepare(&cfg.settings)?;
    let cfg = &ClientConfig {
        settings: settings.clone(),
        ..cfg.clone()
    };
    let outcome: ClientOutcome = client::run(cfg, abort, &mut |streams| {
        let list: Vec<_> = streams
            .iter()
            .map(|s| (s.index, s.local.clone(), s.peer.clone()))
            .collect();
        print!("{}", report::client_header(&settings, &list));
        let _ = std::io::stdout().flush();
    })?;
    print!("{}", report::client_body(&settings, &outcome.client));
    if outcome.interrupted {
        println!("(interrupted: the figures cover what was sent before Ctrl-C)");
        return Ok(ExitCode::from(130));
    }
    Ok(ExitCode::SUCCESS)
}

/// Starts a server on loopback in this process, runs the client against it, then prints
/// the server's report too.
fn loopback(cli: &Cli, settings: Settings, abort: Arc<AtomicBool>) -> Result<ExitCode> {
    let ip: IpAddr = cli.bind.unwrap_or(IpAddr::from([127, 0, 0, 1]));
    let server = Server::bind(ServerConfig {
        bind: Some(ip),
        port: cli.port,
        ..ServerConfig::default()
    })?;
    let stop = Arc::new(AtomicBool::new(false));
    let server_text = Arc::new(Mutex::new(Vec::<u8>::new()));
    let handle = {
        let (stop, text) = (stop.clone(), server_text.clone());
        std::thread::spawn(move || {
            let mut printer = ServerPrinter::default();
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
    let mut cfg = ClientConfig::new(ip.to_string(), cli.port, settings);
    cfg.bind = None;
    let code = run_client(&cfg, abort);
    stop.store(true, Ordering::Relaxed);
    let served = handle
        .join()
        .map_err(|_| anyhow::anyhow!("server thread panicked"))?;
    if let Err(e) = served {
        bail!("loopback server: {e}");
    }
    let text = server_text.lock().map(|t| t.clone()).unwrap_or_default();
    println!();
    print!("{}", String::from_utf8_lossy(&text).trim_end());
    println!();
    code
}

/// Prints server events in the seed's layout.
#[derive(Default)]
struct ServerPrinter {
    /// `Server listening ....` was printed and its line is still open.
    line_open: bool,
    in_test: bool,
}

impl ServerPrinter {
    fn print(&mut self, out: &mut dyn Write, ev: ServerEvent) {
        match ev {
            ServerEvent::Listening => {
                self.in_test = false;
                if !self.line_open {
                    let _ = write!(out, "Server listening ....");
                    self.line_open = true;
                }
            }
            ServerEvent::Started { settings, from } => {
                self.in_test = true;
                let _ = write!(out, "{}", report::server_header(&settings, &from));
                self.line_open = false;
            }
            ServerEvent::Finished { settings, result } => {
                let _ = writeln!(out, "{}", report::server_body(&settings, &result));
            }
            ServerEvent::ClientError { peer, error } => {
                if self.line_open {
                    let _ = writeln!(out);
                    self.line_open = false;
                }
                let _ = out.flush();
                eprintln!("fperf: client {peer}: {error}");
                if !self.in_test {
                    let _ = write!(out, "Server listening ....");
                    self.line_open = true;
                }
            }
        }
        let _ = out.flush();
    }
}
