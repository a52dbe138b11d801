//! Measurement depth end to end: `--json`, `--json-stream` and `fperf -s --json`
//! (validated against docs/fperf-result.schema.json, which must be the generated one), `--time`, `-i`, `--omit`, `--csv`, `--conf` and
//! `--sweep`, with real `fperf -s` / `fperf -c` processes on loopback.

mod common;
use common::*;
use serde_json::Value;
use std::time::Duration;

const MB: u64 = 1 << 20;

/// Runs a client with `args` plus `--json`; returns the parsed document, checked
/// against the schema.
fn json_run(server: &Server, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = client_ok(server, "127.0.0.1", &all);
    let doc = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("not one JSON document ({e}):\n{out}"));
    assert_valid(&schema(), &doc);
    doc
}

fn u(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("not an unsigned integer: {v}"))
}

fn schema() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/fperf-result.schema.json"
    ))
    .expect("schema file");
    serde_json::from_str(&text).expect("schema is JSON")
}

fn assert_valid(schema: &Value, doc: &Value) {
    let v = jsonschema::validator_for(schema).expect("schema compiles");
    let errors: Vec<String> = v
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}\n{doc:#}");
}

/// The schema of one line of output: `event` for `--json-stream`, `server_test` for
/// `fperf -s --json`.
fn line_schema(def: &str) -> Value {
    let s = schema();
    serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": format!("#/$defs/{def}"),
        "$defs": s["$defs"].clone(),
    })
}

#[test]
fn committed_schema_is_the_one_the_output_types_generate() {
    let out = std::process::Command::new(fperf_bin())
        .args(["--generate", "json-schema"])
        .output()
        .expect("fperf runs");
    assert!(out.status.success(), "{out:?}");
    let generated = String::from_utf8(out.stdout).expect("UTF-8");
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/fperf-result.schema.json"
    ))
    .expect("schema file");
    assert!(
        generated == committed,
        "docs/fperf-result.schema.json is not what the output types generate; regenerate \
         it with: cargo run -- --generate json-schema > docs/fperf-result.schema.json"
    );
}

#[test]
fn schema_rejects_a_real_document_with_a_wrong_field() {
    let server = Server::start(&[]);
    let doc = json_run(&server, &["-m", "4"]);
    let validator = jsonschema::validator_for(&schema()).expect("schema compiles");
    assert!(validator.is_valid(&doc));
    let bytes = u(&doc["client"]["total"]["bytes_sent"]);
    assert_eq!(bytes, 4 * MB);
    let mut wrong_type = doc.clone();
    wrong_type["client"]["total"]["bytes_sent"] = Value::String(bytes.to_string());
    assert!(
        !validator.is_valid(&wrong_type),
        "bytes_sent as a string passed"
    );
    let mut unknown = doc.clone();
    unknown["server"]["total"]["bytes_lost"] = Value::from(0);
    assert!(!validator.is_valid(&unknown), "an unknown figure passed");
    let mut bad_setting = doc.clone();
    bad_setting["settings"]["protocol"] = Value::from("sctp");
    assert!(
        !validator.is_valid(&bad_setting),
        "an unknown protocol passed"
    );
    let mut bad_event = serde_json::json!({"event": "end", "result": doc});
    assert!(jsonschema::is_valid(&line_schema("event"), &bad_event));
    bad_event["result"]["client"]["intervals"] = Value::from("none");
    assert!(!jsonschema::is_valid(&line_schema("event"), &bad_event));
}

/// Every number in `v` (recursively).
fn numbers(v: &Value, out: &mut Vec<f64>) {
    match v {
        Value::Number(n) => out.push(n.as_f64().unwrap_or(f64::NAN)),
        Value::Array(a) => a.iter().for_each(|x| numbers(x, out)),
        Value::Object(o) => o.values().for_each(|x| numbers(x, out)),
        _ => {}
    }
}

#[test]
fn json_of_a_tcp_run_agrees_with_both_human_reports() {
    let server = Server::start(&[]);
    let doc = json_run(&server, &["-m", "16", "-t", "2", "-n", "2"]);
    let human_server = server.report(1);
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["settings"]["nstreams"], 2);
    let (c, s) = (&doc["client"], &doc["server"]);
    assert_eq!(u(&c["total"]["bytes_sent"]), 32 * MB);
    assert_eq!(u(&s["total"]["bytes_received"]), 32 * MB);
    assert_eq!(
        u(&s["total"]["bytes_received"]),
        volume(&human_server, "received").bytes,
        "server JSON vs its human report"
    );
    for side in [c, s] {
        assert_eq!(side["streams"].as_array().map(Vec::len), Some(2));
        assert!(side["system"]["kernel"].as_str().is_some());
        assert!(side["cpu"]["system_us"].as_u64().is_some());
        assert!(u(&side["total"]["tcp"]["sockets"]) == 4, "{side:#}");
    }
    for k in 0..2 {
        assert_eq!(u(&c["streams"][k]["figures"]["bytes_sent"]), 16 * MB);
        assert_eq!(u(&s["streams"][k]["figures"]["bytes_received"]), 16 * MB);
    }
    // The same run in human form counts the same bytes.
    let human = client_ok(&server, "127.0.0.1", &["-m", "16", "-t", "2", "-n", "2"]);
    assert_eq!(volume(&human, "sent").bytes, u(&c["total"]["bytes_sent"]));
    // Every latency figure has its percentiles, per stream and for lat_submit too.
    let full = regex::Regex::new(
        r"avg=[\d.]+us  min=[\d.]+us  max=[\d.]+us  p50=[\d.]+us  p90=[\d.]+us  p99=[\d.]+us  p99\.9=[\d.]+us  stddev=[\d.]+us",
    )
    .unwrap();
    for k in 0..2 {
        let line = human
            .lines()
            .find(|l| l.starts_with(&format!("  stream {k} : ")))
            .unwrap_or_else(|| panic!("no stream {k} line:\n{human}"));
        assert!(full.is_match(line), "{line}");
    }
    assert!(
        regex::Regex::new(r"(?m)^lat_submit: avg=\d+ns  min=\d+ns  max=\d+ns  p50=\d+ns  p90=\d+ns  p99=\d+ns  p99\.9=\d+ns  stddev=\d+ns$")
            .unwrap()
            .is_match(&human),
        "{human}"
    );
    assert!(has_line(&human, "cpu       : user="), "{human}");
    assert!(has_line(&human, "tcp_info  : retransmits="), "{human}");
    let mut all = Vec::new();
    numbers(&doc, &mut all);
    assert!(all.iter().all(|x| x.is_finite()), "non-finite number");
}

/// The cpu line of a text report: `cpu : user=… sys=… ctxsw=V/I maxrss=… faults=m/M`,
/// as (voluntary, involuntary, minor, major).
fn usage_counts(text: &str) -> (u64, u64, u64, u64) {
    let re = regex::Regex::new(
        r"(?m)^cpu +: user=[\d.]+s  sys=[\d.]+s  ctxsw=(\d+)/(\d+)  maxrss=[\d.]+[KMG]?B  faults=(\d+)/(\d+)$",
    )
    .unwrap();
    let c = re
        .captures(text)
        .unwrap_or_else(|| panic!("no cpu line with counts:\n{text}"));
    let n = |i: usize| c[i].parse::<u64>().unwrap();
    (n(1), n(2), n(3), n(4))
}

#[test]
fn each_end_reports_its_context_switches_memory_and_page_faults() {
    let server = Server::start(&[]);
    let doc = json_run(&server, &["-m", "64"]);
    for side in [&doc["client"], &doc["server"]] {
        let cpu = &side["cpu"];
        // The process holds at least its 32 KiB buffers and its own code: a peak under
        // 1 MB, or over 4 GB, would not be the resident memory.
        let rss = u(&cpu["max_rss_bytes"]);
        assert!((1 << 20..4 << 30).contains(&rss), "{cpu:#}");
        // 64 MB moved in 32 KiB sends: the receiving end waits for data, so it switches
        // voluntarily; no more than once per packet and then some.
        let voluntary = u(&cpu["voluntary_context_switches"]);
        assert!(voluntary < 64 * MB / 1024, "{cpu:#}");
        u(&cpu["involuntary_context_switches"]);
        // Starting threads and buffers touches fresh pages.
        assert!(u(&cpu["minor_page_faults"]) > 0, "{cpu:#}");
        assert!(
            u(&cpu["major_page_faults"]) <= u(&cpu["minor_page_faults"]),
            "{cpu:#}"
        );
    }
    assert!(
        u(&doc["server"]["cpu"]["voluntary_context_switches"]) > 0,
        "the receiving server never waited: {:#}",
        doc["server"]["cpu"]
    );
    // Both text reports carry the same counts on their cpu line.
    let client = client_ok(&server, "127.0.0.1", &["-m", "64"]);
    let (_, _, minor, _) = usage_counts(&client);
    assert!(minor > 0, "{client}");
    let (voluntary, _, minor, _) = usage_counts(&server.report(2));
    assert!(voluntary > 0 && minor > 0, "{}", server.report(2));
}

