//! What a server is configured with, and what it tells its caller: shared by its front
//! ends (fperf's own protocol and iperf3's).

use crate::auth::AuthKey;
use crate::control::keepalive::ControlKeepalive;
use crate::family::IpFamily;
use crate::limits::Limits;
use crate::results::{IntervalResult, SideResult};
use crate::settings::Settings;
use std::net::IpAddr;
use std::time::Duration;

/// How the server listens and how patient it is.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Address to listen on; `None` listens on every address of `family`.
    pub bind: Option<IpAddr>,
    /// The family listened on without `bind` (`-4`, `-6`): both by default.
    pub family: IpFamily,
    /// Base port: control and stream 0; stream `i` uses `port + i` (TCP with a window:
    /// see [`transport::tcp::data_port_offset`]).
    pub port: u16,
    /// Longest wait for a client's next control message during setup.
    pub control_timeout: Duration,
    /// TCP keepalive on each test's control connection (`--cntl-ka`), if asked for.
    pub control_keepalive: Option<ControlKeepalive>,
    /// Longest silence on the data streams before the test is abandoned.
    pub idle_timeout: Duration,
    /// What one test may ask for.
    pub limits: Limits,
    /// The shared key clients must prove they hold, if any.
    pub auth: Option<AuthKey>,
    /// Most tests run at once (`--parallel`); see [`crate::sessions`].
    pub parallel: usize,
    /// Port for unmodified iperf3 clients (`--iperf3-port`), if any; see
    /// [`crate::iperf3`].
    pub iperf3_port: Option<u16>,
    /// Whether a mesh coordinator holding the key may ask this server for tests towards
    /// other fperf servers (`--allow-mesh`); never without a key.
    pub allow_mesh: bool,
    /// Serve one test, then stop (`-1`, as iperf3's).
    pub one_off: bool,
    /// Serve UDP tests through AF_XDP on this interface and queue (`--xdp`).
    pub xdp: Option<crate::transport::xdp::XdpDevice>,
}

/// Most connections from one address at a time that have not yet said what they are:
/// strangers cannot crowd out a client's own connections.
pub const MAX_PENDING_PER_SOURCE: usize = 32;
/// Most connections in all at a time that have not yet said what they are: a flood of
/// silent connections costs at most this many threads and descriptors, each for at most
/// [`crate::control::session::IDENTIFY_WITHIN`].
pub const MAX_PENDING_GREETERS: usize = 128;

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: None,
            family: IpFamily::Any,
            port: crate::settings::DEFAULT_PORT,
            control_timeout: Duration::from_secs(10),
            control_keepalive: None,
            idle_timeout: Duration::from_secs(10),
            limits: Limits::default(),
            auth: None,
            parallel: 1,
            iperf3_port: None,
            allow_mesh: false,
            one_off: false,
            xdp: None,
        }
    }
}

/// What the server tells its caller.
#[derive(Debug)]
pub enum ServerEvent {
    /// Waiting for the next client (`Server listening on ...`).
    Listening,
    /// A test was set up: its settings and the client's data address.
    Started {
        settings: Settings,
        from: String,
        /// What the server's sockets ended up with.
        in_force: crate::transport::figures::TransportInForce,
    },
    /// A reporting interval (`-i`) of the running test ended; the server's figures.
    Interval {
        settings: Settings,
        result: Box<IntervalResult>,
        /// With tests in parallel (`--parallel`), the client's data address: the
        /// test's report, which names it, comes only at the test's end.
        client: Option<String>,
    },
    /// A test ended; the server's figures.
    Finished {
        settings: Settings,
        result: Box<SideResult>,
    },
    /// After a test: the client's own figures (what the other end saw).
    ClientFigures {
        settings: Settings,
        result: Box<SideResult>,
    },
    /// A client or test failed; the server goes on.
    ClientError { peer: String, error: String },
    /// The caller fell behind: these interval reports and client errors came while
    /// too many waited for it, and were counted instead of kept.
    LeftOut { intervals: u64, errors: u64 },
    /// A mesh coordinator's test towards `peer` ended; this server's figures (as the
    /// test's client).
    MeshTest {
        coordinator: String,
        peer: String,
        settings: Settings,
        result: Box<SideResult>,
    },
}
