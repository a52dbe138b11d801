//! `--rdma-api ofi`: the STREAM over libfabric (see [`super::ofi_stream`]).
//!
//! Connection details travel over the side connection (see [`super::side`]): the client
//! sends a [`ClientDetails`] frame with the names of its endpoints, and the server
//! answers with a [`ServerDetails`] frame naming its own. The control protocol itself is
//! untouched.

use super::ofi_stream::{self, Endpoint, EndpointDetails, Info, OfiStream, OfiTarget};
use super::settings::RdmaSettings;
use super::side::{read_json, routed_side_connection, side_connection, write_json};
use crate::transport::stream::{Stream, StreamOptions};
use crate::transport::StreamPlan;
use crate::transport::{Acceptor, ClientCtx, ServerCtx};
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::net::TcpStream;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

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

/// Pins the libfabric provider to the one libfabric picks, failing with what is missing.
pub(super) fn prepare(rdma: &mut RdmaSettings) -> Result<()> {
    let info = match &rdma.ofi_provider {
        Some(p) => Info::get(&target(rdma, Some(p.clone()), None))?,
        None => default_provider(rdma)?,
    };
    rdma.ofi_provider = Some(info.provider_name());
    Ok(())
}

fn default_provider(rdma: &RdmaSettings) -> Result<Info> {
    let mut last = None;
    for p in DEFAULT_PROVIDERS {
        match Info::get(&target(rdma, Some((*p).to_string()), None)) {
            Ok(info) => return Ok(info),
            Err(e @ ofi_stream::OfiError::Library(_)) => return Err(e.into()),
            Err(e) => last = Some(e),
        }
    }
    Err(anyhow!(
        "no libfabric provider among {} works here ({}); name one with --ofi-provider (`fi_info -l` lists them)",
        DEFAULT_PROVIDERS.join(", "),
        last.map_or_else(String::new, |e| e.to_string())
    ))
}

fn target(rdma: &RdmaSettings, provider: Option<String>, node: Option<String>) -> OfiTarget {
    OfiTarget {
        provider,
        domain: rdma.device.clone(),
        node,
        rma: rdma.write,
    }
}

/// Opens `nstreams × nsockets` endpoints on `node`.
fn open_endpoints(
    s: &StreamPlan,
    rdma: &RdmaSettings,
    node: String,
    abort: Arc<AtomicBool>,
) -> Result<Vec<Vec<Endpoint>>> {
    let info = Info::get(&target(rdma, rdma.ofi_provider.clone(), Some(node.clone())))
        .with_context(|| format!("libfabric on {node}"))?;
    let opts = s.stream_options(abort);
    (0..s.shape.nstreams)
        .map(|_| {
            (0..s.shape.nsockets)
                .map(|_| Endpoint::open(&info, &opts, rdma.write).map_err(anyhow::Error::from))
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
            if name.name.len() > ofi_stream::MAX_NAME_LEN {
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
    ctx_opts: StreamOptions,
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

struct OfiAcceptor {
    endpoints: Vec<Vec<Endpoint>>,
}

/// Server: opens the endpoints on the address the client reached.
pub(super) fn listen(ctx: &ServerCtx, rdma: &RdmaSettings) -> Result<Box<dyn Acceptor>> {
    let node = ctx.local.ip().to_canonical().to_string();
    let endpoints = open_endpoints(&ctx.plan, rdma, node, ctx.abort.clone())?;
    Ok(Box::new(OfiAcceptor { endpoints }))
}

/// Client: swaps endpoint names with the server over the side connection.
pub(super) fn connect(ctx: &ClientCtx, rdma: &RdmaSettings) -> Result<Vec<Box<dyn Stream>>> {
    let s = &ctx.plan;
    let mut sock = side_connection(ctx)?;
    // Endpoints open on the address that reaches the server.
    let node = sock.local_addr()?.ip().to_canonical().to_string();
    let mut endpoints = open_endpoints(s, rdma, node, ctx.abort.clone())?;
    write_json(
        ctx.frames,
        &mut sock,
        &ClientDetails {
            version: ctx.frames.version(),
            endpoints: details(&endpoints),
        },
    )?;
    match read_json::<ServerDetails>(ctx.frames, &mut sock, ctx.setup_timeout)? {
        ServerDetails::Endpoints { endpoints: peers } => set_peers(&mut endpoints, &peers)?,
        ServerDetails::Error { message } => bail!("server: {message}"),
    }
    watch(&mut endpoints, sock)?;
    into_streams(endpoints, s.stream_options(ctx.abort.clone()))
}

impl Acceptor for OfiAcceptor {
    fn accept(mut self: Box<Self>, ctx: &ServerCtx) -> Result<Vec<Box<dyn Stream>>> {
        let mut sock = routed_side_connection(ctx)?;
        let client: ClientDetails = read_json(ctx.frames, &mut sock, ctx.setup_timeout)?;
        ctx.frames.check_version(client.version)?;
        if let Err(e) = set_peers(&mut self.endpoints, &client.endpoints) {
            let _ = write_json(
                ctx.frames,
                &mut sock,
                &ServerDetails::Error {
                    message: format!("{e:#}"),
                },
            );
            return Err(e);
        }
        write_json(
            ctx.frames,
            &mut sock,
            &ServerDetails::Endpoints {
                endpoints: details(&self.endpoints),
            },
        )?;
        watch(&mut self.endpoints, sock)?;
        into_streams(self.endpoints, ctx.plan.stream_options(ctx.abort.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::PROTOCOL_MAJOR;

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
            version: PROTOCOL_MAJOR,
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
}