#[test]
fn json_of_an_mprtt_run_counts_packets_and_acks() {
    let server = Server::start(&[]);
    // 4 MB in 1000-byte packets: 4194 whole packets and a short one, each acknowledged.
    let doc = json_run(&server, &["-r", "-m", "4", "-l", "1000"]);
    let human_server = server.report(1);
    let packets = (4 * MB).div_ceil(1000);
    let (c, s) = (&doc["client"]["total"], &doc["server"]["total"]);
    assert_eq!(u(&c["bytes_sent"]), 4 * MB);
    assert_eq!(u(&c["bytes_received"]), packets, "one ACK byte per packet");
    assert_eq!(u(&c["send_latency"]["count"]), packets);
    assert_eq!(u(&s["bytes_received"]), 4 * MB);
    assert_eq!(u(&s["bytes_sent"]), packets);
    assert_eq!(volume(&human_server, "received").bytes, 4 * MB);
    assert_eq!(volume(&human_server, "sent").bytes, packets);
    let l = &c["send_latency"];
    assert!(u(&l["min_ns"]) <= u(&l["p50_ns"]) && u(&l["p50_ns"]) <= u(&l["p99_ns"]));
    assert!(u(&l["p99_ns"]) <= u(&l["p999_ns"]) && u(&l["p999_ns"]) <= u(&l["max_ns"]));
    // Every round trip is a transaction, over the client's time.
    let tps = c["transactions_per_second"].as_f64().expect("a number");
    let secs = c["seconds"].as_f64().expect("a number");
    assert!(
        (tps * secs - packets as f64).abs() < 1e-6 * packets as f64,
        "{tps} x {secs}"
    );
    assert!(
        s["transactions_per_second"].is_null(),
        "only the client counts them"
    );
    let bulk = json_run(&server, &["-m", "1"]);
    assert!(bulk["client"]["total"]["transactions_per_second"].is_null());
}

#[test]
fn round_trip_reports_print_transactions_per_second() {
    let server = Server::start(&[]);
    let out = client_ok(
        &server,
        "127.0.0.1",
        &["-r", "-m", "2", "-l", "1000", "-i", "0.05"],
    );
    let packets = (2 * MB).div_ceil(1000);
    let re = regex::Regex::new(r"(?m)^tps       : (\d+)/s \((\d+) transactions in ([\d.]+)s\)$")
        .expect("regex");
    let caps = re
        .captures(&out)
        .unwrap_or_else(|| panic!("no tps line:\n{out}"));
    let field = |i: usize| caps[i].parse::<f64>().expect("a number");
    assert_eq!(field(2), packets as f64);
    // The seconds are printed rounded to 10 ms, the rate to a whole transaction.
    let (n, secs) = (packets as f64, field(3));
    assert!(
        n / (secs + 0.005) - 1.0 <= field(1) && field(1) <= n / (secs - 0.005) + 1.0,
        "{out}"
    );
    let intervals: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with('[') && !l.contains("] stream "))
        .collect();
    assert!(!intervals.is_empty(), "{out}");
    let interval_tps = regex::Regex::new(r"  tps: \d+/s").expect("regex");
    for line in intervals {
        assert!(interval_tps.is_match(line), "{line}");
    }
    assert!(
        !server.report(1).contains("tps"),
        "the server counts no transactions"
    );
}

#[test]
fn json_of_udp_runs_counts_datagrams_on_both_sides() {
    let server = Server::start(&[]);
    // Plain UDP, with intervals: 4 MB in 1472-byte datagrams.
    let doc = json_run(&server, &["-u", "-m", "4", "-l", "1472", "-i", "0.05"]);
    let datagrams = (4 * MB).div_ceil(1472);
    let (c, s) = (&doc["client"]["total"], &doc["server"]["total"]);
    assert_eq!(u(&c["bytes_sent"]), 4 * MB);
    assert_eq!(u(&c["datagrams"]["sent"]), datagrams);
    let d = &s["datagrams"];
    assert_eq!(u(&d["peer_sent"]), datagrams);
    assert_eq!(
        u(&d["received"]) - u(&d["duplicates"]) + u(&d["lost"]),
        datagrams
    );
    assert!(u(&s["bytes_received"]) <= u(&d["received"]) * 1472);
    if u(&d["lost"]) == 0 && u(&d["duplicates"]) == 0 {
        assert_eq!(u(&s["bytes_received"]), 4 * MB);
    }
    assert!(
        doc["client"]["total"]["tcp"].is_null(),
        "no TCP_INFO on UDP"
    );
    // UDP with MPRTT: every datagram acknowledged.
    let doc = json_run(&server, &["-u", "-r", "-m", "1", "-l", "1000"]);
    let packets = MB.div_ceil(1000);
    let c = &doc["client"]["total"];
    assert!(
        u(&c["bytes_received"]) >= packets,
        "at least one ACK per packet"
    );
    if u(&c["retries"]) == 0 {
        assert_eq!(u(&c["bytes_received"]), packets, "one ACK per packet");
    }
    assert_eq!(u(&c["send_latency"]["count"]), packets);
    assert!(u(&doc["server"]["total"]["bytes_received"]) >= MB);
}

#[test]
fn kernel_receive_times_split_udp_latency_per_datagram() {
    let server = Server::start(&[]);
    // (args, which end receives): batched bulk, GRO, one datagram per call, round
    // trips, and the client receiving (--reverse).
    let runs: [(&[&str], &str); 5] = [
        (&["-u", "-m", "4", "-l", "1472"], "server"),
        (
            &["-u", "-m", "4", "-l", "1472", "--gro", "-i", "0.05"],
            "server",
        ),
        (
            &["-u", "-m", "4", "-l", "1472", "--udp-batch", "1"],
            "server",
        ),
        (&["-u", "-r", "-l", "64", "--transactions", "500"], "server"),
        (&["-u", "-m", "4", "-l", "1472", "--reverse"], "client"),
    ];
    for (args, receiver) in runs {
        let mut all = args.to_vec();
        all.push("--rx-timestamps");
        let doc = json_run(&server, &all);
        assert_eq!(doc["settings"]["rx_timestamps"], Value::Bool(true));
        let figures = &doc[receiver]["total"];
        let d = &figures["datagrams"];
        let data = u(&d["received"]);
        assert!(data > 0, "{args:?}");
        // Every datagram has its kernel time; on one host no clock runs ahead.
        for figure in ["network_latency", "app_latency"] {
            let l = &figures[figure];
            assert_eq!(u(&l["count"]), data, "{figure} of {args:?}");
            assert!(
                u(&l["max_ns"]) < 10_000_000_000,
                "{figure} of {args:?}: {l}"
            );
        }
        // Nothing split on the sending end, nor without the option.
        let sender = if receiver == "server" {
            "client"
        } else {
            "server"
        };
        assert!(doc[sender]["total"].get("network_latency").is_none());
    }
    let plain = json_run(&server, &["-u", "-m", "1"]);
    assert!(plain["server"]["total"].get("app_latency").is_none());
    assert!(plain["settings"].get("rx_timestamps").is_none());
    // The text reports: the receiver's two lines, the client's medians of the server's.
    let text = client_ok(
        &server,
        "127.0.0.1",
        &[
            "-u",
            "-r",
            "-l",
            "64",
            "--transactions",
            "200",
            "--rx-timestamps",
        ],
    );
    assert!(text.contains(" rx_timestamps=kernel"), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("server "))
        .unwrap_or_else(|| panic!("no server line:\n{text}"));
    assert!(
        line.contains("; network p50 ") && line.contains(", app wait p50 "),
        "{line}"
    );
    let out = client_ok(
        &server,
        "127.0.0.1",
        &["-u", "-m", "1", "--reverse", "--rx-timestamps"],
    );
    assert!(
        has_line(&out, "network") && has_line(&out, "app wait"),
        "{out}"
    );
}

