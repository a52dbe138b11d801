//! The XDP program that hands the test's datagrams to the AF_XDP socket, written as
//! BPF instructions at run time with the flow's addresses and ports as immediates, and
//! loaded and attached through the bpf(2) system call: no compiler, libbpf or bpffs.
//!
//! The program parses Ethernet, then IPv4 (no options, not a fragment) or IPv6 (UDP as
//! the next header), then UDP, and compares the source and destination addresses and
//! ports with the flow's. A match goes to the XSKMAP entry of the queue it arrived on
//! (`bpf_redirect_map(map, ctx->rx_queue_index, XDP_PASS)`: to the kernel if no socket
//! is there); everything else passes to the kernel (`XDP_PASS`), so ARP, SSH and
//! fperf's control connection go on as before.
//!
//! It is attached with a BPF link (`BPF_LINK_CREATE`) that is never pinned: the kernel
//! detaches it when the link's descriptor closes, which it does when the process ends,
//! however it ends.

use std::ffi::CString;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// One BPF instruction, as the kernel reads it (`struct bpf_insn`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    code: u8,
    /// Destination register in the low nibble, source in the high one.
    regs: u8,
    off: i16,
    imm: i32,
}

// Opcodes (linux/bpf.h, bpf_common.h).
const LDX_W: u8 = 0x61;
const LDX_H: u8 = 0x69;
const LDX_B: u8 = 0x71;
const MOV64_X: u8 = 0xbf;
const MOV64_K: u8 = 0xb7;
const ADD64_K: u8 = 0x07;
const AND64_K: u8 = 0x57;
const JGT_X: u8 = 0x2d;
/// 32-bit compare with an immediate: a word loaded from the packet is compared
/// whole, whatever its top bit (the 64-bit compare sign-extends the immediate).
const JNE32_K: u8 = 0x56;
const LD_IMM64: u8 = 0x18;
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;
/// `src` of an `LD_IMM64` whose immediate is a map's descriptor.
const PSEUDO_MAP_FD: u8 = 1;
const FUNC_REDIRECT_MAP: i32 = 51;
const XDP_PASS: i32 = 2;

// Registers.
const R0: u8 = 0;
const R1: u8 = 1;
const R2: u8 = 2;
const R3: u8 = 3;
const R4: u8 = 4;
const R5: u8 = 5;
const R6: u8 = 6;

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: dst | (src << 4),
        off,
        imm,
    }
}

/// Builds the program, with jumps to the common `XDP_PASS` exit patched in at the end.
struct Builder {
    insns: Vec<Insn>,
    to_pass: Vec<usize>,
}

impl Builder {
    fn push(&mut self, i: Insn) {
        self.insns.push(i);
    }

    /// `dst = *(size *)(src + off)`.
    fn load(&mut self, code: u8, dst: u8, src: u8, off: i16) {
        self.push(insn(code, dst, src, off, 0));
    }

    /// Passes the packet unless the 32-bit value in `reg` is `imm`.
    fn pass_unless(&mut self, reg: u8, imm: u32) {
        self.to_pass.push(self.insns.len());
        self.push(insn(JNE32_K, reg, 0, 0, imm as i32));
    }

    /// Passes the packet unless the `bytes` at packet offset `at` are `want`, compared
    /// a word (or what is left) at a time through r5; r2 holds the packet's start.
    fn pass_unless_bytes(&mut self, at: usize, want: &[u8]) {
        let mut i = 0;
        while i < want.len() {
            let left = want.len() - i;
            let off = (at + i) as i16;
            let imm = if left >= 4 {
                self.load(LDX_W, R5, R2, off);
                u32::from_ne_bytes([want[i], want[i + 1], want[i + 2], want[i + 3]])
            } else {
                self.load(LDX_H, R5, R2, off);
                u32::from(u16::from_ne_bytes([want[i], want[i + 1]]))
            };
            self.pass_unless(R5, imm);
            i += if left >= 4 { 4 } else { 2 };
        }
    }
}

