//! The machine-readable results: `--json` (one document per run) and `--json-stream`
//! (one JSON object per line per event), as documented in `docs/json.md` and
//! `docs/fperf-result.schema.json`.
//!
//! Invariants: every number is finite (a rate over zero time is 0, never NaN or
//! infinity); exact integers (bytes, nanoseconds, microseconds of CPU) sit next to the
//! rates derived from them; keys are unique (the documents are typed structs); fields
//! are only ever added, and `schema_version` changes when one is removed or changes
//! meaning.

use crate::client::{ClientOutcome, StreamInfo};
use crate::results::{nanos, Figures, IntervalResult, SideResult, StreamInterval};
use crate::settings::Settings;
use crate::stats::latency_doc::finite;
pub use crate::stats::latency_doc::LatencyDoc;
use crate::stats::LatencySummary;
use crate::sweep::{SweepParam, SweepTest};
use crate::sysinfo::{CpuUsage, SystemFacts};
use crate::transport::figures::{TransportFiguresDoc, TransportInForce};
use crate::transport::labels::Sample;
use crate::transport::Role;
use crate::under_load::figures::{ClockOffset, PhaseFigures, RPM_DRAFT};
use crate::under_load::UnderLoadRun;
use schemars::generate::SchemaSettings;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

/// Version of the document layout.
pub const SCHEMA_VERSION: u32 = 1;

/// When a run started.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "start")]
#[schemars(deny_unknown_fields)]
pub struct StartTime {
    /// Nanoseconds since the Unix epoch.
    pub unix_ns: u64,
    /// The same instant as RFC 3339 UTC text, to the second.
    #[schemars(regex(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$"))]
    pub utc: String,
}

impl StartTime {
    /// Now.
    pub fn now() -> StartTime {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        StartTime {
            unix_ns: u64::try_from(since.as_nanos()).unwrap_or(u64::MAX),
            utc: rfc3339(since.as_secs()),
        }
    }
}

/// `secs` since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian calendar).
fn rfc3339(secs: u64) -> String {
    let (year, month, day) = civil_date(secs);
    let rem = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `secs` since the epoch as HTTP writes dates (`Thu, 26 Nov 2026 08:00:35 GMT`), the
/// form of iperf3's `timestamp.time`.
pub fn http_date(secs: u64) -> String {
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (year, month, day) = civil_date(secs);
    let rem = secs % 86_400;
    // The epoch was a Thursday.
    let weekday = WEEKDAYS[(secs / 86_400 % 7) as usize];
    let month = MONTHS[(month - 1) as usize];
    format!(
        "{weekday}, {day:02} {month} {year:04} {:02}:{:02}:{:02} GMT",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The (year, month 1-12, day 1-31) of `secs` since the epoch, in UTC.
fn civil_date(secs: u64) -> (i64, i64, i64) {
    let days = (secs / 86_400) as i64;
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// What one end measured over a span: exact bytes and nanoseconds, and the rates
/// derived from them (0 over zero time).
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "figures")]
#[schemars(deny_unknown_fields)]
pub struct FiguresDoc {
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub duration_ns: u64,
    #[schemars(range(min = 0.0))]
    pub seconds: f64,
    /// bytes_sent × 8 / seconds (0 over zero time).
    #[schemars(range(min = 0.0))]
    pub sent_bits_per_second: f64,
    #[schemars(range(min = 0.0))]
    pub received_bits_per_second: f64,
    /// The client's round trips per second with `-r` (`send_latency.count / seconds`);
    /// `None` on the server and without `-r`.
    #[schemars(range(min = 0.0))]
    pub transactions_per_second: Option<f64>,
    pub send_latency: Option<LatencyDoc>,
    /// What one sample of `send_latency` covers; `None` when `send_latency` is.
    pub send_latency_per: Option<Sample>,
    pub recv_latency: Option<LatencyDoc>,
    /// What one sample of `recv_latency` covers; `None` when `recv_latency` is.
    pub recv_latency_per: Option<Sample>,
    pub submit_latency: Option<LatencyDoc>,
    pub retries: u64,
    /// The transports' own figures, each in its transport's form and keys.
    #[serde(flatten)]
    pub transport: TransportFiguresDoc,
    /// A UDP sender: the wait from its last send to the peer's confirmation that it had
    /// everything (up to the receiver's quiet time when datagrams were lost), not in
    /// `duration_ns`; `None` elsewhere.
    pub drain_ns: Option<u64>,
}

impl FiguresDoc {
    fn new(f: &Figures, settings: &Settings, role: Role) -> FiguresDoc {
        let secs = f.duration_ns as f64 / 1e9;
        let samples = settings.transport.samples(&settings.shape());
        let bps = |bytes: u64| {
            if f.duration_ns == 0 {
                0.0
            } else {
                finite(bytes as f64 * 8.0 / secs)
            }
        };
        let lat = |l: &Option<LatencySummary>| l.as_ref().map(LatencyDoc::new);
        FiguresDoc {
            bytes_sent: f.bytes_sent,
            bytes_received: f.bytes_received,
            duration_ns: f.duration_ns,
            seconds: finite(secs),
            sent_bits_per_second: bps(f.bytes_sent),
            received_bits_per_second: bps(f.bytes_received),
            transactions_per_second: f.transactions_per_second(settings, role).map(finite),
            send_latency: lat(&f.send_latency),
            send_latency_per: f.send_latency.map(|_| samples.send),
            recv_latency: lat(&f.recv_latency),
            recv_latency_per: f.recv_latency.map(|_| samples.recv),
            submit_latency: lat(&f.submit_latency),
            retries: f.retries,
            transport: f.transport.doc(),
            drain_ns: f.drain_ns,
        }
    }
}

/// CPU time of the process (`getrusage`), exact microseconds and seconds; context
/// switches and page faults during the same span; the process's peak resident memory
/// since it started. The counts are `null` where the end did not say (an iperf3 peer).
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "cpu")]
#[schemars(deny_unknown_fields)]
pub struct CpuDoc {
    pub user_us: u64,
    pub system_us: u64,
    #[schemars(range(min = 0.0))]
    pub user_seconds: f64,
    #[schemars(range(min = 0.0))]
    pub system_seconds: f64,
    pub voluntary_context_switches: Option<u64>,
    pub involuntary_context_switches: Option<u64>,
    /// Peak resident memory of the process since it started.
    pub max_rss_bytes: Option<u64>,
    pub minor_page_faults: Option<u64>,
    pub major_page_faults: Option<u64>,
}

