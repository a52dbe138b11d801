//! Unmodified iperf3 clients (Debian's `iperf3`) against `fperf -s --iperf3-port`, on
//! loopback: both tools' byte counts agree, the server's limits and busy answer hold,
//! and bad input on the iperf3 port ends within the usual deadlines.
//!
//! These tests need the `iperf3` program: they are ignored by default, and the test
//! script runs them where `iperf3` is installed (its set-up installs it), then again
//! with a current iperf3 release where one can be had (`FPERF_IPERF3` names it).

mod common;

use common::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MB: u64 = 1 << 20;

/// The iperf3 to run: `$FPERF_IPERF3`, else the one on the PATH.
fn iperf3_program() -> String {
    std::env::var("FPERF_IPERF3").unwrap_or_else(|_| "iperf3".into())
}

/// The minor version of the iperf3 that runs (`iperf 3.12 ...`: 12).
fn iperf3_minor() -> u32 {
    let out = Command::new(iperf3_program())
        .arg("--version")
        .output()
        .expect("iperf3 is installed (scripts/setup.sh --tests)");
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().nth(1).unwrap_or_default();
    let minor = version.split('.').nth(1).unwrap_or_default();
    minor
        .parse()
        .unwrap_or_else(|_| panic!("iperf3's version: {text}"))
}

/// An fperf server with an iperf3 port beside its own.
struct Both {
    server: Server,
    iperf3_port: u16,
}

fn start(args: &[&str]) -> Both {
    let iperf3_port = port_block(1);
    let port = iperf3_port.to_string();
    let mut all = vec!["--iperf3-port", &port];
    all.extend_from_slice(args);
    Both {
        server: Server::start(&all),
        iperf3_port,
    }
}

/// Runs `iperf3 -c 127.0.0.1 -p PORT ARGS -J` (bounded in time): whether the test ran
/// (exited 0 and reported no error: iperf3 3.12 exits 0 after some errors) and its
/// JSON document.
fn iperf3(port: u16, args: &[&str]) -> (bool, Value) {
    iperf3_to("127.0.0.1", port, args)
}

