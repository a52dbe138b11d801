//! `--reverse` end to end: real `fperf -s` / `fperf -c` processes on loopback, the server
//! sending and the client receiving.

mod common;
use common::*;
use serde_json::Value;
use std::time::Duration;

const MB: u64 = 1 << 20;

fn u(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("not an unsigned integer: {v}"))
}

#[test]
fn the_server_sends_and_each_end_reports_its_own_side() {
    let server = Server::start(&[]);
    let client = client_ok(&server, "127.0.0.1", &["--reverse", "-m", "8"]);
    let report = server.report(1);
    assert!(client.contains("reverse (the server sends)"), "{client}");
    assert!(report.contains("reverse (the server sends)"), "{report}");
    // Swapped roles: the client's report is the receiving end's.
    assert_eq!(volume(&client, "received").bytes, 8 * MB);
    assert_eq!(volume(&report, "sent").bytes, 8 * MB);
    assert_eq!(peer_bytes(&client, "sent"), 8 * MB, "what the server saw");
    assert!(!has_line(&client, "sent"), "{client}");
    latency(&client, "latency");
    latency(&report, "latency");
    assert_eq!(server.stderr(), "", "the server logged a client error");
}

#[test]
fn json_of_a_reverse_run_counts_each_ends_bytes_and_time() {
    let server = Server::start(&[]);
    let out = client_ok(
        &server,
        "127.0.0.1",
        &["--reverse", "-t", "2", "-m", "4", "-l", "128K", "--json"],
    );
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}:\n{out}"));
    assert_eq!(doc["settings"]["reverse"], true);
    let (c, s) = (&doc["client"], &doc["server"]);
    assert_eq!(u(&c["total"]["bytes_received"]), 8 * MB);
    assert_eq!(u(&c["total"]["bytes_sent"]), 0);
    assert_eq!(u(&s["total"]["bytes_sent"]), 8 * MB);
    assert_eq!(u(&s["total"]["bytes_received"]), 0);
    for side in [c, s] {
        let streams = side["streams"].as_array().expect("streams");
        assert_eq!(streams.len(), 2);
        assert!(u(&side["total"]["duration_ns"]) > 0);
    }
    for st in c["streams"].as_array().expect("streams") {
        assert_eq!(u(&st["figures"]["bytes_received"]), 4 * MB);
        assert!(st["figures"]["recv_latency"]["count"].as_u64() > Some(0));
    }
    // The sender's time runs until the receiver has everything: never shorter than
    // the receiver's first byte to last.
    assert!(u(&s["total"]["duration_ns"]) >= u(&c["total"]["duration_ns"]) / 2);
}

#[test]
fn a_timed_reverse_run_reports_intervals_on_both_ends() {
    let server = Server::start(&[]);
    let client = client_ok(
        &server,
        "127.0.0.1",
        &["--reverse", "--time", "1", "-i", "0.5", "-b", "200M"],
    );
    let report = server.report(1);
    let client_intervals: Vec<&str> = client
        .lines()
        .filter(|l| l.starts_with('[') && !l.contains("] stream "))
        .collect();
    let server_intervals: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with('[') && !l.contains("] stream "))
        .collect();
    assert_eq!(client_intervals.len(), 2, "{client}");
    assert_eq!(server_intervals.len(), 2, "{report}");
    assert!(client_intervals.iter().all(|l| l.contains("] received: ")));
    assert!(server_intervals.iter().all(|l| l.contains("] sent: ")));
    // Paced by the server's sender at 200 Mbit/s for 1 s: whole packets, about 25 MB.
    let got = volume(&client, "received").bytes;
    assert_eq!(got, volume(&report, "sent").bytes);
    assert_eq!(got % 32768, 0);
    assert!((15 * MB..35 * MB).contains(&got), "{got}");
}

#[test]
fn the_servers_limits_hold_its_own_sending() {
    // --max-rate paces what the server sends as it paces what it reads.
    let server = Server::start(&["--max-rate", "80M"]);
    let out = client_ok(&server, "127.0.0.1", &["--reverse", "-m", "5", "--json"]);
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}:\n{out}"));
    let secs = u(&doc["server"]["total"]["duration_ns"]) as f64 / 1e9;
    let rate = 5.0 * MB as f64 * 8.0 / secs;
    assert!(rate < 100e6, "{rate} bit/s past an 80 Mbit/s cap");
    // --max-mb refuses a larger test before anything is sent.
    let capped = Server::start(&["--max-mb", "4"]);
    let out = client_run(&capped, "127.0.0.1", &["--reverse", "-m", "8"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("max-mb"),
        "{out:?}"
    );
}

