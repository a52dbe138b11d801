//! `fperf exporter`: a Prometheus exporter that runs an fperf test for each scrape of
//! `/probe?target=HOST[:PORT]&...`, as Prometheus's blackbox exporter runs its probes,
//! and answers with the test's figures ([`crate::output::openmetrics`]).
//!
//! Whatever a scrape asks for is bounded by the exporter's own limits: the longest test,
//! the probes at once (more are answered 429 at once, never queued) and the targets it
//! may test. A probe never outlasts Prometheus's scrape time-out. What any connection
//! may cost is bounded by the HTTP front end (the `http` module).

mod guard;
mod http;
pub mod probe;

use crate::auth::AuthKey;
use crate::output::openmetrics::{self, CONTENT_TYPE};
use crate::peer_text::printable;
use crate::pending::Crowded;
use anyhow::{Context, Result};
use guard::Guard;
use http::{Handler, HttpListener, Request, Response};
use probe::{ProbeError, ProbeRequest};
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};
use std::borrow::Cow;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The address the exporter listens on unless told otherwise: loopback keeps it to
/// this host.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9579));
/// The longest test a probe may ask for unless told otherwise.
pub const DEFAULT_MAX_DURATION: Duration = Duration::from_secs(10);
/// Probes running at once unless told otherwise.
pub const DEFAULT_MAX_PROBES: usize = 4;
/// Longest scrape time-out taken from Prometheus's header (its own limit is the scrape
/// interval; a larger value is someone else's).
const MAX_SCRAPE_TIMEOUT: Duration = Duration::from_secs(3600);

/// Which targets probes may test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Allow {
    Any,
    /// Hosts as the query names them, each on any port (`None`) or one.
    Only(Vec<(String, Option<u16>)>),
}

/// What the exporter listens on and allows.
#[derive(Clone, Debug)]
pub struct ExporterConfig {
    pub listen: SocketAddr,
    pub max_duration: Duration,
    pub max_probes: usize,
    pub allow: Allow,
    /// The key fperf servers ask for, if they do.
    pub auth: Option<AuthKey>,
    /// Names the exporter is reached by (`--host-name`), besides its address: requests
    /// whose `Host` or `Origin` names something else are refused.
    pub host_names: Vec<String>,
}

impl Default for ExporterConfig {
    fn default() -> Self {
        ExporterConfig {
            listen: DEFAULT_LISTEN,
            max_duration: DEFAULT_MAX_DURATION,
            max_probes: DEFAULT_MAX_PROBES,
            allow: Allow::Any,
            auth: None,
            host_names: Vec::new(),
        }
    }
}

/// What the exporter tells its caller.
pub enum ExporterEvent<'a> {
    /// A probe failed, and why; `target` is the one its query named, if any.
    ProbeFailed {
        target: Option<&'a str>,
        reason: &'a ProbeError,
    },
    /// A probe was refused: `max` were running.
    ProbeRefused { max: usize },
    /// A connection was turned away, as `crowded` says, before its request was read.
    ConnectionRefused { peer: SocketAddr, crowded: Crowded },
}

/// Where the exporter's events go; called from its accept loop and its requests' threads.
pub type Log = Arc<dyn Fn(ExporterEvent) + Send + Sync>;

/// A bound exporter.
pub struct Exporter {
    http: HttpListener,
    shared: Arc<Shared>,
}

/// What every request's thread reads.
struct Shared {
    config: ExporterConfig,
    /// Whom requests may be addressed to, and from.
    guard: Guard,
    counters: Counters,
    running: AtomicUsize,
}

impl Exporter {
    /// Listens on `config.listen`.
    pub fn bind(config: ExporterConfig) -> Result<Exporter> {
        let http = HttpListener::bind(config.listen)
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let listening = http.local_addr().unwrap_or(config.listen);
        Ok(Exporter {
            http,
            shared: Arc::new(Shared {
                guard: Guard::new(listening, &config.host_names),
                config,
                counters: Counters::new()?,
                running: AtomicUsize::new(0),
            }),
        })
    }

    /// The address it listens on (with the port the kernel chose for port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.http.local_addr().ok()
    }

    /// Answers requests until `stop` is set, each on a thread of its own; at most
    /// `max_probes` of them run a probe at once.
    pub fn run(&self, stop: &AtomicBool, log: Log) {
        let (shared, answer_log) = (self.shared.clone(), log.clone());
        let handler: Handler = Arc::new(move |request| answer(&shared, request, &answer_log));
        let counters = &self.shared.counters;
        self.http.run(stop, &handler, &|peer, crowded| {
            counters.connections_refused.inc();
            log(ExporterEvent::ConnectionRefused { peer, crowded });
        });
    }
}

