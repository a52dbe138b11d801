//! The `fperf` command: flags in, one validated configuration out, then the library's
//! server or client, with reports printed here.

use anyhow::{bail, Result};
use clap::{ArgGroup, Parser};
use fperf::auth::AuthKey;
use fperf::client::{self, ClientConfig, ClientOutcome};
use fperf::limits::Limits;
use fperf::report;
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

mod measure;
use fperf::server::{Server, ServerConfig, ServerEvent};
use fperf::settings::{
    Protocol, QueueKind, RdmaApi, Settings, ZeroCopy, DEFAULT_ACK_TIMEOUT_MS, DEFAULT_MB,
    DEFAULT_PKTSIZE, DEFAULT_PORT, MAX_NSTREAMS,
};
use std::io::Write;
use std::net::IpAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

    /// RDMA programming interface: ibverbs (raw verbs, the default), cm (verbs
    /// with rdma_cm connection set-up), rsocket (librdmacm's socket calls) or ofi
    /// (libfabric). Needs -R.
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

    /// TCP only: MPRTT (implies -r) where the server answers each packet with the packet
    /// itself (as many bytes, like sockperf/qperf ping-pong) instead of a 1-byte ACK;
    /// mprtt is then the round trip of a request and its full-size echo.
    #[arg(long)]
    echo: bool,

    /// TCP only: connect-request-response (implies -r), as netperf's TCP_CRR and neper's
    /// tcp_crr: every packet is a new connection (connect, the -l-byte request, a 1-byte
    /// reply, the server closes, the client closes), and mprtt is that whole life of a
    /// connection. Stream i uses the server's port PORT+1+i
    #[arg(long)]
    crr: bool,

    /// TCP or UDP bulk in reverse, as iperf3's -R (here -R is RDMA): the server sends
    /// and the client receives, with the same flags and figures; the client's report is
    /// then the receiving end's (with UDP its loss, reordering and jitter)
    #[arg(long)]
    reverse: bool,

    /// TCP bulk both ways at once, as iperf3's --bidir: -t N streams carry the client's
    /// data and N more the server's (streams N..2N-1). Each end reports what it sent
    /// and what it received, each direction over its own time
    #[arg(long, conflicts_with = "sweep")]
    bidir: bool,

    /// Bytes per send (K, M, G suffixes are binary: 128K = 131072).
    #[arg(short = 'l', long, value_name = "BYTES", default_value_t = DEFAULT_PKTSIZE,
          value_parser = fperf::units::parse_bytes_u32)]
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

    /// TCP only: congestion control algorithm for both ends' data sockets (TCP_CONGESTION),
    /// e.g. cubic, bbr, reno; the kernel's list is net.ipv4.tcp_available_congestion_control.
    /// Default: the kernel's default on each end. Reports name the algorithm in use.
    #[arg(short = 'C', long, value_name = "ALGO")]
    congestion: Option<String>,

    /// TCP only: bytes that must have arrived before the server's read wakes
    /// (SO_RCVLOWAT), 1 to 64M. Default, by how idle the server's cores are: with two
    /// cores per stream and no -b, 128K or one packet if larger (at most half of -w);
    /// with a core per stream or -b, one packet; with more streams than cores, 1. Fewer
    /// wake-ups leave the sender's core more time to copy. With the 128K default the
    /// reads also nap 20 us while data flows (header: rx_nap=20us) instead of waiting to
    /// be woken; giving --rcvlowat turns that off. 1 is the kernel's default (iperf3's
    /// reads). Not with -r, where the server answers each packet as it arrives.
    #[arg(long, value_name = "BYTES", value_parser = fperf::units::parse_bytes_u32)]
    rcvlowat: Option<u32>,

    /// TCP only: the server's reads discard the received bytes in the kernel (recv with
    /// MSG_TRUNC) instead of copying them to its buffer, as neper's --skip-rx-copy:
    /// measures the network and TCP stack without the receiver's copy, so it is not
    /// like-for-like with iperf3's figures. Not with -r.
    #[arg(long)]
    skip_rx_copy: bool,

    /// TCP and UDP: socket buffer size, SO_SNDBUF and SO_RCVBUF of every data socket on
    /// both ends, as iperf3's -w (K, M suffixes; at most 256M). For TCP it replaces the
    /// kernel's autotuning and bounds the window; the client sets it before connecting.
    /// fperf asks past net.core.{r,w}mem_max when root; if the kernel grants less, the
    /// run stops with an error. Default: TCP autotuning; UDP 16 MiB each way.
    #[arg(short = 'w', long, value_name = "BYTES", value_parser = fperf::units::parse_bytes_u32)]
    window: Option<u32>,

    /// TCP only: zero-copy sending. `splice` (the default) moves the buffer with
    /// vmsplice()+splice(); `msg` uses send(MSG_ZEROCOPY) (on loopback the kernel copies
    /// anyway). docs/tuning.md has what each buys.
    #[arg(long, value_name = "MODE", num_args = 0..=1, default_missing_value = "splice",
          value_parser = ["splice", "msg"])]
    zerocopy: Option<String>,

    /// TCP and UDP: spin on non-blocking reads and writes instead of sleeping in
    /// poll(): lower latency, one busy core per waiting thread.
    #[arg(long)]
    busy_poll: bool,

    /// TCP only: both ends move data through io_uring instead of send()/recv() system
    /// calls: one ring per thread, one submission and completion per call (a wait is
    /// bounded by a linked time-out). Measures io_uring's socket path against the system
    /// calls (docs/tuning.md). Not with --zerocopy, --crr or rsockets.
    #[arg(long)]
    io_uring: bool,

    /// TCP and UDP: both ends' data sockets never block; each thread waits for them in
    /// epoll_wait() on an epoll instance of its own (its sockets registered once), as
    /// event-driven servers and sockperf's default -F epoll do, instead of sleeping in
    /// recv()/send() or poll(). A ping-pong turn then costs one more system call. Not
    /// with --busy-poll, --io-uring, --crr or rsockets.
    #[arg(long, conflicts_with_all = ["busy_poll", "io_uring"])]
    epoll: bool,

    /// UDP: datagrams per sendmmsg()/recvmmsg() system call (sequence numbers, loss and
    /// reordering stay counted per datagram; the sender threads of -n > 1 or -q 0 send
    /// one per call) [default: 64; 1 with -r or -b, where a larger N sends paced bursts
    /// of N].
    #[arg(long, value_name = "N")]
    udp_batch: Option<u32>,

    /// UDP: send each batch as UDP GSO messages (UDP_SEGMENT): the kernel cuts them
    /// into -l-byte datagrams, so one pass through the stack carries up to 64.
    #[arg(long)]
    gso: bool,

    /// UDP: the server reads with UDP GRO (UDP_GRO), taking datagrams that arrived
    /// back to back in one buffer (each still counted on its own).
    #[arg(long)]
    gro: bool,

    /// Pin the client's data threads to these CPUs (comma-separated); stream i uses
    /// entry i mod len. Pinned or not, a bulk test's data threads (no -r, no -b) run
    /// under SCHED_BATCH on both ends (header: sched=batch), so a reader woken by data
    /// waits for the writer on its core to block instead of preempting it mid-send.
    #[arg(
        long,
        visible_alias = "affinity",
        value_name = "CPUS",
        value_delimiter = ','
    )]
    cpu: Vec<u32>,

    /// Ask the server to pin its data threads to these CPUs (comma-separated), as --cpu.
    #[arg(long, value_name = "CPUS", value_delimiter = ',')]
    server_cpu: Vec<u32>,

    /// Base port: control and stream 0; stream i uses PORT+i (TCP with -w: stream 0
    /// uses PORT+N).
    #[arg(short = 'p', long, value_name = "PORT", default_value_t = DEFAULT_PORT)]
    port: u16,

    /// UDP with -r: ms to wait for a datagram's ACK before sending it again (up to 10
    /// times) [default: 100].
    #[arg(long, value_name = "MS")]
    ack_timeout: Option<u32>,

    /// Local address to bind: the server listens only there; the client sends from it.
    #[arg(short = 'B', long, value_name = "ADDR")]
    bind: Option<IpAddr>,

    /// Bound the run by time: each stream sends for SECS seconds instead of --mb MB.
    #[arg(long, value_name = "SECS", conflicts_with_all = ["mb", "server"])]
    time: Option<f64>,

    /// Print each side's figures every SECS seconds while the run goes on (and keep
    /// them in --json and --csv).
    #[arg(short = 'i', long, value_name = "SECS", conflicts_with = "server")]
    interval: Option<f64>,

    /// Leave the first SECS seconds (warm-up) out of the totals.
    #[arg(long, value_name = "SECS", conflicts_with = "server")]
    omit: Option<f64>,

    /// Print one JSON document for the run (both ends' figures) and nothing else on
    /// stdout. Layout: docs/json.md.
    #[arg(long, conflicts_with = "server")]
    json: bool,

    /// Print one JSON object per line per event (start, interval, end).
    #[arg(long, conflicts_with_all = ["server", "json", "sweep"])]
    json_stream: bool,

    /// Write per-interval samples (one row per stream per interval) to FILE as CSV.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["server", "sweep"])]
    csv: Option<std::path::PathBuf>,

    /// Draw an SVG picture in FILE: the client's send latency (mprtt with -r) by
    /// percentile, or with --sweep each figure against the swept value.
    #[arg(long, value_name = "FILE", conflicts_with = "server")]
    plot: Option<std::path::PathBuf>,

    /// Print this host's and the server's system facts side by side, then exit.
    #[arg(long, requires = "client")]
    conf: bool,

    /// Run one measurement per value of an option and print one row per value:
    /// NAME=LO..HI[:*K|:+K] or NAME=V1,V2,... for pktsize, nsockets, nstreams or mb
    /// (e.g. pktsize=1..64K:*2).
    #[arg(long, value_name = "SPEC", conflicts_with = "server")]
    sweep: Option<String>,

    /// Target rate of each stream in bits/s (e.g. 100M, 2.5G; K/M/G/T = 10^3..10^12):
    /// the client paces its sends to it. Default: as fast as possible.
    #[arg(short = 'b', long, value_name = "RATE", value_parser = fperf::limits::parse_rate,
          conflicts_with = "server")]
    bitrate: Option<u64>,

    #[command(flatten)]
    guard: Guard,
}

