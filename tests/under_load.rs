//! `--under-load` on loopback: every phase runs and reports every figure, in every
//! output; the probes' echo answers only its own session's probes and takes no test's
//! place; and a server that cannot echo them refuses the run before any probe goes.

mod common;

use common::{client_ok, older_server, run, Server};
use fperf::client::{probe_echo, ClientConfig};
use fperf::control::PROTOCOL_MINOR;
use fperf::latency_probe::datagram::{Probe, PROBE_LEN};
use fperf::settings::Settings;
use serde_json::Value;
use std::net::UdpSocket;
use std::time::Duration;

const PHASES: [&str; 4] = ["idle", "download", "upload", "bidir"];

/// Asserts `doc` follows the committed schema's definition `def` (the root with `None`).
fn assert_valid(doc: &Value, def: Option<&str>) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/fperf-result.schema.json"
    ))
    .expect("schema file");
    let mut schema: Value = serde_json::from_str(&text).expect("schema is JSON");
    if let Some(def) = def {
        schema = serde_json::json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$ref": format!("#/$defs/{def}"),
            "$defs": schema["$defs"].clone(),
        });
    }
    let v = jsonschema::validator_for(&schema).expect("schema compiles");
    let errors: Vec<String> = v
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}\n{doc:#}");
}

#[test]
fn every_phase_reports_every_figure_in_json_csv_and_plot() {
    let server = Server::start(&[]);
    let dir = std::env::temp_dir();
    let tag = format!("fperf-under-load-{}-{}", std::process::id(), server.port);
    let (csv, svg) = (
        dir.join(format!("{tag}.csv")),
        dir.join(format!("{tag}.svg")),
    );
    let out = client_ok(
        &server,
        "127.0.0.1",
        &[
            "--under-load",
            "--phase-time",
            "0.5",
            "--load-flows",
            "2",
            "--json",
            "--csv",
            csv.to_str().unwrap(),
            "--plot",
            svg.to_str().unwrap(),
        ],
    );
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_valid(&doc, None);
    let under_load = &doc["under_load"];
    assert!(under_load["rpm_method"]
        .as_str()
        .unwrap()
        .starts_with("draft-ietf-ippm-responsiveness-08"));
    assert_eq!(under_load["load_flows"], 2);
    assert_eq!(under_load["clock_offset"]["same_host"], true);
    let phases = under_load["phases"].as_array().unwrap();
    let names: Vec<&str> = phases.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, PHASES);
    for p in phases {
        let name = p["name"].as_str().unwrap();
        let rtt = &p["rtt"];
        for key in ["min_ns", "p50_ns", "p90_ns", "p99_ns", "max_ns", "count"] {
            assert!(rtt[key].as_u64().is_some(), "{name}: no rtt.{key} in {p}");
        }
        // 0.5 s at one probe every 10 ms (fewer on a busy host), none lost on loopback.
        assert!(rtt["count"].as_u64().unwrap() >= 10, "{name}: {p}");
        assert_eq!(p["probes_lost"], 0, "{name}: {p}");
        assert_eq!(p["probe_loss"], 0.0, "{name}: {p}");
        assert!(p["added_delay_ns"].as_i64().is_some(), "{name}: {p}");
        assert!(p["rpm"].as_f64().unwrap() > 0.0, "{name}: {p}");
        assert!(p["one_way"]["up_ns"].as_u64().is_some(), "{name}: {p}");
        let (up, down) = (
            p["up_bits_per_second"].as_f64().unwrap(),
            p["down_bits_per_second"].as_f64().unwrap(),
        );
        let (loads_up, loads_down) = match name {
            "idle" => (false, false),
            "download" => (false, true),
            "upload" => (true, false),
            _ => (true, true),
        };
        assert_eq!(
            (up > 1e6, down > 1e6),
            (loads_up, loads_down),
            "{name}: {p}"
        );
        let tcp_rtt = &p["loaded_connection_rtt"];
        assert_eq!(
            tcp_rtt["p50_ns"].as_u64().is_some(),
            name != "idle",
            "{name}: {p}"
        );
    }
    let (csv_path, svg_path) = (csv, svg);
    let csv = std::fs::read_to_string(&csv_path).unwrap();
    let _ = std::fs::remove_file(&csv_path);
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows.len(), 5, "{csv}");
    assert!(rows[0].starts_with("phase,start_s,end_s,probes_sent,probes_lost"));
    for (row, name) in rows[1..].iter().zip(PHASES) {
        assert!(row.starts_with(&format!("{name},")), "{csv}");
    }
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let _ = std::fs::remove_file(&svg_path);
    assert!(
        svg.contains(&format!("fperf {}", fperf::VERSION)),
        "no version in the title"
    );
    assert!(svg.contains("127.0.0.1"), "no hosts in the title");
    for name in PHASES {
        assert!(svg.contains(name), "no {name} mark");
    }
}