impl CpuDoc {
    fn new(c: &CpuUsage) -> CpuDoc {
        let n = c.counts;
        CpuDoc {
            user_us: c.user_us,
            system_us: c.system_us,
            user_seconds: c.user_secs(),
            system_seconds: c.system_secs(),
            voluntary_context_switches: n.map(|n| n.voluntary_switches),
            involuntary_context_switches: n.map(|n| n.involuntary_switches),
            max_rss_bytes: n.map(|n| n.max_rss_kib.saturating_mul(1024)),
            minor_page_faults: n.map(|n| n.minor_faults),
            major_page_faults: n.map(|n| n.major_faults),
        }
    }
}

/// One stream of one side.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "stream")]
#[schemars(deny_unknown_fields)]
pub struct StreamDoc {
    pub index: u32,
    pub local: String,
    pub peer: String,
    /// What this end's sockets ended up with, each transport's under its own keys.
    #[serde(flatten)]
    pub in_force: TransportInForce,
    pub figures: FiguresDoc,
}

/// One stream's share of an interval.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "stream_interval")]
#[schemars(deny_unknown_fields)]
pub struct StreamIntervalDoc {
    pub index: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub figures: FiguresDoc,
}

impl StreamIntervalDoc {
    fn new(s: &StreamInterval, settings: &Settings, role: Role) -> StreamIntervalDoc {
        StreamIntervalDoc {
            index: s.index,
            start_ns: s.start_ns,
            end_ns: s.end_ns,
            figures: FiguresDoc::new(&s.figures, settings, role),
        }
    }
}

/// One side's figures for one reporting interval (`-i`); times since that side's
/// start.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "interval")]
#[schemars(deny_unknown_fields)]
pub struct IntervalDoc {
    pub index: u32,
    /// Since the side's start.
    pub start_ns: u64,
    pub end_ns: u64,
    #[schemars(range(min = 0.0))]
    pub start_seconds: f64,
    #[schemars(range(min = 0.0))]
    pub end_seconds: f64,
    /// Began inside the warm-up (`--omit`): not part of the totals.
    pub omitted: bool,
    /// All streams; with `--bidir` the ones carrying the client's data.
    pub total: FiguresDoc,
    /// `--bidir` only: the streams that carried the server's data, together (`total`
    /// then covers the client's data streams).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "FiguresDoc")]
    pub reverse_total: Option<FiguresDoc>,
    pub streams: Vec<StreamIntervalDoc>,
    /// CPU time of the process from the side's start to the end of the interval.
    pub cpu: Option<CpuDoc>,
}

