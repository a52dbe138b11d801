//! One probe: the query that asks for it, checked against the exporter's limits, and the
//! fperf test it runs, cut off at its time-out.

use super::{Allow, ExporterConfig, Place};
use crate::client::{self, ClientConfig};
use crate::family::IpFamily;
use crate::options::{and_list, apply_query, TestOption};
use crate::output::json_document::StartTime;
use crate::output::openmetrics::OpenMetrics;
use crate::output::{Sink, Sinks};
use crate::settings::options::{
    GivenTime, WorkloadFlags, OPTIONS as TEST_OPTIONS, OUTPUT_OPTIONS, TIME_OPTION,
    WORKLOAD_OPTIONS,
};
use crate::settings::{Settings, DEFAULT_PORT};
use crate::transport::settings::{Protocol, TransportSettings};
use crate::transport::sockets::{SocketSettings, OPTIONS as SOCKET_OPTIONS};
use crate::transport::tcp::options::OPTIONS as TCP_OPTIONS;
use crate::transport::tcp::settings::TcpSettings;
use crate::under_load::spec::{UnderLoadSpec, OPTIONS as UNDER_LOAD_OPTIONS};
use crate::workload::{Reply, Workload};
use prometheus::Registry;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use thiserror::Error;

/// How long a probe's test runs when the query does not say.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(1);
/// Time a probe needs beyond its test: connecting, setting up, and the server's results.
const SETUP_ALLOWANCE: Duration = Duration::from_secs(5);
/// The least set-up time a probe is given within a scrape's time-out.
const LEAST_SETUP: Duration = Duration::from_millis(500);
/// Taken off Prometheus's scrape time-out, so that the answer arrives before it gives up.
const SCRAPE_MARGIN: Duration = Duration::from_millis(500);
/// The query parameters a probe takes before the declared ones: the test-wide
/// options', the workload flags', the outputs', the socket options' and TCP's (see
/// [`test_parameters`] and the others).
const FIRST_PARAMETERS: [&str; 4] = ["target", "protocol", "duration", "workload"];
/// The query parameter a probe takes after TCP's.
const LAST_PARAMETER: &str = "family";

/// The test-wide options that a probe's query may set, with their parameters' names.
pub fn test_parameters() -> impl Iterator<Item = (&'static str, &'static TestOption<Settings>)> {
    TEST_OPTIONS
        .iter()
        .filter_map(|option| option.probe.map(|key| (key, option)))
}

/// The workload flags that a probe's query may set, with their parameters' names.
pub fn workload_parameters(
) -> impl Iterator<Item = (&'static str, &'static TestOption<WorkloadFlags>)> {
    WORKLOAD_OPTIONS
        .iter()
        .filter_map(|option| option.probe.map(|key| (key, option)))
}

/// The test's outputs that a probe's query may set, with their parameters' names.
pub fn output_parameters() -> impl Iterator<Item = (&'static str, &'static TestOption<Settings>)> {
    OUTPUT_OPTIONS
        .iter()
        .filter_map(|option| option.probe.map(|key| (key, option)))
}

/// The socket options that a probe's query may set, with their parameters' names.
pub fn socket_parameters(
) -> impl Iterator<Item = (&'static str, &'static TestOption<SocketSettings>)> {
    SOCKET_OPTIONS
        .iter()
        .filter_map(|option| option.probe.map(|key| (key, option)))
}

/// TCP's options that a probe's query may set, with their parameters' names.
pub fn tcp_parameters() -> impl Iterator<Item = (&'static str, &'static TestOption<TcpSettings>)> {
    TCP_OPTIONS
        .iter()
        .filter_map(|option| option.probe.map(|key| (key, option)))
}

/// `--under-load`'s options that a probe's query may set, with their parameters' names.
pub fn under_load_parameters(
) -> impl Iterator<Item = (&'static str, &'static TestOption<UnderLoadSpec>)> {
    UNDER_LOAD_OPTIONS
        .iter()
        .filter_map(|option| option.probe.map(|key| (key, option)))
}

/// Every query parameter a probe takes, in the order the help lists them.
fn parameters() -> Vec<&'static str> {
    let test = test_parameters().map(|(key, _)| key);
    let sockets = socket_parameters().map(|(key, _)| key);
    let tcp = tcp_parameters().map(|(key, _)| key);
    FIRST_PARAMETERS
        .into_iter()
        .chain(test)
        .chain(workload_parameters().map(|(key, _)| key))
        .chain(output_parameters().map(|(key, _)| key))
        .chain(sockets)
        .chain(tcp)
        .chain(under_load_parameters().map(|(key, _)| key))
        .chain([LAST_PARAMETER])
        .collect()
}

