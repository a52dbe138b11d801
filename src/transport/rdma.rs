//! The RDMA transport (`-R`).
//!
//! `--rdma-api ofi` runs over libfabric (see [`crate::stream::ofi`]). Its connection
//! details travel over TCP, on the server's base port, in a side connection the
//! server's accept loop routes to the session like any data connection: the client
//! opens it with a `DataHello` (stream 0, socket 0), sends a [`ClientDetails`] frame
//! with the names of its endpoints, and the server answers with a [`ServerDetails`]
//! frame naming its own. Frames are the control protocol's: a 4-byte big-endian length
//! and JSON, at most [`control::MAX_FRAME`] bytes. The control protocol itself is
//! untouched.
//!
//! `ibverbs` and `cm` run over verbs queue pairs (see [`super::verbs`]), with their
//! details on the same kind of side connection. `rsocket` runs the TCP STREAM over
//! librdmacm's rsockets (see [`super::rsocket`]). Every API first checks what this host
//! lacks (library, device) and fails before anything is sent, saying what is missing.

use super::{stream_options, Acceptor, ClientCtx, ServerCtx, Transport};
use crate::control::{self, Message, PROTOCOL_VERSION};
use crate::settings::{Protocol, RdmaApi, Settings};
use crate::stream::ofi::{self, Endpoint, EndpointDetails, Info, OfiStream, OfiTarget};
use crate::stream::Stream;
use anyhow::{anyhow, bail, Context, Result};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The RDMA transport.
pub struct RdmaTransport;

/// Providers tried, in order, when `--ofi-provider` is not given.
const DEFAULT_PROVIDERS: &[&str] = &["verbs", "efa", "tcp"];

/// Client → server over the side connection: the client's endpoint names.
#[derive(Debug, Serialize, Deserialize)]
pub struct ClientDetails {
    pub version: u32,
    /// Endpoints, `[stream][socket]`.
    pub endpoints: Vec<Vec<EndpointDetails>>,
}

/// Server → client: the server's endpoint names, or why it cannot go on.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerDetails {
    Endpoints {
        endpoints: Vec<Vec<EndpointDetails>>,
    },
    Error {
        message: String,
    },
}

/// Checks, before the server is contacted, that this host can run `settings`' RDMA
/// API, and pins the libfabric provider to the one libfabric picks. Fails with one line
/// saying what is missing and how to get it.
pub fn prepare(settings: &Settings) -> Result<Settings> {
    let mut s = settings.clone();
    if s.protocol != Protocol::Rdma {
        return Ok(s);
    }
    match s.rdma_api {
        RdmaApi::Ofi => {
            let info = match &s.ofi_provider {
                Some(p) => Info::get(&target(&s, Some(p.clone()), None))?,
                None => default_provider(&s)?,
            };
            s.ofi_provider = Some(info.provider_name());
            Ok(s)
        }
        RdmaApi::Ibverbs | RdmaApi::Cm => {
            if let Some(missing) = verbs_missing(s.rdma_api, s.rdma_device.as_deref()) {
                return Err(missing);
            }
            super::verbs::prepare(&mut s)?;
            Ok(s)
        }
        RdmaApi::Rsocket => {
            if let Some(missing) = verbs_missing(s.rdma_api, s.rdma_device.as_deref()) {
                return Err(missing);
            }
            super::rsocket::check(&s)?;
            Ok(s)
        }
    }
}

fn default_provider(s: &Settings) -> Result<Info> {
    let mut last = None;
    for p in DEFAULT_PROVIDERS {
        match Info::get(&target(s, Some((*p).to_string()), None)) {
            Ok(info) => return Ok(info),
            Err(e @ ofi::OfiError::Library(_)) => return Err(e.into()),
            Err(e) => last = Some(e),
        }
    }
    Err(anyhow!(
        "no libfabric provider among {} works here ({}); name one with --ofi-provider (`fi_info -l` lists them)",
        DEFAULT_PROVIDERS.join(", "),
        last.map_or_else(String::new, |e| e.to_string())
    ))
}