impl IntervalDoc {
    /// The document of one interval of `role`'s side.
    pub fn new(r: &IntervalResult, settings: &Settings, role: Role) -> IntervalDoc {
        IntervalDoc {
            index: r.index,
            start_ns: r.start_ns,
            end_ns: r.end_ns,
            start_seconds: r.start_ns as f64 / 1e9,
            end_seconds: r.end_ns as f64 / 1e9,
            omitted: r.omitted,
            total: FiguresDoc::new(&r.total, settings, role),
            reverse_total: (r.reverse_total.as_ref()).map(|f| FiguresDoc::new(f, settings, role)),
            streams: r
                .streams
                .iter()
                .map(|s| StreamIntervalDoc::new(s, settings, role))
                .collect(),
            cpu: r.cpu.as_ref().map(CpuDoc::new),
        }
    }
}

/// Everything one side measured.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "side")]
#[schemars(deny_unknown_fields)]
pub struct SideDoc {
    pub role: Role,
    pub system: Option<SystemFacts>,
    pub cpu: Option<CpuDoc>,
    /// All streams; with `--bidir` the ones carrying the client's data.
    pub total: FiguresDoc,
    /// `--bidir` only: the streams that carried the server's data, together (`total`
    /// then covers the client's data streams).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "FiguresDoc")]
    pub reverse_total: Option<FiguresDoc>,
    pub streams: Vec<StreamDoc>,
    pub intervals: Vec<IntervalDoc>,
}

impl SideDoc {
    fn new(r: &SideResult, settings: &Settings) -> SideDoc {
        SideDoc {
            role: r.role,
            system: r.system.clone(),
            cpu: r.cpu.as_ref().map(CpuDoc::new),
            total: FiguresDoc::new(&r.total, settings, r.role),
            reverse_total: (r.reverse_total.as_ref()).map(|f| FiguresDoc::new(f, settings, r.role)),
            streams: r
                .streams
                .iter()
                .map(|s| StreamDoc {
                    index: s.index,
                    local: s.local.clone(),
                    peer: s.peer.clone(),
                    in_force: s.in_force.clone(),
                    figures: FiguresDoc::new(&s.figures, settings, r.role),
                })
                .collect(),
            intervals: r
                .intervals
                .iter()
                .map(|i| IntervalDoc::new(i, settings, r.role))
                .collect(),
        }
    }
}

/// What the user labelled a document with, as iperf3's `-T` and `--extra-data`; each
/// key is present only when given.
#[derive(Clone, Debug, Default, Serialize, schemars::JsonSchema)]
pub struct DocLabels {
    /// `-T`/`--title`, present only when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub title: Option<String>,
    /// `--extra-data`, present only when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub extra_data: Option<String>,
}

/// The `--json` document of one run.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "run")]
#[schemars(deny_unknown_fields)]
pub struct RunDoc {
    #[schemars(extend("const" = SCHEMA_VERSION))]
    pub schema_version: u32,
    pub fperf_version: &'static str,
    #[serde(flatten)]
    pub labels: DocLabels,
    pub start: StartTime,
    /// The settings both ends ran with.
    pub settings: Settings,
    /// Cut short by Ctrl-C: the figures cover what was done until then.
    pub interrupted: bool,
    pub client: SideDoc,
    pub server: SideDoc,
}

impl RunDoc {
    /// The document of a finished run.
    pub fn new(settings: &Settings, start: StartTime, outcome: &ClientOutcome) -> RunDoc {
        RunDoc {
            schema_version: SCHEMA_VERSION,
            fperf_version: crate::VERSION,
            labels: DocLabels::default(),
            start,
            settings: settings.clone(),
            interrupted: outcome.interrupted,
            client: SideDoc::new(&outcome.client, settings),
            server: SideDoc::new(&outcome.server, settings),
        }
    }
}

