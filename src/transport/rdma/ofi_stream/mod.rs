//! The libfabric (OFI) STREAM: `--rdma-api ofi`.
//!
//! Each "socket" of the STREAM is one reliable-datagram endpoint (`FI_EP_RDM`) with
//! its own fabric, domain, completion queue and address vector, so that endpoints of
//! one STREAM never share libfabric state across threads (`FI_THREAD_DOMAIN`; access
//! to an endpoint is serialized by a mutex). RDM endpoints exist on every provider
//! fperf cares about (`verbs;ofi_rxm`, `efa`, `tcp;ofi_rxm`, `shm`), and need no
//! connection management: the two ends swap their endpoint names over the TCP control
//! connection (see `transport::rdma`).
//!
//! Memory is registered once per endpoint: one region holding a ring of send slots,
//! a ring of receive slots (all posted as receives from the start, re-posted as soon as
//! consumed) and a few small control slots. A packet is copied into a free send slot
//! and posted with `fi_send`; sends use delivery-complete semantics
//! (`FI_DELIVERY_COMPLETE`), so a send completes only once its data has landed in the
//! peer's receive buffer, and only then is it counted as sent. The latency of a send
//! runs from its post to its completion (with MPRTT: to the arrival of its ACK).
//!
//! Control messages carry remote CQ data, which data messages never do: an ACK (MPRTT,
//! a 1-byte send answered by the receiver for each packet) and a FIN that ends the
//! stream and says how many data messages were sent, so the receiver reports end of
//! stream only once every one of them arrived, whatever order completions come in.
//!
//! With `--echo` and `--response-size`, each packet is answered by a reply with a
//! payload instead of the ACK (see [`answer_of`]): a send from a send slot into one of the
//! requester's receive slots, marked by remote CQ data. It is a send with
//! `--rdma-write` too: a write's 32 bits of CQ data hold its slot and length, with no
//! room for a kind. Slots hold the larger of a packet and a reply, so a reply is one
//! message; the requester checks its length (and an echo's bytes) before it re-posts
//! the slot, and the round trip runs until the reply arrived.

pub mod sys;

use self::sys::*;
use super::endpoint::{Backoff, EndpointStream, RingEndpoint};
use super::ring::{
    answer_of, check_reply, slot_bytes, Packet, RemoteRing, Reply, RingLayout, SendSlots, Slot,
};
use super::ring::{CONTROL_SLOTS, RING_SLOTS_MAX};
use crate::stats::StreamStats;
use crate::stream::Deadline;
use crate::transport::stream::StreamOptions;
use std::collections::VecDeque;
use std::ffi::{c_void, CStr, CString};
use std::io;
use std::mem::size_of;
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use thiserror::Error;

/// Completions read per `fi_cq_read`.
const CQ_BATCH: usize = 16;
/// How long a connected endpoint goes on reading completions before it is closed.
/// libfabric 1.17's `ofi_rxm` closes a connection by closing its message endpoint and
/// then handling the completions still queued, re-posting a receive on the closed
/// endpoint for each message that had arrived unread: a use after free (SIGSEGV inside
/// `fi_close`). The last messages are often rxm's own (receive credits it sends when
/// the peer re-posts buffers, even after the FIN), so both ends read completions for a
/// while, each answering the other's last ones, until nothing is left in flight.
const CLOSE_LINGER: Duration = Duration::from_millis(50);
/// A nap between two empty reads of that linger, so it does not take a whole CPU.
const CLOSE_LINGER_NAP: Duration = Duration::from_micros(200);
/// Remote CQ data: the kind of a control message sits in the top byte.
const KIND_SHIFT: u32 = 56;
const KIND_FIN: u64 = 1;
const KIND_ACK: u64 = 2;
/// The receiver consumed this many written slots: the writer may reuse them.
const KIND_CREDIT: u64 = 4;
/// An MPRTT reply with a payload (`--echo`, `--response-size`).
const KIND_REPLY: u64 = 5;
const VALUE_MASK: u64 = (1 << KIND_SHIFT) - 1;
/// An RMA write's remote CQ data is `(receive slot << WRITE_LEN_BITS) | (length - 1)`,
/// in 32 bits: verbs (also under `ofi_rxm`) carries a write's data as the 32-bit
/// immediate and silently drops the upper half. The completion's `FI_REMOTE_WRITE` flag,
/// not a kind, marks it as a write.
const WRITE_LEN_BITS: u32 = 26;
const _: () = assert!(
    RING_SLOTS_MAX <= 1 << (32 - WRITE_LEN_BITS)
        && crate::stream::MAX_PKTSIZE as usize <= 1 << WRITE_LEN_BITS
);
/// Longest endpoint name accepted from a peer.
pub const MAX_NAME_LEN: usize = 512;

/// Why a libfabric call failed.
#[derive(Debug, Error)]
pub enum OfiError {
    /// libfabric itself is missing or unusable.
    #[error("{0}")]
    Library(String),
    /// The provider asked for is not available here.
    #[error("{0}")]
    NoProvider(String),
    #[error("{call} failed: {text} ({code})")]
    Call {
        call: &'static str,
        code: i64,
        text: String,
    },
    #[error("{0}")]
    Peer(String),
}

impl From<OfiError> for io::Error {
    fn from(e: OfiError) -> io::Error {
        io::Error::other(e.to_string())
    }
}

fn check(lib: &OfiLib, call: &'static str, ret: i64) -> Result<(), OfiError> {
    if ret < 0 {
        Err(OfiError::Call {
            call,
            code: ret,
            text: lib.strerror(ret),
        })
    } else {
        Ok(())
    }
}

/// Which provider and NIC an endpoint uses.
#[derive(Clone, Debug, Default)]
pub struct OfiTarget {
    /// libfabric provider name (`tcp`, `verbs`, `efa`, `tcp;ofi_rxm`...); `None` lets
    /// libfabric choose.
    pub provider: Option<String>,
    /// libfabric domain name (`-D`), e.g. `mlx5_0` or, for the tcp provider, `lo`.
    pub domain: Option<String>,
    /// Local address to open the endpoint on (an IP for socket-based providers).
    pub node: Option<String>,
    /// Ask for RMA writes (`--rdma-write`) on top of messages.
    pub rma: bool,
}