/// Limits, time-outs and the shared key (see `fperf::limits` and `fperf::auth`).
#[derive(clap::Args, Debug)]
struct Guard {
    /// Server: most MB one test may send, all streams together; larger tests are
    /// refused before any data flows.
    #[arg(long, value_name = "MB", value_parser = clap::value_parser!(u64).range(1..))]
    max_mb: Option<u64>,

    /// Server: longest one test may run once data flows; the server aborts it after.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    max_time: Option<u64>,

    /// Server: most data streams (-t) one test may open.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_streams: Option<u32>,

    /// Server: most data sockets (-t × -n) one test may open.
    #[arg(long, value_name = "N", default_value_t = fperf::limits::DEFAULT_MAX_SOCKETS,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_sockets: u32,

    /// Server: cap on how fast the server reads one test's data, in bits/s over all
    /// streams (e.g. 100M, 2.5G; K/M/G/T = 10^3/10^6/10^9/10^12). TCP flow control
    /// then holds the client to it; it is not a reason to refuse a test.
    #[arg(long, value_name = "RATE", value_parser = fperf::limits::parse_rate)]
    max_rate: Option<u64>,

    /// Server: a test whose data stops moving this long is abandoned. Client: sent data
    /// unacknowledged this long means the server is gone (TCP_USER_TIMEOUT).
    #[arg(long, value_name = "SECS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    idle_timeout: u64,

