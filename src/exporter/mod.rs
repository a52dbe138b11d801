//! `fperf exporter`: a Prometheus exporter that runs an fperf test for each scrape of
//! `/probe?target=HOST[:PORT]&...`, as Prometheus's blackbox exporter runs its probes,
//! and answers with the test's figures ([`crate::output::openmetrics`]).
//!
//! Whatever a scrape asks for is bounded by the exporter's own limits: the longest test,
//! the probes at once (more are answered 429 at once, never queued) and the targets it
//! may test. A probe never outlasts Prometheus's scrape time-out.

pub mod probe;

use crate::auth::AuthKey;
use crate::output::openmetrics::{self, CONTENT_TYPE};
use anyhow::{Context, Result};
use probe::{ProbeError, ProbeRequest};
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tiny_http::{Header, Method, Request, Response, Server};

/// The address the exporter listens on unless told otherwise: loopback keeps it to
/// this host.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9579));
/// The longest test a probe may ask for unless told otherwise.
pub const DEFAULT_MAX_DURATION: Duration = Duration::from_secs(10);
/// Probes running at once unless told otherwise.
pub const DEFAULT_MAX_PROBES: usize = 4;
/// How often the accept loop looks at its stop flag.
const STOP_POLL: Duration = Duration::from_millis(200);
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
}

impl Default for ExporterConfig {
    fn default() -> Self {
        ExporterConfig {
            listen: DEFAULT_LISTEN,
            max_duration: DEFAULT_MAX_DURATION,
            max_probes: DEFAULT_MAX_PROBES,
            allow: Allow::Any,
            auth: None,
        }
    }
}

/// What the exporter tells its caller.
pub enum ExporterEvent<'a> {
    /// A probe failed, and why.
    ProbeFailed {
        target: &'a str,
        reason: &'a ProbeError,
    },
    /// A probe was refused: `max` were running.
    ProbeRefused { max: usize },
}

/// Where the exporter's events go; called from the probes' threads.
pub type Log = Arc<dyn Fn(ExporterEvent) + Send + Sync>;

/// A bound exporter.
pub struct Exporter {
    http: Server,
    config: Arc<ExporterConfig>,
    counters: Arc<Counters>,
    running: Arc<AtomicUsize>,
}

