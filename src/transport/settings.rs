//! Which transport a run uses, with the options only it has.

use crate::transport::facts::Facts;
use crate::transport::labels::{HeaderLabels, Samples};
use crate::transport::rdma::settings::RdmaSettings;
use crate::transport::shape::RunShape;
use crate::transport::sockets::SocketSettings;
use crate::transport::tcp::settings::TcpSettings;
use crate::transport::udp::settings::UdpSettings;
use serde::{Deserialize, Serialize};

/// The transport of the data streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "protocol")]
pub enum Protocol {
    Tcp,
    Udp,
    Rdma,
}

impl Protocol {
    /// The name used in reports ("TCP", "UDP", "RDMA").
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Rdma => "RDMA",
        }
    }
}

/// One transport's own settings: the options only it has, with their defaults, checks
/// and tuning. Which one it is names the protocol of the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize)]
#[serde(tag = "protocol", rename_all = "lowercase")]
#[schemars(rename = "transport_settings")]
pub enum TransportSettings {
    Tcp(TcpSettings),
    Udp(UdpSettings),
    Rdma(RdmaSettings),
}

impl TransportSettings {
    /// The transport of a test whose only choices are TCP or UDP, both ends' socket
    /// buffers (`window`; `None`: the defaults) and TCP's own options in `tcp`, as a mesh
    /// pair's or an exporter probe's. `None` when UDP is asked for with one of TCP's
    /// options.
    pub fn over_sockets(
        udp: bool,
        window: Option<u32>,
        tcp: TcpSettings,
    ) -> Option<TransportSettings> {
        let sockets = SocketSettings {
            window,
            ..SocketSettings::default()
        };
        if !udp {
            return Some(TransportSettings::Tcp(TcpSettings { sockets, ..tcp }));
        }
        (tcp == TcpSettings::default()).then(|| {
            TransportSettings::Udp(UdpSettings {
                sockets,
                ..UdpSettings::default()
            })
        })
    }

    /// `protocol`'s settings, every option at its default.
    pub fn default_for(protocol: Protocol) -> TransportSettings {
        match protocol {
            Protocol::Tcp => TransportSettings::Tcp(TcpSettings::default()),
            Protocol::Udp => TransportSettings::Udp(UdpSettings::default()),
            Protocol::Rdma => TransportSettings::Rdma(RdmaSettings::default()),
        }
    }

    /// The protocol these settings are for.
    pub fn protocol(&self) -> Protocol {
        match self {
            TransportSettings::Tcp(_) => Protocol::Tcp,
            TransportSettings::Udp(_) => Protocol::Udp,
            TransportSettings::Rdma(_) => Protocol::Rdma,
        }
    }

    /// TCP's own options, in a TCP run.
    pub fn tcp(&self) -> Option<&TcpSettings> {
        match self {
            TransportSettings::Tcp(tcp) => Some(tcp),
            _ => None,
        }
    }

    /// `--window` when it sizes TCP data connections (UDP's apply to its datagram
    /// sockets).
    pub fn tcp_window(&self) -> Option<u32> {
        self.tcp().and_then(|tcp| tcp.sockets.window)
    }

    /// The socket options, for the transports that move data through kernel sockets.
    pub fn sockets(&self) -> Option<&SocketSettings> {
        match self {
            TransportSettings::Tcp(tcp) => Some(&tcp.sockets),
            TransportSettings::Udp(udp) => Some(&udp.sockets),
            TransportSettings::Rdma(_) => None,
        }
    }

    /// Most bytes of packet buffers either end of the run allocates, with `copies`
    /// packets per socket (an echo holds two).
    pub fn buffer_bytes(&self, run: &RunShape, copies: u64) -> u64 {
        match self {
            TransportSettings::Tcp(tcp) => tcp.buffer_bytes(run, copies),
            TransportSettings::Udp(udp) => udp.buffer_bytes(run, copies),
            TransportSettings::Rdma(rdma) => rdma.buffer_bytes(run),
        }
    }

    /// Latency distributions a stream records beyond its own send, receive and submit
    /// ones: UDP's `--rx-timestamps` adds network and application time.
    pub fn extra_distributions(&self) -> u64 {
        match self {
            TransportSettings::Udp(udp) if udp.rx_timestamps => 2,
            _ => 0,
        }
    }

    /// What one sample of each latency figure covers in a run shaped `run`.
    pub fn samples(&self, run: &RunShape) -> Samples {
        match self {
            TransportSettings::Tcp(tcp) => tcp.samples(run),
            TransportSettings::Udp(udp) => udp.samples(run),
            TransportSettings::Rdma(rdma) => rdma.samples(run),
        }
    }

    /// What a report header says of the transport's options (RDMA's are facts of its
    /// own, see [`TransportSettings::facts`]).
    pub fn labels(&self) -> HeaderLabels {
        match self {
            TransportSettings::Tcp(tcp) => tcp.labels(),
            TransportSettings::Udp(udp) => udp.labels(),
            TransportSettings::Rdma(_) => HeaderLabels::default(),
        }
    }

    /// What the transport says of the run it set up, as the outputs read it: RDMA's
    /// programming interface and device.
    pub fn facts(&self) -> Option<&dyn Facts> {
        match self {
            TransportSettings::Rdma(rdma) => Some(rdma),
            TransportSettings::Tcp(_) | TransportSettings::Udp(_) => None,
        }
    }
}
