//! fperf: measures the bandwidth and latency of TCP, UDP and RDMA between two hosts.
//!
//! The library holds everything but the command line:
//! - [`stream`]: the STREAM abstraction (one type for both ends, `nsockets` sockets,
//!   sender threads and queues) and its transports;
//! - [`control`]: the versioned, length-prefixed control protocol;
//! - [`settings`]: the validated run settings both ends agree on;
//! - [`stats`]: latency histograms and counters recorded on the hot path;
//! - [`results`]: the typed results of a run, whole and per interval;
//! - [`report`]: their human-readable rendering;
//! - [`engine`]: the data loops (send, receive) that both roles run;
//! - [`interval`]: `--time`, `-i` and `--omit`: slicing a run into intervals;
//! - [`sysinfo`]: host, CPU, kernel, CPU time and TCP_INFO facts;
//! - [`json`], [`csv`]: the machine-readable outputs; [`sweep`]: `--sweep` specs;
//!   [`plot`]: `--plot` pictures;
//! - [`server`] and [`client`]: the two roles that drive a run;
//! - [`limits`], [`auth`] and [`sessions`]: what a server allows, its shared-key check,
//!   and which tests it runs at once.
//!
//! The library never prints to stdout on its own, never exits the process and never
//! panics on input from a peer: every byte from the network is untrusted.

pub mod auth;
pub mod client;
pub mod control;
pub mod csv;
pub mod engine;
pub mod interval;
pub mod json;
pub mod limits;
pub mod plot;
pub mod report;
pub mod results;
pub mod server;
pub mod sessions;
pub mod settings;
pub mod stats;
pub mod stream;
pub mod sweep;
pub mod sysinfo;
pub mod transport;
pub mod units;

/// The fperf version, as reported to peers and in reports.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