/// A list of `fi_info` from `fi_getinfo`, freed on drop.
pub struct Info {
    lib: &'static OfiLib,
    head: *mut fi_info,
    /// The entry fperf uses: the first, or the first on the domain asked for.
    chosen: *mut fi_info,
}

impl Drop for Info {
    fn drop(&mut self) {
        // SAFETY: `head` came from fi_getinfo and is freed exactly once, here.
        unsafe { (self.lib.freeinfo)(self.head) }
    }
}

fn dup_cstr(s: &str) -> Result<*mut i8, OfiError> {
    let c = CString::new(s).map_err(|_| OfiError::Peer(format!("name {s:?} contains NUL")))?;
    // SAFETY: strdup copies a valid NUL-terminated string with malloc, as fi_freeinfo
    // expects for strings inside an fi_info.
    let p = unsafe { libc::strdup(c.as_ptr()) };
    if p.is_null() {
        return Err(OfiError::Library("out of memory".into()));
    }
    Ok(p)
}

impl Info {
    /// Asks libfabric for reliable-datagram endpoints with the features fperf uses.
    pub fn get(target: &OfiTarget) -> Result<Info, OfiError> {
        let lib = lib().map_err(OfiError::Library)?;
        // SAFETY: fi_dupinfo(NULL) allocates an empty fi_info with every attribute
        // structure allocated (this is fi_allocinfo); fields set below are plain data or
        // malloc'ed strings that fi_freeinfo releases.
        let hints = unsafe { (lib.dupinfo)(ptr::null()) };
        if hints.is_null() {
            return Err(OfiError::Library("fi_allocinfo: out of memory".into()));
        }
        let hints = Info {
            lib,
            head: hints,
            chosen: hints,
        };
        // SAFETY: `hints` and its attribute pointers are valid (allocated above).
        unsafe {
            let h = &mut *hints.head;
            h.caps = u64::from(FI_MSG);
            if target.rma {
                h.caps |= u64::from(FI_RMA | FI_WRITE | FI_REMOTE_WRITE);
            }
            // Every operation gets an fi_context2 of its own as its context.
            h.mode = FI_CONTEXT | FI_CONTEXT2;
            (*h.ep_attr).type_ = fi_ep_type_FI_EP_RDM;
            let d = &mut *h.domain_attr;
            d.mr_mode = (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY) as i32;
            d.threading = fi_threading_FI_THREAD_DOMAIN;
            d.cq_data_size = 8;
            (*h.tx_attr).op_flags = u64::from(FI_DELIVERY_COMPLETE);
            (*h.tx_attr).msg_order = u64::from(FI_ORDER_SAS);
            (*h.rx_attr).msg_order = u64::from(FI_ORDER_SAS);
            if let Some(p) = &target.provider {
                (*h.fabric_attr).prov_name = dup_cstr(p)?;
            }
            if let Some(dom) = &target.domain {
                d.name = dup_cstr(dom)?;
            }
        }
        let node = target.node.as_deref().map(CString::new).transpose();
        let node = node.map_err(|_| OfiError::Peer("address contains NUL".into()))?;
        let mut head = ptr::null_mut();
        let flags = if node.is_some() { FI_SOURCE } else { 0 };
        // SAFETY: valid hints, optional NUL-terminated node, out-pointer on the stack.
        let ret = unsafe {
            (lib.getinfo)(
                FI_API_VERSION,
                node.as_ref().map_or(ptr::null(), |n| n.as_ptr()),
                ptr::null(),
                flags,
                hints.head,
                &mut head,
            )
        };
        if ret != 0 || head.is_null() {
            let wanted = target.provider.as_deref().unwrap_or("(any)");
            let on = target
                .domain
                .as_deref()
                .map_or_else(String::new, |d| format!(" on domain '{d}'"));
            return Err(OfiError::NoProvider(format!(
                "libfabric provider '{wanted}'{on} offers no reliable endpoint here ({}); `fi_info -l` lists the providers; RDMA hardware needs `--ofi-provider verbs` and a device (Soft-RoCE: modprobe rdma_rxe; rdma link add rxe0 type rxe netdev eth0), any host can use `--ofi-provider tcp`",
                lib.strerror(i64::from(ret))
            )));
        }
        let mut info = Info {
            lib,
            head,
            chosen: head,
        };
        if let Some(want) = &target.domain {
            // Some providers (e.g. tcp;ofi_rxm) ignore the domain hint: pick it here.
            let mut found = Vec::new();
            let mut p = head;
            while !p.is_null() {
                // SAFETY: `p` walks the list fi_getinfo returned, which `info` owns.
                let name = unsafe { domain_name(p) };
                if name == *want {
                    info.chosen = p;
                    return Ok(info);
                }
                if !found.contains(&name) {
                    found.push(name);
                }
                // SAFETY: as above.
                p = unsafe { (*p).next };
            }
            return Err(OfiError::NoProvider(format!(
                "libfabric provider '{}' has no domain '{want}' (-D) here; its domains: {}",
                info.provider_name(),
                found.join(", ")
            )));
        }
        Ok(info)
    }

    /// The name of the provider libfabric chose (e.g. `tcp;ofi_rxm`).
    pub fn provider_name(&self) -> String {
        // SAFETY: `chosen` is a valid fi_info from fi_getinfo with its fabric_attr set.
        unsafe {
            let fa = (*self.chosen).fabric_attr;
            if fa.is_null() || (*fa).prov_name.is_null() {
                return "?".into();
            }
            CStr::from_ptr((*fa).prov_name)
                .to_string_lossy()
                .into_owned()
        }
    }
}

/// The domain name of fi_info `p` ("" when it has none).
///
/// # Safety
/// `p` must point to a valid fi_info.
unsafe fn domain_name(p: *const fi_info) -> String {
    // SAFETY: the caller passes a valid fi_info; its domain_attr and name are checked
    // for NULL and the name is NUL-terminated.
    unsafe {
        let d = (*p).domain_attr;
        if d.is_null() || (*d).name.is_null() {
            return String::new();
        }
        CStr::from_ptr((*d).name).to_string_lossy().into_owned()
    }
}