/// The program for datagrams from `remote` to `local` (both UDP ends of the flow, as
/// seen by this host), redirecting them through the XSKMAP whose descriptor is `map`.
pub fn instructions(local: SocketAddr, remote: SocketAddr, map: RawFd) -> Vec<Insn> {
    let mut b = Builder {
        insns: Vec::with_capacity(64),
        to_pass: Vec::new(),
    };
    let (src, dst) = (remote.ip().to_canonical(), local.ip().to_canonical());
    let (ethertype, ip_len, addrs_at, proto_at): (u16, usize, usize, usize) = match src {
        IpAddr::V4(_) => (0x0800, 20, 14 + 12, 14 + 9),
        IpAddr::V6(_) => (0x86dd, 40, 14 + 8, 14 + 6),
    };
    let udp_at = 14 + ip_len;
    // r6 = ctx; r2 = data; r3 = data_end (struct xdp_md's first two fields).
    b.push(insn(MOV64_X, R6, R1, 0, 0));
    b.load(LDX_W, R2, R1, 0);
    b.load(LDX_W, R3, R1, 4);
    // The verifier lets the program read only what it has checked is in the packet.
    b.push(insn(MOV64_X, R4, R2, 0, 0));
    b.push(insn(ADD64_K, R4, 0, 0, (udp_at + 8) as i32));
    b.to_pass.push(b.insns.len());
    b.push(insn(JGT_X, R4, R3, 0, 0));
    b.pass_unless_bytes(12, &ethertype.to_be_bytes());
    if src.is_ipv4() {
        // Version 4 with a 20-byte header: options go to the kernel.
        b.load(LDX_B, R5, R2, 14);
        b.pass_unless(R5, 0x45);
        // Fragments go to the kernel, which reassembles them.
        b.load(LDX_H, R5, R2, 14 + 6);
        b.push(insn(
            AND64_K,
            R5,
            0,
            0,
            i32::from(u16::from_ne_bytes([0x3f, 0xff])),
        ));
        b.pass_unless(R5, 0);
    }
    b.load(LDX_B, R5, R2, proto_at as i16);
    b.pass_unless(R5, 17);
    let octets = |ip: IpAddr| -> Vec<u8> {
        match ip {
            IpAddr::V4(ip) => ip.octets().into(),
            IpAddr::V6(ip) => ip.octets().into(),
        }
    };
    let (src_bytes, dst_bytes) = (octets(src), octets(dst));
    b.pass_unless_bytes(addrs_at, &src_bytes);
    b.pass_unless_bytes(addrs_at + src_bytes.len(), &dst_bytes);
    b.pass_unless_bytes(udp_at, &remote.port().to_be_bytes());
    b.pass_unless_bytes(udp_at + 2, &local.port().to_be_bytes());
    // return bpf_redirect_map(map, ctx->rx_queue_index, XDP_PASS);
    b.load(LDX_W, R2, R6, 16);
    b.push(insn(LD_IMM64, R1, PSEUDO_MAP_FD, 0, map));
    b.push(insn(0, 0, 0, 0, 0));
    b.push(insn(MOV64_K, R3, 0, 0, XDP_PASS));
    b.push(insn(CALL, 0, 0, 0, FUNC_REDIRECT_MAP));
    b.push(insn(EXIT, 0, 0, 0, 0));
    let pass = b.insns.len();
    b.push(insn(MOV64_K, R0, 0, 0, XDP_PASS));
    b.push(insn(EXIT, 0, 0, 0, 0));
    for at in b.to_pass {
        b.insns[at].off = (pass - at - 1) as i16;
    }
    b.insns
}

// bpf(2) commands and constants.
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// The bpf(2) system call with `attr`, a prefix of `union bpf_attr` that the kernel
/// reads as the whole (the rest zero); returns what it returned.
fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, exclusively borrowed `repr(C)` prefix of `union
    // bpf_attr` and its size is passed, so the kernel reads and writes only within it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// A descriptor the bpf(2) call returned.
fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: the kernel just returned this descriptor, which nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

/// Why the kernel refused a bpf(2) call, in words: missing privileges or a kernel
/// without BPF say so.
fn refused(what: &str, e: io::Error) -> io::Error {
    let why = match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            "not permitted: AF_XDP needs root, or CAP_NET_ADMIN and CAP_BPF".to_string()
        }
        Some(libc::ENOSYS) => "this kernel has no BPF system call (CONFIG_BPF_SYSCALL)".into(),
        _ => e.to_string(),
    };
    io::Error::new(e.kind(), format!("--xdp: cannot {what}: {why}"))
}

/// An XSKMAP: where the program finds the AF_XDP socket of each queue.
pub struct XskMap {
    fd: OwnedFd,
}

#[repr(C)]
struct MapCreate {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
}

#[repr(C)]
struct MapUpdate {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

impl XskMap {
    /// A map with room for queues `0..=queue`.
    pub fn create(queue: u32) -> io::Result<XskMap> {
        let mut attr = MapCreate {
            map_type: BPF_MAP_TYPE_XSKMAP,
            key_size: 4,
            value_size: 4,
            max_entries: queue + 1,
        };
        let fd = bpf(BPF_MAP_CREATE, &mut attr).map_err(|e| refused("create an XSKMAP", e))?;
        Ok(XskMap { fd: owned(fd) })
    }

    /// Puts the AF_XDP socket `xsk` in the entry of `queue`.
    pub fn insert(&self, queue: u32, xsk: RawFd) -> io::Result<()> {
        let value = xsk as u32;
        let mut attr = MapUpdate {
            map_fd: self.fd.as_raw_fd() as u32,
            _pad: 0,
            key: &queue as *const u32 as u64,
            value: &value as *const u32 as u64,
            flags: 0,
        };
        bpf(BPF_MAP_UPDATE_ELEM, &mut attr)
            .map(drop)
            .map_err(|e| refused("put the AF_XDP socket in the XSKMAP", e))
    }

