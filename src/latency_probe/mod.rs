//! Latency probes of `--under-load`: small UDP datagrams the client sends at a fixed
//! rate on a connection of their own, which the server echoes back with its own receive
//! and send times. [`datagram`] is their layout (no I/O); [`echo`] is the server's end;
//! [`phases`], the phases they are measured in, as `fperf mesh` asks for them and hears
//! their figures.
//!
//! A probe session is asked for on a control connection of its own (the
//! [`PROBE_ECHO`] feature); it is never a reflector: the server echoes only
//! datagrams of the fixed size, with the magic and the session's random token, and only
//! to the control connection's peer address, for a bounded time.

pub mod datagram;
pub mod echo;
pub mod phases;

use crate::options::Feature;
use std::time::Duration;

/// What a probe session needs of the server: peers of the protocol's minor 3 and later.
pub const PROBE_ECHO: Feature = Feature::new("probe_echo", "--under-load").since(3);

/// What a mesh coordinator needs of a server to have it run the phases of latency under
/// load towards another server: peers of the protocol's minor 3 and later.
pub const MESH_UNDER_LOAD: Feature = Feature::new("mesh_under_load", "--under-load").since(3);

/// The features of latency probing.
pub const FEATURES: [Feature; 2] = [PROBE_ECHO, MESH_UNDER_LOAD];

/// The longest echo a client may ask for, in seconds.
pub const MAX_ECHO_SECS: u32 = 3600;

/// How long a probe session echoes past the time asked for: the client's last probes
/// and the phases' set-up time.
pub const ECHO_GRACE: Duration = Duration::from_secs(10);

/// Most probe sessions a server runs at once; beyond them a client hears "server busy".
pub const MAX_PROBE_SESSIONS: usize = 8;
