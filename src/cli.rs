//! The command line: clap's definition of every flag, and the one place the flags
//! become a validated [`Config`]. Nothing after [`Cli::config`] checks a flag again; the
//! server runs the library's same validation on the settings a client sends.

use crate::measure::{Mode, Output, Table};
use crate::redirect::LinePrefix;
use anyhow::{bail, Context, Result};
use clap::{ArgGroup, CommandFactory, FromArgMatches, Parser};
use fperf::auth::AuthKey;
use fperf::client::ClientConfig;
use fperf::control::keepalive::ControlKeepalive;
use fperf::exporter::{Allow, ExporterConfig};
use fperf::family::{IpFamily, OPTIONS as FAMILY_OPTIONS};
use fperf::latency_probe::phases::PhasePlan;
use fperf::limits::Limits;
use fperf::mesh::{pattern::Pattern, MeshConfig, MeshHost};
use fperf::options::{and_list, Front, Given, TestOption};
use fperf::output::json_document::DocLabels;
use fperf::percentiles::Percentiles;
use fperf::server::ServerConfig;
use fperf::settings::options::{
    GivenTime, WorkloadFlags, OMIT_OPTION, OUTPUT_OPTIONS, TIME_OPTION, WORKLOAD_OPTIONS,
};
use fperf::settings::{
    default_pktsize, SchedPolicy, Settings, DEFAULT_MB, DEFAULT_PORT, DEFAULT_TIME_MS,
    MAX_NSOCKETS, MAX_NSTREAMS,
};
use fperf::stream::sender::QueueKind;
use fperf::transport::rdma::options::OPTIONS as RDMA_OPTIONS;
use fperf::transport::rdma::settings::RdmaSettings;
use fperf::transport::settings::{Protocol, TransportSettings};
use fperf::transport::sockets::{SocketSettings, OPTIONS as SOCKET_OPTIONS};
use fperf::transport::tcp::options::OPTIONS as TCP_OPTIONS;
use fperf::transport::tcp::settings::TcpSettings;
use fperf::transport::udp::options::OPTIONS as UDP_OPTIONS;
use fperf::transport::udp::settings::UdpSettings;
use fperf::transport::xdp::options::OPTIONS as XDP_OPTIONS;
use fperf::under_load::spec::{UnderLoadSpec, OPTIONS as UNDER_LOAD_OPTIONS};
use fperf::units::parse_seconds;
use fperf::workload::Workload;
use std::ffi::OsString;
use std::fs::File;
use std::net::IpAddr;
use std::time::Duration;

/// What the command line asks for, validated.
pub enum Config {
    /// `-s`: serve tests until interrupted; with `json`, a JSON document per test.
    Server { server: ServerConfig, json: bool },
    /// `-c HOST --conf`: both hosts' facts side by side.
    Conf(Box<ClientConfig>),
    /// `-c HOST`: one test (or a sweep of tests) against a server.
    Client {
        client: Box<ClientConfig>,
        output: Output,
    },
    /// `-c HOST --iperf3`: one test against an iperf3 server.
    Iperf3 {
        client: Box<ClientConfig>,
        output: Output,
    },
    /// `--loopback`: a server in this process, and the client against it.
    Loopback {
        server: Box<ServerConfig>,
        client: Box<ClientConfig>,
        output: Output,
    },
    /// `fperf exporter`: fperf tests for Prometheus's scrapes.
    Exporter(ExporterConfig),
    /// `fperf mesh`: tests between many servers, at their servers' hands.
    Mesh(Box<MeshRun>),
}

/// 'fperf' measures UDP/TCP/RDMA bandwidth and latency.
///
/// Start `fperf -s` on one host, then `fperf -c HOST` on another: the client sends for
/// 10 s (--time SECS, or -m MB per stream) and both ends print what they measured. `fperf --loopback` runs
/// both ends in one process on 127.0.0.1.
#[derive(Parser, Debug)]
#[command(
    name = "fperf",
    version = fperf::VERSION_TEXT,
    about,
    long_about = None,
    after_help = "Every option, grouped by topic: fperf --help (or man fperf). iperf3 \
                  users: fperf's -t is the number of streams (--time SECS for a time), \
                  and -R is RDMA (--reverse for data from the server).",
    after_long_help = "fperf -h lists the options most runs need. What each figure of the \
                       reports means: the README's \"What the figures mean\"."
)]
#[command(group(ArgGroup::new("role").required(true).args(["server", "client", "loopback", "generate"])))]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    disable_help_subcommand = true
)]
pub struct Cli {
    /// Run as server: wait for clients, report each test, serve the next one.
    #[arg(help_heading = "Roles", short = 's', long)]
    server: bool,

    /// Server: serve one test, then exit, as iperf3's -1; the exit status is 1 if that
    /// test failed.
    #[arg(hide_short_help = true, help_heading = "Roles", short = '1', long)]
    one_off: bool,

    /// Run as client against HOST (name, IPv4 or IPv6 address).
    #[arg(help_heading = "Roles", short = 'c', long, value_name = "HOST", value_parser = parse_host)]
    client: Option<String>,

    /// Run server and client in this process, over loopback.
    ///
    /// The server listens on 127.0.0.1 (::1 with -6) and both reports are printed.
    #[arg(help_heading = "Roles", long)]
    loopback: bool,

    /// Client: the server is an unmodified iperf3 server (`iperf3 -s`): run a TCP or UDP
    /// test against it in iperf3's protocol (-p defaults to 5201).
    #[arg(
        hide_short_help = true,
        help_heading = "Roles",
        long,
        requires = "client"
    )]
    iperf3: bool,

    #[command(flatten)]
    nstreams: Declared<StreamsGroup>,

    /// Sockets inside each STREAM (1..=100).
    ///
    /// Each has its own sender thread. With more than one the client sends through
    /// the queue (send_submit).
    #[arg(
        hide_short_help = true,
        help_heading = "Test",
        short = 'n',
        long,
        value_name = "N",
        default_value_t = 1,
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_NSOCKETS))
    )]
    nsockets: u32,

    /// TCP connections, or with -u UDP sockets (flows), to multiplex over --threads
    /// threads, as neper's -F.
    ///
    /// Each thread drives its share of the flows from one epoll set, on both ends,
    /// instead of a thread per stream. Bulk writes to one flow until the kernel takes no
    /// more from it, then to the next (UDP: each batch goes to the next flow in turn);
    /// with -r or --echo every flow
    /// keeps a request of its own in flight, so a thread runs as many round trips at
    /// once as it has flows (a UDP request is sent again after --ack-timeout); with --crr every flow
    /// keeps a connection of its own in flight (connect, request, reply, close, the
    /// next), as neper's tcp_crr. Must be a multiple of --threads; -m and
    /// --transactions count per thread. Up to 10000.
    #[arg(help_heading = "Test", hide_short_help = true, long, value_name = "N",
          conflicts_with_all = ["nstreams", "nsockets"])]
    flows: Option<u32>,

    /// With --flows: threads on each end that drive the flows (default 1), as neper's -T.
    #[arg(
        help_heading = "Test",
        hide_short_help = true,
        long,
        value_name = "N",
        requires = "flows"
    )]
    threads: Option<u32>,

    /// Use UDP (default TCP).
    #[arg(help_heading = "Test", short = 'u', long, conflicts_with = "rdma")]
    udp: bool,

    /// Use RDMA (default TCP).
    #[arg(help_heading = "Test", short = 'R', long)]
    rdma: bool,

    /// MB (2^20 bytes) to send per stream [default: a run of 10 s].
    ///
    /// Without -m, --time or --transactions a run lasts 10 s, and a sweep's runs share
    /// 10 s (each 0.2 to 2 s).
    #[arg(help_heading = "Test", short = 'm', long, value_name = "N")]
    mb: Option<u64>,

    #[command(flatten)]
    pktsize: Declared<PktsizeGroup>,

    /// Queue inside a STREAM: 1 = mutex, 0 = lock-free.
    ///
    /// The lock-free queue is single-producer single-consumer: one socket, always
    /// asynchronous sending.
    #[arg(hide_short_help = true, help_heading = "Test", short = 'q', long, value_name = "0|1", default_value_t = 1,
          value_parser = clap::value_parser!(u8).range(0..=1))]
    qtype: u8,

    /// Pin the client's data threads to these CPUs (comma-separated); stream i uses
    /// entry i mod len.
    #[arg(
        hide_short_help = true,
        help_heading = "Tuning",
        long,
        visible_alias = "affinity",
        value_name = "CPUS",
        value_delimiter = ','
    )]
    cpu: Vec<u32>,

    /// Ask the server to pin its data threads to these CPUs (comma-separated), as --cpu.
    #[arg(
        hide_short_help = true,
        help_heading = "Tuning",
        long,
        value_name = "CPUS",
        value_delimiter = ','
    )]
    server_cpu: Vec<u32>,

    /// Scheduling policy of both ends' data threads: auto runs a bulk test's (no -r,
    /// no -b) under SCHED_BATCH (header: sched=batch), so a reader woken by data waits
    /// for the writer on its core to block instead of preempting it mid-send, unless
    /// its streams about match the CPUs of that end (at least 2 streams, more than half
    /// as many as CPUs and no more), where the normal policy moves more; the others
    /// run under the normal policy. normal or batch picks one for every test.
    #[arg(
        hide_short_help = true,
        help_heading = "Tuning",
        long,
        value_name = "POLICY",
        default_value = "auto",
        value_parser = ["auto", "normal", "batch"]
    )]
    sched: String,

    /// The server's port (default 28444; with --iperf3, iperf3's 5201).
    ///
    /// The control connection and stream 0 use PORT; stream i uses PORT+i, TCP and
    /// UDP (TCP with -w or --flows: stream 0 uses PORT+N; --crr: stream i uses
    /// PORT+1+i). A server prints the ports its tests may use.
    #[arg(
        help_heading = "Roles",
        short = 'p',
        long,
        value_name = "PORT",
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    port: Option<u16>,

    /// Local address to bind: the server listens only there; the client sends from it.
    #[arg(
        hide_short_help = true,
        help_heading = "Roles",
        short = 'B',
        long,
        value_name = "ADDR",
        value_parser = parse_ip
    )]
    bind: Option<IpAddr>,

    /// Client: send through this network interface only (SO_BINDTODEVICE), as iperf3's
    /// --bind-dev, whatever the routes say: the control connection and every data socket
    /// (e.g. one NIC of several on the same subnet, or a VRF). Not with -R, where -D picks
    /// the RDMA device.
    #[arg(
        hide_short_help = true,
        help_heading = "Roles",
        long,
        value_name = "DEV"
    )]
    bind_dev: Option<String>,

    /// Client: send from this local port, as iperf3's --cport (e.g. where a firewall
    /// admits only known ports): data socket k of the run (stream by stream, -n
    /// sockets each) uses PORT+k. The control connection's port stays the kernel's
    /// choice. Not with -R, --flows or --crr.
    #[arg(hide_short_help = true, help_heading = "Roles", long, value_name = "PORT",
          value_parser = clap::value_parser!(u16).range(1..))]
    cport: Option<u16>,

    #[command(flatten)]
    family: Declared<FamilyGroup>,

    /// Server: also serve unmodified iperf3 clients (TCP and UDP), on this port (iperf3's own
    /// is 5201), beside fperf clients on -p.
    #[arg(
        hide_short_help = true,
        help_heading = "Roles",
        long,
        value_name = "PORT",
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    iperf3_port: Option<u16>,

    #[command(flatten)]
    time: Declared<TimeGroup>,

    /// With -r, --echo or --crr: each stream ends after N round trips (requests
    /// answered) instead of --mb MB.
    #[arg(hide_short_help = true, help_heading = "Test", long, value_name = "N",
          conflicts_with_all = ["mb", "time", "server"], value_parser = clap::value_parser!(u64).range(1..))]
    transactions: Option<u64>,

    /// Print each side's figures every SECS seconds while the run goes on.
    ///
    /// They are kept in --json and --csv too. At least 0.01 s, and 0.002 s per stream;
    /// 0, as iperf3's -i 0, prints none (nor the progress line). Units as --time's.
    #[arg(
        help_heading = "Test",
        short = 'i',
        long,
        value_name = "SECS",
        conflicts_with = "server",
        allow_negative_numbers = true,
        value_parser = parse_seconds
    )]
    interval: Option<f64>,

    #[command(flatten)]
    omit: Declared<OmitGroup>,

    /// Print one JSON document for the run instead of the text report.
    ///
    /// The document holds both ends' figures and is all that goes to stdout. Layout:
    /// docs/json.md. --json=iperf3 writes it in the layout of iperf3's -J, with a line
    /// per second unless -i says otherwise. A server prints one document per test,
    /// each on one line (JSON Lines).
    #[arg(help_heading = "Output",
        long,
        value_name = "LAYOUT",
        hide_possible_values = true,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "fperf"
    )]
    json: Option<JsonLayout>,

    /// Append everything fperf prints, reports and errors, to FILE instead of the
    /// terminal, as iperf3's --logfile.
    #[arg(
        hide_short_help = true,
        help_heading = "Output",
        long,
        value_name = "FILE"
    )]
    logfile: Option<std::path::PathBuf>,

    /// Begin each line of the report with the wall-clock time, as iperf3's
    /// --timestamps: FORMAT is strftime's, "%c " unless given (--timestamps='%T ').
    #[arg(hide_short_help = true, help_heading = "Output", long, value_name = "FORMAT",
          num_args = 0..=1, require_equals = true, default_missing_value = "%c ",
          conflicts_with_all = ["json", "json_stream"])]
    timestamps: Option<String>,

    /// Write this process's ID to FILE while it runs, as iperf3's -I (for a service
    /// manager, or a script that stops the server later); the file is removed at exit,
    /// a second Ctrl-C's too. Refused if FILE names a process that is still running.
    #[arg(
        hide_short_help = true,
        help_heading = "Output",
        short = 'I',
        long,
        value_name = "FILE"
    )]
    pidfile: Option<std::path::PathBuf>,

    /// Begin each line fperf prints with "TITLE:  ", as iperf3's -T (after the time of
    /// --timestamps); with --json the client's document holds it as "title" instead.
    #[arg(
        hide_short_help = true,
        help_heading = "Output",
        short = 'T',
        long,
        value_name = "TITLE",
        conflicts_with = "json_stream"
    )]
    title: Option<String>,

    /// Put TEXT in the client's --json document as "extra_data", as iperf3's
    /// --extra-data: a label for the scripts that collect the documents.
    #[arg(
        hide_short_help = true,
        help_heading = "Output",
        long,
        value_name = "TEXT",
        requires = "json"
    )]
    extra_data: Option<String>,

    /// Print one JSON object per line per event (start, interval, end).
    #[arg(hide_short_help = true, help_heading = "Output", long, conflicts_with_all = ["server", "json", "sweep"])]
    json_stream: bool,

    /// Write per-interval samples (one row per stream per interval; without -i, one
    /// row per stream for the whole run) to FILE as CSV.
    #[arg(hide_short_help = true, help_heading = "Output", long, value_name = "FILE", conflicts_with_all = ["server", "sweep"])]
    csv: Option<std::path::PathBuf>,

    #[command(flatten)]
    percentiles: Declared<PercentilesGroup>,

    /// Draw an SVG picture in FILE: the client's send latency (mprtt with -r) by
    /// percentile, or with --sweep each figure against the swept value.
    #[arg(
        hide_short_help = true,
        help_heading = "Output",
        long,
        value_name = "FILE",
        conflicts_with = "server"
    )]
    plot: Option<std::path::PathBuf>,

    /// Print this host's and the server's system facts side by side, then exit.
    #[arg(
        hide_short_help = true,
        help_heading = "Roles",
        long,
        requires = "client"
    )]
    conf: bool,

    /// Run one measurement per value of an option and print one row per value:
    /// NAME=LO..HI[:*K|:+K] or NAME=V1,V2,... for pktsize, nsockets, nstreams or mb
    /// (e.g. pktsize=1..64K:*2).
    #[arg(
        hide_short_help = true,
        help_heading = "Test",
        long,
        value_name = "SPEC",
        conflicts_with = "server"
    )]
    sweep: Option<String>,

    /// With --sweep: run each of these tests at every value and print one row per
    /// value with a column group per test, as qperf's "tcp_bw tcp_lat": bw (bulk data),
    /// rr (-r) and echo (--echo), e.g. --tests bw,rr.
    #[arg(hide_short_help = true, help_heading = "Test", long, value_name = "LIST",
          requires = "sweep", conflicts_with_all = ["mprtt", "echo", "crr", "reverse", "bidir"])]
    tests: Option<String>,

    /// With --sweep: the table's layout, fperf (the default) or sfnt: sfnt-pingpong's
    /// preamble (command line, host, CPU) and columns (size, mean, min, median, max,
    /// percentiles, stddev, iter) in ns, each figure as half and as whole round trip.
    /// sfnt needs -r, --echo or --crr.
    #[arg(hide_short_help = true, help_heading = "Output", long, value_name = "LAYOUT",
          requires = "sweep", conflicts_with_all = ["json", "tests"])]
    table: Option<Table>,

    #[command(flatten)]
    bitrate: Declared<BitrateGroup>,

    /// Write the man page, a shell's completions or the JSON output's schema to stdout,
    /// then exit: fperf's page (man), fperf mesh's (man-mesh), fperf exporter's
    /// (man-exporter), completions for bash, zsh or fish (complete-bash, complete-zsh,
    /// complete-fish), or the JSON Schema of --json's documents and --json-stream's
    /// lines (json-schema).
    #[arg(
        hide_short_help = true,
        help_heading = "Output",
        long,
        value_name = "WHAT",
        exclusive = true
    )]
    generate: Option<Generate>,

    #[command(flatten)]
    workload_opts: WorkloadArgs,

    #[command(flatten)]
    under_load: Declared<UnderLoadGroup>,

    #[command(flatten)]
    tcp_opts: Declared<TcpGroup>,

    #[command(flatten)]
    socket_opts: Declared<SocketGroup>,

    #[command(flatten)]
    udp_opts: Declared<UdpGroup>,

    #[command(flatten)]
    rdma_opts: Declared<RdmaGroup>,

    #[command(flatten)]
    guard: Guard,

    #[command(subcommand)]
    command: Option<Command>,

    /// The streams of a `-t N` given as a bare number, which an iperf3 user may have
    /// meant as seconds (set by [`Cli::parse_args`]).
    #[arg(skip)]
    bare_t: Option<String>,
}