/// A control message's remote CQ data.
pub fn control_data(kind: u64, value: u64) -> u64 {
    (kind << KIND_SHIFT) | (value & VALUE_MASK)
}

/// Splits remote CQ data into (kind, value).
pub fn split_control(data: u64) -> (u64, u64) {
    (data >> KIND_SHIFT, data & VALUE_MASK)
}

/// An RMA write's remote CQ data: where it landed and how long it is (`len` ≥ 1).
pub fn write_data(slot: usize, len: usize) -> u64 {
    ((slot as u64) << WRITE_LEN_BITS) | (len as u64 - 1)
}

/// Splits an RMA write's remote CQ data into (receive slot, length); only its low 32
/// bits count.
pub fn split_write_data(data: u64) -> (usize, usize) {
    let data = data & 0xffff_ffff;
    (
        (data >> WRITE_LEN_BITS) as usize,
        (data & ((1 << WRITE_LEN_BITS) - 1)) as usize + 1,
    )
}

/// One reliable-datagram endpoint with its registered rings.
pub struct Endpoint {
    lib: &'static OfiLib,
    fabric: *mut fid_fabric,
    domain: *mut fid_domain,
    cq: *mut fid_cq,
    av: *mut fid_av,
    ep: *mut fid_ep,
    mr: *mut fid_mr,
    desc: *mut c_void,
    /// The registered region (never resized: its address is registered).
    region: Vec<u8>,
    /// One context per slot (never resized: their addresses are given to libfabric).
    contexts: Vec<fi_context2>,
    layout: RingLayout,
    peer: fi_addr_t,
    name: Vec<u8>,
    peer_name: Vec<u8>,
    /// MPRTT: what answers each data message.
    answer: Option<Reply>,
    abort: Arc<std::sync::atomic::AtomicBool>,
    /// `--rdma-write`: register for remote writes; send by writing into the peer's ring.
    rma: bool,
    /// RMA addresses are virtual addresses (else offsets into the region).
    virt_addr: bool,
    /// The peer's receive ring, when writing into it.
    remote: Option<RemoteRing>,
    /// Receive side of RMA writes: slots consumed and not yet credited back.
    uncredited: u64,
    /// The TCP connection to the peer, kept open for the run: tells when it went away.
    watch: Option<Arc<std::net::TcpStream>>,
    /// Receive slots the provider could not take yet (its queue was full).
    unposted: Vec<usize>,
    send_free: Vec<usize>,
    send_posted_at: Vec<Instant>,
    /// Bytes of the send posted from each send slot (completions do not say).
    send_len: Vec<usize>,
    send_slots: SendSlots,
    control_free: Vec<usize>,
    /// Data received and not yet consumed.
    ready: VecDeque<Ready>,
    /// Bytes of the front of `ready` already consumed.
    consumed: usize,
    /// Send side: data messages posted; ACKs received and not yet matched.
    msgs_sent: u64,
    acks: u64,
    /// Send side: a request waits for its reply (with a payload), which has arrived
    /// once `reply` holds (receive slot, length); at most one is ever outstanding.
    awaiting: bool,
    reply: Option<(usize, usize)>,
    /// Receive side: data messages received; the FIN's count once it arrived.
    msgs_received: u64,
    fin: Option<u64>,
}

// SAFETY: the libfabric objects of an endpoint belong to it alone (its own fabric,
// domain, CQ and AV, opened with FI_THREAD_DOMAIN), and every use goes through
// `&mut Endpoint`, so calls are never concurrent; the raw pointers may move between
// threads.
unsafe impl Send for Endpoint {}

impl Endpoint {
    /// Opens an endpoint on the first provider of `info`, registers its rings and posts
    /// every receive.
    pub fn open(info: &Info, opts: &StreamOptions, rma: bool) -> Result<Endpoint, OfiError> {
        let lib = info.lib;
        // SAFETY: `info.chosen` is a valid fi_info with its domain attributes set.
        let mr_mode = unsafe { (*(*info.chosen).domain_attr).mr_mode };
        let answer = answer_of(opts.reply);
        let layout = RingLayout::new(slot_bytes(answer, opts.pktsize));
        let mut e = Endpoint {
            lib,
            fabric: ptr::null_mut(),
            domain: ptr::null_mut(),
            cq: ptr::null_mut(),
            av: ptr::null_mut(),
            ep: ptr::null_mut(),
            mr: ptr::null_mut(),
            desc: ptr::null_mut(),
            region: vec![0u8; layout.region_bytes()],
            contexts: vec![fi_context2::default(); layout.contexts()],
            layout,
            peer: FI_ADDR_UNSPEC_VALUE,
            name: Vec::new(),
            peer_name: Vec::new(),
            answer,
            abort: opts.abort.clone(),
            send_free: (0..layout.send).rev().collect(),
            send_posted_at: vec![Instant::now(); layout.send],
            send_len: vec![0; layout.send],
            send_slots: SendSlots::new(layout.send),
            control_free: (0..CONTROL_SLOTS).rev().collect(),
            ready: VecDeque::with_capacity(layout.recv),
            consumed: 0,
            msgs_sent: 0,
            acks: 0,
            awaiting: false,
            reply: None,
            msgs_received: 0,
            fin: None,
            rma,
            virt_addr: mr_mode & FI_MR_VIRT_ADDR as i32 != 0,
            remote: None,
            uncredited: 0,
            watch: None,
            unposted: Vec::new(),
        };
        let access = if rma {
            FI_SEND | FI_RECV | FI_WRITE | FI_REMOTE_WRITE
        } else {
            FI_SEND | FI_RECV
        };
        // SAFETY: `info.chosen` is a valid fi_info; every out-pointer is a field of `e`,
        // which closes whatever was opened when dropped (also on the error paths).
        unsafe {
            let fi = info.chosen;
            check(
                lib,
                "fi_fabric",
                i64::from((lib.fabric)(
                    (*fi).fabric_attr,
                    &mut e.fabric,
                    ptr::null_mut(),
                )),
            )?;
            check(
                lib,
                "fi_domain",
                i64::from(fi_domain(e.fabric, fi, &mut e.domain, ptr::null_mut())),
            )?;
            let mut cq_attr = fi_cq_attr {
                format: fi_cq_format_FI_CQ_FORMAT_DATA,
                wait_obj: fi_wait_obj_FI_WAIT_NONE,
                size: layout.contexts() * 2,
                ..Default::default()
            };
            check(
                lib,
                "fi_cq_open",
                i64::from(fi_cq_open(
                    e.domain,
                    &mut cq_attr,
                    &mut e.cq,
                    ptr::null_mut(),
                )),
            )?;
            let mut av_attr = fi_av_attr {
                type_: fi_av_type_FI_AV_UNSPEC,
                count: 1,
                ..Default::default()
            };
            check(
                lib,
                "fi_av_open",
                i64::from(fi_av_open(
                    e.domain,
                    &mut av_attr,
                    &mut e.av,
                    ptr::null_mut(),
                )),
            )?;
            check(
                lib,
                "fi_endpoint",
                i64::from(fi_endpoint(e.domain, fi, &mut e.ep, ptr::null_mut())),
            )?;
            check(
                lib,
                "fi_ep_bind(cq)",
                i64::from(fi_ep_bind(
                    e.ep,
                    &mut (*e.cq).fid,
                    u64::from(FI_TRANSMIT | FI_RECV),
                )),
            )?;
            check(
                lib,
                "fi_ep_bind(av)",
                i64::from(fi_ep_bind(e.ep, &mut (*e.av).fid, 0)),
            )?;
            check(lib, "fi_enable", i64::from(fi_enable(e.ep)))?;
            check(
                lib,
                "fi_mr_reg",
                i64::from(fi_mr_reg(
                    e.domain,
                    e.region.as_ptr().cast(),
                    e.region.len(),
                    u64::from(access),
                    0,
                    0,
                    0,
                    &mut e.mr,
                    ptr::null_mut(),
                )),
            )?;
            e.desc = fi_mr_desc(e.mr);
            let mut name = vec![0u8; MAX_NAME_LEN];
            let mut len = name.len();
            check(
                lib,
                "fi_getname",
                i64::from(fi_getname(
                    &mut (*e.ep).fid,
                    name.as_mut_ptr().cast(),
                    &mut len,
                )),
            )?;
            name.truncate(len);
            e.name = name;
        }
        for i in 0..layout.recv {
            e.post_recv(i)?;
        }
        Ok(e)
    }

