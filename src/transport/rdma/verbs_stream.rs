//! The verbs STREAM: `--rdma-api ibverbs` and `--rdma-api cm`.
//!
//! Each "socket" of the STREAM is one reliable-connection queue pair (RC QP) with its
//! own protection domain, completion queue and registered region, on a device opened
//! through the `sideway` crate (which loads libibverbs and librdmacm at run time, so
//! fperf builds and starts where rdma-core is missing). The two transports differ only
//! in how the QP is connected: by hand from details swapped over TCP (`ibverbs`, see
//! [`QpEndpoint::connect_ib`]), or by rdma_cm (`cm`, see `transport::rdma`).
//!
//! Memory: one region per QP, the layout of [`RingLayout`]: a ring of send slots, a ring
//! of receive slots, control slots, and (for RDMA WRITE) an inbox of small buffers for
//! the SENDs that still arrive. A packet is copied into a free send slot and posted as a
//! SEND with immediate data (inline when it fits the QP's `max_inline_data`), or with
//! `--rdma-write` as an RDMA WRITE without immediate data into the peer's next ring slot
//! (its rkey covers the receive ring alone), as perftest's `ib_write_bw` and
//! `ib_write_lat` write: the message ends at the end of the slot, followed by a
//! [`Trailer`], and the receiver takes no completion for it but finds it by polling the
//! trailer's sequence number. Every message says what it is and returns credits in its
//! immediate data or trailer ([`Imm`]); [`Credits`] keeps every sender within the
//! receives (and ring slots) its peer has free, so the receiver is never "not ready"
//! (RNR retries are set to 0: an RNR would be a bug, and fails the run instead of being
//! retried). A written slot is reused only once its credit came back, which the
//! receiver gives only after the application consumed the slot.
//!
//! Completions: the CQ is busy-polled (spin, then yield, then nap after ~20k idle polls,
//! see [`Backoff`]), not waited for on a completion channel: the latency of an operation
//! runs from its post to its completion (with MPRTT: to its ACK's arrival), and a
//! channel wake-up would add scheduler latency to every figure; the nap keeps an idle
//! receiver from burning a CPU.
//!
//! MPRTT: each data message is answered by one message (see [`answer_of`]): the 1-byte
//! ACK, a control message; or with `--echo` and `--response-size` a reply with a
//! payload, which goes as data does (a SEND into a receive slot), from a send slot,
//! against a credit like any message. Slots hold the larger of a packet and a reply,
//! so a reply is one message. The requester checks the reply's length (and an echo's
//! bytes) and re-posts its receive only then; its latency runs until the reply
//! arrived. With `--rdma-write`, requests, ACKs and replies are all written and found
//! by polling, as `ib_write_lat` does.
//!
//! End of stream: a FIN (a SEND whose 8-byte payload counts the data messages sent).
//! RC delivers in order, so every data message arrived before the FIN; the count is
//! checked all the same.
//!
//! The verbs calls go through [`QpOps`]: [`SidewayQp`] on a device, and in the unit
//! tests an in-memory RC queue pair that fails on what hardware fails on (RNR, length,
//! remote access), so the endpoint logic above runs and is checked without a device.

use super::endpoint::{Backoff, EndpointStream, RingEndpoint};
use super::ring::CONTROL_SLOTS;
use super::ring::{
    answer_of, check_reply, slot_bytes, Credits, Imm, ImmKind, Packet, RemoteRing, Reply,
    RingLayout, SendSlots, Slot,
};
use super::ring::{Trailer, TRAILER_BYTES};
use super::ring::{CONTROL_SLOT_BYTES, CREDIT_RING_MIN, RING_SLOTS_MAX};
use crate::stats::StreamStats;
use crate::stream::Deadline;
use crate::transport::stream::StreamOptions;
use rdma_mummy_sys::{
    ibv_poll_cq, ibv_post_recv, ibv_post_send, ibv_recv_wr, ibv_send_flags, ibv_send_wr, ibv_sge,
    ibv_wc, ibv_wr_opcode, rdma_t,
};
use serde::{Deserialize, Serialize};
use sideway::ibverbs::address::{AddressHandleAttribute, Gid, GidType};
use sideway::ibverbs::completion::{BasicCompletionQueue, CompletionQueue};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, LinkLayer, Mtu, PortState};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{BasicQueuePair, QueuePair, QueuePairAttribute, QueuePairState};
use sideway::ibverbs::AccessFlags;
use std::collections::VecDeque;
use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv6Addr, TcpStream};
use std::ptr;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use thiserror::Error;

/// The device port fperf uses.
pub const PORT: u8 = 1;
/// Inline sizes asked for, largest first (the device may refuse the larger ones).
const INLINE_TRIES: [u32; 3] = [256, 64, 0];
/// Bytes of a FIN's payload (the count of data messages).
const FIN_BYTES: usize = 8;
/// Largest PSN (24 bits).
const PSN_MASK: u32 = 0xff_ffff;
/// Local ACK timeout exponent (4.096 µs × 2^14 ≈ 67 ms) and transport retries.
const ACK_TIMEOUT: u8 = 14;
const RETRY_COUNT: u8 = 7;
/// Hop limit of the GRH (RoCE v2 may be routed).
const HOP_LIMIT: u8 = 64;

/// Why a verbs call failed.
#[derive(Debug, Error)]
pub enum VerbsError {
    /// The device or library could not do what was asked.
    #[error("{0}")]
    Device(String),
    /// The peer sent something fperf never sends, or went away.
    #[error("{0}")]
    Peer(String),
}

impl From<VerbsError> for io::Error {
    fn from(e: VerbsError) -> io::Error {
        match e {
            VerbsError::Peer(m) => io::Error::new(io::ErrorKind::ConnectionAborted, m),
            VerbsError::Device(m) => io::Error::other(m),
        }
    }
}

fn dev_err(what: &str, e: impl std::fmt::Display) -> VerbsError {
    VerbsError::Device(format!("{what}: {e}"))
}

/// The names of the RDMA devices libibverbs sees.
pub fn device_names() -> Result<Vec<String>, VerbsError> {
    let list = DeviceList::new().map_err(|e| dev_err("ibv_get_device_list", e))?;
    Ok(list.iter().map(|d| d.name()).collect())
}

/// An open device and the port, GID and MTU its queue pairs use.
#[derive(Clone)]
pub struct VerbsDevice {
    pub ctx: Arc<DeviceContext>,
    pub name: String,
    pub port: u8,
    pub lid: u16,
    /// The port's active MTU (`ibv_mtu` value, 1..=5).
    pub mtu: u32,
    pub gid: Gid,
    pub gid_index: u8,
}

impl VerbsDevice {
    /// Opens device `name` (the first one when `None`) and picks the GID for `near`,
    /// the local address that reaches the peer.
    pub fn open(name: Option<&str>, near: Option<IpAddr>) -> Result<VerbsDevice, VerbsError> {
        let list = DeviceList::new().map_err(|e| dev_err("ibv_get_device_list", e))?;
        let names: Vec<String> = list.iter().map(|d| d.name()).collect();
        let device = match name {
            Some(want) => list.iter().find(|d| d.name() == want).ok_or_else(|| {
                VerbsError::Device(format!(
                    "RDMA device '{want}' not found; devices here: {}",
                    names.join(", ")
                ))
            })?,
            None => list
                .iter()
                .next()
                .ok_or_else(|| VerbsError::Device("libibverbs lists no RDMA device".into()))?,
        };
        let dev_name = device.name();
        let ctx = device
            .open()
            .map_err(|e| dev_err(&format!("cannot open RDMA device {dev_name}"), e))?;
        VerbsDevice::from_context(ctx, PORT, near)
    }

    /// The device behind `ctx` (e.g. the one rdma_cm resolved), on `port`.
    pub fn from_context(
        ctx: Arc<DeviceContext>,
        port: u8,
        near: Option<IpAddr>,
    ) -> Result<VerbsDevice, VerbsError> {
        let name = ctx.name();
        let attr = ctx
            .query_port(port)
            .map_err(|e| dev_err(&format!("{name} port {port}"), e))?;
        if attr.port_state() != PortState::Active {
            return Err(VerbsError::Device(format!(
                "RDMA device {name} port {port} is not active ({:?}); is its network device up?",
                attr.port_state()
            )));
        }
        let (gid, gid_index) = if attr.link_layer() == LinkLayer::Ethernet {
            pick_roce_gid(&ctx, port, near)
                .ok_or_else(|| VerbsError::Device(format!("{name} port {port} has no RoCE GID (is its network device up with an IP address?)")))?
        } else {
            let gid = ctx
                .query_gid(port, 0)
                .map_err(|e| dev_err(&format!("{name} GID 0"), e))?;
            (gid, 0)
        };
        Ok(VerbsDevice {
            name,
            port,
            lid: attr.lid(),
            mtu: attr.active_mtu() as u32,
            gid,
            gid_index,
            ctx,
        })
    }
}

/// The GID of `port` to use on a RoCE device: RoCE v2 for `near`'s IPv4 address first,
/// then any IPv4 RoCE v2 GID, then any RoCE v2 GID, then any GID.
fn pick_roce_gid(ctx: &DeviceContext, port: u8, near: Option<IpAddr>) -> Option<(Gid, u8)> {
    let table = ctx.query_gid_table().ok()?;
    let entries: Vec<_> = table
        .iter()
        .filter(|e| e.port_num() == u32::from(port) && !e.gid().is_zero())
        .filter_map(|e| Some((e.gid(), u8::try_from(e.gid_index()).ok()?, e.gid_type())))
        .collect();
    let v4 = |g: &Gid| Ipv6Addr::from(g.raw).to_ipv4_mapped();
    let want = match near {
        Some(IpAddr::V4(a)) => Some(a),
        Some(IpAddr::V6(a)) => a.to_ipv4_mapped(),
        None => None,
    };
    let v2 = |t: &GidType| *t == GidType::RoceV2;
    entries
        .iter()
        .find(|(g, _, t)| v2(t) && want.is_some() && v4(g) == want)
        .or_else(|| entries.iter().find(|(g, _, t)| v2(t) && v4(g).is_some()))
        .or_else(|| entries.iter().find(|(_, _, t)| v2(t)))
        .or_else(|| entries.first())
        .map(|(g, i, _)| (*g, *i))
}

