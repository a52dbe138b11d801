//! fperf: measures the bandwidth and latency of TCP, UDP and RDMA between two hosts.
//!
//! The library holds everything but the command line:
//! - [`stream`]: the STREAM abstraction (one type for both ends, `nsockets` sockets,
//!   sender threads and queues); [`transport`]: each transport's STREAM, options and
//!   set-up between the two ends;
//! - [`control`]: the versioned, length-prefixed control protocol;
//! - [`settings`]: the validated run settings both ends agree on;
//! - [`stats`]: latency histograms and counters recorded on the hot path;
//! - [`percentiles`]: `--percentiles`, the percentiles each latency is reported at;
//! - [`results`]: the typed results of a run, whole and per interval;
//! - [`engine`]: the data loops (send, receive) that both roles run;
//! - [`interval`]: `--time`, `-i` and `--omit`: slicing a run into intervals;
//! - [`sysinfo`]: host, CPU, kernel, CPU time and TCP_INFO facts;
//! - [`output`]: every output of a run, one sink each (human text, JSON, JSON lines,
//!   CSV, plot), fed the same events, and what renders them: the human-readable report,
//!   the JSON documents, the CSV rows and the pictures; [`sweep`]: `--sweep` specs;
//! - [`server`] and [`client`]: the two roles that drive a run; [`iperf3`]: iperf3's
//!   protocol, so that an fperf server serves unmodified iperf3 clients and an fperf
//!   client runs against an iperf3 server;
//! - [`limits`], [`auth`] and [`sessions`]: what a server allows, its shared-key check,
//!   and which tests it runs at once; [`peer_text`]: a peer's text made safe to show;
//! - [`exporter`]: a Prometheus exporter that runs a client's test for each scrape;
//! - [`mesh`]: measuring between many servers, each pair's test run by the sending
//!   host's server at a coordinator's request.
//!
//! The library never prints to stdout on its own, never exits the process and never
//! panics on input from a peer: every byte from the network is untrusted.
//!
//! # A server and a client from Rust
//!
//! ```
//! use fperf::client::{self, ClientConfig};
//! use fperf::server::{Server, ServerConfig};
//! use fperf::settings::Settings;
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::sync::Arc;
//!
//! # fn main() -> anyhow::Result<()> {
//! // A server on a port the kernel picks, serving from a thread of its own.
//! let server = Server::bind(ServerConfig {
//!     bind: Some("127.0.0.1".parse()?),
//!     port: 0,
//!     ..ServerConfig::default()
//! })?;
//! let port = server.local_addr()?.port();
//! let stop = Arc::new(AtomicBool::new(false));
//! let serving = {
//!     let stop = stop.clone();
//!     std::thread::spawn(move || server.run(&stop, &mut |_event| {}))
//! };
//!
//! // A client sends 16 MB over one TCP stream; both ends' figures come back.
//! let settings = Settings { mb: 16, ..Settings::default() };
//! let config = ClientConfig::new("127.0.0.1", port, settings);
//! let outcome = client::run(&config, Arc::new(AtomicBool::new(false)), &mut |_streams| {})?;
//! assert_eq!(outcome.client.total.bytes_sent, 16 << 20);
//! assert_eq!(outcome.server.total.bytes_received, 16 << 20);
//! println!("{:.1} Gbit/s", outcome.server.total.bytes_received as f64 * 8.0
//!     / outcome.server.total.secs() / 1e9);
//!
//! stop.store(true, Ordering::Relaxed);
//! serving.join().expect("server thread")?;
//! # Ok(())
//! # }
//! ```
//!
//! # The STREAM as a socket
//!
//! The socket STREAMs ([`transport::tcp::stream::TcpStream`],
//! [`transport::udp::stream::UdpStream`]) are read and written with plain `std::io`, and
//! give their first socket's fd:
//!
//! ```
//! use fperf::stream::Timeout;
//! use fperf::transport::stream::{Stream, StreamOptions};
//! use fperf::transport::tcp::stream::TcpStream;
//! use std::io::{Read, Write};
//! use std::os::fd::AsRawFd;
//!
//! # fn main() -> std::io::Result<()> {
//! let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
//! let addr = listener.local_addr()?;
//! let passive = std::thread::spawn(move || -> std::io::Result<Vec<u8>> {
//!     let mut stream = TcpStream::accept(&listener, StreamOptions::default())?;
//!     let mut got = Vec::new();
//!     stream.read_to_end(&mut got)?;
//!     Ok(got)
//! });
//!
//! let mut active = TcpStream::connect(addr, StreamOptions::default())?;
//! assert!(active.as_raw_fd() >= 0);
//! active.write_all(b"hello over a STREAM")?;
//! active.finish_sending(Timeout::Forever)?; // end of stream for the reader
//! assert_eq!(passive.join().expect("reader thread")?, b"hello over a STREAM");
//! # Ok(())
//! # }
//! ```

pub mod auth;
pub mod client;
pub mod control;
pub mod engine;
pub mod exporter;
pub mod family;
pub mod features;
pub mod interval;
pub mod iperf3;
pub mod latency_probe;
pub mod limits;
pub mod log_limit;
pub mod mesh;
pub mod options;
pub mod output;
pub mod peer_text;
pub mod pending;
pub mod percentiles;
pub mod results;
pub mod server;
pub mod sessions;
pub mod settings;
pub mod stats;
pub mod stream;
pub mod sweep;
pub mod sysinfo;
pub mod transport;
pub mod under_load;
pub mod units;
pub mod workload;

/// The fperf version, as reported to peers and in reports.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What `fperf --version` prints after the name: the software's version and the
/// control protocol's (a test checks that it names [`control::PROTOCOL_MAJOR`] and
/// [`control::PROTOCOL_MINOR`]).
pub const VERSION_TEXT: &str = concat!(env!("CARGO_PKG_VERSION"), " (protocol 16.3)");

#[cfg(test)]
mod tests {
    #[test]
    fn the_version_text_names_this_protocol() {
        assert_eq!(
            super::VERSION_TEXT,
            format!(
                "{} (protocol {}.{})",
                super::VERSION,
                super::control::PROTOCOL_MAJOR,
                super::control::PROTOCOL_MINOR
            )
        );
    }
}
