//! The TCP transport: stream `i` is `nsockets` TCP connections to port `base + i`
//! (stream 0 shares the control port). Each data connection opens with a `DataHello`
//! frame naming its session, stream and socket, so the server can route and check it.

use super::{port_offset, stream_options, Acceptor, ClientCtx, DataConn, ServerCtx, Transport};
use crate::control::{self, Message, PROTOCOL_VERSION};
use crate::stream::{Stream, TcpStream};
use anyhow::{anyhow, bail, Context, Result};
use socket2::{Domain, Socket, Type};
use std::collections::BTreeMap;
use std::io;
use std::net::{self, IpAddr, SocketAddr, TcpListener};
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a new data connection may take to send its `DataHello`.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// The TCP transport.
pub struct TcpTransport;

struct TcpAcceptor {
    listeners: Vec<JoinHandle<()>>,
}

impl Transport for TcpTransport {
    fn listen(&self, ctx: &ServerCtx) -> Result<Box<dyn Acceptor>> {
        let listeners = listen_data_ports(ctx, ctx.settings.nsockets)?;
        Ok(Box::new(TcpAcceptor { listeners }))
    }

    fn connect(&self, ctx: &ClientCtx) -> Result<Vec<Box<dyn Stream>>> {
        let s = &ctx.settings;
        let mut streams: Vec<Box<dyn Stream>> = Vec::with_capacity(s.nstreams as usize);
        for i in 0..s.nstreams {
            let socks = (0..s.nsockets)
                .map(|k| open_data_conn(ctx, i, k))
                .collect::<Result<Vec<_>>>()?;
            let opts = stream_options(s, ctx.abort.clone());
            streams.push(Box::new(TcpStream::from_sockets(socks, opts)?));
        }
        Ok(streams)
    }
}

impl Acceptor for TcpAcceptor {
    fn accept(self: Box<Self>, ctx: &ServerCtx) -> Result<Vec<Box<dyn Stream>>> {
        let s = &ctx.settings;
        let conns = accept_data_conns(ctx, s.nsockets, self.listeners)?;
        let opts = stream_options(s, ctx.abort.clone());
        let mut streams: Vec<Box<dyn Stream>> = Vec::with_capacity(s.nstreams as usize);
        for socks in conns {
            streams.push(Box::new(TcpStream::from_sockets(socks, opts.clone())?));
        }
        Ok(streams)
    }
}

/// Server: binds TCP ports `base + 1 .. base + nstreams` (stream 0 shares the base port,
/// where the accept loop routes) and forwards up to `per_stream` data connections of
/// this session from each to `ctx.routed_tx`, until the set-up time-out.
pub(super) fn listen_data_ports(ctx: &ServerCtx, per_stream: u32) -> Result<Vec<JoinHandle<()>>> {
    let ip = ctx.local.ip().to_canonical();
    let mut listeners = Vec::new();
    for i in 1..ctx.settings.nstreams {
        let addr = port_offset(SocketAddr::new(ip, 0), ctx.port, i)?;
        let listener = TcpListener::bind(addr)
            .with_context(|| format!("cannot listen on {addr} for stream {i}"))?;
        listener.set_nonblocking(true)?;
        let tx = ctx.routed_tx.clone();
        let session = ctx.session;
        let deadline = Instant::now() + ctx.setup_timeout;
        let abort = ctx.abort.clone();
        listeners.push(std::thread::spawn(move || {
            let mut accepted = 0;
            while accepted < per_stream
                && Instant::now() < deadline
                && !abort.load(Ordering::Relaxed)
            {
                match listener.accept() {
                    Ok((sock, _)) => {
                        accepted += 1;
                        if let Ok(conn) = read_data_hello(sock, session) {
                            if conn.stream == i && tx.send(conn).is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(_) => return,
                }
            }
        }));
    }
    Ok(listeners)
}

/// Server: waits for `per_stream` data connections of every stream; returns them
/// grouped by stream, each group in socket order.
pub(super) fn accept_data_conns(
    ctx: &ServerCtx,
    per_stream: u32,
    listeners: Vec<JoinHandle<()>>,
) -> Result<Vec<Vec<net::TcpStream>>> {
    let nstreams = ctx.settings.nstreams;
    let want = nstreams as usize * per_stream as usize;
    let deadline = Instant::now() + ctx.setup_timeout;
    let mut got: BTreeMap<(u32, u32), net::TcpStream> = BTreeMap::new();
    while got.len() < want {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || ctx.abort.load(Ordering::Relaxed) {
            bail!(
                "the client connected {} of {want} data sockets within {}s",
                got.len(),
                ctx.setup_timeout.as_secs()
            );
        }
        let Ok(conn) = ctx
            .routed
            .recv_timeout(left.min(Duration::from_millis(100)))
        else {
            continue;
        };
        if conn.stream < nstreams && conn.socket < per_stream {
            got.entry((conn.stream, conn.socket)).or_insert(conn.sock);
        }
    }
    for t in listeners {
        let _ = t.join();
    }
    let mut socks = got.into_values();
    Ok((0..nstreams)
        .map(|_| socks.by_ref().take(per_stream as usize).collect())
        .collect())
}

/// Client: connects data connection `socket` of stream `stream` (to port `base + stream`)
/// and names it with a `DataHello`.
pub(super) fn open_data_conn(ctx: &ClientCtx, stream: u32, socket: u32) -> Result<net::TcpStream> {
    let addr = port_offset(ctx.server, ctx.server.port(), stream)?;
    let mut sock = connect(addr, ctx.bind, ctx.setup_timeout)
        .with_context(|| format!("stream {stream}: cannot connect to {addr}"))?;
    control::write_frame(
        &mut sock,
        &Message::DataHello {
            version: PROTOCOL_VERSION,
            session: ctx.session,
            stream,
            socket,
        },
    )?;
    Ok(sock)
}

/// Reads the `DataHello` that opens a data connection and checks it belongs to
/// `session`.
pub fn read_data_hello(mut sock: net::TcpStream, session: u64) -> Result<DataConn> {
    sock.set_nonblocking(false)?;
    sock.set_read_timeout(Some(HELLO_TIMEOUT))?;
    match control::read_frame(&mut sock)? {
        Message::DataHello {
            version,
            session: s,
            stream,
            socket,
        } => {
            control::check_version(version)?;
            if s != session {
                bail!("data connection for an unknown session");
            }
            sock.set_read_timeout(None)?;
            Ok(DataConn {
                stream,
                socket,
                sock,
            })
        }
        other => Err(anyhow!(
            "expected data_hello, got {}",
            control::kind(&other)
        )),
    }
}

/// Connects to `addr` within `timeout`, from `bind` if given.
pub fn connect(
    addr: SocketAddr,
    bind: Option<IpAddr>,
    timeout: Duration,
) -> io::Result<net::TcpStream> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    if let Some(ip) = bind {
        sock.bind(&SocketAddr::new(ip, 0).into())?;
    }
    sock.connect_timeout(&addr.into(), timeout)?;
    Ok(sock.into())
}