/// What one end tells the other about a queue pair, over the TCP side connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpDetails {
    /// Queue pair number (24 bits).
    pub qpn: u32,
    /// The port's LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// The GID, exactly 16 bytes.
    pub gid: Vec<u8>,
    /// First packet sequence number (24 bits).
    pub psn: u32,
    /// Active MTU of the port, as `ibv_mtu` (1 = 256 ... 5 = 4096).
    pub mtu: u32,
    /// Remote address and key of receive slot 0 (for RDMA WRITE); slots follow.
    pub ring_addr: u64,
    pub ring_key: u32,
    pub ring_slots: u32,
    pub slot_bytes: u32,
}

impl QpDetails {
    /// Checks details from the peer against this end's ring: everything bounded, the
    /// ring the same shape as this end's (both ends derive it from the packet size).
    pub fn validate(&self, layout: &RingLayout) -> Result<(), String> {
        if self.gid.len() != 16 {
            return Err(format!(
                "the peer's GID has {} bytes, not 16",
                self.gid.len()
            ));
        }
        if self.qpn > PSN_MASK || self.qpn == 0 {
            return Err(format!("the peer's QP number {:#x} is not valid", self.qpn));
        }
        if self.psn > PSN_MASK {
            return Err(format!("the peer's PSN {:#x} exceeds 24 bits", self.psn));
        }
        if !(1..=5).contains(&self.mtu) {
            return Err(format!("the peer's MTU code {} is not 1..5", self.mtu));
        }
        if self.ring_slots as usize != layout.recv
            || self.slot_bytes as usize != layout.slot_bytes
            || self.ring_slots as usize > RING_SLOTS_MAX
        {
            return Err(format!(
                "the peer's receive ring ({} slots of {} bytes) does not match this end's ({} of {})",
                self.ring_slots, self.slot_bytes, layout.recv, layout.slot_bytes
            ));
        }
        let span = u64::from(self.ring_slots) * u64::from(self.slot_bytes);
        if self.ring_addr.checked_add(span).is_none() {
            return Err("the peer's ring address wraps around".into());
        }
        Ok(())
    }

    /// The peer's GID as an address, readable (IPv4 for IPv4-mapped GIDs).
    pub fn describe(&self) -> String {
        let mut raw = [0u8; 16];
        if self.gid.len() == 16 {
            raw.copy_from_slice(&self.gid);
        }
        format!("{}/qp{}", describe_gid(&Gid { raw }), self.qpn)
    }
}

/// A GID as an IP address (IPv4 when mapped).
fn describe_gid(gid: &Gid) -> String {
    let a = Ipv6Addr::from(gid.raw);
    match a.to_ipv4_mapped() {
        Some(v4) => v4.to_string(),
        None => a.to_string(),
    }
}

/// `ibv_mtu` code of the smaller of two.
fn path_mtu(local: u32, peer: u32) -> Mtu {
    match local.min(peer) {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        3 => Mtu::Mtu1024,
        4 => Mtu::Mtu2048,
        _ => Mtu::Mtu4096,
    }
}

/// What answers each data message of a STREAM with `opts`, if anything.
fn answer_for(opts: &StreamOptions) -> Option<Reply> {
    answer_of(opts.reply)
}

/// The rings of a QP for `opts` (over RDMA WRITE with `write`): slots of a packet (or
/// of a larger reply) and, written, its trailer, but never smaller than a FIN's payload
/// (a FIN lands in a receive slot like any SEND), and at least [`CREDIT_RING_MIN`] of
/// them.
fn layout_for(opts: &StreamOptions, write: bool) -> RingLayout {
    let mut slot_bytes = slot_bytes(answer_for(opts), opts.pktsize);
    if write {
        slot_bytes += TRAILER_BYTES;
    }
    let mut layout = RingLayout::new(slot_bytes.max(FIN_BYTES));
    // Credits need a few receives to flow (see `Credits`); huge packets get them too.
    layout.send = layout.send.max(CREDIT_RING_MIN);
    layout.recv = layout.recv.max(CREDIT_RING_MIN);
    layout
}

/// A received message not yet consumed.
#[derive(Clone, Copy, Debug)]
struct Ready {
    /// Where its bytes start in the region.
    off: usize,
    len: usize,
    /// The receive request to post again once the data is consumed (none for a written
    /// message, which took no receive).
    wqe: Option<usize>,
}

/// A completion copied out of the CQ (the poller borrows the CQ while it runs).
#[derive(Clone, Copy, Debug, Default)]
pub struct Completion {
    pub wr_id: u64,
    /// `ibv_wc_status` (0 = success).
    pub status: u32,
    /// `ibv_wc_opcode` ([`WC_SEND`], [`WC_RDMA_WRITE`], [`WC_RECV`]).
    pub opcode: u32,
    pub byte_len: u32,
    /// Immediate data, in wire order.
    pub imm: u32,
    pub vendor_err: u32,
}

/// `ibv_wc_status` names of the failures a run can meet.
fn status_name(status: u32) -> &'static str {
    match status {
        1 => "local length error",
        2 => "local QP operation error",
        4 => "local protection error",
        5 => "flushed (the QP went to the error state)",
        9 => "remote invalid request",
        10 => "remote access error",
        11 => "remote operation error",
        12 => "transport retry counter exceeded (the peer stopped answering)",
        13 => "receiver not ready (RNR) retries exceeded",
        _ => "work completion error",
    }
}

/// `ibv_wc_opcode` values fperf meets.
pub const WC_SEND: u32 = 0;
pub const WC_RDMA_WRITE: u32 = 1;
pub const WC_RECV: u32 = 128;

/// What a send work request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// A SEND with immediate data (in wire order).
    Send { imm: u32 },
    /// An RDMA WRITE without immediate data to `addr` in the peer's region of `rkey`.
    Write { rkey: u32, addr: u64 },
}

/// The verbs calls a [`QpEndpoint`] makes on its queue pair: [`SidewayQp`] on a device,
/// or an in-memory stand-in in the unit tests (which checks that no message ever finds
/// no posted receive).
pub trait QpOps: Send {
    fn qpn(&self) -> u32;
    /// Moves the QP to another state.
    fn modify(&mut self, attr: &QueuePairAttribute, state: &str) -> Result<(), VerbsError>;
    /// Remote address and key of the receive ring (RDMA WRITE), or zeros.
    fn ring(&self) -> (u64, u32);
    /// Posts a receive into `buf` (part of the registered region).
    fn post_recv(&mut self, wr_id: u64, buf: &mut [u8]) -> Result<(), VerbsError>;
    /// Posts `data` (part of the registered region) as `op` says; `inline` copies it
    /// into the work request.
    fn post_send(
        &mut self,
        wr_id: u64,
        data: &[u8],
        inline: bool,
        op: SendOp,
    ) -> Result<(), VerbsError>;
    /// Reads the completions there are into `out`, as many as fit, without waiting;
    /// returns how many. `region` is the registered region (the stand-in delivers into
    /// it; a device already did).
    fn poll(&mut self, region: &mut [u8], out: &mut [Completion]) -> Result<usize, VerbsError>;
}

/// Completions read from the CQ per poll.
const POLL_BATCH: usize = 32;

/// A queue pair on a device, through sideway; posting and polling, once per message,
/// call the provider directly with work requests built on the stack (sideway's guards
/// allocate several vectors per call, and its poller one per poll).
pub struct SidewayQp {
    // Declared (so dropped) in this order: the QP before what it uses.
    qp: BasicQueuePair,
    mr: Arc<MemoryRegion>,
    /// Remote-writable registration of the receive ring alone (`--rdma-write`).
    ring_mr: Option<Arc<MemoryRegion>>,
    cq: Arc<BasicCompletionQueue>,
    /// Where a poll's completions land.
    polled: Vec<ibv_wc>,
    _pd: Arc<ProtectionDomain>,
    /// Whatever else must live as long as the QP (rdma_cm's identifier).
    _keep: Option<Box<dyn Send>>,
}

impl QpOps for SidewayQp {
    fn qpn(&self) -> u32 {
        self.qp.qp_number()
    }

    fn modify(&mut self, attr: &QueuePairAttribute, state: &str) -> Result<(), VerbsError> {
        self.qp.modify(attr).map_err(|e| {
            dev_err(
                &format!("moving the QP to {state}"),
                format!("{e} ({:?})", e.0),
            )
        })
    }

    fn ring(&self) -> (u64, u32) {
        match &self.ring_mr {
            Some(mr) => (mr.get_ptr() as u64, mr.rkey()),
            None => (0, 0),
        }
    }

    fn post_recv(&mut self, wr_id: u64, buf: &mut [u8]) -> Result<(), VerbsError> {
        let mut sge = ibv_sge {
            addr: buf.as_mut_ptr() as u64,
            length: buf.len() as u32,
            lkey: self.mr.lkey(),
        };
        let mut wr = ibv_recv_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = ptr::null_mut();
        // SAFETY: the QP lives as long as `self`; the provider reads the request and its
        // scatter entry during the call only. `buf` lies in the registered region, which
        // outlives the QP, and fperf does not touch it until this receive completes.
        let ret = unsafe { ibv_post_recv(self.qp.qp().as_ptr(), &mut wr, &mut bad) };
        posted("ibv_post_recv", ret)
    }