/// One line of `fperf -s --json`: a test the server ran, as the server saw it.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "server_test")]
#[schemars(deny_unknown_fields)]
pub struct ServerTestDoc {
    #[schemars(extend("const" = SCHEMA_VERSION))]
    pub schema_version: u32,
    pub fperf_version: &'static str,
    /// When the test ended.
    pub end: StartTime,
    /// The client's address.
    pub client: String,
    /// The settings both ends ran with.
    pub settings: Settings,
    pub server: SideDoc,
}

impl ServerTestDoc {
    /// The document of a test from `client` that ended now.
    pub fn new(settings: &Settings, client: String, result: &SideResult) -> ServerTestDoc {
        ServerTestDoc {
            schema_version: SCHEMA_VERSION,
            fperf_version: crate::VERSION,
            end: StartTime::now(),
            client,
            settings: settings.clone(),
            server: SideDoc::new(result, settings),
        }
    }
}

/// One line of `fperf -s --json` for a test a mesh coordinator asked this server to run
/// towards another server: the test as this end, its client, saw it.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "server_mesh_test")]
#[schemars(deny_unknown_fields)]
pub struct ServerMeshTestDoc {
    #[schemars(extend("const" = SCHEMA_VERSION))]
    pub schema_version: u32,
    pub fperf_version: &'static str,
    /// When the test ended.
    pub end: StartTime,
    pub mesh: MeshTestDoc,
    /// The settings both ends ran with.
    pub settings: Settings,
    /// This server's figures, as the test's client.
    pub as_client: SideDoc,
}

/// Who asked for a mesh test, and towards which server it ran.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "mesh_test")]
#[schemars(deny_unknown_fields)]
pub struct MeshTestDoc {
    pub coordinator: String,
    pub towards: String,
}

impl ServerMeshTestDoc {
    /// The document of a test `coordinator` asked for towards `towards`, ended now.
    pub fn new(
        settings: &Settings,
        coordinator: String,
        towards: String,
        result: &SideResult,
    ) -> ServerMeshTestDoc {
        ServerMeshTestDoc {
            schema_version: SCHEMA_VERSION,
            fperf_version: crate::VERSION,
            end: StartTime::now(),
            mesh: MeshTestDoc {
                coordinator,
                towards,
            },
            settings: settings.clone(),
            as_client: SideDoc::new(result, settings),
        }
    }
}

/// One value of a sweep.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "sweep_record")]
#[schemars(deny_unknown_fields)]
#[schemars(transform = one_run_or_tests)]
pub struct SweepRecord {
    pub value: u64,
    /// The run of the value (without `--tests`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "RunDoc")]
    pub result: Option<RunDoc>,
    /// With `--tests`: each test's run of the value, by the test's name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("propertyNames" = sweep_tests_schema(), "minProperties" = 1))]
    pub tests: BTreeMap<&'static str, RunDoc>,
}

/// What a sweep varied.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "sweep_spec")]
#[schemars(deny_unknown_fields)]
pub struct SweepSpecDoc {
    /// The option the sweep varied.
    #[schemars(extend("enum" = SweepParam::ALL.map(SweepParam::name)))]
    pub parameter: &'static str,
    #[schemars(length(min = 1))]
    pub values: Vec<u64>,
    /// `--tests`, in the order given.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1), extend("items" = sweep_tests_schema()))]
    pub tests: Vec<&'static str>,
}

/// The names `--tests` takes.
fn sweep_tests_schema() -> serde_json::Value {
    serde_json::json!({ "enum": SweepTest::ALL.map(SweepTest::name) })
}

/// A sweep record has the value's run, or with `--tests` each test's.
fn one_run_or_tests(schema: &mut schemars::Schema) {
    schema.insert(
        "oneOf".into(),
        serde_json::json!([{ "required": ["result"] }, { "required": ["tests"] }]),
    );
}

/// The `--json` document of a sweep: one record per value.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "sweep")]
#[schemars(deny_unknown_fields)]
pub struct SweepDoc {
    #[schemars(extend("const" = SCHEMA_VERSION))]
    pub schema_version: u32,
    pub fperf_version: &'static str,
    #[serde(flatten)]
    pub labels: DocLabels,
    pub sweep: SweepSpecDoc,
    pub records: Vec<SweepRecord>,
}

/// A stream as connected, for the `start` event.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "stream_info")]
#[schemars(deny_unknown_fields)]
pub struct StreamInfoDoc {
    pub index: u32,
    pub local: String,
    pub peer: String,
    /// TCP: the congestion control algorithm of the client's sockets, as the kernel
    /// reports it (`TCP_CONGESTION`); `None` for UDP and RDMA.
    pub congestion: Option<String>,
}