#[test]
fn the_text_table_and_the_json_stream_show_the_phases() {
    let server = Server::start(&[]);
    let args = ["--under-load", "--phases", "idle:0.3,upload:0.5"];
    let text = client_ok(&server, "127.0.0.1", &args);
    assert!(
        text.contains("RPM per draft-ietf-ippm-responsiveness-08"),
        "{text}"
    );
    assert!(text.lines().any(|l| l.starts_with("idle ")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("upload ")), "{text}");
    let stream = client_ok(
        &server,
        "127.0.0.1",
        &[&args[..], &["--json-stream"]].concat(),
    );
    let lines: Vec<Value> = stream
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    for line in &lines {
        assert_valid(line, Some("under_load_event"));
    }
    let probes = lines.iter().filter(|l| l["event"] == "probe").count();
    assert!(probes >= 30, "{probes} probe lines");
    assert!(lines
        .iter()
        .any(|l| l["event"] == "throughput" && l["phase"] == "upload"));
    let last = lines.last().unwrap();
    assert_eq!(last["event"], "end");
    assert_eq!(last["result"]["under_load"]["phases"][1]["name"], "upload");
}

#[test]
fn the_echo_answers_only_its_sessions_probes_and_takes_no_tests_place() {
    let server = Server::start(&[]);
    let cfg = ClientConfig::new("127.0.0.1", server.port, Settings::default());
    let session = probe_echo(&cfg, 30).expect("a probe session");
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    sock.connect(session.echo).unwrap();
    let probe = |token| Probe {
        token,
        seq: 3,
        client_send_ns: 11,
        server_recv_ns: 0,
        server_send_ns: 0,
    };
    let mut buf = [0u8; 2 * PROBE_LEN];
    // Another session's token, and a datagram of another size, get nothing back.
    sock.send(&probe(session.token ^ 1).encode()).unwrap();
    let mut longer = probe(session.token).encode().to_vec();
    longer.extend_from_slice(&[0; 100]);
    sock.send(&longer).unwrap();
    assert!(sock.recv(&mut buf).is_err(), "echoed a foreign datagram");
    sock.send(&probe(session.token).encode()).unwrap();
    let len = sock.recv(&mut buf).expect("the echo");
    let echo = Probe::decode(&buf[..len], session.token).expect("a probe");
    assert_eq!((echo.seq, echo.client_send_ns), (3, 11));
    assert!(echo.server_recv_ns > 0 && echo.server_send_ns >= echo.server_recv_ns);
    // The server runs one test at a time, and the echo is not one.
    client_ok(&server, "127.0.0.1", &["--time", "0.3"]);
    drop(session);
}

#[test]
fn a_server_without_the_echo_refuses_under_load_before_any_probe() {
    let mut known = fperf::features::supported_names();
    known.retain(|name| name != "probe_echo");
    for (minor, features) in [(PROTOCOL_MINOR, Some(known)), (0, None)] {
        let (port, fake) = older_server("fperf 0.3.0", minor, features);
        let out = run(
            &["-c", "127.0.0.1", "-p", &port.to_string(), "--under-load"],
            Duration::from_secs(20),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains("the server (fperf 0.3.0, protocol")
                && err.contains("does not support --under-load"),
            "{err}"
        );
        let after = fake.join().unwrap();
        assert!(after.is_empty(), "the client went on: {after:?}");
    }
}