/// The interval lines of all streams together (not the lines of each stream).
fn interval_lines(text: &str, label: &str) -> Vec<String> {
    let re = regex::Regex::new(&format!(
        r"^\[\s*[\d.]+-\s*[\d.]+s\] {label}: (?:\d+MB\([\d.]+GB |[\d.]+KB\()?(\d+)B\)?  bw: [\d.]+[KMGT]?bit/s  latency: p50=[\d.]+us p99=[\d.]+us  retransmits: \d+(?:  cwnd: [\d.]+[KMG]?B)?$"
    ))
    .unwrap();
    text.lines()
        .filter(|l| l.starts_with('[') && !l.contains("] stream "))
        .inspect(|l| assert!(re.is_match(l), "bad interval line: {l}"))
        .map(str::to_string)
        .collect()
}

#[test]
fn time_3_interval_1_prints_three_intervals_per_side() {
    let server = Server::start(&[]);
    let c = client_ok(&server, "127.0.0.1", &["--time", "3", "-i", "1"]);
    let s = server.report(1);
    assert_eq!(interval_lines(&c, "sent").len(), 3, "{c}");
    assert_eq!(interval_lines(&s, "received").len(), 3, "{s}");
    // Both ends count the same bytes; a time-bounded run sends whole packets.
    let (sent, received) = (volume(&c, "sent"), volume(&s, "received"));
    assert_eq!(sent.bytes, received.bytes);
    assert_eq!(sent.bytes % 32768, 0);
    assert!(sent.bytes > 0);
    let sum: u64 = interval_lines(&c, "sent")
        .iter()
        .map(|l| {
            let re = regex::Regex::new(r"[ (](\d+)B\)?  bw:").unwrap();
            re.captures(l).unwrap()[1].parse::<u64>().unwrap()
        })
        .sum();
    assert_eq!(sum, sent.bytes, "intervals add up to the total");
}

#[test]
fn intervals_in_json_add_up_and_omit_leaves_the_warm_up_out() {
    let server = Server::start(&[]);
    let doc = json_run(
        &server,
        &["--time", "2", "-i", "0.5", "--omit", "1", "-n", "3"],
    );
    for (side, field) in [("client", "bytes_sent"), ("server", "bytes_received")] {
        let intervals = doc[side]["intervals"].as_array().expect("intervals");
        assert_eq!(intervals.len(), 4, "{side}: {intervals:#?}");
        let omitted: Vec<bool> = intervals
            .iter()
            .map(|i| i["omitted"].as_bool().unwrap())
            .collect();
        assert_eq!(omitted, [true, true, false, false], "{side}");
        let counted: u64 = intervals
            .iter()
            .filter(|i| !i["omitted"].as_bool().unwrap())
            .map(|i| u(&i["total"][field]))
            .sum();
        assert_eq!(u(&doc[side]["total"][field]), counted, "{side}");
        for i in intervals {
            assert_eq!(i["streams"].as_array().map(Vec::len), Some(1));
            assert!(u(&i["end_ns"]) > u(&i["start_ns"]));
        }
    }
}

#[test]
fn json_stream_prints_start_intervals_and_end_events() {
    let server = Server::start(&[]);
    let out = client_ok(
        &server,
        "127.0.0.1",
        &["--time", "1", "-i", "0.5", "--json-stream"],
    );
    let schema = line_schema("event");
    let events: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    for e in &events {
        assert_valid(&schema, e);
    }
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"start"));
    assert_eq!(kinds.last(), Some(&"end"));
    let sides = |s: &str| {
        events
            .iter()
            .filter(|e| e["event"] == "interval" && e["side"] == s)
            .count()
    };
    assert_eq!((sides("client"), sides("server")), (2, 2), "{out}");
    let end = &events[events.len() - 1]["result"];
    assert_eq!(
        u(&end["client"]["total"]["bytes_sent"]),
        u(&end["server"]["total"]["bytes_received"])
    );
}

#[test]
fn csv_has_neper_columns_and_one_row_per_stream_per_interval() {
    let server = Server::start(&[]);
    let dir =
        std::env::temp_dir().join(format!("fperf-csv-{}-{}", std::process::id(), server.port));
    let path = dir.with_extension("csv");
    let path_s = path.to_str().unwrap().to_string();
    let doc = json_run(
        &server,
        &["-t", "2", "--time", "2", "-i", "1", "--csv", &path_s],
    );
    let text = std::fs::read_to_string(&path).expect("csv written");
    let _ = std::fs::remove_file(&path);
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("time,stream,bytes,transactions,latency_min,latency_mean,latency_max,latency_stddev,latency_p50,latency_p90,latency_p99,latency_p99.9,utime,stime")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 4, "2 streams x 2 intervals:\n{text}");
    for r in &rows {
        assert_eq!(r.len(), 14, "{r:?}");
        for cell in r {
            assert!(cell.parse::<f64>().is_ok(), "{r:?}");
        }
    }
    let streams: Vec<&str> = rows.iter().map(|r| r[1]).collect();
    assert_eq!(streams, ["0", "1", "0", "1"]);
    let bytes: u64 = rows.iter().map(|r| r[2].parse::<u64>().unwrap()).sum();
    assert_eq!(bytes, u(&doc["client"]["total"]["bytes_sent"]));
    let transactions: u64 = rows.iter().map(|r| r[3].parse::<u64>().unwrap()).sum();
    assert_eq!(
        transactions,
        u(&doc["client"]["total"]["send_latency"]["count"])
    );
}

#[test]
fn csv_without_intervals_has_one_row_per_stream_for_the_whole_run() {
    let server = Server::start(&[]);
    let path = std::env::temp_dir()
        .join(format!(
            "fperf-csv-run-{}-{}",
            std::process::id(),
            server.port
        ))
        .with_extension("csv");
    let path_s = path.to_str().unwrap().to_string();
    let doc = json_run(&server, &["-t", "2", "-m", "4", "--csv", &path_s]);
    let text = std::fs::read_to_string(&path).expect("csv written");
    let _ = std::fs::remove_file(&path);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 2, "a row per stream:\n{text}");
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r[1], i.to_string());
        assert_eq!(r[2], (4u64 << 20).to_string(), "the stream's bytes: {r:?}");
        assert!(r.iter().all(|cell| cell.parse::<f64>().is_ok()), "{r:?}");
    }
    let transactions: u64 = rows.iter().map(|r| r[3].parse::<u64>().unwrap()).sum();
    assert_eq!(
        transactions,
        u(&doc["client"]["total"]["send_latency"]["count"])
    );
}

/// The percentiles of a text report's latency line `label`, in order, e.g. `["50", "99.99"]`.
fn text_percentiles(text: &str, label: &str) -> Vec<String> {
    let line = text
        .lines()
        .find(|l| l.starts_with(label) && l.contains(" avg="))
        .unwrap_or_else(|| panic!("no {label} latency line in:\n{text}"));
    let re = regex::Regex::new(r"  p([\d.]+)=[\d.]+us").unwrap();
    re.captures_iter(line).map(|c| c[1].to_string()).collect()
}

#[test]
fn percentiles_pick_what_both_ends_report_in_text_json_and_csv() {
    let server = Server::start(&[]);
    let asked = ["--percentiles", "50,99.99"];
    let path = std::env::temp_dir()
        .join(format!("fperf-pct-{}-{}", std::process::id(), server.port))
        .with_extension("csv");
    let path_s = path.to_str().unwrap().to_string();
    let mut args = vec!["-r", "-m", "1", "-l", "1K", "--csv", &path_s];
    args.extend_from_slice(&asked);
    let doc = json_run(&server, &args);
    let text = std::fs::read_to_string(&path).expect("csv written");
    let _ = std::fs::remove_file(&path);
    assert_eq!(
        doc["settings"]["percentiles"],
        serde_json::json!([50.0, 99.99])
    );
    // Both ends' latencies: the client's round trips, the server's receives.
    for (side, key) in [("client", "send_latency"), ("server", "recv_latency")] {
        let l = &doc[side]["total"][key];
        let got: Vec<f64> = l["percentiles"]
            .as_array()
            .unwrap_or_else(|| panic!("{side} {key} has no percentiles: {l}"))
            .iter()
            .map(|v| v["percentile"].as_f64().unwrap_or(-1.0))
            .collect();
        assert_eq!(got, [50.0, 99.99], "{side}: {l}");
        let ns = |i: usize| u(&l["percentiles"][i]["ns"]);
        assert!(
            u(&l["min_ns"]) <= ns(0) && ns(0) <= ns(1) && ns(1) <= u(&l["max_ns"]),
            "{l}"
        );
        // The key documents always had repeats the median; the others are left out.
        assert_eq!(u(&l["p50_ns"]), ns(0));
        for absent in ["p90_ns", "p99_ns", "p999_ns"] {
            assert!(l.get(absent).is_none(), "{side} {absent}: {l}");
        }
    }
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("time,stream,bytes,transactions,latency_min,latency_mean,latency_max,latency_stddev,latency_p50,latency_p99.99,utime,stime")
    );
    let row: Vec<&str> = lines.next().expect("a row").split(',').collect();
    assert_eq!(row.len(), 12, "{row:?}");
    let secs = |ns: u64| format!("{:.9}", ns as f64 / 1e9);
    let client = &doc["client"]["total"]["send_latency"]["percentiles"];
    assert_eq!(row[8], secs(u(&client[0]["ns"])), "{row:?}");
    assert_eq!(row[9], secs(u(&client[1]["ns"])), "{row:?}");
    // The text reports of both ends, the server's from its own output.
    let mut args = vec!["-r", "-m", "1", "-l", "1K"];
    args.extend_from_slice(&asked);
    let human = client_ok(&server, "127.0.0.1", &args);
    let human_server = server.report(2);
    assert_eq!(
        text_percentiles(&human, "mprtt"),
        ["50", "99.99"],
        "{human}"
    );
    assert_eq!(
        text_percentiles(&human_server, "mprtt"),
        ["50", "99.99"],
        "{human_server}"
    );
    // Without the flag the reports keep their four.
    let plain = client_ok(&server, "127.0.0.1", &["-r", "-m", "1", "-l", "1K"]);
    assert_eq!(
        text_percentiles(&plain, "mprtt"),
        ["50", "90", "99", "99.9"],
        "{plain}"
    );
}