/// One line of `--json-stream`.
// Built a few times per run and serialized at once: boxing the large variant buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "event", deny_unknown_fields)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum Event {
    /// The data streams are connected.
    Start {
        #[schemars(extend("const" = SCHEMA_VERSION))]
        schema_version: u32,
        fperf_version: &'static str,
        start: StartTime,
        settings: Settings,
        client_system: SystemFacts,
        streams: Vec<StreamInfoDoc>,
    },
    /// An interval of one side ended.
    Interval {
        side: Role,
        interval: Box<IntervalDoc>,
    },
    /// The run ended: its whole document.
    End { result: Box<RunDoc> },
}

impl Event {
    /// The `start` event.
    pub fn start(settings: &Settings, start: StartTime, streams: &[StreamInfo]) -> Event {
        Event::Start {
            schema_version: SCHEMA_VERSION,
            fperf_version: crate::VERSION,
            start,
            settings: settings.clone(),
            client_system: SystemFacts::collect(),
            streams: streams
                .iter()
                .map(|s| StreamInfoDoc {
                    index: s.index,
                    local: s.local.clone(),
                    peer: s.peer.clone(),
                    congestion: s.in_force.text("congestion"),
                })
                .collect(),
        }
    }
}

// The documents of a `--under-load` run.

/// How a `--under-load` run's RPM figures are computed, as the outputs say it.
pub fn rpm_method() -> String {
    format!(
        "{RPM_DRAFT}: 60000 / the single-sided 95% trimmed mean of the phase's probe round \
         trips in ms (with one kind of probe every term of the draft's formula is this mean)"
    )
}

/// One phase in the `--json` document.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "under_load_phase", deny_unknown_fields)]
pub struct PhaseDoc {
    #[schemars(extend("enum" = ["idle", "download", "upload", "bidir"]))]
    pub name: &'static str,
    /// When the phase's load ran (the whole phase when idle), in ns since the run began:
    /// the probes sent within it are the phase's.
    pub start_ns: u64,
    pub end_ns: u64,
    /// The round trips of the phase's probes that came back; `None` if none did.
    pub rtt: Option<LatencyDoc>,
    pub probes_sent: u64,
    pub probes_lost: u64,
    /// The share of the phase's probes lost, 0 to 1.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub probe_loss: f64,
    /// The phase's median round trip less the idle phase's, in ns; `None` without an
    /// idle phase.
    pub added_delay_ns: Option<i64>,
    /// Throughput client → server, as the server received it.
    pub up_bits_per_second: f64,
    /// Throughput server → client, as the client received it.
    pub down_bits_per_second: f64,
    /// Round trips per minute from the same probes (see `rpm_method`).
    pub rpm: Option<f64>,
    /// The round trip TCP measured on the loaded connections (TCP_INFO's smoothed RTT
    /// of the sending ends, sampled every interval); `None` when idle.
    pub loaded_connection_rtt: Option<LatencyDoc>,
    /// Median one-way delays, present only where the clocks are known to agree well
    /// enough (see `clock_offset`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "OneWayDoc")]
    pub one_way: Option<OneWayDoc>,
}

/// Median one-way delays of a phase's probes.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "under_load_one_way", deny_unknown_fields)]
pub struct OneWayDoc {
    pub up_ns: u64,
    pub down_ns: u64,
}

/// The two clocks compared.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "under_load_clocks", deny_unknown_fields)]
pub struct ClocksDoc {
    /// The server's clock less the client's, in ns (0 on one host).
    pub offset_ns: i64,
    /// How far off `offset_ns` may be: half the fastest probe's time on the network.
    pub uncertainty_ns: u64,
    /// Both ends are this host: one clock.
    pub same_host: bool,
}

impl ClocksDoc {
    fn new(c: &ClockOffset) -> ClocksDoc {
        ClocksDoc {
            offset_ns: c.offset_ns,
            uncertainty_ns: c.bound_ns,
            same_host: c.same_host,
        }
    }
}

