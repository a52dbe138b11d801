//! End-to-end runs of `--flows F --threads T`: F TCP connections (or UDP sockets)
//! multiplexed over T threads on each end. Every byte and transaction is counted from both ends' `--json`
//! figures, and a running client is looked at: it holds a socket per flow, and no
//! thread per flow.

mod common;
use common::*;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const MB: u64 = 1 << 20;

#[test]
fn a_thousand_flows_over_two_threads_move_every_byte() {
    let doc = run_json(&["-m", "8", "--flows", "1000", "--threads", "2"]);
    assert_eq!(doc["settings"]["flows"], Value::Bool(true));
    assert_eq!(json_u64(&doc, &["settings", "nstreams"]), 2);
    assert_eq!(json_u64(&doc, &["settings", "nsockets"]), 500);
    // -m counts per thread.
    assert_eq!(json_u64(&doc, &["client", "total", "bytes_sent"]), 16 * MB);
    assert_eq!(
        json_u64(&doc, &["server", "total", "bytes_received"]),
        16 * MB
    );
}

#[test]
fn every_flow_of_a_request_response_run_counts_its_transactions() {
    // 3000 round trips per thread, 500 flows each: every request answered by 1 byte.
    let doc = run_json(&[
        "-r",
        "-l",
        "64",
        "--transactions",
        "3000",
        "--flows",
        "1000",
        "--threads",
        "2",
    ]);
    let client = &doc["client"]["total"];
    assert_eq!(json_u64(client, &["send_latency", "count"]), 6000);
    assert_eq!(json_u64(client, &["bytes_sent"]), 6000 * 64);
    assert_eq!(json_u64(client, &["bytes_received"]), 6000);
    assert_eq!(
        json_u64(&doc, &["server", "total", "bytes_received"]),
        6000 * 64
    );
    assert_eq!(json_u64(&doc, &["server", "total", "bytes_sent"]), 6000);
    // Replies of 1000 bytes: each round trip waits for all of its reply.
    let doc = run_json(&[
        "-r",
        "-l",
        "64",
        "--response-size",
        "1000",
        "--transactions",
        "500",
        "--flows",
        "100",
        "--threads",
        "2",
    ]);
    let client = &doc["client"]["total"];
    assert_eq!(json_u64(client, &["send_latency", "count"]), 1000);
    assert_eq!(json_u64(client, &["bytes_received"]), 1000 * 1000);
    assert_eq!(
        json_u64(&doc, &["server", "total", "bytes_sent"]),
        1000 * 1000
    );
}

#[test]
fn echoing_flows_return_every_byte_and_the_short_last_request() {
    let doc = run_json(&[
        "--echo",
        "-l",
        "100",
        "--transactions",
        "2000",
        "--flows",
        "200",
        "--threads",
        "2",
    ]);
    let client = &doc["client"]["total"];
    assert_eq!(json_u64(client, &["send_latency", "count"]), 4000);
    assert_eq!(json_u64(client, &["bytes_sent"]), 4000 * 100);
    assert_eq!(json_u64(client, &["bytes_received"]), 4000 * 100);
    assert_eq!(
        json_u64(&doc, &["server", "total", "bytes_sent"]),
        4000 * 100
    );
    // 1 MB per thread in 1000-byte requests: 1049 round trips each, the last one short.
    let doc = run_json(&[
        "--echo",
        "-m",
        "1",
        "-l",
        "1000",
        "--flows",
        "10",
        "--threads",
        "2",
    ]);
    let client = &doc["client"]["total"];
    assert_eq!(json_u64(client, &["send_latency", "count"]), 2 * 1049);
    assert_eq!(json_u64(client, &["bytes_received"]), 2 * MB);
    assert_eq!(json_u64(&doc, &["server", "total", "bytes_sent"]), 2 * MB);
}

#[test]
fn udp_flows_account_for_every_datagram() {
    // Bulk: each thread's batches go to its flows in turn.
    let doc = run_json(&[
        "-u",
        "-l",
        "32K",
        "-m",
        "8",
        "--flows",
        "1000",
        "--threads",
        "2",
    ]);
    assert_eq!(json_u64(&doc, &["settings", "nsockets"]), 500);
    let client = &doc["client"]["total"];
    let server = &doc["server"]["total"];
    let sent = json_u64(client, &["datagrams", "sent"]);
    assert_eq!(json_u64(client, &["bytes_sent"]), 16 * MB);
    assert_eq!(sent, 16 * MB / 32768);
    let received = json_u64(server, &["datagrams", "received"]);
    assert_eq!(received + json_u64(server, &["datagrams", "lost"]), sent);
    assert_eq!(json_u64(server, &["bytes_received"]), received * 32768);

    // Request/response: every flow keeps a datagram in flight, each answered once.
    let doc = run_json(&[
        "-u",
        "-r",
        "-l",
        "64",
        "--transactions",
        "3000",
        "--flows",
        "1000",
        "--threads",
        "2",
    ]);
    let client = &doc["client"]["total"];
    assert_eq!(json_u64(client, &["retries"]), 0);
    assert_eq!(json_u64(client, &["send_latency", "count"]), 6000);
    assert_eq!(json_u64(client, &["datagrams", "sent"]), 6000);
    assert_eq!(json_u64(client, &["bytes_sent"]), 6000 * 64);
    assert_eq!(json_u64(client, &["bytes_received"]), 6000);
    let server = &doc["server"]["total"];
    assert_eq!(json_u64(server, &["datagrams", "received"]), 6000);
    assert_eq!(json_u64(server, &["datagrams", "lost"]), 0);
    assert_eq!(json_u64(server, &["bytes_sent"]), 6000);

    // Echo: each reply is the request itself.
    let doc = run_json(&[
        "-u",
        "--echo",
        "-l",
        "100",
        "--transactions",
        "2000",
        "--flows",
        "200",
        "--threads",
        "2",
    ]);
    let client = &doc["client"]["total"];
    assert_eq!(json_u64(client, &["retries"]), 0);
    assert_eq!(json_u64(client, &["send_latency", "count"]), 4000);
    assert_eq!(json_u64(client, &["bytes_received"]), 4000 * 100);
    assert_eq!(
        json_u64(&doc, &["server", "total", "bytes_sent"]),
        4000 * 100
    );
}