/// As [`iperf3`], to `host`.
fn iperf3_to(host: &str, port: u16, args: &[&str]) -> (bool, Value) {
    let mut child = Command::new(iperf3_program())
        .args(["-c", host, "-p", &port.to_string(), "-J"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("iperf3 is installed (scripts/setup.sh --tests)");
    let out = collect(child.stdout.take().expect("stdout"));
    let (status, doc) = finished_document(&mut child, &out, Duration::from_secs(60));
    (status.success() && doc.get("error").is_none(), doc)
}

/// Whether a count from iperf3's own summary agrees with fperf's count of the same
/// bytes or datagrams. iperf3 3.12 agrees exactly. 3.16 and later run a thread per
/// stream and write their summary while those threads may still finish a write, or
/// while the last datagrams are still in flight: their count may be short by `slack`.
fn agrees(iperf3: u64, fperf: u64, slack: u64) -> bool {
    iperf3 <= fperf && fperf - iperf3 <= slack
}

/// One write of iperf3's default TCP length per stream, for `streams` streams.
fn writes(streams: u64) -> u64 {
    streams * 128 * 1024
}

/// Waits up to 5 s for the server to log `needle` (it logs once the client was told).
fn logged(server: &Server, needle: &str) {
    let t0 = Instant::now();
    while !server.stderr().contains(needle) {
        assert!(t0.elapsed() < Duration::from_secs(5), "{}", server.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `doc[path]`.
fn at<'a>(doc: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(doc, |v, key| &v[*key])
}

fn bytes(doc: &Value, path: &[&str]) -> u64 {
    at(doc, path)
        .as_u64()
        .unwrap_or_else(|| panic!("no number at {path:?} in {doc}"))
}

#[test]
#[ignore = "needs iperf3"]
fn an_iperf3_client_sends_and_both_tools_count_the_same_bytes() {
    let both = start(&[]);
    let (ok, doc) = iperf3(both.iperf3_port, &["-t", "2", "-P", "2"]);
    assert!(ok, "{doc}");
    let report = both.server.report(1);
    assert!(
        report.contains("(iperf3 3."),
        "marked as an iperf3 client: {report}"
    );
    let received = volume(&report, "received").bytes;
    assert!(received > 10 * MB, "{report}");
    assert_eq!(bytes(&doc, &["end", "sum_received", "bytes"]), received);
    // What the client sent is what fperf received, less what was in flight when the
    // client ended the test (iperf3 itself closes its streams at that moment).
    let sent = bytes(&doc, &["end", "sum_sent", "bytes"]);
    assert!(
        received <= sent || agrees(sent, received, writes(2)),
        "{received} > {sent}"
    );
    assert_eq!(doc["end"]["streams"].as_array().map(Vec::len), Some(2));
    // fperf's own figures in its report: latency percentiles and CPU time.
    assert!(report.contains("latency"), "{report}");
    assert_eq!(both.server.stderr(), "", "the server logged a client error");
}

#[test]
#[ignore = "needs iperf3"]
fn reverse_by_bytes_and_blocks_and_the_receiver_lines_come_from_fperf() {
    let both = start(&[]);
    let (ok, doc) = iperf3(both.iperf3_port, &["-R", "-n", "40M", "-P", "3"]);
    assert!(ok, "{doc}");
    let report = both.server.report(1);
    let sent = volume(&report, "sent").bytes;
    assert_eq!(bytes(&doc, &["end", "sum_sent", "bytes"]), sent, "{report}");
    let received = bytes(&doc, &["end", "sum_received", "bytes"]);
    assert!(
        received >= 40 * MB && received <= sent,
        "{received} of {sent}"
    );
    let (ok, doc) = iperf3(both.iperf3_port, &["-k", "200", "-l", "64K"]);
    assert!(ok, "{doc}");
    assert_eq!(bytes(&doc, &["end", "sum_sent", "bytes"]), 200 * 65_536);
    let report = both.server.report(2);
    assert!(report.contains("pkt_size(64KB)"), "{report}");
    assert_eq!(
        bytes(&doc, &["end", "sum_received", "bytes"]),
        volume(&report, "received").bytes
    );
}

#[test]
#[ignore = "needs iperf3"]
fn bidir_omit_window_congestion_and_intervals_are_served() {
    let both = start(&[]);
    let (ok, doc) = iperf3(
        both.iperf3_port,
        &[
            "--bidir", "-P", "2", "-t", "2", "-O", "1", "-w", "512K", "-C", "cubic", "-i", "0.5",
        ],
    );
    assert!(ok, "{doc}");
    let report = both.server.report(1);
    // Client to server: fperf's count; server to client: fperf's count of what it sent.
    assert_eq!(
        bytes(&doc, &["end", "sum_received", "bytes"]),
        volume(&report, "received").bytes,
        "{report}"
    );
    assert_eq!(
        bytes(&doc, &["end", "sum_sent_bidir_reverse", "bytes"]),
        volume(&report, "sent").bytes,
        "{report}"
    );
    assert_eq!(doc["end"]["streams"].as_array().map(Vec::len), Some(4));
    assert!(doc["intervals"].as_array().is_some_and(|i| i.len() >= 4));
    assert!(report.contains("cc=cubic"), "{report}");
}

#[test]
#[ignore = "needs iperf3"]
fn an_iperf3_client_receives_exactly_the_bytes_it_asked_for() {
    let both = start(&[]);
    // 128 MiB in whole 128 KiB writes: sent and received exactly.
    let (ok, doc) = iperf3(both.iperf3_port, &["-R", "-n", "128M"]);
    assert!(ok, "{doc}");
    assert_eq!(bytes(&doc, &["end", "sum_sent", "bytes"]), 128 * MB);
    assert_eq!(bytes(&doc, &["end", "sum_received", "bytes"]), 128 * MB);
    // A volume that is no whole number of writes, over three streams that share it: the
    // server sends whole writes up to the first that covers it (77 of 128 KiB for
    // 10,000,000 bytes), as iperf3's own server sends whole blocks and its clients of
    // 3.16 and later read them. The client ends the test once it has the volume, so
    // what it read lies between the volume and what was sent.
    let asked: u64 = 10_000_000;
    let (ok, doc) = iperf3(both.iperf3_port, &["-R", "-n", "10000000", "-P", "3"]);
    assert!(ok, "{doc}");
    let sent = bytes(&doc, &["end", "sum_sent", "bytes"]);
    assert_eq!(sent, asked.div_ceil(128 << 10) * (128 << 10));
    let received = bytes(&doc, &["end", "sum_received", "bytes"]);
    assert!((asked..=sent).contains(&received), "{received}");
}

#[test]
#[ignore = "needs iperf3"]
fn both_ways_by_bytes_the_server_sends_no_more_than_asked() {
    let both = start(&[]);
    // iperf3's client ends a --bidir test once it has sent its own bytes, so the
    // server's direction may end short of them, never past the whole 128 KiB writes
    // that cover them.
    let asked = 20_000_000u64.div_ceil(128 << 10) * (128 << 10);
    let (ok, doc) = iperf3(both.iperf3_port, &["--bidir", "-n", "20000000", "-P", "2"]);
    assert!(ok, "{doc}");
    let report = both.server.report(1);
    let sent = volume(&report, "sent").bytes;
    assert!(sent <= asked, "{sent}\n{report}");
    assert_eq!(
        bytes(&doc, &["end", "sum_sent_bidir_reverse", "bytes"]),
        sent,
        "{report}"
    );
    assert!(bytes(&doc, &["end", "sum_received_bidir_reverse", "bytes"]) <= sent);
    assert_eq!(
        bytes(&doc, &["end", "sum_received", "bytes"]),
        volume(&report, "received").bytes,
        "{report}"
    );
}

#[test]
#[ignore = "needs iperf3"]
fn an_iperf3_udp_client_receives_exactly_the_bytes_it_asked_for() {
    let both = start(&[]);
    // 1000 datagrams of 1000 bytes at 1 Gbit/s into a 4 MB buffer, which holds them
    // all: the client has every one and ends the test, by which time a server that
    // sent until then had sent more.
    let (ok, doc) = iperf3(
        both.iperf3_port,
        &[
            "-u", "-R", "-b", "1G", "-l", "1000", "-w", "4M", "-n", "1000000",
        ],
    );
    assert!(ok, "{doc}");
    assert_eq!(bytes(&doc, &["end", "sum", "bytes"]), 1_000_000, "{doc}");
    assert_eq!(bytes(&doc, &["end", "sum", "packets"]), 1000, "{doc}");
    let report = both.server.report(1);
    assert_eq!(datagrams(&report, "sent="), 1000, "{report}");
}

/// A number in the `datagrams` line of a UDP report: `field` is `sent=`, `received=`...
fn datagrams(report: &str, field: &str) -> u64 {
    let line = report
        .lines()
        .find(|l| l.starts_with("datagrams"))
        .unwrap_or_else(|| panic!("no datagrams line in {report}"));
    let at = line
        .find(field)
        .unwrap_or_else(|| panic!("no {field} in {line}"))
        + field.len();
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {field} in {line}"))
}

#[test]
#[ignore = "needs iperf3"]
fn an_iperf3_client_sends_udp_and_both_tools_count_the_same_datagrams() {
    let both = start(&[]);
    let (ok, doc) = iperf3(
        both.iperf3_port,
        &["-u", "-b", "50M", "-t", "2", "-l", "1200"],
    );
    assert!(ok, "{doc}");
    let report = both.server.report(1);
    assert!(report.contains("new UDP connection"), "{report}");
    let sum = &doc["end"]["sum"];
    let sent = bytes(sum, &["packets"]);
    // The client's own count, the server's from fperf's results, and fperf's report.
    assert_eq!(bytes(&doc, &["end", "sum_sent", "packets"]), sent);
    assert_eq!(datagrams(&report, "sent="), sent, "{report}");
    let lost = bytes(sum, &["lost_packets"]);
    assert_eq!(datagrams(&report, "lost="), lost, "{report}");
    assert_eq!(datagrams(&report, "received=") + lost, sent, "{report}");
    assert_eq!(
        bytes(&doc, &["end", "sum_received", "bytes"]),
        volume(&report, "received").bytes
    );
    // Paced by the client at 50 Mbit/s: about 10400 datagrams of 1200 bytes in 2 s.
    assert!((8_000..=12_000).contains(&sent), "{sent}");
    assert!(sum["jitter_ms"].as_f64().is_some_and(|j| j > 0.0), "{sum}");
}

#[test]
#[ignore = "needs iperf3"]
fn fperf_sends_udp_to_an_iperf3_client_at_its_rate_with_its_counters() {
    let both = start(&[]);
    let (ok, doc) = iperf3(
        both.iperf3_port,
        &[
            "-u",
            "-R",
            "-P",
            "2",
            "-b",
            "20M",
            "-t",
            "2",
            "--udp-counters-64bit",
        ],
    );
    assert!(ok, "{doc}");
    let report = both.server.report(1);
    let sent = datagrams(&report, "sent=");
    assert_eq!(
        bytes(&doc, &["end", "sum_sent", "packets"]),
        sent,
        "{report}"
    );
    let got = &doc["end"]["sum_received"];
    assert_eq!(
        bytes(got, &["packets"]),
        sent,
        "the client's count of what was sent"
    );
    // 2 streams at 20 Mbit/s each for 2 s, in the client's default datagrams.
    let bits = volume(&report, "sent").bytes * 8;
    assert!(
        (60_000_000..=100_000_000).contains(&bits),
        "{bits} bits\n{report}"
    );
    // The test ended when the client said so, not 40 s later.
    assert!(volume(&report, "sent").secs < 4.0, "{report}");
}

#[test]
#[ignore = "needs iperf3"]
fn limits_unsupported_options_and_busy_answers_reach_the_iperf3_client() {
    let both = start(&["--max-streams", "2"]);
    let (ok, doc) = iperf3(both.iperf3_port, &["-t", "1", "-P", "3"]);
    assert!(!ok);
    let error = doc["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("number of parallel streams too large"),
        "{doc}"
    );
    logged(&both.server, "--max-streams");
    let (ok, doc) = iperf3(both.iperf3_port, &["-t", "1", "-b", "10M/10"]);
    assert!(!ok);
    let error = doc["error"].as_str().unwrap_or_default();
    assert!(error.contains("not implemented"), "{doc}");
    logged(&both.server, "-b RATE/BURST");
    // One test at a time: a second iperf3 client, and an fperf client, hear "busy".
    let port = both.iperf3_port;
    let first = std::thread::spawn(move || iperf3(port, &["-t", "3"]));
    std::thread::sleep(Duration::from_millis(1000));
    let (ok, doc) = iperf3(both.iperf3_port, &["-t", "1"]);
    assert!(!ok);
    assert!(
        doc["error"].as_str().unwrap_or_default().contains("busy"),
        "{doc}"
    );
    let out = client_run(&both.server, "127.0.0.1", &["-m", "1"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("server busy"));
    let (ok, doc) = first.join().expect("first client");
    assert!(ok, "{doc}");
    // And the server goes on.
    let (ok, doc) = iperf3(both.iperf3_port, &["-t", "1"]);
    assert!(ok, "{doc}");
}

#[test]
#[ignore = "needs iperf3"]
fn bad_input_on_the_iperf3_port_ends_in_time_and_the_server_goes_on() {
    let both = start(&[]);
    let port = both.iperf3_port;
    let connect = || {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        s
    };
    // Each connection is a client of its own: one that is still being timed out must
    // not take the next one's connection for its data.
    let cookie = |client: u8| {
        let mut c = [b'a'; 37];
        c[0] = b'a' + client;
        c[36] = 0;
        c
    };
    let closed_within = |mut s: TcpStream, secs: u64| {
        let t0 = Instant::now();
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "{:?}",
            t0.elapsed()
        );
        sink
    };
    // Not a cookie: closed at once.
    let mut junk = connect();
    junk.write_all(&[0x55; 37]).expect("write");
    assert!(closed_within(junk, 3).is_empty());
    // Silent: closed after the 5 s deadline for unknown connections.
    closed_within(connect(), 8);
    // A parameter message larger than allowed: an iperf3 error, then closed.
    let mut big = connect();
    big.write_all(&cookie(1)).expect("cookie");
    big.write_all(&(1u32 << 20).to_be_bytes()).expect("length");
    let answer = closed_within(big, 3);
    assert_eq!(answer.first(), Some(&9), "PARAM_EXCHANGE first");
    assert_eq!(answer.get(1), Some(&0xfe), "then SERVER_ERROR: {answer:?}");
    // A truncated one: closed within the control time-out (10 s). Its own read waits
    // longer, so that the server's close ends it: a read that timed out first would
    // leave the session open while the next connection arrives.
    let mut short = connect();
    short
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    short.write_all(&cookie(2)).expect("cookie");
    short.write_all(&100u32.to_be_bytes()).expect("length");
    short.write_all(b"{\"tcp\":").expect("part");
    closed_within(short, 15);
    // Not JSON.
    let mut garbage = connect();
    garbage.write_all(&cookie(3)).expect("cookie");
    garbage.write_all(&4u32.to_be_bytes()).expect("length");
    garbage.write_all(b"\xff\xfe\x00[").expect("body");
    assert_eq!(closed_within(garbage, 3).get(1), Some(&0xfe));
    // An unknown state byte in the middle of a test ends it.
    let mut odd = connect();
    odd.write_all(&cookie(4)).expect("cookie");
    let params = br#"{"tcp":true,"time":5,"parallel":1,"len":1000}"#;
    odd.write_all(&(params.len() as u32).to_be_bytes())
        .expect("length");
    odd.write_all(params).expect("params");
    let mut state = [0u8; 2];
    odd.read_exact(&mut state)
        .expect("PARAM_EXCHANGE, CREATE_STREAMS");
    assert_eq!(state, [9, 10]);
    let mut data = connect();
    data.write_all(&cookie(4)).expect("data cookie");
    let mut go = [0u8; 2];
    odd.read_exact(&mut go).expect("TEST_START, TEST_RUNNING");
    assert_eq!(go, [1, 2]);
    odd.write_all(&[77]).expect("unknown state");
    let answer = closed_within(odd, 3);
    assert_eq!(answer.first(), Some(&0xfe), "{answer:?}");
    drop(data);
    logged(&both.server, "unexpected control message 77");
    // The server goes on.
    let (ok, doc) = iperf3(port, &["-t", "1"]);
    assert!(ok, "{doc}");
}

#[test]
fn an_iperf3_clients_skip_rx_copy_is_served() {
    // iperf3 3.19 and later send it; the installed ones may not: speak theirs by hand.
    let both = start(&[]);
    let port = both.iperf3_port;
    let mut cookie = [b'k'; 37];
    cookie[36] = 0;
    let mut control = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    control
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    control.write_all(&cookie).expect("cookie");
    let mut state = [0u8; 1];
    control.read_exact(&mut state).expect("PARAM_EXCHANGE");
    assert_eq!(state, [9]);
    let params = br#"{"tcp":true,"time":5,"parallel":1,"len":65536,"skip_rx_copy":1}"#;
    control
        .write_all(&(params.len() as u32).to_be_bytes())
        .expect("length");
    control.write_all(params).expect("params");
    control.read_exact(&mut state).expect("CREATE_STREAMS");
    assert_eq!(state, [10]);
    let mut data = TcpStream::connect(("127.0.0.1", port)).expect("data");
    data.write_all(&cookie).expect("data cookie");
    let mut go = [0u8; 2];
    control
        .read_exact(&mut go)
        .expect("TEST_START, TEST_RUNNING");
    assert_eq!(go, [1, 2]);
    data.write_all(&vec![7u8; 4 << 20]).expect("data");
    control.write_all(&[12]).expect("CLIENT_TERMINATE");
    drop(data);
    let report = both.server.report(1);
    assert!(report.contains(" rx_copy=skipped "), "{report}");
}

/// Connections with a test's cookie beyond its streams, sent while the streams are set
/// up, are closed at once, not held until the test ends.
#[test]
fn extra_connections_with_a_tests_cookie_are_closed_at_once() {
    let both = start(&[]);
    let port = both.iperf3_port;
    let mut cookie = [b'x'; 37];
    cookie[36] = 0;
    let mut control = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    control
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    control.write_all(&cookie).expect("cookie");
    let mut state = [0u8; 1];
    control.read_exact(&mut state).expect("PARAM_EXCHANGE");
    assert_eq!(state, [9]);
    let params = br#"{"tcp":true,"time":10,"parallel":1,"len":65536}"#;
    control
        .write_all(&(params.len() as u32).to_be_bytes())
        .expect("length");
    control.write_all(params).expect("params");
    control.read_exact(&mut state).expect("CREATE_STREAMS");
    assert_eq!(state, [10]);
    // One stream, 21 connections with its cookie at once.
    let data: Vec<TcpStream> = (0..21)
        .map(|_| {
            let mut d = TcpStream::connect(("127.0.0.1", port)).expect("data");
            d.write_all(&cookie).expect("data cookie");
            d
        })
        .collect();
    let mut go = [0u8; 2];
    control
        .read_exact(&mut go)
        .expect("TEST_START, TEST_RUNNING");
    assert_eq!(go, [1, 2]);
    // Every one but the stream's is closed (after at most a refusal byte) within 3 s;
    // the stream's stays open for the test's 10 s.
    let started = Instant::now();
    let closed = data
        .into_iter()
        .filter(|d| {
            let left = Duration::from_secs(3).saturating_sub(started.elapsed());
            d.set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .expect("timeout");
            let mut d = d;
            let mut buf = [0u8; 8];
            loop {
                match d.read(&mut buf) {
                    Ok(0) => return true,
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                    Err(_) => return false,
                }
            }
        })
        .count();
    assert_eq!(closed, 20, "{}", both.server.stderr());
    control.write_all(&[12]).expect("CLIENT_TERMINATE");
}

/// Runs `fperf -c` without `--iperf3` against the iperf3 server on `port`: it stops at
/// once, saying what to add.
fn told_to_add_iperf3(port: u16) {
    let t0 = Instant::now();
    let out = run(
        &["-c", "127.0.0.1", "-p", &port.to_string(), "-m", "1"],
        Duration::from_secs(20),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("is an iperf3 server (its answer says so): add --iperf3"),
        "{err}"
    );
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

#[test]
fn each_tool_on_the_others_port_is_told_what_to_run() {
    // A server that answers as iperf3's does: one state byte (PARAM_EXCHANGE) after
    // taking the first 37 bytes for its cookie.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let fake = std::thread::spawn(move || {
        let (mut sock, _) = listener.accept().expect("accept");
        let mut cookie = [0u8; 37];
        sock.read_exact(&mut cookie).expect("cookie");
        sock.write_all(&[9]).expect("PARAM_EXCHANGE");
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let _ = sock.read_to_end(&mut Vec::new());
    });
    told_to_add_iperf3(port);
    fake.join().expect("fake server");
    // An iperf3 client's cookie on fperf's own port: the server says where they go.
    let both = start(&[]);
    let mut sock = TcpStream::connect(("127.0.0.1", both.server.port)).expect("connect");
    let mut cookie = [b'k'; 37];
    cookie[36] = 0;
    sock.write_all(&cookie).expect("cookie");
    logged(
        &both.server,
        &format!(
            "an iperf3 client came to fperf's own port: this server serves them on port {} \
             (--iperf3-port)",
            both.iperf3_port
        ),
    );
}

#[test]
#[ignore = "needs iperf3"]
fn fperf_and_iperf3_on_each_others_port_say_so() {
    let iperf3_server = Iperf3Server::start();
    told_to_add_iperf3(iperf3_server.port);
    drop(iperf3_server);
    let server = Server::start(&[]);
    let (ran, _) = iperf3(server.port, &["-t", "1"]);
    assert!(!ran);
    logged(
        &server,
        "an iperf3 client came to fperf's own port: serve them with fperf -s --iperf3-port",
    );
}

/// Seconds left on the keepalive timer of each established TCP connection with `port`
/// at one end, as `ss -o` shows it: (whether it is the server's end, seconds). A
/// connection without keepalive is left out.
fn keepalive_timers(port: u16) -> Vec<(bool, f64)> {
    let filter = format!("( sport = :{port} or dport = :{port} )");
    let table = sh(&["ss", "-tnoH", "state", "established", &filter]);
    table
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let timer = fields.get(4)?.strip_prefix("timer:(keepalive,")?;
            // "8sec", "3.492ms" (3 s 492 ms), "492ms".
            let left = timer.split(',').next()?;
            let secs = match left.strip_suffix("ms") {
                Some(ms) => match ms.split_once('.') {
                    Some((s, ms)) => s.parse::<f64>().ok()? + ms.parse::<f64>().ok()? / 1e3,
                    None => ms.parse::<f64>().ok()? / 1e3,
                },
                None => left.strip_suffix("sec")?.parse().ok()?,
            };
            let server_end = fields[2].ends_with(&format!(":{port}"));
            Some((server_end, secs))
        })
        .collect()
}

#[test]
fn cntl_ka_keeps_each_ends_control_connection_alive_on_either_port() {
    // UDP tests: the data takes no TCP connection that could carry a timer of its own.
    let both = start(&["--cntl-ka=9/2/3"]);
    for (port, kind) in [
        (both.server.port, &[][..]),
        (both.iperf3_port, &["--iperf3"]),
    ] {
        for client_ka in [Some("--cntl-ka=5/1/2"), None] {
            let port_arg = port.to_string();
            let mut args = vec!["-c", "127.0.0.1", "-p", &port_arg, "-u", "-b", "10M"];
            args.extend_from_slice(&["--time", "3"]);
            args.extend_from_slice(kind);
            args.extend(client_ka);
            let mut timers = Vec::new();
            let out = run_with(&args, Duration::from_secs(30), |_| {
                std::thread::sleep(Duration::from_millis(1500));
                timers = keepalive_timers(port);
            });
            assert!(out.status.success(), "{args:?}: {out:?}");
            // The server's 9 s, set a moment ago; the client's 5 s, or none.
            let server: Vec<f64> = timers.iter().filter(|t| t.0).map(|t| t.1).collect();
            let client: Vec<f64> = timers.iter().filter(|t| !t.0).map(|t| t.1).collect();
            assert!(
                server.len() == 1 && server[0] > 5.0 && server[0] <= 9.0,
                "{args:?}: {timers:?}"
            );
            match client_ka {
                Some(_) => assert!(
                    client.len() == 1 && client[0] > 0.0 && client[0] <= 5.0,
                    "{args:?}: {timers:?}"
                ),
                None => assert!(client.is_empty(), "{args:?}: {timers:?}"),
            }
        }
    }
    refused(
        &["-c", "127.0.0.1", "--cntl-ka=0"],
        "IDLE (seconds) is a whole number",
    );
    refused(&["-c", "127.0.0.1", "--cntl-ka=1/1/200"], "COUNT (probes)");
    refused(
        &["-c", "127.0.0.1", "--cntl-ka", "60"],
        "--cntl-ka takes its values after '=': --cntl-ka=60",
    );
}

#[test]
fn a_server_with_a_key_refuses_to_open_an_iperf3_port() {
    let dir = std::env::temp_dir().join(format!("fperf-iperf3-key-{}", std::process::id()));
    std::fs::write(&dir, "a shared secret of some length").expect("key file");
    let port = port_block(2);
    let out = run(
        &[
            "-s",
            "-p",
            &port.to_string(),
            "--iperf3-port",
            &(port + 1).to_string(),
            "--auth-key",
            dir.to_str().expect("path"),
        ],
        Duration::from_secs(10),
    );
    let _ = std::fs::remove_file(&dir);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("iperf3 clients cannot prove"), "{err}");
}

