//! The UDP transport: stream `i` is `nsockets` UDP sockets sending to UDP port
//! `base + i` of the server, plus one TCP *control connection* per stream, set up like a
//! TCP data connection (to TCP port `base + i`, stream 0 through the base port, named by
//! a `DataHello`). The control connection carries the set-up and, reliably, the end of
//! the data (`UdpFinished`), so no UDP packet that could itself be lost ends a run.
//!
//! Several sockets on one port: each client socket connects to the server's
//! `base + i`; the server opens as many sockets, all bound to `base + i` with
//! SO_REUSEPORT, and connects each to one client socket, whose address the client sends
//! in a `UdpSockets` frame. The kernel delivers a datagram to the socket connected to
//! its source, so the sockets of the two ends pair up one to one, like TCP connections.
//! (The addresses are the ones the client sees, so a NAT between the hosts breaks this;
//! they must be on the control connection's host.) The server answers `Ready` once its
//! sockets are connected, and only then does the client send.
//!
//! Sizes: `-l` is the UDP payload, header included; it must fit in one datagram
//! (65507 bytes over IPv4, 65527 over IPv6), checked by [`Transport::check`] on the
//! client before anything is sent and by the server before it answers `Ready`.
//!
//! UDP's own options are in [`settings`].

pub mod batch;
pub(crate) mod cmsg;
pub mod facts;
mod flows;
pub mod options;
pub mod settings;
pub mod stream;
pub mod wire;

use super::tcp::{accept_data_conns, listen_data_ports, open_data_conn};
use super::{port_offset, Acceptor, ClientCtx, ServerCtx, Transport};
use crate::stream::canonical;
use crate::transport::setup::SetupMessage;
use crate::transport::shape::RunShape;
use crate::transport::stream::Stream;
use crate::transport::xdp::{self, stream::XdpStream, XdpDevice};
use anyhow::{anyhow, bail, Context, Result};
use settings::UdpSettings;
use socket2::{Domain, Socket, Type};
use std::io;
use std::net::{self, IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::thread::JoinHandle;
use std::time::Duration;
use stream::UdpStream;
use stream::{UdpOptions, CONTROL_IO_TIMEOUT, MAX_DATAGRAM_V4, MAX_DATAGRAM_V6};

/// The UDP transport, with the run's UDP options.
pub struct UdpTransport(pub UdpSettings);

struct UdpAcceptor {
    udp: UdpSettings,
    /// Socket 0 of each stream, bound to `base + i` before the client is told `Ready`.
    first: Vec<net::UdpSocket>,
    /// Listeners of the control connections of streams 1 and up.
    listeners: Vec<JoinHandle<()>>,
}

/// Refuses a datagram size (`--pktsize`, or a reply's `--response-size`, named by
/// `flag`) that cannot be one datagram to `ip`.
fn check_datagram_size(flag: &str, size: u32, ip: IpAddr) -> Result<()> {
    let (max, family) = if ip.to_canonical().is_ipv4() {
        (MAX_DATAGRAM_V4, "IPv4")
    } else {
        (MAX_DATAGRAM_V6, "IPv6")
    };
    if size > max {
        bail!("{flag} {size} does not fit in one UDP datagram over {family} (at most {max} bytes)");
    }
    Ok(())
}

/// Refuses datagrams of a run shaped `run`, requests or replies, that cannot be one
/// datagram to `ip`.
fn check_datagram_sizes(run: &RunShape, ip: IpAddr) -> Result<()> {
    check_datagram_size("--pktsize", run.pktsize, ip)?;
    match run.response_size {
        Some(size) => check_datagram_size("--response-size", size, ip),
        None => Ok(()),
    }
}

/// A UDP socket bound to `addr`, optionally sharing the port (SO_REUSEPORT), sending
/// through the network interface `device` if given.
fn bind_udp(
    addr: SocketAddr,
    share_port: bool,
    device: Option<&str>,
) -> io::Result<net::UdpSocket> {
    let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, None)?;
    if share_port {
        sock.set_reuse_port(true)?;
    }
    if let Some(name) = device {
        crate::stream::sys::bind_device(&sock, name)?;
    }
    sock.bind(&addr.into())?;
    Ok(sock.into())
}

/// The UDP options of stream `stream` in a run shaped `run`; both ends build its STREAM
/// with the same.
fn udp_options(
    options: &UdpSettings,
    run: &RunShape,
    stream: u32,
    buffer_cap: Option<u64>,
) -> UdpOptions {
    UdpOptions {
        batch: options.batch_size(run) as usize,
        gso: options.gso,
        gro: options.gro,
        rx_timestamps: options.rx_timestamps,
        dont_fragment: options.dont_fragment,
        buffer_cap,
        ..UdpOptions::new(
            stream,
            Duration::from_millis(u64::from(options.ack_timeout_ms)),
        )
    }
}