#[test]
fn ctrl_c_on_the_receiving_client_ends_both_reports() {
    let server = Server::start(&[]);
    let text = interrupted_client(
        &server,
        &["--reverse", "--time", "60"],
        Duration::from_millis(1000),
        Duration::from_secs(20),
    );
    assert!(text.contains("what was received before Ctrl-C"), "{text}");
    let received = volume(&text, "received").bytes;
    let report = server.report(1);
    // What was still in flight when the client stopped reading was sent, not received.
    assert!(
        received > 0 && received <= volume(&report, "sent").bytes,
        "{text}\n{report}"
    );
}

#[test]
fn a_reverse_sweep_rows_the_clients_receiving() {
    let server = Server::start(&[]);
    let out = client_ok(&server, "127.0.0.1", &["--reverse", "--sweep", "mb=1,2"]);
    let rows: Vec<Vec<f64>> = out
        .lines()
        .skip(1)
        .map(|l| {
            l.split_whitespace()
                .map(|c| c.parse().expect("a number"))
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    for (row, mb) in rows.iter().zip([1.0, 2.0]) {
        assert_eq!(row[0], mb);
        assert!(row[1] > 0.0, "bandwidth received: {out}");
        // Reads of up to 128 KiB: at least one per 128 KiB received.
        assert!(row[8] >= mb * 8.0, "reads timed: {out}");
    }
}

#[test]
fn a_reverse_udp_run_counts_the_clients_datagrams_and_loss() {
    let server = Server::start(&[]);
    // Paced, so loopback loses nothing: every datagram the server sent arrives.
    let out = client_ok(
        &server,
        "127.0.0.1",
        &[
            "-u",
            "--reverse",
            "-t",
            "2",
            "-m",
            "4",
            "-l",
            "1024",
            "-b",
            "400M",
            "--json",
        ],
    );
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}:\n{out}"));
    let (c, s) = (&doc["client"]["total"], &doc["server"]["total"]);
    let datagrams = 2 * 4 * 1024;
    assert_eq!(u(&s["bytes_sent"]), 8 * MB);
    assert_eq!(u(&s["datagrams"]["sent"]), datagrams);
    assert_eq!(u(&c["bytes_received"]), 8 * MB);
    assert_eq!(u(&c["bytes_sent"]), 0);
    let d = &c["datagrams"];
    assert_eq!(
        u(&d["peer_sent"]),
        datagrams,
        "the server's count reached the client"
    );
    assert_eq!(u(&d["received"]), datagrams);
    assert_eq!(u(&d["lost"]), 0);
    assert!(d["jitter_ns"].as_f64().is_some(), "{d}");
    // The client's sockets have the buffers fperf asks for.
    assert!(u(&d["rcvbuf"]["granted"]) > 1 << 20, "{d}");
    assert!(u(&s["duration_ns"]) > 0 && u(&c["duration_ns"]) > 0);
}

#[test]
fn a_reverse_udp_run_at_full_speed_reports_its_loss_on_the_client() {
    let server = Server::start(&[]);
    let client = client_ok(
        &server,
        "127.0.0.1",
        &["-u", "--reverse", "-l", "1472", "--time", "1"],
    );
    let report = server.report(1);
    assert!(client.contains("reverse (the server sends)"), "{client}");
    let line = client
        .lines()
        .find(|l| l.starts_with("datagrams"))
        .unwrap_or_else(|| panic!("no datagrams line:\n{client}"));
    let count = |key: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {line}"))
    };
    let (sent, received, lost) = (count("sent="), count("received="), count("lost="));
    // Every datagram the server sent either arrived or is counted lost.
    assert_eq!(
        sent * 1472,
        volume(&report, "sent").bytes,
        "{client}\n{report}"
    );
    assert_eq!(
        received * 1472,
        volume(&client, "received").bytes,
        "{client}"
    );
    assert_eq!(received - count("duplicated=") + lost, sent, "{line}");
    assert!(received > 0, "{line}");
}

#[test]
fn ctrl_c_on_a_receiving_udp_client_ends_both_reports() {
    let server = Server::start(&[]);
    let text = interrupted_client(
        &server,
        &["-u", "--reverse", "-l", "1472", "--time", "60"],
        Duration::from_millis(1000),
        Duration::from_secs(20),
    );
    assert!(text.contains("what was received before Ctrl-C"), "{text}");
    // The server's count of what it sent never reached the client: no loss is claimed.
    assert!(text.contains("sent=unknown"), "{text}");
    let received = volume(&text, "received").bytes;
    let report = server.report(1);
    // Its closed port ended the server's sending; the server still reports it.
    assert!(
        received > 0 && received <= volume(&report, "sent").bytes,
        "{text}\n{report}"
    );
}