/// Why a probe did not measure.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ProbeError {
    #[error("{0}")]
    Parameter(String),
    #[error("target {0} is not on the exporter's allow-list")]
    NotAllowed(String),
    #[error("duration {asked:?} does not fit in the scrape's time-out of {timeout:?}")]
    TooLongForScrape { asked: Duration, timeout: Duration },
    #[error("the test did not end within the probe's time-out of {0:?}")]
    TimedOut(Duration),
    #[error("{0}")]
    Test(String),
}

/// What a probe's query asks for, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeRequest {
    /// The target as the query gave it, for messages.
    pub target: String,
    pub host: String,
    pub port: u16,
    /// The IP family the test keeps to (`family=4` or `6`), or either.
    pub family: IpFamily,
    pub settings: Settings,
    /// How long the test runs (with `under_load`, its phases and the pauses between).
    pub duration: Duration,
    /// `under_load=1`: latency under load instead of one test.
    pub under_load: Option<UnderLoadSpec>,
}

impl ProbeRequest {
    /// Parses `query` (the URL's text after `?`), bounded by `config`'s limits.
    pub fn parse(query: &str, config: &ExporterConfig) -> Result<ProbeRequest, ProbeError> {
        let bad = |text: String| ProbeError::Parameter(text);
        let mut params: Vec<(String, String)> = Vec::new();
        for (name, value) in form_urlencoded::parse(query.as_bytes()) {
            if params.iter().any(|(n, _)| *n == name) {
                return Err(bad(format!("parameter {name} is given twice")));
            }
            let known = parameters();
            if !known.contains(&name.as_ref()) {
                return Err(bad(format!(
                    "unknown parameter {name} (the parameters are {})",
                    known.join(", ")
                )));
            }
            params.push((name.into_owned(), value.into_owned()));
        }
        let get = |name: &str| {
            params
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        let target = get("target")
            .ok_or_else(|| bad("the target parameter is missing (target=HOST[:PORT])".into()))?;
        let (host, port) = split_target(target).map_err(bad)?;
        if !config.allow.allows(&host, port) {
            return Err(ProbeError::NotAllowed(target.to_owned()));
        }
        let family = match get("family") {
            None => IpFamily::Any,
            Some("4") => IpFamily::V4,
            Some("6") => IpFamily::V6,
            Some(other) => return Err(bad(format!("family must be 4 or 6, not {other:?}"))),
        };
        if let (Ok(ip), Some((_, name))) = (host.parse::<IpAddr>(), family.flag()) {
            if !family.admits(ip) {
                return Err(bad(format!(
                    "family asks for {name} alone, and the target {ip} is not an {name} address"
                )));
            }
        }
        let protocol = match get("protocol").unwrap_or("tcp") {
            "tcp" => Protocol::Tcp,
            "udp" => Protocol::Udp,
            other => return Err(bad(format!("protocol must be tcp or udp, not {other:?}"))),
        };
        let mut given = GivenTime::default();
        apply_query([&TIME_OPTION], get, &mut given).map_err(bad)?;
        let duration = match given.secs {
            None => DEFAULT_DURATION.min(config.max_duration),
            Some(secs) => Duration::try_from_secs_f64(secs)
                .map_err(|_| bad(format!("duration must be a number of seconds, not {secs}")))?,
        };
        if duration.is_zero() || duration > config.max_duration {
            return Err(bad(format!(
                "duration must be above 0 and at most the exporter's {:?}, not {duration:?}",
                config.max_duration
            )));
        }
        let mut flags = WorkloadFlags::default();
        apply_query(workload_parameters().map(|(_, o)| o), get, &mut flags).map_err(bad)?;
        let workload = match (get("workload").unwrap_or("bulk"), flags.reverse) {
            ("bulk", false) => Workload::Bulk,
            ("bulk", true) => Workload::Reverse,
            ("rr", false) => Workload::RoundTrip(Reply::Ack),
            ("echo", false) => Workload::RoundTrip(Reply::Echo),
            ("crr", false) => Workload::Crr,
            ("rr" | "echo" | "crr", true) => {
                return Err(bad(
                    "reverse turns bulk sending around; rr, echo and crr time each request \
                     from the exporter"
                        .into(),
                ))
            }
            (other, _) => {
                return Err(bad(format!(
                    "workload must be bulk, rr, echo or crr, not {other:?}"
                )))
            }
        };
        let mut declared = Settings {
            // Unless size= says: over IPv6 when asked, or to an IPv6 address (a name's
            // family is the client's to find; it fits the datagram then).
            pktsize: crate::settings::default_pktsize(
                protocol,
                workload.mprtt(),
                family == IpFamily::V6 || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_ipv6()),
            ),
            ..Settings::default()
        };
        apply_query(test_parameters().map(|(_, o)| o), get, &mut declared).map_err(bad)?;
        apply_query(output_parameters().map(|(_, o)| o), get, &mut declared).map_err(bad)?;
        let mut sockets = SocketSettings::default();
        apply_query(socket_parameters().map(|(_, o)| o), get, &mut sockets).map_err(bad)?;
        let mut tcp = TcpSettings::default();
        apply_query(tcp_parameters().map(|(_, o)| o), get, &mut tcp).map_err(bad)?;
        let transport =
            TransportSettings::over_sockets(protocol == Protocol::Udp, sockets.window, tcp)
                .ok_or_else(|| {
                    let keys: Vec<String> = tcp_parameters().map(|(k, _)| k.to_owned()).collect();
                    bad(format!("{} are TCP's, not UDP's", and_list(&keys)))
                })?;
        let settings = Settings {
            workload,
            time_ms: Some(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)),
            transport,
            ..declared
        };
        settings
            .validate()
            .map_err(|e| bad(format!("the test asked for cannot run: {e}")))?;
        let mut spec = UnderLoadSpec::default();
        apply_query(under_load_parameters().map(|(_, o)| o), get, &mut spec).map_err(bad)?;
        let (duration, under_load) = match spec.enabled {
            false => (duration, None),
            true => (
                under_load_length(&mut spec, get, duration, config)?,
                Some(spec),
            ),
        };
        Ok(ProbeRequest {
            target: target.to_owned(),
            host,
            port,
            family,
            settings,
            duration,
            under_load,
        })
    }

    /// How long the probe may take in all: its test and set-up, within the scrape's
    /// time-out (`X-Prometheus-Scrape-Timeout-Seconds`) when Prometheus gave one.
    pub fn timeout(&self, scrape_timeout: Option<Duration>) -> Result<Duration, ProbeError> {
        let own = self.duration + SETUP_ALLOWANCE;
        let Some(scrape) = scrape_timeout else {
            return Ok(own);
        };
        let timeout = scrape.saturating_sub(SCRAPE_MARGIN);
        if self.duration + LEAST_SETUP > timeout {
            return Err(ProbeError::TooLongForScrape {
                asked: self.duration,
                timeout: scrape,
            });
        }
        Ok(own.min(timeout))
    }
}