/// The answer to one request.
fn answer(shared: &Arc<Shared>, request: Request, log: &Log) -> Response {
    if let Err(refusal) = shared.guard.check(
        request.header("Host"),
        request.header("Origin"),
        request.header("Sec-Fetch-Site"),
    ) {
        return Response::text(403, format!("{refusal}\n"));
    }
    if request.method != "GET" {
        return Response::text(405, "only GET is answered\n");
    }
    let (path, query) = request
        .target
        .split_once('?')
        .unwrap_or((&request.target, ""));
    match path {
        "/probe" => probe(shared, &request, query, log),
        "/metrics" => match openmetrics::encode(&shared.counters.registry) {
            Ok(text) => metrics(text),
            Err(e) => Response::text(500, format!("{e:#}\n")),
        },
        "/" => Response::text(200, usage()),
        _ => Response::text(404, "not found; see /\n"),
    }
}

/// What the exporter makes of a request head before it runs anything: the probe it
/// would run, or the status and text of the answer it would give at once (none while
/// the head is not whole). The exporter's whole reading of a request, without a socket.
pub fn read_request(
    head: &[u8],
    config: &ExporterConfig,
) -> Option<Result<ProbeRequest, (u16, String)>> {
    let request = match http::parse_head(head) {
        Ok(request) => request?,
        Err(unread) => {
            let answer = unread.answer()?;
            return Some(Err((
                answer.status,
                String::from_utf8_lossy(&answer.body).into(),
            )));
        }
    };
    let guard = Guard::new(config.listen, &config.host_names);
    let headers = ["Host", "Origin", "Sec-Fetch-Site"].map(|name| request.header(name));
    if let Err(refusal) = guard.check(headers[0], headers[1], headers[2]) {
        return Some(Err((403, refusal.to_string())));
    }
    if request.method != "GET" {
        return Some(Err((405, "only GET is answered".into())));
    }
    let (path, query) = request
        .target
        .split_once('?')
        .unwrap_or((&request.target, ""));
    if path != "/probe" {
        return Some(Err((404, "not a probe".into())));
    }
    let timeout = scrape_timeout(&request);
    Some(
        ProbeRequest::parse(query, config)
            .and_then(|probe| probe.timeout(timeout).map(|_| probe))
            .map_err(|reason| (200, failure_comment(&reason, config))),
    )
}

/// Runs a probe, or refuses it when `max_probes` run.
fn probe(shared: &Arc<Shared>, request: &Request, query: &str, log: &Log) -> Response {
    let (config, counters) = (&shared.config, &shared.counters);
    let max = config.max_probes;
    let Some(place) = Place::take(shared) else {
        counters.refused.inc();
        log(ExporterEvent::ProbeRefused { max });
        return Response::text(429, format!("too many probes at once: {max} are running\n"));
    };
    let started = Instant::now();
    let registry = Registry::new();
    let parsed = ProbeRequest::parse(query, config);
    let mut waited = None;
    let result = parsed.clone().and_then(|probe| {
        let timeout = probe.timeout(scrape_timeout(request))?;
        waited = Some(timeout);
        probe::run(&probe, config, timeout, &registry, place)
    });
    let target = match &parsed {
        Ok(p) => Some(Cow::Borrowed(p.target.as_str())),
        // A query refused as it was read still names the target it asked for, if any.
        Err(_) => form_urlencoded::parse(query.as_bytes())
            .find(|(name, _)| name == "target")
            .map(|(_, target)| target),
    };
    let mut elapsed = started.elapsed();
    let mut text = Vec::new();
    if let Err(reason) = &result {
        log(ExporterEvent::ProbeFailed {
            target: target.as_deref(),
            reason,
        });
        // A comment: Prometheus skips it, a person reading the page sees why.
        text = failure_comment(reason, config).into_bytes();
        if hides_why(reason, config) {
            // Every such failure took the probe's whole time-out, and says so alike.
            elapsed = waited.unwrap_or(elapsed);
        }
    }
    counters.record(result.is_ok(), elapsed);
    match probe_outcome(&registry, result.is_ok(), elapsed) {
        Ok(page) => {
            text.extend(page);
            metrics(text)
        }
        Err(e) => Response::text(500, format!("{e:#}\n")),
    }
}

/// Whether the page keeps why a probe's test failed to itself: unless `--allow` names
/// the targets, a reason would tell a closed port from a listener that is no fperf
/// server, and the exporter would scan ports for anyone who can reach it.
fn hides_why(reason: &ProbeError, config: &ExporterConfig) -> bool {
    matches!(reason, ProbeError::Test(_) | ProbeError::TimedOut(_)) && !config.allow.names_targets()
}

/// The page's comment on a failed probe, one line.
fn failure_comment(reason: &ProbeError, config: &ExporterConfig) -> String {
    if hides_why(reason, config) {
        return "# probe failed: the target did not run an fperf test to its end (the \
                exporter's log says why; to say it here, name the targets with --allow)\n"
            .to_owned();
    }
    format!("# probe failed: {}\n", printable(&reason.to_string()))
}