    /// Server: run up to N tests at once (default 1: one at a time, others are told
    /// "server busy"). Tests with several streams (-t > 1) or a TCP window (-w) still need
    /// the server alone.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    parallel: u32,

    /// Shared secret file; both ends must use the same one. The server then accepts
    /// only clients that prove they hold it (HMAC-SHA256 challenge-response); the
    /// client only servers that do. Without this flag the secret itself may be given in
    /// $FPERF_AUTH_KEY.
    #[arg(long, value_name = "FILE")]
    auth_key: Option<std::path::PathBuf>,
}

impl Guard {
    /// The server's limits.
    fn limits(&self) -> Limits {
        Limits {
            max_mb: self.max_mb,
            max_time: self.max_time.map(Duration::from_secs),
            max_streams: self.max_streams,
            max_sockets: self.max_sockets,
            max_rate: self.max_rate,
        }
    }

    /// Refuses server-only options on a client.
    fn check_client(&self) -> Result<()> {
        let server_only = [
            (self.max_mb.is_some(), "--max-mb"),
            (self.max_time.is_some(), "--max-time"),
            (self.max_streams.is_some(), "--max-streams"),
            (self.max_rate.is_some(), "--max-rate"),
            (self.parallel != 1, "--parallel"),
        ];
        if let Some((_, flag)) = server_only.iter().find(|(given, _)| *given) {
            bail!("{flag} is a server option (use it with -s)");
        }
        Ok(())
    }
}