#[test]
fn bad_percentile_lists_are_refused() {
    for (list, why) in [
        ("", "at least one"),
        ("0", "above 0 and at most 100, not 0"),
        ("100.5", "not 100.5"),
        ("50,fifty", "\"fifty\" is not a number"),
        ("50,99,50", "names 50 twice"),
        ("1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", "at most 16"),
    ] {
        refused(&["-c", "127.0.0.1", "-r", "--percentiles", list], why);
    }
    // The server reports what each client asks for; a sweep's tables have fixed columns.
    refused(&["-s", "--percentiles", "50"], "--percentiles");
    refused(
        &["-c", "h", "-r", "--sweep", "l=1,2", "--percentiles", "50"],
        "--percentiles",
    );
}

/// The number of points of each data line (and legend stroke, both drawn 2 wide; the
/// axes are 1 wide) in an SVG file.
fn svg_line_points(svg: &str) -> Vec<usize> {
    svg.split("<polyline")
        .skip(1)
        .filter(|el| el.contains("stroke-width=\"2\""))
        .map(|el| {
            let points = el.split("points=\"").nth(1).expect("points");
            points
                .split('"')
                .next()
                .expect("end")
                .split_whitespace()
                .count()
        })
        .collect()
}

#[test]
fn plot_draws_the_latency_distribution_and_the_sweep() {
    let server = Server::start(&[]);
    let dir = std::env::temp_dir().join(format!("fperf-plot-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let run = dir.join("run.svg");
    let run_arg = run.to_str().expect("utf-8 path");
    client_ok(
        &server,
        "127.0.0.1",
        &["-r", "-m", "1", "-l", "1000", "--plot", run_arg],
    );
    let svg = std::fs::read_to_string(&run).expect("the run's picture");
    let packets = MB.div_ceil(1000);
    assert!(svg.starts_with("<svg"), "{svg}");
    assert!(svg.contains("TCP -r, 1000 B packets, 1 stream(s): mprtt by percentile"));
    // The title names fperf's version and both ends; the axes say what they are.
    let version = format!("fperf {}, ", env!("CARGO_PKG_VERSION"));
    let server_at = format!(" to 127.0.0.1:{}", server.port);
    assert!(svg.contains(&version) && svg.contains(&server_at), "{svg}");
    for label in [
        "50%",
        "90%",
        "99%",
        "99.9%",
        "mprtt (us, log scale)",
        "percentile",
    ] {
        let text = |t: &str| svg.contains(&format!(">{t}<")) || svg.contains(&format!(">\n{t}\n<"));
        assert!(text(label), "no {label}: {svg}");
    }
    assert!(
        svg.contains(&format!("mprtt (client, {packets} samples)")),
        "{svg}"
    );
    // The distribution, then the legend's stroke.
    let lines = svg_line_points(&svg);
    assert_eq!(lines.len(), 2, "{svg}");
    assert!(lines[0] > 10, "{lines:?}");

    let sweep = dir.join("sweep.svg");
    let sweep_arg = sweep.to_str().expect("utf-8 path");
    client_ok(
        &server,
        "127.0.0.1",
        &[
            "-r",
            "-m",
            "1",
            "--sweep",
            "pktsize=1024..4096:*2",
            "--plot",
            sweep_arg,
        ],
    );
    let svg = std::fs::read_to_string(&sweep).expect("the sweep's picture");
    assert!(svg.contains(&version) && svg.contains(&server_at), "{svg}");
    // p50, p99 and mean, a point per size, then their legend strokes.
    assert_eq!(svg_line_points(&svg), [3, 3, 3, 2, 2, 2], "{svg}");

    let nowhere = dir.join("missing").join("x.svg");
    let out = client_run(
        &server,
        "127.0.0.1",
        &["-m", "1", "--plot", nowhere.to_str().expect("utf-8")],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--plot"),
        "{out:?}"
    );
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn sweep_over_four_sizes_prints_four_rows() {
    let server = Server::start(&[]);
    let out = client_ok(
        &server,
        "127.0.0.1",
        &["-r", "-m", "1", "--sweep", "pktsize=1024..8192:*2"],
    );
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "#",
            "size",
            "trans/s",
            "mean_us",
            "min_us",
            "p50_us",
            "p99_us",
            "max_us",
            "stddev_us",
            "iter"
        ]
    );
    let rows: Vec<Vec<f64>> = lines
        .map(|l| l.split_whitespace().map(|c| c.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), 4, "{out}");
    assert_eq!(server.stderr(), "", "the server logged a client error");
    for (row, size) in rows.iter().zip([1024u64, 2048, 4096, 8192]) {
        assert_eq!(row.len(), 9);
        assert_eq!(row[0] as u64, size);
        assert_eq!(row[8] as u64, MB / size, "iterations at {size}");
        let (tps, mean, min, p50, p99, max) = (row[1], row[2], row[3], row[4], row[5], row[6]);
        assert!(min <= p50 && p50 <= p99 && p99 <= max && min <= mean && mean <= max);
        // One stream's round trips follow each other: they cannot take more than the
        // whole run, so the rate is at most one per mean round trip (rounding aside).
        assert!(tps > 0.0 && tps * (mean - 0.005) <= 1e6 + mean, "{out}");
    }
}

#[test]
fn bandwidth_sweep_rows_have_bandwidth_and_iterations() {
    let server = Server::start(&[]);
    let out = client_ok(&server, "127.0.0.1", &["--sweep", "mb=1,2,4"]);
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(&header[..4], ["#", "mb", "bw_Gbit/s", "mean_us"]);
    let rows: Vec<Vec<f64>> = lines
        .map(|l| l.split_whitespace().map(|c| c.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), 3, "{out}");
    for (row, mb) in rows.iter().zip([1u64, 2, 4]) {
        assert_eq!(row.len(), 9);
        assert_eq!(row[0] as u64, mb);
        assert!(row[1] > 0.0, "bandwidth of {mb} MB");
        assert_eq!(row[8] as u64, mb * MB / 32768, "32 KB sends in {mb} MB");
    }
    // Every value was a test of its own on the same server, none refused or cut short:
    // the server frees a test's slot before the client reads its figures and starts
    // the next (the sweep does not retry a "server busy").
    for n in 1..=3 {
        assert!(volume(&server.report(n), "received").bytes > 0);
    }
    assert_eq!(server.stderr(), "", "the server logged a client error");
}

#[test]
fn sweep_json_has_one_record_per_value() {
    let server = Server::start(&[]);
    let doc = json_run(&server, &["-m", "2", "--sweep", "nsockets=1..3:+1"]);
    let records = doc["records"].as_array().expect("records");
    assert_eq!(records.len(), 3);
    for (r, n) in records.iter().zip(1u64..) {
        assert_eq!(u(&r["value"]), n);
        assert_eq!(u(&r["result"]["settings"]["nsockets"]), n);
        assert_eq!(u(&r["result"]["server"]["total"]["bytes_received"]), 2 * MB);
    }
}

#[test]
fn back_to_back_tests_are_never_refused_as_busy() {
    // Each value's test starts the moment the previous one's figures arrive. With -w
    // every test also listens on a port of its own past the base port, which must be
    // closed by then as well.
    let server = Server::start(&[]);
    let doc = json_run(
        &server,
        &["-l", "64K", "-w", "256K", "--sweep", "mb=1..12:+1"],
    );
    let records = doc["records"].as_array().expect("records");
    assert_eq!(records.len(), 12);
    for (r, mb) in records.iter().zip(1u64..) {
        assert_eq!(
            u(&r["result"]["server"]["total"]["bytes_received"]),
            mb * MB
        );
    }
    assert_eq!(server.stderr(), "", "the server logged a client error");
}

/// The rows of a whitespace-aligned table after its `#` header, as numbers.
fn table_rows(out: &str) -> Vec<Vec<f64>> {
    out.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            l.split_whitespace()
                .map(|c| c.parse().unwrap_or_else(|_| panic!("{c:?} in {l:?}")))
                .collect()
        })
        .collect()
}