/// Checks a crr run's figures from both ends: `transactions` connections in all, each
/// a `-l 64` packet and its 1-byte reply.
fn assert_crr_counts(doc: &Value, transactions: u64) {
    let client = &doc["client"]["total"];
    let server = &doc["server"]["total"];
    assert_eq!(json_u64(client, &["send_latency", "count"]), transactions);
    assert_eq!(json_u64(client, &["bytes_sent"]), transactions * 64);
    assert_eq!(json_u64(client, &["bytes_received"]), transactions);
    assert_eq!(json_u64(server, &["bytes_received"]), transactions * 64);
    assert_eq!(json_u64(server, &["bytes_sent"]), transactions);
}

#[test]
fn crr_flows_keep_connections_in_flight_and_count_every_one() {
    // 2000 connections per thread, up to 50 of them in flight at once.
    let doc = run_json(&[
        "--crr",
        "-l",
        "64",
        "--transactions",
        "2000",
        "--flows",
        "100",
        "--threads",
        "2",
    ]);
    assert_eq!(json_u64(&doc, &["settings", "nsockets"]), 50);
    assert_crr_counts(&doc, 4000);
}

#[test]
fn a_timed_crr_flows_run_finishes_its_connections_in_flight() {
    let doc = run_json(&[
        "--crr",
        "-l",
        "64",
        "--time",
        "1",
        "--flows",
        "40",
        "--threads",
        "2",
    ]);
    let transactions = json_u64(&doc["client"]["total"], &["send_latency", "count"]);
    assert!(transactions > 40, "{transactions} connections in a second");
    assert_crr_counts(&doc, transactions);
}

#[test]
fn ctrl_c_ends_a_crr_flows_run_with_both_ends_agreeing() {
    let server = Server::start(&[]);
    // The connections in flight finish before the client's last one ends the stream.
    let text = interrupted_client(
        &server,
        &[
            "--crr",
            "-l",
            "64",
            "--time",
            "60",
            "--flows",
            "40",
            "--threads",
            "2",
        ],
        Duration::from_millis(1000),
        Duration::from_secs(8),
    );
    assert!(text.contains("interrupted"), "{text}");
    let sent = volume(&text, "sent").bytes;
    assert!(sent > 0 && sent % 64 == 0, "{text}");
    assert_eq!(volume(&server.report(1), "received").bytes, sent);
}

/// Entries of a directory under /proc/PID.
fn entries(pid: u32, dir: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/{dir}")).map_or(0, |d| d.count())
}

#[test]
fn a_running_client_holds_a_socket_per_flow_and_a_thread_per_flow_thread() {
    let server = Server::start(&[]);
    let port = server.port.to_string();
    let seen = Arc::new(Mutex::new((0, 0)));
    let look = seen.clone();
    let out = run_with(
        &[
            "-c",
            "127.0.0.1",
            "-p",
            &port,
            "-r",
            "-l",
            "64",
            "--time",
            "3",
            "--flows",
            "600",
            "--threads",
            "3",
        ],
        Duration::from_secs(60),
        move |child| {
            std::thread::sleep(Duration::from_millis(1500));
            let pid = child.id();
            *look.lock().unwrap() = (entries(pid, "fd"), entries(pid, "task"));
        },
    );
    assert!(out.status.success(), "{out:?}\n{}", server.stderr());
    let (fds, threads) = *seen.lock().unwrap();
    assert!(fds > 600, "{fds} descriptors for 600 flows");
    // Three flow threads, the control reader and a few of the process's own: far from
    // one per flow.
    assert!((4..20).contains(&threads), "{threads} threads");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("flows(epoll) flows=200"), "{text}");
}

#[test]
fn flows_refuse_what_they_cannot_run() {
    let refusals: &[(&[&str], &str)] = &[
        (
            &["--flows", "3", "--threads", "2"],
            "--flows must be a multiple of --threads",
        ),
        (&["--flows", "20000"], "--flows must be between"),
        (
            &["--flows", "10", "-R"],
            "--flows multiplexes TCP connections and UDP sockets; it cannot be used with RDMA",
        ),
        (
            &["--flows", "10", "-u", "--busy-poll"],
            "cannot be used with --busy-poll",
        ),
        (
            &["--flows", "10", "--reverse"],
            "cannot be used with --reverse",
        ),
        (&["--flows", "10", "-b", "1M"], "cannot be used with -b"),
        (
            &["--flows", "10", "--zerocopy"],
            "cannot be used with --zerocopy",
        ),
        (&["--flows", "10", "-t", "2"], "cannot be used with"),
        (&["--threads", "2"], "--flows"),
    ];
    for (args, why) in refusals {
        let mut all = vec!["-c", "127.0.0.1", "-p", "1"];
        all.extend_from_slice(args);
        refused(&all, why);
    }
}
