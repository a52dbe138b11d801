//! RDMA over verbs queue pairs: `--rdma-api ibverbs` (the default) and `--rdma-api cm`.
//!
//! Both open a TCP side connection to the server's base port, routed to the session by
//! a `DataHello` as for `--rdma-api ofi` (see [`super`]), and swap JSON frames
//! over it: the client's [`VerbsClientDetails`], then the server's
//! [`VerbsServerDetails`], each holding one [`QpDetails`] per queue pair,
//! `[stream][socket]`. Everything received is checked (shape, sizes, ranges) before use.
//!
//! - `ibverbs`: the details connect the queue pairs (QP number, LID, GID, PSN, MTU):
//!   each end moves its QPs to RTR and RTS by hand. The client uses `-D` or the first
//!   device; the server uses the device the client named when it has one of that name,
//!   else its first device.
//! - `cm`: rdma_cm connects the queue pairs. The server listens on its base port + 1
//!   ([`CM_PORT_OFFSET`], in rdma_cm's TCP port space) on the address the client
//!   reached; the client resolves the address and route, connects one QP at a time in
//!   `[stream][socket]` order (so the server accepts them in that order), and the
//!   device is the one rdma_cm routes over (`-D`, if given, must be that one). The
//!   details then carry only the rings (rkey, address, geometry): sideway 0.4 gives no
//!   access to rdma_cm's private data, so they travel over the side connection.
//!
//! The side connection stays open for the run: each QP watches it to notice the peer
//! leaving.

use super::settings::{RdmaApi, RdmaSettings};
use super::side::{read_json, routed_side_connection, side_connection, write_json};
use super::verbs_stream::{device_names, QpDetails, QpEndpoint, VerbsDevice, VerbsStream};
use crate::transport::stream::{Stream, StreamOptions};
use crate::transport::StreamPlan;
use crate::transport::{port_offset, Acceptor, ClientCtx, ServerCtx};
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use sideway::ibverbs::queue_pair::QueuePairState;
use sideway::rdmacm::communication_manager::{
    ConnectionParameter, Event, EventChannel, EventType, GetEventErrorKind, Identifier, PortSpace,
};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// rdma_cm listens on the session's base port plus this.
pub const CM_PORT_OFFSET: u32 = 1;
/// Longest a single rdma_cm address or route resolution may take.
const CM_RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest one wait for an rdma_cm event sleeps before checking the abort flag.
const CM_WAIT_SLICE: Duration = Duration::from_millis(100);

/// Client → server over the side connection.
#[derive(Debug, Serialize, Deserialize)]
pub struct VerbsClientDetails {
    pub version: u32,
    /// Queue pairs, `[stream][socket]`.
    pub qps: Vec<Vec<QpDetails>>,
}

/// Server → client: its queue pairs, or why it cannot go on.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum VerbsServerDetails {
    Qps { qps: Vec<Vec<QpDetails>> },
    Error { message: String },
}

/// Client, before contacting the server: opens the device (`-D` or the first) to check
/// it works and pins its name for the server and the reports (`ibverbs`); for `cm`,
/// checks rdma_cm can be used (its device is known once the route is).
pub fn prepare(rdma: &mut RdmaSettings) -> Result<()> {
    match rdma.api {
        RdmaApi::Cm => {
            EventChannel::new().map_err(|e| anyhow!("rdma_cm is not usable here: {e:#}"))?;
            Ok(())
        }
        _ => {
            let dev = VerbsDevice::open(rdma.device.as_deref(), None)?;
            rdma.device = Some(dev.name);
            Ok(())
        }
    }
}

/// `nstreams × nsockets` queue pairs on `dev`, in INIT with their receives posted;
/// `write`: data moves by RDMA WRITE.
fn create_all(
    dev: &VerbsDevice,
    s: &StreamPlan,
    opts: &StreamOptions,
    write: bool,
) -> Result<Vec<Vec<QpEndpoint>>> {
    (0..s.shape.nstreams)
        .map(|_| {
            (0..s.shape.nsockets)
                .map(|_| {
                    QpEndpoint::create(dev, opts, write, None, None).map_err(anyhow::Error::from)
                })
                .collect()
        })
        .collect()
}

