//! `--rdma-api rsocket`: the TCP STREAM ([`crate::transport::tcp::stream`]) over librdmacm's
//! rsockets, through the rsocket table of calls ([`super::rsocket_sys`]).
//!
//! rsockets cannot be accepted on the kernel's TCP port, so the server listens with
//! `rlisten` on its base port + [`RSOCKET_PORT_OFFSET`] (in rdma_cm's port space, as
//! `--rdma-api cm` does; one API runs per session) on the address the client reached.
//! The client opens `nstreams × nsockets` rsockets there and names each with a
//! `DataHello` frame (session, stream, socket), as TCP data connections do, so the
//! server gives each to its stream in order. Options only kernel TCP sockets have are
//! refused before anything is sent.

use super::rsocket_sys::rsockets;
use super::settings::RdmaSettings;
use crate::stream::affinity::cpu_for;
use crate::stream::socket_calls::DataSocket;
use crate::transport::setup::SetupMessage;
use crate::transport::stream::{Stream, StreamOptions};
use crate::transport::tcp::stream::TcpStream;
use crate::transport::tcp::HELLO_TIMEOUT;
use crate::transport::{port_offset, Acceptor, ClientCtx, Refusal, ServerCtx};
use anyhow::{anyhow, bail, Context, Result};
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The rsocket listener is on the session's base port plus this.
pub const RSOCKET_PORT_OFFSET: u32 = 1;

/// Refuses what rsockets cannot do, naming the option. (They run the TCP STREAM, but
/// an RDMA run carries none of TCP's kernel socket options.)
pub fn check(rdma: &RdmaSettings) -> Result<()> {
    let refused = [
        (
            rdma.write,
            "--rdma-write (rsockets move data with their own protocol)",
        ),
        (
            rdma.device.is_some(),
            "-D/--rdmadev (rsockets use the device the route to the server goes over)",
        ),
    ];
    if let Some((_, what)) = refused.iter().find(|(on, _)| *on) {
        bail!("--rdma-api rsocket cannot run with {what}");
    }
    rsockets()?;
    Ok(())
}

/// Reads and writes a set-up frame on an rsocket within one deadline, whatever mode the
/// socket is in (`MSG_DONTWAIT` and `rpoll()`).
struct SetupIo<'a> {
    sock: &'a DataSocket,
    deadline: Instant,
}

impl SetupIo<'_> {
    fn wait(&self, events: libc::c_short) -> io::Result<()> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.sock
            .poll_one(events, left.as_millis().clamp(1, 100) as i32)
            .map(drop)
    }
}

impl Read for SetupIo<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.sock.recv(buf, libc::MSG_DONTWAIT) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.wait(libc::POLLIN)?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }
}

impl Write for SetupIo<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            match self.sock.send(buf, libc::MSG_DONTWAIT) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.wait(libc::POLLOUT)?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Client: connects `nstreams × nsockets` rsockets, each named with a `DataHello`.
pub fn connect(ctx: &ClientCtx, rdma: &RdmaSettings) -> Result<Vec<Box<dyn Stream>>> {
    let s = &ctx.plan;
    check(rdma)?;
    let lib = rsockets()?;
    let addr = port_offset(ctx.server, ctx.server.port(), RSOCKET_PORT_OFFSET)?;
    let mut streams: Vec<Box<dyn Stream>> = Vec::with_capacity(s.shape.nstreams as usize);
    for stream in 0..s.shape.nstreams {
        let mut socks = Vec::with_capacity(s.shape.nsockets as usize);
        for socket in 0..s.shape.nsockets {
            let sock = lib
                .connect(addr, ctx.bind)
                .with_context(|| format!("stream {stream}: rsocket cannot connect to {addr}"))?;
            let mut io = SetupIo {
                sock: &sock,
                deadline: Instant::now() + ctx.setup_timeout,
            };
            ctx.frames
                .write(
                    &mut io,
                    &SetupMessage::DataHello {
                        version: ctx.frames.version(),
                        session: ctx.session,
                        stream,
                        socket,
                    },
                )
                .with_context(|| format!("stream {stream}: naming rsocket {socket}"))?;
            socks.push(sock);
        }
        let opts = StreamOptions {
            cpu: cpu_for(&s.client_cpus, stream),
            ..s.stream_options(ctx.abort.clone())
        };
        streams.push(Box::new(TcpStream::from_data_sockets(socks, opts)?));
    }
    Ok(streams)
}