    fn post_send(
        &mut self,
        wr_id: u64,
        data: &[u8],
        inline: bool,
        op: SendOp,
    ) -> Result<(), VerbsError> {
        let mut sge = ibv_sge {
            addr: data.as_ptr() as u64,
            length: data.len() as u32,
            lkey: self.mr.lkey(),
        };
        // SAFETY: an all-zero work request is a valid one (no next, no scatter list).
        let mut wr: ibv_send_wr = unsafe { MaybeUninit::zeroed().assume_init() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        if inline {
            // The provider copies inline data into the work request during the call.
            wr.send_flags |= ibv_send_flags::IBV_SEND_INLINE.0;
        }
        match op {
            SendOp::Send { imm } => {
                wr.opcode = ibv_wr_opcode::IBV_WR_SEND_WITH_IMM;
                wr.imm_data_invalidated_rkey_union.imm_data = imm;
            }
            SendOp::Write { rkey, addr } => {
                wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
                wr.wr.rdma = rdma_t {
                    remote_addr: addr,
                    rkey,
                };
            }
        }
        let mut bad = ptr::null_mut();
        // SAFETY: the QP lives as long as `self`; the provider reads the request during
        // the call only. `data` is in the registered region and is not reused until the
        // send's completion (its slot is off the free list until then).
        let ret = unsafe { ibv_post_send(self.qp.qp().as_ptr(), &mut wr, &mut bad) };
        posted("ibv_post_send", ret)
    }

    fn poll(&mut self, _region: &mut [u8], out: &mut [Completion]) -> Result<usize, VerbsError> {
        let want = out.len().min(self.polled.len());
        // SAFETY: the CQ lives as long as `self`; the provider writes at most `want`
        // entries into `polled`, which holds that many.
        let n =
            unsafe { ibv_poll_cq(self.cq.cq().as_ptr(), want as i32, self.polled.as_mut_ptr()) };
        let n = usize::try_from(n)
            .map_err(|_| dev_err("ibv_poll_cq", io::Error::from_raw_os_error(-n)))?
            .min(want);
        for (wc, c) in self.polled[..n].iter().zip(out.iter_mut()) {
            *c = Completion {
                wr_id: wc.wr_id,
                status: wc.status,
                opcode: wc.opcode,
                byte_len: wc.byte_len,
                // SAFETY: both members are a u32; the provider set `imm_data` when
                // the completion carries immediate data, and fperf reads it only then.
                imm: unsafe { wc.imm_data_invalidated_rkey_union.imm_data },
                vendor_err: wc.vendor_err,
            };
        }
        Ok(n)
    }
}

/// A post's return code (0, or an errno value) as a result.
fn posted(call: &str, ret: i32) -> Result<(), VerbsError> {
    match ret {
        0 => Ok(()),
        e => Err(dev_err(call, io::Error::from_raw_os_error(e))),
    }
}

/// What a [`QpEndpoint`] says about its device port (in its details and reports).
#[derive(Clone, Debug)]
pub struct PortInfo {
    pub device: String,
    pub port: u8,
    pub lid: u16,
    /// Active MTU (`ibv_mtu` value, 1..=5).
    pub mtu: u32,
    pub gid: Gid,
    pub gid_index: u8,
}

/// One RC queue pair with its registered rings.
pub struct QpEndpoint {
    // Declared (so dropped) before `region`: the QP and registrations go first.
    ops: Box<dyn QpOps>,
    port: PortInfo,
    /// The registered region (never resized: its address is registered).
    region: Vec<u8>,
    layout: RingLayout,
    /// Offset of the inbox (small receive buffers used with `--rdma-write`).
    inbox: usize,
    max_inline: u32,
    psn: u32,
    /// MPRTT: what answers each data message.
    answer: Option<Reply>,
    /// `--rdma-write`: data, ACKs and replies are written, and found by polling.
    write: bool,
    /// Messages written to the peer, and found in this end's ring (see [`Trailer`]).
    written_sent: u32,
    written_found: u32,
    abort: Arc<AtomicBool>,
    peer: String,
    remote: Option<RemoteRing>,
    credits: Credits,
    watch: Option<Arc<TcpStream>>,
    send_free: Vec<usize>,
    send_posted_at: Vec<Instant>,
    send_len: Vec<usize>,
    send_slots: SendSlots,
    control_free: Vec<usize>,
    ready: VecDeque<Ready>,
    /// Bytes of the front of `ready` already consumed.
    consumed: usize,
    /// A request waits for its reply (with a payload), which has arrived once `reply`
    /// holds it; at most one is ever outstanding.
    awaiting: bool,
    reply: Option<Ready>,
    /// Next ring slot an RDMA WRITE lands in.
    written_next: usize,
    msgs_sent: u64,
    acks: u64,
    msgs_received: u64,
    fin: Option<u64>,
    /// Where a poll's completions land.
    completions: [Completion; POLL_BATCH],
}

impl QpEndpoint {
    /// Creates a QP on `device`, registers its rings, moves it to INIT with `init`
    /// (the port, P_Key and access flags) and posts every receive.
    pub fn create(
        device: &VerbsDevice,
        opts: &StreamOptions,
        write: bool,
        init: Option<QueuePairAttribute>,
        keep: Option<Box<dyn Send>>,
    ) -> Result<QpEndpoint, VerbsError> {
        let layout = layout_for(opts, write);
        let region = vec![0u8; QpEndpoint::region_bytes(opts, write)];
        let pd = device
            .ctx
            .alloc_pd()
            .map_err(|e| dev_err("ibv_alloc_pd", e))?;
        let cqe = (layout.contexts() + layout.recv) as u32;
        let cq = device
            .ctx
            .create_cq_builder()
            .setup_cqe(cqe)
            .build()
            .map_err(|e| dev_err("ibv_create_cq", e))?;
        // SAFETY: `region` is allocated above and never resized; it moves into the
        // QpEndpoint, which drops its `ops` (QP and registrations) before it.
        let mr = unsafe {
            pd.reg_mr(
                region.as_ptr() as usize,
                region.len(),
                AccessFlags::LocalWrite,
            )
        }
        .map_err(|e| dev_err("ibv_reg_mr", e))?;
        let ring_mr = if write {
            let off = layout.offset(Slot::Recv(0));
            // SAFETY: as above; the range is the receive ring inside `region`.
            let mr = unsafe {
                pd.reg_mr(
                    region.as_ptr() as usize + off,
                    layout.recv * layout.slot_bytes,
                    AccessFlags::LocalWrite | AccessFlags::RemoteWrite,
                )
            }
            .map_err(|e| dev_err("ibv_reg_mr (remote write)", e))?;
            Some(mr)
        } else {
            None
        };
        let mut last_err = None;
        let mut built = None;
        for inline in INLINE_TRIES {
            let mut b = pd.create_qp_builder();
            b.setup_send_cq(cq.clone())
                .setup_recv_cq(cq.clone())
                .setup_max_send_wr((layout.send + CONTROL_SLOTS) as u32)
                .setup_max_recv_wr(layout.recv as u32)
                .setup_max_send_sge(1)
                .setup_max_recv_sge(1)
                .setup_max_inline_data(inline);
            match b.build() {
                Ok(qp) => {
                    built = Some((qp, inline));
                    break;
                }
                Err(e) => last_err = Some(e),
            }
        }
        let Some((qp, max_inline)) = built else {
            return Err(dev_err(
                "ibv_create_qp",
                last_err.map_or_else(String::new, |e| format!("{e} ({:?})", e.0)),
            ));
        };
        let ops = SidewayQp {
            qp,
            mr,
            ring_mr,
            cq,
            // SAFETY: `ibv_wc` is plain data, for which all zeros is a value.
            polled: vec![unsafe { MaybeUninit::<ibv_wc>::zeroed().assume_init() }; POLL_BATCH],
            _pd: pd,
            _keep: keep,
        };
        let port = PortInfo {
            device: device.name.clone(),
            port: device.port,
            lid: device.lid,
            mtu: device.mtu,
            gid: device.gid,
            gid_index: device.gid_index,
        };
        let mut e = QpEndpoint::with_ops(Box::new(ops), port, region, opts, write, max_inline)?;
        let init = init.unwrap_or_else(|| {
            let mut a = QueuePairAttribute::new();
            a.setup_state(QueuePairState::Init)
                .setup_pkey_index(0)
                .setup_port(device.port);
            a
        });
        e.start(init)?;
        Ok(e)
    }

    /// Moves the QP to INIT with `init` and posts every receive.
    pub fn start(&mut self, init: QueuePairAttribute) -> Result<(), VerbsError> {
        self.modify_with_access(init, "INIT")?;
        for i in 0..self.layout.recv {
            self.post_recv(i)?;
        }
        Ok(())
    }

    /// Bytes of the region a QP for `opts` (over RDMA WRITE with `write`) registers:
    /// the rings, then the inbox.
    pub fn region_bytes(opts: &StreamOptions, write: bool) -> usize {
        let layout = layout_for(opts, write);
        layout.region_bytes() + layout.recv * CONTROL_SLOT_BYTES
    }

    /// An endpoint over `ops` (in INIT, nothing posted yet) and its `region`, of
    /// [`QpEndpoint::region_bytes`] bytes.
    pub fn with_ops(
        ops: Box<dyn QpOps>,
        port: PortInfo,
        region: Vec<u8>,
        opts: &StreamOptions,
        write: bool,
        max_inline: u32,
    ) -> Result<QpEndpoint, VerbsError> {
        let layout = layout_for(opts, write);
        if region.len() != QpEndpoint::region_bytes(opts, write) {
            return Err(VerbsError::Device("the region has the wrong size".into()));
        }
        let mut psn_bytes = [0u8; 4];
        getrandom::getrandom(&mut psn_bytes).map_err(|e| dev_err("random PSN", e))?;
        Ok(QpEndpoint {
            ops,
            port,
            region,
            layout,
            inbox: layout.region_bytes(),
            max_inline,
            psn: u32::from_ne_bytes(psn_bytes) & PSN_MASK,
            answer: answer_for(opts),
            write,
            written_sent: 0,
            written_found: 0,
            abort: opts.abort.clone(),
            peer: String::new(),
            remote: None,
            credits: Credits::new(layout.recv as u32, layout.recv as u32),
            watch: None,
            send_free: (0..layout.send).rev().collect(),
            send_posted_at: vec![Instant::now(); layout.send],
            send_len: vec![0; layout.send],
            send_slots: SendSlots::new(layout.send),
            control_free: (0..CONTROL_SLOTS).rev().collect(),
            ready: VecDeque::with_capacity(layout.recv),
            consumed: 0,
            awaiting: false,
            reply: None,
            written_next: 0,
            msgs_sent: 0,
            acks: 0,
            msgs_received: 0,
            fin: None,
            completions: [Completion::default(); POLL_BATCH],
        })
    }

    /// Modifies the QP with `attr` plus this end's access flags (remote write with
    /// `--rdma-write`).
    fn modify_with_access(
        &mut self,
        mut attr: QueuePairAttribute,
        state: &str,
    ) -> Result<(), VerbsError> {
        let access = if self.write {
            AccessFlags::LocalWrite | AccessFlags::RemoteWrite
        } else {
            AccessFlags::LocalWrite
        };
        attr.setup_access_flags(access);
        self.modify(&attr, state)
    }

    /// Moves the QP to another state (rdma_cm gives the attributes for its states).
    pub fn modify(&mut self, attr: &QueuePairAttribute, state: &str) -> Result<(), VerbsError> {
        self.ops.modify(attr, state)
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.ops.qpn()
    }

    /// The device port the QP lives on.
    pub fn port(&self) -> &PortInfo {
        &self.port
    }

    /// What the peer needs to connect to this QP and write into its ring.
    pub fn details(&self) -> QpDetails {
        let (ring_addr, ring_key) = self.ops.ring();
        QpDetails {
            qpn: self.qpn(),
            lid: self.port.lid,
            gid: self.port.gid.raw.to_vec(),
            psn: self.psn,
            mtu: self.port.mtu,
            ring_addr,
            ring_key,
            ring_slots: self.layout.recv as u32,
            slot_bytes: self.layout.slot_bytes as u32,
        }
    }

