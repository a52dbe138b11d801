//! End-to-end RDMA runs over verbs queue pairs: `-R --rdma-api ibverbs` (the default)
//! and `-R --rdma-api cm`, a real `fperf -s` and `fperf -c ADDR`, asserting the bytes
//! both sides report.
//!
//! The tests in `needs_rdma_device` need an RDMA device, those in
//! `needs_no_rdma_device` a host without one: both are marked ignored, and
//! scripts/test.sh runs the group this host can run. Run by hand on the wrong host,
//! they fail saying why. Soft-RoCE gives any Linux host a device:
//! `modprobe rdma_rxe; rdma link add rxe0 type rxe netdev eth0`.
//!
//! Address: the client connects to `FPERF_RDMA_ADDR` when set, else to the first IPv4
//! address of the network device behind the first RDMA device
//! (`/sys/class/infiniband/DEV/ports/1/gid_attrs/ndevs/0`), because 127.0.0.1 is not
//! routed over Soft-RoCE (rdma_cm resolves addresses to a device). The address is one
//! of this host's own; no traffic leaves it.
//!
//! Without a device, the last test checks that `-R --rdma-api ibverbs`, `cm` and `rsocket` fail
//! within 2 s with the one-line message saying how to add Soft-RoCE.

mod common;
use common::*;
use std::process::Command;
use std::time::Instant;

const MB: u64 = 1 << 20;

/// The first RDMA device, if this host has one.
fn first_device() -> Option<String> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names.into_iter().next()
}

/// The first IPv4 address of network device `netdev`.
fn ipv4_of(netdev: &str) -> Option<String> {
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show", "dev", netdev])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let field = text
        .split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)?;
    field.split('/').next().map(str::to_string)
}

/// (address to run over, device name); fails the test, saying why, when this host has
/// no usable device.
fn rdma_target() -> (String, String) {
    let dev = first_device().expect(
        "no RDMA device (/sys/class/infiniband is empty or missing); add Soft-RoCE with \
         `modprobe rdma_rxe; rdma link add rxe0 type rxe netdev eth0`",
    );
    if let Err(e) = fperf::transport::rdma::verbs_stream::VerbsDevice::open(Some(&dev), None) {
        panic!("RDMA device {dev} does not open: {e}");
    }
    if let Ok(addr) = std::env::var("FPERF_RDMA_ADDR") {
        return (addr, dev);
    }
    let ndev_file = format!("/sys/class/infiniband/{dev}/ports/1/gid_attrs/ndevs/0");
    let netdev = std::fs::read_to_string(&ndev_file)
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    match ipv4_of(&netdev) {
        Some(addr) => (addr, dev),
        None => panic!(
            "RDMA device {dev} has no network device with an IPv4 address \
             ({ndev_file}: '{netdev}'); set FPERF_RDMA_ADDR"
        ),
    }
}

/// Runs a client with `-R --rdma-api API` and `args` against a fresh server; returns
/// (client output, server report).
fn run_verbs(addr: &str, api: &str, args: &[&str]) -> (String, String) {
    let server = Server::start(&[]);
    let mut all = vec!["-R", "--rdma-api", api];
    all.extend_from_slice(args);
    let client = client_ok(&server, addr, &all);
    let report = server.report(1);
    (client, report)
}

fn bulk(api: &str) {
    let (addr, dev) = rdma_target();
    let (c, s) = run_verbs(&addr, api, &["-m", "64"]);
    assert_bytes(&c, &s, 64 * MB);
    let head = c.lines().next().unwrap();
    // The peer is its GID's address and QP number, reached via the local device.
    assert!(
        head.starts_with("RDMA CLIENT => ")
            && head.contains(&format!(" via {dev} pkt_size="))
            && head.contains(&format!(" api={api} op=send")),
        "{head}"
    );
    if api == "ibverbs" {
        assert!(
            head.ends_with(&format!(" device={dev} sched=batch")),
            "{head}"
        );
    }
    assert!(
        s.contains("\nnew RDMA connection from ") && s.contains(&format!(" via {dev}. pkt_size(")),
        "{s}"
    );
    assert!(s.contains(&format!(" api={api} op=send")), "{s}");
    let (_, min, _) = latency(&c, "latency");
    assert!(min > 0.0, "{c}");
    latency(&s, "latency");
}

fn mprtt(api: &str) {
    let (addr, _) = rdma_target();
    let (c, s) = run_verbs(&addr, api, &["-r", "-m", "2", "-l", "1024"]);
    assert_bytes(&c, &s, 2 * MB);
    assert_one_ack_byte_per_packet(&c, &s, 2 * MB / 1024);
    latency(&c, "mprtt");
}

fn two_streams(api: &str) {
    let (addr, _) = rdma_target();
    let (c, s) = run_verbs(&addr, api, &["-t", "2", "-m", "16"]);
    assert_bytes(&c, &s, 32 * MB);
    for k in 0..2 {
        assert!(c.contains(&format!("  stream {k} : avg=")), "{c}");
        assert!(s.contains(&format!("  stream {k} : avg=")), "{s}");
    }
}

