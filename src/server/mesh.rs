//! A mesh coordinator's test: this server runs it as a client towards another fperf
//! server, under its own limits, and sends both ends' figures back.
//!
//! The other server must prove the same key before any data flows (a client with a key
//! refuses a server without one), so a server cannot be made to send data towards an
//! arbitrary address.

use super::events::EventSender;
use super::{Control, ServerConfig, ServerEvent};
use crate::client::{self, ClientConfig, RunObserver, StreamInfo};
use crate::control::session::SessionError;
use crate::latency_probe::phases::{PhasePlan, PhaseReport};
use crate::limits::TestWatch;
use crate::results::SideResult;
use crate::sessions::SessionGuard;
use crate::settings::{Settings, MB};
use crate::under_load::{self, spec::UnderLoadSpec};
use anyhow::{bail, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often a mesh test is checked against the server's limits.
const LIMITS_POLL: Duration = Duration::from_millis(50);

/// The bytes a mesh test's streams have sent, once they start, and whether the other
/// server proved the key and took the test's streams.
#[derive(Clone, Default)]
struct Watched(Arc<Mutex<Option<Arc<TestWatch>>>>, Arc<AtomicBool>);

impl RunObserver for Watched {
    fn connected(&mut self, _streams: &[StreamInfo]) {
        self.1.store(true, Ordering::Relaxed);
    }

    fn started(&mut self, watch: &Arc<TestWatch>) {
        if let Ok(mut w) = self.0.lock() {
            *w = Some(watch.clone());
        }
    }
}

/// The coordinator on `control`'s address (for the log), and the client that runs
/// `settings` towards `host`:`port` for it, under this server's time-outs and key.
fn client_for(
    control: &Control,
    config: &ServerConfig,
    (host, port): (&str, u16),
    settings: Settings,
) -> (String, ClientConfig) {
    let coordinator = control
        .chan
        .peer_addr()
        .map(|a| crate::stream::canonical(a).to_string())
        .unwrap_or_default();
    let client = ClientConfig {
        connect_timeout: config.control_timeout,
        control_timeout: config.control_timeout,
        stall_timeout: config.idle_timeout,
        auth: config.auth.clone(),
        ..ClientConfig::new(host, port, settings)
    };
    (coordinator, client)
}

/// Runs `settings` towards the fperf server at `host`:`port` for the coordinator on
/// `control`: both ends' figures, this server's first.
pub(super) fn run_test(
    control: &mut Control,
    registered: &SessionGuard,
    host: &str,
    port: u16,
    mut settings: Settings,
    config: &ServerConfig,
    events: &EventSender,
) -> Result<(SideResult, SideResult)> {
    let towards = client::join_host_port(host, port);
    let limits = &config.limits;
    // The server's read cap becomes this client's send cap: an unpaced test is paced
    // to it, spread over the streams.
    if let (Some(max), None) = (limits.max_rate, settings.rate_bps) {
        settings.rate_bps = Some((max / u64::from(settings.nstreams.max(1))).max(1));
    }
    let (coordinator, client) = client_for(control, config, (host, port), settings.clone());
    let abort = Arc::new(AtomicBool::new(false));
    let watched = Watched::default();
    let (ended, end) = mpsc::channel::<()>();
    let stopped = Arc::new(Mutex::new(None::<String>));
    // --max-time and --max-mb bound the test as they bound one this server receives.
    if limits.max_time.is_some() || limits.max_mb.is_some() {
        let (abort, watch, stopped) = (abort.clone(), watched.0.clone(), stopped.clone());
        let (max_time, max_mb) = (limits.max_time, limits.max_mb);
        let started = Instant::now();
        std::thread::Builder::new()
            .name("fperf-mesh-limits".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = end.recv_timeout(LIMITS_POLL) {
                    let sent = watch
                        .lock()
                        .ok()
                        .and_then(|w| w.as_ref().map(|w| w.total()))
                        .unwrap_or(0);
                    let over = match (max_time, max_mb) {
                        (Some(t), _) if started.elapsed() > t => {
                            Some(format!("--max-time ({} s)", t.as_secs()))
                        }
                        (_, Some(mb)) if sent > mb.saturating_mul(MB) => {
                            Some(format!("--max-mb ({mb} MB)"))
                        }
                        _ => None,
                    };
                    if let Some(limit) = over {
                        if let Ok(mut why) = stopped.lock() {
                            *why = Some(limit);
                        }
                        abort.store(true, Ordering::Relaxed);
                        return;
                    }
                }
            })?;
    }
    registered.streams_connected();
    let mut observer = watched.clone();
    let started = Instant::now();
    let outcome = client::run_observed(&client, abort, &mut observer);
    drop(ended);
    let outcome = match outcome {
        Ok(outcome) => outcome,
        // Until the other end proved the key, the coordinator learns only that no fperf
        // server of the mesh answered, and after the same time whatever failed: a
        // closed port, a silent one and a listener of another kind look alike, so that
        // no key holder can scan ports through this server. This server's log says why.
        Err(e) if !watched.1.load(Ordering::Relaxed) => {
            events.client_error(
                coordinator,
                format!("the mesh test towards {towards}: {e:#}"),
            );
            let alike = started + config.control_timeout;
            std::thread::sleep(alike.saturating_duration_since(Instant::now()));
            bail!(
                "the test towards {towards} did not start: no fperf server with this \
                 server's key answered there within {} s",
                config.control_timeout.as_secs()
            );
        }
        Err(e) => return Err(e),
    };
    if outcome.interrupted {
        let limit = stopped
            .lock()
            .ok()
            .and_then(|w| w.clone())
            .unwrap_or_default();
        bail!("the test towards {towards} went past this server's {limit}");
    }
    events.report(ServerEvent::MeshTest {
        coordinator,
        peer: towards,
        settings,
        result: Box::new(outcome.client.clone()),
    });
    Ok((outcome.client, outcome.server))
}