    /// This endpoint's address, for the peer's address vector.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// What the peer needs to reach this endpoint.
    pub fn details(&self) -> EndpointDetails {
        let base = if self.virt_addr {
            self.region.as_ptr() as u64
        } else {
            0
        };
        EndpointDetails {
            name: self.name.clone(),
            // SAFETY: `mr` is the registered region (open succeeded).
            ring_key: unsafe { fi_mr_key(self.mr) },
            ring_addr: base + self.layout.offset(Slot::Recv(0)) as u64,
            ring_slots: self.layout.recv as u64,
            slot_bytes: self.layout.slot_bytes as u64,
        }
    }

    /// Adds the peer's endpoint; every send goes there (with `--rdma-write`, data is
    /// written into its receive ring).
    pub fn set_peer(&mut self, peer: &EndpointDetails) -> Result<(), OfiError> {
        if self.rma {
            if peer.slot_bytes != self.layout.slot_bytes as u64
                || peer.ring_slots == 0
                || peer.ring_slots > RING_SLOTS_MAX as u64
            {
                return Err(OfiError::Peer(
                    "the peer's receive ring does not match this end's".into(),
                ));
            }
            self.remote = Some(RemoteRing::new(
                peer.ring_addr,
                peer.ring_key,
                peer.ring_slots as usize,
                peer.slot_bytes,
            ));
        }
        let name = &peer.name[..];
        if name.len() != self.name.len() {
            return Err(OfiError::Peer(format!(
                "the peer's endpoint name has {} bytes, this provider's have {}",
                name.len(),
                self.name.len()
            )));
        }
        let mut addr: fi_addr_t = 0;
        // SAFETY: `name` holds one address of the provider's format (length checked);
        // `addr` receives its handle.
        let n = unsafe {
            fi_av_insert(
                self.av,
                name.as_ptr().cast(),
                1,
                &mut addr,
                0,
                ptr::null_mut(),
            )
        };
        if n != 1 {
            return Err(OfiError::Peer(format!(
                "fi_av_insert could not add the peer's endpoint ({})",
                self.lib.strerror(i64::from(n.min(0)))
            )));
        }
        self.peer = addr;
        self.peer_name = peer.name.clone();
        Ok(())
    }

    fn slot_ptr(&mut self, slot: Slot) -> *mut c_void {
        let off = self.layout.offset(slot);
        self.region[off..].as_mut_ptr().cast()
    }

    fn context(&mut self, slot: Slot) -> *mut c_void {
        let i = self.layout.index(slot);
        ptr::from_mut(&mut self.contexts[i]).cast()
    }

    /// Posts receive slot `i`; if the provider's receive queue is full, keeps it for
    /// the next [`Endpoint::poll`] to post again (no recursion, nothing lost).
    fn post_recv(&mut self, i: usize) -> Result<(), OfiError> {
        let (buf, ctx) = (self.slot_ptr(Slot::Recv(i)), self.context(Slot::Recv(i)));
        // SAFETY: `buf` is a registered slot of `slot_bytes` bytes that stays alive
        // and untouched until its completion; `ctx` is its own fi_context2.
        let ret = unsafe {
            fi_recv(
                self.ep,
                buf,
                self.layout.slot_bytes,
                self.desc,
                FI_ADDR_UNSPEC_VALUE,
                ctx,
            )
        };
        if ret == -(FI_EAGAIN as isize) {
            self.unposted.push(i);
            return Ok(());
        }
        check(self.lib, "fi_recv", ret as i64)
    }