fn target(s: &Settings, provider: Option<String>, node: Option<String>) -> OfiTarget {
    OfiTarget {
        provider,
        domain: s.rdma_device.clone(),
        node,
        rma: s.rdma_write,
    }
}

/// What this host lacks to run `api` over verbs (library, device, the device named), if
/// anything.
pub(super) fn verbs_missing(api: RdmaApi, device: Option<&str>) -> Option<anyhow::Error> {
    let (lib, package) = match api {
        RdmaApi::Ibverbs => ("libibverbs.so.1", "libibverbs1 ibverbs-providers"),
        _ => ("librdmacm.so.1", "librdmacm1 ibverbs-providers"),
    };
    // SAFETY: loading rdma-core's library only runs its own initializers; it is unloaded
    // at once.
    if let Err(e) = unsafe { libloading::Library::new(lib) } {
        return Some(anyhow!(
            "--rdma-api {} needs {lib}, which cannot be loaded here ({e}); install it with `apt-get install {package}`",
            api.name()
        ));
    }
    let devices: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    if devices.is_empty() {
        return Some(anyhow!(
            "no RDMA device found (/sys/class/infiniband is empty or missing); add Soft-RoCE with `modprobe rdma_rxe; rdma link add rxe0 type rxe netdev eth0`, or run over libfabric with `--rdma-api ofi --ofi-provider tcp`"
        ));
    }
    if let Some(d) = device {
        if !devices.iter().any(|x| x == d) {
            return Some(anyhow!(
                "RDMA device '{d}' not found; devices here: {}",
                devices.join(", ")
            ));
        }
    }
    None
}

/// Opens `nstreams × nsockets` endpoints on `node`.
fn open_endpoints(
    s: &Settings,
    node: String,
    abort: Arc<AtomicBool>,
) -> Result<Vec<Vec<Endpoint>>> {
    let info = Info::get(&target(s, s.ofi_provider.clone(), Some(node.clone())))
        .with_context(|| format!("libfabric on {node}"))?;
    let opts = stream_options(s, abort);
    (0..s.nstreams)
        .map(|_| {
            (0..s.nsockets)
                .map(|_| Endpoint::open(&info, &opts, s.rdma_write).map_err(anyhow::Error::from))
                .collect()
        })
        .collect()
}

fn details(endpoints: &[Vec<Endpoint>]) -> Vec<Vec<EndpointDetails>> {
    endpoints
        .iter()
        .map(|s| s.iter().map(Endpoint::details).collect())
        .collect()
}

/// Gives every endpoint its peer; `peers` must have the same shape.
fn set_peers(endpoints: &mut [Vec<Endpoint>], peers: &[Vec<EndpointDetails>]) -> Result<()> {
    let shape_ok = peers.len() == endpoints.len()
        && peers
            .iter()
            .zip(endpoints.iter())
            .all(|(p, e)| p.len() == e.len());
    if !shape_ok {
        bail!("the peer sent endpoint names for a different number of streams or sockets");
    }
    for (eps, names) in endpoints.iter_mut().zip(peers) {
        for (e, name) in eps.iter_mut().zip(names) {
            if name.name.len() > ofi::MAX_NAME_LEN {
                bail!("the peer's endpoint name is too long");
            }
            e.set_peer(name)?;
        }
    }
    Ok(())
}

/// Keeps `sock` open for the run: every endpoint watches it to notice the peer leaving.
fn watch(endpoints: &mut [Vec<Endpoint>], sock: TcpStream) -> Result<()> {
    sock.set_nonblocking(true)?;
    let sock = Arc::new(sock);
    for e in endpoints.iter_mut().flatten() {
        e.set_watch(sock.clone());
    }
    Ok(())
}