/// A page of metrics.
fn metrics(body: Vec<u8>) -> Response {
    Response {
        status: 200,
        content_type: CONTENT_TYPE,
        body,
    }
}

/// The probe's own gauges added to its figures, the whole as the scrape's answer.
fn probe_outcome(registry: &Registry, success: bool, elapsed: Duration) -> Result<Vec<u8>> {
    openmetrics::gauge(
        registry,
        "fperf_probe_success",
        "Whether the probe's test ran and both ends reported (1) or not (0).",
    )?
    .set(if success { 1.0 } else { 0.0 });
    openmetrics::gauge(
        registry,
        "fperf_probe_duration_seconds",
        "How long the probe took, set-up and results included.",
    )?
    .set(elapsed.as_secs_f64());
    openmetrics::encode(registry)
}

/// Prometheus's `X-Prometheus-Scrape-Timeout-Seconds`, when present and sensible.
fn scrape_timeout(request: &Request) -> Option<Duration> {
    let secs: f64 = request
        .header("X-Prometheus-Scrape-Timeout-Seconds")?
        .trim()
        .parse()
        .ok()?;
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|t| !t.is_zero())
        .map(|t| t.min(MAX_SCRAPE_TIMEOUT))
}

/// The page at `/`.
fn usage() -> String {
    format!(
        "fperf exporter\n\n\
         GET /probe?target=HOST[:PORT]   runs an fperf test against an fperf server\n\
         \x20   protocol=tcp|udp  duration=SECS  workload=bulk|rr|echo|crr  streams=N\n\
         \x20   size=BYTES  bitrate=RATE (e.g. 500M, 0 none)  reverse=1  percentiles=LIST\n\
         \x20   window=BYTES  congestion=ALGO  mss=BYTES  fq_rate=RATE (e.g. 1G, 0 none)\n\
         \x20   family=4|6\n\
         GET /metrics                    the exporter's own counters\n\n\
         fperf {}\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// A probe's place among those running at once; given back when dropped.
pub struct Place {
    shared: Arc<Shared>,
}

impl Place {
    /// A place, unless `max_probes` are taken.
    fn take(shared: &Arc<Shared>) -> Option<Place> {
        let max = shared.config.max_probes;
        shared
            .running
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()?;
        shared.counters.running.inc();
        Some(Place {
            shared: shared.clone(),
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.shared.running.fetch_sub(1, Ordering::AcqRel);
        self.shared.counters.running.dec();
    }
}

/// The exporter's own metrics (`/metrics`).
struct Counters {
    registry: Registry,
    probes: IntCounterVec,
    refused: IntCounter,
    connections_refused: IntCounter,
    running: IntGauge,
    probe_seconds: prometheus::Counter,
}

impl Counters {
    fn new() -> Result<Counters> {
        let registry = Registry::new();
        let probes = IntCounterVec::new(
            Opts::new(
                "fperf_exporter_probes_total",
                "Probes answered, by whether their test succeeded.",
            ),
            &["result"],
        )?;
        let refused = IntCounter::new(
            "fperf_exporter_probes_refused_total",
            "Probes refused because the most allowed at once were running.",
        )?;
        let connections_refused = IntCounter::new(
            "fperf_exporter_connections_refused_total",
            "Connections turned away before their request was read: too many were still sending one.",
        )?;
        let running = IntGauge::new(
            "fperf_exporter_probes_running",
            "Probes whose test is running now.",
        )?;
        let probe_seconds = prometheus::Counter::new(
            "fperf_exporter_probe_seconds_total",
            "Time spent answering probes, all together.",
        )?;
        let build = prometheus::GaugeVec::new(
            Opts::new(
                "fperf_exporter_build_info",
                "The exporter's version, as a label.",
            ),
            &["version"],
        )?;
        build
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1.0);
        registry.register(Box::new(probes.clone()))?;
        registry.register(Box::new(refused.clone()))?;
        registry.register(Box::new(connections_refused.clone()))?;
        registry.register(Box::new(running.clone()))?;
        registry.register(Box::new(probe_seconds.clone()))?;
        registry.register(Box::new(build))?;
        // Both results show from the start, as counters at 0.
        probes.with_label_values(&["success"]);
        probes.with_label_values(&["failure"]);
        Ok(Counters {
            registry,
            probes,
            refused,
            connections_refused,
            running,
            probe_seconds,
        })
    }

    fn record(&self, success: bool, elapsed: Duration) {
        let result = if success { "success" } else { "failure" };
        self.probes.with_label_values(&[result]).inc();
        self.probe_seconds.inc_by(elapsed.as_secs_f64());
    }
}
