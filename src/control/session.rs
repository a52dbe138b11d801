//! The control session as two state machines that do no I/O: [`ServerSession`] and
//! [`ClientSession`].
//!
//! Each is fed the peer's messages one at a time ([`ServerSession::on_message`],
//! [`ClientSession::on_message`]) and says what happened as a step; what it wants sent
//! waits in its outbox ([`ServerSession::take_outbox`], [`ClientSession::take_outbox`]),
//! at most a few messages, never growing with what the peer sends. The drivers
//! (`server.rs`, `client.rs`) own the socket, the clock and the randomness: nonces,
//! session ids and times come in as arguments, so the machines are tested in memory
//! against scripted peers. Every decision is the machines': each phase's steps
//! ([`Greeting`], [`Request`], [`ClientRun`]), how long to wait, and what to tell the
//! peer and the log when a phase fails ([`SessionError`]); the drivers only read,
//! write and act.
//!
//! The exchange: the client sends `Hello`; a server with a key answers `AuthChallenge`,
//! the client `AuthResponse`, the server `AuthConfirm` (see [`crate::auth`]); the server
//! sends `Welcome` with the session id, the client its `Settings`, the server `Ready`
//! once its data streams listen. During the run the server sends `Interval`s and, once
//! it has read the client's data, `ClientDataReceived`; then `Results`. Either end may
//! send `Error` instead of its next message. A message out of turn, a second copy of
//! one, an unknown one or one from the wrong end fails the session with an error naming
//! what was expected.

use super::{
    check_features, check_version, protocol_text, ControlError, Message, PROTOCOL_MAJOR,
    PROTOCOL_MINOR,
};
use crate::auth::{self, AuthError, AuthKey, Exchange, NONCE_LEN};
use crate::features;
use crate::latency_probe::phases::{self, PhasePlan, PhaseReport};
use crate::limits::{LimitError, Limits};
use crate::options::Feature;
use crate::peer_text::printable;
use crate::results::{IntervalResult, SideResult};
use crate::settings::{Settings, SettingsError};
use crate::stats::StreamStats;
use crate::transport::Role;
use std::time::{Duration, Instant};
use thiserror::Error;

/// How long a new connection has, all its steps together, to say what it is and (with a
/// key) prove it: the one deadline of every connection the server does not know yet.
pub const IDENTIFY_WITHIN: Duration = Duration::from_secs(5);

/// Server messages a run takes beyond twice its intervals before it counts them as a
/// flood: the confirmation, and intervals that end early or arrive together.
const REPORTS_SLACK: u64 = 8;

/// Why a control session failed.
#[derive(Debug, Error)]
pub enum SessionError {
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// The peer sent `Error` during the key exchange.
    #[error("server: {0}")]
    PeerDuringAuth(String),
    #[error(
        "the server requires authentication: give --auth-key FILE or set {}",
        auth::KEY_ENV
    )]
    ClientHasNoKey,
    #[error(
        "this client has a key but the server does not ask for one; refusing to run \
         unauthenticated (start the server with --auth-key)"
    )]
    ServerHasNoKey,
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error(transparent)]
    Limit(#[from] LimitError),
    #[error("the connection did not say what it is within {} s", IDENTIFY_WITHIN.as_secs())]
    TooSlowToIdentify,
    #[error("the server sent impossible figures: {0}")]
    ImpossibleFigures(String),
    #[error("the client sent impossible figures: {0}")]
    ImpossibleClientFigures(String),
    #[error("the server sent too many interval reports")]
    TooManyReports,
    #[error(
        "this server does not run tests for a mesh coordinator (start it with --allow-mesh \
         and --auth-key)"
    )]
    MeshNotAllowed,
    #[error("the mesh coordinator named an impossible peer: {0}")]
    MeshPeer(String),
    #[error("the server sent impossible figures for the mesh test: {0}")]
    ImpossibleMeshFigures(String),
    #[error("the mesh coordinator asked for phases of latency under load that cannot run: {0}")]
    MeshPhases(String),
    /// A probe session asked for an echo longer than a server gives.
    #[error(
        "a latency probe echo lasts 1 to {most} s, not {0} s",
        most = crate::latency_probe::MAX_ECHO_SECS
    )]
    ProbeEchoLength(u32),
    /// A connection that announced a probe session asked for something else.
    #[error("a probe session's connection asks for nothing but the probes' echo")]
    ProbeSessionOnly,
    /// The server lacks a feature the test needs.
    #[error(
        "the server ({server}, protocol {server_protocol}) does not support {option}; upgrade \
         it or leave the option out (this client: {}, protocol {})",
        software(),
        protocol_text(PROTOCOL_MAJOR, PROTOCOL_MINOR)
    )]
    ServerLacks {
        option: &'static str,
        server: String,
        server_protocol: String,
    },
    /// The client asked for a feature this server does not know.
    #[error(
        "this server ({}, protocol {}) does not support the option the client ({client}, \
         protocol {client_protocol}) calls \"{feature}\"; upgrade the server or leave that \
         option out",
        software(),
        protocol_text(PROTOCOL_MAJOR, PROTOCOL_MINOR)
    )]
    ClientNeedsUnknown {
        feature: String,
        client: String,
        client_protocol: String,
    },
    /// A data connection came to the base port for a stream other than the first.
    #[error("data connection for another stream's port")]
    DataForAnotherStream,
    /// The session took a step no driver expects at this point.
    #[error("{0}")]
    StepOutOfTurn(String),
    /// The server could not draw a session id.
    #[error("no entropy for a session id")]
    NoSessionId,
    /// The server refused the test (busy, with why).
    #[error("refused: {0}")]
    Refused(String),
    /// The server's end of the test failed.
    #[error("{0}")]
    TestFailed(String),
    /// The server's figures could not be sent.
    #[error("cannot send the results: {0}")]
    ResultsUnsent(ControlError),
    /// Both ends' figures of a mesh test could not be sent.
    #[error("cannot send the mesh test's results: {0}")]
    MeshResultsUnsent(ControlError),
    /// The client's answer to the results was not its figures.
    #[error("its figures: {0}")]
    ClientFigures(Box<SessionError>),
    /// No figures from the server within this many seconds.
    #[error("the server did not confirm the end of the test within {0}s")]
    ResultsNotConfirmed(u64),
    /// The server closed the control connection instead of sending its figures.
    #[error(
        "the server closed the control connection before sending its results (it stopped \
         or was killed)"
    )]
    ClosedBeforeResults,
}

impl SessionError {
    /// What to tell the peer before closing, if anything: nothing when the peer itself
    /// gave up.
    pub fn to_peer(&self) -> Option<String> {
        match self {
            SessionError::Control(ControlError::Peer(_)) | SessionError::PeerDuringAuth(_) => None,
            SessionError::ClientHasNoKey => {
                Some("authentication failed: the client has no key".into())
            }
            SessionError::ServerHasNoKey => {
                Some("authentication failed: the server has no key but the client has one".into())
            }
            // What the driver itself failed at, or found out of turn, is its own to log.
            SessionError::StepOutOfTurn(_)
            | SessionError::ResultsUnsent(_)
            | SessionError::MeshResultsUnsent(_)
            | SessionError::ClientFigures(_) => None,
            SessionError::NoSessionId => Some("server cannot draw a session id".into()),
            SessionError::Refused(why) => Some(why.clone()),
            SessionError::TestFailed(why) => Some(format!("server: {why}")),
            other => Some(other.to_string()),
        }
    }
}

/// The software name both ends announce.
pub fn software() -> String {
    format!("fperf {}", crate::VERSION)
}

/// `msg` unless it is the peer's `Error`, which becomes [`ControlError::Peer`].
fn no_error(msg: Message) -> Result<Message, ControlError> {
    match msg {
        Message::Error { message } => Err(ControlError::Peer(printable(&message))),
        other => Ok(other),
    }
}

/// Where a server's session stands.
#[derive(Debug)]
enum ServerState {
    /// Waiting for the connection's first frame.
    First,
    /// The client was challenged with this nonce.
    Challenged { server_nonce: [u8; NONCE_LEN] },
    /// The client is identified (with a key, authenticated): the driver registers a
    /// session id and calls [`ServerSession::welcome`].
    Identified { exchange: Option<Exchange> },
    /// `Welcome` sent; waiting for the settings.
    AwaitSettings,
    /// The settings are accepted: the driver sets up the data streams, then calls
    /// [`ServerSession::ready`].
    SettingUp,
    /// `Ready` sent: the test runs.
    Running,
    /// A mesh coordinator's test towards another server runs; its figures end the
    /// session ([`ServerSession::mesh_results`]).
    MeshRunning,
    /// A probe session asked for its echo: the driver binds the echo's socket, then
    /// calls [`ServerSession::probe_echoing`].
    ProbeSettingUp,
    /// `Results` sent: the client's own figures may follow.
    ResultsSent,
    /// Over: results, facts or an error sent, or the connection handed on as data.
    Ended,
}

/// What a message did to a server's session.
#[derive(Debug, PartialEq)]
pub enum ServerStep {
    /// Send the outbox, then feed the client's next message.
    Continue,
    /// The connection is a data connection naming `session`: route its socket.
    DataConnection {
        session: u64,
        stream: u32,
        socket: u32,
    },
    /// The connection asks for this host's facts: answer with [`ServerSession::facts`].
    Conf,
    /// The client is identified: draw a session id, register it, and call
    /// [`ServerSession::welcome`].
    Identified,
    /// The client's test, valid and within the server's limits: set up its data
    /// streams, then call [`ServerSession::ready`].
    Test(Box<Settings>),
    /// After the results: the client's own figures, checked against its test.
    ClientResults(Box<SideResult>),
    /// A mesh coordinator's test, valid and within the server's limits: run it as a
    /// client towards the fperf server at `host`:`port`, then call
    /// [`ServerSession::mesh_results`].
    MeshTest {
        host: String,
        port: u16,
        settings: Box<Settings>,
    },
    /// A mesh coordinator's phases of latency under load, valid and within the
    /// server's limits: run them as the client towards the fperf server at
    /// `host`:`port`, then call [`ServerSession::mesh_under_load_results`].
    MeshUnderLoad {
        host: String,
        port: u16,
        settings: Box<Settings>,
        plan: Box<PhasePlan>,
    },
    /// A probe session's request: echo latency probes for `seconds`, then call
    /// [`ServerSession::probe_echoing`].
    ProbeEcho { seconds: u32 },
}

/// The server's end of one control connection.
#[derive(Debug)]
pub struct ServerSession {
    state: ServerState,
    /// The shared key clients must prove they hold, and this connection's challenge.
    auth: Option<(AuthKey, [u8; NONCE_LEN])>,
    limits: Limits,
    outbox: Vec<Message>,
    /// The settings of the test accepted, which the client's figures must fit.
    test: Option<Settings>,
    /// Whether a mesh coordinator holding the key may ask for tests towards other
    /// servers.
    allow_mesh: bool,
    /// What the client's `Hello` said of itself: its software (printable), its protocol
    /// version, and the features its test needs.
    client: Option<PeerHello>,
    /// Whether the server runs tests in parallel (`--parallel` above 1).
    parallel: bool,
    /// The streams carrying the client's data that have ended.
    client_data_ended: u32,
}

/// What a peer's first message said of it, kept for checks and messages.
#[derive(Debug)]
struct PeerHello {
    software: String,
    protocol: String,
    features: Option<Vec<String>>,
}

impl PeerHello {
    fn new(software: &str, minor: u32, features: Option<Vec<String>>) -> Self {
        PeerHello {
            software: printable(software),
            protocol: protocol_text(PROTOCOL_MAJOR, minor),
            features,
        }
    }
}

impl ServerSession {
    /// A session for a new connection to a server that enforces `limits` and, with
    /// `auth`, requires its key; the nonce beside the key must be fresh randomness (the
    /// challenge).
    pub fn new(limits: Limits, auth: Option<(AuthKey, [u8; NONCE_LEN])>) -> Self {
        ServerSession {
            state: ServerState::First,
            auth,
            limits,
            outbox: Vec::new(),
            test: None,
            allow_mesh: false,
            client: None,
            parallel: false,
            client_data_ended: 0,
        }
    }

    /// The same session, also taking a mesh coordinator's `MeshTest` once the
    /// coordinator proved the key (never on a server without one).
    pub fn allowing_mesh(mut self) -> Self {
        self.allow_mesh = self.auth.is_some();
        self
    }

    /// The messages to send now, in order.
    pub fn take_outbox(&mut self) -> Vec<Message> {
        std::mem::take(&mut self.outbox)
    }

