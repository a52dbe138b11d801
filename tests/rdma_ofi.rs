//! End-to-end RDMA runs over libfabric (`-R --rdma-api ofi`) on loopback through the
//! `tcp` provider, which needs no RDMA hardware: real memory registration, completion
//! queues and delivery-complete sends. Also: the one-line errors when libfabric or an
//! RDMA device is missing, and TCP still running with the RDMA libraries hidden.
//! Tests in `needs_*` modules need something of the host: marked ignored, and run by
//! scripts/test.sh where the host has it.

mod common;
use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

const MB: u64 = 1 << 20;
const OFI: &[&str] = &["-R", "--rdma-api", "ofi", "--ofi-provider", "tcp"];

/// Runs a client with the ofi flags and `args` against a fresh server; returns (client
/// output, server report).
fn run_ofi(args: &[&str]) -> (String, String) {
    let server = Server::start(&[]);
    let mut all = OFI.to_vec();
    all.extend_from_slice(args);
    let client = client_ok(&server, "127.0.0.1", &all);
    let report = server.report(1);
    (client, report)
}

#[test]
fn bulk_send_recv_moves_every_byte_and_both_sides_report_it() {
    let (c, s) = run_ofi(&["-m", "256"]);
    assert_bytes(&c, &s, 256 * MB);
    let head = c.lines().next().unwrap();
    assert!(
        head.starts_with("RDMA CLIENT => 127.0.0.1:")
            && head.ends_with(
                " pkt_size=32768B sync(no-queue) nsockets=1 api=ofi op=send provider=tcp;ofi_rxm sched=batch"
            ),
        "{head}"
    );
    assert!(
        s.contains("\nnew RDMA connection from 127.0.0.1:")
            && s.contains(". pkt_size(32KB) api=ofi op=send provider=tcp;ofi_rxm sched=batch\n"),
        "{s}"
    );
    // Per-operation latency, post to completion, on the client; per receive on the server.
    let (_, min, _) = latency(&c, "latency");
    assert!(min > 0.0, "{c}");
    latency(&s, "latency");
}

#[test]
fn mprtt_answers_every_packet_with_a_one_byte_ack() {
    let (c, s) = run_ofi(&["-r", "-m", "2", "-l", "1024"]);
    assert_bytes(&c, &s, 2 * MB);
    assert_one_ack_byte_per_packet(&c, &s, 2 * MB / 1024);
    latency(&c, "mprtt");
}

#[test]
fn echoes_and_sized_replies_answer_every_request_over_send_and_write() {
    // (flags, request bytes, reply bytes): 500 requests each, on both ends' counts.
    for (args, request, reply) in [
        (&["--echo"][..], 1000, 1000),
        (&["--echo", "--rdma-write"][..], 1000, 1000),
        (&["-r", "--response-size", "5000"][..], 100, 5000),
        (
            &["-r", "--response-size", "5000", "--rdma-write"][..],
            100,
            5000,
        ),
    ] {
        let len = request.to_string();
        let mut all = OFI.to_vec();
        all.extend_from_slice(args);
        all.extend_from_slice(&["-l", &len, "--transactions", "500"]);
        let doc = run_json(&all);
        for (end, sent, received) in [
            ("client", 500 * request, 500 * reply),
            ("server", 500 * reply, 500 * request),
        ] {
            let total = |what| json_u64(&doc, &[end, "total", what]);
            assert_eq!(total("bytes_sent"), sent, "{args:?} {end}");
            assert_eq!(total("bytes_received"), received, "{args:?} {end}");
        }
        let count = json_u64(&doc, &["client", "total", "send_latency", "count"]);
        assert_eq!(count, 500, "{args:?}: one round trip per request");
    }
}

#[test]
fn two_streams_each_move_their_share() {
    let (c, s) = run_ofi(&["-t", "2", "-m", "16"]);
    assert_bytes(&c, &s, 32 * MB);
    for k in 0..2 {
        assert!(
            c.contains(&format!("  stream {k} : avg="))
                && c.contains("sent: 16MB(0.02GB 16777216B)"),
            "{c}"
        );
        assert!(c.contains(&format!("RDMA STREAM {k} 127.0.0.1:")), "{c}");
        assert!(s.contains(&format!("  stream {k} : avg=")), "{s}");
    }
}

#[test]
fn rdma_write_moves_every_byte_with_and_without_mprtt() {
    let (c, s) = run_ofi(&["--rdma-write", "-m", "64"]);
    assert_bytes(&c, &s, 64 * MB);
    assert!(c.contains(" api=ofi op=write provider=tcp;ofi_rxm"), "{c}");
    assert!(s.contains(" api=ofi op=write provider=tcp;ofi_rxm"), "{s}");
    let (c, s) = run_ofi(&["--rdma-write", "-r", "-m", "1", "-l", "4096", "-n", "2"]);
    assert_bytes(&c, &s, MB);
    assert!(c.contains("received  : 256B"), "{c}");
}