#[test]
fn a_sweep_of_bw_and_rr_prints_one_table_with_both_for_each_size() {
    let server = Server::start(&[]);
    let out = client_ok(
        &server,
        "127.0.0.1",
        &[
            "-m",
            "1",
            "--sweep",
            "pktsize=1024..4096:*2",
            "--tests",
            "bw,rr",
        ],
    );
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "#",
            "size",
            "bw_Gbit/s",
            "rr_trans/s",
            "rr_mean_us",
            "rr_min_us",
            "rr_p50_us",
            "rr_p99_us",
            "rr_max_us",
            "rr_iter"
        ]
    );
    let rows = table_rows(&out);
    assert_eq!(rows.len(), 3, "{out}");
    for (row, size) in rows.iter().zip([1024u64, 2048, 4096]) {
        assert_eq!(row.len(), 9, "{out}");
        assert_eq!(row[0] as u64, size);
        assert!(row[1] > 0.0, "bandwidth at {size}: {out}");
        let (tps, mean, min, p50, p99, max) = (row[2], row[3], row[4], row[5], row[6], row[7]);
        assert!(min <= p50 && p50 <= p99 && p99 <= max && min <= mean && mean <= max);
        assert!(tps > 0.0 && tps * (mean - 0.005) <= 1e6 + mean, "{out}");
        assert_eq!(row[8] as u64, MB / size, "round trips at {size}");
    }
    // Six tests on the server, in order: each size's bulk test, then its round trips,
    // each moving the whole megabyte.
    for n in 1..=6 {
        let report = server.report(n);
        assert_eq!(report.contains("mprtt"), n % 2 == 0, "test {n}:\n{report}");
        assert_eq!(volume(&report, "received").bytes, MB, "test {n}:\n{report}");
    }
    assert_eq!(server.stderr(), "", "the server logged a client error");
}

#[test]
fn a_sweep_of_tests_in_json_holds_each_tests_run_for_each_value() {
    let server = Server::start(&[]);
    let doc = json_run(
        &server,
        &[
            "-m",
            "1",
            "--sweep",
            "pktsize=2048,4096",
            "--tests",
            "bw,echo",
        ],
    );
    assert_eq!(doc["sweep"]["tests"], serde_json::json!(["bw", "echo"]));
    let records = doc["records"].as_array().expect("records");
    assert_eq!(records.len(), 2);
    for (r, size) in records.iter().zip([2048u64, 4096]) {
        assert_eq!(u(&r["value"]), size);
        assert!(r.get("result").is_none(), "{r}");
        let (bw, echo) = (&r["tests"]["bw"], &r["tests"]["echo"]);
        for run in [bw, echo] {
            assert_eq!(u(&run["settings"]["pktsize"]), size);
            assert_eq!(u(&run["client"]["total"]["bytes_sent"]), MB);
        }
        // The echo test times each round trip; the server sends every byte back.
        assert_eq!(
            u(&echo["client"]["total"]["send_latency"]["count"]),
            MB / size
        );
        assert_eq!(u(&echo["server"]["total"]["bytes_sent"]), MB);
        assert_eq!(u(&bw["server"]["total"]["bytes_sent"]), 0);
    }
}