/// Commands beside the server's and client's roles.
#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Serve fperf tests to Prometheus: each scrape of /probe runs one test.
    ///
    /// Each scrape of /probe?target=HOST[:PORT] runs a test against that fperf server
    /// and answers with both ends' figures, as Prometheus's blackbox exporter answers
    /// with its probes'.
    Exporter(ExporterArgs),
    /// Measure between many fperf servers: a matrix of every pair.
    ///
    /// Each pair's test is run by the sending host's server towards the receiving
    /// host's, at this coordinator's request; the servers run with --allow-mesh and the
    /// same --auth-key. The coordinator carries no data.
    Mesh(Box<MeshArgs>),
}

/// `fperf mesh`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Patterns: all-pairs (every ordered pair, in rounds where no host is \
                  in two tests), ring (each host towards the next), incast:K (K senders \
                  at once into each host in turn; the servers need --parallel K), one-to-all:HOST (HOST towards each \
                  other host). Exit status 1 when a pair failed (their count goes to \
                  stderr), and with --fail-on-outliers when a pair stands out."
)]
struct MeshArgs {
    /// The fperf servers, as HOST or HOST:PORT ([IPv6]:PORT).
    #[arg(value_name = "HOST[:PORT]")]
    hosts: Vec<String>,

    /// Read the servers from FILE, one HOST[:PORT] per line (# starts a comment).
    #[arg(long, value_name = "FILE")]
    hostfile: Option<std::path::PathBuf>,

    /// Which pairs to measure: all-pairs, ring, incast:K or one-to-all:HOST.
    #[arg(long, value_name = "PATTERN", default_value = "all-pairs")]
    pattern: String,

    /// Port of the servers given without one.
    #[arg(short = 'p', long, value_name = "PORT", default_value_t = DEFAULT_PORT,
          value_parser = clap::value_parser!(u16).range(1..))]
    port: u16,

    #[command(flatten)]
    time: Declared<MeshTimeGroup>,

    #[command(flatten)]
    nstreams: Declared<MeshStreamsGroup>,

    /// UDP instead of TCP.
    #[arg(short = 'u', long)]
    udp: bool,

    #[command(flatten)]
    pktsize: Declared<MeshPktsizeGroup>,

    #[command(flatten)]
    round_trips: Declared<MeshRoundTripGroup>,

    #[command(flatten)]
    bitrate: Declared<MeshBitrateGroup>,

    #[command(flatten)]
    tcp: Declared<MeshTcpGroup>,

    #[command(flatten)]
    sockets: Declared<MeshSocketGroup>,

    #[command(flatten)]
    family: Declared<MeshFamilyGroup>,

    #[command(flatten)]
    under_load: Declared<MeshUnderLoadGroup>,

    /// Shared secret file the servers hold (or the secret in $FPERF_AUTH_KEY).
    #[arg(long, value_name = "FILE")]
    auth_key: Option<std::path::PathBuf>,

    /// Print the JSON document (hosts, matrix, pairs, outliers) instead of the text.
    #[arg(long)]
    json: bool,

    /// Also write a row per pair to FILE.
    #[arg(long, value_name = "FILE")]
    csv: Option<std::path::PathBuf>,

    /// Also draw the matrix as a heatmap into FILE (SVG).
    #[arg(long, value_name = "FILE")]
    plot: Option<std::path::PathBuf>,

    /// Pairs below this share of the median are outliers (latency: above the median
    /// divided by it).
    #[arg(long, value_name = "SHARE", default_value_t = 0.8)]
    outlier_below: f64,

    /// Exit with status 1 when a pair is an outlier too (a failed pair always makes it 1).
    #[arg(long)]
    fail_on_outliers: bool,
}

/// What `fperf mesh` runs and writes.
pub struct MeshRun {
    pub config: MeshConfig,
    pub json: bool,
    pub csv: Option<std::path::PathBuf>,
    pub plot: Option<std::path::PathBuf>,
    pub fail_on_outliers: bool,
}

impl MeshArgs {
    fn run(&self) -> Result<MeshRun> {
        let mut names = self.hosts.clone();
        if let Some(path) = &self.hostfile {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --hostfile {}", path.display()))?;
            names.extend(
                text.lines()
                    .map(|l| l.split('#').next().unwrap_or("").trim())
                    .filter(|l| !l.is_empty())
                    .map(str::to_owned),
            );
        }
        if names.len() < 2 {
            bail!("fperf mesh needs at least two servers (HOST[:PORT]... or --hostfile FILE)");
        }
        fperf::mesh::check_hosts(names.len()).map_err(|e| anyhow::anyhow!(e))?;
        let hosts = names
            .iter()
            .map(|n| MeshHost::parse(n, self.port).map_err(|e| anyhow::anyhow!(e)))
            .collect::<Result<Vec<_>>>()?;
        let family = self.family.family()?;
        for h in &hosts {
            if let Ok(ip) = h.host.parse::<std::net::IpAddr>() {
                family
                    .check("the host", ip)
                    .map_err(|e| anyhow::anyhow!(e))?;
            }
        }
        for (i, h) in hosts.iter().enumerate() {
            if hosts[..i]
                .iter()
                .any(|o| o.host == h.host && o.port == h.port)
            {
                bail!("{} is given twice", h.name);
            }
        }
        let pattern = Pattern::parse(&self.pattern, &names).map_err(|e| anyhow::anyhow!(e))?;
        fperf::mesh::check_size(hosts.len(), &pattern).map_err(|e| anyhow::anyhow!(e))?;
        let auth = AuthKey::from_cli(self.auth_key.as_deref())?.ok_or_else(|| {
            anyhow::anyhow!(
                "fperf mesh needs the servers' key: --auth-key FILE (or ${})",
                fperf::auth::KEY_ENV
            )
        })?;
        if !(self.outlier_below > 0.0 && self.outlier_below <= 1.0) {
            bail!(
                "--outlier-below must be above 0 and at most 1, not {}",
                self.outlier_below
            );
        }
        let mut flags = WorkloadFlags::default();
        self.round_trips.apply(&mut flags)?;
        let workload = flags.workload()?;
        let mut tcp = TcpSettings::default();
        self.tcp.apply(&mut tcp)?;
        let mut sockets = SocketSettings::default();
        self.sockets.apply(&mut sockets)?;
        let transport =
            TransportSettings::over_sockets(self.udp, sockets.window, tcp).ok_or_else(|| {
                let flags: Vec<String> = MeshTcpGroup::options().map(|o| o.short_flag()).collect();
                anyhow::anyhow!("{} are TCP's, not UDP's", and_list(&flags))
            })?;
        let protocol = transport.protocol();
        let mut settings = Settings {
            pktsize: default_pktsize(protocol, workload.mprtt(), family == IpFamily::V6),
            workload,
            time_ms: secs_to_ms("time", self.time.secs()?)?,
            transport,
            ..Settings::default()
        };
        self.nstreams.apply(&mut settings)?;
        self.pktsize.apply(&mut settings)?;
        self.bitrate.apply(&mut settings)?;
        settings.validate()?;
        let under_load = self.under_load_plan(&pattern)?;
        Ok(MeshRun {
            config: MeshConfig {
                hosts,
                pattern,
                settings,
                auth: Some(auth),
                control_timeout: Duration::from_secs(10),
                family,
                outlier_below: self.outlier_below,
                under_load,
            },
            json: self.json,
            csv: self.csv.clone(),
            plot: self.plot.clone(),
            fail_on_outliers: self.fail_on_outliers,
        })
    }
}

impl MeshArgs {
    /// With `--under-load`, the phases each pair runs.
    fn under_load_plan(&self, pattern: &Pattern) -> Result<Option<PhasePlan>> {
        let mut spec = UnderLoadSpec::default();
        self.under_load.apply(&mut spec)?;
        if !spec.enabled {
            return Ok(None);
        }
        if let Pattern::Incast(_) = pattern {
            bail!("--under-load runs one pair at a time, and incast:K runs K at once");
        }
        spec.check().map_err(anyhow::Error::msg)?;
        let plan = spec.plan();
        plan.check()
            .map_err(|e| anyhow::anyhow!("fperf mesh --under-load: {e}"))?;
        Ok(Some(plan))
    }
}

