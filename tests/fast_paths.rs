//! End-to-end runs of the fast-path options (`--zerocopy`, `--busy-poll`, `--cpu`,
//! `--server-cpu`): a real `fperf -s` and `fperf -c` on loopback, asserting that every
//! byte and every MPRTT ACK arrives. Speed is measured by bench/compare, not here.

mod common;
use common::*;
use std::time::Duration;

const MB: u64 = 1 << 20;

/// Runs a client with `args` against a fresh server; returns (client, server report).
fn run_pair(args: &[&str]) -> (String, String) {
    let server = Server::start(&[]);
    let client = client_ok(&server, "127.0.0.1", args);
    let report = server.report(1);
    (client, report)
}

#[test]
fn zerocopy_splice_moves_every_byte() {
    let (c, s) = run_pair(&["-m", "64", "--zerocopy"]);
    assert_bytes(&c, &s, 64 * MB);
}

#[test]
fn zerocopy_splice_with_odd_sizes_and_sender_threads() {
    // 100000-byte packets straddle pages; -n 3 sends through three sender threads,
    // each with its own pipe.
    let (c, s) = run_pair(&["-m", "20", "-l", "100000", "-n", "3", "--zerocopy=splice"]);
    assert_bytes(&c, &s, 20 * MB);
}

#[test]
fn zerocopy_msg_moves_every_byte() {
    let (c, s) = run_pair(&["-m", "64", "-l", "131072", "--zerocopy=msg"]);
    assert_bytes(&c, &s, 64 * MB);
}

#[test]
fn zerocopy_with_mprtt_acks_every_packet() {
    let (c, s) = run_pair(&["-m", "4", "-l", "8192", "-r", "--zerocopy=msg"]);
    assert_bytes(&c, &s, 4 * MB);
    assert_eq!(volume(&c, "received").bytes, 4 * MB / 8192, "ACKs\n{c}");
    latency(&c, "mprtt");
}

#[test]
fn busy_poll_bulk_moves_every_byte() {
    let (c, s) = run_pair(&["-m", "32", "-t", "2", "--busy-poll"]);
    assert_bytes(&c, &s, 2 * 32 * MB);
}

#[test]
fn busy_poll_ping_pong_acks_every_packet() {
    let (c, s) = run_pair(&["-m", "1", "-l", "64", "-r", "-d", "--busy-poll"]);
    assert_bytes(&c, &s, MB);
    assert_eq!(volume(&c, "received").bytes, MB / 64, "ACKs\n{c}");
    assert_eq!(volume(&s, "sent").bytes, MB / 64, "ACKs\n{s}");
    latency(&c, "mprtt");
}

#[test]
fn ping_pong_without_busy_poll_acks_every_packet() {
    // The MPRTT path that polls before reading an ACK that cannot be there yet.
    let (c, s) = run_pair(&["-m", "1", "-l", "100", "-r"]);
    assert_bytes(&c, &s, MB);
    // 10486 packets: 10485 whole ones and a short last one, each ACKed once.
    assert_eq!(volume(&c, "received").bytes, MB.div_ceil(100), "ACKs\n{c}");
}

#[test]
fn pinned_threads_move_every_byte() {
    let (c, s) = run_pair(&[
        "-m",
        "16",
        "-t",
        "2",
        "-n",
        "2",
        "--cpu",
        "0",
        "--server-cpu",
        "0",
    ]);
    assert_bytes(&c, &s, 2 * 16 * MB);
}

#[test]
fn all_fast_paths_together() {
    let (c, s) = run_pair(&[
        "-m",
        "8",
        "-l",
        "65536",
        "--zerocopy",
        "--busy-poll",
        "--cpu",
        "0",
        "--server-cpu",
        "0",
        "-q",
        "0",
    ]);
    assert_bytes(&c, &s, 8 * MB);
}

#[test]
fn a_cpu_that_does_not_exist_is_a_clear_error() {
    let server = Server::start(&[]);
    let port = server.port.to_string();
    // The client's own CPUs are checked before it connects (a flag error)...
    refused(
        &["-c", "127.0.0.1", "-p", &port, "-m", "1", "--cpu", "1000"],
        "--cpu names CPU 1000, but this host lets fperf run on CPUs 0",
    );
    // ...the server's where it pins its threads, naming the CPUs it has.
    let out = run(
        &[
            "-c",
            "127.0.0.1",
            "-p",
            &port,
            "-m",
            "1",
            "--server-cpu",
            "1000",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot pin a thread to CPU 1000: this host lets fperf run on CPUs 0"),
        "{err}"
    );
    let out = run(
        &["--loopback", "-m", "1", "--cpu", "5000"],
        Duration::from_secs(30),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("CPU numbers must be below 1024, not 5000"),
        "{err}"
    );
}

#[test]
fn zerocopy_is_refused_for_udp() {
    let out = run(
        &["--loopback", "-u", "-m", "1", "--zerocopy"],
        Duration::from_secs(30),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--zerocopy is a TCP option"), "{err}");
}