    /// How long the driver may wait for the client's next message, `elapsed` after the
    /// connection arrived. Until the client is identified, every wait shares one
    /// deadline, [`IDENTIFY_WITHIN`] after arrival, and its passing fails the session;
    /// after that, `Ok(None)`: each wait gets the driver's control time-out.
    pub fn wait_limit(&mut self, elapsed: Duration) -> Result<Option<Duration>, SessionError> {
        if !self.identifying() {
            return Ok(None);
        }
        let left = IDENTIFY_WITHIN.saturating_sub(elapsed);
        if left.is_zero() {
            self.state = ServerState::Ended;
            return Err(SessionError::TooSlowToIdentify);
        }
        Ok(Some(left))
    }

    /// Whether the client has yet to say what it is (and, with a key, prove it).
    fn identifying(&self) -> bool {
        matches!(
            self.state,
            ServerState::First | ServerState::Challenged { .. }
        )
    }

    /// The driver's wait for the client's next message ran out: the error that ends the
    /// session ([`SessionError::TooSlowToIdentify`] while the client is unidentified).
    pub fn timed_out(&mut self) -> SessionError {
        let identifying = self.identifying();
        self.state = ServerState::Ended;
        if identifying {
            SessionError::TooSlowToIdentify
        } else {
            ControlError::Timeout.into()
        }
    }

    /// Feeds the client's next message.
    pub fn on_message(&mut self, msg: Message) -> Result<ServerStep, SessionError> {
        let result = self.step(msg);
        if result.is_err() {
            self.state = ServerState::Ended;
        }
        result
    }

    fn step(&mut self, msg: Message) -> Result<ServerStep, SessionError> {
        let msg = no_error(msg)?;
        match (&self.state, msg) {
            (
                ServerState::First,
                Message::Hello {
                    version,
                    software,
                    minor,
                    features,
                },
            ) => {
                check_version(version)?;
                check_features(features.as_deref())?;
                self.client = Some(PeerHello::new(&software, minor, features));
                match &self.auth {
                    Some((_, server_nonce)) => {
                        self.outbox.push(Message::AuthChallenge {
                            nonce: auth::to_hex(server_nonce),
                        });
                        self.state = ServerState::Challenged {
                            server_nonce: *server_nonce,
                        };
                        Ok(ServerStep::Continue)
                    }
                    None => {
                        self.state = ServerState::Identified { exchange: None };
                        Ok(ServerStep::Identified)
                    }
                }
            }
            (
                ServerState::First,
                Message::DataHello {
                    version,
                    session,
                    stream,
                    socket,
                },
            ) => {
                check_version(version)?;
                self.state = ServerState::Ended;
                Ok(ServerStep::DataConnection {
                    session,
                    stream,
                    socket,
                })
            }
            (ServerState::First, Message::Conf { version }) => {
                check_version(version)?;
                self.state = ServerState::Ended;
                Ok(ServerStep::Conf)
            }
            (ServerState::First, other) => Err(ControlError::unexpected("hello", &other).into()),
            (&ServerState::Challenged { server_nonce }, Message::AuthResponse { nonce, mac }) => {
                let (key, _) = self.auth.as_ref().ok_or(AuthError::WrongKey)?;
                let exchange = auth::verify_client(key, server_nonce, &nonce, &mac)?;
                self.outbox.push(Message::AuthConfirm {
                    mac: auth::to_hex(&auth::server_proof(key, &exchange)),
                });
                self.state = ServerState::Identified {
                    exchange: Some(exchange),
                };
                Ok(ServerStep::Identified)
            }
            (ServerState::Challenged { .. }, other) => {
                Err(ControlError::unexpected("auth_response", &other).into())
            }
            (ServerState::AwaitSettings, Message::ProbeEcho { seconds }) => {
                if !self.asks_for_probe_echo() {
                    return Err(ControlError::unexpected(
                        "settings",
                        &Message::ProbeEcho { seconds },
                    )
                    .into());
                }
                if !(1..=crate::latency_probe::MAX_ECHO_SECS).contains(&seconds) {
                    return Err(SessionError::ProbeEchoLength(seconds));
                }
                self.state = ServerState::ProbeSettingUp;
                Ok(ServerStep::ProbeEcho { seconds })
            }
            // A probe session is not registered as a test: it may not turn into one.
            (
                ServerState::AwaitSettings,
                Message::Settings { .. } | Message::MeshTest { .. } | Message::MeshUnderLoad { .. },
            ) if self.asks_for_probe_echo() => Err(SessionError::ProbeSessionOnly),
            (ServerState::AwaitSettings, Message::Settings { settings }) => {
                self.check_client_features()?;
                settings.validate()?;
                self.limits.check(&settings)?;
                self.state = ServerState::SettingUp;
                self.test = Some(settings.clone());
                Ok(ServerStep::Test(Box::new(settings)))
            }
            (ServerState::AwaitSettings, Message::MeshTest { peer, settings }) => {
                if !self.allow_mesh {
                    return Err(SessionError::MeshNotAllowed);
                }
                let (host, port) = mesh_peer(&peer).map_err(SessionError::MeshPeer)?;
                self.check_client_features()?;
                settings.validate()?;
                self.limits.check(&settings)?;
                self.state = ServerState::MeshRunning;
                self.test = Some(settings.clone());
                Ok(ServerStep::MeshTest {
                    host,
                    port,
                    settings: Box::new(settings),
                })
            }
            (
                ServerState::AwaitSettings,
                Message::MeshUnderLoad {
                    peer,
                    settings,
                    plan,
                },
            ) => {
                if !self.allow_mesh {
                    return Err(SessionError::MeshNotAllowed);
                }
                let (host, port) = mesh_peer(&peer).map_err(SessionError::MeshPeer)?;
                self.check_client_features()?;
                plan.check().map_err(SessionError::MeshPhases)?;
                settings.validate()?;
                // The limits bound the whole run: its longest phase's streams, all its
                // phases' time.
                let widest = Settings {
                    nstreams: plan.most_streams(),
                    time_ms: Some(u64::try_from(plan.total().as_millis()).unwrap_or(u64::MAX)),
                    ..settings.clone()
                };
                widest.validate()?;
                self.limits.check(&widest)?;
                self.state = ServerState::MeshRunning;
                self.test = Some(settings.clone());
                Ok(ServerStep::MeshUnderLoad {
                    host,
                    port,
                    settings: Box::new(settings),
                    plan: Box::new(plan),
                })
            }
            (ServerState::AwaitSettings, other) => {
                Err(ControlError::unexpected("settings", &other).into())
            }
            (ServerState::ResultsSent, Message::ClientResults { result }) => {
                let settings =
                    self.test
                        .as_ref()
                        .ok_or(SessionError::Control(ControlError::unexpected(
                            "nothing",
                            &Message::Ready,
                        )))?;
                check_side(settings, &result).map_err(SessionError::ImpossibleClientFigures)?;
                self.state = ServerState::Ended;
                Ok(ServerStep::ClientResults(result))
            }
            (ServerState::ResultsSent, other) => {
                Err(ControlError::unexpected("client_results", &other).into())
            }
            // The client says nothing else once its settings are sent.
            (_, other) => Err(ControlError::unexpected("nothing", &other).into()),
        }
    }