#[test]
fn one_byte_packets_arrive_in_full() {
    let (c, s) = run_ofi(&["-l", "1", "-m", "1"]);
    assert_bytes(&c, &s, MB);
}

#[test]
fn one_mib_packets_arrive_in_full() {
    let (c, s) = run_ofi(&["-l", "1048576", "-m", "32"]);
    assert_bytes(&c, &s, 32 * MB);
}

#[test]
fn several_endpoints_per_stream_and_the_lockfree_queue() {
    let (c, s) = run_ofi(&["-n", "3", "-m", "24"]);
    assert_bytes(&c, &s, 24 * MB);
    assert!(c.contains("async(mutex-queue) nsockets=3"), "{c}");
    let (c, s) = run_ofi(&["-q", "0", "-m", "8"]);
    assert_bytes(&c, &s, 8 * MB);
}

/// Runs fperf with `env` set and `args`; returns (status ok, stderr, seconds).
fn run_env(env: &[(&str, &str)], args: &[&str]) -> (bool, String, f64) {
    let t0 = Instant::now();
    let out = Command::new(fperf_bin())
        .envs(env.iter().copied())
        .args(args)
        .output()
        .expect("run fperf");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).to_string(),
        t0.elapsed().as_secs_f64(),
    )
}

fn assert_one_line_failure(ok: bool, err: &str, secs: f64, must_contain: &[&str]) {
    assert!(!ok, "must fail:\n{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line:\n{err}");
    for m in must_contain {
        assert!(err.contains(m), "'{m}' missing from: {err}");
    }
    assert!(secs < 2.0, "took {secs}s");
}

#[test]
fn without_libfabric_ofi_fails_at_once_saying_how_to_install_it() {
    // No server: the check comes before anything is contacted.
    let port = port_block(1).to_string();
    let (ok, err, secs) = run_env(
        &[("FPERF_LIBFABRIC", "/nonexistent/libfabric.so.1")],
        &[
            "-c",
            "127.0.0.1",
            "-p",
            &port,
            "-R",
            "--rdma-api",
            "ofi",
            "-m",
            "1",
        ],
    );
    assert_one_line_failure(ok, &err, secs, &["libfabric", "apt-get install libfabric1"]);
}

mod needs_no_rdma_device {
    use super::*;

    #[test]
    #[ignore = "needs a host without an RDMA device"]
    fn a_provider_without_a_device_fails_at_once_saying_so() {
        assert!(
            !has_rdma_device(),
            "this host has an RDMA device, so the no-device error cannot be shown"
        );
        let port = port_block(1).to_string();
        let (ok, err, secs) = run_env(
            &[],
            &[
                "-c",
                "127.0.0.1",
                "-p",
                &port,
                "-R",
                "--rdma-api",
                "ofi",
                "--ofi-provider",
                "verbs",
                "-m",
                "1",
            ],
        );
        assert_one_line_failure(ok, &err, secs, &["'verbs'", "rdma link add rxe0 type rxe"]);
        // The default API (ibverbs) says which device is missing.
        let (ok, err, secs) = run_env(&[], &["-c", "127.0.0.1", "-p", &port, "-R", "-m", "1"]);
        assert_one_line_failure(ok, &err, secs, &["no RDMA device", "modprobe rdma_rxe"]);
    }
}

fn has_rdma_device() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

mod needs_rdma_device {
    use super::*;

    #[test]
    #[ignore = "needs an RDMA device"]
    fn ofi_over_verbs_when_a_device_exists() {
        assert!(
            has_rdma_device(),
            "no RDMA device here (/sys/class/infiniband is empty); see README for Soft-RoCE"
        );
        let server = Server::start(&[]);
        let c = client_ok(
            &server,
            "127.0.0.1",
            &[
                "-R",
                "--rdma-api",
                "ofi",
                "--ofi-provider",
                "verbs",
                "-m",
                "64",
            ],
        );
        assert_bytes(&c, &server.report(1), 64 * MB);
    }
}

/// The RDMA libraries this host has, by path.
fn rdma_libraries() -> Vec<String> {
    ["libfabric.so.1", "libibverbs.so.1", "librdmacm.so.1"]
        .iter()
        .map(|l| format!("/usr/lib/x86_64-linux-gnu/{l}"))
        .filter(|p| std::path::Path::new(p).exists())
        .collect()
}

mod needs_root {
    use super::*;