/// Runs `request`'s test, giving up after `timeout`: its figures as metrics in
/// `registry`. A test that runs past the time-out is told to stop, and keeps `place`
/// (the probe's place among those running at once) until it has. A failed test of a
/// target that `--allow` does not name answers only once its time-out has passed, as
/// one that never answered would: how soon it failed would tell a closed port from a
/// listener that is no fperf server.
pub fn run(
    request: &ProbeRequest,
    config: &ExporterConfig,
    timeout: Duration,
    registry: &Registry,
    place: Place,
) -> Result<(), ProbeError> {
    let started = Instant::now();
    // Every wait of the test fits in what the probe has left after its test.
    let setup = timeout.saturating_sub(request.duration).max(LEAST_SETUP);
    let client = ClientConfig {
        connect_timeout: setup,
        control_timeout: setup,
        results_timeout: setup,
        stall_timeout: setup.max(Duration::from_secs(1)),
        auth: config.auth.clone(),
        family: request.family,
        ..ClientConfig::new(request.host.clone(), request.port, request.settings.clone())
    };
    let abort = Arc::new(AtomicBool::new(false));
    let (done, outcome) = mpsc::sync_channel(1);
    // The test's thread and this one each hold the place: the probe keeps it while
    // either still works on it.
    let place = Arc::new(place);
    let test = {
        let (abort, registry, place) = (abort.clone(), registry.clone(), place.clone());
        let under_load = request.under_load.clone();
        move || {
            let result = measure(&client, under_load.as_ref(), abort, registry);
            // Given back before the answer goes: a scraper that reads the exporter's
            // counters after its probe's answer sees the probe ended.
            drop(place);
            let _ = done.send(result);
        }
    };
    std::thread::Builder::new()
        .name("fperf-probe".into())
        .spawn(test)
        .map_err(|e| ProbeError::Test(format!("cannot start the test: {e}")))?;
    let result = match outcome.recv_timeout(timeout) {
        Ok(result) => result,
        Err(_) => {
            abort.store(true, Ordering::Relaxed);
            Err(ProbeError::TimedOut(timeout))
        }
    };
    if result.is_err() && !config.allow.names_targets() {
        std::thread::sleep((started + timeout).saturating_duration_since(Instant::now()));
    }
    drop(place);
    result
}