fn details(qps: &[Vec<QpEndpoint>]) -> Vec<Vec<QpDetails>> {
    qps.iter()
        .map(|s| s.iter().map(QpEndpoint::details).collect())
        .collect()
}

/// Checks `peers` has the shape of `qps`, then gives every QP its peer: connecting it by
/// hand (`connect`, for `ibverbs`) or only learning its ring (`cm`, already connected).
fn set_peers(qps: &mut [Vec<QpEndpoint>], peers: &[Vec<QpDetails>], connect: bool) -> Result<()> {
    let shape_ok = peers.len() == qps.len()
        && peers
            .iter()
            .zip(qps.iter())
            .all(|(p, q)| p.len() == q.len());
    if !shape_ok {
        bail!("the peer sent queue-pair details for a different number of streams or sockets");
    }
    for (qs, ps) in qps.iter_mut().zip(peers) {
        for (q, p) in qs.iter_mut().zip(ps) {
            if connect {
                q.connect_ib(p)?;
            } else {
                q.set_peer(p)?;
            }
        }
    }
    Ok(())
}

/// Keeps `sock` open for the run: every QP watches it to notice the peer leaving.
fn watch(qps: &mut [Vec<QpEndpoint>], sock: TcpStream) -> Result<()> {
    sock.set_nonblocking(true)?;
    let sock = Arc::new(sock);
    for q in qps.iter_mut().flatten() {
        q.set_watch(sock.clone());
    }
    Ok(())
}

fn into_streams(qps: Vec<Vec<QpEndpoint>>, opts: StreamOptions) -> Result<Vec<Box<dyn Stream>>> {
    qps.into_iter()
        .map(|q| {
            VerbsStream::from_endpoints(q, opts.clone())
                .map(|s| Box::new(s) as Box<dyn Stream>)
                .map_err(anyhow::Error::from)
        })
        .collect()
}

/// Client: connects the data streams.
pub fn connect(ctx: &ClientCtx, rdma: &RdmaSettings) -> Result<Vec<Box<dyn Stream>>> {
    let s = &ctx.plan;
    let mut sock = side_connection(ctx)?;
    let near = sock.local_addr()?.ip().to_canonical();
    let opts = s.stream_options(ctx.abort.clone());
    let cm = rdma.api == RdmaApi::Cm;
    let mut qps = if cm {
        let server = port_offset(ctx.server, ctx.server.port(), CM_PORT_OFFSET)?;
        let deadline = Instant::now() + ctx.setup_timeout;
        let mut all = Vec::new();
        for _ in 0..s.shape.nstreams {
            let mut stream = Vec::new();
            for _ in 0..s.shape.nsockets {
                stream.push(cm_connect(
                    rdma, &opts, server, ctx.bind, near, deadline, &ctx.abort,
                )?);
            }
            all.push(stream);
        }
        all
    } else {
        let dev = VerbsDevice::open(rdma.device.as_deref(), Some(near))?;
        create_all(&dev, s, &opts, rdma.write)?
    };
    write_json(
        ctx.frames,
        &mut sock,
        &VerbsClientDetails {
            version: ctx.frames.version(),
            qps: details(&qps),
        },
    )?;
    match read_json::<VerbsServerDetails>(ctx.frames, &mut sock, ctx.setup_timeout)? {
        VerbsServerDetails::Qps { qps: peers } => set_peers(&mut qps, &peers, !cm)?,
        VerbsServerDetails::Error { message } => bail!("server: {message}"),
    }
    watch(&mut qps, sock)?;
    into_streams(qps, opts)
}

/// The server side, once listening.
struct VerbsAcceptor {
    /// `ibverbs`: the queue pairs, created before the client is told `Ready`.
    qps: Vec<Vec<QpEndpoint>>,
    /// `cm`: the listening identifier and its event channel.
    listener: Option<CmListener>,
    /// Data moves by RDMA WRITE.
    write: bool,
}

struct CmListener {
    channel: Arc<EventChannel>,
    _id: Arc<Identifier>,
}

/// What a connected QP keeps of rdma_cm: its identifier (and, through it, the event
/// channel); dropping them destroys the connection's identifier after the QP.
struct CmConn {
    _id: Arc<Identifier>,
}

