//! AF_XDP's option, declared once (see [`crate::options`]): a UDP option, since an
//! AF_XDP run is a UDP run whose datagrams this end moves past the kernel's network
//! stack; the peer sees the same datagrams either way.

use super::XdpDevice;
use crate::options::{Iperf3, Mesh, Takes, TestOption};
use crate::transport::udp::settings::UdpSettings;

/// Every AF_XDP option, in the order the help lists them.
pub static OPTIONS: [TestOption<UdpSettings>; 1] = [TestOption {
    id: "xdp",
    long: "xdp",
    short: None,
    alias: None,
    takes: Takes::Value("IFACE[:QUEUE]"),
    choices: &[],
    conflicts: &[],
    help: "This end sends and receives its UDP datagrams through an AF_XDP socket on queue \
           QUEUE (default 0) of network interface IFACE, past the kernel's network stack; an \
           XDP program takes only the test's own datagrams, and everything else on IFACE goes \
           on as before. The client's with -u; the server's (fperf -s --xdp IFACE) serves \
           its UDP tests so. Needs root (or CAP_NET_ADMIN and CAP_BPF); one stream of one \
           socket. See docs/xdp.md.",
    mesh: Mesh::No,
    probe: None,
    iperf3: Iperf3::No,
    what: "a network interface, optionally :QUEUE",
    set: |udp, text| {
        udp.xdp = Some(XdpDevice::parse(text)?);
        Ok(())
    },
}];