    pub fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[repr(C)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// Loads `insns` as an XDP program; a program the verifier refuses fails with the
/// verifier's log.
pub fn load(insns: &[Insn]) -> io::Result<OwnedFd> {
    let license = CString::from(c"GPL");
    let mut log = vec![0u8; 64 << 10];
    let mut name = [0u8; 16];
    name[..10].copy_from_slice(b"fperf_xdp\0");
    let mut attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 0,
        log_size: 0,
        log_buf: 0,
        kern_version: 0,
        prog_flags: 0,
        prog_name: name,
        prog_ifindex: 0,
        expected_attach_type: BPF_XDP,
    };
    match bpf(BPF_PROG_LOAD, &mut attr) {
        Ok(fd) => Ok(owned(fd)),
        Err(e)
            if e.raw_os_error() == Some(libc::EACCES) || e.raw_os_error() == Some(libc::EINVAL) =>
        {
            // Load again with the verifier's log, to say why.
            attr.log_level = 1;
            attr.log_size = log.len() as u32;
            attr.log_buf = log.as_mut_ptr() as u64;
            match bpf(BPF_PROG_LOAD, &mut attr) {
                Ok(fd) => Ok(owned(fd)),
                Err(again) => {
                    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                    let text = String::from_utf8_lossy(&log[..end]);
                    let last: Vec<&str> = text.lines().rev().take(8).collect();
                    if last.is_empty() {
                        return Err(refused("load the XDP program", again));
                    }
                    Err(io::Error::other(format!(
                        "--xdp: the kernel's verifier refused the XDP program: {}",
                        last.into_iter().rev().collect::<Vec<_>>().join(" | ")
                    )))
                }
            }
        }
        Err(e) => Err(refused("load the XDP program", e)),
    }
}

/// Where the program runs: in the driver (native XDP), or on the kernel's generic path
/// for drivers without XDP support.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    Native,
    Generic,
}

impl AttachMode {
    pub fn name(self) -> &'static str {
        match self {
            AttachMode::Native => "native",
            AttachMode::Generic => "generic",
        }
    }
}

#[repr(C)]
struct LinkCreate {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// An attached XDP program: detached when dropped, or by the kernel when the process
/// ends.
pub struct Attached {
    /// The link; closing it detaches the program.
    _link: OwnedFd,
    _prog: OwnedFd,
    _map: XskMap,
    pub mode: AttachMode,
}

/// Attaches `prog`, which redirects through `map`, to interface `ifindex` (named `name`
/// in errors): in the driver if it can, else on the generic path.
pub fn attach(prog: OwnedFd, map: XskMap, ifindex: u32, name: &str) -> io::Result<Attached> {
    let mut last = None;
    for (mode, flags) in [
        (AttachMode::Native, XDP_FLAGS_DRV_MODE),
        (AttachMode::Generic, XDP_FLAGS_SKB_MODE),
    ] {
        let mut attr = LinkCreate {
            prog_fd: prog.as_raw_fd() as u32,
            target_ifindex: ifindex,
            attach_type: BPF_XDP,
            flags,
        };
        match bpf(BPF_LINK_CREATE, &mut attr) {
            Ok(fd) => {
                return Ok(Attached {
                    _link: owned(fd),
                    _prog: prog,
                    _map: map,
                    mode,
                })
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES)) => {
                return Err(refused("attach the XDP program", e))
            }
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!(
                        "--xdp: {name} already has an XDP program attached (ip link show {name})"
                    ),
                ))
            }
            Err(e) => last = Some(e),
        }
    }
    let e = last.unwrap_or_else(|| io::Error::from(io::ErrorKind::Unsupported));
    Err(io::Error::new(
        e.kind(),
        format!("--xdp: {name} does not take an XDP program: {e}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_jump_lands_on_the_pass_exit_and_the_immediates_are_the_flows() {
        for (local, remote) in [
            ("10.0.0.1:5201", "10.0.0.2:40000"),
            ("[fd00::1]:5201", "[fd00::2]:40000"),
        ] {
            let (local, remote): (SocketAddr, SocketAddr) =
                (local.parse().unwrap(), remote.parse().unwrap());
            let insns = instructions(local, remote, 42);
            let pass = insns.len() - 2;
            assert_eq!(insns[pass], insn(MOV64_K, R0, 0, 0, XDP_PASS));
            assert_eq!(insns.last().map(|i| i.code), Some(EXIT));
            let jumps: Vec<usize> = (0..insns.len())
                .filter(|&i| matches!(insns[i].code, JNE32_K | JGT_X))
                .collect();
            for &j in &jumps {
                assert_eq!(j + 1 + insns[j].off as usize, pass, "jump at {j}");
            }
            let map = insns.iter().find(|i| i.code == LD_IMM64).unwrap();
            assert_eq!((map.imm, map.regs >> 4), (42, PSEUDO_MAP_FD));
            // The ports, as the packet holds them, are compared.
            let want = u32::from(u16::from_ne_bytes(5201u16.to_be_bytes()));
            assert!(insns
                .iter()
                .any(|i| i.code == JNE32_K && i.imm as u32 == want));
            // IPv4: bounds, ethertype, version, fragment, protocol, 2 addresses, 2
            // ports; IPv6: no version or fragment test, 4 words per address.
            let expected = if local.is_ipv4() { 9 } else { 13 };
            assert_eq!(jumps.len(), expected);
        }
    }
}