/// Runs `plan`'s phases of latency under load as the client towards the fperf server at
/// `host`:`port` for the coordinator on `control`, each loaded phase's test with
/// `settings`' options: each phase's figures.
///
/// The server's limits were checked against the whole run (its widest phase, all its
/// time); an unpaced load is paced to `--max-rate` as a mesh test is.
pub(super) fn run_under_load(
    control: &mut Control,
    registered: &SessionGuard,
    (host, port): (&str, u16),
    mut settings: Settings,
    plan: &PhasePlan,
    config: &ServerConfig,
    events: &EventSender,
) -> Result<Vec<PhaseReport>> {
    let towards = client::join_host_port(host, port);
    if let (Some(max), None) = (config.limits.max_rate, settings.rate_bps) {
        settings.rate_bps = Some((max / u64::from(plan.flows.max(1))).max(1));
    }
    let (coordinator, client) = client_for(control, config, (host, port), settings);
    registered.streams_connected();
    let answered = AtomicBool::new(false);
    let started = Instant::now();
    let spec = UnderLoadSpec::from_plan(plan);
    let run = under_load::run_noting(&client, &spec, Arc::new(AtomicBool::new(false)), &answered);
    let run = match run {
        Ok(run) => run,
        // A server that proved the key and lacks the probes' echo may be named; any
        // other failure before the probe session opened looks alike, as a mesh test's.
        Err(e)
            if !answered.load(Ordering::Relaxed)
                && !matches!(
                    e.downcast_ref::<SessionError>(),
                    Some(SessionError::ServerLacks { .. })
                ) =>
        {
            events.client_error(
                coordinator,
                format!("latency under load towards {towards}: {e:#}"),
            );
            let alike = started + config.control_timeout;
            std::thread::sleep(alike.saturating_duration_since(Instant::now()));
            bail!(
                "latency under load towards {towards} did not start: no fperf server with \
                 this server's key answered there within {} s",
                config.control_timeout.as_secs()
            );
        }
        Err(e) => return Err(e.context(format!("latency under load towards {towards}"))),
    };
    if run.interrupted {
        bail!("latency under load towards {towards} was cut short");
    }
    Ok(run.phases.iter().map(|p| p.report()).collect())
}