/// Server: opens the device, or starts listening with rdma_cm, before the client is
/// told `Ready`.
pub fn listen(ctx: &ServerCtx, rdma: &RdmaSettings) -> Result<Box<dyn Acceptor>> {
    let s = &ctx.plan;
    let near = ctx.local.ip().to_canonical();
    if rdma.api == RdmaApi::Cm {
        let channel = EventChannel::new().map_err(|e| anyhow!("rdma_cm: {e:#}"))?;
        channel.set_nonblocking(true)?;
        let id = channel
            .create_id(PortSpace::Tcp)
            .map_err(|e| anyhow!("rdma_create_id: {e:#}"))?;
        let addr = port_offset(SocketAddr::new(near, ctx.port), ctx.port, CM_PORT_OFFSET)?;
        id.bind_addr(addr)
            .map_err(|e| anyhow!("rdma_cm cannot bind {addr}: {e:#}"))?;
        let backlog = i32::try_from(s.shape.nstreams * s.shape.nsockets).unwrap_or(i32::MAX);
        id.listen(backlog)
            .map_err(|e| anyhow!("rdma_listen on {addr}: {e:#}"))?;
        return Ok(Box::new(VerbsAcceptor {
            qps: Vec::new(),
            listener: Some(CmListener { channel, _id: id }),
            write: rdma.write,
        }));
    }
    let names = device_names()?;
    let hint = (rdma.device.as_deref()).filter(|h| names.iter().any(|n| n == h));
    let dev = VerbsDevice::open(hint, Some(near))?;
    let opts = s.stream_options(ctx.abort.clone());
    let qps = create_all(&dev, s, &opts, rdma.write)?;
    Ok(Box::new(VerbsAcceptor {
        qps,
        listener: None,
        write: rdma.write,
    }))
}

impl Acceptor for VerbsAcceptor {
    fn accept(mut self: Box<Self>, ctx: &ServerCtx) -> Result<Vec<Box<dyn Stream>>> {
        let s = &ctx.plan;
        let mut sock = routed_side_connection(ctx)?;
        let opts = s.stream_options(ctx.abort.clone());
        let cm = self.listener.is_some();
        if let Some(listener) = &self.listener {
            // The client connects every QP before it sends its details.
            self.qps = cm_accept_all(listener, ctx, &opts, self.write)?;
        }
        let client: VerbsClientDetails = read_json(ctx.frames, &mut sock, ctx.setup_timeout)?;
        ctx.frames.check_version(client.version)?;
        if let Err(e) = set_peers(&mut self.qps, &client.qps, !cm) {
            let _ = write_json(
                ctx.frames,
                &mut sock,
                &VerbsServerDetails::Error {
                    message: format!("{e:#}"),
                },
            );
            return Err(e);
        }
        write_json(
            ctx.frames,
            &mut sock,
            &VerbsServerDetails::Qps {
                qps: details(&self.qps),
            },
        )?;
        watch(&mut self.qps, sock)?;
        into_streams(self.qps, opts)
    }
}