/// The server's rsocket listener, bound before the client is told to connect.
struct RsocketAcceptor {
    listener: DataSocket,
    addr: SocketAddr,
}

/// Server: listens with rsocket on the base port + [`RSOCKET_PORT_OFFSET`].
pub fn listen(ctx: &ServerCtx, rdma: &RdmaSettings) -> Result<Box<dyn Acceptor>> {
    check(rdma)?;
    let ip = ctx.local.ip().to_canonical();
    let addr = port_offset(SocketAddr::new(ip, 0), ctx.port, RSOCKET_PORT_OFFSET)?;
    let backlog = (ctx.plan.shape.nstreams * ctx.plan.shape.nsockets).clamp(1, 1024) as i32;
    let listener = rsockets()?
        .listen(addr, backlog)
        .with_context(|| format!("rsocket cannot listen on {addr}"))?;
    Ok(Box::new(RsocketAcceptor { listener, addr }))
}

/// Reads the `DataHello` opening an accepted rsocket: its (stream, socket), checked
/// against the session.
fn read_hello(sock: &DataSocket, ctx: &ServerCtx, timeout: Duration) -> Result<(u32, u32)> {
    let mut io = SetupIo {
        sock,
        deadline: Instant::now() + timeout.min(HELLO_TIMEOUT),
    };
    match ctx.frames.read(&mut io)? {
        SetupMessage::DataHello {
            version,
            session,
            stream,
            socket,
        } => {
            ctx.frames.check_version(version)?;
            let s = &ctx.plan;
            if session != ctx.session || stream >= s.shape.nstreams || socket >= s.shape.nsockets {
                bail!("rsocket for no running test");
            }
            Ok((stream, socket))
        }
        other => Err(anyhow!("expected data_hello, got {}", other.kind())),
    }
}

impl Acceptor for RsocketAcceptor {
    fn accept(self: Box<Self>, ctx: &ServerCtx) -> Result<Vec<Box<dyn Stream>>> {
        let s = &ctx.plan;
        let lib = rsockets()?;
        let want = s.shape.nstreams as usize * s.shape.nsockets as usize;
        let deadline = Instant::now() + ctx.setup_timeout;
        let mut got: BTreeMap<(u32, u32), DataSocket> = BTreeMap::new();
        while got.len() < want {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || ctx.abort.load(Ordering::Relaxed) {
                bail!(
                    "the client connected {} of {want} rsockets to {} within {}s",
                    got.len(),
                    self.addr,
                    ctx.setup_timeout.as_secs()
                );
            }
            let sock = match lib.accept(&self.listener) {
                Ok(sock) => sock,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.listener.poll_one(libc::POLLIN, 100)?;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).context("raccept"),
            };
            match read_hello(&sock, ctx, left) {
                Ok(key) => {
                    got.entry(key).or_insert(sock);
                }
                Err(e) => {
                    let peer = sock.peer_addr();
                    (ctx.refused)(Refusal {
                        peer: crate::stream::addr_text(peer),
                        error: format!("rsocket port {}: {e:#}", self.addr.port()),
                    });
                }
            }
        }
        let opts = s.stream_options(ctx.abort.clone());
        let mut socks = got.into_values();
        (0..s.shape.nstreams)
            .map(|i| {
                let group: Vec<DataSocket> =
                    socks.by_ref().take(s.shape.nsockets as usize).collect();
                let opts = StreamOptions {
                    cpu: cpu_for(&s.server_cpus, i),
                    ..opts.clone()
                };
                Ok(Box::new(TcpStream::from_data_sockets(group, opts)?) as Box<dyn Stream>)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::rdma::settings::RdmaApi;

    #[test]
    fn what_rsockets_cannot_do_is_refused_by_name() {
        let base = RdmaSettings {
            api: RdmaApi::Rsocket,
            ..RdmaSettings::default()
        };
        let cases = [
            (
                RdmaSettings {
                    write: true,
                    ..base.clone()
                },
                "--rdma-write",
            ),
            (
                RdmaSettings {
                    device: Some("rxe0".into()),
                    ..base.clone()
                },
                "--rdmadev",
            ),
        ];
        for (s, flag) in cases {
            let e = check(&s).expect_err(flag).to_string();
            assert!(e.contains(flag) && e.contains("rsocket"), "{flag}: {e}");
        }
    }
}