    /// Takes the peer's details (already connected by rdma_cm, or about to be): checks
    /// them and, with `--rdma-write`, learns where to write.
    pub fn set_peer(&mut self, peer: &QpDetails) -> Result<(), VerbsError> {
        peer.validate(&self.layout).map_err(VerbsError::Peer)?;
        if self.write {
            self.remote = Some(RemoteRing::new(
                peer.ring_addr,
                u64::from(peer.ring_key),
                peer.ring_slots as usize,
                u64::from(peer.slot_bytes),
            ));
        }
        // The credits counted from the start on a ring of this end's shape, which
        // `validate` just checked the peer's is.
        self.peer = format!("{} via {}", peer.describe(), self.port.device);
        Ok(())
    }

    /// Connects the QP to the peer's by hand (`--rdma-api ibverbs`): RTR, then RTS.
    pub fn connect_ib(&mut self, peer: &QpDetails) -> Result<(), VerbsError> {
        self.set_peer(peer)?;
        let mut raw = [0u8; 16];
        raw.copy_from_slice(&peer.gid);
        let mut ah = AddressHandleAttribute::new();
        ah.setup_dest_lid(peer.lid)
            .setup_port(self.port.port)
            .setup_service_level(0)
            .setup_grh_src_gid_index(self.port.gid_index)
            .setup_grh_dest_gid(&Gid { raw })
            .setup_grh_hop_limit(HOP_LIMIT);
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(path_mtu(self.port.mtu, peer.mtu))
            .setup_dest_qp_num(peer.qpn)
            .setup_rq_psn(peer.psn)
            .setup_max_dest_read_atomic(0)
            .setup_min_rnr_timer(12)
            .setup_address_vector(&ah);
        self.modify(&rtr, "RTR")?;
        let mut rts = QueuePairAttribute::new();
        rts.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(self.psn)
            .setup_timeout(ACK_TIMEOUT)
            .setup_retry_cnt(RETRY_COUNT)
            .setup_rnr_retry(0)
            .setup_max_read_atomic(0);
        self.modify(&rts, "RTS")
    }

    /// Watches `sock`, the TCP connection to the peer, to notice when the peer is gone.
    pub fn set_watch(&mut self, sock: Arc<TcpStream>) {
        self.watch = Some(sock);
    }

    /// The receive buffer of receive request `i`: its ring slot, or with RDMA WRITE its
    /// inbox entry (written data owns the ring slots then).
    fn wqe_buffer(&self, i: usize) -> (usize, usize) {
        if self.write {
            (self.inbox + i * CONTROL_SLOT_BYTES, CONTROL_SLOT_BYTES)
        } else {
            (self.layout.offset(Slot::Recv(i)), self.layout.slot_bytes)
        }
    }

    /// Posts receive request `i`.
    fn post_recv(&mut self, i: usize) -> Result<(), VerbsError> {
        let (off, len) = self.wqe_buffer(i);
        let wr_id = self.layout.index(Slot::Recv(i)) as u64;
        self.ops.post_recv(wr_id, &mut self.region[off..off + len])
    }

    /// Posts `len` bytes of `slot` as a SEND with immediate data `imm`; inline when it
    /// fits.
    fn post(&mut self, slot: Slot, len: usize, imm: Imm) -> Result<(), VerbsError> {
        let off = self.layout.offset(slot);
        let wr_id = self.layout.index(slot) as u64;
        let inline = len as u32 <= self.max_inline && len > 0;
        let data = &self.region[off..off + len];
        let imm = imm.encode().to_be();
        self.ops
            .post_send(wr_id, data, inline, SendOp::Send { imm })
    }

    /// Most bytes of a message in a ring slot (a written message's trailer takes the
    /// rest).
    fn message_room(&self) -> usize {
        if self.write {
            self.layout.slot_bytes - TRAILER_BYTES
        } else {
            self.layout.slot_bytes
        }
    }

    /// Where a message of `len` bytes (at most [`Self::message_room`]) lies in the
    /// region in `slot`: at the slot's start, or for a written message so that it ends
    /// where the slot's trailer begins.
    fn message_offset(&self, slot: Slot, len: usize) -> usize {
        let off = self.layout.offset(slot);
        if self.write {
            off + self.message_room().saturating_sub(len)
        } else {
            off
        }
    }

    /// Posts the message of `len` bytes at [`Self::message_offset`] in send slot `i`,
    /// and its trailer, as an RDMA WRITE without immediate data to the same place in
    /// the peer's next ring slot (paid for by [`Credits`]).
    fn post_written(&mut self, i: usize, len: usize, imm: Imm) -> Result<(), VerbsError> {
        let Some(remote) = self.remote.as_mut() else {
            return Err(VerbsError::Device("no peer ring to write to".into()));
        };
        let (_, slot_addr) = remote.take_uncounted();
        let rkey = remote.key() as u32;
        self.written_sent = self.written_sent.wrapping_add(1);
        let trailer = Trailer {
            len: len as u32,
            imm: imm.encode(),
            seq: self.written_sent,
        };
        let slot = self.layout.offset(Slot::Send(i));
        let end = slot + self.layout.slot_bytes;
        self.region[end - TRAILER_BYTES..end].copy_from_slice(&trailer.encode());
        let start = self.message_offset(Slot::Send(i), len);
        let addr = slot_addr + (start - slot) as u64;
        let inline = (end - start) as u32 <= self.max_inline;
        let wr_id = self.layout.index(Slot::Send(i)) as u64;
        let data = &self.region[start..end];
        self.ops
            .post_send(wr_id, data, inline, SendOp::Write { rkey, addr })
    }

    /// Takes the messages the peer wrote into this end's ring, in order: the next one
    /// is there once its slot's trailer holds the next sequence number. Returns how
    /// many there were: at most a ring's worth, so a peer that writes on and on cannot
    /// keep a poll going.
    fn find_written(&mut self) -> io::Result<usize> {
        for found in 0..self.layout.recv {
            let s = self.written_next;
            let end = self.layout.offset(Slot::Recv(s)) + self.layout.slot_bytes;
            let seq = self.written_found.wrapping_add(1);
            // SAFETY: the bytes lie inside the region, which the device writes behind
            // the compiler's back: they are read afresh every time.
            let at = |off: usize| unsafe {
                ptr::read_volatile(self.region.as_ptr().add(off).cast::<[u8; 4]>())
            };
            if u32::from_le_bytes(at(end - 4)) != seq {
                return Ok(found);
            }
            // The message and the rest of its trailer landed before its sequence
            // number: read none of them before it.
            fence(Ordering::Acquire);
            let mut raw = [0u8; TRAILER_BYTES];
            raw[..4].copy_from_slice(&at(end - TRAILER_BYTES));
            raw[4..8].copy_from_slice(&at(end - 8));
            let trailer = Trailer::decode(raw);
            self.written_found = seq;
            self.written_next = (s + 1) % self.layout.recv;
            self.take_written(s, trailer)?;
        }
        Ok(self.layout.recv)
    }

    /// What a message from the peer says it is (`raw`, its immediate data or its
    /// trailer's), once the credits it returns are taken back.
    fn arrived(&mut self, raw: u32) -> io::Result<Imm> {
        let imm = Imm::decode(raw).ok_or_else(|| {
            VerbsError::Peer(format!(
                "a message of unknown kind ({raw:#x}) from the peer"
            ))
        })?;
        self.credits
            .returned(imm.credits)
            .map_err(VerbsError::Peer)?;
        Ok(imm)
    }

    /// Handles the written message found in ring slot `s`.
    fn take_written(&mut self, s: usize, trailer: Trailer) -> io::Result<()> {
        let imm = self.arrived(trailer.imm)?;
        let len = trailer.len as usize;
        if len > self.message_room() {
            return Err(
                VerbsError::Peer("a message that does not fit this end's ring".into()).into(),
            );
        }
        let ready = Ready {
            off: self.message_offset(Slot::Recv(s), len),
            len,
            wqe: None,
        };
        match imm.kind {
            ImmKind::Data | ImmKind::Reply => self.hold(imm.kind, ready),
            ImmKind::Ack => {
                self.acked()?;
                // Nothing to consume: the slot is free again.
                self.credits.reposted(1);
                Ok(())
            }
            ImmKind::Fin | ImmKind::Credit => Err(VerbsError::Peer(
                "a FIN or credit written into the ring, where they are sent".into(),
            )
            .into()),
        }
    }

    /// Keeps a data message or a reply (`kind`) until it is consumed.
    fn hold(&mut self, kind: ImmKind, ready: Ready) -> io::Result<()> {
        if kind == ImmKind::Data {
            // Credits keep a peer within the ring, but nothing stops one that writes
            // more: the ring's worth is all that is ever held.
            if self.ready.len() >= self.layout.recv {
                return Err(VerbsError::Peer(
                    "the peer wrote more messages than its credits allowed".into(),
                )
                .into());
            }
            self.msgs_received += 1;
            self.ready.push_back(ready);
            return Ok(());
        }
        if !self.awaiting || self.reply.is_some() {
            return Err(VerbsError::Peer("a reply to no request from the peer".into()).into());
        }
        self.reply = Some(ready);
        Ok(())
    }

    /// Counts an ACK from the peer, which must be due.
    fn acked(&mut self) -> io::Result<()> {
        if self.answer != Some(Reply::Ack) {
            return Err(VerbsError::Peer("an ACK from the peer where none was due".into()).into());
        }
        self.acks += 1;
        Ok(())
    }

    /// Reads the completions that are there, without waiting, and, if there were any,
    /// sends a credit-only message if one is due. Returns how many completions there
    /// were.
    fn poll(&mut self, stats: &mut StreamStats) -> io::Result<usize> {
        let n = self.ops.poll(&mut self.region, &mut self.completions)?;
        // After the CQ: a message sent before one whose completion is in hand has
        // landed too (RC places them in order), so a FIN finds the data counted.
        let found = if self.write { self.find_written()? } else { 0 };
        if n + found == 0 {
            // Nothing changed since the last poll, which sent any credits that were due
            // (as does every other place that re-posts a receive): a waiting end polls
            // over and over, so an empty poll does no more.
            return Ok(0);
        }
        // Read once, and only for a completion that records a latency: where the clock
        // is a system call, a read per empty poll would slow the polling itself.
        let mut now = None;
        for k in 0..n {
            let c = self.completions[k];
            self.complete(c, &mut now, stats)?;
        }
        self.send_credit_if_due()?;
        Ok(n + found)
    }