/// With `--xdp`, the STREAM over AF_XDP on `device` that moves the datagrams of `sock`
/// (bound and connected) instead of the kernel; the kernel's UDP STREAM otherwise.
#[allow(clippy::too_many_arguments)]
fn make_stream(
    device: Option<&XdpDevice>,
    mut socks: Vec<net::UdpSocket>,
    control: net::TcpStream,
    frames: &'static dyn crate::transport::setup::SetupFrames,
    opts: crate::transport::stream::StreamOptions,
    udp: UdpOptions,
    run: &RunShape,
) -> Result<Box<dyn Stream>> {
    let Some(device) = device else {
        return Ok(Box::new(UdpStream::from_sockets(
            socks, control, frames, opts, udp,
        )?));
    };
    xdp::check(run)?;
    let (Some(sock), true) = (socks.pop(), socks.is_empty()) else {
        bail!("--xdp runs one socket per stream");
    };
    let plan = xdp::XdpPlan {
        stream: udp.stream,
        ack_timeout: udp.ack_timeout,
        batch: udp.batch,
        busy_poll: opts.busy_poll,
    };
    let parts = xdp::open(device, sock, &plan)?;
    Ok(Box::new(XdpStream::new(parts, control, frames, opts)?))
}

impl Transport for UdpTransport {
    fn check(&self, run: &RunShape, server: SocketAddr) -> Result<()> {
        if self.0.xdp.is_some() {
            xdp::check(run)?;
        }
        check_datagram_sizes(run, server.ip())
    }

    fn listen(&self, ctx: &ServerCtx) -> Result<Box<dyn Acceptor>> {
        let ip = ctx.local.ip().to_canonical();
        check_datagram_sizes(&ctx.plan.shape, ip)?;
        let first = (0..ctx.plan.shape.nstreams)
            .map(|i| {
                let addr = port_offset(SocketAddr::new(ip, 0), ctx.port, i)?;
                bind_udp(addr, true, None)
                    .with_context(|| format!("cannot bind UDP {addr} for stream {i}"))
            })
            .collect::<Result<Vec<_>>>()?;
        let listeners = listen_data_ports(ctx, 1)?;
        Ok(Box::new(UdpAcceptor {
            udp: self.0.clone(),
            first,
            listeners,
        }))
    }

    fn connect(&self, ctx: &ClientCtx) -> Result<Vec<Box<dyn Stream>>> {
        let s = &ctx.plan;
        let local_ip = ctx.bind.unwrap_or(if ctx.server.is_ipv4() {
            Ipv4Addr::UNSPECIFIED.into()
        } else {
            Ipv6Addr::UNSPECIFIED.into()
        });
        // Every control connection first: the server sets the streams up only once
        // all have arrived.
        let controls = (0..s.shape.nstreams)
            .map(|i| open_data_conn(ctx, i, 0))
            .collect::<Result<Vec<_>>>()?;
        let mut streams: Vec<Box<dyn Stream>> = Vec::with_capacity(s.shape.nstreams as usize);
        for (i, control) in (0..s.shape.nstreams).zip(controls) {
            let server_udp = port_offset(ctx.server, ctx.server.port(), i)?;
            let mut socks = Vec::with_capacity(s.shape.nsockets as usize);
            for k in 0..s.shape.nsockets {
                let port = ctx.client_port(i, k)?.unwrap_or(0);
                let from = SocketAddr::new(local_ip, port);
                let sock = bind_udp(from, false, ctx.bind_device.as_deref())
                    .with_context(|| format!("stream {i}: cannot bind a UDP socket"))?;
                sock.connect(server_udp)
                    .with_context(|| format!("stream {i}: cannot connect UDP to {server_udp}"))?;
                socks.push(sock);
            }
            let addrs = socks
                .iter()
                .map(net::UdpSocket::local_addr)
                .collect::<io::Result<Vec<_>>>()?;
            // The STREAM (which sizes the socket buffers) exists before the server hears
            // the addresses: with --reverse it sends as soon as every stream is ready.
            let mut setup = control.try_clone()?;
            let udp = udp_options(&self.0, &s.shape, i, None);
            let opts = s.stream_options(ctx.abort.clone());
            let device = self.0.xdp.as_ref();
            streams.push(make_stream(
                device, socks, control, ctx.frames, opts, udp, &s.shape,
            )?);
            ctx.frames
                .write(&mut setup, &SetupMessage::UdpSockets { addrs })?;
            setup.set_read_timeout(Some(ctx.setup_timeout))?;
            match ctx.frames.read(&mut setup) {
                Ok(SetupMessage::Ready) => {}
                Ok(SetupMessage::Error { message }) => bail!("stream {i}: server: {message}"),
                Ok(other) => bail!("stream {i}: expected ready, got {}", other.kind()),
                Err(e) => return Err(anyhow!("stream {i}: UDP set-up: {e}")),
            }
            // The read time-out is the socket's, shared with the STREAM's handle.
            setup.set_read_timeout(Some(CONTROL_IO_TIMEOUT))?;
        }
        Ok(streams)
    }
}