fn two_sockets(api: &str) {
    let (addr, _) = rdma_target();
    let (c, s) = run_verbs(&addr, api, &["-n", "2", "-m", "16"]);
    assert_bytes(&c, &s, 16 * MB);
    assert!(c.contains("nsockets=2"), "{c}");
}

fn rdma_write(api: &str) {
    let (addr, _) = rdma_target();
    let (c, s) = run_verbs(&addr, api, &["--rdma-write", "-m", "64"]);
    assert_bytes(&c, &s, 64 * MB);
    assert!(c.contains(&format!(" api={api} op=write")), "{c}");
    assert!(s.contains(&format!(" api={api} op=write")), "{s}");
    let (c, s) = run_verbs(
        &addr,
        api,
        &["--rdma-write", "-r", "-m", "1", "-l", "4096", "-n", "2"],
    );
    assert_bytes(&c, &s, MB);
    assert!(c.contains("received  : 256B"), "{c}");
}

fn packet_sizes(api: &str) {
    let (addr, _) = rdma_target();
    let (c, s) = run_verbs(&addr, api, &["-l", "1", "-m", "1"]);
    assert_bytes(&c, &s, MB);
    let (c, s) = run_verbs(&addr, api, &["-l", "1048576", "-m", "32"]);
    assert_bytes(&c, &s, 32 * MB);
}

mod needs_rdma_device {
    use super::*;

    #[test]
    #[ignore = "needs an RDMA device"]
    fn ibverbs_bulk_moves_every_byte_and_both_sides_report_it() {
        bulk("ibverbs");
    }

    #[test]
    #[ignore = "needs an RDMA device"]
    fn cm_bulk_moves_every_byte_and_both_sides_report_it() {
        bulk("cm");
    }

    #[test]
    #[ignore = "needs an RDMA device"]
    fn ibverbs_mprtt_answers_every_packet_with_a_one_byte_ack() {
        mprtt("ibverbs");
    }

    #[test]
    #[ignore = "needs an RDMA device"]
    fn cm_mprtt_answers_every_packet_with_a_one_byte_ack() {
        mprtt("cm");
    }

    #[test]
    #[ignore = "needs an RDMA device"]
    fn ibverbs_two_streams_each_move_their_share() {
        two_streams("ibverbs");
    }

    #[test]
    #[ignore = "needs an RDMA device"]
    fn cm_two_streams_each_move_their_share() {
        two_streams("cm");
    }

    #[test]
    #[ignore = "needs an RDMA device"]
    fn ibverbs_two_queue_pairs_per_stream() {
        two_sockets("ibverbs");
    }

    #[test]
    #[ignore = "needs an RDMA device"]
    fn cm_two_queue_pairs_per_stream() {
        two_sockets("cm");
    }

    #[test]
    #[ignore = "needs an RDMA device"]
    fn ibverbs_rdma_write_with_and_without_mprtt() {
        rdma_write("ibverbs");
    }

    #[test]
    #[ignore = "needs an RDMA device"]
    fn cm_rdma_write_with_and_without_mprtt() {
        rdma_write("cm");
    }

    #[test]
    #[ignore = "needs an RDMA device"]
    fn ibverbs_one_byte_and_one_mib_packets() {
        packet_sizes("ibverbs");
    }

    #[test]
    #[ignore = "needs an RDMA device"]
    fn cm_one_byte_and_one_mib_packets() {
        packet_sizes("cm");
    }
}

mod needs_no_rdma_device {
    use super::*;

    #[test]
    #[ignore = "needs a host without an RDMA device"]
    fn without_a_device_ibverbs_cm_and_rsocket_fail_within_two_seconds_saying_how_to_add_one() {
        assert!(
            first_device().is_none(),
            "this host has an RDMA device, so the no-device error cannot be shown"
        );
        // No server: the check comes before anything is contacted.
        let port = port_block(1).to_string();
        for api in ["ibverbs", "cm", "rsocket"] {
            let t0 = Instant::now();
            let out = Command::new(fperf_bin())
                .args([
                    "-c",
                    "127.0.0.1",
                    "-p",
                    &port,
                    "-R",
                    "--rdma-api",
                    api,
                    "-m",
                    "1",
                ])
                .output()
                .expect("run fperf");
            let secs = t0.elapsed().as_secs_f64();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{api} must fail:\n{err}");
            assert_eq!(err.trim_end().lines().count(), 1, "one line:\n{err}");
            for m in [
                "no RDMA device",
                "modprobe rdma_rxe; rdma link add rxe0 type rxe netdev eth0",
            ] {
                assert!(err.contains(m), "{api}: '{m}' missing from: {err}");
            }
            assert!(secs < 2.0, "{api} took {secs}s");
        }
    }
}