    /// Sends a credit-only message if enough receives were re-posted unreported (and a
    /// control slot is free; else the poll that finds a control slot's completion
    /// does).
    fn send_credit_if_due(&mut self) -> Result<(), VerbsError> {
        if !self.credits.credit_due() {
            return Ok(());
        }
        let Some(i) = self.control_free.pop() else {
            return Ok(());
        };
        let Some(carried) = self.credits.take_for_credit() else {
            self.control_free.push(i);
            return Ok(());
        };
        let off = self.layout.offset(Slot::Control(i));
        self.region[off] = 0;
        let imm = Imm {
            kind: ImmKind::Credit,
            credits: carried,
        };
        self.post(Slot::Control(i), 1, imm)
    }

    /// Handles one completion.
    fn complete(
        &mut self,
        c: Completion,
        now: &mut Option<Instant>,
        stats: &mut StreamStats,
    ) -> io::Result<()> {
        if c.status != 0 {
            let kind = if c.status == 5 || c.status == 12 {
                io::ErrorKind::ConnectionAborted
            } else {
                io::ErrorKind::Other
            };
            return Err(io::Error::new(
                kind,
                format!(
                    "RDMA completion failed on {}: {} (status {}, vendor error {:#x})",
                    self.port.device,
                    status_name(c.status),
                    c.status,
                    c.vendor_err
                ),
            ));
        }
        let slot = usize::try_from(c.wr_id)
            .ok()
            .and_then(|i| self.layout.slot(i));
        match (slot, c.opcode) {
            (Some(Slot::Send(i)), WC_SEND | WC_RDMA_WRITE) => {
                if self.answer.is_none() {
                    let now = *now.get_or_insert_with(Instant::now);
                    let ns = now.duration_since(self.send_posted_at[i]).as_nanos();
                    stats
                        .send_latency
                        .record(u64::try_from(ns).unwrap_or(u64::MAX));
                }
                stats.bytes_sent += self.send_len[i] as u64;
                self.send_free.push(i);
            }
            (Some(Slot::Control(i)), WC_SEND) => self.control_free.push(i),
            (Some(Slot::Recv(i)), WC_RECV) => {
                self.received(i, c)?;
            }
            _ => {
                return Err(VerbsError::Peer(format!(
                    "a completion fperf did not ask for (wr_id {}, opcode {})",
                    c.wr_id, c.opcode
                ))
                .into())
            }
        }
        Ok(())
    }

    /// A message arrived in receive request `i`.
    fn received(&mut self, i: usize, c: Completion) -> io::Result<()> {
        let imm = self.arrived(u32::from_be(c.imm))?;
        let len = c.byte_len as usize;
        match imm.kind {
            ImmKind::Data | ImmKind::Reply => {
                if self.write || len > self.layout.slot_bytes {
                    return Err(VerbsError::Peer(
                        "a message that does not fit this end's ring".into(),
                    )
                    .into());
                }
                let ready = Ready {
                    off: self.layout.offset(Slot::Recv(i)),
                    len,
                    wqe: Some(i),
                };
                // The receive is posted again once the message was consumed.
                return self.hold(imm.kind, ready);
            }
            ImmKind::Ack => self.acked()?,
            ImmKind::Fin => {
                let (off, cap) = self.wqe_buffer(i);
                if len != FIN_BYTES || cap < FIN_BYTES {
                    return Err(VerbsError::Peer("a malformed FIN from the peer".into()).into());
                }
                let mut count = [0u8; FIN_BYTES];
                count.copy_from_slice(&self.region[off..off + FIN_BYTES]);
                let count = u64::from_le_bytes(count);
                if count != self.msgs_received {
                    return Err(VerbsError::Peer(format!(
                        "the peer says it sent {count} messages, {} arrived",
                        self.msgs_received
                    ))
                    .into());
                }
                self.fin = Some(count);
            }
            ImmKind::Credit => {}
        }
        self.post_recv(i)?;
        self.credits.reposted(1);
        Ok(())
    }

    /// Waits for the reply to `request`, sent at `start`, and checks it (its length, an
    /// echo's bytes); only then is its receive posted again. Returns when it arrived.
    fn await_reply(
        &mut self,
        answer: Reply,
        request: &[u8],
        start: Instant,
        deadline: Deadline,
        stats: &mut StreamStats,
    ) -> io::Result<Instant> {
        self.wait_for(deadline, stats, |e| e.reply.is_some())?;
        let arrived = stats.send_latency.record_since(start);
        let Some(Ready { off, len, wqe }) = self.reply.take() else {
            return Err(io::Error::other("reply vanished"));
        };
        self.awaiting = false;
        check_reply(answer, &self.region[off..off + len], request).map_err(VerbsError::Peer)?;
        if let Some(wqe) = wqe {
            self.post_recv(wqe)?;
        }
        self.credits.reposted(1);
        self.send_credit_if_due()?;
        stats.bytes_received += len as u64;
        Ok(arrived)
    }

    /// Answers `request` as `answer` says: an ACK, or a reply from a send slot (the
    /// request's bytes for an echo), sent as data is; with RDMA WRITE an ACK goes so
    /// too.
    fn answer_request(
        &mut self,
        answer: Reply,
        request: Ready,
        stats: &mut StreamStats,
    ) -> io::Result<()> {
        if answer == Reply::Ack && !self.write {
            self.control_send(ImmKind::Ack, &[1], Deadline::Never, stats)?;
            stats.bytes_sent += 1;
            return Ok(());
        }
        self.wait_for(Deadline::Never, stats, |e| {
            !e.send_free.is_empty() && e.credits.available() >= 2
        })?;
        let (Some(i), Some(credits)) = (self.send_free.pop(), self.credits.take()) else {
            return Err(io::Error::other("send slot vanished"));
        };
        let at = self.message_offset(Slot::Send(i), answer.len(request.len));
        let n = self.send_slots.stage_reply(
            &mut self.region,
            answer,
            request.off..request.off + request.len,
            i,
            at,
        );
        // Counted now, as an ACK is: the receiving end's figures are read once the FIN
        // arrived, which may be before this send's completion.
        self.send_len[i] = 0;
        stats.bytes_sent += n as u64;
        let kind = if answer == Reply::Ack {
            ImmKind::Ack
        } else {
            ImmKind::Reply
        };
        let imm = Imm { kind, credits };
        if self.write {
            self.post_written(i, n, imm)?;
        } else {
            self.post(Slot::Send(i), n, imm)?;
        }
        Ok(())
    }

    /// Waits (polling) until `ready` says so.
    fn wait_for(
        &mut self,
        deadline: Deadline,
        stats: &mut StreamStats,
        mut ready: impl FnMut(&mut QpEndpoint) -> bool,
    ) -> io::Result<()> {
        let mut backoff = Backoff::new();
        while !ready(self) {
            if self.poll(stats)? == 0 {
                backoff.wait(deadline, &self.abort, self.watch.as_deref())?;
            }
        }
        Ok(())
    }

    /// Takes a free control slot and a credit, waiting for both.
    fn control_send(
        &mut self,
        kind: ImmKind,
        payload: &[u8],
        deadline: Deadline,
        stats: &mut StreamStats,
    ) -> io::Result<()> {
        self.wait_for(deadline, stats, |e| {
            !e.control_free.is_empty() && e.credits.available() >= 2
        })?;
        let (Some(i), Some(credits)) = (self.control_free.pop(), self.credits.take()) else {
            return Err(io::Error::other("control slot vanished"));
        };
        let off = self.layout.offset(Slot::Control(i));
        self.region[off..off + payload.len()].copy_from_slice(payload);
        self.post(Slot::Control(i), payload.len(), Imm { kind, credits })?;
        Ok(())
    }
}

impl RingEndpoint for QpEndpoint {
    fn send_packet(
        &mut self,
        packet: Packet<'_>,
        deadline: Deadline,
        stats: &mut StreamStats,
    ) -> io::Result<Option<Instant>> {
        let mut answered = None;
        for chunk in packet.chunks(self.message_room()) {
            self.wait_for(deadline, stats, |e| {
                !e.send_free.is_empty() && e.credits.available() >= 2
            })?;
            let (Some(i), Some(credits)) = (self.send_free.pop(), self.credits.take()) else {
                return Err(io::Error::other("send slot vanished"));
            };
            let off = self.message_offset(Slot::Send(i), chunk.len());
            let slot = &mut self.region[off..off + chunk.len()];
            self.send_slots.fill(i, slot, &chunk);
            // Before the post: a reply may arrive with the send's own completion.
            self.awaiting = matches!(self.answer, Some(Reply::Echo | Reply::Sized(_)));
            let start = Instant::now();
            self.send_posted_at[i] = start;
            self.send_len[i] = chunk.len();
            let imm = Imm {
                kind: ImmKind::Data,
                credits,
            };
            if self.write {
                self.post_written(i, chunk.len(), imm)?;
            } else {
                self.post(Slot::Send(i), chunk.len(), imm)?;
            }
            self.msgs_sent += 1;
            answered = match self.answer {
                // Harvest completions at once so their latency is not inflated (an
                // answered send's latency is its round trip, polled for below).
                None => {
                    self.poll(stats)?;
                    None
                }
                Some(Reply::Ack) => {
                    self.wait_for(deadline, stats, |e| e.acks > 0)?;
                    self.acks -= 1;
                    stats.bytes_received += 1;
                    Some(stats.send_latency.record_since(start))
                }
                Some(answer) => Some(self.await_reply(answer, &chunk, start, deadline, stats)?),
            };
        }
        Ok(answered)
    }

    fn finish(&mut self, deadline: Deadline, stats: &mut StreamStats) -> io::Result<()> {
        let send = self.layout.send;
        self.wait_for(deadline, stats, |e| e.send_free.len() == send)?;
        let count = self.msgs_sent.to_le_bytes();
        self.control_send(ImmKind::Fin, &count, deadline, stats)?;
        match self.wait_for(deadline, stats, |e| e.control_free.len() == CONTROL_SLOTS) {
            // Every data send completed (acknowledged by the peer's QP) above; a peer
            // that closed after reading the FIN may not have acknowledged it.
            Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => Ok(()),
            other => other,
        }
    }

    fn at_eof(&self) -> bool {
        self.fin.is_some() && self.ready.is_empty()
    }