/// What a `--under-load` run measured, in its `--json` document.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "under_load", deny_unknown_fields)]
pub struct UnderLoadDoc {
    /// The server as given, and the addresses the probes went between.
    pub server: String,
    pub client_address: String,
    pub server_address: String,
    pub probe_interval_ns: u64,
    /// TCP flows per loaded direction (a bidir phase runs as many each way).
    pub load_flows: u32,
    /// The load's congestion control on the client's sockets.
    pub congestion: Option<String>,
    /// How `rpm` is computed, naming the draft's revision.
    pub rpm_method: String,
    /// The clocks compared; `None` when no probe came back.
    pub clock_offset: Option<ClocksDoc>,
    pub phases: Vec<PhaseDoc>,
}

impl UnderLoadDoc {
    pub fn new(run: &UnderLoadRun) -> UnderLoadDoc {
        UnderLoadDoc {
            server: run.server.clone(),
            client_address: run.client_addr.to_string(),
            server_address: run.server_addr.to_string(),
            probe_interval_ns: nanos(run.probe_interval),
            load_flows: run.flows,
            congestion: run.congestion.clone(),
            rpm_method: rpm_method(),
            clock_offset: run.clocks.as_ref().map(ClocksDoc::new),
            phases: run.phases.iter().map(phase_doc).collect(),
        }
    }
}

fn phase_doc(p: &PhaseFigures) -> PhaseDoc {
    PhaseDoc {
        name: p.kind.name(),
        start_ns: nanos(p.window.0),
        end_ns: nanos(p.window.1),
        rtt: p.rtt.as_ref().map(LatencyDoc::new),
        probes_sent: p.sent,
        probes_lost: p.lost,
        probe_loss: p.loss(),
        added_delay_ns: p.added_delay_ns,
        up_bits_per_second: p.up_bps,
        down_bits_per_second: p.down_bps,
        rpm: p.rpm,
        loaded_connection_rtt: p.loaded_rtt.as_ref().map(LatencyDoc::new),
        one_way: p.one_way.map(|w| OneWayDoc {
            up_ns: w.up_ns,
            down_ns: w.down_ns,
        }),
    }
}

/// The `--json` document of a `--under-load` run.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "under_load_run", deny_unknown_fields)]
pub struct UnderLoadRunDoc {
    #[schemars(extend("const" = SCHEMA_VERSION))]
    pub schema_version: u32,
    pub fperf_version: &'static str,
    #[serde(flatten)]
    pub labels: DocLabels,
    pub start: StartTime,
    /// Cut short by Ctrl-C: the phases run until then.
    pub interrupted: bool,
    pub under_load: UnderLoadDoc,
}

impl UnderLoadRunDoc {
    pub fn new(run: &UnderLoadRun, start: StartTime, labels: DocLabels) -> UnderLoadRunDoc {
        UnderLoadRunDoc {
            schema_version: SCHEMA_VERSION,
            fperf_version: crate::VERSION,
            labels,
            start,
            interrupted: run.interrupted,
            under_load: UnderLoadDoc::new(run),
        }
    }
}

/// One line of `--json-stream` for a `--under-load` run: every probe and throughput
/// sample in time order, then the document.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[schemars(rename = "under_load_event", deny_unknown_fields)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum UnderLoadEvent {
    /// One latency probe.
    Probe {
        /// The phase it was sent in; `None` between phases.
        #[schemars(extend("enum" = ["idle", "download", "upload", "bidir", null]))]
        phase: Option<&'static str>,
        seq: u64,
        /// When it was sent, in ns since the run began.
        sent_ns: u64,
        /// Its round trip; `None`: lost.
        rtt_ns: Option<u64>,
    },
    /// The load's throughput over one interval, as the client counted it.
    Throughput {
        #[schemars(extend("enum" = ["download", "upload", "bidir"]))]
        phase: &'static str,
        /// The interval's end, in ns since the run began.
        at_ns: u64,
        up_bits_per_second: f64,
        down_bits_per_second: f64,
    },
    /// The run ended: its whole document.
    End { result: Box<UnderLoadRunDoc> },
}