    /// Posts a send of `len` bytes from `slot`, with remote CQ data if given.
    fn post_send(
        &mut self,
        slot: Slot,
        len: usize,
        data: Option<u64>,
        stats: &mut StreamStats,
    ) -> Result<(), OfiError> {
        let (buf, ctx) = (self.slot_ptr(slot), self.context(slot));
        loop {
            // SAFETY: `buf..buf+len` lies in the registered region and is not reused
            // before the send's completion; `ctx` is the slot's own fi_context2.
            let ret = unsafe {
                match data {
                    Some(d) => fi_senddata(self.ep, buf, len, self.desc, d, self.peer, ctx),
                    None => fi_send(self.ep, buf, len, self.desc, self.peer, ctx),
                }
            };
            if ret == -(FI_EAGAIN as isize) {
                // Provider queues full: make progress, then retry.
                self.poll(stats)?;
                continue;
            }
            return check(self.lib, "fi_send", ret as i64);
        }
    }

    /// Writes `len` bytes of send slot `i` into the peer's next free receive slot,
    /// waiting for a credit if none is free.
    fn post_write(
        &mut self,
        i: usize,
        len: usize,
        deadline: Deadline,
        stats: &mut StreamStats,
    ) -> io::Result<()> {
        let (slot, addr, key) = self.wait_until(deadline, stats, |e| {
            let r = e.remote.as_mut()?;
            let (slot, addr) = r.take()?;
            Some((slot, addr, r.key()))
        })?;
        let data = write_data(slot, len);
        let (buf, ctx) = (self.slot_ptr(Slot::Send(i)), self.context(Slot::Send(i)));
        loop {
            // SAFETY: `buf..buf+len` is registered and untouched until completion; the
            // remote range is one slot of the peer's registered ring, which the peer
            // does not read until the write's CQ data arrives and does not reuse until
            // it credits the slot back.
            let ret = unsafe {
                fi_writedata(
                    self.ep, buf, len, self.desc, data, self.peer, addr, key, ctx,
                )
            };
            if ret == -(FI_EAGAIN as isize) {
                self.poll(stats)?;
                continue;
            }
            return Ok(check(self.lib, "fi_writedata", ret as i64)?);
        }
    }

    /// Reads the completions that are there, without waiting. Returns how many.
    fn poll(&mut self, stats: &mut StreamStats) -> Result<usize, OfiError> {
        for i in std::mem::take(&mut self.unposted) {
            self.post_recv(i)?;
        }
        let mut entries = [fi_cq_data_entry::default(); CQ_BATCH];
        // SAFETY: `entries` has room for CQ_BATCH entries of the CQ's format (DATA).
        let n = unsafe { fi_cq_read(self.cq, entries.as_mut_ptr().cast(), CQ_BATCH) };
        if n == -(FI_EAGAIN as isize) {
            return Ok(0);
        }
        if n == -(FI_EAVAIL as isize) {
            return Err(self.completion_error());
        }
        check(self.lib, "fi_cq_read", n as i64)?;
        // Read once, and only for a completion that records a latency (as verbs does).
        let mut now = None;
        let base = self.contexts.as_ptr() as usize;
        for entry in &entries[..n as usize] {
            let off = (entry.op_context as usize).wrapping_sub(base);
            let slot = if off % size_of::<fi_context2>() == 0 {
                self.layout.slot(off / size_of::<fi_context2>())
            } else {
                None
            };
            match slot {
                Some(Slot::Send(i)) => {
                    if self.answer.is_none() {
                        let now = *now.get_or_insert_with(Instant::now);
                        stats.send_latency.record(
                            u64::try_from(now.duration_since(self.send_posted_at[i]).as_nanos())
                                .unwrap_or(u64::MAX),
                        );
                    }
                    stats.bytes_sent += self.send_len[i] as u64;
                    self.send_free.push(i);
                }
                Some(Slot::Control(i)) => self.control_free.push(i),
                _ if entry.flags & u64::from(FI_REMOTE_WRITE) != 0 => {
                    // An RMA write landed in our ring; it may or may not have used a
                    // posted receive, depending on the provider.
                    if let Some(Slot::Recv(i)) = slot {
                        self.post_recv(i)?;
                    }
                    let (written, len) = split_write_data(entry.data);
                    if written >= self.layout.recv || len > self.layout.slot_bytes {
                        return Err(OfiError::Peer(
                            "an RMA write outside the receive ring".into(),
                        ));
                    }
                    self.msgs_received += 1;
                    self.ready.push_back(Ready {
                        slot: written,
                        len,
                        written: true,
                    });
                }
                Some(Slot::Recv(i)) => {
                    if entry.flags & u64::from(FI_REMOTE_CQ_DATA) != 0 {
                        match split_control(entry.data) {
                            (KIND_REPLY, _) => {
                                if !self.awaiting || self.reply.is_some() {
                                    return Err(OfiError::Peer(
                                        "a reply to no request from the peer".into(),
                                    ));
                                }
                                let len = entry.len.min(self.layout.slot_bytes);
                                // Posted again once the reply was checked.
                                self.reply = Some((i, len));
                                continue;
                            }
                            (KIND_ACK, _) if self.answer != Some(Reply::Ack) => {
                                return Err(OfiError::Peer(
                                    "an ACK from the peer where none was due".into(),
                                ))
                            }
                            (KIND_ACK, _) => self.acks += 1,
                            (KIND_FIN, count) => self.fin = Some(count),
                            (KIND_CREDIT, n) => {
                                if let Some(r) = &mut self.remote {
                                    r.credit(n as usize).map_err(OfiError::Peer)?;
                                }
                            }
                            (kind, _) => {
                                return Err(OfiError::Peer(format!(
                                    "unknown control message kind {kind} from the peer"
                                )))
                            }
                        }
                        self.post_recv(i)?;
                    } else {
                        self.msgs_received += 1;
                        self.ready.push_back(Ready {
                            slot: i,
                            len: entry.len.min(self.layout.slot_bytes),
                            written: false,
                        });
                    }
                }
                None => {
                    return Err(OfiError::Peer(
                        "a completion for an operation fperf did not post".into(),
                    ))
                }
            }
        }
        Ok(n as usize)
    }