/// `fperf exporter`.
#[derive(clap::Args, Debug)]
#[command(after_help = exporter_after_help())]
struct ExporterArgs {
    /// Address and port to answer HTTP on.
    #[arg(long, value_name = "ADDR", default_value_t = fperf::exporter::DEFAULT_LISTEN)]
    listen: std::net::SocketAddr,

    /// Longest test a probe may ask for (duration=), in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    max_duration: u64,

    /// Most probes running at once; more are refused (HTTP 429), not queued.
    #[arg(long, value_name = "N", default_value_t = fperf::exporter::DEFAULT_MAX_PROBES as u32,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    max_probes: u32,

    /// A target probes may test: HOST (any port) or HOST:PORT, as the probe names it;
    /// repeat for more, or '*' for any. Without it, any target, but only when listening
    /// on loopback.
    #[arg(long, value_name = "TARGET")]
    allow: Vec<String>,

    /// A name this exporter is reached by, besides its address (repeat for more):
    /// requests whose Host or Origin header names anything else are refused (HTTP 403),
    /// so that no web page can make a browser probe through it. Always accepted: the
    /// listening address; with a loopback address, localhost and loopback addresses;
    /// listening on every address (0.0.0.0, [::]), any IP address. Requests from
    /// another site's page (Sec-Fetch-Site) are refused too.
    #[arg(long, value_name = "NAME")]
    host_name: Vec<String>,

    /// Shared secret file the fperf servers ask for (as the client's --auth-key; or
    /// the secret in $FPERF_AUTH_KEY).
    #[arg(long, value_name = "FILE")]
    auth_key: Option<std::path::PathBuf>,
}

/// The end of `fperf exporter --help`: a probe's query, with the parameters TCP declares.
fn exporter_after_help() -> String {
    let test: Vec<String> = fperf::exporter::probe::test_parameters()
        .map(|(key, option)| format!("{key}={}", option.value_name().unwrap_or("1")))
        .collect();
    let workload: Vec<String> = fperf::exporter::probe::workload_parameters()
        .map(|(key, option)| format!("{key}={}", option.value_name().unwrap_or("1")))
        .collect();
    let outputs: Vec<String> = fperf::exporter::probe::output_parameters()
        .map(|(key, option)| format!("{key}={}", option.value_name().unwrap_or("1")))
        .collect();
    let sockets = fperf::exporter::probe::socket_parameters()
        .map(|(key, option)| format!("{key}={}", option.value_name().unwrap_or("1")));
    let tcp: Vec<String> = fperf::exporter::probe::tcp_parameters()
        .map(|(key, option)| format!("{key}={}", option.value_name().unwrap_or("1")))
        .collect();
    let transport: Vec<String> = sockets.chain(tcp.iter().cloned()).collect();
    let under_load: Vec<String> = fperf::exporter::probe::under_load_parameters()
        .map(|(key, option)| format!("{key}={}", option.value_name().unwrap_or("1")))
        .collect();
    format!(
        "A probe's query: target=HOST[:PORT] (an fperf server), and optionally \
         protocol=tcp|udp, duration=SECS (default 1), size=BYTES (default as -l's), \
         workload=bulk|rr|echo|crr, {}, {}, {}, \
         {} (the last {} TCP's; a rate of 0 is none), {} (latency under load instead of \
         one test: duration= is split among the phases unless phase_time= is given; \
         metrics fperf_under_load_*, the added delay and RPM per phase), and \
         family=4|6 (IPv4 or IPv6 alone). A probe over the limits, or whose test fails, answers \
         fperf_probe_success 0 and the reason is logged; more probes than --max-probes \
         are answered 429. The answer says why a target's test failed only when --allow \
         names the targets: otherwise every such failure answers alike, after the probe's \
         whole time-out, so that no one can tell a closed port from another program's \
         through the exporter.",
        test.join(", "),
        workload.join(", "),
        outputs.join(", "),
        and_list(&transport),
        count_word(tcp.len()),
        under_load.join(", "),
    )
}

/// `n` in words, as a sentence counts a few things.
fn count_word(n: usize) -> String {
    const WORDS: [&str; 9] = [
        "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
    ];
    match n.checked_sub(1).and_then(|i| WORDS.get(i)) {
        Some(word) => (*word).to_owned(),
        None => n.to_string(),
    }
}

impl ExporterArgs {
    fn config(&self) -> Result<ExporterConfig> {
        let allow = if self.allow.iter().any(|a| a == "*") {
            Allow::Any
        } else if self.allow.is_empty() {
            if !self.listen.ip().is_loopback() {
                bail!(
                    "--listen {} answers other hosts: name the targets their probes may test \
                     with --allow (--allow '*' for any)",
                    self.listen
                );
            }
            Allow::Any
        } else {
            let targets = self.allow.iter().map(|a| {
                fperf::client::split_host_port(a).map_err(|e| anyhow::anyhow!("--allow: {e}"))
            });
            Allow::Only(targets.collect::<Result<_>>()?)
        };
        Ok(ExporterConfig {
            listen: self.listen,
            max_duration: Duration::from_secs(self.max_duration),
            max_probes: self.max_probes as usize,
            allow,
            auth: AuthKey::from_cli(self.auth_key.as_deref())?,
            host_names: self.host_name.clone(),
        })
    }
}

/// What the run does with its streams; without these, bulk data from client to server.
#[derive(clap::Args, Debug)]
#[command(next_help_heading = WORKLOADS_HEADING)]
struct WorkloadArgs {
    #[command(flatten)]
    round_trips: Declared<RoundTripGroup>,

    /// With -r, TCP, UDP or RDMA (every --rdma-api): the server answers each -l-byte
    /// request with N bytes instead of a 1-byte ACK (neper's request and response
    /// sizes), and mprtt lasts until the whole reply has arrived. With UDP, N must fit
    /// in one datagram
    #[arg(hide_short_help = true, long, value_name = "N", conflicts_with = "tests",
          value_parser = fperf::units::parse_bytes_u32)]
    response_size: Option<u32>,

    #[command(flatten)]
    others: Declared<OtherWorkloadGroup>,
}

/// A group of declared options ([`fperf::options`]) as clap arguments of one command
/// line.
trait OptionGroup: 'static {
    type Settings: Default + 'static;
    /// The heading `--help` lists them under, if their own.
    const HEADING: Option<&'static str>;
    const FRONT: Front;
    /// The options of the group, in the order the help lists them.
    fn options() -> impl Iterator<Item = &'static TestOption<Self::Settings>>;
    /// The argument of `option`.
    fn arg(option: &'static TestOption<Self::Settings>) -> clap::Arg {
        option.arg(Self::FRONT)
    }
}

/// The options of `G` given on a command line.
struct Declared<G: OptionGroup>(Given<G::Settings>);

impl<G: OptionGroup> std::fmt::Debug for Declared<G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<G: OptionGroup> clap::FromArgMatches for Declared<G> {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Ok(Declared(Given::from_matches(matches, G::options())))
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl<G: OptionGroup> clap::Args for Declared<G> {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        let cmd = match G::HEADING {
            Some(heading) => cmd.next_help_heading(heading),
            None => cmd,
        };
        G::options().fold(cmd, |cmd, option| cmd.arg(G::arg(option)))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl<G: OptionGroup> Declared<G> {
    /// The flags given, as `--long`.
    fn given(&self) -> Vec<String> {
        self.0.flags()
    }

    /// Whether the option of clap name `id` was given.
    fn has(&self, id: &str) -> bool {
        self.0.has(id)
    }

    /// Sets the options given on `target`.
    fn apply(&self, target: &mut G::Settings) -> Result<()> {
        self.0.apply(target).map_err(anyhow::Error::msg)
    }
}

/// `--under-load` and its options, as it declares them
/// ([`fperf::under_load::spec::OPTIONS`]).
struct UnderLoadGroup;

impl OptionGroup for UnderLoadGroup {
    type Settings = UnderLoadSpec;
    const HEADING: Option<&'static str> = Some("Latency under load");
    const FRONT: Front = Front::Cli;
    fn options() -> impl Iterator<Item = &'static TestOption<UnderLoadSpec>> {
        UNDER_LOAD_OPTIONS.iter()
    }
    fn arg(option: &'static TestOption<UnderLoadSpec>) -> clap::Arg {
        let arg = option.arg(Front::Cli);
        match option.id {
            "under_load" => arg.conflicts_with_all(["server", "loopback", "iperf3", "conf"]),
            _ => arg.requires("under_load"),
        }
    }
}

/// `fperf mesh --under-load` and its options, as latency under load declares them
/// ([`fperf::under_load::spec::OPTIONS`]).
struct MeshUnderLoadGroup;

impl OptionGroup for MeshUnderLoadGroup {
    type Settings = UnderLoadSpec;
    const HEADING: Option<&'static str> = None;
    const FRONT: Front = Front::Mesh;
    fn options() -> impl Iterator<Item = &'static TestOption<UnderLoadSpec>> {
        UNDER_LOAD_OPTIONS
            .iter()
            .filter(|option| taken_by_mesh(option))
    }
    fn arg(option: &'static TestOption<UnderLoadSpec>) -> clap::Arg {
        let arg = option.arg(Front::Mesh);
        match option.id {
            // The phases set each test's length, streams and direction.
            "under_load" => arg.conflicts_with_all(["udp", "mprtt", "echo", "nstreams", "time"]),
            _ => arg.requires("under_load"),
        }
    }
}

/// Options of TCP runs, as TCP declares them ([`fperf::transport::tcp::options`]).
struct TcpGroup;

impl OptionGroup for TcpGroup {
    type Settings = TcpSettings;
    const HEADING: Option<&'static str> = Some("TCP options");
    const FRONT: Front = Front::Cli;
    fn options() -> impl Iterator<Item = &'static TestOption<TcpSettings>> {
        TCP_OPTIONS.iter()
    }
}

/// Options of TCP and UDP runs: their data go through kernel sockets
/// ([`fperf::transport::sockets::OPTIONS`]).
struct SocketGroup;

impl OptionGroup for SocketGroup {
    type Settings = SocketSettings;
    const HEADING: Option<&'static str> = Some("TCP and UDP options");
    const FRONT: Front = Front::Cli;
    fn options() -> impl Iterator<Item = &'static TestOption<SocketSettings>> {
        SOCKET_OPTIONS.iter()
    }
}

/// The TCP options `fperf mesh` takes, for every test's data connections.
struct MeshTcpGroup;

impl OptionGroup for MeshTcpGroup {
    type Settings = TcpSettings;
    const HEADING: Option<&'static str> = None;
    const FRONT: Front = Front::Mesh;
    fn options() -> impl Iterator<Item = &'static TestOption<TcpSettings>> {
        TCP_OPTIONS.iter().filter(|option| taken_by_mesh(option))
    }
    fn arg(option: &'static TestOption<TcpSettings>) -> clap::Arg {
        option.arg(Front::Mesh).conflicts_with("udp")
    }
}

/// The socket options `fperf mesh` takes, for every test's data sockets.
struct MeshSocketGroup;

impl OptionGroup for MeshSocketGroup {
    type Settings = SocketSettings;
    const HEADING: Option<&'static str> = None;
    const FRONT: Front = Front::Mesh;
    fn options() -> impl Iterator<Item = &'static TestOption<SocketSettings>> {
        SOCKET_OPTIONS.iter().filter(|option| taken_by_mesh(option))
    }
}

/// Whether `fperf mesh` takes `option`.
fn taken_by_mesh<T>(option: &TestOption<T>) -> bool {
    !matches!(option.mesh, fperf::options::Mesh::No)
}

/// `--percentiles`, as the test's outputs declare it ([`fperf::settings::options`]).
struct PercentilesGroup;

impl OptionGroup for PercentilesGroup {
    type Settings = Settings;
    const HEADING: Option<&'static str> = Some("Output");
    const FRONT: Front = Front::Cli;
    fn options() -> impl Iterator<Item = &'static TestOption<Settings>> {
        OUTPUT_OPTIONS.iter()
    }
}

/// `--time`, as the test's options declare it ([`fperf::settings::options`]): listed in
/// `-h` too.
struct TimeGroup;

impl OptionGroup for TimeGroup {
    type Settings = GivenTime;
    const HEADING: Option<&'static str> = Some("Test");
    const FRONT: Front = Front::Cli;
    fn options() -> impl Iterator<Item = &'static TestOption<GivenTime>> {
        std::iter::once(&TIME_OPTION)
    }
    fn arg(option: &'static TestOption<GivenTime>) -> clap::Arg {
        (option.arg(Front::Cli).hide_short_help(false)).allow_negative_numbers(true)
    }
}

/// `--omit`, as the test's options declare it ([`fperf::settings::options`]).
struct OmitGroup;

impl OptionGroup for OmitGroup {
    type Settings = GivenTime;
    const HEADING: Option<&'static str> = Some("Test");
    const FRONT: Front = Front::Cli;
    fn options() -> impl Iterator<Item = &'static TestOption<GivenTime>> {
        std::iter::once(&OMIT_OPTION)
    }
    fn arg(option: &'static TestOption<GivenTime>) -> clap::Arg {
        option.arg(Front::Cli).allow_negative_numbers(true)
    }
}

/// `fperf mesh`'s `--time`, each pair's: 2 s unless given.
struct MeshTimeGroup;

