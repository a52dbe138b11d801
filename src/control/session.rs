//! The control session as two state machines that do no I/O: [`ServerSession`] and
//! [`ClientSession`].
//!
//! Each is fed the peer's messages one at a time ([`ServerSession::on_message`],
//! [`ClientSession::on_message`]) and says what happened as a step; what it wants sent
//! waits in its outbox ([`ServerSession::take_outbox`], [`ClientSession::take_outbox`]),
//! at most a few messages, never growing with what the peer sends. The drivers
//! (`server.rs`, `client.rs`) own the socket, the deadlines and the randomness: nonces
//! and session ids come in as arguments, so the machines are tested in memory against
//! scripted peers.
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
use crate::features::{self, Feature};
use crate::limits::{LimitError, Limits};
use crate::peer_text::printable;
use crate::results::{IntervalResult, SideResult};
use crate::settings::{Settings, SettingsError};
use std::time::Duration;
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

    /// The test is over: its figures end the session.
    pub fn results(&mut self, result: Box<SideResult>) {
        if matches!(self.state, ServerState::Running) {
            self.outbox.push(Message::Results { result });
            self.state = ServerState::ResultsSent;
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
                    .settings
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
                match &self.mesh_peer {
                    Some(peer) => {
                        self.outbox.push(Message::MeshTest {
                            peer: peer.clone(),
                            settings,
                        });
                        self.state = ClientState::AwaitMeshResult;
                    }
                    None => {
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
            (ClientState::GotResults | ClientState::Ended, other) => {
                Err(ControlError::unexpected("nothing", &other).into())
            }
        }
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
        for _ in 0..4 {
            for msg in client.take_outbox() {
                match server.on_message(msg) {
                    Ok(ServerStep::Identified) => {
                        server.welcome(7);
                    }
                    Ok(ServerStep::Continue) => {}
                    other => return (client, other),
                }
            }
            for msg in server.take_outbox() {
                client.on_message(msg).expect("client step");
            }
        }
        panic!("no mesh test asked for")
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
        lossy.total.datagrams = Some(crate::stats::datagrams::DatagramCounts {
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
                congestion: None,
                rcvlowat: None,
                rx_nap_us: None,
                figures: figures(),
            })
            .collect();
        assert!(impossible(send(
            &mut running(None),
            Message::Results { result: crowded }
        )));
        assert!(send(&mut running(None), Message::Results { result: side() }).is_ok());
    }
}