fn into_streams(
    endpoints: Vec<Vec<Endpoint>>,
    ctx_opts: crate::stream::StreamOptions,
) -> Result<Vec<Box<dyn Stream>>> {
    endpoints
        .into_iter()
        .map(|eps| {
            OfiStream::from_endpoints(eps, ctx_opts.clone())
                .map(|s| Box::new(s) as Box<dyn Stream>)
                .map_err(anyhow::Error::from)
        })
        .collect()
}

pub(super) fn write_json<T: Serialize>(sock: &mut TcpStream, value: &T) -> Result<()> {
    let body = serde_json::to_vec(value)?;
    if body.len() > control::MAX_FRAME {
        bail!("connection details exceed {} bytes", control::MAX_FRAME);
    }
    sock.write_all(&(body.len() as u32).to_be_bytes())?;
    sock.write_all(&body)?;
    Ok(())
}

pub(super) fn read_json<T: DeserializeOwned>(sock: &mut TcpStream, timeout: Duration) -> Result<T> {
    sock.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
    let mut header = [0u8; control::HEADER_LEN];
    sock.read_exact(&mut header)
        .context("the peer did not send its RDMA connection details")?;
    let len = control::frame_len(header)?;
    let mut body = vec![0u8; len];
    sock.read_exact(&mut body)
        .context("the peer's RDMA connection details were cut short")?;
    serde_json::from_slice(&body).context("malformed RDMA connection details")
}

struct OfiAcceptor {
    endpoints: Vec<Vec<Endpoint>>,
}

impl Transport for RdmaTransport {
    fn listen(&self, ctx: &ServerCtx) -> Result<Box<dyn Acceptor>> {
        let s = &ctx.settings;
        match s.rdma_api {
            RdmaApi::Ofi => {}
            RdmaApi::Ibverbs | RdmaApi::Cm => {
                if let Some(missing) = verbs_missing(s.rdma_api, None) {
                    return Err(missing);
                }
                return super::verbs::listen(ctx);
            }
            RdmaApi::Rsocket => {
                if let Some(missing) = verbs_missing(s.rdma_api, None) {
                    return Err(missing);
                }
                return super::rsocket::listen(ctx);
            }
        }
        let node = ctx.local.ip().to_canonical().to_string();
        let endpoints = open_endpoints(s, node, ctx.abort.clone())?;
        Ok(Box::new(OfiAcceptor { endpoints }))
    }

    fn connect(&self, ctx: &ClientCtx) -> Result<Vec<Box<dyn Stream>>> {
        let s = &ctx.settings;
        match s.rdma_api {
            RdmaApi::Ofi => {}
            RdmaApi::Ibverbs | RdmaApi::Cm => return super::verbs::connect(ctx),
            RdmaApi::Rsocket => return super::rsocket::connect(ctx),
        }
        let mut sock = side_connection(ctx)?;
        // Endpoints open on the address that reaches the server.
        let node = sock.local_addr()?.ip().to_canonical().to_string();
        let mut endpoints = open_endpoints(s, node, ctx.abort.clone())?;
        write_json(
            &mut sock,
            &ClientDetails {
                version: PROTOCOL_VERSION,
                endpoints: details(&endpoints),
            },
        )?;
        match read_json::<ServerDetails>(&mut sock, ctx.setup_timeout)? {
            ServerDetails::Endpoints { endpoints: peers } => set_peers(&mut endpoints, &peers)?,
            ServerDetails::Error { message } => bail!("server: {message}"),
        }
        watch(&mut endpoints, sock)?;
        into_streams(endpoints, stream_options(s, ctx.abort.clone()))
    }
}

/// Client: opens the TCP side connection the RDMA details travel over, on the server's
/// base port, and names it with a `DataHello` so the server routes it to the session.
pub(super) fn side_connection(ctx: &ClientCtx) -> Result<TcpStream> {
    let mut sock = super::tcp::connect(ctx.server, ctx.bind, None, ctx.setup_timeout)
        .with_context(|| format!("cannot connect to {} for the RDMA set-up", ctx.server))?;
    sock.set_write_timeout(Some(ctx.setup_timeout))?;
    control::write_frame(
        &mut sock,
        &Message::DataHello {
            version: PROTOCOL_VERSION,
            session: ctx.session,
            stream: 0,
            socket: 0,
        },
    )?;
    Ok(sock)
}