/// How long an `under_load=1` probe runs: without `phase_time`, `duration` split evenly
/// among the phases; refused past the exporter's `--max-duration`.
fn under_load_length<'a>(
    spec: &mut UnderLoadSpec,
    get: impl Fn(&str) -> Option<&'a str>,
    duration: Duration,
    config: &ExporterConfig,
) -> Result<Duration, ProbeError> {
    let phases = u32::try_from(spec.phases.len().max(1)).unwrap_or(u32::MAX);
    if get("phase_time").is_none() {
        spec.phase_time = (duration / phases).max(Duration::from_millis(100));
    }
    let total = spec.total();
    if total > config.max_duration {
        return Err(ProbeError::Parameter(format!(
            "under_load's phases take {total:?}, more than the exporter's {:?}",
            config.max_duration
        )));
    }
    spec.check().map_err(ProbeError::Parameter)?;
    Ok(total + PAUSE_PER_PHASE * phases)
}

/// What an `under_load=1` probe adds per phase to its test time: the pause between
/// phases and a phase's own set-up.
const PAUSE_PER_PHASE: Duration = Duration::from_secs(1);

/// One test against the target, its end recorded into `registry`.
fn measure(
    client: &ClientConfig,
    under_load: Option<&UnderLoadSpec>,
    abort: Arc<AtomicBool>,
    registry: Registry,
) -> Result<(), ProbeError> {
    let failed = |e: anyhow::Error| ProbeError::Test(format!("{e:#}"));
    if let Some(spec) = under_load {
        let run = crate::under_load::run(client, spec, abort).map_err(failed)?;
        if run.interrupted {
            return Err(ProbeError::Test("the run was cut short".into()));
        }
        return crate::output::openmetrics::record_under_load(&registry, &run).map_err(failed);
    }
    let sink: Box<dyn Sink> = Box::new(OpenMetrics::new(registry));
    let mut sinks = Sinks::new(&client.settings, StartTime::now(), vec![sink]);
    let outcome = client::run_observed(client, abort, &mut sinks).map_err(failed)?;
    if outcome.interrupted {
        return Err(ProbeError::Test("the test was cut short".into()));
    }
    sinks.end(&outcome).map_err(failed)
}

/// `HOST`, `HOST:PORT`, `[V6]:PORT` or a bare IPv6 address, as host and port (fperf's
/// default port when none is given).
pub fn split_target(target: &str) -> Result<(String, u16), String> {
    let (host, port) = client::split_host_port(target)?;
    Ok((host, port.unwrap_or(DEFAULT_PORT)))
}

impl Allow {
    /// Whether probes may test only the targets named (`--allow`): then a failed probe
    /// may say why it failed, as it tells nothing of a target no one named.
    pub fn names_targets(&self) -> bool {
        matches!(self, Allow::Only(_))
    }