impl OptionGroup for MeshTimeGroup {
    type Settings = GivenTime;
    const HEADING: Option<&'static str> = None;
    const FRONT: Front = Front::Mesh;
    fn options() -> impl Iterator<Item = &'static TestOption<GivenTime>> {
        std::iter::once(&TIME_OPTION)
    }
    fn arg(option: &'static TestOption<GivenTime>) -> clap::Arg {
        (option.arg(Front::Mesh).default_value("2")).allow_negative_numbers(true)
    }
}

impl<G: OptionGroup<Settings = GivenTime>> Declared<G> {
    /// The seconds `--time` (or `--omit`) gave, if it was given (or has a default).
    fn secs(&self) -> Result<Option<f64>> {
        let mut time = GivenTime::default();
        self.apply(&mut time)?;
        Ok(time.secs)
    }
}

/// The workload flags before --response-size in the help, as the test's options
/// declare them ([`fperf::settings::options`]): -r is listed in `-h` too.
struct RoundTripGroup;

impl OptionGroup for RoundTripGroup {
    type Settings = WorkloadFlags;
    const HEADING: Option<&'static str> = Some(WORKLOADS_HEADING);
    const FRONT: Front = Front::Cli;
    fn options() -> impl Iterator<Item = &'static TestOption<WorkloadFlags>> {
        workload_options(&["mprtt", "echo"])
    }
    fn arg(option: &'static TestOption<WorkloadFlags>) -> clap::Arg {
        option.arg(Front::Cli).hide_short_help(option.id != "mprtt")
    }
}

/// The workload flags after --response-size in the help: --reverse is listed in `-h`
/// too.
struct OtherWorkloadGroup;

impl OptionGroup for OtherWorkloadGroup {
    type Settings = WorkloadFlags;
    const HEADING: Option<&'static str> = Some(WORKLOADS_HEADING);
    const FRONT: Front = Front::Cli;
    fn options() -> impl Iterator<Item = &'static TestOption<WorkloadFlags>> {
        workload_options(&["crr", "reverse", "bidir"])
    }
    fn arg(option: &'static TestOption<WorkloadFlags>) -> clap::Arg {
        option
            .arg(Front::Cli)
            .hide_short_help(option.id != "reverse")
    }
}

/// `fperf mesh`'s latency matrices: -r, or --echo.
struct MeshRoundTripGroup;

impl OptionGroup for MeshRoundTripGroup {
    type Settings = WorkloadFlags;
    const HEADING: Option<&'static str> = None;
    const FRONT: Front = Front::Mesh;
    fn options() -> impl Iterator<Item = &'static TestOption<WorkloadFlags>> {
        WORKLOAD_OPTIONS
            .iter()
            .filter(|option| taken_by_mesh(option))
    }
    fn arg(option: &'static TestOption<WorkloadFlags>) -> clap::Arg {
        match option.id {
            "mprtt" => option.arg(Front::Mesh).conflicts_with("echo"),
            _ => option.arg(Front::Mesh),
        }
    }
}

/// The workload flags of clap names `ids`, in the order the help lists them.
fn workload_options(
    ids: &'static [&'static str],
) -> impl Iterator<Item = &'static TestOption<WorkloadFlags>> {
    WORKLOAD_OPTIONS
        .iter()
        .filter(move |option| ids.contains(&option.id))
}

/// `-t`, as the test's options declare it ([`fperf::settings::options`]): listed in
/// `-h` too, 1 unless given.
struct StreamsGroup;

impl OptionGroup for StreamsGroup {
    type Settings = Settings;
    const HEADING: Option<&'static str> = Some("Test");
    const FRONT: Front = Front::Cli;
    fn options() -> impl Iterator<Item = &'static TestOption<Settings>> {
        test_option("nstreams")
    }
    fn arg(option: &'static TestOption<Settings>) -> clap::Arg {
        (option.arg(Front::Cli).hide_short_help(false))
            .default_value("1")
            .allow_negative_numbers(true)
    }
}

/// `fperf mesh`'s `-t`, for every test of the mesh: 1 unless given.
struct MeshStreamsGroup;

impl OptionGroup for MeshStreamsGroup {
    type Settings = Settings;
    const HEADING: Option<&'static str> = None;
    const FRONT: Front = Front::Mesh;
    fn options() -> impl Iterator<Item = &'static TestOption<Settings>> {
        test_option("nstreams")
    }
    fn arg(option: &'static TestOption<Settings>) -> clap::Arg {
        (option.arg(Front::Mesh).default_value("1")).allow_negative_numbers(true)
    }
}

/// `-4` and `-6`, as the IP family declares them ([`fperf::family`]).
struct FamilyGroup;

impl OptionGroup for FamilyGroup {
    type Settings = IpFamily;
    const HEADING: Option<&'static str> = Some("Roles");
    const FRONT: Front = Front::Cli;
    fn options() -> impl Iterator<Item = &'static TestOption<IpFamily>> {
        FAMILY_OPTIONS.iter()
    }
}

/// `fperf mesh`'s `-4` and `-6`, for the coordinator and every test: they have no
/// other spelling.
struct MeshFamilyGroup;

impl OptionGroup for MeshFamilyGroup {
    type Settings = IpFamily;
    const HEADING: Option<&'static str> = None;
    const FRONT: Front = Front::Mesh;
    fn options() -> impl Iterator<Item = &'static TestOption<IpFamily>> {
        FAMILY_OPTIONS.iter()
    }
    fn arg(option: &'static TestOption<IpFamily>) -> clap::Arg {
        (option.arg(Front::Mesh).alias(None)).conflicts_with_all(option.conflicts)
    }
}

impl<G: OptionGroup<Settings = IpFamily>> Declared<G> {
    /// The IP family asked for: `-4`, `-6`, or either.
    fn family(&self) -> Result<IpFamily> {
        let mut family = IpFamily::Any;
        self.apply(&mut family)?;
        Ok(family)
    }
}

/// `-l`, as the test's options declare it ([`fperf::settings::options`]): listed in
/// `-h` too.
struct PktsizeGroup;

impl OptionGroup for PktsizeGroup {
    type Settings = Settings;
    const HEADING: Option<&'static str> = Some("Test");
    const FRONT: Front = Front::Cli;
    fn options() -> impl Iterator<Item = &'static TestOption<Settings>> {
        test_option("pktsize")
    }
    fn arg(option: &'static TestOption<Settings>) -> clap::Arg {
        (option.arg(Front::Cli).hide_short_help(false)).allow_negative_numbers(true)
    }
}

/// `fperf mesh`'s `-l`, for every test of the mesh: its value is a SIZE, and it has no
/// other spelling.
struct MeshPktsizeGroup;

impl OptionGroup for MeshPktsizeGroup {
    type Settings = Settings;
    const HEADING: Option<&'static str> = None;
    const FRONT: Front = Front::Mesh;
    fn options() -> impl Iterator<Item = &'static TestOption<Settings>> {
        test_option("pktsize")
    }
    fn arg(option: &'static TestOption<Settings>) -> clap::Arg {
        (option.arg(Front::Mesh).value_name("SIZE")).alias(None)
    }
}

/// `-b`, as the test's options declare it ([`fperf::settings::options`]): listed in
/// `-h` too.
struct BitrateGroup;

impl OptionGroup for BitrateGroup {
    type Settings = Settings;
    const HEADING: Option<&'static str> = Some("Test");
    const FRONT: Front = Front::Cli;
    fn options() -> impl Iterator<Item = &'static TestOption<Settings>> {
        test_option("bitrate")
    }
    fn arg(option: &'static TestOption<Settings>) -> clap::Arg {
        option.arg(Front::Cli).hide_short_help(false)
    }
}

/// `fperf mesh`'s `-b`, for every test of the mesh.
struct MeshBitrateGroup;

impl OptionGroup for MeshBitrateGroup {
    type Settings = Settings;
    const HEADING: Option<&'static str> = None;
    const FRONT: Front = Front::Mesh;
    fn options() -> impl Iterator<Item = &'static TestOption<Settings>> {
        test_option("bitrate")
    }
}

/// The test-wide option of clap name `id`, as a group's only option.
fn test_option(id: &str) -> impl Iterator<Item = &'static TestOption<Settings>> {
    fperf::settings::options::option(id).into_iter()
}

/// Options of UDP runs, as UDP declares them ([`fperf::transport::udp::options`]).
struct UdpGroup;

impl OptionGroup for UdpGroup {
    type Settings = UdpSettings;
    const HEADING: Option<&'static str> = Some("UDP options");
    const FRONT: Front = Front::Cli;
    fn options() -> impl Iterator<Item = &'static TestOption<UdpSettings>> {
        UDP_OPTIONS.iter().chain(XDP_OPTIONS.iter())
    }
}

/// Options of RDMA runs (-R), as RDMA declares them ([`fperf::transport::rdma::options`]).
struct RdmaGroup;

impl OptionGroup for RdmaGroup {
    type Settings = RdmaSettings;
    const HEADING: Option<&'static str> = Some("RDMA options");
    const FRONT: Front = Front::Cli;
    fn options() -> impl Iterator<Item = &'static TestOption<RdmaSettings>> {
        RDMA_OPTIONS.iter()
    }
    fn arg(option: &'static TestOption<RdmaSettings>) -> clap::Arg {
        option.arg(Front::Cli).requires("rdma")
    }
}

/// Refuses the options `given`, which belong to `owner`'s transports, not to `protocol`.
fn refuse_foreign(given: &[impl AsRef<str>], owner: &str, protocol: Protocol) -> Result<()> {
    let with = protocol.name();
    // iperf3's -R is fperf's --reverse.
    let hint = match protocol {
        Protocol::Rdma => " (fperf's -R is RDMA; iperf3's -R, data from the server, is --reverse)",
        _ => "",
    };
    let given: Vec<&str> = given.iter().map(AsRef::as_ref).collect();
    match given.as_slice() {
        [] => Ok(()),
        [flag] => bail!("{flag} is a {owner} option; it cannot be used with {with}{hint}"),
        [first @ .., last] => bail!(
            "{} and {last} are {owner} options; they cannot be used with {with}{hint}",
            first.join(", ")
        ),
    }
}

impl WorkloadArgs {
    /// The workload flags given.
    fn flags(&self) -> Result<WorkloadFlags> {
        let mut flags = WorkloadFlags::default();
        self.round_trips.apply(&mut flags)?;
        self.others.apply(&mut flags)?;
        Ok(flags)
    }
}

/// Limits, time-outs and the shared key (see `fperf::limits` and `fperf::auth`).
#[derive(clap::Args, Debug)]
#[command(next_help_heading = "Limits and authentication")]
struct Guard {
    /// Server: most MB one test may send, all streams together; larger tests are
    /// refused before any data flows.
    #[arg(hide_short_help = true, long, value_name = "MB", value_parser = clap::value_parser!(u64).range(1..))]
    max_mb: Option<u64>,

    /// Server: longest one test may run once data flows; the server aborts it after.
    #[arg(hide_short_help = true, long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    max_time: Option<u64>,

    /// Server: most data streams (-t) one test may open.
    #[arg(hide_short_help = true, long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_streams: Option<u32>,

    /// Server: most data sockets (-t × -n) one test may open.
    #[arg(hide_short_help = true, long, value_name = "N", default_value_t = fperf::limits::DEFAULT_MAX_SOCKETS,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_sockets: u32,

    /// Server: most memory one test may make the server set aside for its packet
    /// buffers and latency histograms, in MiB; larger tests are refused before any data
    /// flows.
    #[arg(hide_short_help = true, long, value_name = "MiB", default_value_t = fperf::limits::DEFAULT_MAX_MEMORY_MIB,
          value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    max_memory: u64,

    /// Server: cap on how fast the server reads one test's data, in bits/s over all
    /// streams (e.g. 100M, 2.5G; K/M/G/T = 10^3/10^6/10^9/10^12). A test asking for
    /// more with -b is refused; TCP flow control holds an unpaced client to it.
    #[arg(hide_short_help = true, long, value_name = "RATE", value_parser = fperf::units::parse_rate)]
    max_rate: Option<u64>,

    /// Server: a test whose data stops moving this long is abandoned. Client: sent data
    /// unacknowledged this long means the server is gone (TCP_USER_TIMEOUT).
    #[arg(hide_short_help = true, long, value_name = "SECS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    idle_timeout: u64,

    /// Client: longest wait, in ms, for the server to answer the connection that
    /// opens a test, as iperf3's --connect-timeout [default: 10000].
    #[arg(hide_short_help = true, long, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(1..=600_000))]
    connect_timeout: Option<u64>,

