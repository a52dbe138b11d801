//! End-to-end runs of the TCP hot paths: `--echo` (the server answers each packet with
//! the packet itself) in every waiting mode, and the refusals around it. Byte counts and
//! round trips are asserted from both ends' `--json` figures.

mod common;
use common::*;
use serde_json::Value;
use std::time::Duration;

const MB: u64 = 1 << 20;

/// Checks an echo run of `streams` streams of `per_stream` bytes in `pktsize` packets:
/// every byte went out and came back, one round trip per packet.
fn assert_echoed(doc: &Value, streams: u64, per_stream: u64, pktsize: u64) {
    let total = streams * per_stream;
    assert_eq!(doc["settings"]["echo"], Value::Bool(true));
    assert_eq!(
        doc["settings"]["mprtt"],
        Value::Bool(true),
        "--echo implies -r"
    );
    assert_eq!(json_u64(doc, &["client", "total", "bytes_sent"]), total);
    assert_eq!(
        json_u64(doc, &["client", "total", "bytes_received"]),
        total,
        "echoed"
    );
    assert_eq!(json_u64(doc, &["server", "total", "bytes_received"]), total);
    assert_eq!(
        json_u64(doc, &["server", "total", "bytes_sent"]),
        total,
        "echoed"
    );
    let round_trips = streams * per_stream.div_ceil(pktsize);
    assert_eq!(
        json_u64(doc, &["client", "total", "send_latency", "count"]),
        round_trips
    );
}

#[test]
fn echo_returns_every_byte_of_every_packet() {
    // 2 MB is not a whole number of 1000-byte packets: the short last one is echoed too.
    let doc = run_json(&["-m", "2", "-l", "1000", "--echo"]);
    assert_echoed(&doc, 1, 2 * MB, 1000);
}

#[test]
fn echo_with_streams_and_sockets() {
    let doc = run_json(&["-m", "1", "-l", "1000", "-t", "2", "-n", "3", "--echo"]);
    assert_echoed(&doc, 2, MB, 1000);
}

#[test]
fn echo_in_the_non_blocking_modes() {
    for extra in [["--busy-poll"], ["--zerocopy"]] {
        let mut args = vec!["-m", "1", "-l", "4096", "--echo", "-d"];
        args.extend_from_slice(&extra);
        let doc = run_json(&args);
        assert_echoed(&doc, 1, MB, 4096);
    }
}

#[test]
fn echo_for_a_time_echoes_what_was_sent() {
    let doc = run_json(&["--time", "1", "-l", "64", "--echo", "-d"]);
    let sent = json_u64(&doc, &["client", "total", "bytes_sent"]);
    assert!(sent > 0 && sent % 64 == 0, "whole packets: {sent}");
    assert_echoed(&doc, 1, sent, 64);
}

#[test]
fn echo_reports_say_what_the_round_trip_is() {
    let server = Server::start(&[]);
    let c = client_ok(&server, "127.0.0.1", &["-m", "1", "-l", "512", "--echo"]);
    let s = server.report(1);
    assert!(
        c.lines().next().is_some_and(|l| l.contains("reply=echo")),
        "{c}"
    );
    assert!(s.contains("reply=echo"), "{s}");
    assert_eq!(volume(&c, "sent").bytes, MB);
    assert_eq!(volume(&c, "received").bytes, MB, "{c}");
    assert_eq!(volume(&s, "received").bytes, MB);
    assert_eq!(volume(&s, "sent").bytes, MB, "{s}");
    latency(&c, "mprtt");
    latency(&s, "mprtt");
}

#[test]
fn rdma_echo_and_sized_replies_pass_the_settings_checks() {
    // Every RDMA API answers with echoes and sized replies: with no server there, the
    // client fails to reach it rather than refusing its settings (exit status 2).
    let port = port_block(1).to_string();
    for args in [
        &["-R", "--echo"][..],
        &["-R", "--rdma-api", "cm", "-r", "--response-size", "64"],
        &["-R", "--rdma-api", "ofi", "--echo", "--rdma-write"],
    ] {
        let mut all = vec!["-c", "127.0.0.1", "-p", &port];
        all.extend_from_slice(args);
        let out = run(&all, Duration::from_secs(30));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: no server, yet it ran");
        assert_ne!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.contains("cannot be used"), "{args:?}: {err}");
    }
}

#[test]
fn affinity_is_another_name_for_cpu() {
    // A ping-pong with both ends pinned to one core (what wins on a VM whose idle cores
    // halt): every byte echoed.
    let doc = run_json(&[
        "-m",
        "1",
        "-l",
        "1000",
        "--echo",
        "-d",
        "--affinity",
        "0",
        "--server-cpu",
        "0",
    ]);
    assert_echoed(&doc, 1, MB, 1000);
    assert_eq!(doc["settings"]["client_cpus"], serde_json::json!([0]));
    assert_eq!(doc["settings"]["server_cpus"], serde_json::json!([0]));
}

/// `--io-uring`: every data call goes through a ring; every byte still arrives, with
/// streams and sockets, the other way, and echoed.
#[test]
fn io_uring_moves_and_echoes_every_byte() {
    let doc = run_json(&["-m", "4", "-t", "2", "-n", "2", "--io-uring"]);
    assert_eq!(doc["settings"]["io_uring"], Value::Bool(true));
    assert_eq!(json_u64(&doc, &["client", "total", "bytes_sent"]), 8 * MB);
    assert_eq!(
        json_u64(&doc, &["server", "total", "bytes_received"]),
        8 * MB
    );
    let doc = run_json(&["-m", "4", "--reverse", "--io-uring"]);
    assert_eq!(json_u64(&doc, &["server", "total", "bytes_sent"]), 4 * MB);
    assert_eq!(
        json_u64(&doc, &["client", "total", "bytes_received"]),
        4 * MB
    );
    let doc = run_json(&["-m", "1", "-l", "1000", "--echo", "--io-uring"]);
    assert_echoed(&doc, 1, MB, 1000);
    let doc = run_json(&["-m", "1"]);
    assert_eq!(doc["settings"]["io_uring"], Value::Bool(false));
}

/// Both headers name the engine, and Ctrl-C ends a run whose calls wait in a ring (each
/// wait is bounded by its linked time-out, after which the abort is seen).
#[test]
fn io_uring_is_named_and_a_ctrl_c_ends_it() {
    let server = Server::start(&[]);
    let text = interrupted_client(
        &server,
        &["--io-uring", "--time", "60", "-b", "200M"],
        Duration::from_millis(800),
        Duration::from_secs(10),
    );
    let header = text.lines().next().unwrap_or_default();
    assert!(header.contains(" nsockets=1 engine=io_uring"), "{text}");
    let report = server.report(1);
    assert!(
        report.contains("pkt_size(32KB) engine=io_uring"),
        "{report}"
    );
    let (sent, received) = (volume(&text, "sent"), volume(&report, "received"));
    assert!(
        sent.bytes > 0 && received.bytes <= sent.bytes,
        "{text}\n{report}"
    );
}
