//! The connect-request-response transport (`--crr`): stream `i` is a listener of its own
//! on the server at port `base + 1 + i`, to which the client opens a new connection per
//! packet (see [`crate::transport::tcp::crr_stream`]). Nothing connects during set-up.

use super::settings::TcpSettings;
use super::{tcp_stream_options, TcpTransport};
use crate::stream::affinity::cpu_for;
use crate::transport::shape::RunShape;
use crate::transport::stream::{Stream, StreamOptions};
use crate::transport::tcp::crr_stream::{CrrClient, CrrServer};
use crate::transport::{port_offset, Acceptor, ClientCtx, ServerCtx, Transport};
use anyhow::{Context, Result};
use socket2::{Domain, SockRef, Socket, Type};
use std::net::{SocketAddr, TcpListener};

/// The crr transport, with the run's TCP options.
pub struct CrrTransport(pub TcpSettings);

struct CrrAcceptor {
    tcp: TcpSettings,
    listeners: Vec<TcpListener>,
}

/// How far above the base port stream `stream` listens: past the control port, which
/// must not take a connection per packet through the accept loop.
fn port_of(stream: u32) -> u32 {
    1 + stream
}

impl Transport for CrrTransport {
    /// `-C`: the kernel must have the algorithm, and `-L` an IPv6 server, as for TCP.
    fn check(&self, run: &RunShape, server: SocketAddr) -> Result<()> {
        TcpTransport(self.0.clone()).check(run, server)
    }

    fn listen(&self, ctx: &ServerCtx) -> Result<Box<dyn Acceptor>> {
        let ip = ctx.local.ip().to_canonical();
        let listeners = (0..ctx.plan.shape.nstreams)
            .map(|i| {
                let addr = port_offset(SocketAddr::new(ip, 0), ctx.port, port_of(i))?;
                bind(addr, &self.0, ctx.plan.shape.nsockets)
                    .with_context(|| format!("cannot listen on {addr} for crr stream {i}"))
            })
            .collect::<Result<_>>()?;
        Ok(Box::new(CrrAcceptor {
            tcp: self.0.clone(),
            listeners,
        }))
    }

    fn connect(&self, ctx: &ClientCtx) -> Result<Vec<Box<dyn Stream>>> {
        let s = &ctx.plan;
        (0..s.shape.nstreams)
            .map(|i| {
                let server = port_offset(ctx.server, ctx.server.port(), port_of(i))?;
                let opts = StreamOptions {
                    cpu: cpu_for(&s.client_cpus, i),
                    ..tcp_stream_options(s, &self.0, ctx.abort.clone())
                };
                let stream =
                    CrrClient::new(server, ctx.bind, ctx.session, i, ctx.stall_timeout, opts)
                        .through(ctx.bind_device.clone());
                Ok(Box::new(stream) as Box<dyn Stream>)
            })
            .collect()
    }
}

impl Acceptor for CrrAcceptor {
    fn accept(self: Box<Self>, ctx: &ServerCtx) -> Result<Vec<Box<dyn Stream>>> {
        let s = &ctx.plan;
        Ok((0u32..)
            .zip(self.listeners)
            .map(|(i, listener)| {
                let opts = StreamOptions {
                    cpu: cpu_for(&s.server_cpus, i),
                    ..tcp_stream_options(s, &self.tcp, ctx.abort.clone())
                };
                let client = ctx.client.ip().to_canonical();
                Box::new(CrrServer::new(listener, client, ctx.session, i, opts)) as Box<dyn Stream>
            })
            .collect())
    }
}

/// A non-blocking listener for `flows` connections at once (1 without `--flows`);
/// accepted connections inherit its congestion control.
fn bind(addr: SocketAddr, tcp: &TcpSettings, flows: u32) -> std::io::Result<TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    sock.set_reuse_address(true)?;
    if let Some(name) = &tcp.congestion {
        crate::transport::tcp::stream::set_congestion(SockRef::from(&sock), name)?;
    }
    sock.bind(&addr.into())?;
    // Room for every flow's connect at once, and strays beside them.
    sock.listen(128 + i32::try_from(flows).unwrap_or(i32::MAX - 128))?;
    sock.set_nonblocking(true)?;
    Ok(sock.into())
}