/// The next rdma_cm event on `channel`, waiting until `deadline`.
fn next_event(
    channel: &Arc<EventChannel>,
    deadline: Instant,
    abort: &AtomicBool,
    waiting_for: &str,
) -> Result<Event> {
    loop {
        match channel.get_cm_event() {
            Ok(ev) => return Ok(ev),
            Err(e) if matches!(e.0, GetEventErrorKind::NoEvent) => {}
            Err(e) => return Err(anyhow!("rdma_get_cm_event: {e:#}")),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("rdma_cm: timed out waiting for {waiting_for}");
        }
        if abort.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        let mut pfd = libc::pollfd {
            fd: channel.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.min(CM_WAIT_SLICE).as_millis().max(1) as libc::c_int;
        // SAFETY: one valid pollfd on the stack for the duration of the call.
        unsafe { libc::poll(&mut pfd, 1, ms) };
    }
}

/// Waits for event `want` on `channel` (acknowledging it); any other is an error.
fn expect_event(
    channel: &Arc<EventChannel>,
    want: EventType,
    deadline: Instant,
    abort: &AtomicBool,
    what: &str,
) -> Result<()> {
    let ev = next_event(channel, deadline, abort, what)?;
    let (kind, status) = (ev.event_type(), ev.status());
    ev.ack().map_err(|e| anyhow!("rdma_ack_cm_event: {e:#}"))?;
    if kind != want {
        bail!("rdma_cm: {what} failed: {kind:?} (status {status})");
    }
    Ok(())
}

/// The RTR and RTS attributes rdma_cm gives `id`, applied to `qp` (no RNR retries: the
/// credits make RNR impossible, so one would be a bug to report, not to retry).
fn cm_ready(id: &Identifier, qp: &mut QpEndpoint) -> Result<()> {
    let rtr = id
        .get_qp_attr(QueuePairState::ReadyToReceive)
        .map_err(|e| anyhow!("rdma_init_qp_attr(RTR): {e:#}"))?;
    qp.modify(&rtr, "RTR")?;
    let mut rts = id
        .get_qp_attr(QueuePairState::ReadyToSend)
        .map_err(|e| anyhow!("rdma_init_qp_attr(RTS): {e:#}"))?;
    rts.setup_rnr_retry(0);
    qp.modify(&rts, "RTS")?;
    Ok(())
}

/// A QP on the device rdma_cm bound `id` to, in INIT with rdma_cm's attributes.
fn cm_endpoint(
    id: &Arc<Identifier>,
    write: bool,
    opts: &StreamOptions,
    near: IpAddr,
) -> Result<QpEndpoint> {
    let dctx = id
        .get_device_context()
        .context("rdma_cm bound the connection to no RDMA device")?;
    let dev = VerbsDevice::from_context(dctx, id.port(), Some(near))?;
    let init = id
        .get_qp_attr(QueuePairState::Init)
        .map_err(|e| anyhow!("rdma_init_qp_attr(INIT): {e:#}"))?;
    let keep: Box<dyn Send> = Box::new(CmConn { _id: id.clone() });
    Ok(QpEndpoint::create(
        &dev,
        opts,
        write,
        Some(init),
        Some(keep),
    )?)
}

/// Client: connects one QP to `server` with rdma_cm.
fn cm_connect(
    rdma: &RdmaSettings,
    opts: &StreamOptions,
    server: SocketAddr,
    bind: Option<IpAddr>,
    near: IpAddr,
    deadline: Instant,
    abort: &AtomicBool,
) -> Result<QpEndpoint> {
    let channel = EventChannel::new().map_err(|e| anyhow!("rdma_cm: {e:#}"))?;
    channel.set_nonblocking(true)?;
    let id = channel
        .create_id(PortSpace::Tcp)
        .map_err(|e| anyhow!("rdma_create_id: {e:#}"))?;
    let src = bind.map(|ip| SocketAddr::new(ip, 0));
    id.resolve_addr(src, server, CM_RESOLVE_TIMEOUT)
        .map_err(|e| anyhow!("rdma_resolve_addr({server}): {e:#}"))?;
    let what = format!("resolving {server}");
    expect_event(&channel, EventType::AddressResolved, deadline, abort, &what)?;
    id.resolve_route(CM_RESOLVE_TIMEOUT)
        .map_err(|e| anyhow!("rdma_resolve_route({server}): {e:#}"))?;
    let what = format!("a route to {server}");
    expect_event(&channel, EventType::RouteResolved, deadline, abort, &what)?;
    let mut qp = cm_endpoint(&id, rdma.write, opts, near)?;
    if let Some(want) = &rdma.device {
        if qp.port().device != *want {
            bail!(
                "rdma_cm reaches {server} through RDMA device {}, not {want} (-D)",
                qp.port().device
            );
        }
    }
    let mut param = ConnectionParameter::default();
    param.setup_qp_number(qp.qpn());
    id.connect(param)
        .map_err(|e| anyhow!("rdma_connect({server}): {e:#}"))?;
    let what = format!("the server's answer at {server}");
    expect_event(&channel, EventType::ConnectResponse, deadline, abort, &what)?;
    cm_ready(&id, &mut qp)?;
    id.establish()
        .map_err(|e| anyhow!("rdma_establish: {e:#}"))?;
    Ok(qp)
}

/// Server: accepts the client's `nstreams × nsockets` rdma_cm connections, in the order
/// the client makes them.
fn cm_accept_all(
    listener: &CmListener,
    ctx: &ServerCtx,
    opts: &StreamOptions,
    write: bool,
) -> Result<Vec<Vec<QpEndpoint>>> {
    let s = &ctx.plan;
    let near = ctx.local.ip().to_canonical();
    let total = (s.shape.nstreams * s.shape.nsockets) as usize;
    let deadline = Instant::now() + ctx.setup_timeout;
    let mut accepted = Vec::with_capacity(total);
    let mut established = 0;
    while established < total {
        let ev = next_event(
            &listener.channel,
            deadline,
            &ctx.abort,
            "the client's rdma_cm connections",
        )?;
        match ev.event_type() {
            EventType::ConnectRequest => {
                let id = ev
                    .cm_id()
                    .context("a connect request without an identifier")?;
                ev.ack().map_err(|e| anyhow!("rdma_ack_cm_event: {e:#}"))?;
                if accepted.len() == total {
                    // More connections than the session asked for: dropping the
                    // identifier refuses this one.
                    continue;
                }
                let mut qp = cm_endpoint(&id, write, opts, near)?;
                cm_ready(&id, &mut qp)?;
                let mut param = ConnectionParameter::default();
                param.setup_qp_number(qp.qpn());
                id.accept(param)
                    .map_err(|e| anyhow!("rdma_accept: {e:#}"))?;
                accepted.push(qp);
            }
            EventType::Established => {
                ev.ack().map_err(|e| anyhow!("rdma_ack_cm_event: {e:#}"))?;
                established += 1;
            }
            other => {
                let status = ev.status();
                drop(ev);
                bail!(
                    "rdma_cm: {other:?} (status {status}) while accepting the client's connections"
                );
            }
        }
    }
    let per_stream = s.shape.nsockets as usize;
    let mut qps = Vec::with_capacity(s.shape.nstreams as usize);
    let mut it = accepted.into_iter();
    for _ in 0..s.shape.nstreams {
        qps.push(it.by_ref().take(per_stream).collect());
    }
    Ok(qps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::PROTOCOL_MAJOR;

    fn qp(n: u32) -> QpDetails {
        QpDetails {
            qpn: n,
            lid: 0,
            gid: vec![0; 16],
            psn: 1,
            mtu: 3,
            ring_addr: 0,
            ring_key: 0,
            ring_slots: 64,
            slot_bytes: 1000,
        }
    }

    #[test]
    fn details_frames_roundtrip_as_json() {
        let c = VerbsClientDetails {
            version: PROTOCOL_MAJOR,
            qps: vec![vec![qp(1), qp(2)], vec![qp(3), qp(4)]],
        };
        let back: VerbsClientDetails =
            serde_json::from_slice(&serde_json::to_vec(&c).expect("encode")).expect("decode");
        assert_eq!(back.qps, c.qps);
        let e = serde_json::to_string(&VerbsServerDetails::Error {
            message: "no".into(),
        })
        .expect("encode");
        assert!(matches!(
            serde_json::from_str(&e).expect("decode"),
            VerbsServerDetails::Error { .. }
        ));
        for bad in [
            r#"{"version":1}"#,
            r#"{"version":1,"qps":[[{"qpn":1}]]}"#,
            r#"{"type":"qps"}"#,
            r#"{"type":"nonsense","qps":[]}"#,
            "[]",
        ] {
            assert!(
                serde_json::from_str::<VerbsClientDetails>(bad).is_err()
                    && serde_json::from_str::<VerbsServerDetails>(bad).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn peers_of_the_wrong_shape_are_refused_before_any_use() {
        // No queue pairs opened: the shape check alone must refuse these.
        let mut none: Vec<Vec<QpEndpoint>> = Vec::new();
        assert!(set_peers(&mut none, &[vec![qp(1)]], true).is_err());
        let mut empty_stream: Vec<Vec<QpEndpoint>> = vec![Vec::new()];
        assert!(set_peers(&mut empty_stream, &[vec![qp(1)]], false).is_err());
        assert!(set_peers(&mut empty_stream, &[vec![], vec![]], false).is_err());
        assert!(set_peers(&mut empty_stream, &[vec![]], true).is_ok());
    }
}
