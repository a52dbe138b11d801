//! A server's probe session (`--under-load`'s latency probes): apart from the tests, it
//! echoes the client's probes on a UDP socket of its own until the client closes the
//! control connection or the time it asked for (and a grace) is over.

use super::{random_u64, ClientLog, Control};
use crate::control::session::{Request, SessionError};
use crate::latency_probe::echo::Echo;
use crate::latency_probe::ECHO_GRACE;
use crate::server::ServerConfig;
use crate::sessions::Sessions;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Serves the welcomed probe session on `control` (`Welcome` queued), whose client is
/// at `peer`.
pub(super) fn serve(
    mut control: Control,
    peer: SocketAddr,
    active: &Arc<Sessions>,
    config: &ServerConfig,
    log: &ClientLog,
) {
    let _counted = match active.open_probe() {
        Ok(counted) => counted,
        Err(busy) => return control.refuse(&SessionError::Refused(busy), config, log),
    };
    let seconds = match control.recv_request(config) {
        Ok(Request::ProbeEcho { seconds }) => seconds,
        Ok(_) => return control.refuse(&SessionError::ProbeSessionOnly, config, log),
        Err(e) => {
            let e = SessionError::TestFailed(format!("{e:#}"));
            log.error(e.to_string());
            return control.say_why(&e);
        }
    };
    let echo = control
        .chan
        .socket()
        .local_addr()
        .and_then(|local| {
            let token = random_u64().map_err(|e| std::io::Error::other(e.to_string()))?;
            Ok((Echo::bind(local.ip(), peer.ip(), token)?, token))
        })
        .and_then(|(echo, token)| Ok((echo.port()?, token, echo)));
    let (port, token, echo) = match echo {
        Ok(bound) => bound,
        Err(e) => {
            let e = SessionError::TestFailed(format!("cannot open the probes' socket: {e}"));
            log.error(e.to_string());
            return control.say_why(&e);
        }
    };
    control.session.probe_echoing(port, token);
    if let Err(e) = control.flush() {
        return log.error(e.to_string());
    }
    let until = Instant::now() + Duration::from_secs(u64::from(seconds)) + ECHO_GRACE;
    if let Err(e) = echo.run(until, control.chan.socket()) {
        log.error(format!("latency probes' echo: {e}"));
    }
}