impl Acceptor for UdpAcceptor {
    fn accept(self: Box<Self>, ctx: &ServerCtx) -> Result<Vec<Box<dyn Stream>>> {
        let s = &ctx.plan;
        let conns = accept_data_conns(ctx, 1, self.listeners)?;
        let mut streams: Vec<Box<dyn Stream>> = Vec::with_capacity(s.shape.nstreams as usize);
        for (i, (first, control)) in self.first.into_iter().zip(conns).enumerate() {
            let i = i as u32;
            let Some(mut control) = control.into_iter().next() else {
                bail!("stream {i}: no control connection");
            };
            control.set_nonblocking(false)?;
            control.set_read_timeout(Some(ctx.setup_timeout))?;
            let addrs = match ctx.frames.read(&mut control) {
                Ok(SetupMessage::UdpSockets { addrs }) => addrs,
                Ok(other) => bail!("stream {i}: expected udp_sockets, got {}", other.kind()),
                Err(e) => bail!("stream {i}: UDP set-up: {e}"),
            };
            if addrs.len() != s.shape.nsockets as usize {
                bail!(
                    "stream {i}: the client named {} UDP sockets, not {}",
                    addrs.len(),
                    s.shape.nsockets
                );
            }
            let distinct: std::collections::HashSet<_> = addrs.iter().collect();
            if distinct.len() != addrs.len() {
                bail!("stream {i}: the client named one UDP socket twice");
            }
            let host = control.peer_addr()?.ip().to_canonical();
            let local = first.local_addr()?;
            let mut socks = Vec::with_capacity(addrs.len());
            let mut first = Some(first);
            for addr in addrs {
                let addr = canonical(addr);
                if addr.ip() != host {
                    bail!("stream {i}: UDP socket {addr} is not on the client's host {host}");
                }
                let sock = match first.take() {
                    Some(sock) => sock,
                    None => bind_udp(local, true, None)
                        .with_context(|| format!("stream {i}: cannot bind UDP {local}"))?,
                };
                sock.connect(addr)
                    .with_context(|| format!("stream {i}: cannot connect UDP to {addr}"))?;
                socks.push(sock);
            }
            // The STREAM (which sizes the socket buffers) must exist before the client is
            // told to send: its first datagrams would overflow the default buffers.
            let mut ready = control.try_clone()?;
            let udp = udp_options(&self.udp, &s.shape, i, ctx.socket_buffer_cap);
            let opts = s.stream_options(ctx.abort.clone());
            let device = ctx.xdp.as_ref();
            let made = make_stream(device, socks, control, ctx.frames, opts, udp, &s.shape);
            let stream = match made {
                Ok(stream) => stream,
                Err(e) => {
                    // The client waits for the answer: tell it why.
                    let message = format!("{e:#}");
                    let _ = ctx
                        .frames
                        .write(&mut ready, &SetupMessage::Error { message });
                    return Err(e);
                }
            };
            streams.push(stream);
            ctx.frames.write(&mut ready, &SetupMessage::Ready)?;
        }
        Ok(streams)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datagram_size_limits_depend_on_the_ip_version() {
        let v4: IpAddr = Ipv4Addr::LOCALHOST.into();
        let v6: IpAddr = Ipv6Addr::LOCALHOST.into();
        let mapped: IpAddr = Ipv4Addr::LOCALHOST.to_ipv6_mapped().into();
        let check = |size, ip| check_datagram_size("--pktsize", size, ip);
        assert!(check(65_507, v4).is_ok());
        assert!(check(1, v4).is_ok());
        let e = check(65_508, v4).expect_err("too big for IPv4");
        assert!(e.to_string().contains("IPv4 (at most 65507 bytes)"), "{e}");
        assert!(check(65_508, mapped).is_err());
        assert!(check(65_527, v6).is_ok());
        assert!(check(65_528, v6).is_err());
        let replies = crate::settings::Settings {
            pktsize: 100,
            response_size: Some(65_508),
            ..crate::settings::Settings::default()
        }
        .shape();
        let e = check_datagram_sizes(&replies, v4).expect_err("a reply too big for IPv4");
        assert!(
            e.to_string()
                .starts_with("--response-size 65508 does not fit"),
            "{e}"
        );
        assert!(check_datagram_sizes(&replies, v6).is_ok());
    }
}