    #[test]
    #[ignore = "needs root: a mount namespace"]
    fn tcp_and_udp_run_with_the_rdma_libraries_hidden_and_rdma_then_fails_clearly() {
        let libs = rdma_libraries();
        if libs.is_empty() {
            eprintln!("note: no RDMA library installed here; nothing to hide");
        }
        // In a private mount namespace, /dev/null covers every RDMA library, so the
        // dynamic loader cannot find them.
        let hide: String = libs
            .iter()
            .map(|l| format!("mount --bind /dev/null {l} && "))
            .collect();
        let port = port_block(3);
        let bin = fperf_bin();
        let script = format!(
            "{hide} {bin} --loopback -p {port} -m 8 && echo '=== udp' && {bin} --loopback -u -p {} -m 2 && echo '=== rdma' && {bin} --loopback -p {} -R --rdma-api ofi -m 1",
            port + 1,
            port + 2
        );
        let probe = Command::new("unshare").args(["--mount", "true"]).output();
        assert!(
            probe.is_ok_and(|o| o.status.success()),
            "cannot create a mount namespace (needs root and unshare)"
        );
        let out = run_with_deadline(
            Command::new("unshare").args(["--mount", "sh", "-c", &script]),
            Duration::from_secs(60),
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let (tcp, rest) = stdout
            .split_once("=== udp")
            .unwrap_or_else(|| panic!("TCP failed:\n{stdout}\n{stderr}"));
        let (udp, _) = rest
            .split_once("=== rdma")
            .unwrap_or_else(|| panic!("UDP failed:\n{stdout}\n{stderr}"));
        assert_eq!(volume(tcp, "sent").bytes, 8 * MB, "{stdout}\n{stderr}");
        assert_eq!(volume(tcp, "received").bytes, 8 * MB, "{stdout}\n{stderr}");
        assert_eq!(volume(udp, "sent").bytes, 2 * MB, "{stdout}\n{stderr}");
        assert!(!out.status.success(), "RDMA must fail:\n{stdout}\n{stderr}");
        assert!(
            stderr.contains("needs libfabric") && stderr.contains("apt-get install libfabric1"),
            "{stderr}"
        );
    }
}

/// Runs `cmd` in a process group of its own, killing the whole group after `limit`.
fn run_with_deadline(cmd: &mut Command, limit: Duration) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    let child = cmd
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("wait"),
        Err(_) => {
            // The group id is the shell's pid: this ends the shell and what it started.
            let _ = Command::new("kill")
                .args(["--", &format!("-{pid}")])
                .status();
            panic!("did not finish within {limit:?}");
        }
    }
}

#[test]
fn rdma_flags_without_rdma_are_refused_in_one_line() {
    let cases: &[(&[&str], &str)] = &[
        (&["-c", "127.0.0.1", "--ofi-provider", "tcp"], "--rdma"),
        (&["-c", "127.0.0.1", "--rdma-write"], "--rdma"),
        (&["-c", "127.0.0.1", "--rdma-api", "ofi"], "--rdma"),
        (
            &["-c", "127.0.0.1", "-R", "--rdma-api", "nope"],
            "invalid value",
        ),
        (
            &["-c", "127.0.0.1", "-R", "--ofi-provider", "tcp"],
            "needs --rdma-api ofi",
        ),
        (
            &["-s", "-R", "--rdma-api", "ofi"],
            "-R/--rdma describes a test",
        ),
    ];
    for (args, want) in cases {
        let out = run(args, Duration::from_secs(10));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} must fail");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn the_client_stops_soon_when_the_server_dies_mid_run() {
    let server = Server::start(&[]);
    let port = server.port.to_string();
    let mut args = vec!["-c", "127.0.0.1", "-p", &port];
    args.extend_from_slice(OFI);
    args.extend_from_slice(&["--time", "60"]);
    let mut client = Command::new(fperf_bin())
        .args(&args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("client");
    server.wait_for(
        |o| o.contains("new RDMA connection"),
        Duration::from_secs(20),
    );
    std::thread::sleep(Duration::from_millis(500));
    drop(server);
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(st) = client.try_wait().expect("wait") {
            break st;
        }
        if Instant::now() > deadline {
            let _ = client.kill();
            let _ = client.wait();
            panic!("the client did not notice the server's death within 15s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut client.stderr.take().expect("stderr"), &mut err)
        .expect("read");
    assert!(!status.success(), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn rdmadev_picks_the_libfabric_domain_or_names_the_ones_there_are() {
    let (c, s) = run_ofi(&["-D", "lo", "-m", "8"]);
    assert_bytes(&c, &s, 8 * MB);
    assert!(c.contains(" provider=tcp;ofi_rxm device=lo"), "{c}");
    let port = port_block(1).to_string();
    let mut args = vec!["-c", "127.0.0.1", "-p", &port];
    args.extend_from_slice(OFI);
    args.extend_from_slice(&["-D", "nosuch0", "-m", "1"]);
    let (ok, err, secs) = run_env(&[], &args);
    assert_one_line_failure(ok, &err, secs, &["no domain 'nosuch0'", "lo"]);
}
