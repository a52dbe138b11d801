//! The TCP transport: stream `i` is `nsockets` TCP connections to port `base + i`
//! (stream 0 shares the control port, except with `--window`: [`data_port_offset`]).
//! Each data connection opens with a `DataHello` frame naming its session, stream and
//! socket, so the server can route and check it. TCP's own options are in [`settings`].

pub mod crr;
mod crr_flows;
pub mod crr_stream;
pub mod facts;
pub(crate) mod flows;
pub mod options;
pub mod settings;
pub mod stream;
pub mod stream_options;
pub mod uring;
pub mod zerocopy;

use super::{port_offset, Acceptor, ClientCtx, DataConn, LocalEnd, Refusal, ServerCtx, Transport};
use crate::pending::PendingCaps;
use crate::stream::affinity::cpu_for;
use crate::stream::sys::Direction;
use crate::transport::settings::TransportSettings;
use crate::transport::setup::{SetupFrames, SetupMessage};
use crate::transport::shape::RunShape;
use crate::transport::stream::{Stream, StreamOptions};
use crate::transport::Role;
use crate::transport::StreamPlan;
use anyhow::{anyhow, bail, Context, Result};
use settings::TcpSettings;
use socket2::{Domain, SockRef, Socket, Type};
use std::collections::BTreeMap;
use std::io;
use std::net::{self, SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use stream::TcpStream;
use stream_options::TcpOptions;

/// How long a new data connection may take to send its `DataHello`.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Most connections from one address at a time on a data port (stream > 0) that have
/// not yet said what they are; more are dropped at once.
const MAX_PENDING_PER_SOURCE: usize = 32;
/// Most such connections on a data port in all.
const MAX_PENDING_PER_PORT: usize = 128;

/// The TCP transport, with the run's TCP options.
pub struct TcpTransport(pub TcpSettings);

struct TcpAcceptor {
    tcp: TcpSettings,
    listeners: Vec<JoinHandle<()>>,
}

impl Transport for TcpTransport {
    fn listen(&self, ctx: &ServerCtx) -> Result<Box<dyn Acceptor>> {
        let listeners = listen_data_ports(ctx, ctx.plan.shape.nsockets)?;
        Ok(Box::new(TcpAcceptor {
            tcp: self.0.clone(),
            listeners,
        }))
    }

    /// `-C`: the kernel must have the algorithm. Tried on a socket of its own before the
    /// server is contacted, so a name the kernel lacks never starts a test there.
    fn check(&self, _run: &RunShape, server: SocketAddr) -> Result<()> {
        check_flowlabel(&self.0, server)?;
        if let Some(name) = &self.0.congestion {
            let probe = Socket::new(Domain::for_address(server), Type::STREAM, None)?;
            crate::transport::tcp::stream::set_congestion(SockRef::from(&probe), name)?;
        }
        Ok(())
    }

    fn connect(&self, ctx: &ClientCtx) -> Result<Vec<Box<dyn Stream>>> {
        let s = &ctx.plan;
        let mut streams: Vec<Box<dyn Stream>> = Vec::with_capacity(s.shape.nstreams as usize);
        for i in 0..s.shape.nstreams {
            let socks = (0..s.shape.nsockets)
                .map(|k| open_data_conn(ctx, i, k))
                .collect::<Result<Vec<_>>>()?;
            hold_unsent_to(&socks, &self.0)?;
            let mut opts = tcp_stream_options(s, &self.0, ctx.abort.clone());
            opts.cpu = cpu_for(&s.client_cpus, i);
            if s.server_sends_on(i) {
                opts = receiving_end(s, &self.0, opts);
            }
            streams.push(Box::new(TcpStream::from_sockets(socks, opts)?));
        }
        Ok(streams)
    }
}

impl Acceptor for TcpAcceptor {
    fn accept(self: Box<Self>, ctx: &ServerCtx) -> Result<Vec<Box<dyn Stream>>> {
        let s = &ctx.plan;
        let conns = accept_data_conns(ctx, s.shape.nsockets, self.listeners)?;
        if let Some(cap) = ctx.socket_buffer_cap {
            for sock in conns.iter().flatten() {
                hold_buffers_to(sock, cap)?;
            }
        }
        let mut streams: Vec<Box<dyn Stream>> = Vec::with_capacity(s.shape.nstreams as usize);
        for (i, socks) in (0u32..).zip(conns) {
            hold_unsent_to(&socks, &self.tcp)?;
            let mut opts = tcp_stream_options(s, &self.tcp, ctx.abort.clone());
            opts.cpu = cpu_for(&s.server_cpus, i);
            if !s.server_sends_on(i) {
                opts = receiving_end(s, &self.tcp, opts);
            }
            streams.push(Box::new(TcpStream::from_sockets(socks, opts)?));
        }
        Ok(streams)
    }
}

/// Holds both of a data socket's kernel buffers to `cap` bytes, where autotuning could
/// take them past the test's share of `--max-memory` (the kernel keeps twice what is
/// set).
fn hold_buffers_to(sock: &net::TcpStream, cap: u64) -> io::Result<()> {
    let size = usize::try_from(cap / 2).unwrap_or(usize::MAX);
    for dir in [Direction::Receive, Direction::Send] {
        crate::stream::sys::size_buffer(sock, dir, size, false)?;
    }
    Ok(())
}

/// `--notsent-lowat`: the unsent bytes each of `socks` holds before a write waits
/// (`TCP_NOTSENT_LOWAT`), set on both ends, whichever sends.
fn hold_unsent_to(socks: &[net::TcpStream], tcp: &TcpSettings) -> io::Result<()> {
    let Some(bytes) = tcp.notsent_lowat else {
        return Ok(());
    };
    let bytes = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    for sock in socks {
        crate::stream::sys::set_int_opt(sock, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, bytes)?;
    }
    Ok(())
}

/// One end's STREAMs of a run over connections another front end made (an iperf3
/// port, or an iperf3 server): one connection per stream, in stream order, with the
/// run's TCP options, the end's CPUs and each receiving stream's tuning.
pub fn streams_over(
    s: &StreamPlan,
    end: Role,
    conns: Vec<net::TcpStream>,
    abort: Arc<AtomicBool>,
) -> Result<Vec<Box<dyn Stream>>> {
    let TransportSettings::Tcp(tcp) = &s.transport else {
        bail!(
            "{} runs are not carried over TCP connections",
            s.transport.protocol().name()
        );
    };
    let cpus = s.cpus(end);
    (0u32..)
        .zip(conns)
        .map(|(i, sock)| {
            hold_unsent_to(std::slice::from_ref(&sock), tcp)?;
            let mut opts = tcp_stream_options(s, tcp, abort.clone());
            opts.cpu = cpu_for(cpus, i);
            if !s.sends_on(end, i) {
                opts = receiving_end(s, tcp, opts);
            }
            let stream: Box<dyn Stream> = Box::new(TcpStream::from_sockets(vec![sock], opts)?);
            Ok(stream)
        })
        .collect()
}

/// Refuses a `-L` flow label towards an IPv4 `server`, before anything is sent.
pub fn check_flowlabel(tcp: &TcpSettings, server: SocketAddr) -> Result<()> {
    let labelled = tcp.flowlabel.is_some();
    if labelled && server.ip().to_canonical().is_ipv4() {
        bail!(crate::transport::tcp::stream::flowlabel_over_ipv4(
            server.ip()
        ));
    }
    Ok(())
}

/// The STREAM options of a TCP stream: the run's, with the TCP options both ends set.
pub(super) fn tcp_stream_options(
    s: &StreamPlan,
    tcp: &TcpSettings,
    abort: Arc<AtomicBool>,
) -> StreamOptions {
    StreamOptions {
        tcp: TcpOptions {
            nodelay: tcp.nodelay,
            quickack: tcp.quickack,
            zerocopy: tcp.zerocopy,
            congestion: tcp.congestion.clone(),
            io_uring: tcp.io_uring,
            mss: tcp.mss,
            fq_rate: tcp.fq_rate,
            flowlabel: tcp.flowlabel,
            // The receiving end's own (see `receiving_end`): on a sending socket a
            // low-water mark would hold back the reading of 1-byte MPRTT replies.
            ..TcpOptions::default()
        },
        ..s.stream_options(abort)
    }
}

/// `opts` for the end that receives a stream's data (the server, or with `--reverse`
/// and on `--bidir`'s second half the client): its receive low-water mark, nap and
/// `--skip-rx-copy`.
fn receiving_end(s: &StreamPlan, tcp: &TcpSettings, opts: StreamOptions) -> StreamOptions {
    let run = s.shape;
    StreamOptions {
        tcp: TcpOptions {
            rcvlowat: (tcp.rcvlowat_bytes(&run, receiver_cores())).map(|b| b as usize),
            skip_rx_copy: tcp.skip_rx_copy,
            rx_nap: tcp.rx_nap(&run, receiver_cores()),
            ..opts.tcp
        },
        ..opts
    }
}

/// The CPUs this host's threads may run on (1 if unknown).
fn receiver_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// How far above the base port stream `stream`'s data connections go: `stream`, except
/// stream 0 with a TCP `--window` or `--flows`, which goes to `base + nstreams`. A
/// connection's window scale is fixed in its handshake, from the listening socket's
/// receive buffer or the kernel's maximum (`net.ipv4.tcp_rmem`, `net.core.rmem_max`) if
/// larger; the control port's listener has the kernel's, which caps a window at 8 MiB
/// with the default 6 MiB maximum. So that stream gets a listener of its own, sized
/// before it listens. Flows arrive by the hundred: on a port of their own they neither
/// crowd the control port nor count against its other clients' connections.
pub fn data_port_offset(settings: &StreamPlan, stream: u32) -> u32 {
    if stream == 0 && (settings.transport.tcp_window().is_some() || settings.shape.flows) {
        settings.shape.nstreams
    } else {
        stream
    }
}

/// A listener for one stream's data connections, with the TCP `--window` (which accepted
/// connections inherit) set before it listens, so the handshake's window scale covers it.
fn bind_data_listener(addr: SocketAddr, settings: &StreamPlan) -> io::Result<TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    // As std's `TcpListener::bind`: the port is free again as soon as the test ends.
    sock.set_reuse_address(true)?;
    if let Some(bytes) = settings.transport.tcp_window() {
        crate::stream::sys::set_window(&sock, bytes as usize)?;
    }
    // Accepted connections inherit it, their handshake's answer included.
    if let Some(tos) = settings.transport.sockets().and_then(|s| s.tos) {
        crate::stream::sys::set_tos(&sock, tos)?;
    }
    sock.bind(&addr.into())?;
    // Room for every connection of the stream at once (flows come by the hundred), so
    // none waits out a dropped handshake's retry (the kernel caps it at somaxconn).
    let backlog = settings.shape.nsockets.clamp(128, 4096) as i32;
    sock.listen(backlog)?;
    Ok(sock.into())
}