    /// TCP keepalive on the control connection, which carries nothing during a test, so
    /// that NAT and firewalls that drop idle flows keep it, as iperf3's --cntl-ka:
    /// seconds idle before the first probe, seconds between probes, probes unanswered
    /// before the connection is given up. A part left out keeps the kernel's default
    /// (--cntl-ka, --cntl-ka=60, --cntl-ka=60/5/3).
    #[arg(hide_short_help = true, long, value_name = "IDLE/INTERVAL/COUNT", num_args = 0..=1,
          require_equals = true, default_missing_value = "",
          value_parser = ControlKeepalive::parse)]
    cntl_ka: Option<ControlKeepalive>,

    /// Server: run up to N tests at once (default 1: one at a time, others are told
    /// "server busy"). Tests with several streams (-t > 1) or a TCP window (-w) still need
    /// the server alone.
    #[arg(hide_short_help = true, long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    parallel: u32,

    /// Shared secret file; both ends must use the same one. The server then accepts
    /// only clients that prove they hold it (HMAC-SHA256 challenge-response); the
    /// client only servers that do. Without this flag the secret itself may be given in
    /// $FPERF_AUTH_KEY.
    #[arg(hide_short_help = true, long, value_name = "FILE")]
    auth_key: Option<std::path::PathBuf>,

    /// Server: let a mesh coordinator (fperf mesh) that proves the key ask this server
    /// for tests towards other fperf servers that hold the same key. Needs --auth-key.
    #[arg(hide_short_help = true, long)]
    allow_mesh: bool,
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
            max_memory_mib: self.max_memory,
        }
    }

    /// The server-only options given, each with its problem on a client.
    fn server_options_given(&self) -> Vec<String> {
        [
            (self.max_mb.is_some(), "--max-mb"),
            (self.max_time.is_some(), "--max-time"),
            (self.max_streams.is_some(), "--max-streams"),
            (self.max_rate.is_some(), "--max-rate"),
            (
                self.max_sockets != fperf::limits::DEFAULT_MAX_SOCKETS,
                "--max-sockets",
            ),
            (
                self.max_memory != fperf::limits::DEFAULT_MAX_MEMORY_MIB,
                "--max-memory",
            ),
            (self.parallel != 1, "--parallel"),
            (self.allow_mesh, "--allow-mesh"),
        ]
        .into_iter()
        .filter(|&(given, _)| given)
        .map(|(_, flag)| format!("{flag} is a server option (use it with -s)"))
        .collect()
    }
}

/// `-c HOST` (clap's value parser): a name or address, an IPv6 one also in brackets
/// (`[::1]`), as mesh hosts and exporter targets are written.
fn parse_host(text: &str) -> Result<String, String> {
    let Some(inside) = text.strip_prefix('[') else {
        return Ok(text.to_owned());
    };
    match inside.strip_suffix(']') {
        Some(ip) if ip.parse::<std::net::Ipv6Addr>().is_ok() => Ok(ip.to_owned()),
        _ => Err(format!(
            "'{text}' is not an IPv6 address in brackets: give it as [::1] (or ::1), and \
             the port with -p"
        )),
    }
}

/// `-B ADDR` (clap's value parser): an IP address, an IPv6 one also in brackets.
fn parse_ip(text: &str) -> Result<IpAddr, String> {
    let inside = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(text);
    inside.parse().map_err(|_| {
        format!("'{text}' is not an IP address: give one of this host's, e.g. 192.0.2.1 or ::1")
    })
}

/// Seconds from the command line as whole milliseconds.
fn secs_to_ms(flag: &str, secs: Option<f64>) -> Result<Option<u64>> {
    match secs {
        None => Ok(None),
        Some(s) if s > 0.0 && s < 0.0005 => {
            bail!("--{flag} counts seconds in steps of 1 ms: {s} s is less than one")
        }
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
        let nsockets = if queue == QueueKind::LockFree && self.nsockets > 1 {
            eprintln!(
                "fperf: note: the lock-free queue (-q 0) drives one socket; --nsockets forced to 1"
            );
            1
        } else {
            self.nsockets
        };
        let mut declared = Settings::default();
        self.nstreams.apply(&mut declared)?;
        // --flows F --threads T: T streams of F/T sockets, each socket a flow.
        let (nstreams, nsockets) = match self.flows {
            Some(flows) => {
                let threads = self.threads.unwrap_or(1);
                if !(1..=MAX_NSTREAMS).contains(&threads) {
                    bail!("--threads must be between 1 and {MAX_NSTREAMS}, not {threads}");
                }
                if flows < threads || flows % threads != 0 {
                    bail!(
                        "--flows must be a multiple of --threads (each thread drives as many \
                         flows), not {flows} over {threads}"
                    );
                }
                (threads, flows / threads)
            }
            None => (declared.nstreams, nsockets),
        };
        let workload = self.workload_opts.flags()?.workload()?;
        if workload == Workload::Bidir && nstreams > MAX_NSTREAMS / 2 {
            bail!(
                "--bidir opens -t streams each way: -t must be at most {}",
                MAX_NSTREAMS / 2
            );
        }
        if self.udp_opts.has("ack_timeout") && !(self.udp && workload.mprtt()) {
            bail!("--ack-timeout applies to UDP with MPRTT only: use it with -u -r or -u --echo");
        }
        let mut s = Settings {
            // With --bidir, -t counts the streams each way.
            nstreams: if workload == Workload::Bidir {
                nstreams.saturating_mul(2)
            } else {
                nstreams
            },
            nsockets,
            mb: self.mb.unwrap_or(DEFAULT_MB),
            pktsize: default_pktsize(protocol, workload.mprtt(), self.over_ipv6()?),
            workload,
            queue,
            time_ms: self.time_ms()?,
            transactions: self.transactions,
            response_size: self.workload_opts.response_size,
            // iperf3's -i 0: no interval reports.
            interval_ms: secs_to_ms("interval", self.interval.filter(|&s| s != 0.0))?,
            omit_ms: secs_to_ms("omit", self.omit.secs()?)?,
            rate_bps: None,
            client_cpus: self.cpu.clone(),
            server_cpus: self.server_cpu.clone(),
            flows: self.flows.is_some(),
            sched: match self.sched.as_str() {
                "normal" => SchedPolicy::Normal,
                "batch" => SchedPolicy::Batch,
                _ => SchedPolicy::Auto,
            },
            percentiles: Percentiles::default(),
            transport: self.transport_settings(protocol)?,
        };
        self.pktsize.apply(&mut s)?;
        self.bitrate.apply(&mut s)?;
        self.percentiles.apply(&mut s)?;
        s.validate()?;
        Ok(s)
    }

    /// Whether the run is known to go over IPv6 before the server's name is resolved:
    /// `-6`, or an IPv6 address as the server or `-B`.
    fn over_ipv6(&self) -> Result<bool> {
        let literal_v6 = |host: &str| {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            host.parse::<IpAddr>().is_ok_and(|ip| ip.is_ipv6())
        };
        Ok(self.family()? == IpFamily::V6
            || self.bind.is_some_and(|ip| ip.is_ipv6())
            || self.client.as_deref().is_some_and(literal_v6))
    }

    /// Neither `-m`, `--time` nor `--transactions` bounds the run (nor a sweep of `mb`):
    /// it lasts [`DEFAULT_TIME_MS`], or a sweep's runs share it.
    fn length_defaulted(&self) -> bool {
        let sweeps_mb = (self.sweep.as_deref())
            .and_then(|spec| fperf::sweep::parse(spec).ok())
            .is_some_and(|sweep| sweep.param == fperf::sweep::SweepParam::Mb);
        self.mb.is_none() && !self.time.has("time") && self.transactions.is_none() && !sweeps_mb
    }

    /// `--time` in ms, or where nothing bounds the run the default time (with a sweep,
    /// each run's share of it), after `--omit`'s warm-up.
    fn time_ms(&self) -> Result<Option<u64>> {
        let given = secs_to_ms("time", self.time.secs()?)?;
        if !self.length_defaulted() {
            return Ok(given);
        }
        let runs = (self.sweep.as_deref())
            .and_then(|spec| fperf::sweep::parse(spec).ok())
            .map(|sweep| {
                let tests = match &self.tests {
                    Some(list) => fperf::sweep::parse_tests(list).map_or(1, |t| t.len()),
                    None => 1,
                };
                sweep.values.len() * tests.max(1)
            });
        let ms = runs.map_or(DEFAULT_TIME_MS, fperf::settings::sweep_run_ms);
        let omit = secs_to_ms("omit", self.omit.secs()?)?.unwrap_or(0);
        Ok(Some(ms.saturating_add(omit)))
    }

    /// `protocol`'s own settings, refusing the options of other transports.
    fn transport_settings(&self, protocol: Protocol) -> Result<TransportSettings> {
        let (tcp, sockets, udp) = (&self.tcp_opts, &self.socket_opts, &self.udp_opts);
        if protocol != Protocol::Tcp {
            refuse_foreign(&tcp.given(), "TCP", protocol)?;
        }
        // A server's --xdp is its own, for whichever UDP tests it serves.
        if protocol != Protocol::Udp && !self.server {
            refuse_foreign(&udp.given(), "UDP", protocol)?;
        }
        let mut socket_settings = SocketSettings::default();
        sockets.apply(&mut socket_settings)?;
        Ok(match protocol {
            Protocol::Tcp => {
                let mut tcp_settings = TcpSettings {
                    sockets: socket_settings,
                    ..TcpSettings::default()
                };
                tcp.apply(&mut tcp_settings)?;
                TransportSettings::Tcp(tcp_settings)
            }
            Protocol::Udp => {
                let mut udp_settings = UdpSettings {
                    sockets: socket_settings,
                    ..UdpSettings::default()
                };
                udp.apply(&mut udp_settings)?;
                TransportSettings::Udp(udp_settings)
            }
            Protocol::Rdma => {
                refuse_foreign(&sockets.given(), "TCP and UDP", protocol)?;
                let mut rdma = RdmaSettings::default();
                self.rdma_opts.apply(&mut rdma)?;
                TransportSettings::Rdma(rdma)
            }
        })
    }
}

/// The iperf3 habits among the arguments, with fperf's spelling: `-P N`, `-J`, `-f`
/// (`--format`), `-S`, `-v`, `-V` (`--verbose`, `--debug`) with a role, `-O`, `-N`, `-Z`,
/// `-A`, `-k` (`--blockcount`), `--get-server-output`, `--rcv-timeout`, `--snd-timeout`,
/// `--server-bitrate-limit`, `--forceflush`, `--udp-counters-64bit`, `-B ADDR%DEV`, `-D`
/// with `-s`, `-n` with a size (`--bytes`), `-t` with a duration and `--cntl-ka` with
/// its values after a space. Checked before the flags are parsed,
/// since some of these parse as something else in fperf (`-t` is its stream count, `-n`
/// its sockets per stream, `-D` its RDMA device). Returns a hint for each, and the
/// arguments without them (nor their values), so that the rest can be checked too.
pub fn iperf3_habits(args: &[OsString]) -> (Vec<String>, Vec<OsString>) {
    let text: Vec<String> = args
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    // -V with a role: iperf3's "more detail", where fperf's -V would print its version
    // and run nothing.
    let runs = text
        .iter()
        .any(|a| ["-c", "-s", "--client", "--server", "--loopback"].contains(&a.as_str()));
    let mut hints = Vec::new();
    let mut rest: Vec<OsString> = args.iter().take(1).cloned().collect();
    let mut i = 0;
    while i < text.len() {
        if text[i] == "--" {
            rest.extend(args.iter().skip(i + 1).cloned());
            break;
        }
        match habit_at(&text, i, runs) {
            Some(hint) => {
                hints.push(hint);
                // The habit's value, when it came as the next argument.
                let with_value =
                    HABITS_WITH_VALUES.contains(&text[i].as_str()) && i + 1 < text.len();
                i += if with_value { 2 } else { 1 };
            }
            None => {
                rest.extend(args.get(i + 1).cloned());
                i += 1;
            }
        }
    }
    (hints, rest)
}

/// The habits of [`iperf3_habits`] that take a value, as the next argument when given
/// apart.
const HABITS_WITH_VALUES: [&str; 16] = [
    "-P",
    "-S",
    "-O",
    "-A",
    "-k",
    "--blockcount",
    "-n",
    "--bytes",
    "-f",
    "--format",
    "--rcv-timeout",
    "--snd-timeout",
    "-B",
    "--server-bitrate-limit",
    "-t",
    "--cntl-ka",
];