    fn try_recv(
        &mut self,
        buf: &mut [u8],
        copy_out: bool,
        stats: &mut StreamStats,
    ) -> io::Result<Option<usize>> {
        if self.ready.is_empty() {
            self.poll(stats)?;
        }
        let Some(&request) = self.ready.front() else {
            return Ok(None);
        };
        if let (0, Some(answer)) = (self.consumed, self.answer) {
            self.answer_request(answer, request, stats)?;
        }
        let Ready { off, len, wqe } = request;
        let off = off + self.consumed;
        let n = (len - self.consumed).min(buf.len());
        if copy_out {
            buf[..n].copy_from_slice(&self.region[off..off + n]);
        }
        self.consumed += n;
        if self.consumed == len {
            self.consumed = 0;
            self.ready.pop_front();
            if let Some(wqe) = wqe {
                self.post_recv(wqe)?;
            }
            self.credits.reposted(1);
            // A receiver draining a backlog polls no CQ: give the credits back now.
            self.send_credit_if_due()?;
        }
        Ok(Some(n))
    }

    fn local_addr(&self) -> String {
        format!(
            "{}/qp{} on {}",
            describe_gid(&self.port.gid),
            self.qpn(),
            self.port.device
        )
    }

    fn peer_addr(&self) -> String {
        self.peer.clone()
    }

    fn watch(&self) -> Option<Arc<TcpStream>> {
        self.watch.clone()
    }
}

/// One end of a verbs STREAM.
pub type VerbsStream = EndpointStream<QpEndpoint>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::Timeout;
    use crate::transport::stream::Stream;
    use bytes::Bytes;
    use std::sync::Mutex;

    /// A message on the stand-in wire.
    struct Msg {
        wr_id: u64,
        data: Vec<u8>,
        op: SendOp,
    }

    /// Two queue pairs' traffic: messages towards each side, and the send completions
    /// each side gets once its message was delivered.
    #[derive(Default)]
    struct Wire {
        to: [VecDeque<Msg>; 2],
        done: [VecDeque<Completion>; 2],
    }

    /// An RC queue pair in memory, strict where hardware is: a message with no posted
    /// receive is an RNR error (fperf sets no RNR retries), a SEND larger than the
    /// receive buffer a length error, a write outside the ring an access error.
    struct FakeQp {
        side: usize,
        wire: Arc<Mutex<Wire>>,
        /// Posted receives: (wr_id, buffer address, length).
        posted: VecDeque<(u64, usize, usize)>,
        /// The receive ring (offset, bytes) that RDMA WRITEs may reach.
        ring: (u64, u64),
        max_posted: usize,
    }

    impl QpOps for FakeQp {
        fn qpn(&self) -> u32 {
            0x100 + self.side as u32
        }

        fn modify(&mut self, _: &QueuePairAttribute, _: &str) -> Result<(), VerbsError> {
            Ok(())
        }

        fn ring(&self) -> (u64, u32) {
            (self.ring.0, 7)
        }

        fn post_recv(&mut self, wr_id: u64, buf: &mut [u8]) -> Result<(), VerbsError> {
            if self.posted.len() == self.max_posted {
                return Err(VerbsError::Device("receive queue full".into()));
            }
            self.posted
                .push_back((wr_id, buf.as_mut_ptr() as usize, buf.len()));
            Ok(())
        }

        fn post_send(
            &mut self,
            wr_id: u64,
            data: &[u8],
            _inline: bool,
            op: SendOp,
        ) -> Result<(), VerbsError> {
            if let SendOp::Write { rkey, .. } = op {
                assert_eq!(rkey, 7, "the peer's rkey");
            }
            let msg = Msg {
                wr_id,
                data: data.to_vec(),
                op,
            };
            self.wire.lock().unwrap().to[1 - self.side].push_back(msg);
            Ok(())
        }

        fn poll(&mut self, region: &mut [u8], out: &mut [Completion]) -> Result<usize, VerbsError> {
            let mut wire = self.wire.lock().unwrap();
            let mut n_out = 0;
            while n_out < out.len() {
                let Some(c) = wire.done[self.side].pop_front() else {
                    break;
                };
                out[n_out] = c;
                n_out += 1;
            }
            let base = region.as_ptr() as usize;
            // A message is delivered only while there is room for the completion it makes.
            while n_out < out.len() {
                let Some(m) = wire.to[self.side].pop_front() else {
                    break;
                };
                let n = m.data.len();
                let sent = match m.op {
                    // A SEND takes a receive and makes a completion.
                    SendOp::Send { imm } => {
                        let Some((wr_id, addr, cap)) = self.posted.pop_front() else {
                            return Err(VerbsError::Peer(
                                "RNR: a message found no posted receive".into(),
                            ));
                        };
                        if n > cap {
                            return Err(VerbsError::Peer("local length error".into()));
                        }
                        let off = addr - base;
                        region[off..off + n].copy_from_slice(&m.data);
                        out[n_out] = Completion {
                            wr_id,
                            opcode: WC_RECV,
                            byte_len: n as u32,
                            imm,
                            ..Completion::default()
                        };
                        n_out += 1;
                        WC_SEND
                    }
                    // An RDMA WRITE only lands in memory.
                    SendOp::Write { addr, .. } => {
                        let (start, bytes) = self.ring;
                        if addr < start || addr + n as u64 > start + bytes {
                            return Err(VerbsError::Peer("remote access error".into()));
                        }
                        let off = addr as usize;
                        region[off..off + n].copy_from_slice(&m.data);
                        WC_RDMA_WRITE
                    }
                };
                wire.done[1 - self.side].push_back(Completion {
                    wr_id: m.wr_id,
                    opcode: sent,
                    ..Completion::default()
                });
            }
            Ok(n_out)
        }
    }

    /// Two connected endpoints over a stand-in wire.
    fn fake_pair(opts: &StreamOptions, write: bool) -> (QpEndpoint, QpEndpoint) {
        let wire = Arc::new(Mutex::new(Wire::default()));
        let layout = layout_for(opts, write);
        let mut ends: Vec<QpEndpoint> = (0..2)
            .map(|side| {
                let ops = FakeQp {
                    side,
                    wire: wire.clone(),
                    posted: VecDeque::new(),
                    ring: (
                        layout.offset(Slot::Recv(0)) as u64,
                        (layout.recv * layout.slot_bytes) as u64,
                    ),
                    max_posted: layout.recv,
                };
                let mut raw = [0u8; 16];
                raw[10..].copy_from_slice(&[0xff, 0xff, 10, 0, 0, side as u8 + 1]);
                let port = PortInfo {
                    device: "fake0".into(),
                    port: 1,
                    lid: 0,
                    mtu: 3,
                    gid: Gid { raw },
                    gid_index: 0,
                };
                let region = vec![0u8; QpEndpoint::region_bytes(opts, write)];
                let mut e = QpEndpoint::with_ops(Box::new(ops), port, region, opts, write, 64)
                    .expect("endpoint");
                e.start(QueuePairAttribute::new()).expect("INIT");
                e
            })
            .collect();
        let (d0, d1) = (ends[0].details(), ends[1].details());
        ends[0].connect_ib(&d1).expect("connect 0");
        ends[1].connect_ib(&d0).expect("connect 1");
        let b = ends.pop().expect("two");
        let a = ends.pop().expect("two");
        (a, b)
    }

    /// Sends numbered packets of every length up to `pktsize` (with `stall` ms naps on
    /// the receiver now and then, so the sender runs out of credits) and checks the
    /// receiver gets exactly those bytes, in order.
    fn bytes_arrive_intact(pktsize: usize, write: bool, mprtt: bool, stall: u64) {
        let opts = StreamOptions {
            pktsize,
            reply: mprtt.then_some(Reply::Ack),
            ..StreamOptions::default()
        };
        exchange(&opts, write, 700, stall);
    }

    /// [`bytes_arrive_intact`] with any options: `count` packets, each answered as
    /// `opts` say (the client checks each reply), and every byte counted on both ends.
    /// The packets are drawn from a few buffers, each sent again and again, half of
    /// the time as shared bytes (which a send slot may already hold) and half copied.
    fn exchange(opts: &StreamOptions, write: bool, count: u32, stall: u64) {
        let (pktsize, opts) = (opts.pktsize, opts.clone());
        let (a, b) = fake_pair(&opts, write);
        let mut client = VerbsStream::from_endpoints(vec![a], opts.clone()).expect("a");
        let mut server = VerbsStream::from_endpoints(vec![b], opts.clone()).expect("b");
        assert_eq!(client.local_addr(), "10.0.0.1/qp256 on fake0");
        assert_eq!(client.peer_addr(), "10.0.0.2/qp257 via fake0");
        let pool: Vec<Bytes> = (0..11)
            .map(|j: usize| {
                let len = (j * 37) % pktsize + 1;
                (0..len).map(|k| (j * 7 + k) as u8).collect()
            })
            .collect();
        let packets: Vec<Bytes> = (0..count as usize)
            .map(|i| pool[(i * 3 + i / 11) % pool.len()].clone())
            .collect();
        let want: Vec<u8> = packets.concat();
        let want_lens: Vec<usize> = packets.iter().map(Bytes::len).collect();
        let answered = answer_for(&opts).is_some();
        let t = std::thread::spawn(move || {
            for (i, p) in packets.iter().enumerate() {
                let before = Instant::now();
                if i % 2 == 0 {
                    client
                        .send_shared(p, Timeout::Millis(10_000))
                        .expect("send");
                } else {
                    client.send(p, Timeout::Millis(10_000)).expect("send");
                }
                // An answered send ends when its reply arrived, as read for its round
                // trip: the sending loop takes its time from there.
                let ended = client.last_send_end();
                assert_eq!(
                    ended.is_some(),
                    answered,
                    "a send's end where it has a reply"
                );
                if let Some(t) = ended {
                    assert!(before <= t && t <= Instant::now());
                }
            }
            client
                .finish_sending(Timeout::Millis(10_000))
                .expect("finish");
            client.stats()
        });
        let mut got = Vec::new();
        let mut buf = vec![0u8; pktsize];
        let mut reads = 0u64;
        loop {
            let n = server
                .recv(&mut buf, Timeout::Millis(10_000))
                .expect("recv");
            if n == 0 {
                break;
            }
            reads += 1;
            if stall > 0 && reads % 97 == 0 {
                std::thread::sleep(std::time::Duration::from_millis(stall));
            }
            got.extend_from_slice(&buf[..n]);
        }
        let cs = t.join().expect("join");
        assert_eq!(got.len(), want.len());
        assert!(got == want, "the bytes differ");
        assert_eq!(cs.bytes_sent, want.len() as u64);
        assert_eq!(
            cs.send_latency.count(),
            u64::from(count),
            "one latency per operation"
        );
        let replies: u64 = match answer_for(&opts) {
            Some(answer) => want_lens.iter().map(|&n| answer.len(n) as u64).sum(),
            None => 0,
        };
        assert_eq!(cs.bytes_received, replies);
        assert_eq!(server.stats().bytes_sent, replies);
        assert_eq!(server.stats().bytes_received, want.len() as u64);
    }