/// Server: waits for the client's side connection (see [`side_connection`]).
pub(super) fn routed_side_connection(ctx: &ServerCtx) -> Result<TcpStream> {
    let deadline = Instant::now() + ctx.setup_timeout;
    let conn = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || ctx.abort.load(Ordering::Relaxed) {
            bail!(
                "the client did not send its RDMA connection details within {}s",
                ctx.setup_timeout.as_secs()
            );
        }
        if let Ok(conn) = ctx
            .routed
            .recv_timeout(left.min(Duration::from_millis(100)))
        {
            break conn;
        }
    };
    let sock = conn.sock;
    sock.set_nonblocking(false)?;
    sock.set_write_timeout(Some(ctx.setup_timeout))?;
    Ok(sock)
}

impl Acceptor for OfiAcceptor {
    fn accept(mut self: Box<Self>, ctx: &ServerCtx) -> Result<Vec<Box<dyn Stream>>> {
        let mut sock = routed_side_connection(ctx)?;
        let client: ClientDetails = read_json(&mut sock, ctx.setup_timeout)?;
        control::check_version(client.version)?;
        if let Err(e) = set_peers(&mut self.endpoints, &client.endpoints) {
            let _ = write_json(
                &mut sock,
                &ServerDetails::Error {
                    message: format!("{e:#}"),
                },
            );
            return Err(e);
        }
        write_json(
            &mut sock,
            &ServerDetails::Endpoints {
                endpoints: details(&self.endpoints),
            },
        )?;
        watch(&mut self.endpoints, sock)?;
        into_streams(
            self.endpoints,
            stream_options(&ctx.settings, ctx.abort.clone()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn details(n: u8) -> EndpointDetails {
        EndpointDetails {
            name: vec![n; 16],
            ring_addr: 0x7f00_0000_1000,
            ring_key: 42,
            ring_slots: 64,
            slot_bytes: 32768,
        }
    }

    #[test]
    fn connection_details_roundtrip_as_json() {
        let c = ClientDetails {
            version: PROTOCOL_VERSION,
            endpoints: vec![vec![details(1), details(2)], vec![details(3), details(4)]],
        };
        let back: ClientDetails =
            serde_json::from_slice(&serde_json::to_vec(&c).expect("encode")).expect("decode");
        assert_eq!(back.endpoints, c.endpoints);
        let s = ServerDetails::Error {
            message: "no".into(),
        };
        let json = serde_json::to_string(&s).expect("encode");
        assert!(matches!(
            serde_json::from_str(&json).expect("decode"),
            ServerDetails::Error { .. }
        ));
        for bad in [
            r#"{"version":1}"#,
            r#"{"version":1,"endpoints":[[{"name":"x"}]]}"#,
            "[]",
        ] {
            assert!(serde_json::from_str::<ClientDetails>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn peers_of_the_wrong_shape_are_refused_before_any_use() {
        // No endpoints opened: the shape check alone must refuse these.
        let mut none: Vec<Vec<Endpoint>> = Vec::new();
        assert!(set_peers(&mut none, &[vec![details(1)]]).is_err());
        let mut empty_stream: Vec<Vec<Endpoint>> = vec![Vec::new()];
        assert!(set_peers(&mut empty_stream, &[vec![details(1)]]).is_err());
        assert!(set_peers(&mut empty_stream, &[vec![]]).is_ok());
    }

    #[test]
    fn tcp_settings_need_no_rdma_preparation() {
        let s = Settings::default();
        assert_eq!(prepare(&s).expect("tcp"), s);
    }
}