/// The iperf3 habit at `args[i]`, if it is one; `runs`: a role is among the arguments.
fn habit_at(args: &[String], i: usize, runs: bool) -> Option<String> {
    let arg = &args[i];
    // An option's value and the option, `-P 4` or `-P4`.
    let value = |i: usize, flag: &str| -> Option<String> {
        let arg = &args[i];
        if arg == flag {
            return Some(args.get(i + 1).cloned().unwrap_or_default());
        }
        arg.strip_prefix(flag)
            .filter(|rest| !rest.is_empty())
            .map(|rest| rest.trim_start_matches('=').to_string())
    };
    {
        if (arg == "-V" && runs) || arg == "--verbose" || arg == "--debug" {
            return Some(format!(
                "{arg} is iperf3's; its more detail is always on here: the header names the \
                 settings in force and each end reports its CPU time{}",
                if arg == "-V" {
                    " (-V alone prints fperf's version)"
                } else {
                    ""
                }
            ));
        }
        if arg == "-v" {
            return Some("-v is iperf3's; fperf's version is -V".into());
        }
        if arg == "-J" {
            return Some(
                "-J is iperf3's; fperf's JSON is --json (--json=iperf3 in iperf3's layout)".into(),
            );
        }
        if let Some(n) = value(i, "-P") {
            return Some(format!("-P is iperf3's; fperf's streams are -t {n}"));
        }
        if let Some(tos) = value(i, "-S") {
            return Some(format!("-S is iperf3's; fperf's is --tos {tos}"));
        }
        if let Some(secs) = value(i, "-O") {
            return Some(format!("-O is iperf3's; fperf's is --omit {secs}"));
        }
        if arg == "-N" {
            return Some("-N is iperf3's; fperf's is -d (--nodelay)".into());
        }
        if arg == "--get-server-output" {
            return Some(
                "--get-server-output is iperf3's; fperf's client reports the server's figures \
                 anyway (its server line, and both ends in --json)"
                    .into(),
            );
        }
        if arg == "-Z" {
            return Some("-Z is iperf3's; fperf's is --zerocopy".into());
        }
        for flag in ["--rcv-timeout", "--snd-timeout"] {
            if let Some(ms) = value(i, flag) {
                let secs = ms.parse::<u64>().map_or(1, |ms| ms.div_ceil(1000).max(1));
                return Some(format!(
                    "{flag} is iperf3's; fperf's is --idle-timeout {secs} (seconds; a test \
                     whose data stops moving that long ends, on either end)"
                ));
            }
        }
        if let Some((addr, dev)) = value(i, "-B").as_deref().and_then(|b| b.split_once('%')) {
            return Some(format!(
                "-B ADDR%DEV is iperf3's; fperf's is -B {addr} --bind-dev {dev}"
            ));
        }
        if let Some(rate) = value(i, "--server-bitrate-limit") {
            return Some(format!(
                "--server-bitrate-limit is iperf3's; fperf's is --max-rate {rate}"
            ));
        }
        if arg == "--forceflush" {
            return Some(
                "--forceflush is iperf3's; fperf writes each line of its report as it is made"
                    .into(),
            );
        }
        if arg == "--daemon" || (arg == "-D" && args.iter().any(|a| a == "-s" || a == "--server")) {
            return Some(
                "-D is iperf3's daemon mode; fperf -s stays in the foreground: run it as the \
                 package's fperf service (systemctl enable --now fperf), or with nohup"
                    .into(),
            );
        }
        if let Some(cpus) = value(i, "-A") {
            return Some(match cpus.split_once(',') {
                Some((ours, theirs)) => {
                    format!("-A is iperf3's; fperf's is --cpu {ours} --server-cpu {theirs}")
                }
                None => format!("-A is iperf3's; fperf's is --cpu {cpus}"),
            });
        }
        for flag in ["-k", "--blockcount"] {
            if value(i, flag).is_some() {
                return Some(format!(
                    "{flag} is iperf3's; fperf's streams each send -m MB, or for --time seconds"
                ));
            }
        }
        let bytes = match value(i, "-n").filter(|v| v.ends_with(|c: char| c.is_alphabetic())) {
            Some(size) => Some((
                "-n is the number of sockets in each stream; iperf3's -n (bytes to send) is",
                size,
            )),
            None => value(i, "--bytes")
                .map(|size| ("--bytes is iperf3's (bytes to send); fperf's is", size)),
        };
        if let Some((what, size)) = bytes {
            let per_stream = match fperf::units::parse_bytes(&size) {
                Some(bytes) if bytes >= 1 << 20 && bytes % (1 << 20) == 0 => {
                    format!(": -m {}", bytes >> 20)
                }
                _ => ", in whole MB (2^20 bytes)".into(),
            };
            return Some(format!("{what} -m, MB per stream{per_stream}"));
        }
        for flag in ["-f", "--format"] {
            if value(i, flag).is_some() {
                return Some(format!(
                    "{flag} is iperf3's; fperf prints sizes in MB and GB and rates in bytes \
                     and bits per second together"
                ));
            }
        }
        let ka_values =
            |v: &&String| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '/');
        if arg == "--cntl-ka" {
            if let Some(values) = args.get(i + 1).filter(ka_values) {
                return Some(format!(
                    "--cntl-ka takes its values after '=': --cntl-ka={values}"
                ));
            }
        }
        if arg == "--udp-counters-64bit" {
            return Some(
                "--udp-counters-64bit is iperf3's; fperf's UDP counters are always 64 bits \
                 (with --iperf3 too)"
                    .into(),
            );
        }
        if let Some(t) = value(i, "-t") {
            let secs = ["sec", "s", "m", "h"]
                .iter()
                .find_map(|unit| t.strip_suffix(unit))
                .filter(|n| !n.is_empty() && n.parse::<f64>().is_ok());
            if let Some(n) = secs {
                let unit = t.trim_start_matches(n);
                let secs = match unit {
                    "m" => n
                        .parse::<f64>()
                        .map(|v| v * 60.0)
                        .unwrap_or(0.0)
                        .to_string(),
                    "h" => n
                        .parse::<f64>()
                        .map(|v| v * 3600.0)
                        .unwrap_or(0.0)
                        .to_string(),
                    _ => n.to_string(),
                };
                return Some(format!(
                    "-t is the number of streams, not a time: did you mean --time {secs}?"
                ));
            }
        }
    }
    None
}

/// What `--generate` writes to stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Generate {
    /// fperf(1), in roff (`man -l -` reads it).
    Man,
    /// fperf-mesh(1).
    ManMesh,
    /// fperf-exporter(1).
    ManExporter,
    /// bash's completions.
    CompleteBash,
    /// zsh's completions.
    CompleteZsh,
    /// fish's completions.
    CompleteFish,
    /// The JSON Schema of `--json`'s documents and `--json-stream`'s lines.
    JsonSchema,
}

/// The value of a `-t` among `args` that is a bare number (`-t 10`, `-t10`, `-t=10`),
/// which iperf3's users type for seconds.
fn bare_streams(args: &[OsString]) -> Option<String> {
    let args: Vec<String> = (args.iter())
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    args.iter().enumerate().find_map(|(i, arg)| {
        let value = match arg.strip_prefix("-t") {
            Some("") => args.get(i + 1)?.clone(),
            Some(rest) => rest.trim_start_matches('=').to_owned(),
            None => return None,
        };
        (!value.is_empty() && value.bytes().all(|b| b.is_ascii_digit())).then_some(value)
    })
}

/// The layout of `--json`'s document.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum JsonLayout {
    /// fperf's own (docs/json.md).
    Fperf,
    /// iperf3's `-J`, with fperf's own document under the key `fperf`.
    Iperf3,
}

/// The heading of the workload options in the help.
const WORKLOADS_HEADING: &str = "Workloads (default: bulk data from client to server)";

/// Headings of the options that describe a test. A server runs each test as its client
/// describes it, so with `-s` these are refused rather than ignored.
const TEST_HEADINGS: [&str; 7] = [
    "Test",
    "Tuning",
    WORKLOADS_HEADING,
    "TCP options",
    "TCP and UDP options",
    "UDP options",
    "RDMA options",
];

/// Options under other headings that only a client has (the same holds for them). The
/// client's other outputs conflict with `-s` in their own definitions.
const CLIENT_ONLY: [&str; 3] = ["iperf3", "conf", "table"];

/// The options `-h` lists first, in this order: what a newcomer needs.
const FIRST_OPTIONS: [&str; 9] = [
    "server", "client", "time", "port", "interval", "bitrate", "reverse", "json", "loopback",
];

/// The command line's definition as `-h` shows it: [`FIRST_OPTIONS`] first, under no
/// heading, then the other options `-h` keeps under their topics. `--help` keeps every
/// option under its topic.
fn short_help_command() -> clap::Command {
    FIRST_OPTIONS
        .iter()
        .enumerate()
        .fold(Cli::command(), |cmd, (order, id)| {
            cmd.mut_arg(*id, |arg| {
                arg.help_heading(None::<&str>).display_order(order)
            })
        })
}

/// Whether the arguments ask for the short help (`-h`, before any `--`).
fn asks_short_help(args: &[OsString]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "-h")
}

/// What the command line comes to.
pub enum Parsed {
    /// The flags parsed; [`Cli::config`] checks how they go together.
    Run(Box<Cli>),
    /// --help or --version, to print (exit status 0).
    Shown(clap::Error),
    /// Every problem found with the flags, a line each (exit status 2).
    Refused(Vec<String>),
}

/// Most problems reported from one command line.
const MAX_PROBLEMS: usize = 32;

/// Parses the command line and, when something is wrong with it, finds every problem
/// rather than the first: iperf3's habits, then each flag clap refuses (taken out and
/// the rest parsed again, as clap stops at the first), then how the remaining flags go
/// together ([`Cli::config`]).
pub fn parse_every_problem(args: &[OsString]) -> Parsed {
    let (hints, mut rest) = iperf3_habits(args);
    let mut problems: Vec<String> = hints
        .into_iter()
        .map(|hint| format!("{hint} (see fperf --help)"))
        .collect();
    while problems.len() < MAX_PROBLEMS {
        match Cli::parse_args(&rest) {
            Ok(cli) if problems.is_empty() => return Parsed::Run(Box::new(cli)),
            Ok(cli) => {
                if let Err(e) = cli.config() {
                    let text = format!("{e:#}");
                    problems.extend(text.lines().map(|line| format!("error: {line}")));
                }
                break;
            }
            Err(e) if !e.use_stderr() => return Parsed::Shown(e),
            // Missing since a refused value was taken out (e.g. -c's): already said.
            Err(e)
                if e.kind() == clap::error::ErrorKind::MissingRequiredArgument
                    && rest.len() < args.len() =>
            {
                break
            }
            Err(e) => {
                problems.push(clap_message(&e));
                match without_offender(&rest, &e) {
                    Some(fewer) => rest = fewer,
                    None => break,
                }
            }
        }
    }
    Parsed::Refused(problems)
}

/// clap's message on one line, in users' words, with where to look.
fn clap_message(e: &clap::Error) -> String {
    // clap's message may span lines (e.g. a list of missing flags), and a tip may
    // follow it (a similar flag's name): keep them, on one line, and leave the usage.
    let text = e.render().to_string();
    let mut parts = text.split("\n\n").take_while(|p| {
        let p = p.trim_start();
        !p.starts_with("Usage:") && !p.starts_with("For more information")
    });
    let message: Vec<&str> = parts
        .next()
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .collect();
    let tips: Vec<&str> = parts.flat_map(str::lines).map(str::trim).collect();
    let message = plain_number_error(e, message.join(" "));
    let message = match tips.is_empty() {
        true => message,
        false => format!("{message}; {}", tips.join("; ")),
    };
    format!(
        "{} (see fperf --help)",
        message.trim_start_matches("error: ")
    )
}

/// clap passes on Rust's own words for a number that does not parse ("invalid digit
/// found in string"): `message` with them in users' words.
fn plain_number_error(e: &clap::Error, message: String) -> String {
    use std::error::Error;
    let Some(parse) = e
        .source()
        .and_then(|s| s.downcast_ref::<std::num::ParseIntError>())
    else {
        return message;
    };
    match fperf::options::plain_number_error(parse) {
        Some(plain) => message.replace(&parse.to_string(), plain),
        None => message,
    }
}

/// `args` without the argument that clap's error `e` names (and its value), so that
/// parsing them again finds the next problem; None when `e` names none (e.g. a missing
/// role) or it cannot be found.
fn without_offender(args: &[OsString], e: &clap::Error) -> Option<Vec<OsString>> {
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::String(named)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let text: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let without = |from: usize, count: usize| -> Vec<OsString> {
        let mut fewer = args.to_vec();
        fewer.drain(from..(from + count).min(args.len()));
        fewer
    };
    // An unknown argument is named as given (`--bogus`, of `--bogus=1` too). fperf's
    // own options take no bare words (its commands' hosts aside): one that follows is
    // the unknown option's value.
    let given = |a: &String| a == named || a.starts_with(&format!("{named}="));
    if let Some(i) = text.iter().skip(1).position(given).map(|i| i + 1) {
        let in_command = text.get(1).is_some_and(|a| a == "mesh" || a == "exporter");
        let with_value = !in_command
            && text[i] == *named
            && text
                .get(i + 1)
                .is_some_and(|next| !next.starts_with('-') && next != "mesh" && next != "exporter");
        return Some(without(i, if with_value { 2 } else { 1 }));
    }
    // A known option is named by its long form, as `--time <SECS>`: find how it was
    // written, here or in a subcommand.
    let long = named.split_whitespace().next()?.strip_prefix("--")?;
    let cmd = Cli::command();
    let arg = cmd
        .get_arguments()
        .chain(cmd.get_subcommands().flat_map(clap::Command::get_arguments))
        .find(|a| a.get_long() == Some(long))?;
    let mut names: Vec<String> = vec![format!("--{long}")];
    names.extend(
        arg.get_all_aliases()
            .unwrap_or_default()
            .iter()
            .map(|a| format!("--{a}")),
    );
    let short = arg.get_short().map(|c| format!("-{c}"));
    names.extend(short.clone());
    let takes_value = arg.get_action().takes_values() && !arg.is_require_equals_set();
    text.iter().enumerate().skip(1).find_map(|(i, a)| {
        if names.contains(a) {
            Some(without(i, if takes_value { 2 } else { 1 }))
        } else {
            let joined = names
                .iter()
                .any(|n| n.starts_with("--") && a.starts_with(&format!("{n}=")))
                || short
                    .as_ref()
                    .is_some_and(|s| a.starts_with(s.as_str()) && !a.starts_with("--"));
            joined.then(|| without(i, 1))
        }
    })
}