/// A running `iperf3 -s -1 -J` on a fresh port: it serves one test, prints its JSON
/// document and exits.
struct Iperf3Server {
    child: std::process::Child,
    port: u16,
    out: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Iperf3Server {
    fn start() -> Iperf3Server {
        let port = port_block(1);
        let mut child = Command::new(iperf3_program())
            .args(["-s", "-1", "-J", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("iperf3 is installed (scripts/setup.sh --tests)");
        let out = collect(child.stdout.take().expect("stdout"));
        // A connection to see whether it listens would be its one test: the kernel's
        // table of listening sockets says so instead.
        let t0 = Instant::now();
        while !listening(port) {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "iperf3 -s did not listen"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Iperf3Server { child, port, out }
    }

    /// Its JSON document, once it has served its test and exited.
    fn document(mut self) -> Value {
        finished_document(&mut self.child, &self.out, Duration::from_secs(30)).1
    }
}

/// Waits up to `within` for an iperf3 run with `-J` to exit, then for its whole JSON
/// document on `out` (the pipe's reader sees the end a little after the process).
fn finished_document(
    child: &mut std::process::Child,
    out: &std::sync::Arc<std::sync::Mutex<String>>,
    within: Duration,
) -> (std::process::ExitStatus, Value) {
    let deadline = Instant::now() + within;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("iperf3 did not finish in {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = out.lock().expect("output").clone();
        if let Ok(doc) = serde_json::from_str(&text) {
            return (status, doc);
        }
        assert!(Instant::now() < deadline, "no whole JSON document: {text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Iperf3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `fperf -c 127.0.0.1 --iperf3 -p PORT ARGS --json`: its JSON document.
fn fperf_against(port: u16, args: &[&str]) -> Value {
    fperf_document(port, &["--iperf3", "--json"], args)
}

/// `fperf -c 127.0.0.1 -p PORT OUTPUT ARGS`, bounded in time: the JSON document it
/// printed.
fn fperf_document(port: u16, output: &[&str], args: &[&str]) -> Value {
    let port = port.to_string();
    let mut all = vec!["-c", "127.0.0.1", "-p", &port];
    all.extend_from_slice(output);
    all.extend_from_slice(args);
    let out = run(&all, Duration::from_secs(60));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{all:?}: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
#[ignore = "needs iperf3"]
fn an_fperf_client_sends_to_an_iperf3_server_and_both_count_the_same_bytes() {
    let server = Iperf3Server::start();
    let doc = fperf_against(server.port, &["--time", "2", "-t", "2"]);
    let theirs = server.document();
    let received = bytes(&theirs, &["end", "sum_received", "bytes"]);
    assert!(received > 10 * MB, "{theirs}");
    assert_eq!(
        bytes(&doc, &["server", "total", "bytes_received"]),
        received
    );
    let sent = bytes(&doc, &["client", "total", "bytes_sent"]);
    assert!(received <= sent, "{received} > {sent}");
    assert_eq!(doc["client"]["streams"].as_array().map(Vec::len), Some(2));
    assert!(
        doc["client"]["total"]["send_latency"]["p50_ns"].is_u64(),
        "{doc}"
    );
}

#[test]
#[ignore = "needs iperf3"]
fn an_fperf_client_receives_from_an_iperf3_server_both_ways_and_in_reverse() {
    let server = Iperf3Server::start();
    let doc = fperf_against(server.port, &["--reverse", "-m", "16", "-t", "2"]);
    let theirs = server.document();
    let summary = bytes(&theirs, &["end", "sum_sent", "bytes"]);
    let sent = bytes(&doc, &["server", "total", "bytes_sent"]);
    assert!(agrees(summary, sent, writes(2)), "{summary} of {sent}");
    let received = bytes(&doc, &["client", "total", "bytes_received"]);
    assert!(
        received >= 32 * MB && received <= sent,
        "{received} of {sent}"
    );
    let server = Iperf3Server::start();
    let doc = fperf_against(server.port, &["--bidir", "-t", "4", "--time", "2"]);
    let theirs = server.document();
    let summary = bytes(&theirs, &["end", "sum_received", "bytes"]);
    let received = bytes(&doc, &["server", "total", "bytes_received"]);
    assert!(
        agrees(summary, received, writes(1)),
        "{summary} of {received}"
    );
    // Every byte the iperf3 server said it sent arrived.
    let told = bytes(&doc, &["server", "reverse_total", "bytes_sent"]);
    assert_eq!(
        bytes(&doc, &["client", "reverse_total", "bytes_received"]),
        told
    );
    let summary = bytes(&theirs, &["end", "sum_sent_bidir_reverse", "bytes"]);
    assert!(agrees(summary, told, writes(4)), "{summary} of {told}");
}

#[test]
#[ignore = "needs iperf3"]
fn an_fperf_client_runs_udp_against_an_iperf3_server_both_ways() {
    let server = Iperf3Server::start();
    let doc = fperf_against(
        server.port,
        &["-u", "-b", "50M", "--time", "2", "-l", "1400"],
    );
    let theirs = server.document();
    let sum = &theirs["end"]["sum"];
    let sent = bytes(&doc, &["client", "total", "datagrams", "sent"]);
    assert!(
        (8_000..=10_000).contains(&sent),
        "50 Mbit/s of 1400 B for 2 s: {sent}"
    );
    assert_eq!(bytes(sum, &["packets"]), sent, "the iperf3 server's count");
    let server_side = &doc["server"]["total"]["datagrams"];
    assert_eq!(bytes(server_side, &["lost"]), bytes(sum, &["lost_packets"]));
    assert_eq!(
        bytes(&doc, &["server", "total", "bytes_received"]),
        bytes(&theirs, &["end", "sum_received", "bytes"])
    );
    let server = Iperf3Server::start();
    let doc = fperf_against(
        server.port,
        &[
            "-u",
            "-b",
            "20M",
            "--time",
            "2",
            "-l",
            "1400",
            "--reverse",
            "-t",
            "2",
        ],
    );
    let theirs = server.document();
    let received = bytes(&doc, &["client", "total", "datagrams", "received"]);
    let sent = bytes(&theirs, &["end", "sum", "packets"]);
    assert_eq!(bytes(&doc, &["server", "total", "datagrams", "sent"]), sent);
    let lost = bytes(&doc, &["client", "total", "datagrams", "lost"]);
    assert_eq!(
        received + lost,
        sent,
        "every datagram the server sent was received or counted lost"
    );

    assert_eq!(doc["interrupted"], false, "{doc}");
}

#[test]
#[ignore = "needs iperf3"]
fn udp_both_ways_between_fperf_and_iperf3_counts_every_datagram_at_both_ends() {
    // An iperf3 client against fperf's server.
    let both = start(&[]);
    let (ok, doc) = iperf3(
        both.iperf3_port,
        &[
            "-u", "--bidir", "-P", "2", "-b", "20M", "-t", "2", "-l", "1200",
        ],
    );
    assert!(ok, "{doc}");
    let report = both.server.report(1);
    assert!(report.contains("bidir"), "{report}");
    let end = &doc["end"];
    // The client's sending half: what fperf received, or counted lost.
    let sent = bytes(end, &["sum_sent", "packets"]);
    let lost = bytes(end, &["sum_received", "lost_packets"]);
    assert_eq!(datagrams(&report, "received=") + lost, sent, "{report}");
    // The server's sending half: what fperf sent, as the client counted it.
    let back = &end["sum_received_bidir_reverse"];
    let fperf_sent = report
        .lines()
        .filter(|l| l.starts_with("datagrams") && !l.contains("received="))
        .find_map(|l| l.split("sent=").nth(1)?.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no sending datagrams line in {report}"));
    let counted = bytes(back, &["packets"]);
    assert!(agrees(counted, fperf_sent, fperf_sent / 100), "{doc}");
    assert!(fperf_sent > 1_000, "{report}");

    // fperf's client against iperf3's server.
    let server = Iperf3Server::start();
    let doc = fperf_against(
        server.port,
        &[
            "-u", "--bidir", "-t", "2", "-b", "20M", "--time", "2", "-l", "1200",
        ],
    );
    let theirs = server.document();
    let sent = bytes(&doc, &["client", "total", "datagrams", "sent"]);
    let counted = bytes(&theirs, &["end", "sum_received", "packets"]);
    assert!(agrees(counted, sent, sent / 100), "{counted} of {sent}");
    let got = &doc["client"]["reverse_total"]["datagrams"];
    let theirs_sent = bytes(&doc, &["server", "reverse_total", "datagrams", "sent"]);
    assert!(theirs_sent > 1_000, "{doc}");
    assert_eq!(
        bytes(got, &["received"]) - bytes(got, &["duplicates"]) + bytes(got, &["lost"]),
        theirs_sent,
        "{doc}"
    );
}

#[test]
#[ignore = "needs iperf3"]
fn an_iperf3_clients_tos_marks_the_servers_data_sockets_too() {
    let both = start(&[]);
    let (ok, doc) = iperf3(both.iperf3_port, &["-S", "0x10", "-t", "1"]);
    assert!(ok, "{doc}");
    let report = both.server.report(1);
    assert!(report.contains(" tos=0x10"), "{report}");
}

#[test]
#[ignore = "needs iperf3"]
fn an_iperf3_clients_mss_and_dont_fragment_are_served() {
    let both = start(&[]);
    let (ok, doc) = iperf3(both.iperf3_port, &["-M", "1000", "-t", "1"]);
    assert!(ok, "{doc}");
    let report = both.server.report(1);
    assert!(report.contains(" mss=1000 "), "{report}");
    // The client's handshake announced it: the server's segments keep to it too.
    assert!((900..=1000).contains(&tcp_info_mss(&report)), "{report}");
    let (ok, doc) = iperf3(
        both.iperf3_port,
        &[
            "-u",
            "--dont-fragment",
            "-l",
            "1400",
            "-b",
            "10M",
            "-t",
            "1",
            "-R",
        ],
    );
    assert!(ok, "{doc}");
    let report = both.server.report(2);
    assert!(report.contains(" dont_fragment"), "{report}");
    assert!(bytes(&doc, &["end", "sum", "bytes"]) > 1_000_000, "{doc}");
}

#[test]
#[ignore = "needs iperf3"]
fn an_fperf_client_asks_an_iperf3_server_for_its_mss() {
    let server = Iperf3Server::start();
    let doc = fperf_against(server.port, &["-M", "1000", "--time", "1"]);
    let theirs = server.document();
    assert_eq!(theirs["start"]["tcp_mss"], 1000, "{theirs}");
    let mss = bytes(&doc, &["client", "total", "tcp", "mss"]);
    assert!((900..=1000).contains(&mss), "{doc}");
}

#[test]
#[ignore = "needs iperf3"]
fn an_iperf3_clients_fq_rate_and_flow_label_are_served() {
    let both = start(&[]);
    let rate = 80e6;
    for (i, way) in [&[][..], &["-R"][..]].into_iter().enumerate() {
        let mut args = vec!["-t", "1", "-P", "2", "--fq-rate", "80M"];
        args.extend_from_slice(way);
        let (ok, doc) = iperf3(both.iperf3_port, &args);
        assert!(ok, "{doc}");
        let got = at(&doc, &["end", "sum_received", "bits_per_second"])
            .as_f64()
            .expect("a rate");
        assert!(
            (1.6 * rate..=2.3 * rate).contains(&got),
            "{way:?}: two streams at 80M each, not {got}"
        );
        let report = both.server.report(i + 1);
        assert!(report.contains(" fq_rate=80.0Mbit/s"), "{report}");
    }
    // -L: the client labels its own packets, and the server serves the test.
    let (ok, doc) = iperf3_to("::1", both.iperf3_port, &["-t", "1", "-L", "12345"]);
    assert!(ok, "{doc}");
    // iperf3's own server would run it unpaced.
    let (ok, doc) = iperf3(both.iperf3_port, &["-u", "-t", "1", "--fq-rate", "80M"]);
    assert!(!ok);
    let error = doc["error"].as_str().unwrap_or_default();
    assert!(error.contains("parameter"), "{doc}");
    logged(
        &both.server,
        "--fq-rate paces TCP connections; for UDP use -b",
    );
}

#[test]
#[ignore = "needs iperf3"]
fn an_fperf_clients_fq_rate_paces_an_iperf3_servers_sockets_too() {
    let rate = 80e6;
    for way in [&[][..], &["--reverse"][..]] {
        let server = Iperf3Server::start();
        let mut args = vec!["--time", "1", "--fq-rate", "80M"];
        args.extend_from_slice(way);
        let doc = fperf_against(server.port, &args);
        // With --reverse the iperf3 server sends: it paces because it was asked to.
        // Before 3.17 an iperf3 server paced only as a client.
        let receiver = if way.is_empty() { "server" } else { "client" };
        let got = doc[receiver]["total"]["received_bits_per_second"]
            .as_f64()
            .expect("a rate");
        if way.is_empty() || iperf3_minor() >= 17 {
            assert!((0.8 * rate..=1.15 * rate).contains(&got), "{way:?}: {got}");
        }
    }
}

#[test]
#[ignore = "needs iperf3"]
fn an_fperf_client_sends_from_its_cport_to_an_iperf3_server() {
    for protocol in [None, Some("-u")] {
        let server = Iperf3Server::start();
        let first = port_block(2);
        let cport = first.to_string();
        let mut args = vec![
            "-t",
            "2",
            "--time",
            "1",
            "--cport",
            &cport,
            "--bind-dev",
            "lo",
        ];
        args.extend(protocol);
        let doc = fperf_against(server.port, &args);
        let theirs = server.document();
        let seen: Vec<u64> = (theirs["start"]["connected"].as_array().into_iter())
            .flatten()
            .filter_map(|c| c["remote_port"].as_u64())
            .collect();
        let want = [u64::from(first), u64::from(first) + 1];
        assert_eq!(seen, want, "{protocol:?}: {theirs}");
        for (i, port) in want.iter().enumerate() {
            let local = doc["client"]["streams"][i]["local"].as_str().unwrap_or("");
            assert_eq!(local, format!("127.0.0.1:{port}"), "{protocol:?}");
        }
    }
}

#[test]
fn what_an_iperf3_server_cannot_run_is_refused_before_connecting() {
    // Nothing listens on the port: a refusal must come before any connection.
    let port = port_block(1).to_string();
    for (args, want) in [
        (vec!["-r"], "-r and --echo"),
        (vec!["--crr"], "--crr"),
        (vec!["-u", "--udp-batch", "8"], "--udp-batch"),
        (vec!["-n", "2"], "-n above 1"),
        (vec!["--server-cpu", "0"], "--server-cpu"),
        (vec!["--rcvlowat", "65536"], "--rcvlowat"),
        (vec!["--skip-rx-copy"], "--skip-rx-copy"),
    ] {
        let mut all = vec!["-c", "127.0.0.1", "--iperf3", "-p", &port];
        all.extend_from_slice(&args);
        let out = run(&all, Duration::from_secs(10));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            err.contains(want) && !err.contains("cannot connect"),
            "{args:?}: {err}"
        );
    }
}

/// Every leaf's path in `doc` (array elements as `[]`) with its JSON type (`number`
/// for integers and fractions alike, as JSON has them).
fn key_paths(doc: &Value) -> std::collections::BTreeSet<(String, &'static str)> {
    fn walk(v: &Value, at: String, out: &mut std::collections::BTreeSet<(String, &'static str)>) {
        let leaf = match v {
            Value::Object(map) => {
                for (k, v) in map {
                    walk(v, format!("{at}/{k}"), out);
                }
                return;
            }
            Value::Array(items) => {
                for v in items {
                    walk(v, format!("{at}/[]"), out);
                }
                return;
            }
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
        };
        out.insert((at, leaf));
    }
    let mut out = std::collections::BTreeSet::new();
    walk(doc, String::new(), &mut out);
    out
}

/// `fperf -c 127.0.0.1 -p PORT --json=iperf3 ARGS`: its document.
fn iperf3_layout(port: u16, args: &[&str]) -> Value {
    fperf_document(port, &["--json=iperf3"], args)
}

#[test]
#[ignore = "needs iperf3"]
fn the_iperf3_layout_has_every_key_path_of_iperf3s_own_document_with_its_type() {
    // (iperf3's flags, fperf's flags) for the same test: 2 streams each way.
    let cases: [(&[&str], &[&str]); 6] = [
        (&["-P", "2"], &["-t", "2"]),
        (&["-P", "2", "-R"], &["-t", "2", "--reverse"]),
        (&["-P", "2", "--bidir"], &["-t", "2", "--bidir"]),
        (
            &["-P", "2", "-u", "-b", "50M"],
            &["-t", "2", "-u", "-b", "50M"],
        ),
        (
            &["-P", "2", "-u", "-b", "50M", "-R"],
            &["-t", "2", "-u", "-b", "50M", "--reverse"],
        ),
        (
            &["-P", "2", "-u", "-b", "50M", "--bidir"],
            &["-t", "2", "-u", "-b", "50M", "--bidir"],
        ),
    ];
    let fperf_server = Server::start(&[]);
    for (theirs, ours) in cases {
        let reference = {
            let server = Iperf3Server::start();
            let mut args = vec!["-t", "1"];
            args.extend_from_slice(theirs);
            let (ok, doc) = iperf3(server.port, &args);
            assert!(ok, "{theirs:?}: {doc}");
            doc
        };
        let mut args = vec!["--time", "1"];
        args.extend_from_slice(ours);
        // Against an fperf server, and (with --iperf3) against iperf3's own.
        let native = iperf3_layout(fperf_server.port, &args);
        let iperf3_server = Iperf3Server::start();
        let mut against = args.clone();
        against.push("--iperf3");
        let interop = iperf3_layout(iperf3_server.port, &against);
        let served = iperf3_server.document();
        let want = key_paths(&reference);
        for (name, doc) in [("fperf -s", &native), ("iperf3 -s", &interop)] {
            let mut iperf3_part = doc.clone();
            let fperf_part = iperf3_part
                .as_object_mut()
                .and_then(|o| o.remove("fperf"))
                .unwrap_or_else(|| panic!("no fperf key: {doc}"));
            let have = key_paths(&iperf3_part);
            let missing: Vec<_> = want.difference(&have).collect();
            assert!(
                missing.is_empty(),
                "{ours:?} against {name}: missing {missing:?}\n{doc}"
            );
            // The figures are fperf's own, in iperf3's places.
            let received = if ours.contains(&"--reverse") {
                ["client", "total", "bytes_received"]
            } else {
                ["server", "total", "bytes_received"]
            };
            assert_eq!(
                bytes(doc, &["end", "sum_received", "bytes"]),
                bytes(&fperf_part, &received),
                "{ours:?} against {name}"
            );
            assert!(!doc["intervals"].as_array().expect("intervals").is_empty());
        }
        // Against iperf3's server, its count and fperf's document agree.
        let (ours_received, theirs_received) = if ours.contains(&"--reverse") {
            (
                bytes(&interop, &["end", "sum_sent", "bytes"]),
                bytes(&served, &["end", "sum_sent", "bytes"]),
            )
        } else {
            (
                bytes(&interop, &["end", "sum_received", "bytes"]),
                bytes(&served, &["end", "sum_received", "bytes"]),
            )
        };
        assert!(
            agrees(theirs_received, ours_received, writes(4)),
            "{ours:?}: {ours_received} against {served}"
        );
    }
}

/// `doc[path]` as a float.
fn float(doc: &Value, path: &[&str]) -> f64 {
    at(doc, path)
        .as_f64()
        .unwrap_or_else(|| panic!("no number at {path:?} in {doc}"))
}

#[test]
#[ignore = "needs iperf3"]
fn an_iperf3_clients_warm_up_stays_out_of_the_udp_counts_and_rates_span_the_test() {
    // One 32000-byte datagram every 4/3 s (at 0, 1.33 and 2.67 s), after a warm-up of
    // one second (-O 1): a few datagrams, so a rate over their first-to-last span, or a
    // count that keeps the warm-up in, would be far off. None falls near the end of the
    // warm-up or of the test, where either end's clock could put it on either side.
    let both = start(&[]);
    for reverse in [false, true] {
        let mut args = vec!["-u", "-b", "192k", "-l", "32000", "-t", "2", "-O", "1"];
        if reverse {
            args.push("-R");
        }
        let (ok, doc) = iperf3(both.iperf3_port, &args);
        assert!(ok, "{doc}");
        let (sum, sent, got) = (
            &doc["end"]["sum"],
            &doc["end"]["sum_sent"],
            &doc["end"]["sum_received"],
        );
        assert_eq!(bytes(sum, &["lost_packets"]), 0, "reverse {reverse}: {sum}");
        assert_eq!(bytes(got, &["packets"]), 2, "reverse {reverse}: {got}");
        assert_eq!(bytes(sent, &["packets"]), 2, "reverse {reverse}: {sent}");
        // The receiving end's time is the test's, as iperf3's own: its rate is the
        // datagrams over 2 s (256 kbit/s), not over the 1.33 s between them.
        let seconds = float(got, &["seconds"]);
        assert!((1.9..=2.3).contains(&seconds), "reverse {reverse}: {got}");
        let bits = float(got, &["bits_per_second"]);
        assert!(
            (220_000.0..=270_000.0).contains(&bits),
            "reverse {reverse}: {got}"
        );
    }
}

#[test]
#[ignore = "needs iperf3"]
fn an_fperf_clients_warm_up_stays_out_of_an_iperf3_servers_udp_counts() {
    for reverse in [false, true] {
        let server = Iperf3Server::start();
        let mut args = vec![
            "-u", "-b", "20M", "-l", "1400", "--time", "3", "--omit", "1",
        ];
        if reverse {
            args.push("--reverse");
        }
        let doc = fperf_against(server.port, &args);
        let _ = server.document();
        let (client, peer) = (
            &doc["client"]["total"]["datagrams"],
            &doc["server"]["total"]["datagrams"],
        );
        // 20 Mbit/s of 1400 B for the 2 s after the warm-up: about 3570 datagrams.
        let (sent, received) = if reverse {
            (bytes(peer, &["sent"]), bytes(client, &["received"]))
        } else {
            (bytes(client, &["sent"]), bytes(peer, &["peer_sent"]))
        };
        assert!((3_000..=4_200).contains(&sent), "reverse {reverse}: {doc}");
        assert!(
            sent.abs_diff(received) <= 50,
            "reverse {reverse}: the warm-up's datagrams are counted on neither end: {doc}"
        );
        if !reverse {
            assert_eq!(bytes(peer, &["lost"]), 0, "{doc}");
        }
    }
}

/// An iperf3 client spoken by hand: connects to the iperf3 `port`, sends `cookie` and
/// `params`, and returns the control connection after the state byte that answered.
/// While the server is still ending the test before (`ACCESS_DENIED`, busy), it tries
/// again, for up to 10 s, as one at a time is all an iperf3 server runs.
fn raw_params(port: u16, cookie: &[u8; 37], params: &[u8]) -> (TcpStream, u8) {
    const ACCESS_DENIED: u8 = 255;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (mut control, mut state) = loop {
        let mut control = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        control
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        control.write_all(cookie).expect("cookie");
        let mut state = [0u8; 1];
        control.read_exact(&mut state).expect("PARAM_EXCHANGE");
        if state[0] != ACCESS_DENIED || std::time::Instant::now() > deadline {
            break (control, state);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(state, [9]);
    control
        .write_all(&(params.len() as u32).to_be_bytes())
        .expect("length");
    control.write_all(params).expect("params");
    control.read_exact(&mut state).expect("an answer");
    (control, state[0])
}

#[test]
fn a_bad_value_with_wide_characters_is_refused_and_the_server_goes_on() {
    let both = start(&[]);
    // The value's JSON text has a multi-byte character across the 64th byte, where
    // an error message was once cut.
    for (i, pad) in (0..4).enumerate() {
        let value = format!("{}{}", "a".repeat(60 + pad), "\u{e9}\u{1f600}".repeat(20));
        let params = serde_json::json!({"tcp": true, "time": value}).to_string();
        let mut cookie = [b'a' + i as u8; 37];
        cookie[36] = 0;
        let (mut control, state) = raw_params(both.iperf3_port, &cookie, params.as_bytes());
        assert_eq!(state, 0xfe, "SERVER_ERROR");
        let mut code = [0u8; 8];
        control.read_exact(&mut code).expect("error code and errno");
        assert_eq!(
            i32::from_be_bytes([code[0], code[1], code[2], code[3]]),
            114
        );
    }
    logged(&both.server, "parameter time must be a whole number");
    // Still serving.
    let mut cookie = [b'z'; 37];
    cookie[36] = 0;
    let (_, state) = raw_params(both.iperf3_port, &cookie, br#"{"tcp":true,"time":1}"#);
    assert_eq!(state, 10, "CREATE_STREAMS");
}

#[test]
fn an_iperf3_clients_version_cannot_add_lines_or_escapes_to_the_report() {
    let both = start(&[]);
    let port = both.iperf3_port;
    let mut cookie = [b'v'; 37];
    cookie[36] = 0;
    let params = serde_json::json!({"tcp": true, "time": 5,
        "client_version": "3.1\n\u{1b}[2J[SUM] forged"})
    .to_string();
    let (mut control, state) = raw_params(port, &cookie, params.as_bytes());
    assert_eq!(state, 10, "CREATE_STREAMS");
    let mut data = TcpStream::connect(("127.0.0.1", port)).expect("data");
    data.write_all(&cookie).expect("data cookie");
    let mut go = [0u8; 2];
    control
        .read_exact(&mut go)
        .expect("TEST_START, TEST_RUNNING");
    assert_eq!(go, [1, 2]);
    data.write_all(&vec![7u8; 1 << 20]).expect("data");
    control.write_all(&[12]).expect("CLIENT_TERMINATE");
    drop(data);
    let report = both.server.report(1);
    assert!(
        report.contains("(iperf3 3.1\\n\\u{1b}[2J[SUM] forged client)"),
        "{report}"
    );
    let out = both.server.stdout() + &both.server.stderr();
    assert!(!out.contains('\x1b'), "{out}");
    assert!(!out.contains("\n[SUM] forged"), "{out}");
}