    fn completion_error(&mut self) -> OfiError {
        let mut err = fi_cq_err_entry::default();
        // SAFETY: one error entry on the stack.
        let ret = unsafe { fi_cq_readerr(self.cq, &mut err, 0) };
        if ret < 0 {
            return OfiError::Call {
                call: "fi_cq_readerr",
                code: ret as i64,
                text: self.lib.strerror(ret as i64),
            };
        }
        let mut text = [0i8; 256];
        // SAFETY: the CQ formats the provider error into `text` (or returns its own
        // static string); both are NUL-terminated.
        let detail = unsafe {
            let p = fi_cq_strerror(
                self.cq,
                err.prov_errno,
                err.err_data,
                text.as_mut_ptr(),
                text.len(),
            );
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        OfiError::Call {
            call: "completion",
            code: -i64::from(err.err),
            text: format!("{} ({detail})", self.lib.strerror(i64::from(err.err))),
        }
    }

    /// Takes a free control slot, waiting for one.
    fn control_slot(&mut self, deadline: Deadline, stats: &mut StreamStats) -> io::Result<usize> {
        self.wait_until(deadline, stats, |e| e.control_free.pop())
    }

    /// Reads completions (backing off while there are none) until `take` gives
    /// something.
    fn wait_until<T>(
        &mut self,
        deadline: Deadline,
        stats: &mut StreamStats,
        mut take: impl FnMut(&mut Endpoint) -> Option<T>,
    ) -> io::Result<T> {
        let mut backoff = Backoff::new();
        loop {
            if let Some(t) = take(self) {
                return Ok(t);
            }
            if self.poll(stats)? == 0 {
                backoff.wait(deadline, &self.abort, self.watch.as_deref())?;
            }
        }
    }

    /// Waits for the reply to `request`, sent at `start`, and checks it (its length, an
    /// echo's bytes); only then is its receive slot posted again.
    fn await_reply(
        &mut self,
        answer: Reply,
        request: &[u8],
        start: Instant,
        deadline: Deadline,
        stats: &mut StreamStats,
    ) -> io::Result<Instant> {
        let (slot, len) = self.wait_until(deadline, stats, |e| e.reply.take())?;
        let arrived = stats.send_latency.record_since(start);
        self.awaiting = false;
        let off = self.layout.offset(Slot::Recv(slot));
        check_reply(answer, &self.region[off..off + len], request).map_err(OfiError::Peer)?;
        self.post_recv(slot)?;
        stats.bytes_received += len as u64;
        Ok(arrived)
    }

    /// Answers the request of `len` bytes in receive slot `slot` as `answer` says: an
    /// ACK, or a reply sent from a send slot (the request's bytes for an echo).
    fn answer_request(
        &mut self,
        answer: Reply,
        slot: usize,
        len: usize,
        stats: &mut StreamStats,
    ) -> io::Result<()> {
        if answer == Reply::Ack {
            let c = self.control_slot(Deadline::Never, stats)?;
            let off = self.layout.offset(Slot::Control(c));
            self.region[off] = 1;
            self.post_send(Slot::Control(c), 1, Some(control_data(KIND_ACK, 0)), stats)?;
            stats.bytes_sent += 1;
            return Ok(());
        }
        let i = self.wait_until(Deadline::Never, stats, |e| e.send_free.pop())?;
        let request = self.layout.offset(Slot::Recv(slot));
        let n = self.send_slots.stage_reply(
            &mut self.region,
            answer,
            request..request + len,
            i,
            self.layout.offset(Slot::Send(i)),
        );
        // Counted now, as an ACK is: the receiving end's figures are read once the FIN
        // arrived, which may be before this send's completion.
        self.send_len[i] = 0;
        stats.bytes_sent += n as u64;
        let data = control_data(KIND_REPLY, 0);
        self.post_send(Slot::Send(i), n, Some(data), stats)?;
        Ok(())
    }

    /// Watches `sock`, the TCP connection to the peer, to notice when the peer is gone.
    pub fn set_watch(&mut self, sock: Arc<std::net::TcpStream>) {
        self.watch = Some(sock);
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        if self.peer != FI_ADDR_UNSPEC_VALUE {
            // Errors are read off the queue like completions; the linger goes on.
            let mut stats = StreamStats::default();
            let until = Instant::now() + CLOSE_LINGER;
            while Instant::now() < until {
                if matches!(self.poll(&mut stats), Ok(0) | Err(_)) {
                    std::thread::sleep(CLOSE_LINGER_NAP);
                }
            }
        }
        // SAFETY: each object was opened by `open` (or is NULL) and is closed once, the
        // endpoint before what it is bound to, the fabric last.
        unsafe {
            for fid in [
                self.ep.cast::<fid>(),
                self.av.cast(),
                self.cq.cast(),
                self.mr.cast(),
                self.domain.cast(),
                self.fabric.cast(),
            ] {
                if !fid.is_null() {
                    fi_close(fid);
                }
            }
        }
    }
}

/// A received message or RMA write not yet consumed.
#[derive(Clone, Copy, Debug)]
struct Ready {
    /// Receive slot holding the data.
    slot: usize,
    len: usize,
    /// Written by the peer (credit it back) rather than received (re-post it).
    written: bool,
}

/// What one end tells the other about an endpoint, over the control connection.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EndpointDetails {
    /// The endpoint's address, for the peer's address vector.
    pub name: Vec<u8>,
    /// RMA address and key of receive slot 0; slots follow each other.
    pub ring_addr: u64,
    pub ring_key: u64,
    pub ring_slots: u64,
    pub slot_bytes: u64,
}

/// One end of a libfabric STREAM.
pub type OfiStream = EndpointStream<Endpoint>;

