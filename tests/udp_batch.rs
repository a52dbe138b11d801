//! End-to-end runs of the UDP fast paths on loopback: batching (`--udp-batch`, on by
//! default), UDP GSO (`--gso`) and GRO (`--gro`), and `--busy-poll`. A real `fperf -s`
//! and `fperf -c -u`; each run is small enough (4 MB) that the server's receive buffer
//! holds all of it, so loopback loses nothing and both ends' datagram and byte counts
//! must match exactly, whichever way the datagrams were batched, segmented or
//! coalesced.

mod common;
use common::*;
use regex::Regex;
use std::time::Duration;

const MB: u64 = 1 << 20;

/// A number after `key` on the line starting with `label`.
fn field(text: &str, label: &str, key: &str) -> u64 {
    let re = Regex::new(&format!(r"(?m)^{label}\s*:.*?\b{key}(\d+)")).unwrap();
    re.captures(text)
        .unwrap_or_else(|| panic!("no '{label}' ... '{key}N' in:\n{text}"))[1]
        .parse()
        .unwrap()
}

/// Asserts a lossless run of `datagrams` datagrams and `bytes` bytes on both ends.
fn assert_exact(client: &str, server: &str, bytes: u64, datagrams: u64) {
    assert_eq!(volume(client, "sent").bytes, bytes, "client:\n{client}");
    assert_eq!(volume(server, "received").bytes, bytes, "server:\n{server}");
    assert_eq!(field(client, "datagrams", "sent="), datagrams, "{client}");
    for (key, want) in [
        ("sent=", datagrams),
        ("received=", datagrams),
        ("lost=", 0),
        ("duplicated=", 0),
        ("out-of-order=", 0),
    ] {
        assert_eq!(field(server, "datagrams", key), want, "{key}\n{server}");
    }
}

/// 4 MB in 1472-byte datagrams: 2849 full ones and one of 576 bytes.
const DATAGRAMS_4MB_1472: u64 = 2850;

/// Runs `-u -m 4 -l 1472` plus `extra` and asserts every datagram arrived once.
fn exact_run(extra: &[&str]) {
    let server = Server::start(&[]);
    let mut args = vec!["-u", "-m", "4", "-l", "1472"];
    args.extend_from_slice(extra);
    let c = client_ok(&server, "127.0.0.1", &args);
    let s = server.report(1);
    assert_exact(&c, &s, 4 * MB, DATAGRAMS_4MB_1472);
    latency(&c, "latency");
    latency(&s, "latency");
}

#[test]
fn default_batching_counts_every_datagram_and_the_short_last_one() {
    exact_run(&[]);
}

#[test]
fn an_odd_batch_size_that_does_not_divide_the_run() {
    exact_run(&["--udp-batch", "7"]);
}

#[test]
fn unbatched_still_works() {
    exact_run(&["--udp-batch", "1"]);
}

#[test]
fn gso_segments_are_counted_as_datagrams() {
    exact_run(&["--gso"]);
}

#[test]
fn gso_with_gro_splits_coalesced_buffers_exactly() {
    exact_run(&["--gso", "--gro"]);
}

#[test]
fn gro_alone() {
    exact_run(&["--gro"]);
}

#[test]
fn busy_poll_bulk() {
    exact_run(&["--busy-poll"]);
}

#[test]
fn small_datagrams_with_gso_fill_64_segments_per_message() {
    // 1 MB of 100-byte datagrams: 10485 full ones and one of 76 bytes; GSO messages of
    // 64 segments, so the batch of 200 is cut into messages of 64, 64, 64, 8.
    let server = Server::start(&[]);
    let c = client_ok(
        &server,
        "127.0.0.1",
        &["-u", "-m", "1", "-l", "100", "--gso", "--udp-batch", "200"],
    );
    let s = server.report(1);
    assert_exact(&c, &s, MB, 10_486);
}

