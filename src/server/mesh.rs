//! A mesh coordinator's test: this server runs it as a client towards another fperf
//! server, under its own limits, and sends both ends' figures back.
//!
//! The other server must prove the same key before any data flows (a client with a key
//! refuses a server without one), so a server cannot be made to send data towards an
//! arbitrary address.

use super::{Control, ServerConfig, ServerEvent};
use crate::client::{self, ClientConfig};
use crate::results::SideResult;
use crate::sessions::SessionGuard;
use crate::settings::Settings;
use anyhow::{bail, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;

/// Runs `settings` towards the fperf server at `host`:`port` for the coordinator on
/// `control`: both ends' figures, this server's first.
pub(super) fn run_test(
    control: &mut Control,
    registered: &SessionGuard,
    host: &str,
    port: u16,
    mut settings: Settings,
    config: &ServerConfig,
    events: &Sender<ServerEvent>,
) -> Result<(SideResult, SideResult)> {
    let limits = &config.limits;
    // The server's read cap becomes this client's send cap: an unpaced test is paced
    // to it, spread over the streams.
    if let (Some(max), None) = (limits.max_rate, settings.rate_bps) {
        settings.rate_bps = Some((max / u64::from(settings.nstreams.max(1))).max(1));
    }
    let coordinator = control
        .chan
        .peer_addr()
        .map(|a| crate::stream::canonical(a).to_string())
        .unwrap_or_default();
    let client = ClientConfig {
        control_timeout: config.control_timeout,
        stall_timeout: config.idle_timeout,
        auth: config.auth.clone(),
        ..ClientConfig::new(host, port, settings.clone())
    };
    let abort = Arc::new(AtomicBool::new(false));
    // --max-time bounds the test as it bounds one this server receives.
    let (ended, end) = mpsc::channel::<()>();
    if let Some(most) = limits.max_time {
        let abort = abort.clone();
        std::thread::Builder::new()
            .name("fperf-mesh-time".into())
            .spawn(move || {
                if let Err(mpsc::RecvTimeoutError::Timeout) = end.recv_timeout(most) {
                    abort.store(true, Ordering::Relaxed);
                }
            })?;
    }
    registered.streams_connected();
    let outcome = client::run(&client, abort, &mut |_| {});
    drop(ended);
    let outcome = outcome?;
    if outcome.interrupted {
        bail!(
            "the test towards {host}:{port} ran past this server's --max-time ({} s)",
            limits.max_time.map_or(0, |t| t.as_secs())
        );
    }
    let _ = events.send(ServerEvent::MeshTest {
        coordinator,
        peer: format!("{host}:{port}"),
        settings,
        result: Box::new(outcome.client.clone()),
    });
    Ok((outcome.client, outcome.server))
}
