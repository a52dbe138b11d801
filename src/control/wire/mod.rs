//! The control protocol's messages as they travel: types of their own, apart from the
//! settings and report types the rest of fperf works with, and explicit conversions
//! between the two.
//!
//! Why apart: a peer of another release reads these bytes, so they change only when
//! someone means them to. A field added to [`crate::settings::Settings`] or to a report
//! type (`Figures`, `SideResult`, ...) stays at home until it is added here too, and the
//! samples of every release in `tests/wire/` say whether that changed the encoding.
//!
//! How the encoding may change, within one major version:
//! - An optional field (`#[serde(default)]`, left out when it has nothing to say) or a
//!   new message is a minor change: raise `PROTOCOL_MINOR` and record the new version's
//!   samples (`tests/wire.rs` says how). An older peer ignores what it does not know.
//! - A field that changes what is measured or how the test runs must never be ignored:
//!   it also comes with a negotiated [`crate::features::Feature`], so that a peer
//!   lacking it refuses the test before any data flows.
//! - Anything a peer of the same major could not read is a new `PROTOCOL_MAJOR`.
//!
//! No type here refuses fields it does not know: they are a newer minor's.
//!
//! The conversions: from a domain value to its wire form is `From` and cannot fail;
//! from the wire back is `TryFrom` ([`WireError`]) where a value the peer sent may not
//! fit the domain type, `From` where every value fits, and never panics. A value that
//! fits but is not acceptable (no streams, a percentile of 0) is the business of
//! `Settings::validate`, which the server runs on every peer's settings. Each conversion
//! to a domain value names every field of it, so a field added there does not compile
//! until someone decides here whether it travels (and if not, what a peer's value is).
//!
//! Two kinds of value travel as the types of the layers that own them, not as types of
//! this module, and the same rules bind them:
//! - Each transport's settings ([`crate::transport::settings::TransportSettings`] with
//!   `TcpSettings`, `UdpSettings`, `RdmaSettings` and their `SocketSettings`) are that
//!   transport's wire form: a transport owns its options, on the wire too, and an option
//!   that changes what is measured is gated by the feature its settings list.
//! - What a transport reports of its own in the results (TCP's `TcpInfo`, and the
//!   datagram counts of UDP, [`crate::stats::datagrams::DatagramCounts`]) travels as
//!   that type, likewise.

mod results;
mod settings;
mod under_load;

use crate::control::Message as Domain;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use thiserror::Error;

pub use results::{
    CpuUsage, Figures, IntervalResult, LatencySummary, PercentileValue, Role, SideResult,
    StreamInterval, StreamResult, SystemFacts, UsageCounts,
};
pub use settings::{Queue, Sched, Settings, WorkloadFlags};
pub use under_load::{PhaseFigures, PhasePlan, Phases, PlannedPhase, RttFigures};

/// Why a message a peer sent cannot be taken as the value it stands for.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum WireError {
    #[error("the settings name no single workload (mprtt {mprtt}, echo {echo}, crr {crr}, reverse {reverse}, bidir {bidir})")]
    Workload {
        mprtt: bool,
        echo: bool,
        crr: bool,
        reverse: bool,
        bidir: bool,
    },
    #[error("no phase of latency under load is called {0:?}")]
    Phase(String),
}

