//! `--crr` (connect-request-response) end to end: real `fperf -s` / `fperf -c`
//! processes on loopback, a TCP connection per packet.

mod common;
use common::*;
use std::process::Command;
use std::time::Duration;

const MB: u64 = 1 << 20;

/// The server's TIME_WAIT sockets on `port`: one per connection it closed first.
fn time_wait_on(port: u16) -> usize {
    let out = Command::new("ss")
        .args([
            "-tan",
            "state",
            "time-wait",
            "sport",
            "=",
            &format!(":{port}"),
        ])
        .output()
        .expect("ss (iproute2) runs");
    assert!(out.status.success(), "{out:?}");
    // One header line, then a line per socket.
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .count()
        .saturating_sub(1)
}

/// `tps : N/s (COUNT transactions in SECSs)`: (N, COUNT).
fn tps_line(text: &str) -> (u64, u64) {
    let re = regex::Regex::new(r"(?m)^tps\s+: (\d+)/s \((\d+) transactions in [\d.]+s\)$")
        .expect("regex");
    let c = re
        .captures(text)
        .unwrap_or_else(|| panic!("no tps line:\n{text}"));
    (
        c[1].parse().expect("a number"),
        c[2].parse().expect("a number"),
    )
}

#[test]
fn every_packet_is_a_connection_the_server_closes_first() {
    let server = Server::start(&[]);
    // 1 MB in 1000-byte packets: 1048 whole ones and a short one.
    let client = client_ok(&server, "127.0.0.1", &["--crr", "-m", "1", "-l", "1000"]);
    let report = server.report(1);
    let packets = MB.div_ceil(1000);
    assert_bytes(&client, &report, MB);
    assert_one_ack_byte_per_packet(&client, &report, packets);
    assert!(client.contains("workload=crr"), "{client}");
    assert_eq!(tps_line(&client).1, packets);
    let (avg, min, max) = latency(&client, "mprtt");
    assert!(min > 0.0 && avg <= max);
    // Each packet's connection (and the last, which ends the stream) was closed by
    // the server on stream 0's port, base + 1; TIME_WAIT outlives the test by a minute.
    let closed = time_wait_on(server.port + 1);
    assert!(
        closed > packets as usize,
        "{closed} connections closed for {packets} packets"
    );
    assert_eq!(server.stderr(), "", "the server logged a client error");
}

#[test]
fn streams_run_side_by_side_for_a_time_with_intervals() {
    let server = Server::start(&[]);
    let client = client_ok(
        &server,
        "127.0.0.1",
        &["--crr", "-t", "2", "-l", "64", "--time", "1", "-i", "0.5"],
    );
    let report = server.report(1);
    let sent = volume(&client, "sent").bytes;
    assert!(sent > 0 && sent % 64 == 0, "{client}");
    assert_eq!(volume(&report, "received").bytes, sent);
    let (_, transactions) = tps_line(&client);
    assert_eq!(transactions * 64, sent);
    for port in [server.port + 1, server.port + 2] {
        assert!(
            client.contains(&format!("=> 127.0.0.1:{port} ")),
            "{client}"
        );
    }
    let intervals = client
        .lines()
        .filter(|l| l.starts_with('[') && !l.contains("] stream "))
        .count();
    assert_eq!(intervals, 2, "{client}");
}

#[test]
fn ctrl_c_ends_the_test_at_once_on_both_ends() {
    let server = Server::start(&[]);
    // The client's last connection tells the server the stream ended: neither end
    // waits for the server's --idle-timeout (10 s).
    let text = interrupted_client(
        &server,
        &["--crr", "--time", "60"],
        Duration::from_millis(1000),
        Duration::from_secs(8),
    );
    assert!(text.contains("interrupted"), "{text}");
    let sent = volume(&text, "sent").bytes;
    assert!(sent > 0, "{text}");
    assert_eq!(volume(&server.report(1), "received").bytes, sent);
}