/// Server: binds a TCP port for every stream that does not share the base port (where
/// the accept loop routes): see [`data_port_offset`]. Forwards up to `per_stream` data
/// connections of this session from each to `ctx.routed_tx`, until the set-up time-out.
pub(super) fn listen_data_ports(ctx: &ServerCtx, per_stream: u32) -> Result<Vec<JoinHandle<()>>> {
    let ip = ctx.local.ip().to_canonical();
    let client = ctx.client.ip().to_canonical();
    let mut listeners = Vec::new();
    let own_ports = (0..ctx.plan.shape.nstreams)
        .map(|i| (i, data_port_offset(&ctx.plan, i)))
        .filter(|&(_, offset)| offset > 0);
    for (i, offset) in own_ports {
        let addr = port_offset(SocketAddr::new(ip, 0), ctx.port, offset)?;
        let listener = bind_data_listener(addr, &ctx.plan)
            .with_context(|| format!("cannot listen on {addr} for stream {i}"))?;
        listener.set_nonblocking(true)?;
        let tx = ctx.routed_tx.clone();
        let report = ctx.refused.clone();
        let session = ctx.session;
        let frames = ctx.frames;
        let deadline = Instant::now() + ctx.setup_timeout;
        let abort = ctx.abort.clone();
        listeners.push(std::thread::spawn(move || {
            // Each connection says what it is in its own short-lived thread, so a
            // silent or junk connection on this port never holds up the client's;
            // only connections that prove they belong to this stream count.
            let pending = PendingCaps::new(MAX_PENDING_PER_SOURCE, MAX_PENDING_PER_PORT);
            let routed = Arc::new(AtomicUsize::new(0));
            while routed.load(Ordering::Relaxed) < per_stream as usize
                && Instant::now() < deadline
                && !abort.load(Ordering::Relaxed)
            {
                match listener.accept() {
                    Ok((sock, peer)) => {
                        let report = report.clone();
                        let refused = move |error: String| {
                            report(Refusal {
                                peer: crate::stream::canonical(peer).to_string(),
                                error: format!("data port {}: {error}", addr.port()),
                            });
                        };
                        // The session's own client may open connections faster than
                        // they are identified (hundreds of flows): its next one waits
                        // for a place. Anyone else's is refused at once.
                        let own = peer.ip().to_canonical() == client;
                        let slot = loop {
                            match pending.claim(peer.ip()) {
                                Ok(slot) => break Some(slot),
                                Err(_)
                                    if own
                                        && Instant::now() < deadline
                                        && !abort.load(Ordering::Relaxed) =>
                                {
                                    std::thread::sleep(Duration::from_millis(1));
                                }
                                Err(crowded) => {
                                    refused(format!("refused: {crowded}"));
                                    break None;
                                }
                            }
                        };
                        let Some(slot) = slot else {
                            continue;
                        };
                        let (tx, routed) = (tx.clone(), routed.clone());
                        let identify = move || {
                            let left = deadline.saturating_duration_since(Instant::now());
                            match read_data_hello(frames, sock, session, i, left) {
                                // As many as the stream has sockets: any more
                                // close here, at once.
                                Ok(conn) => {
                                    if routed.fetch_add(1, Ordering::Relaxed) < per_stream as usize
                                    {
                                        let _ = tx.send(conn);
                                    }
                                }
                                Err(e) => refused(format!("{e:#}")),
                            }
                            drop(slot);
                        };
                        if std::thread::Builder::new()
                            .name(format!("fperf-data-hello-{i}"))
                            .spawn(identify)
                            .is_err()
                        {
                            return;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        // Woken by the next connection, or after a slice to look at
                        // the clock and the abort flag.
                        let _ =
                            crate::stream::sys::poll_one(listener.as_raw_fd(), libc::POLLIN, 10);
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
    let nstreams = ctx.plan.shape.nstreams;
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
    let offset = data_port_offset(&ctx.plan, stream);
    let addr = port_offset(ctx.server, ctx.server.port(), offset)?;
    let from = LocalEnd {
        ip: ctx.bind,
        port: ctx.client_port(stream, socket)?,
        device: ctx.bind_device.as_deref(),
    };
    let mut sock = connect(addr, from, Some(&ctx.plan.transport), ctx.setup_timeout)
        .with_context(|| format!("stream {stream}: cannot connect to {addr}"))?;
    crate::stream::sys::set_user_timeout(&sock, ctx.stall_timeout)?;
    ctx.frames.write(
        &mut sock,
        &SetupMessage::DataHello {
            version: ctx.frames.version(),
            session: ctx.session,
            stream,
            socket,
        },
    )?;
    Ok(sock)
}

/// Reads the `DataHello` that opens a data connection on stream `stream`'s port and
/// checks it belongs to `session` and that stream, within `timeout` (at most
/// [`HELLO_TIMEOUT`]). A connection that fails is told why (best effort) and dropped.
pub fn read_data_hello(
    frames: &dyn SetupFrames,
    mut sock: net::TcpStream,
    session: u64,
    stream: u32,
    timeout: Duration,
) -> Result<DataConn> {
    let arrived = Instant::now();
    sock.set_nonblocking(false)?;
    sock.set_write_timeout(Some(HELLO_TIMEOUT))?;
    let checked = match frames.read_within(&sock, timeout.min(HELLO_TIMEOUT)) {
        Ok(SetupMessage::DataHello {
            version,
            session: s,
            stream: k,
            socket,
        }) => frames
            .check_version(version)
            .map_err(anyhow::Error::from)
            .and_then(|()| {
                if s != session || k != stream {
                    bail!("data connection for no running test");
                }
                Ok(socket)
            }),
        Ok(other) => Err(anyhow!("expected data_hello, got {}", other.kind())),
        Err(e) => Err(e.into()),
    };
    match checked {
        Ok(socket) => {
            sock.set_read_timeout(None)?;
            Ok(DataConn {
                stream,
                socket,
                sock,
                accepted: arrived,
            })
        }
        Err(e) => {
            let _ = frames.write(
                &mut sock,
                &SetupMessage::Error {
                    message: e.to_string(),
                },
            );
            Err(e)
        }
    }
}

/// Connects to `addr` within `timeout`, from `from`. A data connection passes the run's
/// `transport` settings, whose socket options must be in place before the handshake.
pub fn connect(
    addr: SocketAddr,
    from: LocalEnd<'_>,
    transport: Option<&TransportSettings>,
    timeout: Duration,
) -> io::Result<net::TcpStream> {
    let tcp = transport.and_then(TransportSettings::tcp);
    let handshake = crate::transport::tcp::stream::HandshakeOptions {
        bind: from.ip,
        congestion: tcp.and_then(|t| t.congestion.as_deref()),
        window: transport
            .and_then(TransportSettings::tcp_window)
            .map(|w| w as usize),
        tos: transport.and_then(|t| t.sockets()).and_then(|s| s.tos),
        mss: tcp.and_then(|t| t.mss),
        local_port: from.port,
        device: from.device,
        flowlabel: tcp.and_then(|t| t.flowlabel),
    };
    handshake.connect(addr, Some(timeout))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Settings;
    use crate::transport::settings::{Protocol, TransportSettings};
    use crate::transport::sockets::{SocketSettings, MAX_WINDOW};

    /// A TCP run's settings with a `-w` of `window` bytes.
    fn windowed(window: u32) -> Settings {
        Settings {
            transport: TransportSettings::Tcp(TcpSettings {
                sockets: SocketSettings {
                    window: Some(window),
                    ..SocketSettings::default()
                },
                ..TcpSettings::default()
            }),
            ..Settings::default()
        }
    }

    #[test]
    fn connect_gives_a_data_connection_its_window_and_a_control_one_none() {
        // Within net.core.{r,w}mem_max's default, so it holds without root too.
        let window = 80u32 << 10;
        let settings = windowed(window);
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let timeout = Duration::from_secs(5);
        let data = connect(
            addr,
            LocalEnd::default(),
            Some(&settings.transport),
            timeout,
        )
        .expect("connect");
        let control = connect(addr, LocalEnd::default(), None, timeout).expect("connect");
        let sizes = |s: &net::TcpStream| {
            let s = SockRef::from(s);
            (
                s.recv_buffer_size().expect("rcvbuf"),
                s.send_buffer_size().expect("sndbuf"),
            )
        };
        // Linux keeps (and reports) twice the size set.
        let doubled = 2 * window as usize;
        assert_eq!(sizes(&data), (doubled, doubled));
        assert_ne!(sizes(&control), (doubled, doubled));
    }

    #[test]
    fn a_data_listener_sized_before_it_listens_lets_both_ends_scale_to_the_window() {
        // 256 MiB, past the window scale the kernel's maximum buffer gives a listener
        // of its default size (8 MiB at the default 6 MiB), as the control port's has.
        // Past the host's maximum too: as the local user's own run (as root) may.
        crate::stream::sys::allow_forced_buffers();
        let window = MAX_WINDOW;
        let settings = windowed(window);
        let ip = std::net::IpAddr::from([127, 0, 0, 1]);
        let listener =
            bind_data_listener(SocketAddr::new(ip, 0), &settings.stream_plan()).expect("listen");
        let addr = listener.local_addr().expect("addr");
        let timeout = Duration::from_secs(5);
        let client = connect(
            addr,
            LocalEnd::default(),
            Some(&settings.transport),
            timeout,
        )
        .expect("connect");
        let (server, _) = listener.accept().expect("accept");
        for (end, sock) in [("client", &client), ("server", &server)] {
            let short =
                crate::transport::tcp::facts::receive_window_short_of(sock, u64::from(window));
            assert_eq!(short.expect("tcp_info"), None, "{end}");
        }
        // A UDP test's per-stream connections carry control only: no window there.
        let udp = Settings {
            transport: TransportSettings::default_for(Protocol::Udp),
            ..settings
        };
        let listener =
            bind_data_listener(SocketAddr::new(ip, 0), &udp.stream_plan()).expect("listen");
        let rcvbuf = SockRef::from(&listener).recv_buffer_size().expect("rcvbuf");
        assert!(rcvbuf < window as usize, "{rcvbuf}");
    }

    #[test]
    fn stream_0_has_a_port_of_its_own_only_under_a_tcp_window_or_flows() {
        let tcp = Settings {
            nstreams: 3,
            ..Settings::default()
        };
        let offsets = |s: &Settings| {
            let plan = s.stream_plan();
            (0..3)
                .map(|i| data_port_offset(&plan, i))
                .collect::<Vec<_>>()
        };
        assert_eq!(offsets(&tcp), [0, 1, 2]);
        let window = Settings {
            nstreams: 3,
            ..windowed(1 << 20)
        };
        assert_eq!(offsets(&window), [3, 1, 2]);
        let flows = Settings {
            flows: true,
            ..tcp.clone()
        };
        assert_eq!(offsets(&flows), [3, 1, 2]);
        let udp = Settings {
            transport: TransportSettings::default_for(Protocol::Udp),
            ..window
        };
        assert_eq!(offsets(&udp), [0, 1, 2]);
    }
}
