//! The TCP side connection that RDMA connection details travel over.
//!
//! The client opens it on the server's base port and names it with a `DataHello`
//! (stream 0, socket 0), so the server's accept loop routes it to the session like any
//! data connection. Frames on it are the control protocol's: a 4-byte big-endian length
//! and JSON, at most [`SetupFrames::max_frame`] bytes.

use crate::transport::setup::{SetupFrames, SetupMessage};
use crate::transport::{tcp, ClientCtx, LocalEnd, ServerCtx};
use anyhow::{bail, Context, Result};
use serde::{de::DeserializeOwned, Serialize};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub(crate) fn write_json<T: Serialize>(
    frames: &dyn SetupFrames,
    sock: &mut TcpStream,
    value: &T,
) -> Result<()> {
    let body = serde_json::to_vec(value)?;
    if body.len() > frames.max_frame() {
        bail!("connection details exceed {} bytes", frames.max_frame());
    }
    sock.write_all(&(body.len() as u32).to_be_bytes())?;
    sock.write_all(&body)?;
    Ok(())
}

pub(crate) fn read_json<T: DeserializeOwned>(
    frames: &dyn SetupFrames,
    sock: &mut TcpStream,
    timeout: Duration,
) -> Result<T> {
    sock.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
    let mut header = [0u8; 4];
    sock.read_exact(&mut header)
        .context("the peer did not send its RDMA connection details")?;
    let len = frames.frame_len(header)?;
    let mut body = vec![0u8; len];
    sock.read_exact(&mut body)
        .context("the peer's RDMA connection details were cut short")?;
    serde_json::from_slice(&body).context("malformed RDMA connection details")
}

/// Client: opens the TCP side connection the RDMA details travel over, on the server's
/// base port, and names it with a `DataHello` so the server routes it to the session.
pub(crate) fn side_connection(ctx: &ClientCtx) -> Result<TcpStream> {
    let from = LocalEnd {
        ip: ctx.bind,
        port: None,
        device: None,
    };
    let mut sock = tcp::connect(ctx.server, from, None, ctx.setup_timeout)
        .with_context(|| format!("cannot connect to {} for the RDMA set-up", ctx.server))?;
    sock.set_write_timeout(Some(ctx.setup_timeout))?;
    ctx.frames.write(
        &mut sock,
        &SetupMessage::DataHello {
            version: ctx.frames.version(),
            session: ctx.session,
            stream: 0,
            socket: 0,
        },
    )?;
    Ok(sock)
}

/// Server: waits for the client's side connection (see [`side_connection`]).
pub(crate) fn routed_side_connection(ctx: &ServerCtx) -> Result<TcpStream> {
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