    /// Whether a probe may test `host` on `port`.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        match self {
            Allow::Any => true,
            Allow::Only(targets) => targets
                .iter()
                .any(|(h, p)| h.eq_ignore_ascii_case(host) && p.map_or(true, |p| p == port)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::percentiles::Percentiles;

    fn config() -> ExporterConfig {
        ExporterConfig {
            max_duration: Duration::from_secs(10),
            allow: Allow::Only(vec![("127.0.0.1".into(), None), ("::1".into(), Some(5000))]),
            ..ExporterConfig::default()
        }
    }

    fn parse(query: &str) -> Result<ProbeRequest, ProbeError> {
        ProbeRequest::parse(query, &config())
    }

    #[test]
    fn a_probe_lists_its_parameters_in_the_helps_order() {
        assert_eq!(
            parameters(),
            [
                "target",
                "protocol",
                "duration",
                "workload",
                "streams",
                "size",
                "bitrate",
                "reverse",
                "percentiles",
                "window",
                "congestion",
                "mss",
                "fq_rate",
                "notsent_lowat",
                "under_load",
                "phases",
                "phase_time",
                "load_flows",
                "probe_interval",
                "family"
            ]
        );
    }

    fn refusal(query: &str) -> String {
        match parse(query) {
            Ok(r) => panic!("{query} was accepted as {r:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_probe_given_no_size_sends_what_its_workload_and_family_fit() {
        for (query, size) in [
            ("target=127.0.0.1", 32768),
            ("target=127.0.0.1&workload=rr", 1),
            ("target=127.0.0.1&protocol=udp&workload=echo", 1),
            ("target=127.0.0.1&protocol=udp", 1472),
            ("target=%5B::1%5D:5000&protocol=udp", 1452),
            ("target=%5B::1%5D:5000&protocol=udp&family=6", 1452),
        ] {
            let r = parse(query).expect("accepted");
            assert_eq!(r.settings.pktsize, size, "{query}");
        }
    }

    #[test]
    fn a_query_becomes_the_test_it_names() {
        let r = parse(
            "target=127.0.0.1%3A4000&protocol=udp&duration=2.5&size=1K&streams=2&bitrate=100M",
        )
        .expect("accepted");
        assert_eq!((r.host.as_str(), r.port), ("127.0.0.1", 4000));
        assert_eq!(r.duration, Duration::from_millis(2500));
        assert_eq!(r.settings.protocol(), Protocol::Udp);
        assert_eq!(r.settings.time_ms, Some(2500));
        assert_eq!(r.settings.pktsize, 1024);
        assert_eq!(r.settings.nstreams, 2);
        assert_eq!(r.settings.rate_bps, Some(100_000_000));
        let r = parse("target=127.0.0.1&workload=echo").expect("accepted");
        assert_eq!(r.port, DEFAULT_PORT);
        assert_eq!(r.duration, DEFAULT_DURATION);
        assert_eq!(r.settings.workload, Workload::RoundTrip(Reply::Echo));
        let r = parse("target=%5B::1%5D:5000&reverse=1").expect("accepted");
        assert_eq!((r.host.as_str(), r.port), ("::1", 5000));
        assert_eq!(r.settings.workload, Workload::Reverse);
        assert_eq!(r.settings.percentiles, Percentiles::default());
        let r = parse("target=127.0.0.1&window=64K&congestion=reno&mss=1000&fq_rate=40M")
            .expect("accepted");
        let TransportSettings::Tcp(tcp) = &r.settings.transport else {
            panic!("not TCP: {r:?}");
        };
        assert_eq!(tcp.sockets.window, Some(64 << 10));
        assert_eq!(tcp.congestion.as_deref(), Some("reno"));
        assert_eq!(tcp.mss, Some(1000));
        assert_eq!(tcp.fq_rate, Some(40_000_000));
        // 0 is no target and no cap, as on the command line.
        let r = parse("target=127.0.0.1&bitrate=0&fq_rate=0").expect("accepted");
        assert_eq!(r.settings.rate_bps, None);
        let TransportSettings::Tcp(tcp) = &r.settings.transport else {
            panic!("not TCP: {r:?}");
        };
        assert_eq!(tcp.fq_rate, None);
        let r = parse("target=127.0.0.1&protocol=udp&window=1M").expect("accepted");
        let sockets = r.settings.transport.sockets().expect("sockets");
        assert_eq!(sockets.window, Some(1 << 20));
        assert_eq!(r.family, IpFamily::Any);
        let r = parse("target=%5B::1%5D:5000&family=6").expect("accepted");
        assert_eq!(r.family, IpFamily::V6);
        let r = parse("target=127.0.0.1&workload=rr&percentiles=50,99.99").expect("accepted");
        assert_eq!(r.settings.percentiles.as_slice(), [50.0, 99.99]);
        assert!(refusal("target=127.0.0.1&percentiles=0").contains("above 0"));
        assert_eq!(
            refusal("target=127.0.0.1&percentiles=x"),
            "--percentiles: \"x\" is not a number"
        );
    }

    #[test]
    fn a_query_outside_the_limits_or_the_allow_list_is_refused_with_its_reason() {
        assert!(refusal("protocol=tcp").contains("target parameter is missing"));
        assert!(refusal("target=127.0.0.1&module=x").contains("unknown parameter module"));
        assert!(refusal("target=127.0.0.1&target=::1").contains("given twice"));
        assert!(refusal("target=10.0.0.1").contains("allow-list"));
        assert!(refusal("target=[::1]:5001").contains("allow-list"));
        assert!(refusal("target=127.0.0.1&duration=11").contains("at most the exporter's 10s"));
        assert!(refusal("target=127.0.0.1&duration=0").contains("above 0"));
        assert!(refusal("target=127.0.0.1&duration=-1").contains("number of seconds"));
        assert!(refusal("target=127.0.0.1&duration=NaN").contains("number of seconds"));
        assert!(refusal("target=127.0.0.1&size=0").contains("size must be 1 to 64M bytes"));
        assert!(refusal("target=127.0.0.1&size=9G").contains("size must be"));
        assert!(refusal("target=127.0.0.1&streams=100000").contains("streams must be"));
        assert_eq!(
            refusal("target=127.0.0.1&streams=0"),
            "streams must be 1 to 256, not \"0\""
        );
        assert!(refusal("target=127.0.0.1&protocol=sctp").contains("tcp or udp"));
        assert!(refusal("target=127.0.0.1&workload=rr&reverse=1").contains("reverse"));
        for query in ["target=127.0.0.1&reverse=2", "target=127.0.0.1&reverse="] {
            let value = query.rsplit('=').next().unwrap_or_default();
            assert_eq!(
                refusal(query),
                format!("reverse must be 0 or 1, not {value:?}")
            );
        }
        let r = parse("target=127.0.0.1&workload=rr&reverse=false").expect("accepted");
        assert_eq!(r.settings.workload, Workload::RoundTrip(Reply::Ack));
        assert!(refusal("target=127.0.0.1&bitrate=fast").contains("bitrate"));
        assert_eq!(
            refusal("target=127.0.0.1&bitrate=fast"),
            "bitrate: 'fast' is not a rate such as 100M or 2.5G (bits/s)"
        );
        assert!(refusal("target=127.0.0.1&window=big").contains("window must be"));
        assert!(refusal("target=127.0.0.1&window=0").contains("cannot run"));
        assert!(refusal("target=127.0.0.1&window=1G").contains("cannot run"));
        assert!(refusal("target=127.0.0.1&fq_rate=fast").contains("fq_rate"));
        assert!(refusal("target=127.0.0.1&bitrate=-1").contains("bitrate"));
        assert!(refusal("target=127.0.0.1&mss=1K").contains("mss must be"));
        assert!(refusal("target=127.0.0.1&mss=10").contains("cannot run"));
        assert!(refusal("target=127.0.0.1&congestion=a%2Fb").contains("cannot run"));
        assert!(refusal("target=127.0.0.1&congestion=averyveryverylongname").contains("cannot run"));
        assert!(refusal("target=127.0.0.1&protocol=udp&congestion=reno").contains("TCP's"));
        assert!(refusal("target=127.0.0.1&family=5").contains("family must be 4 or 6"));
        assert!(refusal("target=127.0.0.1&family=6").contains("not an IPv6 address"));
        assert!(refusal("target=%5B::1%5D:5000&family=4").contains("not an IPv4 address"));
        assert!(
            refusal("target=127.0.0.1&protocol=udp&size=60000&workload=crr").contains("cannot run")
        );
        assert!(refusal("target=127.0.0.1:0").contains("target must be"));
        assert!(refusal("target=a%20b").contains("target must be"));
        assert!(refusal("target=[::1").contains("target must be"));
    }

    #[test]
    fn a_probe_fits_in_the_scrape_timeout_or_is_refused() {
        let r = parse("target=127.0.0.1&duration=2").expect("accepted");
        assert_eq!(r.timeout(None), Ok(Duration::from_secs(7)));
        assert_eq!(
            r.timeout(Some(Duration::from_secs(4))),
            Ok(Duration::from_millis(3500))
        );
        assert_eq!(
            r.timeout(Some(Duration::from_secs(2))),
            Err(ProbeError::TooLongForScrape {
                asked: Duration::from_secs(2),
                timeout: Duration::from_secs(2)
            })
        );
    }

    #[test]
    fn targets_split_into_host_and_port() {
        assert_eq!(split_target("h:1"), Ok(("h".into(), 1)));
        assert_eq!(
            split_target("fe80::1"),
            Ok(("fe80::1".into(), DEFAULT_PORT))
        );
        assert_eq!(
            split_target("[fe80::1]"),
            Ok(("fe80::1".into(), DEFAULT_PORT))
        );
        assert!(split_target("h:").is_err());
        assert!(split_target("[::1]x").is_err());
        assert!(split_target("").is_err());
    }
}