#[test]
fn plot_of_a_sweep_of_tests_draws_bandwidth_and_round_trip() {
    let server = Server::start(&[]);
    let dir = std::env::temp_dir().join(format!("fperf-tests-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("both.svg");
    let arg = path.to_str().expect("utf-8 path");
    let args = [
        "-m",
        "1",
        "--sweep",
        "pktsize=1K..4K",
        "--tests",
        "bw,rr",
        "--plot",
        arg,
    ];
    client_ok(&server, "127.0.0.1", &args);
    let svg = std::fs::read_to_string(&path).expect("the sweep's picture");
    assert!(svg.contains("bw, rr by pktsize"), "{svg}");
    assert!(svg.contains("Gbit/s") && svg.contains("round trip (us, log scale)"));
    // The bandwidth panel: its line, a point per size, and legend stroke; then the
    // round trip panel's p50, p99 and mean, and their strokes.
    assert_eq!(svg_line_points(&svg), [3, 2, 3, 3, 3, 2, 2, 2], "{svg}");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn the_sfnt_table_has_its_preamble_and_names_half_and_whole_round_trips() {
    let server = Server::start(&[]);
    let args = [
        "-r",
        "-m",
        "1",
        "--sweep",
        "pktsize=1024..4096:*2",
        "--table",
        "sfnt",
    ];
    let out = client_ok(&server, "127.0.0.1", &args);
    let preamble: Vec<&str> = out.lines().take_while(|l| *l != "#").collect();
    let keys: Vec<&str> = preamble
        .iter()
        .map(|l| l.trim_start_matches("# ").split(':').next().unwrap_or(""))
        .collect();
    assert_eq!(
        keys,
        ["cmdline", "version", "date", "host", "uname", "cpu", "server", "test", "units"],
        "{out}"
    );
    assert!(preamble[0].ends_with(&args.join(" ")), "{out}");
    assert!(out.contains(&format!("# server: 127.0.0.1:{}\n", server.port)));
    let mut table = out.lines().skip_while(|l| *l != "#").skip(1);
    let titles: Vec<&str> = table.next().expect("titles").split('\t').collect();
    let mut expected = vec!["#".to_string(), "size".to_string()];
    for half in ["half", "rtt"] {
        for f in [
            "mean", "min", "median", "max", "p90", "p99", "p99.9", "stddev",
        ] {
            expected.push(format!("{half}_{f}"));
        }
    }
    expected.push("iter".to_string());
    assert_eq!(titles, expected);
    let rows: Vec<Vec<f64>> = table
        .map(|l| {
            assert!(
                l.starts_with('\t'),
                "rows start with a tab, as sfnt-pingpong's"
            );
            l[1..]
                .split('\t')
                .map(|c| c.parse().expect("a number"))
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 3, "{out}");
    for (row, size) in rows.iter().zip([1024u64, 2048, 4096]) {
        assert_eq!(row.len(), titles.len() - 1, "{out}");
        assert_eq!(row[0] as u64, size);
        // Each half figure is its whole round trip's half, rounded to the nanosecond.
        for i in 1..=8 {
            let (half, whole) = (row[i], row[i + 8]);
            assert!(
                (half - whole / 2.0).abs() <= 1.0,
                "{} at {size}: {out}",
                titles[i + 1]
            );
        }
        let (mean, min, median, max, p90, p99, p999) =
            (row[9], row[10], row[11], row[12], row[13], row[14], row[15]);
        assert!(min > 0.0 && min <= median && median <= p90 && p90 <= p99);
        assert!(
            p99 <= p999 && p999 <= max && min <= mean && mean <= max,
            "{out}"
        );
        // Every round trip of the megabyte was timed.
        assert_eq!(row[17] as u64, MB / size, "iter at {size}");
    }
    for n in 1..=3 {
        assert!(server.report(n).contains("mprtt"));
    }
    assert_eq!(server.stderr(), "", "the server logged a client error");
}

#[test]
fn conf_prints_both_ends_side_by_side() {
    let server = Server::start(&[]);
    let out = client_ok(&server, "127.0.0.1", &["--conf"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 7, "{out}");
    assert!(lines[0].contains("client") && lines[0].contains("server"));
    for (line, label) in lines[1..]
        .iter()
        .zip(["host", "cpu", "cores", "kernel", "arch", "fperf"])
    {
        assert!(line.starts_with(label), "{line}");
    }
    assert_eq!(lines[6].matches(env!("CARGO_PKG_VERSION")).count(), 2);
    // A conf query is not a test: the server is still idle and serves one next.
    client_ok(&server, "127.0.0.1", &["-m", "1"]);
}

#[test]
fn help_lists_the_measurement_flags() {
    let out = run(&["--help"], Duration::from_secs(10));
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--time <SECS>",
        "-i, --interval <SECS>",
        "--omit <SECS>",
        "--json",
        "--json-stream",
        "--csv <FILE>",
        "--conf",
        "--sweep <SPEC>",
        "--tests <LIST>",
        "--table <LAYOUT>",
        "--plot <FILE>",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
}

#[test]
fn measurement_flags_are_checked() {
    let out = run(
        &["-c", "127.0.0.1", "--time", "1", "--omit", "1"],
        Duration::from_secs(10),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--omit"));
    let out = run(
        &["-c", "127.0.0.1", "--sweep", "pktsize=9..1"],
        Duration::from_secs(10),
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("empty"));
    // A test that cannot run at some value is refused as a flag is, before the table
    // begins: an echo holds twice the packet buffers of bulk data, over the bound here.
    let out = run(
        &[
            "-c",
            "127.0.0.1",
            "-t",
            "64",
            "--sweep",
            "pktsize=32M",
            "--tests",
            "bw,echo",
        ],
        Duration::from_secs(10),
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("pktsize=33554432 echo"));
    let out = run(&["-s", "-i", "1"], Duration::from_secs(10));
    assert!(!out.status.success());
    let out = run(
        &["-c", "127.0.0.1", "--time", "1", "-m", "5"],
        Duration::from_secs(10),
    );
    assert!(!out.status.success());
}

#[test]
fn ctrl_c_still_yields_one_json_document_with_both_sides() {
    let server = Server::start(&[]);
    let text = interrupted_client(
        &server,
        &["--time", "60", "-i", "0.5", "--json"],
        Duration::from_millis(1200),
        Duration::from_secs(30),
    );
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}:\n{text}"));
    assert_eq!(doc["interrupted"], true);
    let sent = u(&doc["client"]["total"]["bytes_sent"]);
    assert!(sent > 0);
    assert_eq!(sent, u(&doc["server"]["total"]["bytes_received"]));
    assert!(!doc["client"]["intervals"].as_array().unwrap().is_empty());
}

/// `--skip-rx-copy` reaches the server (its reads discard the bytes in the kernel) and
/// every byte is still counted on both ends.
#[test]
fn skip_rx_copy_moves_and_counts_every_byte() {
    let server = Server::start(&[]);
    let doc = json_run(
        &server,
        &["-m", "8", "-t", "2", "-n", "2", "--skip-rx-copy"],
    );
    assert_eq!(doc["settings"]["skip_rx_copy"], true);
    assert_eq!(u(&doc["client"]["total"]["bytes_sent"]), 16 << 20);
    assert_eq!(u(&doc["server"]["total"]["bytes_received"]), 16 << 20);
    let doc = json_run(&server, &["-m", "1"]);
    assert_eq!(doc["settings"]["skip_rx_copy"], false);
}

/// `-w` reaches the server and sizes every data socket's buffers; UDP's report says
/// what the kernel granted, which is what was asked.
#[test]
fn window_sizes_the_data_sockets_of_both_ends() {
    let server = Server::start(&[]);
    let doc = json_run(&server, &["-m", "4", "-t", "2", "-w", "512K"]);
    assert_eq!(doc["settings"]["window"], 512 << 10);
    assert_eq!(u(&doc["client"]["total"]["bytes_sent"]), 8 << 20);
    assert_eq!(u(&doc["server"]["total"]["bytes_received"]), 8 << 20);
    let doc = json_run(&server, &["-u", "-m", "2", "-l", "1400", "-w", "1M"]);
    assert_eq!(doc["settings"]["window"], 1 << 20);
    for side in ["client", "server"] {
        let datagrams = &doc[side]["total"]["datagrams"];
        for buf in ["rcvbuf", "sndbuf"] {
            assert_eq!(u(&datagrams[buf]["requested"]), 1 << 20, "{side} {buf}");
            assert_eq!(u(&datagrams[buf]["granted"]), 1 << 20, "{side} {buf}");
        }
    }
    let doc = json_run(&server, &["-u", "-m", "1", "-l", "1400"]);
    assert!(doc["settings"]["window"].is_null());
    let requested = u(&doc["server"]["total"]["datagrams"]["rcvbuf"]["requested"]);
    assert_eq!(requested, 16 << 20, "UDP's own size without -w");
}

/// The server reads its sockets' receive low-water mark back from the kernel and
/// reports it, per stream in JSON and on its header line: `--rcvlowat` as given, else
/// the default its cores choose; the client's streams have none to report.
#[test]
fn receive_low_water_mark_is_read_back_by_the_server() {
    let server = Server::start(&[]);
    let doc = json_run(&server, &["-m", "8", "-t", "2", "--rcvlowat", "5000"]);
    assert_eq!(u(&doc["settings"]["rcvlowat"]), 5000);
    for (side, mark) in [("server", Value::from(5000)), ("client", Value::Null)] {
        let streams = doc[side]["streams"].as_array().expect("streams");
        assert_eq!(streams.len(), 2, "{side}");
        for s in streams {
            assert_eq!(s["rcvlowat"], mark, "{side}: {s}");
        }
    }

    // The default depends on the server's cores: the library's rule, as the kernel took it.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let run = fperf::settings::Settings::default().shape();
    let tcp = fperf::transport::tcp::settings::TcpSettings::default();
    let default = tcp.rcvlowat_bytes(&run, cores).unwrap_or(1);
    let doc = json_run(&server, &["-m", "8"]);
    assert!(doc["settings"]["rcvlowat"].is_null());
    assert_eq!(
        u(&doc["server"]["streams"][0]["rcvlowat"]),
        u64::from(default)
    );

    // Where the bulk mark is the default, the reads also nap while data flows.
    let nap = tcp.rx_nap(&run, cores);
    let nap_us = nap.map(|d| d.as_micros() as u64);
    assert_eq!(doc["server"]["streams"][0]["rx_nap_us"].as_u64(), nap_us);
    assert!(doc["client"]["streams"][0]["rx_nap_us"].is_null());
    let reverse = json_run(&server, &["-m", "8", "--reverse"]);
    assert_eq!(
        reverse["client"]["streams"][0]["rx_nap_us"].as_u64(),
        nap_us
    );
    assert!(reverse["server"]["streams"][0]["rx_nap_us"].is_null());

    client_ok(&server, "127.0.0.1", &["-m", "8", "--rcvlowat", "5000"]);
    let report = server.report(4);
    assert!(report.contains(" rcvlowat=5000B"), "{report}");
    assert!(
        !report.contains("rx_nap"),
        "--rcvlowat reads as the mark says: {report}"
    );
    if let Some(us) = nap_us {
        client_ok(&server, "127.0.0.1", &["-m", "8"]);
        let report = server.report(5);
        assert!(report.contains(&format!(" rx_nap={us}us")), "{report}");
    }

    let doc = json_run(&server, &["-u", "-m", "1", "-l", "1400"]);
    assert!(doc["server"]["streams"][0]["rcvlowat"].is_null(), "UDP");
}

/// `-C` sets the algorithm on both ends' data sockets, and each end reports what its
/// kernel says the sockets use: with `-C`, the one asked for; without, the kernel's
/// default. An algorithm the kernel lacks fails with one line naming what it has.
#[test]
fn congestion_control_is_set_on_both_ends_and_read_back() {
    let server = Server::start(&[]);
    // reno is built into every Linux kernel.
    let doc = json_run(&server, &["-m", "8", "-t", "2", "-C", "reno"]);
    assert_eq!(doc["settings"]["congestion"], "reno");
    for side in ["client", "server"] {
        let streams = doc[side]["streams"].as_array().expect("streams");
        assert_eq!(streams.len(), 2, "{side}");
        for s in streams {
            assert_eq!(s["congestion"], "reno", "{side}: {s}");
        }
    }

    let default = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .expect("the kernel's default congestion control");
    let doc = json_run(&server, &["-m", "8"]);
    assert_eq!(doc["settings"]["congestion"], Value::Null);
    for side in ["client", "server"] {
        assert_eq!(
            doc[side]["streams"][0]["congestion"],
            default.trim(),
            "{side}"
        );
    }

    // The human reports name it on both ends' header lines.
    let out = client_ok(&server, "127.0.0.1", &["-m", "8", "-C", "reno"]);
    let header = out.lines().next().unwrap_or_default();
    assert!(header.contains(" cc=reno"), "{out}");
    let report = server.report(3);
    assert!(report.contains("pkt_size(32KB) cc=reno"), "{report}");

    let out = client_run(&server, "127.0.0.1", &["-m", "8", "-C", "nosuchalgo"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an unknown algorithm was accepted");
    assert!(
        err.contains("'nosuchalgo' is not available") && err.contains("(available: "),
        "{err}"
    );
    // The server goes on serving.
    client_ok(&server, "127.0.0.1", &["-m", "8"]);
}

#[test]
fn a_bidir_document_totals_each_direction_and_its_intervals_add_up() {
    let server = Server::start(&[]);
    let doc = json_run(
        &server,
        &["--bidir", "--time", "1", "-i", "0.5", "-b", "100M"],
    );
    let sum = |side: &Value, total: &str, key: &str| -> u64 {
        side["intervals"]
            .as_array()
            .expect("intervals")
            .iter()
            .map(|i| u(&i[total][key]))
            .sum()
    };
    let (c, s) = (&doc["client"], &doc["server"]);
    for (side, sent, received) in [
        (
            c,
            ("total", "bytes_sent"),
            ("reverse_total", "bytes_received"),
        ),
        (
            s,
            ("reverse_total", "bytes_sent"),
            ("total", "bytes_received"),
        ),
    ] {
        assert_eq!(side["intervals"].as_array().map(Vec::len), Some(2));
        for (total, key) in [sent, received] {
            let whole = u(&side[total][key]);
            assert!(whole > 5 * MB, "{total}.{key} = {whole}");
            assert_eq!(sum(side, total, key), whole, "{total}.{key}");
        }
    }
    assert_eq!(
        u(&c["total"]["bytes_sent"]),
        u(&s["total"]["bytes_received"])
    );
    assert_eq!(
        u(&s["reverse_total"]["bytes_sent"]),
        u(&c["reverse_total"]["bytes_received"])
    );
    // Without --bidir there is no reverse_total anywhere.
    let one_way = json_run(&server, &["-m", "1", "-i", "0.5"]);
    assert!(one_way["client"].get("reverse_total").is_none());
    assert!(one_way["server"]["intervals"][0]
        .get("reverse_total")
        .is_none());
}

/// The scheduling policy (field 41 of `/proc/PID/task/TID/stat`) of each thread of
/// `pid` whose name starts with `prefix`.
fn thread_policies(pid: u32, prefix: &str) -> Vec<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("task list");
    tasks
        .filter_map(|t| {
            let dir = t.ok()?.path();
            let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            // Fields after the name (which ends at the last ')') start at field 3.
            let rest = &stat[stat.rfind(')')? + 1..];
            let policy = rest.split_whitespace().nth(41 - 3)?.parse().ok()?;
            comm.starts_with(prefix).then_some(policy)
        })
        .collect()
}

/// In a bulk test both ends' data threads run under SCHED_BATCH and the headers say
/// so; in a round-trip test (`-r`) they keep the normal policy. `--sched` decides on
/// both ends for any test.
#[test]
fn bulk_data_threads_run_under_sched_batch_and_round_trips_do_not() {
    const SCHED_OTHER: u32 = 0;
    const SCHED_BATCH: u32 = 3;
    let server = Server::start(&[]);
    let port = server.port.to_string();
    let runs: [(&[&str], u32); 4] = [
        (&["--time", "2"], SCHED_BATCH),
        (&["--time", "2", "-r", "-l", "1"], SCHED_OTHER),
        (&["--time", "2", "--sched", "normal"], SCHED_OTHER),
        (
            &["--time", "2", "-r", "-l", "1", "--sched", "batch"],
            SCHED_BATCH,
        ),
    ];
    for (n, (args, policy)) in runs.into_iter().enumerate() {
        let mut all = vec!["-c", "127.0.0.1", "-p", &port];
        all.extend_from_slice(args);
        let mut seen = (Vec::new(), Vec::new());
        let out = run_with(&all, Duration::from_secs(60), |client| {
            std::thread::sleep(Duration::from_millis(1000));
            seen = (
                thread_policies(client.id(), "fperf-send"),
                thread_policies(server.pid(), "fperf-recv"),
            );
        });
        assert!(out.status.success(), "{args:?}");
        assert_eq!(seen.0, [policy], "the client's sending thread, {args:?}");
        assert_eq!(seen.1, [policy], "the server's receiving thread, {args:?}");
        let header = String::from_utf8_lossy(&out.stdout).to_string();
        let report = server.report(n + 1);
        for text in [&header, &report] {
            assert_eq!(
                text.contains(" sched=batch"),
                policy == SCHED_BATCH,
                "{args:?}: {text}"
            );
        }
    }
    // The JSON settings name a policy that was asked for, and only then.
    let asked = json_run(&server, &["-m", "1", "--sched", "normal"]);
    assert_eq!(asked["settings"]["sched"], "normal");
    let default = json_run(&server, &["-m", "1"]);
    assert!(default["settings"].get("sched").is_none(), "{default}");
}

#[test]
fn a_json_server_prints_one_document_per_test_on_one_line_each() {
    let server = Server::start(&["--json"]);
    client_ok(&server, "127.0.0.1", &["-m", "3"]);
    client_ok(&server, "127.0.0.1", &["-u", "-m", "2", "-b", "500M"]);
    let text = server.wait_for(|o| o.lines().count() >= 2, Duration::from_secs(10));
    let docs: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(docs.len(), 2, "{text}");
    let line = line_schema("server_test");
    docs.iter().for_each(|d| assert_valid(&line, d));
    assert_eq!(u(&docs[0]["server"]["total"]["bytes_received"]), 3 * MB);
    assert_eq!(docs[0]["settings"]["protocol"], "tcp");
    assert_eq!(docs[1]["settings"]["protocol"], "udp");
    assert!(docs[1]["server"]["total"]["datagrams"]["received"].as_u64() > Some(0));
    assert!(docs[0]["client"]
        .as_str()
        .is_some_and(|c| c.starts_with("127.0.0.1:")));
    assert!(!text.contains("Server listening"), "{text}");
}

#[test]
fn logfile_takes_the_report_and_timestamps_begin_each_line_with_the_time() {
    let server = Server::start(&[]);
    let dir = std::env::temp_dir().join(format!("fperf-logfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let log = dir.join("client.log");
    let log_arg = log.to_string_lossy().into_owned();
    let stdout = client_ok(
        &server,
        "127.0.0.1",
        &["-m", "2", "--logfile", &log_arg, "--timestamps=%H:%M:%S| "],
    );
    assert_eq!(stdout, "", "the report went to the log file");
    let text = std::fs::read_to_string(&log).expect("log file");
    let _ = std::fs::remove_dir_all(&dir);
    let stamp = regex::Regex::new(r"^\d\d:\d\d:\d\d\| ").unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    assert!(lines.len() >= 4, "{text}");
    for line in &lines {
        assert!(stamp.is_match(line), "no time at the start of: {line}");
    }
    let unstamped: String = text
        .lines()
        .map(|l| stamp.replace(l, "").into_owned() + "\n")
        .collect();
    assert_eq!(volume(&unstamped, "sent").bytes, 2 * MB, "{text}");
}

#[test]
fn title_begins_each_line_or_labels_the_json_with_extra_data_as_iperf3s() {
    let server = Server::start(&[]);
    let text = client_ok(
        &server,
        "127.0.0.1",
        &[
            "-m",
            "2",
            "-i",
            "0.5",
            "-T",
            "rack 7",
            "--timestamps=%H:%M:%S ",
        ],
    );
    let stamp = regex::Regex::new(r"^\d\d:\d\d:\d\d rack 7:  ").unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    assert!(lines.len() >= 4, "{text}");
    for line in &lines {
        assert!(stamp.is_match(line), "time, then title, begin: {line}");
    }
    let doc = json_run(
        &server,
        &["-m", "2", "-T", "rack 7", "--extra-data", "build 42"],
    );
    assert_eq!(doc["title"], "rack 7");
    assert_eq!(doc["extra_data"], "build 42");
    let sweep = json_run(
        &server,
        &["--sweep", "pktsize=1K,2K", "-m", "1", "--title", "rack 7"],
    );
    assert_eq!(sweep["title"], "rack 7");
    assert!(sweep.get("extra_data").is_none(), "only when given");
    let plain = json_run(&server, &["-m", "1"]);
    assert!(plain.get("title").is_none() && plain.get("extra_data").is_none());
    let out = client_ok(
        &server,
        "127.0.0.1",
        &[
            "-m",
            "1",
            "-T",
            "rack 7",
            "--extra-data",
            "x",
            "--json=iperf3",
        ],
    );
    let doc: Value = serde_json::from_str(&out).expect("one JSON document");
    assert_eq!(doc["title"], "rack 7", "iperf3's place for it");
    assert_eq!(doc["extra_data"], "x");
    refused(&["-c", "127.0.0.1", "--extra-data", "x"], "--json");
    refused(
        &["-s", "--json", "-T", "rack 7"],
        "label a client's --json document",
    );
}

/// Runs `fperf ARGS` under a pseudo-terminal (`script`), as a user at a terminal would;
/// returns what the terminal showed.
fn on_a_terminal(args: &[&str]) -> String {
    let command = std::iter::once(fperf_bin())
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ");
    let out = std::process::Command::new("timeout")
        .args(["60", "script", "-q", "-e", "-c", &command, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("script (util-linux) runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{command}: {text}");
    text
}

#[test]
fn a_terminal_shows_a_progress_line_erased_before_the_report_and_a_pipe_shows_none() {
    const ERASE: &str = "\r\x1b[K";
    let server = Server::start(&[]);
    let port = server.port.to_string();
    let shown = on_a_terminal(&[
        "-c",
        "127.0.0.1",
        "-p",
        &port,
        "--time",
        "2.6",
        "-b",
        "200M",
    ]);
    let updates = shown.matches(" so far, ").count();
    assert!(updates >= 2, "about one update a second: {shown:?}");
    assert!(shown.contains("s left"), "{shown:?}");
    // The last thing before the report is the erased line.
    let report = shown.find("sent      :").expect("the report");
    assert!(shown[..report].ends_with(ERASE), "{shown:?}");
    assert!(!shown[report..].contains(" so far, "), "{shown:?}");
    // A sweep says which of its steps runs.
    let swept = on_a_terminal(&[
        "-c",
        "127.0.0.1",
        "-p",
        &port,
        "-m",
        "1",
        "--sweep",
        "pktsize=1K,2K",
    ]);
    assert!(swept.contains("running pktsize=2048 (2 of 2)"), "{swept:?}");
    // Piped, neither stream carries any of it.
    let out = client_run(&server, "127.0.0.1", &["--time", "1.5", "-b", "200M"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success());
    for text in [&stdout, &stderr] {
        assert!(
            !text.contains("so far") && !text.contains('\x1b'),
            "{text:?}"
        );
    }
}

#[test]
fn intervals_of_several_streams_have_a_line_per_stream_on_both_ends_then_the_sum() {
    let server = Server::start(&[]);
    let c = client_ok(
        &server,
        "127.0.0.1",
        &["-t", "2", "--time", "2", "-i", "1", "-b", "100M"],
    );
    let s = server.report(1);
    for (text, verb) in [(&c, "sent"), (&s, "received")] {
        for stream in 0..2 {
            let lines: Vec<&str> = text
                .lines()
                .filter(|l| l.contains(&format!("] stream {stream} {verb}: ")))
                .collect();
            assert_eq!(lines.len(), 2, "an interval line per second:\n{text}");
            if verb == "sent" {
                // A TCP sender's columns, as iperf3's: retransmits and cwnd.
                assert!(lines.iter().all(|l| l.contains("  cwnd: ")), "{text}");
            }
        }
        // Each interval's sum follows its streams' lines.
        assert_eq!(interval_lines(text, verb).len(), 2, "{text}");
        let mut it = text
            .lines()
            .filter(|l| l.starts_with('[') && l.contains(&format!(" {verb}: ")));
        let first: Vec<&str> = it.by_ref().take(3).collect();
        assert!(first[0].contains("] stream 0 ") && first[1].contains("] stream 1 "));
        assert!(first[2].contains(&format!("] {verb}: ")), "{text}");
    }
}

#[test]
fn the_servers_report_ends_with_what_the_client_saw() {
    let server = Server::start(&[]);
    let c = client_ok(&server, "127.0.0.1", &["-m", "4"]);
    assert_eq!(peer_bytes(&c, "received"), 4 * MB, "{c}");
    let s = server.wait_for(|o| o.contains("\nclient   :"), Duration::from_secs(10));
    let line =
        regex::Regex::new(r"(?m)^client   : sent 4MB\(0\.00GB 4194304B\) in [\d.]+s \(").unwrap();
    assert!(line.is_match(&s), "{s}");
    // With UDP from the server: what the client received, and its datagram counts.
    client_ok(
        &server,
        "127.0.0.1",
        &["-u", "--reverse", "-m", "2", "-b", "200M"],
    );
    let s = server.wait_for(
        |o| o.matches("\nclient   :").count() >= 2,
        Duration::from_secs(10),
    );
    let last = s
        .lines()
        .rfind(|l| l.starts_with("client   :"))
        .expect("a client line");
    assert!(
        last.contains(": received ") && last.contains(" lost "),
        "{last}"
    );
    assert!(
        last.contains("duplicated") && last.contains("jitter"),
        "{last}"
    );
}

#[test]
fn each_latency_says_whether_a_sample_is_a_packet_a_batch_or_a_read() {
    let server = Server::start(&[]);
    let per = |side: &Value, which: &str| side["total"][format!("{which}_latency_per")].clone();
    let lat = |side: &Value, which: &str| side["total"][format!("{which}_latency")].clone();
    // UDP in batches of 64: 16 MB is 512 datagrams, so 8 sendmmsg() batches, one
    // sample each; the receiver's samples are its recvmmsg() reads, none of 0 ns.
    let doc = json_run(
        &server,
        &["-u", "-l", "32K", "-m", "16", "--udp-batch", "64"],
    );
    let (c, s) = (&doc["client"], &doc["server"]);
    let batch = serde_json::json!({"per": "batch", "datagrams": 64});
    assert_eq!(per(c, "send"), batch, "{c:#}");
    assert_eq!(u(&lat(c, "send")["count"]), 8, "{c:#}");
    assert_eq!(per(s, "recv"), batch, "{s:#}");
    let recv = lat(s, "recv");
    assert!((1..=512).contains(&u(&recv["count"])), "{recv:#}");
    assert!(u(&recv["min_ns"]) > 0 && u(&recv["p50_ns"]) > 0, "{recv:#}");
    let client_text = client_ok(
        &server,
        "127.0.0.1",
        &["-u", "-l", "32K", "-m", "16", "--udp-batch", "64"],
    );
    let server_text = server.report(2);
    for text in [&client_text, &server_text] {
        assert!(text.contains(" latency=per-batch(64)"), "{text}");
    }
    let (_, min, _) = latency(&server_text, "latency");
    assert!(min > 0.0, "{server_text}");
    // One datagram per call: a sample per datagram, and no label.
    let doc = json_run(&server, &["-u", "-l", "32K", "-m", "4", "--udp-batch", "1"]);
    let packet = serde_json::json!({"per": "packet"});
    assert_eq!(per(&doc["client"], "send"), packet);
    assert_eq!(u(&lat(&doc["client"], "send")["count"]), 128);
    assert_eq!(per(&doc["server"], "recv"), packet);
    assert_eq!(u(&lat(&doc["server"], "recv")["count"]), 128);
    let text = client_ok(&server, "127.0.0.1", &["-u", "-m", "4", "--udp-batch", "1"]);
    assert!(!text.contains("latency=per-"), "{text}");
    // TCP: the server reads up to 128 KiB at once, so a sample is a read of several
    // 32 KiB packets; the client's are its sends, one packet each.
    let doc = json_run(&server, &["-m", "16"]);
    let read = serde_json::json!({"per": "read", "bytes": 131072});
    assert_eq!(per(&doc["server"], "recv"), read);
    assert_eq!(per(&doc["client"], "send"), packet);
    let text = client_ok(&server, "127.0.0.1", &["-m", "16"]);
    assert!(!text.contains("latency=per-"), "{text}");
    // The sixth test of this server: the TCP run just made.
    let header = server.report(6);
    assert!(
        header
            .lines()
            .find(|l| l.starts_with("new TCP connection"))
            .is_some_and(|l| l.ends_with(" latency=per-read(128KB)")),
        "{header}"
    );
    // Packets of 128 KiB are read one at a time at most: no label.
    let doc = json_run(&server, &["-m", "16", "-l", "128K"]);
    assert_eq!(per(&doc["server"], "recv"), packet);
}