/// Seconds from the command line as whole milliseconds.
fn secs_to_ms(flag: &str, secs: Option<f64>) -> Result<Option<u64>> {
    match secs {
        None => Ok(None),
        Some(s) if s.is_finite() && s >= 0.0 && s * 1000.0 < u64::MAX as f64 => {
            Ok(Some((s * 1000.0).round() as u64))
        }
        Some(s) => bail!("--{flag} must be a number of seconds, not {s}"),
    }
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
        if self.bidir && self.nstreams > MAX_NSTREAMS / 2 {
            bail!(
                "--bidir opens -t streams each way: -t must be at most {}",
                MAX_NSTREAMS / 2
            );
        }
        if self.ack_timeout.is_some() && !(self.udp && self.mprtt) {
            bail!("--ack-timeout applies to UDP with MPRTT only: use it with -u -r");
        }
        let s = Settings {
            protocol,
            // With --bidir, -t counts the streams each way.
            nstreams: if self.bidir {
                self.nstreams.saturating_mul(2)
            } else {
                self.nstreams
            },
            nsockets,
            mb: self.mb,
            pktsize: self.pktsize,
            mprtt: self.mprtt || self.echo || self.crr,
            echo: self.echo,
            crr: self.crr,
            reverse: self.reverse,
            bidir: self.bidir,
            queue,
            nodelay: self.nodelay,
            quickack: self.quickack,
            rdma_api,
            rdma_device: self.rdmadev.clone(),
            ofi_provider: self.ofi_provider.clone(),
            rdma_write: self.rdma_write,
            ack_timeout_ms: self.ack_timeout.unwrap_or(DEFAULT_ACK_TIMEOUT_MS),
            time_ms: secs_to_ms("time", self.time)?,
            interval_ms: secs_to_ms("interval", self.interval)?,
            omit_ms: secs_to_ms("omit", self.omit)?,
            rate_bps: self.bitrate,
            zerocopy: match self.zerocopy.as_deref() {
                None => ZeroCopy::Off,
                Some("msg") => ZeroCopy::Msg,
                Some(_) => ZeroCopy::Splice,
            },
            busy_poll: self.busy_poll,
            io_uring: self.io_uring,
            epoll: self.epoll,
            client_cpus: self.cpu.clone(),
            server_cpus: self.server_cpu.clone(),
            udp_batch: self.udp_batch,
            gso: self.gso,
            gro: self.gro,
            congestion: self.congestion.clone(),
            rcvlowat: self.rcvlowat,
            skip_rx_copy: self.skip_rx_copy,
            window: self.window,
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
    let auth = AuthKey::from_cli(cli.guard.auth_key.as_deref())?;
    let idle = Duration::from_secs(cli.guard.idle_timeout);
    if !cli.server {
        cli.guard.check_client()?;
    }
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
            idle_timeout: idle,
            limits: cli.guard.limits(),
            auth,
            parallel: cli.guard.parallel as usize,
            ..ServerConfig::default()
        })?;
        let mut printer = ServerPrinter::default();
        let mut out = std::io::stdout();
        server.run(&interrupted, &mut |ev| printer.print(&mut out, ev))?;
        let _ = writeln!(out);
        return Ok(ExitCode::SUCCESS);
    }
    let output = Output::from_cli(cli)?;
    if cli.loopback {
        return loopback(cli, settings, interrupted, &output);
    }
    let host = cli.client.clone().unwrap_or_default();
    let mut cfg = ClientConfig::new(host, cli.port, settings);
    cfg.bind = cli.bind;
    cfg.stall_timeout = idle;
    cfg.auth = auth;
    if cli.conf {
        let server = client::conf(&cfg)?;
        out!(
            "{}",
            sysinfo::side_by_side(&sysinfo::SystemFacts::collect(), &server)
        );
        return Ok(ExitCode::SUCCESS);
    }
    run_client(&cfg, interrupted, &output)
}

/// Runs the client (or a sweep of clients) and prints its report.
fn run_client(cfg: &ClientConfig, abort: Arc<AtomicBool>, output: &Output) -> Result<ExitCode> {
    if let Some(sweep) = &output.sweep {
        return measure::run_sweep(cfg, abort, output, sweep);
    }
    // Checks RDMA is usable here before contacting the server, and names the provider.
    let settings = fperf::transport::prepare(&cfg.settings)?;
    let cfg = &ClientConfig {
        settings: settings.clone(),
        ..cfg.clone()
    };
    let start = fperf::json::StartTime::now();
    let mut sinks = output.sinks(&settings, start, false)?;
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
    cli: &Cli,
    settings: Settings,
    abort: Arc<AtomicBool>,
    output: &Output,
) -> Result<ExitCode> {
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
    let code = run_client(&cfg, abort, output);
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
    outln!();
    out!("{}", String::from_utf8_lossy(&text).trim_end());
    outln!();
    code
}

/// Prints server events in the original report layout.
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
            ServerEvent::Started {
                settings,
                from,
                congestion,
                rcvlowat,
                rx_nap,
            } => {
                self.in_test = true;
                let header = report::server_header(
                    &settings,
                    &from,
                    congestion.as_deref(),
                    rcvlowat,
                    rx_nap,
                );
                let _ = write!(out, "{header}");
                self.line_open = false;
            }
            ServerEvent::Interval { settings, result } => {
                let _ = writeln!(
                    out,
                    "{}",
                    report::interval_line(fperf::results::Role::Server, &settings, &result)
                );
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