/// The JSON Schema (draft 2020-12) of the documents above, as committed in
/// `docs/fperf-result.schema.json`: its root is a run or sweep document (`--json`);
/// `$defs/event` is one line of `--json-stream`, and `$defs/server_test` and
/// `$defs/server_mesh_test` are the lines of `fperf -s --json`.
pub fn result_schema() -> serde_json::Value {
    let mut generator = SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator();
    let run = generator.subschema_for::<RunDoc>();
    let sweep = generator.subschema_for::<SweepDoc>();
    let under_load = generator.subschema_for::<UnderLoadRunDoc>();
    // The documents printed one per line are only referred to from `$defs`.
    generator.subschema_for::<Event>();
    generator.subschema_for::<UnderLoadEvent>();
    generator.subschema_for::<ServerTestDoc>();
    generator.subschema_for::<ServerMeshTestDoc>();
    let defs = generator.take_definitions(true);
    let mut schema = serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://fperf.invalid/fperf-result.schema.json",
        "title": "fperf --json output",
        "description": "A run document, a sweep document (with --sweep) or a latency under \
            load document (with --under-load). Lines of --json-stream follow $defs/event \
            ($defs/under_load_event with --under-load), lines of fperf -s --json \
            $defs/server_test or $defs/server_mesh_test. See docs/json.md.",
        "oneOf": [run, sweep, under_load],
        "$defs": defs,
    });
    as_prose(&mut schema);
    schema
}

/// Each description in `schema` as one line of prose: the doc comments it comes from
/// are wrapped, and say `None` where a document has `null`.
fn as_prose(schema: &mut serde_json::Value) {
    match schema {
        serde_json::Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                match value {
                    serde_json::Value::String(text) if key == "description" => {
                        *text = text.replace('\n', " ").replace("`None`", "`null`");
                    }
                    _ => as_prose(value),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(as_prose),
        _ => {}
    }
}

/// `value` as one line of JSON.
pub fn to_line<T: Serialize>(value: &T) -> String {
    // Serializing these typed documents cannot fail: every map key is a string.
    serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// `value` as an indented JSON document.
pub fn to_document<T: Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Reply, Workload};

    #[test]
    fn rfc3339_matches_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(http_date(1_700_000_000), "Tue, 14 Nov 2023 22:13:20 GMT");
    }

    /// The schema speaks to users: its definitions are named as the documents' keys
    /// are, and its descriptions are single lines without links into the code.
    #[test]
    fn the_schema_names_no_code() {
        fn descriptions(v: &serde_json::Value, out: &mut Vec<String>) {
            match v {
                serde_json::Value::Object(map) => {
                    for (key, value) in map {
                        match value {
                            serde_json::Value::String(s) if key == "description" => {
                                out.push(s.clone())
                            }
                            _ => descriptions(value, out),
                        }
                    }
                }
                serde_json::Value::Array(items) => items.iter().for_each(|v| descriptions(v, out)),
                _ => {}
            }
        }
        let schema = result_schema();
        let defs = schema["$defs"].as_object().expect("$defs");
        for name in [
            "run",
            "sweep",
            "event",
            "server_test",
            "figures",
            "settings",
        ] {
            assert!(defs.contains_key(name), "no $defs/{name}");
        }
        for name in defs.keys() {
            assert!(
                name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "$defs/{name}"
            );
        }
        let mut texts = Vec::new();
        descriptions(&schema, &mut texts);
        assert!(texts.len() > 50, "{}", texts.len());
        for text in texts {
            assert!(
                !text.contains('\n') && !text.contains("[`") && !text.contains("`None`"),
                "{text}"
            );
        }
    }

    #[test]
    fn rates_over_zero_time_are_zero_not_nan() {
        let f = Figures {
            bytes_sent: 100,
            bytes_received: 0,
            duration_ns: 0,
            send_latency: None,
            recv_latency: None,
            submit_latency: None,
            retries: 0,
            transport: Default::default(),
            drain_ns: None,
        };
        let rr = Settings {
            workload: Workload::RoundTrip(Reply::Ack),
            ..Settings::default()
        };
        let d = FiguresDoc::new(&f, &rr, Role::Client);
        assert_eq!(d.sent_bits_per_second, 0.0);
        assert_eq!(d.transactions_per_second, Some(0.0));
        let text = to_line(&d);
        assert!(text.contains("\"sent_bits_per_second\":0.0"), "{text}");
        let f = Figures {
            duration_ns: 2_000_000_000,
            ..f
        };
        let bulk = Settings::default();
        let d = FiguresDoc::new(&f, &bulk, Role::Client);
        assert_eq!(d.sent_bits_per_second, 400.0);
        assert_eq!(d.transactions_per_second, None);
        assert!(to_line(&d).contains("\"transactions_per_second\":null"));
    }
}