/// Every message of the control protocol, as it is encoded (see
/// [`crate::control::Message`] for what each means).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    Hello {
        version: u32,
        software: String,
        #[serde(default, skip_serializing_if = "is_zero")]
        minor: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        features: Option<Vec<String>>,
    },
    DataHello {
        version: u32,
        session: u64,
        stream: u32,
        socket: u32,
    },
    Welcome {
        version: u32,
        software: String,
        session: u64,
        #[serde(default, skip_serializing_if = "is_zero")]
        minor: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        features: Option<Vec<String>>,
    },
    Settings {
        settings: Settings,
    },
    Ready,
    Results {
        result: Box<SideResult>,
    },
    ClientResults {
        result: Box<SideResult>,
    },
    Error {
        message: String,
    },
    UdpSockets {
        addrs: Vec<SocketAddr>,
    },
    UdpFinished {
        datagrams: u64,
        bytes: u64,
    },
    ClientDataReceived,
    Interval {
        result: Box<IntervalResult>,
    },
    Conf {
        version: u32,
    },
    Facts {
        facts: SystemFacts,
    },
    AuthChallenge {
        nonce: String,
    },
    AuthResponse {
        nonce: String,
        mac: String,
    },
    AuthConfirm {
        mac: String,
    },
    MeshTest {
        peer: String,
        settings: Settings,
    },
    MeshResult {
        client: Box<SideResult>,
        server: Box<SideResult>,
    },
    ProbeEcho {
        seconds: u32,
    },
    ProbeEchoing {
        port: u16,
        token: u64,
    },
    MeshUnderLoad {
        peer: String,
        settings: Settings,
        plan: PhasePlan,
    },
    MeshUnderLoadResult {
        phases: Phases<PhaseFigures>,
    },
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl From<&Domain> for Message {
    fn from(msg: &Domain) -> Message {
        match msg.clone() {
            Domain::Hello {
                version,
                software,
                minor,
                features,
            } => Message::Hello {
                version,
                software,
                minor,
                features,
            },
            Domain::DataHello {
                version,
                session,
                stream,
                socket,
            } => Message::DataHello {
                version,
                session,
                stream,
                socket,
            },
            Domain::Welcome {
                version,
                software,
                session,
                minor,
                features,
            } => Message::Welcome {
                version,
                software,
                session,
                minor,
                features,
            },
            Domain::Settings { settings } => Message::Settings {
                settings: Settings::from(settings),
            },
            Domain::Ready => Message::Ready,
            Domain::Results { result } => Message::Results {
                result: Box::new((*result).into()),
            },
            Domain::ClientResults { result } => Message::ClientResults {
                result: Box::new((*result).into()),
            },
            Domain::Error { message } => Message::Error { message },
            Domain::UdpSockets { addrs } => Message::UdpSockets { addrs },
            Domain::UdpFinished { datagrams, bytes } => Message::UdpFinished { datagrams, bytes },
            Domain::ClientDataReceived => Message::ClientDataReceived,
            Domain::Interval { result } => Message::Interval {
                result: Box::new((*result).into()),
            },
            Domain::Conf { version } => Message::Conf { version },
            Domain::Facts { facts } => Message::Facts {
                facts: facts.into(),
            },
            Domain::AuthChallenge { nonce } => Message::AuthChallenge { nonce },
            Domain::AuthResponse { nonce, mac } => Message::AuthResponse { nonce, mac },
            Domain::AuthConfirm { mac } => Message::AuthConfirm { mac },
            Domain::MeshTest { peer, settings } => Message::MeshTest {
                peer,
                settings: Settings::from(settings),
            },
            Domain::MeshResult { client, server } => Message::MeshResult {
                client: Box::new((*client).into()),
                server: Box::new((*server).into()),
            },
            Domain::ProbeEcho { seconds } => Message::ProbeEcho { seconds },
            Domain::ProbeEchoing { port, token } => Message::ProbeEchoing { port, token },
            Domain::MeshUnderLoad {
                peer,
                settings,
                plan,
            } => Message::MeshUnderLoad {
                peer,
                settings: Settings::from(settings),
                plan: PhasePlan::from(&plan),
            },
            Domain::MeshUnderLoadResult { phases } => Message::MeshUnderLoadResult {
                phases: Phases(phases.iter().map(PhaseFigures::from).collect()),
            },
        }
    }
}

impl TryFrom<Message> for Domain {
    type Error = WireError;

    fn try_from(msg: Message) -> Result<Domain, WireError> {
        Ok(match msg {
            Message::Hello {
                version,
                software,
                minor,
                features,
            } => Domain::Hello {
                version,
                software,
                minor,
                features,
            },
            Message::DataHello {
                version,
                session,
                stream,
                socket,
            } => Domain::DataHello {
                version,
                session,
                stream,
                socket,
            },
            Message::Welcome {
                version,
                software,
                session,
                minor,
                features,
            } => Domain::Welcome {
                version,
                software,
                session,
                minor,
                features,
            },
            Message::Settings { settings } => Domain::Settings {
                settings: settings.try_into()?,
            },
            Message::Ready => Domain::Ready,
            Message::Results { result } => Domain::Results {
                result: Box::new((*result).into()),
            },
            Message::ClientResults { result } => Domain::ClientResults {
                result: Box::new((*result).into()),
            },
            Message::Error { message } => Domain::Error { message },
            Message::UdpSockets { addrs } => Domain::UdpSockets { addrs },
            Message::UdpFinished { datagrams, bytes } => Domain::UdpFinished { datagrams, bytes },
            Message::ClientDataReceived => Domain::ClientDataReceived,
            Message::Interval { result } => Domain::Interval {
                result: Box::new((*result).into()),
            },
            Message::Conf { version } => Domain::Conf { version },
            Message::Facts { facts } => Domain::Facts {
                facts: facts.into(),
            },
            Message::AuthChallenge { nonce } => Domain::AuthChallenge { nonce },
            Message::AuthResponse { nonce, mac } => Domain::AuthResponse { nonce, mac },
            Message::AuthConfirm { mac } => Domain::AuthConfirm { mac },
            Message::MeshTest { peer, settings } => Domain::MeshTest {
                peer,
                settings: settings.try_into()?,
            },
            Message::MeshResult { client, server } => Domain::MeshResult {
                client: Box::new((*client).into()),
                server: Box::new((*server).into()),
            },
            Message::ProbeEcho { seconds } => Domain::ProbeEcho { seconds },
            Message::ProbeEchoing { port, token } => Domain::ProbeEchoing { port, token },
            Message::MeshUnderLoad {
                peer,
                settings,
                plan,
            } => Domain::MeshUnderLoad {
                peer,
                settings: settings.try_into()?,
                plan: plan.try_into()?,
            },
            Message::MeshUnderLoadResult { phases } => Domain::MeshUnderLoadResult {
                phases: phases
                    .0
                    .into_iter()
                    .map(TryInto::try_into)
                    .collect::<Result<_, _>>()?,
            },
        })
    }
}