impl RingEndpoint for Endpoint {
    fn send_packet(
        &mut self,
        packet: Packet<'_>,
        deadline: Deadline,
        stats: &mut StreamStats,
    ) -> io::Result<Option<Instant>> {
        let mut answered = None;
        for chunk in packet.chunks(self.layout.slot_bytes) {
            let i = self.wait_until(deadline, stats, |e| e.send_free.pop())?;
            let off = self.layout.offset(Slot::Send(i));
            let slot = &mut self.region[off..off + self.layout.slot_bytes];
            self.send_slots.fill(i, slot, &chunk);
            let start = Instant::now();
            self.send_posted_at[i] = start;
            self.send_len[i] = chunk.len();
            // Before the post: a reply may arrive with the send's own completion.
            self.awaiting = matches!(self.answer, Some(Reply::Echo | Reply::Sized(_)));
            if self.remote.is_some() {
                self.post_write(i, chunk.len(), deadline, stats)?;
            } else {
                self.post_send(Slot::Send(i), chunk.len(), None, stats)?;
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
                    self.wait_until(deadline, stats, |e| (e.acks > 0).then_some(()))?;
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
        self.wait_until(deadline, stats, |e| {
            (e.send_free.len() >= send).then_some(())
        })?;
        let c = self.control_slot(deadline, stats)?;
        let fin = control_data(KIND_FIN, self.msgs_sent);
        self.post_send(Slot::Control(c), 0, Some(fin), stats)?;
        let all_back = |e: &mut Endpoint| (e.control_free.len() >= CONTROL_SLOTS).then_some(());
        match self.wait_until(deadline, stats, all_back) {
            // Every data send completed (delivered) above; a peer that closed after
            // reading the FIN may not have acknowledged it. (A failed poll is never
            // `ConnectionAborted`: libfabric's errors are `Other`.)
            Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => Ok(()),
            other => other,
        }
    }

    fn at_eof(&self) -> bool {
        self.fin == Some(self.msgs_received) && self.ready.is_empty()
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
        let Some(&Ready { slot, len, written }) = self.ready.front() else {
            return Ok(None);
        };
        if let (0, Some(answer)) = (self.consumed, self.answer) {
            self.answer_request(answer, slot, len, stats)?;
        }
        let off = self.layout.offset(Slot::Recv(slot)) + self.consumed;
        let n = (len - self.consumed).min(buf.len());
        if copy_out {
            buf[..n].copy_from_slice(&self.region[off..off + n]);
        }
        self.consumed += n;
        if self.consumed == len {
            self.consumed = 0;
            self.ready.pop_front();
            if written {
                self.uncredited += 1;
                // Credit back in batches: half a ring at a time, or when idle.
                if self.uncredited as usize >= (self.layout.recv / 2).max(1)
                    || self.ready.is_empty()
                {
                    let c = self.control_slot(Deadline::Never, stats)?;
                    let credit = control_data(KIND_CREDIT, self.uncredited);
                    self.uncredited = 0;
                    self.post_send(Slot::Control(c), 0, Some(credit), stats)?;
                }
            } else {
                self.post_recv(slot)?;
            }
        }
        Ok(Some(n))
    }

    fn local_addr(&self) -> String {
        describe_name(&self.name)
    }

    fn peer_addr(&self) -> String {
        describe_name(&self.peer_name)
    }

    fn watch(&self) -> Option<Arc<std::net::TcpStream>> {
        self.watch.clone()
    }
}

/// An endpoint name as `ip:port` when it is a socket address, else hex.
pub fn describe_name(name: &[u8]) -> String {
    let family = name.get(..2).map(|f| u16::from_ne_bytes([f[0], f[1]]));
    let port = |b: &[u8]| u16::from_be_bytes([b[2], b[3]]);
    match family.map(i32::from) {
        Some(libc::AF_INET) if name.len() >= 8 => {
            let ip = std::net::Ipv4Addr::new(name[4], name[5], name[6], name[7]);
            format!("{ip}:{}", port(name))
        }
        Some(libc::AF_INET6) if name.len() >= 24 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&name[8..24]);
            let ip = std::net::Ipv6Addr::from(octets);
            format!("[{ip}]:{}", port(name))
        }
        _ => name.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::Timeout;
    use crate::transport::stream::Stream;
    use bytes::Bytes;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn control_data_roundtrips() {
        assert_eq!(
            split_control(control_data(KIND_FIN, 12345)),
            (KIND_FIN, 12345)
        );
        assert_eq!(split_control(control_data(KIND_ACK, 0)), (KIND_ACK, 0));
        assert_eq!(
            split_control(control_data(KIND_FIN, u64::MAX)).1,
            VALUE_MASK
        );
    }

    #[test]
    fn write_data_fits_in_a_32_bit_immediate_and_roundtrips() {
        let max_len = crate::stream::MAX_PKTSIZE as usize;
        for (slot, len) in [(0, 1), (RING_SLOTS_MAX - 1, max_len), (7, 32768)] {
            let data = write_data(slot, len);
            assert!(data <= u64::from(u32::MAX), "{data:#x}");
            // What the receiver sees when the provider fills the upper half with junk.
            assert_eq!(split_write_data(data | 0xdead_beef_0000_0000), (slot, len));
        }
    }

    /// Two connected single-endpoint STREAMs over the tcp provider on 127.0.0.1
    /// (scripts/setup.sh installs libfabric).
    fn pair(opts: &StreamOptions, rma: bool) -> (OfiStream, OfiStream) {
        let target = OfiTarget {
            provider: Some("tcp".into()),
            domain: None,
            node: Some("127.0.0.1".into()),
            rma,
        };
        let info = Info::get(&target).expect("libfabric's tcp provider");
        let mut a = Endpoint::open(&info, opts, rma).expect("open a");
        let mut b = Endpoint::open(&info, opts, rma).expect("open b");
        let (da, db) = (a.details(), b.details());
        a.set_peer(&db).expect("peer a");
        b.set_peer(&da).expect("peer b");
        (
            OfiStream::from_endpoints(vec![a], opts.clone()).expect("stream a"),
            OfiStream::from_endpoints(vec![b], opts.clone()).expect("stream b"),
        )
    }

    /// Sends numbered packets of every length up to `pktsize` and checks the receiver
    /// gets exactly those bytes, in order.
    fn bytes_arrive_intact(rma: bool, mprtt: bool) {
        let opts = StreamOptions {
            pktsize: 1000,
            reply: mprtt.then_some(Reply::Ack),
            ..StreamOptions::default()
        };
        exchange(&opts, rma);
    }

    /// [`bytes_arrive_intact`] with any options: each packet answered as `opts` say
    /// (the client checks each reply), and every byte counted on both ends. Packets
    /// are drawn from a few buffers sent again and again, half of the time as shared
    /// bytes (which a send slot may already hold).
    fn exchange(opts: &StreamOptions, rma: bool) {
        let (mut client, mut server) = pair(opts, rma);
        let pool: Vec<Bytes> = (0..11u32)
            .map(|j| {
                (0..(j * 97 % 1000 + 1))
                    .map(|k| (j * 7 + k) as u8)
                    .collect()
            })
            .collect();
        let packets: Vec<Bytes> = (0..300usize)
            .map(|i| pool[(i * 3 + i / 11) % pool.len()].clone())
            .collect();
        let want: Vec<u8> = packets.concat();
        let answer = answer_of(opts.reply);
        let replies: u64 = match answer {
            Some(a) => packets.iter().map(|p| a.len(p.len()) as u64).sum(),
            None => 0,
        };
        let t = std::thread::spawn(move || {
            for (i, p) in packets.iter().enumerate() {
                let before = Instant::now();
                if i % 2 == 0 {
                    client.send_shared(p, Timeout::Forever).expect("send");
                } else {
                    client.send(p, Timeout::Forever).expect("send");
                }
                let ended = client.last_send_end();
                assert_eq!(
                    ended.is_some(),
                    answer.is_some(),
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
        let mut buf = vec![0u8; 1000];
        loop {
            let n = server
                .recv(&mut buf, Timeout::Millis(10_000))
                .expect("recv");
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        let cs = t.join().expect("join");
        assert_eq!(got.len(), want.len());
        assert!(got == want, "the bytes differ");
        assert_eq!(cs.bytes_sent, want.len() as u64);
        assert_eq!(cs.send_latency.count(), 300, "one latency per operation");
        assert_eq!(cs.bytes_received, replies);
        assert_eq!(server.stats().bytes_sent, replies);
        assert_eq!(server.stats().bytes_received, want.len() as u64);
    }

    #[test]
    fn send_recv_delivers_the_exact_bytes_in_order() {
        bytes_arrive_intact(false, false);
    }

    #[test]
    fn rma_writes_deliver_the_exact_bytes_in_order() {
        bytes_arrive_intact(true, false);
    }

    #[test]
    fn mprtt_acks_every_packet_over_send_and_write() {
        bytes_arrive_intact(false, true);
        bytes_arrive_intact(true, true);
    }

    #[test]
    fn echoes_and_sized_replies_answer_every_packet_over_send_and_write() {
        for (echo, response_size) in [(true, 1), (false, 5000), (false, 10)] {
            let opts = StreamOptions {
                pktsize: 1000,
                reply: Some(if echo {
                    Reply::Echo
                } else {
                    Reply::Sized(response_size as u32)
                }),
                ..StreamOptions::default()
            };
            exchange(&opts, false);
            exchange(&opts, true);
        }
    }

    /// An echo that differs from its request, and a reply to no request, are errors
    /// that say so. The wrong replies are posted by hand on the peer's behalf, from a
    /// thread: the provider makes progress only while both ends read completions.
    #[test]
    fn a_wrong_reply_is_refused() {
        let opts = StreamOptions {
            pktsize: 1000,
            reply: Some(Reply::Echo),
            ..StreamOptions::default()
        };
        let target = OfiTarget {
            provider: Some("tcp".into()),
            domain: None,
            node: Some("127.0.0.1".into()),
            rma: false,
        };
        let info = Info::get(&target).expect("libfabric's tcp provider");
        let mut a = Endpoint::open(&info, &opts, false).expect("open a");
        let mut b = Endpoint::open(&info, &opts, false).expect("open b");
        let (da, db) = (a.details(), b.details());
        a.set_peer(&db).expect("peer a");
        b.set_peer(&da).expect("peer b");
        let request: Vec<u8> = (1..=10).collect();
        let reply = Some(control_data(KIND_REPLY, 0));
        // Posts `bytes` as a reply from `e`, then reads its completions until `done`.
        let post_and_progress = |mut e: Endpoint, bytes: Vec<u8>, done: Arc<AtomicBool>| {
            std::thread::spawn(move || {
                let mut stats = StreamStats::default();
                let off = e.layout.offset(Slot::Control(0));
                e.region[off..off + bytes.len()].copy_from_slice(&bytes);
                let slot = Slot::Control(0);
                e.post_send(slot, bytes.len(), reply, &mut stats)
                    .expect("post");
                while !done.load(Ordering::Relaxed) {
                    let _ = e.poll(&mut stats);
                }
                e
            })
        };
        let deadline = || Deadline::At(Instant::now() + Duration::from_secs(5));
        let mut spoilt = request.clone();
        spoilt[3] = 0;
        let done = Arc::new(AtomicBool::new(false));
        let peer = post_and_progress(b, spoilt, done.clone());
        let mut stats = StreamStats::default();
        let e = a
            .send_packet(Packet::borrowed(&request), deadline(), &mut stats)
            .expect_err("refused");
        done.store(true, Ordering::Relaxed);
        let mut b = peer.join().expect("join");
        assert!(e.to_string().contains("differs from its request"), "{e}");
        assert_eq!(stats.bytes_received, 0, "nothing taken");
        // b answers the request it got, then meets a reply it never asked for.
        let done = Arc::new(AtomicBool::new(false));
        let peer = post_and_progress(a, vec![0; 8], done.clone());
        let until = deadline();
        let mut buf = [0u8; 1000];
        let e = loop {
            match b.try_recv(&mut buf, true, &mut stats) {
                Ok(_) if !until.expired() => {}
                other => break other.expect_err("refused"),
            }
        };
        done.store(true, Ordering::Relaxed);
        peer.join().expect("join");
        assert!(e.to_string().contains("no request"), "{e}");
    }

    #[test]
    fn recv_times_out_when_nothing_arrives() {
        let opts = StreamOptions::default();
        let (_client, mut server) = pair(&opts, false);
        let mut buf = [0u8; 16];
        let e = server
            .recv(&mut buf, Timeout::NonBlocking)
            .expect_err("nothing sent");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        let e = server
            .recv(&mut buf, Timeout::Millis(100))
            .expect_err("nothing sent");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn socket_names_are_readable() {
        let mut v4 = vec![0u8; 16];
        v4[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        v4[2..4].copy_from_slice(&28444u16.to_be_bytes());
        v4[4..8].copy_from_slice(&[127, 0, 0, 1]);
        assert_eq!(describe_name(&v4), "127.0.0.1:28444");
        assert_eq!(describe_name(&[1, 2]), "0102");
    }
}
