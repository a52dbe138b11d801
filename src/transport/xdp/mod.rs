//! UDP over AF_XDP (`--xdp IFACE[:QUEUE]`): a variant of the UDP transport's data path,
//! not a transport of its own. Set-up is UDP's (the control connection per stream, the
//! kernel's UDP sockets bound and connected as ever, holding the ports), but this end
//! then moves its datagrams through an AF_XDP socket on one queue of the interface: it
//! builds and parses the Ethernet, IP and UDP headers itself ([`frame`]), an XDP
//! program steers only the flow's datagrams to the socket ([`program`]), and the next
//! hop's MAC address comes from the kernel's neighbour table ([`neighbour`]). The
//! datagrams are the same as the kernel's UDP sends (see
//! [`crate::transport::udp::wire`]), so either end may use AF_XDP, or both, and the
//! peer cannot tell: no protocol feature is needed.
//!
//! The client's `--xdp` is a UDP option that stays on the client (the server's
//! interfaces are its own); the server's is its own option, `fperf -s --xdp IFACE`.

pub mod facts;
pub mod frame;
pub mod neighbour;
pub mod options;
pub mod program;
pub mod socket;
pub mod stream;

use crate::transport::shape::RunShape;
use anyhow::{bail, Result};
use facts::XdpInForce;
use frame::Flow;
use socket::XskSocket;
use std::ffi::CString;
use std::io;
use std::net;
use std::time::Duration;
use stream::XdpParts;

/// Where AF_XDP runs: a network interface and one of its queues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XdpDevice {
    pub iface: String,
    pub queue: u32,
}

impl XdpDevice {
    /// `IFACE` or `IFACE:QUEUE`.
    pub fn parse(text: &str) -> Result<XdpDevice, String> {
        let (iface, queue) = match text.rsplit_once(':') {
            Some((iface, queue)) => {
                let queue = queue
                    .parse()
                    .map_err(|_| format!("the queue of {text} must be a number"))?;
                (iface, queue)
            }
            None => (text, 0),
        };
        if iface.is_empty() || iface.len() >= libc::IFNAMSIZ || iface.contains(['/', ' ']) {
            return Err(format!("{iface:?} is not a network interface's name"));
        }
        Ok(XdpDevice {
            iface: iface.to_string(),
            queue,
        })
    }
}

impl std::fmt::Display for XdpDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.iface, self.queue)
    }
}

/// Refuses a run AF_XDP cannot carry: one socket on one queue is one stream of one
/// socket.
pub fn check(run: &RunShape) -> Result<()> {
    if run.nstreams != 1 || run.nsockets != 1 || run.flows {
        bail!("--xdp runs one stream of one socket: not with -P, -n or --flows (nor --bidir)");
    }
    Ok(())
}

/// The index of interface `iface`.
fn ifindex(iface: &str) -> io::Result<u32> {
    let name = CString::new(iface)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name"))?;
    // SAFETY: `name` is a valid C string for the call.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("--xdp: there is no network interface {iface}"),
        ));
    }
    Ok(index)
}

/// How a stream's datagrams go over AF_XDP.
pub struct XdpPlan {
    pub stream: u32,
    pub ack_timeout: Duration,
    /// Frames sent between two wake-ups of the kernel (bulk).
    pub batch: usize,
    pub busy_poll: bool,
}

/// Sets up AF_XDP on `device` for the flow of `port`, a kernel UDP socket bound and
/// connected to the peer: the next hop's MAC, the AF_XDP socket, and the XDP program
/// steering the flow to it, attached last, once the socket can take the datagrams.
pub fn open(device: &XdpDevice, port: net::UdpSocket, plan: &XdpPlan) -> io::Result<XdpParts> {
    let local = crate::stream::canonical(port.local_addr()?);
    let remote = crate::stream::canonical(port.peer_addr()?);
    let index = ifindex(&device.iface)?;
    let flow = Flow {
        local,
        remote,
        local_mac: neighbour::interface_mac(&device.iface)?,
        next_hop_mac: neighbour::next_hop_mac(&device.iface, index, remote)?,
    };
    let map = program::XskMap::create(device.queue)?;
    let prog = program::load(&program::instructions(local, remote, map.as_raw_fd()))?;
    let xsk = XskSocket::open(&device.iface, device.queue, plan.busy_poll)?;
    map.insert(device.queue, xsk.fd())?;
    let attached = program::attach(prog, map, index, &device.iface)?;
    let in_force = XdpInForce {
        xdp_queue: Some(device.to_string()),
        xdp_attach: Some(attached.mode.name().to_string()),
        xdp_copy: Some(
            if xsk.bound.zero_copy {
                "zero-copy"
            } else {
                "copy"
            }
            .to_string(),
        ),
        xdp_need_wakeup: Some(xsk.bound.need_wakeup),
        xdp_busy_poll: Some(xsk.bound.busy_poll),
        xdp_bad_checksums: None,
    };
    Ok(XdpParts {
        xsk,
        flow,
        attached,
        port,
        in_force,
        stream: plan.stream,
        ack_timeout: plan.ack_timeout,
        batch: plan.batch.max(1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_is_an_interface_and_an_optional_queue() {
        let dev = XdpDevice::parse("eth0").unwrap();
        assert_eq!((dev.iface.as_str(), dev.queue), ("eth0", 0));
        assert_eq!(
            XdpDevice::parse("ens1f0:3").unwrap().to_string(),
            "ens1f0:3"
        );
        assert!(XdpDevice::parse("eth0:x").is_err());
        assert!(XdpDevice::parse(":1").is_err());
        assert!(XdpDevice::parse("a-very-long-interface-name").is_err());
        let e = ifindex("xd-none").unwrap_err();
        assert_eq!(
            e.to_string(),
            "--xdp: there is no network interface xd-none"
        );
    }
}
