//! `--bidir` end to end: real `fperf -s` / `fperf -c` processes on loopback, bulk both
//! ways at once on streams of their own.

mod common;
use common::*;
use serde_json::Value;
use std::time::Duration;

const MB: u64 = 1 << 20;

fn u(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("not an unsigned integer: {v}"))
}

fn secs(figures: &Value) -> f64 {
    u(&figures["duration_ns"]) as f64 / 1e9
}

#[test]
fn each_end_reports_what_it_sent_and_what_it_received() {
    let server = Server::start(&[]);
    let client = client_ok(&server, "127.0.0.1", &["--bidir", "-m", "8"]);
    let report = server.report(1);
    let label = "bidir (the client sends on stream 0, the server on stream 1)";
    assert!(client.contains(label), "{client}");
    assert!(report.contains(label), "{report}");
    assert!(
        client.contains("TCP STREAM 0 ") && client.contains(" => "),
        "{client}"
    );
    assert!(
        client.contains("TCP STREAM 1 ") && client.contains(" <= "),
        "{client}"
    );
    for text in [&client, &report] {
        assert_eq!(volume(text, "sent").bytes, 8 * MB, "{text}");
        assert_eq!(volume(text, "received").bytes, 8 * MB, "{text}");
    }
    // What the server saw, both ways, on the client's terminal too.
    assert_eq!(peer_bytes(&client, "received"), 8 * MB);
    assert_eq!(peer_bytes(&client, "sent"), 8 * MB);
    assert_eq!(server.stderr(), "", "the server logged a client error");
}

#[test]
fn json_counts_each_direction_and_each_stream() {
    let server = Server::start(&[]);
    let out = client_ok(
        &server,
        "127.0.0.1",
        &["--bidir", "-t", "2", "-m", "4", "-l", "128K", "--json"],
    );
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}:\n{out}"));
    assert_eq!(doc["settings"]["bidir"], true);
    assert_eq!(u(&doc["settings"]["nstreams"]), 4, "-t counts each way");
    let (c, s) = (&doc["client"], &doc["server"]);
    // `total`: the client's data streams; `reverse_total`: the server's.
    assert_eq!(u(&c["total"]["bytes_sent"]), 8 * MB);
    assert_eq!(u(&c["total"]["bytes_received"]), 0);
    assert_eq!(u(&c["reverse_total"]["bytes_received"]), 8 * MB);
    assert_eq!(u(&c["reverse_total"]["bytes_sent"]), 0);
    assert_eq!(u(&s["total"]["bytes_received"]), 8 * MB);
    assert_eq!(u(&s["reverse_total"]["bytes_sent"]), 8 * MB);
    assert!(c["total"]["send_latency"]["count"].as_u64() >= Some(64));
    assert!(c["reverse_total"]["recv_latency"]["count"].as_u64() > Some(0));
    for side in [c, s] {
        let streams = side["streams"].as_array().expect("streams");
        assert_eq!(streams.len(), 4);
        for st in streams {
            let f = &st["figures"];
            let client_data = u(&st["index"]) < 2;
            let (sent, received) = (u(&f["bytes_sent"]), u(&f["bytes_received"]));
            let client_sent = if side["role"] == "client" {
                sent
            } else {
                received
            };
            let server_sent = if side["role"] == "client" {
                received
            } else {
                sent
            };
            if client_data {
                assert_eq!((client_sent, server_sent), (4 * MB, 0), "{st}");
            } else {
                assert_eq!((client_sent, server_sent), (0, 4 * MB), "{st}");
            }
        }
        assert!(secs(&side["total"]) > 0.0 && secs(&side["reverse_total"]) > 0.0);
    }
}

