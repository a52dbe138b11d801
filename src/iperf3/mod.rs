//! iperf3's protocol, spoken by fperf: an fperf server serves unmodified iperf3 clients
//! on a port of their own ([`server`]), and an fperf client runs against an unmodified
//! iperf3 server ([`client`]), both over the same STREAMs, data loops, limits and
//! reports as fperf's own tests. [`wire`] holds the protocol's facts (cookie, states,
//! messages, error codes) and [`params`] what an iperf3 client may ask for.

pub mod client;
pub mod params;
pub mod results;
pub(crate) mod server;
pub mod udp;
pub mod wire;