#[test]
fn a_timed_batched_run_sends_its_last_partial_batch() {
    let server = Server::start(&[]);
    let c = client_ok(
        &server,
        "127.0.0.1",
        &[
            "-u",
            "-l",
            "1000",
            "--time",
            "0.5",
            "-b",
            "20M",
            "--udp-batch",
            "50",
        ],
    );
    let s = server.report(1);
    // Paced at 20 Mbit/s for 0.5 s: about 1250 datagrams; whatever the count, every
    // one the client counted as sent arrived.
    let sent = field(&c, "datagrams", "sent=");
    assert!(sent > 100, "{c}");
    assert_eq!(field(&s, "datagrams", "sent="), sent, "{s}");
    assert_eq!(field(&s, "datagrams", "received="), sent, "{s}");
    assert_eq!(field(&s, "datagrams", "lost="), 0, "{s}");
    assert_eq!(volume(&c, "sent").bytes, sent * 1000);
    assert_eq!(volume(&s, "received").bytes, sent * 1000);
}

#[test]
fn pacing_still_paces_with_the_automatic_batch() {
    // -b makes the automatic batch 1: 8 Mbit/s for 1 MB takes about a second.
    let server = Server::start(&[]);
    let c = client_ok(
        &server,
        "127.0.0.1",
        &["-u", "-m", "1", "-l", "1000", "-b", "8M"],
    );
    let s = server.report(1);
    assert_exact(&c, &s, MB, 1049);
    let secs = volume(&c, "sent").secs;
    assert!(secs >= 0.9, "1 MB at 8 Mbit/s took {secs} s:\n{c}");
}

#[test]
fn busy_poll_ping_pong_acknowledges_every_datagram() {
    let server = Server::start(&[]);
    let c = client_ok(
        &server,
        "127.0.0.1",
        &[
            "-u",
            "-r",
            "--busy-poll",
            "-m",
            "1",
            "-l",
            "1024",
            "--ack-timeout",
            "2000",
        ],
    );
    let s = server.report(1);
    latency(&c, "mprtt");
    let retries = field(&c, "retries", "");
    assert_eq!(field(&c, "datagrams", "sent="), 1024, "{c}");
    assert_eq!(field(&s, "datagrams", "sent="), 1024, "{s}");
    assert_eq!(field(&s, "datagrams", "lost="), 0, "{s}");
    assert_eq!(field(&s, "datagrams", "received="), 1024 + retries, "{s}");
    assert_eq!(
        volume(&s, "sent").bytes,
        1024 + retries,
        "one ACK per copy:\n{s}"
    );
}

#[test]
fn batching_options_are_refused_where_they_cannot_work() {
    let server = Server::start(&[]);
    let port = server.port.to_string();
    for (args, needle) in [
        (vec!["-u", "-r", "--gso"], "cannot be batched"),
        (vec!["-u", "-r", "--udp-batch", "4"], "cannot be batched"),
        (
            vec!["-u", "--udp-batch", "0"],
            "--udp-batch must be between 1 and 1024",
        ),
        (
            vec!["-u", "--udp-batch", "1025"],
            "--udp-batch must be between 1 and 1024",
        ),
        (
            vec!["-u", "--gso", "--udp-batch", "1"],
            "--gso needs several datagrams",
        ),
        (
            vec!["-u", "--gso", "-b", "1M"],
            "--gso needs several datagrams",
        ),
        (
            vec!["-u", "--gso", "-n", "2"],
            "cannot be used with -n above 1",
        ),
        (
            vec!["--gso"],
            "--gso is a UDP option; it cannot be used with TCP",
        ),
        (
            vec!["--udp-batch", "8", "--gro"],
            "--udp-batch and --gro are UDP options; they cannot be used with TCP",
        ),
    ] {
        let mut all = vec!["-c", "127.0.0.1", "-p", &port];
        all.extend_from_slice(&args);
        let out = run(&all, Duration::from_secs(20));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // Nothing reached the server.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(server.stdout().matches("Server listening").count(), 1);
}