#[test]
fn udp_runs_both_ways_and_each_receiver_accounts_for_every_datagram() {
    let server = Server::start(&[]);
    let out = client_ok(
        &server,
        "127.0.0.1",
        &[
            "-u", "--bidir", "-t", "2", "-m", "4", "-l", "8K", "-b", "200M", "--json",
        ],
    );
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}:\n{out}"));
    let (c, s) = (&doc["client"], &doc["server"]);
    let datagrams = 2 * 4 * MB / (8 << 10);
    // Each direction: every datagram its sender sent is received or counted lost.
    for (sender, receiver, total) in [(c, s, "total"), (s, c, "reverse_total")] {
        let sent = &sender[total]["datagrams"];
        let got = &receiver[total]["datagrams"];
        assert_eq!(u(&sent["sent"]), datagrams, "{doc}");
        assert_eq!(u(&sender[total]["bytes_sent"]), 8 * MB, "{doc}");
        assert_eq!(u(&got["peer_sent"]), datagrams, "{doc}");
        assert_eq!(
            u(&got["received"]) - u(&got["duplicates"]) + u(&got["lost"]),
            datagrams,
            "{doc}"
        );
        assert!(u(&got["received"]) > datagrams / 2, "{doc}");
    }
}

#[test]
fn a_timed_run_has_interval_lines_for_both_directions() {
    let server = Server::start(&[]);
    let client = client_ok(
        &server,
        "127.0.0.1",
        &["--bidir", "--time", "1", "-i", "0.5", "-b", "200M"],
    );
    let report = server.report(1);
    for text in [&client, &report] {
        let intervals: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with('[') && !l.contains("] stream "))
            .collect();
        assert_eq!(intervals.len(), 4, "{text}");
        assert_eq!(
            intervals.iter().filter(|l| l.contains("] sent: ")).count(),
            2
        );
        assert_eq!(
            intervals
                .iter()
                .filter(|l| l.contains("] received: "))
                .count(),
            2
        );
    }
    // Each direction paced at 200 Mbit/s for 1 s: whole packets, about 25 MB each way,
    // every byte sent received.
    for (from, to) in [(&client, &report), (&report, &client)] {
        let got = volume(to, "received").bytes;
        assert_eq!(got, volume(from, "sent").bytes, "{from}\n{to}");
        assert_eq!(got % 32768, 0);
        assert!((15 * MB..35 * MB).contains(&got), "{got}");
    }
}

#[test]
fn the_clients_sending_time_ends_when_the_server_has_its_data() {
    // The server's --max-rate paces both directions from one budget; its reads of up
    // to 128 KiB take the budget from its 1 KiB sends, so the client's data is all in
    // well before the server's own has gone out.
    // On a loaded machine the server's sends can still finish first; the run is then
    // tried again (at most three times), since it cannot tell the two times apart.
    let server = Server::start(&["--max-rate", "200M"]);
    let mut tries = 0;
    let (doc, sending) = loop {
        tries += 1;
        let out = client_ok(
            &server,
            "127.0.0.1",
            &["--bidir", "-m", "5", "-l", "1K", "--json"],
        );
        let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}:\n{out}"));
        let c = &doc["client"];
        let (sending, receiving) = (secs(&c["total"]), secs(&c["reverse_total"]));
        if sending < 0.75 * receiving {
            break (doc, sending);
        }
        assert!(
            tries < 3,
            "the client's sending ({sending} s) ran on with its receiving ({receiving} s)"
        );
    };
    let s = &doc["server"];
    let server_receiving = secs(&s["total"]);
    assert!(
        sending >= server_receiving * 0.9 && sending <= server_receiving + 0.15,
        "client sending {sending} s, server receiving {server_receiving} s"
    );
}

#[test]
fn ctrl_c_ends_both_directions_on_both_ends() {
    let server = Server::start(&[]);
    let text = interrupted_client(
        &server,
        &["--bidir", "--time", "60"],
        Duration::from_millis(1000),
        Duration::from_secs(20),
    );
    assert!(text.contains("what was moved before Ctrl-C"), "{text}");
    let report = server.report(1);
    // What was in flight when the client stopped was sent, not received.
    let (client_sent, client_received) = (volume(&text, "sent"), volume(&text, "received"));
    assert!(client_sent.bytes > 0 && client_received.bytes > 0, "{text}");
    assert!(
        volume(&report, "received").bytes <= client_sent.bytes,
        "{text}\n{report}"
    );
    assert!(
        client_received.bytes <= volume(&report, "sent").bytes,
        "{text}\n{report}"
    );
}