impl Cli {
    /// Parses the command line as `try_parse_from` does, refusing with `-s` every
    /// option that describes a test.
    pub fn parse_args<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        let bare_t = bare_streams(&args);
        let mut command = if asks_short_help(&args) {
            short_help_command()
        } else {
            Cli::command()
        };
        let matches = command.try_get_matches_from_mut(args)?;
        if matches.get_flag("server") {
            let given = command.get_arguments().find(|arg| {
                let describes_test = arg
                    .get_help_heading()
                    .is_some_and(|heading| TEST_HEADINGS.contains(&heading))
                    || CLIENT_ONLY.contains(&arg.get_id().as_str());
                // Both ends have their own --xdp: the server's serves its UDP tests so.
                let both_ends = arg.get_id() == "xdp";
                describes_test
                    && !both_ends
                    && matches.value_source(arg.get_id().as_str())
                        == Some(clap::parser::ValueSource::CommandLine)
            });
            if let Some(arg) = given {
                let name = match (arg.get_short(), arg.get_long()) {
                    (Some(short), Some(long)) => format!("-{short}/--{long}"),
                    (None, Some(long)) => format!("--{long}"),
                    _ => arg.get_id().to_string(),
                };
                return Err(command.error(
                    clap::error::ErrorKind::ArgumentConflict,
                    format!(
                        "{name} describes a test, and a server runs each test as its client \
                         asks: give it to the client (-c)"
                    ),
                ));
            }
        }
        let mut cli = Cli::from_arg_matches(&matches)?;
        cli.bare_t = bare_t;
        Ok(cli)
    }

    /// `--generate`: what to write instead of running.
    pub fn generate(&self) -> Option<Generate> {
        self.generate
    }

    /// `--pidfile`: where to write this process's ID.
    pub fn pidfile(&self) -> Option<&std::path::Path> {
        self.pidfile.as_deref()
    }

    /// Where output goes: `--logfile`, and what begins each line (`--timestamps`, and
    /// `--title` unless the output is JSON, where the document holds the title).
    pub fn output_redirect(&self) -> (Option<&std::path::Path>, LinePrefix) {
        let prefix = LinePrefix {
            time_format: self.timestamps.clone(),
            title: self.title.clone().filter(|_| self.json.is_none()),
        };
        (self.logfile.as_deref(), prefix)
    }

    /// Every flag checked, and turned into what to run. The error names every option
    /// given to the wrong role, a line each, beside the first other problem.
    pub fn config(&self) -> Result<Config> {
        let mut problems = self.misplaced_options();
        let checked = self.checked_config();
        if problems.is_empty() {
            return checked;
        }
        if let Err(e) = checked {
            problems.push(format!("{e:#}"));
        }
        bail!("{}", problems.join("\n"))
    }

    /// The options given that belong to the other role (a server's to a client, or a
    /// client's to a server).
    fn misplaced_options(&self) -> Vec<String> {
        if self.command.is_some() {
            return Vec::new();
        }
        let problems: Vec<(bool, &str)> = if self.server {
            vec![
                (
                    self.guard.connect_timeout.is_some(),
                    "--connect-timeout is a client option (use it with -c)",
                ),
                (
                    self.cport.is_some(),
                    "--cport is a client option (use it with -c)",
                ),
                (
                    self.bind_dev.is_some(),
                    "--bind-dev is a client option (use it with -c); a server listens where \
                     -B says",
                ),
                (
                    self.json == Some(JsonLayout::Iperf3),
                    "--json=iperf3 is the layout of a client's document; a server's is --json",
                ),
                (
                    self.json.is_some() && (self.title.is_some() || self.extra_data.is_some()),
                    "-T/--title and --extra-data label a client's --json document; a server's \
                     JSON lines carry the client's settings",
                ),
                (
                    self.one_off && self.guard.parallel > 1,
                    "-1/--one-off serves one test: --parallel does not apply",
                ),
            ]
        } else {
            vec![
                (
                    self.iperf3_port.is_some(),
                    "--iperf3-port is a server option (use it with -s)",
                ),
                (
                    self.one_off,
                    "-1/--one-off is a server option (use it with -s)",
                ),
                (
                    self.bind_dev.is_some() && self.rdma,
                    "--bind-dev is for TCP and UDP; RDMA's device is -D (--rdmadev)",
                ),
            ]
        };
        let mut found: Vec<String> = problems
            .into_iter()
            .filter(|&(given, _)| given)
            .map(|(_, problem)| problem.to_owned())
            .collect();
        if !self.server {
            found.extend(self.guard.server_options_given());
        }
        found
    }

    /// [`Cli::config`] but for the options of the other role.
    fn checked_config(&self) -> Result<Config> {
        match &self.command {
            Some(Command::Exporter(args)) => return Ok(Config::Exporter(args.config()?)),
            Some(Command::Mesh(args)) => return Ok(Config::Mesh(Box::new(args.run()?))),
            None => {}
        }
        // Server mode takes its settings from each client; checking the flags given
        // still catches a mistyped combination before anything starts.
        let mut settings = self.settings()?;
        if self.json == Some(JsonLayout::Iperf3) {
            fperf::output::iperf3_json::check(&settings)?;
            // iperf3's layout has intervals unless -i 0: iperf3's default is one a second.
            if self.interval.is_none() {
                settings.interval_ms = Some(1000);
            }
        }
        let auth = AuthKey::from_cli(self.guard.auth_key.as_deref())?;
        let idle = Duration::from_secs(self.guard.idle_timeout);
        let family = self.family()?;
        let host_ip = self.client.as_deref().and_then(|h| h.parse().ok());
        for (flag, ip) in [("-B", self.bind), ("-c", host_ip)] {
            if let Some(ip) = ip {
                family.check(flag, ip).map_err(|e| anyhow::anyhow!(e))?;
            }
        }
        if self.server {
            if self.guard.allow_mesh && auth.is_none() {
                bail!(
                    "--allow-mesh needs --auth-key (or ${}): only a coordinator that proves \
                     the key may ask for tests",
                    fperf::auth::KEY_ENV
                );
            }
            return Ok(Config::Server {
                server: ServerConfig {
                    bind: self.bind,
                    family,
                    port: self.port(),
                    idle_timeout: idle,
                    control_keepalive: self.guard.cntl_ka,
                    limits: self.guard.limits(),
                    auth,
                    parallel: self.guard.parallel as usize,
                    iperf3_port: self.iperf3_port,
                    allow_mesh: self.guard.allow_mesh,
                    one_off: self.one_off,
                    xdp: self.server_xdp()?,
                    ..ServerConfig::default()
                },
                json: self.json.is_some(),
            });
        }
        // Not where fperf's own -m, --time or --transactions bound the run: that user
        // knows fperf's flags.
        if let Some(n) = self.bare_t.as_deref().filter(|_| self.length_defaulted()) {
            // On stderr, before the test starts: scripts that read stdout see no change.
            eprintln!(
                "fperf: note: -t {n} means {n} streams (fperf's -t counts streams); for a run \
                 of {n} seconds, as iperf3's -t, give --time {n}"
            );
        }
        self.check_cport(&settings)?;
        let mut output = self.output()?;
        output.length_defaulted = self.length_defaulted();
        if output.length_defaulted && output.sweep.is_some() {
            if let Some(note) = crate::measure::length_note(&settings) {
                eprintln!("fperf: note: each run of the sweep runs {note}");
            }
        }
        // An iperf3 server does not give up after fperf's --idle-timeout.
        let paced = |s: &Settings| {
            if self.iperf3 {
                Ok(())
            } else {
                fperf::limits::check_paced_silence(s, idle)
            }
        };
        match &output.sweep {
            Some(sweep) => sweep.check(&settings, paced)?,
            None => paced(&settings).map_err(|e| anyhow::anyhow!(e))?,
        }
        fperf::stream::affinity::check_pinnable("--cpu", &settings.client_cpus)
            .map_err(|e| anyhow::anyhow!(e))?;
        if self.loopback {
            // Its server runs here too.
            fperf::stream::affinity::check_pinnable("--server-cpu", &settings.server_cpus)
                .map_err(|e| anyhow::anyhow!(e))?;
            let ip: IpAddr = self.bind.unwrap_or(family.loopback());
            return Ok(Config::Loopback {
                server: Box::new(ServerConfig {
                    bind: Some(ip),
                    port: self.port(),
                    control_keepalive: self.guard.cntl_ka,
                    ..ServerConfig::default()
                }),
                client: Box::new(ClientConfig {
                    cport: self.cport,
                    bind_device: self.bind_dev.clone(),
                    control_keepalive: self.guard.cntl_ka,
                    ..ClientConfig::new(ip.to_string(), self.port(), settings)
                }),
                output,
            });
        }
        let host = self.client.clone().unwrap_or_default();
        let mut client = ClientConfig::new(host, self.port(), settings);
        client.bind = self.bind;
        client.cport = self.cport;
        client.bind_device = self.bind_dev.clone();
        client.family = family;
        client.stall_timeout = idle;
        if let Some(ms) = self.guard.connect_timeout {
            client.connect_timeout = Duration::from_millis(ms);
        }
        client.control_keepalive = self.guard.cntl_ka;
        client.auth = auth;
        client.datagram_for_family = !self.pktsize.has("pktsize")
            && self.sweep.is_none()
            && client.settings.protocol() == Protocol::Udp
            && !client.settings.workload.mprtt()
            && !self.over_ipv6()?;
        if self.conf {
            return Ok(Config::Conf(Box::new(client)));
        }
        if self.iperf3 {
            if let Err(why) = fperf::client::iperf3::check(&client.settings) {
                bail!("--iperf3: {why}");
            }
            let unsupported = [
                (client.auth.is_some(), "--auth-key"),
                (output.sweep.is_some(), "--sweep"),
            ];
            if let Some((_, flag)) = unsupported.iter().find(|(given, _)| *given) {
                bail!("--iperf3: {flag} cannot be used against an iperf3 server");
            }
            return Ok(Config::Iperf3 {
                client: Box::new(client),
                output,
            });
        }
        Ok(Config::Client {
            client: Box::new(client),
            output,
        })
    }

    /// Refuses a `--cport` that the run's data sockets cannot use: with a transport or
    /// workload that opens sockets of its own, or more sockets than ports above it.
    fn check_cport(&self, settings: &Settings) -> Result<()> {
        let Some(first) = self.cport else {
            return Ok(());
        };
        let conflict = [
            (settings.protocol() == Protocol::Rdma, "-R (RDMA)"),
            (settings.flows, "--flows (hundreds of sockets)"),
            (
                settings.workload == Workload::Crr,
                "--crr (a connection per transaction)",
            ),
        ];
        if let Some((_, what)) = conflict.iter().find(|(given, _)| *given) {
            bail!("--cport cannot be used with {what}");
        }
        let sockets = u64::from(settings.nstreams) * u64::from(settings.nsockets);
        let last = u64::from(first) + sockets.max(1) - 1;
        if last > u64::from(u16::MAX) {
            bail!("--cport {first}: the run's {sockets} data sockets need ports up to {last}, beyond 65535");
        }
        Ok(())
    }

    /// The IP family asked for: `-4`, `-6`, or either.
    fn family(&self) -> Result<IpFamily> {
        self.family.family()
    }

    /// The server's `--xdp`: where it serves UDP tests through AF_XDP.
    fn server_xdp(&self) -> Result<Option<fperf::transport::xdp::XdpDevice>> {
        let mut udp = UdpSettings::default();
        self.udp_opts.apply(&mut udp)?;
        Ok(udp.xdp)
    }

    /// The base port: `-p`, or the default of the server's kind.
    fn port(&self) -> u16 {
        match (self.port, self.iperf3) {
            (Some(port), _) => port,
            (None, true) => fperf::client::iperf3::DEFAULT_PORT,
            (None, false) => DEFAULT_PORT,
        }
    }

    /// `--under-load`'s options, if it was given.
    fn under_load_spec(&self) -> Result<Option<Box<UnderLoadSpec>>> {
        let mut spec = UnderLoadSpec::default();
        self.under_load.apply(&mut spec)?;
        if !spec.enabled {
            return Ok(None);
        }
        spec.check().map_err(anyhow::Error::msg)?;
        Ok(Some(Box::new(spec)))
    }

    /// The outputs asked for.
    fn output(&self) -> Result<Output> {
        let mode = match (self.json, self.json_stream) {
            (Some(JsonLayout::Fperf), _) => Mode::Json,
            (Some(JsonLayout::Iperf3), _) => Mode::Iperf3Json,
            (None, true) => Mode::JsonStream,
            (None, false) => Mode::Human,
        };
        let mut sweep = self.sweep.as_deref().map(fperf::sweep::parse).transpose()?;
        if let (Some(sweep), Some(list)) = (sweep.as_mut(), &self.tests) {
            sweep.tests = fperf::sweep::parse_tests(list)?;
        }
        let table = self.table.unwrap_or(Table::Fperf);
        let w = self.workload_opts.flags()?;
        if table == Table::Sfnt && !(w.mprtt || w.echo || w.crr) {
            bail!("--table sfnt shows round trips: give -r, --echo or --crr");
        }
        if mode == Mode::Iperf3Json && sweep.is_some() {
            bail!("--json=iperf3 describes one run; a --sweep's document is --json");
        }
        // Made now, so a path that cannot be written fails before the test, not after.
        if let Some(path) = &self.plot {
            File::create(path)
                .with_context(|| format!("cannot create --plot file {}", path.display()))?;
        }
        let under_load = self.under_load_spec()?;
        if under_load.is_some() && mode == Mode::Iperf3Json {
            bail!("--json=iperf3 describes one test; a --under-load run's document is --json");
        }
        let host = match (self.loopback, &self.client) {
            (false, Some(host)) => host.clone(),
            _ => self.bind.unwrap_or(self.family()?.loopback()).to_string(),
        };
        use std::io::IsTerminal;
        Ok(Output {
            progress: mode == Mode::Human
                && self.interval.is_none()
                && std::io::stderr().is_terminal(),
            mode,
            csv: self.csv.clone(),
            plot: self.plot.clone(),
            sweep,
            under_load,
            table,
            server: (host, self.port()),
            length_defaulted: false,
            labels: DocLabels {
                title: self.title.clone(),
                extra_data: self.extra_data.clone(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_group_of_the_tests_options_finds_its_declarations() {
        let ids = |options: &mut dyn Iterator<Item = &'static str>| options.collect::<Vec<_>>();
        assert_eq!(
            ids(&mut StreamsGroup::options().map(|o| o.id)),
            ["nstreams"]
        );
        assert_eq!(
            ids(&mut MeshStreamsGroup::options().map(|o| o.id)),
            ["nstreams"]
        );
        assert_eq!(ids(&mut PktsizeGroup::options().map(|o| o.id)), ["pktsize"]);
        assert_eq!(
            ids(&mut MeshPktsizeGroup::options().map(|o| o.id)),
            ["pktsize"]
        );
        assert_eq!(ids(&mut BitrateGroup::options().map(|o| o.id)), ["bitrate"]);
        assert_eq!(
            ids(&mut MeshBitrateGroup::options().map(|o| o.id)),
            ["bitrate"]
        );
        assert_eq!(
            ids(&mut RoundTripGroup::options().map(|o| o.id)),
            ["mprtt", "echo"]
        );
        assert_eq!(
            ids(&mut OtherWorkloadGroup::options().map(|o| o.id)),
            ["crr", "reverse", "bidir"]
        );
        assert_eq!(
            ids(&mut MeshRoundTripGroup::options().map(|o| o.id)),
            ["mprtt", "echo"]
        );
    }

    fn config(args: &[&str]) -> Result<Config> {
        let mut argv = vec!["fperf"];
        argv.extend_from_slice(args);
        Cli::parse_args(argv)?.config()
    }

    fn error(args: &[&str]) -> String {
        match config(args) {
            Ok(_) => panic!("{args:?} was accepted"),
            Err(e) => format!("{e:#}"),
        }
    }

    #[test]
    fn json_takes_iperf3s_layout_for_bulk_tcp_and_udp_runs_with_intervals() {
        let Ok(Config::Client { client, output }) = config(&["-c", "h", "--json=iperf3", "-u"])
        else {
            panic!("client")
        };
        assert_eq!(output.mode, Mode::Iperf3Json);
        assert_eq!(output.server, ("h".to_owned(), DEFAULT_PORT));
        assert_eq!(client.settings.interval_ms, Some(1000));
        let Ok(Config::Client { client, .. }) = config(&["-c", "h", "--json=iperf3", "-i", "0.5"])
        else {
            panic!("client")
        };
        assert_eq!(client.settings.interval_ms, Some(500));
        // iperf3's -i 0: no intervals (its layout then has none either).
        let Ok(Config::Client { client, output }) = config(&["-c", "h", "-i", "0"]) else {
            panic!("client")
        };
        assert_eq!(client.settings.interval_ms, None);
        assert!(!output.progress, "-i 0 prints no progress line either");
        let Ok(Config::Client { client, .. }) = config(&["-c", "h", "--json=iperf3", "-i", "0"])
        else {
            panic!("client")
        };
        assert_eq!(client.settings.interval_ms, None);
        // Sub-millisecond values say so; the least of each flag is its own.
        assert!(error(&["-c", "h", "-i", "0.0004"]).contains("less than one"));
        assert!(error(&["-c", "h", "-i", "0.001"]).contains("between 10 ms and one week, not 1 ms"));
        assert!(error(&["-c", "h", "--time", "0"]).contains("between 1 ms and one week, not 0 ms"));
        assert!(error(&["-c", "h", "--json=iperf3", "-r"]).contains("bulk runs only"));
        assert!(error(&["-c", "h", "--json=iperf3", "--sweep", "mb=1,2"]).contains("one run"));
        assert!(error(&["-c", "h", "--json=yaml"]).contains("invalid value"));
    }

    #[test]
    fn tests_and_the_sfnt_table_go_with_a_sweep_only() {
        use fperf::sweep::SweepTest;
        let Ok(Config::Client { output, .. }) =
            config(&["-c", "h", "--sweep", "l=1..4", "--tests", "bw,rr,echo"])
        else {
            panic!("client")
        };
        let tests = output.sweep.map(|s| s.tests);
        let all = vec![SweepTest::Bw, SweepTest::Rr, SweepTest::Echo];
        assert_eq!(tests, Some(all));
        assert!(error(&["-c", "h", "--tests", "bw"]).contains("--sweep"));
        assert!(error(&["-c", "h", "--sweep", "l=1,2", "--tests", "bw,lat"]).contains("'lat'"));
        assert!(error(&["-c", "h", "--sweep", "l=1,2", "--tests", "rr,rr"]).contains("once"));
        assert!(error(&["-c", "h", "-r", "--sweep", "l=1,2", "--tests", "bw"]).contains("--mprtt"));
        let Ok(Config::Client { output, .. }) =
            config(&["-c", "h", "--echo", "--sweep", "l=1,2", "--table", "sfnt"])
        else {
            panic!("client")
        };
        assert_eq!(output.table, Table::Sfnt);
        assert!(error(&["-c", "h", "--sweep", "l=1,2", "--table", "sfnt"]).contains("-r"));
        assert!(error(&["-c", "h", "-r", "--table", "sfnt"]).contains("--sweep"));
        let json = [
            "-c", "h", "-r", "--sweep", "l=1", "--table", "sfnt", "--json",
        ];
        assert!(error(&json).contains("--json"));
    }

    #[test]
    fn each_role_becomes_its_own_configuration() {
        let Ok(Config::Server { server, json }) =
            config(&["-s", "-p", "5001", "--max-streams", "4", "--json"])
        else {
            panic!("server")
        };
        assert!(json, "a JSON document per test");
        assert_eq!((server.port, server.limits.max_streams), (5001, Some(4)));
        let Ok(Config::Client { client, output }) =
            config(&["-c", "::1", "-t", "2", "--json", "--idle-timeout", "3"])
        else {
            panic!("client")
        };
        assert_eq!(client.host, "::1");
        assert_eq!(client.settings.nstreams, 2);
        assert_eq!(client.stall_timeout, Duration::from_secs(3));
        assert_eq!(output.mode, Mode::Json);
        let Ok(Config::Loopback { server, client, .. }) = config(&["--loopback", "-u"]) else {
            panic!("loopback")
        };
        assert_eq!(server.bind, Some(IpAddr::from([127, 0, 0, 1])));
        assert_eq!(client.host, "127.0.0.1");
        assert_eq!(client.settings.protocol(), Protocol::Udp);
        assert!(matches!(
            config(&["-c", "h", "--conf"]),
            Ok(Config::Conf(_))
        ));
    }

    /// The client's settings and header note of `args`.
    fn client_of(args: &[&str]) -> (Settings, Option<String>, bool) {
        let (client, output) = match config(args) {
            Ok(Config::Client { client, output }) => (client, output),
            Ok(Config::Loopback { client, output, .. }) => (client, output),
            _ => panic!("{args:?}: not a client"),
        };
        let note = (output.length_defaulted)
            .then(|| crate::measure::length_note(&client.settings))
            .flatten();
        (client.settings, note, client.datagram_for_family)
    }

    #[test]
    fn a_run_given_no_length_lasts_ten_seconds_in_sizes_that_fit_its_workload() {
        for (args, pktsize) in [
            (&["-c", "h"][..], 32768),
            (&["-c", "h", "-r"][..], 1),
            (&["-c", "h", "--echo"][..], 1),
            (&["-c", "h", "--crr"][..], 1),
            (&["-c", "h", "-u", "--echo"][..], 1),
            (&["-c", "h", "-u"][..], 1472),
            (&["-c", "h", "-u", "--reverse"][..], 1472),
            (&["-c", "::1", "-u"][..], 1452),
            (&["-c", "[::1]", "-u"][..], 1452),
            (&["-c", "h", "-6", "-u"][..], 1452),
            (&["--loopback", "-6", "-u"][..], 1452),
            (&["-c", "h", "-u", "-l", "32K"][..], 32768),
        ] {
            let (settings, note, _) = client_of(args);
            assert_eq!(settings.pktsize, pktsize, "{args:?}");
            assert_eq!(settings.time_ms, Some(10_000), "{args:?}");
            assert_eq!(
                note.as_deref(),
                Some("for 10 s (default; -m or --time to change)"),
                "{args:?}"
            );
        }
        // A name's family is known once it resolves: the client then fits the datagram.
        assert!(client_of(&["-c", "h", "-u"]).2);
        assert!(!client_of(&["-c", "::1", "-u"]).2);
        assert!(!client_of(&["-c", "h", "-u", "-l", "1000"]).2);
        assert!(!client_of(&["-c", "h"]).2);
        // The warm-up comes on top.
        assert_eq!(
            client_of(&["-c", "h", "--omit", "2"]).0.time_ms,
            Some(12_000)
        );
        // A length given is kept, and the header says nothing.
        for (args, time_ms, mb) in [
            (&["-c", "h", "-m", "5"][..], None, 5),
            (&["-c", "h", "--time", "3"][..], Some(3000), DEFAULT_MB),
            (
                &["-c", "h", "-r", "--transactions", "9"][..],
                None,
                DEFAULT_MB,
            ),
            (&["-c", "h", "--sweep", "mb=1,2"][..], None, DEFAULT_MB),
        ] {
            let (settings, note, _) = client_of(args);
            assert_eq!((settings.time_ms, settings.mb), (time_ms, mb), "{args:?}");
            assert_eq!(note, None, "{args:?}");
        }
        // A sweep shares the 10 s among its runs: 17 sizes times 2 tests.
        let (settings, note, _) =
            client_of(&["-c", "h", "--sweep", "pktsize=1..64K", "--tests", "bw,echo"]);
        assert_eq!(settings.time_ms, Some(294));
        assert_eq!(
            note.as_deref(),
            Some("for 0.294 s (default; -m or --time to change)")
        );
    }

    #[test]
    fn a_mesh_sends_datagrams_that_fit_the_mtu_and_small_requests() {
        let key = std::env::temp_dir().join(format!("fperf-cli-{}.key", std::process::id()));
        std::fs::write(&key, "the mesh's secret").expect("key file");
        let key_path = key.to_str().expect("path").to_owned();
        for (args, pktsize) in [
            (&["-u"][..], 1472),
            (&["-u", "-6"][..], 1452),
            (&["-r"][..], 1),
            (&["--echo", "-u"][..], 1),
            (&[][..], 32768),
            (&["-u", "-l", "8K"][..], 8192),
        ] {
            let mut all = vec!["mesh", "h1", "h2", "--auth-key", &key_path];
            all.extend_from_slice(args);
            let Ok(Config::Mesh(run)) = config(&all) else {
                panic!("{all:?}: not a mesh")
            };
            assert_eq!(run.config.settings.pktsize, pktsize, "{all:?}");
        }
        let _ = std::fs::remove_file(&key);
    }

    #[test]
    fn a_bare_number_after_t_is_noticed() {
        let bare = |args: &[&str]| {
            let args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
            bare_streams(&args)
        };
        assert_eq!(
            bare(&["fperf", "-c", "h", "-t", "10"]).as_deref(),
            Some("10")
        );
        assert_eq!(bare(&["fperf", "-c", "h", "-t10"]).as_deref(), Some("10"));
        assert_eq!(bare(&["fperf", "-c", "h", "-t=4"]).as_deref(), Some("4"));
        assert_eq!(bare(&["fperf", "-c", "h", "--nstreams", "10"]), None);
        assert_eq!(bare(&["fperf", "-c", "h", "--time", "10"]), None);
        assert_eq!(bare(&["fperf", "-c", "h", "-t", "1.5"]), None);
    }

    #[test]
    fn flags_that_do_not_go_together_are_refused_here() {
        assert!(error(&["-c", "h", "--max-mb", "5"]).contains("--max-mb is a server option"));
        assert!(error(&["-c", "h", "-1"]).contains("-1/--one-off is a server option"));
        assert!(error(&["-s", "-1", "--parallel", "2"]).contains("--parallel does not apply"));
        assert!(error(&["-c", "h", "--ack-timeout", "5"]).contains("-u -r"));
        assert!(
            error(&["-c", "h", "-R", "--rdma-api", "cm", "--ofi-provider", "tcp"])
                .contains("--ofi-provider needs --rdma-api ofi")
        );
        assert!(error(&["-s", "-R", "--rdma-api", "cm"]).contains("-R/--rdma describes a test"));
        assert!(error(&["-c", "h", "-q", "2"]).contains("--qtype"));
        assert!(error(&["-c", "h", "--plot", "/nonexistent/dir/x.svg"]).contains("--plot"));
        // Settings::validate runs here too: the same check the server makes.
        assert!(!error(&["-c", "h", "-l", "0"]).is_empty());
    }
}