impl Exporter {
    /// Listens on `config.listen`.
    pub fn bind(config: ExporterConfig) -> Result<Exporter> {
        let http = Server::http(config.listen)
            .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.listen))?;
        Ok(Exporter {
            http,
            config: Arc::new(config),
            counters: Arc::new(Counters::new()?),
            running: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// The address it listens on (with the port the kernel chose for port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.http.server_addr().to_ip()
    }

    /// Answers requests until `stop` is set. Probes run on threads of their own, at
    /// most `max_probes` at once.
    pub fn run(&self, stop: &AtomicBool, log: Log) -> Result<()> {
        while !stop.load(Ordering::Relaxed) {
            let Some(request) = self.http.recv_timeout(STOP_POLL).context("accepting")? else {
                continue;
            };
            self.answer(request, &log);
        }
        Ok(())
    }

    fn answer(&self, request: Request, log: &Log) {
        let url = request.url().to_owned();
        let (path, query) = url.split_once('?').unwrap_or((&url, ""));
        if *request.method() != Method::Get {
            return respond(
                request,
                405,
                "text/plain",
                b"only GET is answered\n".to_vec(),
            );
        }
        match path {
            "/probe" => self.probe(request, query.to_owned(), log),
            "/metrics" => match openmetrics::encode(&self.counters.registry) {
                Ok(text) => respond(request, 200, CONTENT_TYPE, text),
                Err(e) => respond(request, 500, "text/plain", format!("{e:#}\n").into_bytes()),
            },
            "/" => respond(request, 200, "text/plain", usage().into_bytes()),
            _ => respond(request, 404, "text/plain", b"not found; see /\n".to_vec()),
        }
    }

    /// Starts a probe on a thread of its own, or refuses it when `max_probes` run.
    fn probe(&self, request: Request, query: String, log: &Log) {
        let max = self.config.max_probes;
        let Some(place) = Place::take(&self.running, max, &self.counters) else {
            self.counters.refused.inc();
            log(ExporterEvent::ProbeRefused { max });
            let body = format!("too many probes at once: {max} are running\n");
            return respond(request, 429, "text/plain", body.into_bytes());
        };
        let scrape_timeout = scrape_timeout(&request);
        let (config, counters, probe_log) =
            (self.config.clone(), self.counters.clone(), log.clone());
        let probe = move || {
            let started = Instant::now();
            let registry = Registry::new();
            let parsed = ProbeRequest::parse(&query, &config);
            let result = parsed.clone().and_then(|probe| {
                let timeout = probe.timeout(scrape_timeout)?;
                probe::run(&probe, &config, timeout, &registry, place)
            });
            let target = parsed.as_ref().map_or("", |p| p.target.as_str());
            let mut text = Vec::new();
            if let Err(reason) = &result {
                probe_log(ExporterEvent::ProbeFailed { target, reason });
                // A comment: Prometheus skips it, a person reading the page sees why.
                text = format!("# probe failed: {reason}\n").into_bytes();
            }
            let elapsed = started.elapsed();
            counters.record(result.is_ok(), elapsed);
            match probe_outcome(&registry, result.is_ok(), elapsed) {
                Ok(metrics) => {
                    text.extend(metrics);
                    respond(request, 200, CONTENT_TYPE, text)
                }
                Err(e) => respond(request, 500, "text/plain", format!("{e:#}\n").into_bytes()),
            }
        };
        if let Err(e) = std::thread::Builder::new()
            .name("fperf-scrape".into())
            .spawn(probe)
        {
            // The closure, request and place included, is gone with the failed spawn.
            let reason = ProbeError::Test(format!("cannot start a probe: {e}"));
            log(ExporterEvent::ProbeFailed {
                target: "",
                reason: &reason,
            });
        }
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
    let header = request
        .headers()
        .iter()
        .find(|h| h.field.equiv("X-Prometheus-Scrape-Timeout-Seconds"))?;
    let secs: f64 = header.value.as_str().trim().parse().ok()?;
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|t| !t.is_zero())
        .map(|t| t.min(MAX_SCRAPE_TIMEOUT))
}

/// Sends one answer; a scraper that went away is no one's concern.
fn respond(request: Request, status: u16, content_type: &str, body: Vec<u8>) {
    let mut response = Response::from_data(body).with_status_code(status);
    if let Ok(header) = Header::from_bytes("Content-Type", content_type) {
        response = response.with_header(header);
    }
    let _ = request.respond(response);
}

/// The page at `/`.
fn usage() -> String {
    format!(
        "fperf exporter\n\n\
         GET /probe?target=HOST[:PORT]   runs an fperf test against an fperf server\n\
         \x20   protocol=tcp|udp  duration=SECS  size=BYTES  workload=bulk|rr|echo|crr\n\
         \x20   streams=N  bitrate=RATE (e.g. 500M)  reverse=1\n\
         GET /metrics                    the exporter's own counters\n\n\
         fperf {}\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// A probe's place among those running at once; given back when dropped.
pub struct Place {
    running: Arc<AtomicUsize>,
    counters: Arc<Counters>,
}

impl Place {
    /// A place, unless `max` are taken.
    fn take(running: &Arc<AtomicUsize>, max: usize, counters: &Arc<Counters>) -> Option<Place> {
        running
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()?;
        counters.running.inc();
        Some(Place {
            running: running.clone(),
            counters: counters.clone(),
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.running.fetch_sub(1, Ordering::AcqRel);
        self.counters.running.dec();
    }
}

/// The exporter's own metrics (`/metrics`).
struct Counters {
    registry: Registry,
    probes: IntCounterVec,
    refused: IntCounter,
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