    #[test]
    fn send_recv_delivers_the_exact_bytes_in_order_without_rnr() {
        bytes_arrive_intact(1000, false, false, 0);
        bytes_arrive_intact(1, false, false, 0);
    }

    #[test]
    fn a_counting_receiver_counts_every_byte_and_copies_none() {
        for write in [false, true] {
            let opts = StreamOptions {
                pktsize: 3000,
                ..StreamOptions::default()
            };
            let (a, b) = fake_pair(&opts, write);
            let mut client = VerbsStream::from_endpoints(vec![a], opts.clone()).expect("a");
            let mut server = VerbsStream::from_endpoints(vec![b], opts).expect("b");
            let payload = Bytes::from(vec![0xa5; 3000]);
            let t = std::thread::spawn(move || {
                for i in 0..500 {
                    let p = payload.slice(..1 + i * 7 % 3000);
                    client
                        .send_shared(&p, Timeout::Millis(10_000))
                        .expect("send");
                }
                client
                    .finish_sending(Timeout::Millis(10_000))
                    .expect("finish");
                client.stats()
            });
            let mut buf = vec![0u8; 3000];
            let mut total = 0u64;
            loop {
                match server.recv_counted(&mut buf, Timeout::Millis(10_000)) {
                    Ok(0) => break,
                    Ok(n) => total += n as u64,
                    Err(e) => panic!("recv: {e}"),
                }
            }
            let sent = t.join().expect("join").bytes_sent;
            let want: u64 = (0..500).map(|i| 1 + i * 7 % 3000).sum();
            assert_eq!((sent, total), (want, want));
            assert_eq!(server.stats().bytes_received, want);
            assert!(buf.iter().all(|&b| b == 0), "nothing was copied out");
        }
    }

    #[test]
    fn a_slow_receiver_holds_the_sender_back_by_credits() {
        bytes_arrive_intact(1000, false, false, 2);
        bytes_arrive_intact(1000, true, false, 2);
    }

    #[test]
    fn rdma_writes_deliver_the_exact_bytes_in_order() {
        bytes_arrive_intact(1000, true, false, 0);
        bytes_arrive_intact(3, true, false, 0);
    }

    #[test]
    fn mprtt_acks_every_packet_over_send_and_write() {
        bytes_arrive_intact(1000, false, true, 0);
        bytes_arrive_intact(1000, true, true, 1);
    }

    #[test]
    fn echoes_return_every_packet_over_send_and_write() {
        let opts = StreamOptions {
            pktsize: 1000,
            reply: Some(Reply::Echo),
            ..StreamOptions::default()
        };
        exchange(&opts, false, 700, 0);
        exchange(&opts, true, 700, 1);
    }

    #[test]
    fn sized_replies_answer_every_packet_whatever_their_size() {
        for (pktsize, response_size, count) in [
            (1000, 5000, 300),
            (1000, 10, 300),
            (8, 1, 100),
            // Replies so large the rings have their fewest slots, sized by the reply.
            (100, 6 << 20, 10),
        ] {
            let opts = StreamOptions {
                pktsize,
                reply: Some(Reply::Sized(response_size as u32)),
                ..StreamOptions::default()
            };
            assert_eq!(
                layout_for(&opts, false).slot_bytes,
                pktsize.max(response_size)
            );
            assert_eq!(
                layout_for(&opts, true).slot_bytes,
                pktsize.max(response_size) + TRAILER_BYTES
            );
            for write in [false, true] {
                exchange(&opts, write, count, 0);
            }
        }
    }

    /// A reply of the wrong length or bytes, one to no request, and an ACK where a
    /// reply was due are errors that say so (the peer's QP is left out: the reply is
    /// posted on its behalf).
    #[test]
    fn a_wrong_reply_is_refused_not_taken_nor_a_panic() {
        let reply = |kind| Imm { kind, credits: 0 }.encode().to_be();
        let request: Vec<u8> = (1..=10).collect();
        let mut spoilt = request.clone();
        spoilt[4] = 0;
        let cases: Vec<(bool, usize, Vec<u8>, u32, &str)> = vec![
            (
                true,
                1,
                spoilt,
                reply(ImmKind::Reply),
                "differs from its request",
            ),
            (
                true,
                1,
                request[..9].to_vec(),
                reply(ImmKind::Reply),
                "9 bytes",
            ),
            (
                false,
                300,
                vec![0; 299],
                reply(ImmKind::Reply),
                "300 were due",
            ),
            (false, 300, vec![1], reply(ImmKind::Ack), "ACK"),
        ];
        for (echo, response_size, bad, imm, says) in cases {
            let opts = StreamOptions {
                pktsize: 1000,
                reply: Some(if echo {
                    Reply::Echo
                } else {
                    Reply::Sized(response_size as u32)
                }),
                ..StreamOptions::default()
            };
            let (mut a, mut b) = fake_pair(&opts, false);
            b.ops
                .post_send(1 << 40, &bad, false, SendOp::Send { imm })
                .expect("post");
            let mut stats = StreamStats::default();
            let deadline = Deadline::At(Instant::now() + std::time::Duration::from_secs(5));
            let e = a
                .send_packet(Packet::borrowed(&request), deadline, &mut stats)
                .expect_err("refused");
            assert_eq!(e.kind(), io::ErrorKind::ConnectionAborted, "{e}");
            assert!(e.to_string().contains(says), "{e}");
            assert_eq!(stats.bytes_received, 0, "nothing taken");
        }
        // A reply to a request never sent.
        let opts = StreamOptions {
            pktsize: 1000,
            reply: Some(Reply::Sized(300)),
            ..StreamOptions::default()
        };
        let (mut a, mut b) = fake_pair(&opts, false);
        a.ops
            .post_send(
                1 << 40,
                &[0; 300],
                false,
                SendOp::Send {
                    imm: reply(ImmKind::Reply),
                },
            )
            .expect("post");
        let e = b
            .try_recv(&mut [0; 1000], true, &mut StreamStats::default())
            .expect_err("refused");
        assert!(e.to_string().contains("no request"), "{e}");
    }

    #[test]
    fn one_mib_packets_fill_one_slot_each() {
        let opts = StreamOptions {
            pktsize: 1 << 20,
            ..StreamOptions::default()
        };
        let (a, b) = fake_pair(&opts, true);
        let mut client = VerbsStream::from_endpoints(vec![a], opts.clone()).expect("a");
        let mut server = VerbsStream::from_endpoints(vec![b], opts.clone()).expect("b");
        let packet: Vec<u8> = (0..1 << 20).map(|k: u32| (k % 251) as u8).collect();
        let sent = packet.clone();
        let t = std::thread::spawn(move || {
            for _ in 0..40 {
                client.send(&sent, Timeout::Millis(10_000)).expect("send");
            }
            client
                .finish_sending(Timeout::Millis(10_000))
                .expect("finish");
        });
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0;
        loop {
            let n = server
                .recv(&mut buf, Timeout::Millis(10_000))
                .expect("recv");
            if n == 0 {
                break;
            }
            assert_eq!(&buf[..n], &packet[..n], "packet bytes");
            total += n;
        }
        t.join().expect("join");
        assert_eq!(total, 40 << 20);
    }

    /// The server's memory limit counts an endpoint's region with
    /// [`crate::transport::rdma::ring::endpoint_bytes_at_most`]: it must never count less.
    #[test]
    fn a_region_is_within_the_bound_the_memory_limit_counts() {
        for pktsize in [1, 7, 8, 100, 4096, 32 << 10, 1 << 20, 6 << 20, 64 << 20] {
            for response_size in [1, 100, 1 << 20, 64 << 20] {
                let opts = StreamOptions {
                    pktsize,
                    reply: Some(Reply::Sized(response_size as u32)),
                    ..StreamOptions::default()
                };
                for write in [false, true] {
                    // What the settings count a run by: the larger of packet and reply,
                    // and over RDMA WRITE a trailer.
                    let slot = pktsize.max(response_size) + usize::from(write) * TRAILER_BYTES;
                    let region = QpEndpoint::region_bytes(&opts, write) as u64;
                    let bound = crate::transport::rdma::ring::endpoint_bytes_at_most(slot);
                    assert!(
                        region <= bound,
                        "{pktsize}, {response_size}, {write}: {region} > {bound}"
                    );
                    assert!(bound <= region + 64, "{pktsize}: the bound is loose");
                }
            }
        }
    }