    /// Refuses a test whose `Hello` named a feature this server does not know: the
    /// client's settings may then hold a field this build would silently ignore.
    fn check_client_features(&self) -> Result<(), SessionError> {
        let Some(client) = &self.client else {
            return Ok(());
        };
        let unknown = client
            .features
            .iter()
            .flatten()
            .find(|name| Feature::from_name(name).is_none());
        match unknown {
            Some(name) => Err(SessionError::ClientNeedsUnknown {
                feature: printable(name),
                client: client.software.clone(),
                client_protocol: client.protocol.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Whether the client's `Hello` announced a probe session (`--under-load`'s latency
    /// probes): such a session is not a test and is not registered as one.
    pub fn asks_for_probe_echo(&self) -> bool {
        let name = crate::latency_probe::PROBE_ECHO.name();
        self.client
            .as_ref()
            .is_some_and(|c| c.features.iter().flatten().any(|f| f == name))
    }

    /// The probe session's echo listens on UDP `port` for probes carrying `token`:
    /// tells the client, which ends the exchange of messages.
    pub fn probe_echoing(&mut self, port: u16, token: u64) {
        if matches!(self.state, ServerState::ProbeSettingUp) {
            self.outbox.push(Message::ProbeEchoing { port, token });
            self.state = ServerState::Ended;
        }
    }

    /// The settings of the test this session accepted.
    pub fn test(&self) -> Option<&Settings> {
        self.test.as_ref()
    }

    /// Answers a `Conf` connection with this host's `facts`.
    pub fn facts(&mut self, facts: crate::sysinfo::SystemFacts) {
        self.outbox.push(Message::Facts { facts });
    }

    /// Opens the identified session under `public_session` (announced in `Welcome`);
    /// returns the id its data connections must present: with a key, one only key
    /// holders can derive. `None` when the session is not at that point.
    pub fn welcome(&mut self, public_session: u64) -> Option<u64> {
        let ServerState::Identified { exchange } = &self.state else {
            return None;
        };
        let session = match (&self.auth, exchange) {
            (Some((key, _)), Some(x)) => auth::bind_session(key, x, public_session),
            _ => public_session,
        };
        self.outbox.push(Message::Welcome {
            version: PROTOCOL_MAJOR,
            software: software(),
            session: public_session,
            minor: PROTOCOL_MINOR,
            features: Some(features::supported_names()),
        });
        self.state = ServerState::AwaitSettings;
        Some(session)
    }

    /// The test's data streams listen: tells the client to connect them.
    pub fn ready(&mut self) {
        if matches!(self.state, ServerState::SettingUp) {
            self.outbox.push(Message::Ready);
            self.state = ServerState::Running;
        }
    }

    /// One interval of the running test.
    pub fn interval(&mut self, result: Box<IntervalResult>) {
        if matches!(self.state, ServerState::Running) {
            self.outbox.push(Message::Interval { result });
        }
    }

    /// Every stream carrying the client's data has read its last byte.
    pub fn client_data_received(&mut self) {
        if matches!(self.state, ServerState::Running) {
            self.outbox.push(Message::ClientDataReceived);
        }
    }

    /// The mesh coordinator's test is over: both ends' figures end the session.
    pub fn mesh_results(&mut self, client: Box<SideResult>, server: Box<SideResult>) {
        if matches!(self.state, ServerState::MeshRunning) {
            self.outbox.push(Message::MeshResult { client, server });
            self.state = ServerState::Ended;
        }
    }

    /// The mesh coordinator's phases of latency under load are over: their figures end
    /// the session.
    pub fn mesh_under_load_results(&mut self, phases: Vec<PhaseReport>) {
        if matches!(self.state, ServerState::MeshRunning) {
            self.outbox.push(Message::MeshUnderLoadResult { phases });
            self.state = ServerState::Ended;
        }
    }

    /// The test is over: its figures end the session.
    pub fn results(&mut self, result: Box<SideResult>) {
        if matches!(self.state, ServerState::Running) {
            self.outbox.push(Message::Results { result });
            self.state = ServerState::ResultsSent;
        }
    }
}

/// How long a server waits for the client's figures after sending its own.
pub const CLIENT_RESULTS_WITHIN: Duration = Duration::from_secs(5);

/// What a new connection's message did while the server greets it.
#[derive(Debug, PartialEq)]
pub enum Greeting {
    /// Send the outbox, then read the connection's next message.
    Continue,
    /// The client is identified: send the outbox, then welcome it
    /// ([`ServerSession::welcome_drawn`]).
    Identified,
    /// A data connection for the first stream of `session`: route its socket.
    DataConnection {
        session: u64,
        stream: u32,
        socket: u32,
    },
    /// The connection asks for this host's facts: answer with [`ServerSession::facts`].
    Conf,
}

/// What a welcomed client asked for.
#[derive(Debug, PartialEq)]
pub enum Request {
    /// Its own test: set up its data streams, then call [`ServerSession::ready`].
    Test(Box<Settings>),
    /// A mesh coordinator's test towards the fperf server at `host`:`port`: run it as a
    /// client, then call [`ServerSession::mesh_results`].
    Mesh {
        host: String,
        port: u16,
        settings: Box<Settings>,
    },
    /// A mesh coordinator's phases of latency under load towards the fperf server at
    /// `host`:`port`: run them as the client, then call
    /// [`ServerSession::mesh_under_load_results`].
    MeshUnderLoad {
        host: String,
        port: u16,
        settings: Box<Settings>,
        plan: Box<PhasePlan>,
    },
    /// A probe session: echo latency probes for `seconds`, then call
    /// [`ServerSession::probe_echoing`].
    ProbeEcho { seconds: u32 },
}

/// What the drivers decide with the session: the steps of each phase, the waits, and
/// what the server says and logs when a phase fails.
impl ServerSession {
    /// The same session on a server that runs tests in parallel (`--parallel` above 1).
    pub fn in_parallel(mut self, parallel: bool) -> Self {
        self.parallel = parallel;
        self
    }

    /// How long the driver may wait for the client's next message, `elapsed` after the
    /// connection arrived: what is left of the one deadline of an unidentified
    /// connection, else `control_timeout`.
    pub fn next_wait(
        &mut self,
        elapsed: Duration,
        control_timeout: Duration,
    ) -> Result<Duration, SessionError> {
        Ok(self.wait_limit(elapsed)?.unwrap_or(control_timeout))
    }

    /// Feeds a new connection's next message while the server greets it. A data
    /// connection comes to the base port only for the first stream; settings come only
    /// after `Welcome`, and figures only after a test.
    pub fn on_greeting(&mut self, msg: Message) -> Result<Greeting, SessionError> {
        let greeting = match self.on_message(msg)? {
            ServerStep::Continue => Ok(Greeting::Continue),
            ServerStep::Identified => Ok(Greeting::Identified),
            ServerStep::DataConnection { stream, .. } if stream != 0 => {
                Err(SessionError::DataForAnotherStream)
            }
            ServerStep::DataConnection {
                session,
                stream,
                socket,
            } => Ok(Greeting::DataConnection {
                session,
                stream,
                socket,
            }),
            ServerStep::Conf => Ok(Greeting::Conf),
            ServerStep::Test(_)
            | ServerStep::MeshTest { .. }
            | ServerStep::MeshUnderLoad { .. }
            | ServerStep::ProbeEcho { .. } => Err(SessionError::StepOutOfTurn(
                "settings before welcome".into(),
            )),
            ServerStep::ClientResults(_) => {
                Err(SessionError::StepOutOfTurn("figures before a test".into()))
            }
        };
        if greeting.is_err() {
            self.state = ServerState::Ended;
        }
        greeting
    }

    /// Welcomes the identified client under `drawn`, a fresh random session id (`None`
    /// when none could be drawn); returns the id its data connections must present
    /// (see [`ServerSession::welcome`]).
    pub fn welcome_drawn(&mut self, drawn: Option<u64>) -> Result<u64, SessionError> {
        let welcomed = match drawn {
            Some(public_session) => self.welcome(public_session).ok_or_else(|| {
                SessionError::StepOutOfTurn("the session is not ready for a welcome".into())
            }),
            None => Err(SessionError::NoSessionId),
        };
        if welcomed.is_err() {
            self.state = ServerState::Ended;
        }
        welcomed
    }

    /// Feeds the welcomed client's request: its own test or a mesh coordinator's.
    pub fn on_request(&mut self, msg: Message) -> Result<Request, SessionError> {
        match self.on_message(msg)? {
            ServerStep::Test(settings) => Ok(Request::Test(settings)),
            ServerStep::MeshTest {
                host,
                port,
                settings,
            } => Ok(Request::Mesh {
                host,
                port,
                settings,
            }),
            ServerStep::MeshUnderLoad {
                host,
                port,
                settings,
                plan,
            } => Ok(Request::MeshUnderLoad {
                host,
                port,
                settings,
                plan,
            }),
            ServerStep::ProbeEcho { seconds } => Ok(Request::ProbeEcho { seconds }),
            other => {
                self.state = ServerState::Ended;
                Err(SessionError::StepOutOfTurn(format!(
                    "the session took an unexpected step: {other:?}"
                )))
            }
        }
    }

    /// Whether the accepted test must have the server to itself: with tests in
    /// parallel, one that listens past the base port.
    pub fn needs_server_alone(&self) -> bool {
        self.parallel
            && self
                .test
                .as_ref()
                .is_some_and(|s| s.listens_past_base_port())
    }

    /// Whether the test's report goes out in one piece at its end (tests in parallel),
    /// rather than as the test runs.
    pub fn reports_in_one_piece(&self) -> bool {
        self.parallel
    }

    /// Stream `stream` of the running test ended (`stopped`: the test was stopped).
    /// When the last stream carrying the client's data ends, the client hears so at
    /// once: its sending time ends there (with --bidir, this end's streams go on), not
    /// after the server has gathered its figures. A stopped test did not read all of
    /// it: the client then hears why instead.
    pub fn stream_ended(&mut self, stream: u32, stopped: bool) {
        let Some(settings) = &self.test else {
            return;
        };
        let open = settings.client_data_streams();
        if self.client_data_ended < open && !settings.server_sends_on(stream) {
            self.client_data_ended += 1;
            if self.client_data_ended == open && !stopped {
                self.client_data_received();
            }
        }
    }

    /// What to log when the client's data ended before all the test announced came
    /// (Ctrl-C on the client, or a client that died), given each stream's index and
    /// figures. Datagrams the network lost were sent all the same: they do not make a
    /// test short.
    pub fn ended_early<'a>(
        &self,
        streams: impl IntoIterator<Item = (u32, &'a StreamStats)>,
    ) -> Option<String> {
        let settings = self.test.as_ref()?;
        let expected = settings.byte_limit()?;
        let (mut got, mut count) = (0u64, 0u64);
        for (index, stats) in streams {
            let moved = if settings.server_sends_on(index) {
                stats.bytes_sent
            } else {
                stats.bytes_received
            };
            let lost = stats
                .datagrams
                .lost
                .saturating_mul(u64::from(settings.pktsize));
            got = got.saturating_add(moved).saturating_add(lost);
            count += 1;
        }
        let want = expected.saturating_mul(count);
        let moved = Role::Server.moved(settings);
        (got < want).then(|| {
            format!(
                "the client ended the test early: {got} of {want} bytes {moved} \
                 (interrupted or gone); figures cover what was {moved}"
            )
        })
    }

    /// The client's answer to the results, as read within [`CLIENT_RESULTS_WITHIN`]:
    /// its figures with the test's settings, for the report. A client that closed, or
    /// said something else, leaves none.
    pub fn on_client_answer(
        &mut self,
        answer: Result<Message, ControlError>,
    ) -> Result<Option<(Settings, Box<SideResult>)>, SessionError> {
        let step = answer
            .map_err(SessionError::from)
            .and_then(|msg| self.on_message(msg));
        match (step, &self.test) {
            (Ok(ServerStep::ClientResults(result)), Some(settings)) => {
                Ok(Some((settings.clone(), result)))
            }
            (Err(SessionError::Control(ControlError::Closed)), _) | (Ok(_), _) => Ok(None),
            (Err(e), _) => Err(SessionError::ClientFigures(Box::new(e))),
        }
    }
}

/// Where a client's session stands.
#[derive(Debug)]
enum ClientState {
    /// `Hello` sent; waiting for `Welcome` (or a challenge).
    AwaitWelcome { exchange: Option<Exchange> },
    /// Answered the challenge; waiting for the server's proof.
    AwaitConfirm { exchange: Exchange },
    /// Settings sent; waiting for `Ready`.
    AwaitReady,
    /// The test runs.
    Running,
    /// The server's results arrived: the client's own answer them.
    GotResults,
    /// A mesh test was asked for; waiting for both ends' figures.
    AwaitMeshResult,
    /// A probe echo was asked for; waiting for its port.
    AwaitProbeEchoing,
    /// A mesh's phases of latency under load were asked for; waiting for their figures.
    AwaitMeshUnderLoadResult,
    /// Done, or failed.
    Ended,
}

/// What a message did to a client's session.
#[derive(Debug, PartialEq)]
pub enum ClientStep {
    /// Send the outbox, then feed the server's next message.
    Continue,
    /// The server is ready: connect the data streams, naming `session`.
    Connect { session: u64 },
    /// One interval of the server's figures.
    ServerInterval(Box<IntervalResult>),
    /// The server has read the client's last byte.
    ClientDataReceived,
    /// The server's figures: the session is over.
    Results(Box<SideResult>),
    /// Both ends' figures of the mesh test asked for: the session is over.
    MeshResult {
        client: Box<SideResult>,
        server: Box<SideResult>,
    },
    /// The server echoes probes carrying `token` on UDP `port`: the session is over, its
    /// connection held open while the probes go.
    ProbeEchoing { port: u16, token: u64 },
    /// Each phase's figures of the mesh's latency under load asked for, checked against
    /// the plan: the session is over.
    MeshUnderLoadResult { phases: Vec<PhaseReport> },
}

/// The client's end of a control connection.
#[derive(Debug)]
pub struct ClientSession {
    state: ClientState,
    settings: Settings,
    /// The shared key to prove, and this connection's own nonce.
    auth: Option<(AuthKey, [u8; NONCE_LEN])>,
    /// The id announced in `Welcome`, bound to the key exchange if there was one.
    session: Option<u64>,
    /// The index of the server's last interval.
    last_interval: Option<u32>,
    /// The server's messages since the test started (intervals and its confirmation
    /// that it read the client's data), counted against the pace the client asked for.
    reports: u64,
    outbox: Vec<Message>,
    /// As a mesh coordinator: the server (`HOST:PORT`) the test goes towards.
    mesh_peer: Option<String>,
    /// As a probe session: the seconds of echo to ask for.
    probe_secs: Option<u32>,
    /// As a mesh coordinator of latency under load: the phases to ask for.
    mesh_plan: Option<PhasePlan>,
}

impl ClientSession {
    /// A session that will ask for `settings`, proving with `auth` the key it holds
    /// (the nonce beside it must be fresh randomness); its `Hello` is in the outbox.
    pub fn new(settings: Settings, auth: Option<(AuthKey, [u8; NONCE_LEN])>) -> Self {
        let hello = Message::Hello {
            version: PROTOCOL_MAJOR,
            software: software(),
            minor: PROTOCOL_MINOR,
            features: Some(
                settings
                    .needed_features()
                    .into_iter()
                    .map(|f| f.name().to_string())
                    .collect(),
            ),
        };
        ClientSession {
            state: ClientState::AwaitWelcome { exchange: None },
            settings,
            auth,
            session: None,
            last_interval: None,
            reports: 0,
            outbox: vec![hello],
            mesh_peer: None,
            probe_secs: None,
            mesh_plan: None,
        }
    }

    /// A mesh coordinator's session: once welcomed, it asks the server for a test of
    /// `settings` towards the fperf server at `peer` (`HOST:PORT`), and ends with both
    /// ends' figures.
    pub fn mesh(
        peer: String,
        settings: Settings,
        auth: Option<(AuthKey, [u8; NONCE_LEN])>,
    ) -> Self {
        ClientSession {
            mesh_peer: Some(peer),
            ..ClientSession::new(settings, auth)
        }
    }

    /// A probe session's (`--under-load`'s latency probes): once welcomed, it asks the
    /// server to echo probes for `seconds`, and ends with the echo's port and token.
    pub fn probe_echo(seconds: u32, auth: Option<(AuthKey, [u8; NONCE_LEN])>) -> Self {
        let hello = Message::Hello {
            version: PROTOCOL_MAJOR,
            software: software(),
            minor: PROTOCOL_MINOR,
            features: Some(vec![crate::latency_probe::PROBE_ECHO.name().to_string()]),
        };
        ClientSession {
            outbox: vec![hello],
            probe_secs: Some(seconds),
            ..ClientSession::new(Settings::default(), auth)
        }
    }

    /// A mesh coordinator's session of latency under load: once welcomed, it asks the
    /// server to run `plan`'s phases, each loaded one's test with `settings`' options,
    /// towards the fperf server at `peer` (`HOST:PORT`), and ends with each phase's
    /// figures.
    pub fn mesh_under_load(
        peer: String,
        settings: Settings,
        plan: PhasePlan,
        auth: Option<(AuthKey, [u8; NONCE_LEN])>,
    ) -> Self {
        let mut session = ClientSession {
            mesh_peer: Some(peer),
            mesh_plan: Some(plan),
            ..ClientSession::new(settings, auth)
        };
        let features = session
            .needed_features()
            .into_iter()
            .map(|f| f.name().to_string())
            .collect();
        session.outbox = vec![Message::Hello {
            version: PROTOCOL_MAJOR,
            software: software(),
            minor: PROTOCOL_MINOR,
            features: Some(features),
        }];
        session
    }

    /// The features the server must support for what this session asks.
    fn needed_features(&self) -> Vec<Feature> {
        match (self.probe_secs, &self.mesh_plan) {
            (Some(_), _) => vec![crate::latency_probe::PROBE_ECHO],
            (None, Some(_)) => {
                let mut needed = vec![crate::latency_probe::MESH_UNDER_LOAD];
                needed.extend(self.settings.needed_features());
                needed
            }
            (None, None) => self.settings.needed_features(),
        }
    }

    /// The messages to send now, in order.
    pub fn take_outbox(&mut self) -> Vec<Message> {
        std::mem::take(&mut self.outbox)
    }

    /// Checks the pace of the server's messages `since_ready` after it said `Ready`: a
    /// real server sends one interval report per interval the client asked for and one
    /// confirmation, so more than twice that (and a few for clocks and queues) is a
    /// flood, which ends the run.
    pub fn check_pace(&mut self, since_ready: Duration) -> Result<(), SessionError> {
        let intervals = self.settings.interval_ms.map_or(0, |ms| {
            u64::try_from(since_ready.as_millis() / u128::from(ms.max(1))).unwrap_or(u64::MAX)
        });
        if self.reports > intervals.saturating_mul(2).saturating_add(REPORTS_SLACK) {
            self.state = ClientState::Ended;
            return Err(SessionError::TooManyReports);
        }
        Ok(())
    }

    /// Refuses an interval of the server's whose figures cannot be true.
    fn check_interval(&self, r: &IntervalResult) -> Result<(), SessionError> {
        let streams = r.streams.iter().map(|s| &s.figures);
        check_figures(
            &self.settings,
            r.streams.len(),
            streams.chain([&r.total]).chain(&r.reverse_total),
        )
        .map_err(SessionError::ImpossibleFigures)
    }

    /// Answers the server's results with the client's own figures, for its report.
    pub fn client_results(&mut self, result: Box<SideResult>) {
        if matches!(self.state, ClientState::GotResults) {
            self.outbox.push(Message::ClientResults { result });
            self.state = ClientState::Ended;
        }
    }

    /// Refuses the server's results if its figures cannot be true.
    fn check_side(&self, r: &SideResult) -> Result<(), SessionError> {
        check_side(&self.settings, r).map_err(SessionError::ImpossibleFigures)
    }

    /// Feeds the server's next message.
    pub fn on_message(&mut self, msg: Message) -> Result<ClientStep, SessionError> {
        let result = self.step(msg);
        if result.is_err() {
            self.state = ClientState::Ended;
        }
        result
    }

    fn step(&mut self, msg: Message) -> Result<ClientStep, SessionError> {
        if let (ClientState::AwaitConfirm { .. }, Message::Error { message }) = (&self.state, &msg)
        {
            return Err(SessionError::PeerDuringAuth(printable(message)));
        }
        let msg = no_error(msg)?;
        match (&self.state, msg) {
            (ClientState::AwaitWelcome { exchange: None }, Message::AuthChallenge { nonce }) => {
                let (key, client_nonce) = self.auth.as_ref().ok_or(SessionError::ClientHasNoKey)?;
                let exchange = Exchange {
                    server_nonce: auth::from_hex(&nonce)
                        .ok_or(AuthError::Malformed("server nonce"))?,
                    client_nonce: *client_nonce,
                };
                self.outbox.push(Message::AuthResponse {
                    nonce: auth::to_hex(&exchange.client_nonce),
                    mac: auth::to_hex(&auth::client_proof(key, &exchange)),
                });
                self.state = ClientState::AwaitConfirm { exchange };
                Ok(ClientStep::Continue)
            }
            (ClientState::AwaitConfirm { exchange }, Message::AuthConfirm { mac }) => {
                let (key, _) = self.auth.as_ref().ok_or(SessionError::ClientHasNoKey)?;
                auth::verify_server(key, exchange, &mac)?;
                self.state = ClientState::AwaitWelcome {
                    exchange: Some(exchange.clone()),
                };
                Ok(ClientStep::Continue)
            }
            (ClientState::AwaitConfirm { .. }, other) => {
                Err(ControlError::unexpected("auth_confirm", &other).into())
            }
            (
                ClientState::AwaitWelcome { exchange },
                Message::Welcome {
                    version,
                    session,
                    software,
                    minor,
                    features,
                },
            ) => {
                let session = match (&self.auth, exchange) {
                    (Some((key, _)), Some(x)) => auth::bind_session(key, x, session),
                    (Some(_), None) => return Err(SessionError::ServerHasNoKey),
                    (None, _) => session,
                };
                check_version(version)?;
                check_features(features.as_deref())?;
                let server = PeerHello::new(&software, minor, features);
                if let Some(f) = self
                    .needed_features()
                    .into_iter()
                    .find(|&f| !features::peer_supports(server.features.as_deref(), f))
                {
                    return Err(SessionError::ServerLacks {
                        option: f.option(),
                        server: server.software,
                        server_protocol: server.protocol,
                    });
                }
                self.session = Some(session);
                let settings = self.settings.clone();
                match (&self.mesh_peer, self.probe_secs, &self.mesh_plan) {
                    (_, Some(seconds), _) => {
                        self.outbox.push(Message::ProbeEcho { seconds });
                        self.state = ClientState::AwaitProbeEchoing;
                    }
                    (Some(peer), None, Some(plan)) => {
                        self.outbox.push(Message::MeshUnderLoad {
                            peer: peer.clone(),
                            settings,
                            plan: plan.clone(),
                        });
                        self.state = ClientState::AwaitMeshUnderLoadResult;
                    }
                    (Some(peer), None, None) => {
                        self.outbox.push(Message::MeshTest {
                            peer: peer.clone(),
                            settings,
                        });
                        self.state = ClientState::AwaitMeshResult;
                    }
                    (None, None, _) => {
                        self.outbox.push(Message::Settings { settings });
                        self.state = ClientState::AwaitReady;
                    }
                }
                Ok(ClientStep::Continue)
            }
            (ClientState::AwaitWelcome { .. }, other) => {
                Err(ControlError::unexpected("welcome", &other).into())
            }
            (ClientState::AwaitReady, Message::Ready) => {
                self.state = ClientState::Running;
                let session = self.session.unwrap_or_default();
                Ok(ClientStep::Connect { session })
            }
            (ClientState::AwaitReady, other) => {
                Err(ControlError::unexpected("ready", &other).into())
            }
            (ClientState::Running, Message::Interval { result })
                if self.settings.interval_ms.is_some() =>
            {
                self.reports += 1;
                if let Some(last) = self.last_interval.filter(|&k| result.index <= k) {
                    return Err(SessionError::ImpossibleFigures(format!(
                        "interval {} after interval {last}",
                        result.index
                    )));
                }
                self.check_interval(&result)?;
                self.last_interval = Some(result.index);
                Ok(ClientStep::ServerInterval(result))
            }
            (ClientState::Running, Message::ClientDataReceived)
                if self.settings.client_data_streams() > 0 =>
            {
                self.reports += 1;
                Ok(ClientStep::ClientDataReceived)
            }
            (ClientState::Running, Message::Results { result }) => {
                self.check_side(&result)?;
                self.state = ClientState::GotResults;
                Ok(ClientStep::Results(result))
            }
            (ClientState::Running, other) => {
                Err(ControlError::unexpected("results", &other).into())
            }
            (ClientState::AwaitMeshResult, Message::MeshResult { client, server }) => {
                for side in [&client, &server] {
                    check_side(&self.settings, side)
                        .map_err(SessionError::ImpossibleMeshFigures)?;
                }
                self.state = ClientState::Ended;
                Ok(ClientStep::MeshResult { client, server })
            }
            (ClientState::AwaitMeshResult, other) => {
                Err(ControlError::unexpected("mesh_result", &other).into())
            }
            (ClientState::AwaitProbeEchoing, Message::ProbeEchoing { port, token }) => {
                self.state = ClientState::Ended;
                Ok(ClientStep::ProbeEchoing { port, token })
            }
            (ClientState::AwaitProbeEchoing, other) => {
                Err(ControlError::unexpected("probe_echoing", &other).into())
            }
            (ClientState::AwaitMeshUnderLoadResult, Message::MeshUnderLoadResult { phases }) => {
                let plan = self.mesh_plan.as_ref();
                if let Some(why) = plan.and_then(|plan| phases::impossible(plan, &phases)) {
                    return Err(SessionError::ImpossibleMeshFigures(why));
                }
                self.state = ClientState::Ended;
                Ok(ClientStep::MeshUnderLoadResult { phases })
            }
            (ClientState::AwaitMeshUnderLoadResult, other) => {
                Err(ControlError::unexpected("mesh_under_load_result", &other).into())
            }
            (ClientState::GotResults | ClientState::Ended, other) => {
                Err(ControlError::unexpected("nothing", &other).into())
            }
        }
    }
}

/// How long a client whose stream failed waits for the server to say why.
pub const SERVER_REASON_WITHIN: Duration = Duration::from_secs(2);

impl ClientSession {
    /// Whether the server's message `msg`, read during the run, leaves more to read:
    /// intervals and the confirmation come before the server's last word.
    pub fn more_follows(msg: &Result<Message, ControlError>) -> bool {
        matches!(
            msg,
            Ok(Message::Interval { .. } | Message::ClientDataReceived)
        )
    }
}

/// The server's messages while a client's test runs, as the control reader passed them
/// on (each with when it arrived), judged by the session.
pub struct ClientRun {
    session: ClientSession,
    /// When the run started, which the server's intervals keep pace with.
    started: Instant,
    server_intervals: Vec<IntervalResult>,
    /// When the server said it had read the client's data.
    client_data_received: Option<Instant>,
    /// What ended the run (normally the server's figures) and when it arrived.
    last_word: Option<(Instant, Result<Box<SideResult>, SessionError>)>,
}

impl ClientRun {
    /// The run of `session` (past `Connect`), started at `started`.
    pub fn new(session: ClientSession, started: Instant) -> Self {
        ClientRun {
            session,
            started,
            server_intervals: Vec::new(),
            client_data_received: None,
            last_word: None,
        }
    }

    /// Takes the server's message `msg` that arrived `at`; returns the server's
    /// interval it was, if it was one, for the caller's report.
    pub fn take(
        &mut self,
        at: Instant,
        msg: Result<Message, ControlError>,
    ) -> Option<&IntervalResult> {
        let step = msg
            .map_err(SessionError::from)
            .and_then(|m| self.session.on_message(m))
            .and_then(|step| {
                self.session
                    .check_pace(at.saturating_duration_since(self.started))?;
                Ok(step)
            });
        match step {
            Ok(ClientStep::ServerInterval(result)) => {
                self.server_intervals.push(*result);
                return self.server_intervals.last();
            }
            Ok(ClientStep::ClientDataReceived) => {
                self.client_data_received.get_or_insert(at);
            }
            Ok(ClientStep::Results(result)) => self.last_word = Some((at, Ok(result))),
            // The session takes no other step once the test runs.
            Ok(
                ClientStep::Continue
                | ClientStep::Connect { .. }
                | ClientStep::MeshResult { .. }
                | ClientStep::MeshUnderLoadResult { .. }
                | ClientStep::ProbeEchoing { .. },
            ) => {}
            // The first word that ended the session stands.
            Err(e) => {
                self.last_word.get_or_insert((at, Err(e)));
            }
        }
        None
    }

    /// When the run started, which the server's intervals keep pace with.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Whether the server has said its last word (its figures, or why not).
    pub fn has_last_word(&self) -> bool {
        self.last_word.is_some()
    }

    /// When the server said it had read the client's data.
    pub fn client_data_received(&self) -> Option<Instant> {
        self.client_data_received
    }

    /// Whether the server sent what no real server sends (a flood, impossible figures,
    /// a message out of place), which ends the run at once; a server that gave up or
    /// went away is judged once the streams end.
    pub fn server_misbehaved(&self) -> bool {
        match &self.last_word {
            Some((_, Err(SessionError::Control(e)))) => !matches!(
                e,
                ControlError::Peer(_)
                    | ControlError::Closed
                    | ControlError::Timeout
                    | ControlError::Io(_)
            ),
            Some((_, Err(_))) => true,
            _ => false,
        }
    }

    /// What the server did wrong, if it misbehaved (see [`ClientRun::server_misbehaved`]).
    pub fn take_misbehaviour(&mut self) -> Option<SessionError> {
        if !self.server_misbehaved() {
            return None;
        }
        match self.last_word.take() {
            Some((_, Err(e))) => Some(e),
            other => {
                self.last_word = other;
                None
            }
        }
    }

    /// The reason the server gave for ending the run, if its last word was an error of
    /// its own (e.g. a limit).
    pub fn take_servers_reason(&mut self) -> Option<String> {
        match self.last_word.take() {
            Some((_, Err(SessionError::Control(ControlError::Peer(msg))))) => Some(msg),
            _ => None,
        }
    }

    /// The server's figures, with its intervals, and when they arrived; or why there
    /// are none, after waiting `waited` for them.
    pub fn results(&mut self, waited: Duration) -> Result<(Instant, SideResult), SessionError> {
        match self.last_word.take() {
            Some((end, Ok(mut result))) => {
                result.intervals = std::mem::take(&mut self.server_intervals);
                Ok((end, *result))
            }
            None | Some((_, Err(SessionError::Control(ControlError::Timeout)))) => {
                Err(SessionError::ResultsNotConfirmed(waited.as_secs()))
            }
            Some((_, Err(SessionError::Control(ControlError::Closed)))) => {
                Err(SessionError::ClosedBeforeResults)
            }
            Some((_, Err(e))) => Err(e),
        }
    }

    /// Answers the server's results with the client's own figures, for its report
    /// (without the intervals, which it does not print): the messages to send.
    pub fn answer(&mut self, client: &SideResult) -> Vec<Message> {
        self.session.client_results(Box::new(SideResult {
            intervals: Vec::new(),
            ..client.clone()
        }));
        self.session.take_outbox()
    }
}

/// A mesh test's peer, `HOST:PORT` or `[IPv6]:PORT`, as host and port.
pub fn mesh_peer(peer: &str) -> Result<(String, u16), String> {
    let (host, port) = peer
        .rsplit_once(':')
        .ok_or_else(|| format!("{:?} is not HOST:PORT", printable(peer)))?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let plausible = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '_');
    match port.parse::<u16>() {
        Ok(port)
            if port > 0 && !host.is_empty() && host.len() <= 253 && host.chars().all(plausible) =>
        {
            Ok((host.to_owned(), port))
        }
        _ => Err(format!("{:?} is not HOST:PORT", printable(peer))),
    }
}

/// Why an end's figures for a run of `settings` cannot be true, if they cannot.
fn check_side(settings: &Settings, r: &SideResult) -> Result<(), String> {
    let intervals = r
        .intervals
        .iter()
        .flat_map(|i| [&i.total].into_iter().chain(&i.reverse_total));
    check_figures(
        settings,
        r.streams.len(),
        r.streams
            .iter()
            .map(|s| &s.figures)
            .chain([&r.total])
            .chain(&r.reverse_total)
            .chain(intervals),
    )
}

/// Why `figures` of `streams` streams cannot be true in a run of `settings`, if they
/// cannot: more streams than the run has, or figures no stream of it could have.
fn check_figures<'a>(
    settings: &Settings,
    streams: usize,
    mut figures: impl Iterator<Item = &'a crate::results::Figures>,
) -> Result<(), String> {
    if streams > settings.nstreams as usize {
        return Err(format!(
            "{streams} streams in a run of {}",
            settings.nstreams
        ));
    }
    match figures.find_map(|f| f.impossible(settings)) {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Figures;
    use crate::stats::StreamStats;
    use crate::transport::Role;
    use crate::workload::Workload;

    fn key(text: &str) -> AuthKey {
        AuthKey::new(text.as_bytes(), "test").expect("key")
    }

    fn figures() -> Figures {
        Figures::new(
            &StreamStats::default(),
            Duration::ZERO,
            &crate::percentiles::Percentiles::default(),
        )
    }

    fn side() -> Box<SideResult> {
        Box::new(SideResult {
            role: Role::Server,
            total: figures(),
            reverse_total: None,
            streams: Vec::new(),
            system: None,
            cpu: None,
            intervals: Vec::new(),
        })
    }

    fn interval(index: u32) -> Box<IntervalResult> {
        Box::new(IntervalResult {
            index,
            start_ns: 0,
            end_ns: 1,
            omitted: false,
            total: figures(),
            reverse_total: None,
            streams: Vec::new(),
            cpu: None,
        })
    }

    #[test]
    fn a_probe_session_asks_for_its_echo_and_for_nothing_else() {
        let mut client = ClientSession::probe_echo(20, None);
        let mut server = ServerSession::new(Limits::default(), None);
        assert_eq!(
            to_server(&mut client, &mut server),
            [ServerStep::Identified]
        );
        assert!(server.asks_for_probe_echo());
        server.welcome(7);
        assert_eq!(to_client(&mut server, &mut client), [ClientStep::Continue]);
        assert_eq!(
            to_server(&mut client, &mut server),
            [ServerStep::ProbeEcho { seconds: 20 }]
        );
        server.probe_echoing(4242, 99);
        assert_eq!(
            to_client(&mut server, &mut client),
            [ClientStep::ProbeEchoing {
                port: 4242,
                token: 99
            }]
        );
        // A connection that announced a probe session is never registered as a test:
        // it may not ask for one, nor for an echo too long.
        for (ask, refused) in [
            (
                Message::Settings {
                    settings: Settings::default(),
                },
                "nothing but the probes' echo",
            ),
            (Message::ProbeEcho { seconds: 0 }, "1 to 3600 s, not 0 s"),
        ] {
            let mut server = ServerSession::new(Limits::default(), None);
            let mut client = ClientSession::probe_echo(20, None);
            to_server(&mut client, &mut server);
            server.welcome(7);
            let err = server.on_message(ask).expect_err("refused");
            assert!(err.to_string().contains(refused), "{err}");
        }
        // An echo asked for without announcing it is out of turn.
        let mut server = ServerSession::new(Limits::default(), None);
        server.on_message(hello(PROTOCOL_MAJOR)).expect("hello");
        server.welcome(7);
        assert!(server
            .on_message(Message::ProbeEcho { seconds: 5 })
            .is_err());
    }

    fn hello(version: u32) -> Message {
        Message::Hello {
            version,
            software: "peer".into(),
            minor: 0,
            features: None,
        }
    }

    /// Delivers every message `from` queued to `to`, one by one; returns the steps.
    fn to_server(client: &mut ClientSession, server: &mut ServerSession) -> Vec<ServerStep> {
        client
            .take_outbox()
            .into_iter()
            .map(|m| server.on_message(m).expect("server step"))
            .collect()
    }

    fn to_client(server: &mut ServerSession, client: &mut ClientSession) -> Vec<ClientStep> {
        server
            .take_outbox()
            .into_iter()
            .map(|m| client.on_message(m).expect("client step"))
            .collect()
    }

    /// Runs both machines against each other up to the client's `Connect`; returns the
    /// server's and the client's session ids.
    fn open(client: &mut ClientSession, server: &mut ServerSession) -> (u64, u64) {
        let mut server_id = None;
        for _ in 0..4 {
            for step in to_server(client, server) {
                match step {
                    ServerStep::Identified => server_id = server.welcome(0x1234),
                    ServerStep::Test(_) => server.ready(),
                    ServerStep::Continue => {}
                    other => panic!("{other:?}"),
                }
            }
            for step in to_client(server, client) {
                if let ClientStep::Connect { session } = step {
                    return (server_id.expect("welcomed"), session);
                }
            }
        }
        panic!("no connect")
    }

    /// Runs a mesh coordinator's session against a server's up to the server's
    /// `MeshTest` step, or the server's error.
    fn ask_for_mesh_test(
        server: &mut ServerSession,
        peer: &str,
        settings: Settings,
    ) -> (ClientSession, Result<ServerStep, SessionError>) {
        let mut client =
            ClientSession::mesh(peer.into(), settings, Some((key("k"), [2; NONCE_LEN])));
        let step = exchange(&mut client, server, "no mesh test asked for");
        (client, step)
    }

    /// Passes a coordinator's messages between `client` and `server` until the server
    /// takes a step past its greeting, or either end fails; panics with `none` if
    /// neither happens.
    fn exchange(
        client: &mut ClientSession,
        server: &mut ServerSession,
        none: &str,
    ) -> Result<ServerStep, SessionError> {
        for _ in 0..4 {
            for msg in client.take_outbox() {
                match server.on_message(msg) {
                    Ok(ServerStep::Identified) => {
                        server.welcome(7);
                    }
                    Ok(ServerStep::Continue) => {}
                    other => return other,
                }
            }
            for msg in server.take_outbox() {
                client.on_message(msg)?;
            }
        }
        panic!("{none}")
    }

    /// Runs a coordinator's session of latency under load against `server` up to the
    /// server's step, or either end's error.
    fn ask_for_under_load(
        server: &mut ServerSession,
        plan: PhasePlan,
    ) -> (ClientSession, Result<ServerStep, SessionError>) {
        let mut client = ClientSession::mesh_under_load(
            "b:5201".into(),
            Settings::default(),
            plan,
            Some((key("k"), [2; NONCE_LEN])),
        );
        let step = exchange(&mut client, server, "no phases asked for");
        (client, step)
    }

    #[test]
    fn a_mesh_runs_phases_under_load_on_a_server_that_can_and_refuses_what_cannot_be_true() {
        use crate::latency_probe::phases::{PhaseKind, PhaseReport, RttFigures};
        let keyed = || ServerSession::new(Limits::default(), Some((key("k"), [1; NONCE_LEN])));
        let mut server = keyed().allowing_mesh();
        let (mut client, step) = ask_for_under_load(&mut server, PhasePlan::example());
        let Ok(ServerStep::MeshUnderLoad {
            host,
            port,
            plan: asked,
            ..
        }) = step
        else {
            panic!("{step:?}")
        };
        assert_eq!(
            (host.as_str(), port, *asked),
            ("b", 5201, PhasePlan::example())
        );
        let phase = |kind, p50_ns, added_delay_ns, down_bps| PhaseReport {
            kind,
            rtt: Some(RttFigures {
                min_ns: 10_000,
                p50_ns,
                p90_ns: 3_000_000,
                p99_ns: 3_000_000,
                max_ns: 3_000_000,
            }),
            probes_sent: 100,
            probes_lost: 0,
            added_delay_ns: Some(added_delay_ns),
            up_bps: 0.0,
            down_bps,
            rpm: Some(100_000.0),
        };
        let phases = vec![
            phase(PhaseKind::Idle, 20_000, 0, 0.0),
            phase(PhaseKind::Download, 2_020_000, 2_000_000, 9e9),
        ];
        server.mesh_under_load_results(phases.clone());
        assert_eq!(
            to_client(&mut server, &mut client),
            [ClientStep::MeshUnderLoadResult {
                phases: phases.clone()
            }]
        );

        // Figures that cannot be true of the plan end the coordinator's session.
        let mut lying = phases.clone();
        lying[1].added_delay_ns = Some(-5);
        let mut slow = phases.clone();
        slow[1].up_bps = 1e9;
        for bad in [lying, slow, phases[..1].to_vec()] {
            let mut server = keyed().allowing_mesh();
            let (mut client, _) = ask_for_under_load(&mut server, PhasePlan::example());
            server.mesh_under_load_results(bad.clone());
            let Some(msg) = server.take_outbox().pop() else {
                panic!("no result")
            };
            let e = client.on_message(msg).expect_err("impossible");
            assert!(
                e.to_string()
                    .starts_with("the server sent impossible figures for the mesh test"),
                "{e}"
            );
        }

        // The server refuses phases that cannot run, and a run over its limits.
        let mut twice = PhasePlan::example();
        twice.phases.push(twice.phases[0]);
        let mut server = keyed().allowing_mesh();
        let e = ask_for_under_load(&mut server, twice).1.expect_err("twice");
        assert!(e.to_string().contains("at most once"), "{e}");
        let mut strict = ServerSession::new(
            Limits {
                max_time: Some(Duration::from_secs(1)),
                ..Limits::default()
            },
            Some((key("k"), [1; NONCE_LEN])),
        )
        .allowing_mesh();
        assert!(
            ask_for_under_load(&mut strict, PhasePlan::example())
                .1
                .is_err(),
            "2 s of phases"
        );
        let e = ask_for_under_load(&mut keyed(), PhasePlan::example())
            .1
            .expect_err("no --allow-mesh");
        assert!(e.to_string().contains("--allow-mesh"), "{e}");
    }

    #[test]
    fn a_server_without_phases_for_a_mesh_is_refused_naming_the_option_and_both_versions() {
        let mut client = ClientSession::mesh_under_load(
            "b:5201".into(),
            Settings::default(),
            PhasePlan::example(),
            None,
        );
        let hello = client.take_outbox();
        assert!(
            matches!(hello.as_slice(), [Message::Hello { features: Some(f), .. }]
                if f.iter().any(|f| f == "mesh_under_load")),
            "{hello:?}"
        );
        let mut older = features::supported_names();
        older.retain(|f| f != "mesh_under_load");
        let e = client
            .on_message(Message::Welcome {
                version: PROTOCOL_MAJOR,
                software: "fperf 0.2.0".into(),
                session: 7,
                minor: 2,
                features: Some(older),
            })
            .expect_err("lacks it");
        let text = e.to_string();
        assert!(
            text.starts_with(
                "the server (fperf 0.2.0, protocol 16.2) does not support --under-load"
            ) && text.contains(&format!("this client: {}", software())),
            "{text}"
        );
        assert!(client.take_outbox().is_empty(), "asked for nothing");
    }

    #[test]
    fn a_mesh_test_is_run_for_a_coordinator_that_proved_the_key_and_answered_with_both_ends() {
        let keyed = || ServerSession::new(Limits::default(), Some((key("k"), [1; NONCE_LEN])));
        let mut server = keyed().allowing_mesh();
        let (mut client, step) = ask_for_mesh_test(&mut server, "[::1]:5000", Settings::default());
        let Ok(ServerStep::MeshTest {
            host,
            port,
            settings,
        }) = step
        else {
            panic!("{step:?}")
        };
        assert_eq!((host.as_str(), port), ("::1", 5000));
        assert_eq!(*settings, Settings::default());
        let theirs = side();
        let mine = Box::new(SideResult {
            role: Role::Client,
            ..*side()
        });
        server.mesh_results(mine.clone(), theirs.clone());
        assert_eq!(
            to_client(&mut server, &mut client),
            [ClientStep::MeshResult {
                client: mine.clone(),
                server: theirs.clone()
            }]
        );
        // Once only.
        assert!(client
            .on_message(Message::MeshResult {
                client: mine,
                server: theirs
            })
            .is_err());

        // Refused: by a server without --allow-mesh, by one without a key, a peer that
        // is no HOST:PORT, and a test over the server's limits.
        let refused =
            |mut server: ServerSession, peer: &str, settings: Settings| match ask_for_mesh_test(
                &mut server,
                peer,
                settings,
            )
            .1
            {
                Err(e) => e.to_string(),
                Ok(step) => panic!("{step:?}"),
            };
        let plain = Settings::default();
        assert!(refused(keyed(), "h:1", plain.clone()).contains("--allow-mesh"));
        let keyless = ServerSession::new(Limits::default(), None).allowing_mesh();
        let mut coordinator = ClientSession::mesh("h:1".into(), plain.clone(), None);
        let mut keyless = keyless;
        for msg in coordinator.take_outbox() {
            assert_eq!(
                keyless.on_message(msg).expect("hello"),
                ServerStep::Identified
            );
        }
        keyless.welcome(1);
        for msg in keyless.take_outbox() {
            coordinator.on_message(msg).expect("welcome");
        }
        for msg in coordinator.take_outbox() {
            let e = keyless.on_message(msg).expect_err("no key, no mesh");
            assert!(e.to_string().contains("--allow-mesh"), "{e}");
        }
        assert!(refused(keyed().allowing_mesh(), "h", plain.clone()).contains("HOST:PORT"));
        assert!(refused(keyed().allowing_mesh(), "h:0", plain.clone()).contains("HOST:PORT"));
        assert!(refused(keyed().allowing_mesh(), "a b:1", plain.clone()).contains("HOST:PORT"));
        let limited = Limits {
            max_streams: Some(1),
            ..Limits::default()
        };
        let many = Settings {
            nstreams: 2,
            ..Settings::default()
        };
        let server = ServerSession::new(limited, Some((key("k"), [1; NONCE_LEN]))).allowing_mesh();
        assert!(!refused(server, "h:1", many).is_empty());
    }

    #[test]
    fn a_mesh_result_with_impossible_figures_is_refused() {
        let mut server =
            ServerSession::new(Limits::default(), Some((key("k"), [1; NONCE_LEN]))).allowing_mesh();
        let settings = Settings {
            mb: 1,
            ..Settings::default()
        };
        let (mut client, step) = ask_for_mesh_test(&mut server, "h:1", settings);
        assert!(matches!(step, Ok(ServerStep::MeshTest { .. })));
        let mut lie = *side();
        lie.total.bytes_received = u64::MAX;
        let e = client
            .on_message(Message::MeshResult {
                client: side(),
                server: Box::new(lie),
            })
            .expect_err("impossible");
        assert!(
            e.to_string()
                .contains("impossible figures for the mesh test"),
            "{e}"
        );
    }

    #[test]
    fn a_whole_session_without_a_key() {
        let settings = Settings {
            workload: Workload::Bidir,
            nstreams: 2,
            interval_ms: Some(1000),
            ..Settings::default()
        };
        let mut client = ClientSession::new(settings, None);
        let mut server = ServerSession::new(Limits::default(), None);
        let (server_id, client_id) = open(&mut client, &mut server);
        assert_eq!((server_id, client_id), (0x1234, 0x1234));
        server.interval(interval(0));
        server.client_data_received();
        server.interval(interval(1));
        server.results(side());
        let steps = to_client(&mut server, &mut client);
        assert_eq!(
            steps,
            [
                ClientStep::ServerInterval(interval(0)),
                ClientStep::ClientDataReceived,
                ClientStep::ServerInterval(interval(1)),
                ClientStep::Results(side()),
            ]
        );
        // The client answers with its own figures, which the server takes once.
        let mine = Box::new(SideResult {
            role: Role::Client,
            ..*side()
        });
        client.client_results(mine.clone());
        let answer = client.take_outbox();
        assert_eq!(
            answer,
            [Message::ClientResults {
                result: mine.clone()
            }]
        );
        assert_eq!(
            server.on_message(answer[0].clone()).expect("taken"),
            ServerStep::ClientResults(mine.clone())
        );
        // Nothing may follow, from either end.
        assert!(server
            .on_message(Message::ClientResults { result: mine })
            .is_err());
        server.interval(interval(2));
        assert!(server.take_outbox().is_empty());
        assert!(client.on_message(Message::Ready).is_err());
    }

    #[test]
    fn a_clients_figures_out_of_turn_or_impossible_are_refused() {
        let mut lie = SideResult {
            role: Role::Client,
            ..*side()
        };
        lie.total.bytes_sent = u64::MAX;
        let mut client = ClientSession::new(Settings::default(), None);
        let mut server = ServerSession::new(Limits::default(), None);
        open(&mut client, &mut server);
        let early = Message::ClientResults {
            result: Box::new(lie.clone()),
        };
        assert!(server.on_message(early).is_err(), "before the results");
        let mut client = ClientSession::new(Settings::default(), None);
        let mut server = ServerSession::new(Limits::default(), None);
        open(&mut client, &mut server);
        server.results(side());
        to_client(&mut server, &mut client);
        let e = server
            .on_message(Message::ClientResults {
                result: Box::new(lie),
            })
            .expect_err("impossible");
        assert!(
            e.to_string().contains("the client sent impossible figures"),
            "{e}"
        );
    }

    #[test]
    fn with_the_same_key_both_ends_derive_the_same_secret_session_id() {
        let mut client = ClientSession::new(Settings::default(), Some((key("k"), [2; 32])));
        let mut server = ServerSession::new(Limits::default(), Some((key("k"), [1; 32])));
        let (server_id, client_id) = open(&mut client, &mut server);
        assert_eq!(server_id, client_id);
        assert_ne!(
            server_id, 0x1234,
            "bound to the exchange, not the public id"
        );
    }

    #[test]
    fn a_wrong_key_is_refused_by_the_server_and_a_false_proof_by_the_client() {
        let mut client = ClientSession::new(Settings::default(), Some((key("a"), [2; 32])));
        let mut server = ServerSession::new(Limits::default(), Some((key("b"), [1; 32])));
        assert_eq!(to_server(&mut client, &mut server), [ServerStep::Continue]);
        assert_eq!(to_client(&mut server, &mut client), [ClientStep::Continue]);
        let response = client.take_outbox().remove(0);
        let e = server.on_message(response).expect_err("wrong key");
        assert!(matches!(e, SessionError::Auth(AuthError::WrongKey)), "{e}");
        assert!(e.to_peer().expect("told").contains("does not match"));

        let mut client = ClientSession::new(Settings::default(), Some((key("a"), [2; 32])));
        client.take_outbox();
        client
            .on_message(Message::AuthChallenge {
                nonce: auth::to_hex(&[1; 32]),
            })
            .expect("challenge");
        let e = client
            .on_message(Message::AuthConfirm {
                mac: auth::to_hex(&[0; 32]),
            })
            .expect_err("false proof");
        assert!(
            matches!(e, SessionError::Auth(AuthError::ServerWrongKey)),
            "{e}"
        );
    }

    #[test]
    fn a_key_on_one_end_only_is_refused_saying_which() {
        let mut client = ClientSession::new(Settings::default(), None);
        let e = client
            .on_message(Message::AuthChallenge {
                nonce: auth::to_hex(&[1; 32]),
            })
            .expect_err("no key");
        assert!(e.to_string().contains("--auth-key"), "{e}");
        assert_eq!(
            e.to_peer().as_deref(),
            Some("authentication failed: the client has no key")
        );

        let mut client = ClientSession::new(Settings::default(), Some((key("k"), [2; 32])));
        let e = client
            .on_message(Message::Welcome {
                version: PROTOCOL_MAJOR,
                software: "x".into(),
                session: 1,
                minor: 0,
                features: None,
            })
            .expect_err("unauthenticated server");
        assert!(matches!(e, SessionError::ServerHasNoKey), "{e}");
    }

    #[test]
    fn other_protocol_versions_are_refused_by_both_ends() {
        let mut server = ServerSession::new(Limits::default(), None);
        let e = server
            .on_message(hello(PROTOCOL_MAJOR + 1))
            .expect_err("newer client");
        assert!(e.to_string().contains("version"), "{e}");
        let mut server = ServerSession::new(Limits::default(), None);
        assert!(server
            .on_message(Message::DataHello {
                version: 1,
                session: 1,
                stream: 0,
                socket: 0
            })
            .is_err());
        let mut client = ClientSession::new(Settings::default(), None);
        let e = client
            .on_message(Message::Welcome {
                version: 1,
                software: "old".into(),
                session: 1,
                minor: 0,
                features: None,
            })
            .expect_err("older server");
        assert!(e.to_string().contains("version"), "{e}");
    }

    #[test]
    fn the_first_frame_says_what_a_connection_is() {
        let mut server = ServerSession::new(Limits::default(), None);
        let step = server.on_message(Message::DataHello {
            version: PROTOCOL_MAJOR,
            session: 9,
            stream: 0,
            socket: 3,
        });
        assert_eq!(
            step.expect("data"),
            ServerStep::DataConnection {
                session: 9,
                stream: 0,
                socket: 3
            }
        );
        // Handed on: nothing more on this connection is the session's.
        assert!(server.on_message(hello(PROTOCOL_MAJOR)).is_err());
        let mut server = ServerSession::new(Limits::default(), None);
        assert_eq!(
            server
                .on_message(Message::Conf {
                    version: PROTOCOL_MAJOR
                })
                .expect("conf"),
            ServerStep::Conf
        );
    }

    #[test]
    fn messages_out_of_turn_fail_the_session_naming_what_was_expected() {
        let cases: Vec<(Vec<Message>, &str)> = vec![
            (vec![Message::Ready], "expected hello"),
            (
                vec![hello(PROTOCOL_MAJOR), hello(PROTOCOL_MAJOR)],
                "expected nothing",
            ),
            (
                vec![Message::Settings {
                    settings: Settings::default(),
                }],
                "expected hello",
            ),
        ];
        for (script, expected) in cases {
            let mut server = ServerSession::new(Limits::default(), None);
            let mut last = None;
            for msg in script {
                last = Some(server.on_message(msg));
            }
            let e = last.expect("fed").expect_err(expected);
            assert!(e.to_string().contains(expected), "{e}");
        }
        // The client: Ready before Welcome, Welcome twice, Results before Ready.
        let mut client = ClientSession::new(Settings::default(), None);
        assert!(client.on_message(Message::Ready).is_err());
        let welcome = Message::Welcome {
            version: PROTOCOL_MAJOR,
            software: "x".into(),
            session: 1,
            minor: 0,
            features: None,
        };
        let mut client = ClientSession::new(Settings::default(), None);
        client.on_message(welcome.clone()).expect("welcome");
        let e = client.on_message(welcome).expect_err("twice");
        assert!(e.to_string().contains("expected ready"), "{e}");
        let mut client = ClientSession::new(Settings::default(), None);
        client
            .on_message(Message::Welcome {
                version: PROTOCOL_MAJOR,
                software: "x".into(),
                session: 1,
                minor: 0,
                features: None,
            })
            .expect("welcome");
        assert!(client
            .on_message(Message::Results { result: side() })
            .is_err());
    }

    #[test]
    fn a_client_data_mark_is_taken_where_the_client_sends_and_refused_in_reverse() {
        let mut client = ClientSession::new(Settings::default(), None);
        let mut server = ServerSession::new(Limits::default(), None);
        open(&mut client, &mut server);
        assert_eq!(
            client
                .on_message(Message::ClientDataReceived)
                .expect("sent"),
            ClientStep::ClientDataReceived
        );
        let reverse = Settings {
            workload: Workload::Reverse,
            ..Settings::default()
        };
        let mut client = ClientSession::new(reverse, None);
        let mut server = ServerSession::new(Limits::default(), None);
        open(&mut client, &mut server);
        let e = client
            .on_message(Message::ClientDataReceived)
            .expect_err("reverse");
        assert!(e.to_string().contains("client_data_received"), "{e}");
    }

    #[test]
    fn settings_are_validated_and_held_to_the_limits() {
        let limits = Limits {
            max_streams: Some(2),
            ..Limits::default()
        };
        for (settings, what) in [
            (
                Settings {
                    nstreams: 0,
                    ..Settings::default()
                },
                "invalid",
            ),
            (
                Settings {
                    nstreams: 3,
                    ..Settings::default()
                },
                "over the limit",
            ),
        ] {
            let mut server = ServerSession::new(limits.clone(), None);
            server.on_message(hello(PROTOCOL_MAJOR)).expect("hello");
            server.welcome(1).expect("welcome");
            let e = server
                .on_message(Message::Settings { settings })
                .expect_err(what);
            assert!(e.to_peer().is_some(), "{what}: {e}");
            // A failed session queues nothing more.
            server.ready();
            server.results(side());
            assert_eq!(server.take_outbox().len(), 1, "only the welcome");
        }
    }

    #[test]
    fn the_peers_error_ends_the_session_with_its_text_made_printable() {
        let evil = Message::Error {
            message: "busy\n\x1b[2J".into(),
        };
        let mut server = ServerSession::new(Limits::default(), None);
        let e = server.on_message(evil.clone()).expect_err("error");
        assert_eq!(e.to_string(), "busy\\n\\u{1b}[2J");
        assert_eq!(e.to_peer(), None, "the peer gave up itself");
        let mut client = ClientSession::new(Settings::default(), Some((key("k"), [2; 32])));
        client
            .on_message(Message::AuthChallenge {
                nonce: auth::to_hex(&[1; 32]),
            })
            .expect("challenge");
        let e = client.on_message(evil).expect_err("error during auth");
        assert_eq!(e.to_string(), "server: busy\\n\\u{1b}[2J");
    }

    fn rx_timestamps_test() -> Settings {
        use crate::transport::settings::TransportSettings;
        use crate::transport::udp::settings::UdpSettings;
        Settings {
            transport: TransportSettings::Udp(UdpSettings {
                rx_timestamps: true,
                ..UdpSettings::default()
            }),
            ..Settings::default()
        }
    }

    fn welcome_listing(minor: u32, features: Option<Vec<String>>) -> Message {
        Message::Welcome {
            version: PROTOCOL_MAJOR,
            software: "fperf 9.9.9".into(),
            session: 1,
            minor,
            features,
        }
    }

    #[test]
    fn the_hello_lists_the_features_the_test_needs() {
        let mut client = ClientSession::new(rx_timestamps_test(), None);
        let outbox = client.take_outbox();
        let [Message::Hello {
            minor, features, ..
        }] = outbox.as_slice()
        else {
            panic!("one hello");
        };
        assert_eq!(*minor, PROTOCOL_MINOR);
        assert_eq!(
            features.as_deref(),
            Some(&["rx_timestamps".to_string()][..])
        );
    }

    #[test]
    fn a_server_lacking_a_needed_feature_is_refused_before_any_data_naming_both_versions() {
        let mut client = ClientSession::new(rx_timestamps_test(), None);
        client.take_outbox();
        let e = client
            .on_message(welcome_listing(3, Some(vec!["reverse".into()])))
            .expect_err("the server lacks rx_timestamps");
        let text = e.to_string();
        assert!(
            text.contains(
                "the server (fperf 9.9.9, protocol 16.3) does not support --rx-timestamps"
            ) && text.contains(&format!(
                "this client: fperf {}, protocol {PROTOCOL_MAJOR}.{PROTOCOL_MINOR}",
                crate::VERSION
            )),
            "{text}"
        );
        assert!(client.take_outbox().is_empty(), "no settings were sent");
        // The same test against a server that supports it, or against a first-minor
        // server that lists nothing (it supports every feature of minor 0).
        for features in [Some(vec!["rx_timestamps".into()]), None] {
            let mut client = ClientSession::new(rx_timestamps_test(), None);
            client.take_outbox();
            client
                .on_message(welcome_listing(0, features))
                .expect("supported");
            assert!(matches!(
                client.take_outbox().as_slice(),
                [Message::Settings { .. }]
            ));
        }
    }

    #[test]
    fn a_newer_minor_client_talks_and_an_unknown_feature_is_refused_naming_both_versions() {
        let newer = |features: Vec<String>| Message::Hello {
            version: PROTOCOL_MAJOR,
            software: "fperf 9.9.9".into(),
            minor: PROTOCOL_MINOR + 5,
            features: Some(features),
        };
        let mut server = ServerSession::new(Limits::default(), None);
        server
            .on_message(newer(vec!["rx_timestamps".into()]))
            .expect("hello");
        server.welcome(1).expect("welcome");
        assert!(matches!(
            server.take_outbox().as_slice(),
            [Message::Welcome { minor: PROTOCOL_MINOR, features: Some(f), .. }] if f.len() == Feature::ALL.len()
        ));
        server
            .on_message(Message::Settings {
                settings: rx_timestamps_test(),
            })
            .expect("a known feature");

        let mut server = ServerSession::new(Limits::default(), None);
        server
            .on_message(newer(vec!["warp_drive".into()]))
            .expect("hello");
        server.welcome(1).expect("welcome");
        let e = server
            .on_message(Message::Settings {
                settings: Settings::default(),
            })
            .expect_err("an unknown feature");
        let text = e.to_peer().expect("told to the client");
        assert!(
            text.contains("\"warp_drive\"")
                && text.contains(&format!("protocol {PROTOCOL_MAJOR}.{}", PROTOCOL_MINOR + 5))
                && text.contains(&format!("protocol {PROTOCOL_MAJOR}.{PROTOCOL_MINOR}")),
            "{text}"
        );
    }

    #[test]
    fn a_long_feature_list_is_refused() {
        let mut server = ServerSession::new(Limits::default(), None);
        let e = server
            .on_message(Message::Hello {
                version: PROTOCOL_MAJOR,
                software: "x".into(),
                minor: 1,
                features: Some(vec!["reverse".into(); super::super::MAX_FEATURES + 1]),
            })
            .expect_err("too many");
        assert!(e.to_string().contains("features"), "{e}");
    }

    /// Every message either end could be sent, well-formed or hostile.
    fn all_messages() -> Vec<Message> {
        vec![
            hello(PROTOCOL_MAJOR),
            hello(u32::MAX),
            Message::DataHello {
                version: PROTOCOL_MAJOR,
                session: u64::MAX,
                stream: u32::MAX,
                socket: u32::MAX,
            },
            Message::Welcome {
                version: PROTOCOL_MAJOR,
                software: "\u{0}".into(),
                session: 0,
                minor: 0,
                features: None,
            },
            Message::Settings {
                settings: Settings::default(),
            },
            Message::Settings {
                settings: Settings {
                    nstreams: u32::MAX,
                    ..Settings::default()
                },
            },
            Message::Ready,
            Message::Results { result: side() },
            Message::Error {
                message: "x".repeat(10_000),
            },
            Message::UdpSockets { addrs: Vec::new() },
            Message::UdpFinished {
                datagrams: u64::MAX,
                bytes: 0,
            },
            Message::ClientDataReceived,
            Message::Interval {
                result: interval(u32::MAX),
            },
            Message::Conf { version: 0 },
            Message::AuthChallenge { nonce: "zz".into() },
            Message::AuthChallenge {
                nonce: auth::to_hex(&[7; 32]),
            },
            Message::AuthResponse {
                nonce: auth::to_hex(&[7; 32]),
                mac: "00".repeat(32),
            },
            Message::AuthConfirm { mac: "é".into() },
        ]
    }

    /// Every sequence of three messages, fed to fresh machines of both kinds, with and
    /// without a key: no panic, an outbox of at most two messages, and nothing accepted
    /// after a failure.
    #[test]
    fn every_short_sequence_of_messages_is_handled_from_both_ends() {
        let all = all_messages();
        let keys = [None, Some(key("k"))];
        for a in &all {
            for b in &all {
                for c in &all {
                    for k in &keys {
                        let auth = k.clone().map(|k| (k, [3; 32]));
                        let mut server = ServerSession::new(Limits::default(), auth.clone());
                        let mut client = ClientSession::new(Settings::default(), auth);
                        client.take_outbox();
                        let (mut server_failed, mut client_failed) = (false, false);
                        for msg in [a, b, c] {
                            let s = server.on_message(msg.clone());
                            assert!(!(server_failed && s.is_ok()), "{msg:?} after a failure");
                            server_failed |= s.is_err();
                            if let Ok(ServerStep::Identified) = s {
                                server.welcome(1);
                            }
                            assert!(server.take_outbox().len() <= 2);
                            let c = client.on_message(msg.clone());
                            assert!(!(client_failed && c.is_ok()), "{msg:?} after a failure");
                            client_failed |= c.is_err();
                            assert!(client.take_outbox().len() <= 1);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn an_unidentified_connection_has_one_deadline_for_every_step() {
        let mut server = ServerSession::new(Limits::default(), Some((key("k"), [1; NONCE_LEN])));
        let wait = |s: &mut ServerSession, secs| s.wait_limit(Duration::from_secs(secs));
        assert_eq!(wait(&mut server, 0).expect("first"), Some(IDENTIFY_WITHIN));
        assert_eq!(
            server.on_message(hello(PROTOCOL_MAJOR)).expect("hello"),
            ServerStep::Continue
        );
        // Challenged 4 s after arrival: 1 s left for the response, not a new time-out.
        assert_eq!(
            wait(&mut server, 4).expect("challenged"),
            Some(Duration::from_secs(1))
        );
        assert!(matches!(
            wait(&mut server, 5),
            Err(SessionError::TooSlowToIdentify)
        ));
        let mut silent = ServerSession::new(Limits::default(), None);
        assert!(matches!(
            silent.timed_out(),
            SessionError::TooSlowToIdentify
        ));
        // Once identified, each wait is the driver's control time-out.
        let mut known = ServerSession::new(Limits::default(), None);
        known.on_message(hello(PROTOCOL_MAJOR)).expect("hello");
        assert_eq!(wait(&mut known, 60).expect("identified"), None);
        assert!(matches!(
            known.timed_out(),
            SessionError::Control(ControlError::Timeout)
        ));
    }

    #[test]
    fn a_client_refuses_intervals_and_figures_no_real_server_could_send() {
        let running = |interval_ms| {
            let settings = Settings {
                interval_ms,
                mb: 1,
                ..Settings::default()
            };
            let mut client = ClientSession::new(settings, None);
            let mut server = ServerSession::new(Limits::default(), None);
            open(&mut client, &mut server);
            client
        };
        let send = |client: &mut ClientSession, msg| client.on_message(msg);
        let impossible = |r: Result<ClientStep, SessionError>| {
            matches!(r, Err(SessionError::ImpossibleFigures(_)))
        };
        // Intervals nobody asked for.
        let mut quiet = running(None);
        let e = send(
            &mut quiet,
            Message::Interval {
                result: interval(0),
            },
        );
        assert!(e.is_err(), "{e:?}");
        // An interval twice, or going back.
        let mut client = running(Some(10));
        assert!(send(
            &mut client,
            Message::Interval {
                result: interval(3)
            }
        )
        .is_ok());
        assert!(impossible(send(
            &mut client,
            Message::Interval {
                result: interval(3)
            }
        )));
        // Faster than they happen: 19 reports within 50 ms of 10 ms intervals.
        let mut client = running(Some(10));
        for index in 0..18 {
            assert!(send(
                &mut client,
                Message::Interval {
                    result: interval(index)
                }
            )
            .is_ok());
        }
        assert!(client.check_pace(Duration::from_millis(50)).is_ok());
        assert!(send(
            &mut client,
            Message::Interval {
                result: interval(18)
            }
        )
        .is_ok());
        assert!(matches!(
            client.check_pace(Duration::from_millis(50)),
            Err(SessionError::TooManyReports)
        ));
        // More bytes than a 1 MB run moves, more lost than sent.
        let mut huge = side();
        huge.total.bytes_received = u64::MAX;
        assert!(impossible(send(
            &mut running(None),
            Message::Results { result: huge }
        )));
        let mut lossy = side();
        lossy.total.transport.udp.datagrams = Some(crate::stats::datagrams::DatagramCounts {
            peer_sent: 10,
            lost: 11,
            ..Default::default()
        });
        assert!(impossible(send(
            &mut running(None),
            Message::Results { result: lossy }
        )));
        let mut crowded = side();
        crowded.streams = (0..2)
            .map(|index| crate::results::StreamResult {
                index,
                local: String::new(),
                peer: String::new(),
                in_force: Default::default(),
                figures: figures(),
            })
            .collect();
        assert!(impossible(send(
            &mut running(None),
            Message::Results { result: crowded }
        )));
        assert!(send(&mut running(None), Message::Results { result: side() }).is_ok());
    }

    /// A server's session past `Ready` for a test of `settings`.
    fn running_server(settings: Settings) -> ServerSession {
        let mut client = ClientSession::new(settings, None);
        let mut server = ServerSession::new(Limits::default(), None);
        open(&mut client, &mut server);
        server.take_outbox();
        server
    }

    #[test]
    fn a_greeting_routes_data_for_the_first_stream_only_and_takes_no_settings() {
        let data = |stream| Message::DataHello {
            version: PROTOCOL_MAJOR,
            session: 9,
            stream,
            socket: 2,
        };
        let mut server = ServerSession::new(Limits::default(), None);
        assert_eq!(
            server.on_greeting(data(0)).expect("first stream"),
            Greeting::DataConnection {
                session: 9,
                stream: 0,
                socket: 2
            }
        );
        let mut server = ServerSession::new(Limits::default(), None);
        let e = server.on_greeting(data(1)).expect_err("another stream");
        assert_eq!(e.to_string(), "data connection for another stream's port");
        assert_eq!(e.to_peer().as_deref(), Some(e.to_string().as_str()));
        assert!(server.on_greeting(hello(PROTOCOL_MAJOR)).is_err(), "ended");

        let mut server = ServerSession::new(Limits::default(), None);
        assert_eq!(
            server.on_greeting(hello(PROTOCOL_MAJOR)).expect("hello"),
            Greeting::Identified
        );
        server.welcome(1).expect("welcome");
        let e = server
            .on_greeting(Message::Settings {
                settings: Settings::default(),
            })
            .expect_err("settings while greeting");
        assert_eq!(e.to_string(), "settings before welcome");
        assert_eq!(e.to_peer(), None, "only logged");
    }

    #[test]
    fn a_greeting_waits_what_is_left_of_its_deadline_then_the_control_time_out() {
        let control = Duration::from_secs(30);
        let mut server = ServerSession::new(Limits::default(), None);
        assert_eq!(
            server
                .next_wait(Duration::from_secs(2), control)
                .expect("left"),
            IDENTIFY_WITHIN - Duration::from_secs(2)
        );
        server.on_greeting(hello(PROTOCOL_MAJOR)).expect("hello");
        assert_eq!(
            server
                .next_wait(Duration::from_secs(60), control)
                .expect("known"),
            control
        );
        let mut late = ServerSession::new(Limits::default(), None);
        assert!(matches!(
            late.next_wait(IDENTIFY_WITHIN, control),
            Err(SessionError::TooSlowToIdentify)
        ));
    }

    #[test]
    fn a_welcome_needs_a_drawn_id_and_an_identified_client() {
        let mut server = ServerSession::new(Limits::default(), None);
        let e = server.welcome_drawn(Some(1)).expect_err("not identified");
        assert_eq!(e.to_string(), "the session is not ready for a welcome");
        assert_eq!(e.to_peer(), None);

        let mut server = ServerSession::new(Limits::default(), None);
        server.on_greeting(hello(PROTOCOL_MAJOR)).expect("hello");
        let e = server.welcome_drawn(None).expect_err("no id");
        assert_eq!(e.to_string(), "no entropy for a session id");
        assert_eq!(
            e.to_peer().as_deref(),
            Some("server cannot draw a session id")
        );
        assert!(server.take_outbox().is_empty(), "no welcome");

        let mut server = ServerSession::new(Limits::default(), None);
        server.on_greeting(hello(PROTOCOL_MAJOR)).expect("hello");
        assert_eq!(server.welcome_drawn(Some(7)).expect("welcome"), 7);
        assert!(matches!(
            server.take_outbox().as_slice(),
            [Message::Welcome { session: 7, .. }]
        ));
    }

    #[test]
    fn refusals_and_failures_are_worded_for_the_log_and_for_the_client() {
        let busy = SessionError::Refused("server busy: try again later".into());
        assert_eq!(busy.to_string(), "refused: server busy: try again later");
        assert_eq!(
            busy.to_peer().as_deref(),
            Some("server busy: try again later")
        );
        let failed = SessionError::TestFailed("stream 0: stopped".into());
        assert_eq!(failed.to_string(), "stream 0: stopped");
        assert_eq!(
            failed.to_peer().as_deref(),
            Some("server: stream 0: stopped")
        );
        let unsent = SessionError::ResultsUnsent(ControlError::Closed);
        assert!(unsent.to_string().starts_with("cannot send the results: "));
        let unsent = SessionError::MeshResultsUnsent(ControlError::Closed);
        assert!(unsent
            .to_string()
            .starts_with("cannot send the mesh test's results: "));
        assert_eq!(unsent.to_peer(), None);
    }

    #[test]
    fn a_request_is_a_test_or_a_mesh_test_and_nothing_else() {
        let mut server = ServerSession::new(Limits::default(), None);
        server.on_greeting(hello(PROTOCOL_MAJOR)).expect("hello");
        server.welcome(1).expect("welcome");
        assert_eq!(
            server
                .on_request(Message::Settings {
                    settings: Settings::default()
                })
                .expect("a test"),
            Request::Test(Box::default())
        );
        let mut server = ServerSession::new(Limits::default(), None);
        let e = server
            .on_request(hello(PROTOCOL_MAJOR))
            .expect_err("a hello is no request");
        assert_eq!(
            e.to_string(),
            "the session took an unexpected step: Identified"
        );
    }

    #[test]
    fn tests_in_parallel_report_in_one_piece_and_take_the_server_alone_past_the_base_port() {
        let accepted = |parallel, nstreams| {
            let mut server = ServerSession::new(Limits::default(), None).in_parallel(parallel);
            server.on_greeting(hello(PROTOCOL_MAJOR)).expect("hello");
            server.welcome(1).expect("welcome");
            server
                .on_request(Message::Settings {
                    settings: Settings {
                        nstreams,
                        ..Settings::default()
                    },
                })
                .expect("a test");
            server
        };
        assert!(accepted(true, 2).needs_server_alone());
        assert!(!accepted(true, 1).needs_server_alone());
        assert!(!accepted(false, 2).needs_server_alone());
        assert!(accepted(true, 1).reports_in_one_piece());
        assert!(!accepted(false, 1).reports_in_one_piece());
    }

    #[test]
    fn the_client_hears_its_data_was_received_when_its_last_stream_ends_unless_stopped() {
        let two = Settings {
            nstreams: 2,
            ..Settings::default()
        };
        let mut server = running_server(two.clone());
        server.stream_ended(0, false);
        assert!(server.take_outbox().is_empty(), "one stream still open");
        server.stream_ended(1, false);
        assert_eq!(server.take_outbox(), [Message::ClientDataReceived]);
        server.stream_ended(1, false);
        assert!(server.take_outbox().is_empty(), "said once");

        let mut stopped = running_server(two);
        stopped.stream_ended(0, false);
        stopped.stream_ended(1, true);
        assert!(stopped.take_outbox().is_empty(), "told why instead");

        let mut reverse = running_server(Settings {
            workload: Workload::Reverse,
            ..Settings::default()
        });
        reverse.stream_ended(0, false);
        assert!(reverse.take_outbox().is_empty(), "the client sent nothing");
    }

    #[test]
    fn a_test_short_of_its_announced_bytes_is_logged_counting_lost_datagrams_as_sent() {
        let settings = Settings {
            nstreams: 2,
            mb: 1,
            ..Settings::default()
        };
        let server = running_server(settings.clone());
        let full = StreamStats {
            bytes_received: crate::settings::MB,
            ..StreamStats::default()
        };
        let mut short = StreamStats {
            bytes_received: crate::settings::MB - 10 * u64::from(settings.pktsize),
            ..StreamStats::default()
        };
        assert_eq!(server.ended_early([(0, &full), (1, &full)]), None);
        assert_eq!(
            server.ended_early([(0, &full), (1, &short)]).as_deref(),
            Some(
                format!(
                    "the client ended the test early: {} of {} bytes received (interrupted or \
                     gone); figures cover what was received",
                    2 * crate::settings::MB - 10 * u64::from(settings.pktsize),
                    2 * crate::settings::MB
                )
                .as_str()
            )
        );
        short.datagrams.lost = 10;
        assert_eq!(server.ended_early([(0, &full), (1, &short)]), None);
        let timed = running_server(Settings {
            time_ms: Some(1000),
            ..Settings::default()
        });
        assert_eq!(timed.ended_early([(0, &StreamStats::default())]), None);
    }

    #[test]
    fn the_clients_answer_to_the_results_is_its_figures_or_nothing() {
        let after_results = || {
            let mut server = running_server(Settings::default());
            server.results(side());
            server.take_outbox();
            server
        };
        let mine = Box::new(SideResult {
            role: Role::Client,
            ..*side()
        });
        let answer = after_results()
            .on_client_answer(Ok(Message::ClientResults {
                result: mine.clone(),
            }))
            .expect("figures");
        assert_eq!(answer, Some((Settings::default(), mine)));
        assert_eq!(
            after_results()
                .on_client_answer(Err(ControlError::Closed))
                .expect("closed"),
            None
        );
        let e = after_results()
            .on_client_answer(Err(ControlError::Timeout))
            .expect_err("silent");
        assert!(e.to_string().starts_with("its figures: "), "{e}");
        assert_eq!(e.to_peer(), None);
    }

    /// A client's run past `Connect`, started now, of a test with 10 ms intervals.
    fn client_run() -> (ClientRun, Instant) {
        let settings = Settings {
            interval_ms: Some(10),
            ..Settings::default()
        };
        let mut client = ClientSession::new(settings, None);
        let mut server = ServerSession::new(Limits::default(), None);
        open(&mut client, &mut server);
        let now = Instant::now();
        (ClientRun::new(client, now), now)
    }

    #[test]
    fn the_control_reader_reads_on_only_past_intervals_and_the_confirmation() {
        let more = |msg| ClientSession::more_follows(&msg);
        assert!(more(Ok(Message::Interval {
            result: interval(0)
        })));
        assert!(more(Ok(Message::ClientDataReceived)));
        assert!(!more(Ok(Message::Results { result: side() })));
        assert!(!more(Err(ControlError::Closed)));
    }

    #[test]
    fn a_run_gathers_the_servers_intervals_and_ends_with_its_figures() {
        let (mut run, start) = client_run();
        let later = start + Duration::from_millis(15);
        let passed = run.take(
            later,
            Ok(Message::Interval {
                result: interval(0),
            }),
        );
        assert_eq!(passed.map(|i| i.index), Some(0));
        assert!(run.take(later, Ok(Message::ClientDataReceived)).is_none());
        assert!(run.take(start, Ok(Message::ClientDataReceived)).is_none());
        assert_eq!(run.client_data_received(), Some(later), "the first stands");
        assert!(!run.has_last_word());
        run.take(later, Ok(Message::Results { result: side() }));
        assert!(run.has_last_word() && !run.server_misbehaved());
        let (end, result) = run.results(Duration::from_secs(1)).expect("figures");
        assert_eq!(end, later);
        assert_eq!(
            result.intervals.len(),
            1,
            "the server's intervals go with it"
        );
        let answer = run.answer(&SideResult {
            role: Role::Client,
            intervals: vec![*interval(0)],
            ..*side()
        });
        assert!(
            matches!(answer.as_slice(), [Message::ClientResults { result }] if result.intervals.is_empty()),
            "{answer:?}"
        );
    }

    #[test]
    fn a_run_tells_a_server_that_gave_up_from_one_that_misbehaved() {
        let (mut run, start) = client_run();
        run.take(start, Err(ControlError::Peer("over --max-mb".into())));
        assert!(!run.server_misbehaved(), "judged once the streams end");
        assert!(run.take_misbehaviour().is_none());
        assert_eq!(run.take_servers_reason().as_deref(), Some("over --max-mb"));

        let (mut run, start) = client_run();
        run.take(start, Ok(Message::Ready));
        run.take(start, Err(ControlError::Closed));
        assert!(run.server_misbehaved(), "the first word stands");
        let e = run.take_misbehaviour().expect("out of place");
        assert!(e.to_string().contains("ready"), "{e}");
    }

    #[test]
    fn a_run_without_the_servers_figures_says_why() {
        let (mut run, _) = client_run();
        let e = run.results(Duration::from_secs(30)).expect_err("none");
        assert_eq!(
            e.to_string(),
            "the server did not confirm the end of the test within 30s"
        );
        let (mut run, start) = client_run();
        run.take(start, Err(ControlError::Closed));
        let e = run.results(Duration::from_secs(30)).expect_err("closed");
        assert_eq!(
            e.to_string(),
            "the server closed the control connection before sending its results (it stopped \
             or was killed)"
        );
    }
}