    /// Packets so large that the ring has its fewest slots: credits still flow (both
    /// ways, with credit-only messages) while the receiver lags.
    #[test]
    fn the_smallest_ring_keeps_credits_flowing() {
        for (write, mprtt) in [(false, false), (true, false), (false, true), (true, true)] {
            let opts = StreamOptions {
                pktsize: 6 << 20,
                reply: mprtt.then_some(Reply::Ack),
                ..StreamOptions::default()
            };
            assert_eq!(layout_for(&opts, write).recv, CREDIT_RING_MIN);
            let (a, b) = fake_pair(&opts, write);
            let mut client = VerbsStream::from_endpoints(vec![a], opts.clone()).expect("a");
            let mut server = VerbsStream::from_endpoints(vec![b], opts.clone()).expect("b");
            let t = std::thread::spawn(move || {
                for i in 0..12u8 {
                    let p = vec![i; (6 << 20) - usize::from(i)];
                    client.send(&p, Timeout::Millis(10_000)).expect("send");
                }
                client
                    .finish_sending(Timeout::Millis(10_000))
                    .expect("finish");
            });
            let mut buf = vec![0u8; 6 << 20];
            let mut got = Vec::new();
            loop {
                let n = server
                    .recv(&mut buf, Timeout::Millis(10_000))
                    .expect("recv");
                if n == 0 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(3));
                got.push((buf[0], n, buf[..n].iter().all(|&x| x == buf[0])));
            }
            t.join().expect("join");
            let want: Vec<(u8, usize, bool)> = (0..12u8)
                .map(|i| (i, (6 << 20) - usize::from(i), true))
                .collect();
            assert_eq!(got, want, "write {write}, mprtt {mprtt}");
        }
    }

    #[test]
    fn several_queue_pairs_feed_one_stream_directly_and_through_the_sender_threads() {
        let opts = StreamOptions {
            pktsize: 512,
            nsockets: 2,
            ..StreamOptions::default()
        };
        let (a1, b1) = fake_pair(&opts, false);
        let (a2, b2) = fake_pair(&opts, false);
        let mut client = VerbsStream::from_endpoints(vec![a1, a2], opts.clone()).expect("a");
        let mut server = VerbsStream::from_endpoints(vec![b1, b2], opts.clone()).expect("b");
        let t = std::thread::spawn(move || {
            // Sent directly before and after the sender threads start, and queued in
            // between: the endpoints change hands on the way.
            for i in 0..2000u32 {
                let p = bytes::Bytes::from(vec![(i % 256) as u8; 512]);
                if (500..1500).contains(&i) {
                    client
                        .send_submit(p, Timeout::Millis(10_000))
                        .expect("submit");
                } else {
                    client
                        .send_shared(&p, Timeout::Millis(10_000))
                        .expect("send");
                }
                if i == 1499 {
                    client.sender_drain(Timeout::Millis(10_000)).expect("drain");
                }
            }
            client
                .finish_sending(Timeout::Millis(10_000))
                .expect("finish");
            client.stats()
        });
        let mut buf = vec![0u8; 512];
        let mut total = 0u64;
        let mut sum = 0u64;
        loop {
            let n = server
                .recv(&mut buf, Timeout::Millis(10_000))
                .expect("recv");
            if n == 0 {
                break;
            }
            total += n as u64;
            sum += buf[..n].iter().map(|&b| u64::from(b)).sum::<u64>();
        }
        let cs = t.join().expect("join");
        assert_eq!(total, 2000 * 512);
        assert_eq!(cs.bytes_sent, 2000 * 512);
        let want: u64 = (0..2000u64).map(|i| (i % 256) * 512).sum();
        assert_eq!(sum, want, "every packet arrived once");
    }

    #[test]
    fn hostile_messages_end_the_stream_with_an_error_not_a_panic() {
        let opts = StreamOptions {
            pktsize: 100,
            ..StreamOptions::default()
        };
        let mut stats = StreamStats::default();
        // Unknown kind, credits beyond the ring, a FIN with the wrong count.
        for imm in [
            0xf000_0000u32,
            Imm {
                kind: ImmKind::Credit,
                credits: 1_000,
            }
            .encode(),
            Imm {
                kind: ImmKind::Fin,
                credits: 0,
            }
            .encode(),
        ] {
            let (mut a, mut b) = fake_pair(&opts, false);
            let off = a.layout.offset(Slot::Control(0));
            a.region[off..off + 8].copy_from_slice(&5u64.to_le_bytes());
            a.ops
                .post_send(
                    1 << 40,
                    &a.region[off..off + 8],
                    false,
                    SendOp::Send { imm: imm.to_be() },
                )
                .expect("post");
            let mut buf = [0u8; 100];
            let e = b.try_recv(&mut buf, true, &mut stats).expect_err("refused");
            assert_eq!(e.kind(), io::ErrorKind::ConnectionAborted, "{e}");
        }
    }

    /// A peer that writes whatever trailer it likes into the first slot of this end's
    /// ring, over RDMA WRITE, ends the stream with an error that says what was wrong,
    /// not a panic.
    #[test]
    fn hostile_written_messages_end_the_stream_with_an_error_not_a_panic() {
        let opts = StreamOptions {
            pktsize: 100,
            reply: Some(Reply::Ack),
            ..StreamOptions::default()
        };
        let imm = |kind, credits| Imm { kind, credits }.encode();
        let cases = [
            (0xf000_0000, 1, "unknown kind"),
            (imm(ImmKind::Data, 1_000), 1, "credits"),
            (imm(ImmKind::Data, 0), 101, "does not fit"),
            (imm(ImmKind::Data, 0), u32::MAX, "does not fit"),
            (imm(ImmKind::Fin, 0), 8, "written into the ring"),
            (imm(ImmKind::Credit, 0), 1, "written into the ring"),
            (imm(ImmKind::Reply, 0), 1, "no request"),
        ];
        // Writes `trailer` alone where a message's trailer goes in the peer's next slot.
        let write_trailer = |a: &mut QpEndpoint, trailer: Trailer| {
            let end = a.layout.offset(Slot::Send(0)) + a.layout.slot_bytes;
            a.region[end - TRAILER_BYTES..end].copy_from_slice(&trailer.encode());
            let (_, slot) = a.remote.as_mut().expect("a peer ring").take_uncounted();
            let addr = slot + (a.layout.slot_bytes - TRAILER_BYTES) as u64;
            let write = SendOp::Write { rkey: 7, addr };
            let bytes = &a.region[end - TRAILER_BYTES..end];
            a.ops.post_send(1 << 40, bytes, false, write).expect("post");
        };
        for (imm, len, says) in cases {
            let (mut a, mut b) = fake_pair(&opts, true);
            write_trailer(&mut a, Trailer { len, imm, seq: 1 });
            let e = b
                .try_recv(&mut [0; 100], true, &mut StreamStats::default())
                .expect_err("refused");
            assert_eq!(e.kind(), io::ErrorKind::ConnectionAborted, "{e}");
            assert!(e.to_string().contains(says), "{says}: {e}");
        }
        // A trailer with any other sequence number is not a message (yet).
        let (mut a, mut b) = fake_pair(&opts, true);
        let trailer = Trailer {
            len: 1,
            imm: imm(ImmKind::Data, 0),
            seq: 2,
        };
        write_trailer(&mut a, trailer);
        let got = b.try_recv(&mut [0; 100], true, &mut StreamStats::default());
        assert!(matches!(got, Ok(None)), "{got:?}");
        // A peer that writes on beyond its credits, however fast: what is held stays
        // within the ring.
        let (mut a, mut b) = fake_pair(&opts, true);
        let mut stats = StreamStats::default();
        let recv = b.layout.recv as u32;
        let data = |seq| Trailer {
            len: 1,
            imm: imm(ImmKind::Data, 0),
            seq,
        };
        for seq in 1..=recv {
            write_trailer(&mut a, data(seq));
        }
        assert_eq!(b.poll(&mut stats).expect("a ring's worth"), recv as usize);
        write_trailer(&mut a, data(recv + 1));
        let e = b.poll(&mut stats).expect_err("refused");
        assert!(
            e.to_string().contains("more messages than its credits"),
            "{e}"
        );
        // Data sent, not written, where data is written.
        let (mut a, mut b) = fake_pair(&opts, true);
        let data = Imm {
            kind: ImmKind::Data,
            credits: 0,
        };
        a.ops
            .post_send(
                1 << 40,
                &[0; 8],
                false,
                SendOp::Send {
                    imm: data.encode().to_be(),
                },
            )
            .expect("post");
        let e = b
            .try_recv(&mut [0; 100], true, &mut StreamStats::default())
            .expect_err("refused");
        assert!(e.to_string().contains("does not fit"), "{e}");
    }

    fn good() -> QpDetails {
        let l = RingLayout::new(1000);
        QpDetails {
            qpn: 0x11,
            lid: 0,
            gid: vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1],
            psn: 0x123456,
            mtu: 3,
            ring_addr: 0x7f00_0000_0000,
            ring_key: 42,
            ring_slots: l.recv as u32,
            slot_bytes: l.slot_bytes as u32,
        }
    }

    #[test]
    fn details_roundtrip_as_json_and_validate() {
        let d = good();
        let back: QpDetails =
            serde_json::from_slice(&serde_json::to_vec(&d).expect("encode")).expect("decode");
        assert_eq!(back, d);
        assert_eq!(d.validate(&RingLayout::new(1000)), Ok(()));
        assert_eq!(d.describe(), "10.0.0.1/qp17");
    }

    #[test]
    fn hostile_details_are_refused_without_panicking() {
        let l = RingLayout::new(1000);
        type Spoil = fn(&mut QpDetails);
        let cases: Vec<(&str, Spoil)> = vec![
            ("short gid", |d| d.gid.truncate(15)),
            ("long gid", |d| d.gid.push(0)),
            ("empty gid", |d| d.gid.clear()),
            ("qpn 0", |d| d.qpn = 0),
            ("qpn > 24 bits", |d| d.qpn = 0x100_0000),
            ("psn > 24 bits", |d| d.psn = u32::MAX),
            ("mtu 0", |d| d.mtu = 0),
            ("mtu 6", |d| d.mtu = 6),
            ("fewer slots", |d| d.ring_slots -= 1),
            ("no slots", |d| d.ring_slots = 0),
            ("huge ring", |d| d.ring_slots = u32::MAX),
            ("other slot size", |d| d.slot_bytes = 1001),
            ("wrapping address", |d| d.ring_addr = u64::MAX - 10),
        ];
        for (name, spoil) in cases {
            let mut d = good();
            spoil(&mut d);
            assert!(d.validate(&l).is_err(), "{name} accepted");
            let _ = d.describe();
        }
    }

    #[test]
    fn malformed_json_is_an_error() {
        for bad in [
            "{}",
            r#"{"qpn":1}"#,
            r#"{"qpn":-1,"lid":0,"gid":[],"psn":0,"mtu":1,"ring_addr":0,"ring_key":0,"ring_slots":1,"slot_bytes":1}"#,
            r#"{"qpn":1,"lid":70000,"gid":[],"psn":0,"mtu":1,"ring_addr":0,"ring_key":0,"ring_slots":1,"slot_bytes":1}"#,
            r#"{"qpn":1,"lid":0,"gid":[256],"psn":0,"mtu":1,"ring_addr":0,"ring_key":0,"ring_slots":1,"slot_bytes":1}"#,
        ] {
            assert!(serde_json::from_str::<QpDetails>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_path_mtu_is_the_smaller_one() {
        assert!(matches!(path_mtu(5, 3), Mtu::Mtu1024));
        assert!(matches!(path_mtu(1, 5), Mtu::Mtu256));
        assert!(matches!(path_mtu(5, 5), Mtu::Mtu4096));
    }

    #[test]
    fn gids_read_as_addresses() {
        let mut raw = [0u8; 16];
        raw[10] = 0xff;
        raw[11] = 0xff;
        raw[12..].copy_from_slice(&[192, 168, 1, 2]);
        assert_eq!(describe_gid(&Gid { raw }), "192.168.1.2");
        let mut raw = [0u8; 16];
        raw[0] = 0xfe;
        raw[1] = 0x80;
        raw[15] = 1;
        assert_eq!(describe_gid(&Gid { raw }), "fe80::1");
    }
}
