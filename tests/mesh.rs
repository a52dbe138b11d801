//! `fperf mesh` on loopback: real servers with `--allow-mesh` run each pair's test at
//! the coordinator's request; the matrix, its outputs, the patterns, hosts that are
//! down, and what is refused (a server without `--allow-mesh`, a wrong key, a target
//! that is not an fperf server). tests/netns_mesh.rs measures a shaped link across
//! network namespaces.

mod common;

use common::{port_block, refused, run, Server};
use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;
use std::time::Duration;

/// A key file in the temp directory, removed on drop.
struct KeyFile(PathBuf);

impl KeyFile {
    fn new(name: &str, secret: &str) -> KeyFile {
        let path =
            std::env::temp_dir().join(format!("fperf-mesh-{}-{name}.key", std::process::id()));
        std::fs::write(&path, secret).expect("write key");
        KeyFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("UTF-8 path")
    }
}

impl Drop for KeyFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A mesh server with `key`.
fn mesh_server(key: &KeyFile) -> Server {
    mesh_server_with(key, &[])
}

/// A mesh server with `key` and the options `more`.
fn mesh_server_with(key: &KeyFile, more: &[&str]) -> Server {
    let mut args = vec!["--allow-mesh", "--auth-key", key.path()];
    args.extend_from_slice(more);
    Server::start(&args)
}

fn address(server: &Server) -> String {
    format!("127.0.0.1:{}", server.port)
}

/// `fperf mesh ARGS` with `--json`: its exit status and document.
fn mesh_json(args: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let mut all = vec!["mesh", "--json"];
    all.extend_from_slice(args);
    let out = run(&all, Duration::from_secs(120));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let doc = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code(), doc, stderr)
}

/// The error the pair `from` -> `to` failed with.
fn pair_error(doc: &serde_json::Value, from: &str, to: &str) -> String {
    doc["pairs"]
        .as_array()
        .expect("pairs")
        .iter()
        .find(|p| p["from"] == from && p["to"] == to)
        .and_then(|p| p["error"].as_str())
        .unwrap_or_else(|| panic!("{from} -> {to} did not fail: {doc:#}"))
        .to_owned()
}

#[test]
fn a_json_server_prints_a_line_for_each_mesh_test_it_ran() {
    let key = KeyFile::new("json", "the mesh's secret");
    let servers: Vec<Server> = (0..2)
        .map(|_| mesh_server_with(&key, &["--json"]))
        .collect();
    let hosts: Vec<String> = servers.iter().map(address).collect();
    let mut args = vec!["--auth-key", key.path(), "--time", "0.3"];
    args.extend(hosts.iter().map(String::as_str));
    let (code, doc, stderr) = mesh_json(&args);
    assert_eq!(code, Some(0), "{stderr}");
    // Each server ran one test towards the other and served one from it.
    for (k, server) in servers.iter().enumerate() {
        let text = server.wait_for(|o| o.lines().count() >= 2, Duration::from_secs(10));
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        for line in &lines {
            let def = if line.get("mesh").is_some() {
                "server_mesh_test"
            } else {
                "server_test"
            };
            assert_valid_line(def, line);
        }
        let ran = lines
            .iter()
            .find(|l| l.get("mesh").is_some())
            .unwrap_or_else(|| panic!("no mesh test in {text}"));
        let towards = &hosts[1 - k];
        assert_eq!(ran["mesh"]["towards"], towards.as_str(), "{text}");
        assert!(ran["mesh"]["coordinator"]
            .as_str()
            .is_some_and(|c| c.starts_with("127.0.0.1:")));
        let pair = doc["pairs"]
            .as_array()
            .expect("pairs")
            .iter()
            .find(|p| p["from"] == hosts[k] && p["to"] == towards.as_str())
            .expect("the pair");
        let sent = ran["as_client"]["total"]["bytes_sent"].as_u64();
        assert!(sent > Some(0), "{text}");
        assert_eq!(sent, pair["client"]["total"]["bytes_sent"].as_u64());
        assert!(lines
            .iter()
            .any(|l| l["server"]["total"]["bytes_received"].as_u64() > Some(0)));
    }
}

/// Checks one line of `fperf -s --json` against `$defs/DEF` of the result schema.
fn assert_valid_line(def: &str, line: &serde_json::Value) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/fperf-result.schema.json"
    ))
    .expect("schema file");
    let schema: serde_json::Value = serde_json::from_str(&text).expect("schema is JSON");
    let line_schema = serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": format!("#/$defs/{def}"),
        "$defs": schema["$defs"].clone(),
    });
    let validator = jsonschema::validator_for(&line_schema).expect("schema compiles");
    let errors: Vec<String> = validator.iter_errors(line).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{def}: {errors:#?}\n{line:#}");
}

#[test]
fn every_pair_of_three_servers_is_measured_by_its_sender_and_reported_in_a_matrix() {
    let key = KeyFile::new("all", "the mesh's secret");
    let servers: Vec<Server> = (0..3).map(|_| mesh_server(&key)).collect();
    let hosts: Vec<String> = servers.iter().map(address).collect();
    let csv = std::env::temp_dir().join(format!("fperf-mesh-{}.csv", std::process::id()));
    let svg = std::env::temp_dir().join(format!("fperf-mesh-{}.svg", std::process::id()));
    let mut args = vec!["--auth-key", key.path(), "--time", "0.3"];
    args.extend(hosts.iter().map(String::as_str));
    args.extend([
        "--csv",
        csv.to_str().expect("path"),
        "--plot",
        svg.to_str().expect("path"),
    ]);
    let (code, doc, stderr) = mesh_json(&args);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(doc["hosts"], serde_json::json!(hosts));
    // Three hosts: three rounds of one pair each way, every ordered pair once.
    assert_eq!(doc["rounds"], 6);
    assert!(
        stderr.contains("round 6 of 6: 1 test at once (5 of 6 pairs done)"),
        "{stderr}"
    );
    let pairs = doc["pairs"].as_array().expect("pairs");
    assert_eq!(pairs.len(), 6);
    for (from, row) in doc["matrix"].as_array().expect("matrix").iter().enumerate() {
        for (to, cell) in row.as_array().expect("row").iter().enumerate() {
            if from == to {
                assert!(cell.is_null());
                continue;
            }
            let pair = pairs
                .iter()
                .find(|p| p["from"] == hosts[from] && p["to"] == hosts[to])
                .expect("the pair");
            // The cell is what the receiving server received, over its own time.
            let received = pair["server"]["total"]["bytes_received"]
                .as_f64()
                .expect("bytes");
            let ns = pair["server"]["total"]["duration_ns"]
                .as_f64()
                .expect("time");
            assert!(received > 0.0);
            assert_eq!(
                pair["client"]["total"]["bytes_sent"].as_f64(),
                Some(received)
            );
            let rate = cell.as_f64().expect("a rate");
            assert!((rate - received * 8.0 / (ns / 1e9)).abs() < 1.0, "{rate}");
        }
    }
    // Each sending server reported the test it ran for the coordinator.
    servers[0].wait_for(|o| o.contains("mesh test for"), Duration::from_secs(5));
    let rows = std::fs::read_to_string(&csv).expect("the CSV");
    assert_eq!(rows.lines().count(), 7, "{rows}");
    assert!(rows.starts_with("from,to,value,unit,error\n"));
    let picture = std::fs::read_to_string(&svg).expect("the heatmap");
    assert!(picture.starts_with("<svg") && picture.matches("<rect").count() > 9);
    let version = format!(
        "fperf {} mesh: received bandwidth",
        env!("CARGO_PKG_VERSION")
    );
    assert!(picture.contains(&version), "{picture}");
    for text in [
        "senders",
        "receivers",
        "Gbit/s",
        "x failed",
        hosts[2].as_str(),
    ] {
        assert!(
            picture.contains(text),
            "no {text} in the heatmap: {picture}"
        );
    }
    let _ = (std::fs::remove_file(&csv), std::fs::remove_file(&svg));

    // The text report: the matrix with each host as a row and a column.
    let mut text_args = vec![
        "mesh",
        "--auth-key",
        key.path(),
        "--time",
        "0.2",
        "-r",
        "-l",
        "64",
    ];
    text_args.extend(hosts.iter().map(String::as_str));
    let out = run(&text_args, Duration::from_secs(60));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.starts_with("Median round trip (us), senders as rows"),
        "{text}"
    );
    for host in &hosts {
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with(host.as_str()))
                .count(),
            1,
            "{text}"
        );
    }
}

#[test]
fn a_host_that_is_down_or_refuses_is_marked_and_the_rest_completes() {
    let key = KeyFile::new("down", "the mesh's secret");
    let other_key = KeyFile::new("other", "another secret");
    let (a, b) = (mesh_server(&key), mesh_server(&key));
    let plain = Server::start(&["--auth-key", key.path()]);
    let stranger = mesh_server(&other_key);
    let down = format!("127.0.0.1:{}", port_block(1));
    // Not an fperf server: it answers with another protocol's greeting.
    let impostor = TcpListener::bind("127.0.0.1:0").expect("bind");
    let impostor_addr = impostor.local_addr().expect("address").to_string();
    std::thread::spawn(move || {
        for mut conn in impostor.incoming().flatten() {
            let _ = conn.write_all(b"SSH-2.0-OpenSSH_9.2\r\n");
        }
    });
    let hosts = [
        address(&a),
        address(&b),
        address(&plain),
        down.clone(),
        impostor_addr.clone(),
        address(&stranger),
    ];
    let mut args = vec![
        "--auth-key",
        key.path(),
        "--time",
        "0.2",
        "--fail-on-outliers",
    ];
    args.extend(hosts.iter().map(String::as_str));
    let (code, doc, stderr) = mesh_json(&args);
    // Failed pairs are outliers: the exit status says so.
    assert_eq!(code, Some(1), "{stderr}");
    let (ha, hb) = (&hosts[0], &hosts[1]);
    assert!(
        doc["matrix"][0][1].as_f64().is_some_and(|v| v > 0.0),
        "{doc:#}"
    );
    assert!(
        doc["matrix"][1][0].as_f64().is_some_and(|v| v > 0.0),
        "{doc:#}"
    );
    // A server without --allow-mesh refuses to test for a coordinator.
    assert!(pair_error(&doc, &hosts[2], ha).contains("--allow-mesh"));
    // A host that is down, as the coordinator's target; not an fperf server; a wrong
    // key: the coordinator, which named them, hears why.
    assert!(pair_error(&doc, &down, ha).contains("cannot connect"));
    let not_fperf = "does not speak fperf's protocol";
    assert!(pair_error(&doc, &impostor_addr, ha).contains(not_fperf));
    assert!(pair_error(&doc, &hosts[5], ha).contains("authentication"));
    // The same as the peer a server tests towards: the coordinator hears the same of
    // each, or a key holder could scan ports through a server.
    let towards = |from: &str, to: &str| pair_error(&doc, from, to).replace(to, "PEER");
    let alike = towards(ha, &down);
    assert!(
        alike.contains("no fperf server with this server's key answered there"),
        "{alike}"
    );
    assert_eq!(towards(hb, &impostor_addr), alike.replace(ha, hb));
    assert_eq!(towards(ha, &hosts[5]), alike);
    let outliers = doc["outliers"].as_array().expect("outliers");
    assert!(outliers.iter().any(|o| o["from"] == down.as_str()
        && o["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("failed"))));
    assert!(doc["matrix"][3][0].is_null());
    assert!(stderr.contains("failed"), "{stderr}");
}

/// A pair that fails makes the exit status 1, without --fail-on-outliers, and stderr
/// counts the failed pairs.
#[test]
fn a_mesh_with_a_failed_pair_exits_1_and_counts_them() {
    let key = KeyFile::new("count", "the mesh's secret");
    let (a, b) = (mesh_server(&key), mesh_server(&key));
    // A loopback port nobody listens on.
    let down = format!("127.0.0.1:{}", port_block(1));
    let (ha, hb) = (address(&a), address(&b));
    let args = ["--auth-key", key.path(), "--time", "0.2", &ha, &hb, &down];
    let (code, doc, stderr) = mesh_json(&args);
    assert_eq!(code, Some(1), "{stderr}");
    // Towards the host that is down and from it: 4 of the 6 ordered pairs.
    assert!(
        stderr.contains("fperf mesh: 4 of 6 pairs failed"),
        "{stderr}"
    );
    assert!(
        doc["matrix"][0][1].as_f64().is_some_and(|v| v > 0.0),
        "{doc:#}"
    );
    // Without it, the same servers' mesh exits 0.
    let (code, _, stderr) = mesh_json(&["--auth-key", key.path(), "--time", "0.2", &ha, &hb]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("pairs failed"), "{stderr}");
}

#[test]
fn ring_incast_and_one_to_all_measure_their_pairs_only() {
    let key = KeyFile::new("patterns", "the mesh's secret");
    // An incast's receiver takes its senders' tests at once.
    let servers: Vec<Server> = (0..4)
        .map(|_| mesh_server_with(&key, &["--parallel", "2"]))
        .collect();
    let hosts: Vec<String> = servers.iter().map(address).collect();
    let measured = |pattern: &str| -> Vec<(usize, usize)> {
        let mut args = vec![
            "--auth-key",
            key.path(),
            "--time",
            "0.2",
            "--pattern",
            pattern,
        ];
        args.extend(hosts.iter().map(String::as_str));
        let (code, doc, stderr) = mesh_json(&args);
        assert_eq!(code, Some(0), "{pattern}: {stderr}");
        let mut cells = Vec::new();
        for (from, row) in doc["matrix"].as_array().expect("matrix").iter().enumerate() {
            for (to, cell) in row.as_array().expect("row").iter().enumerate() {
                if cell.as_f64().is_some_and(|v| v > 0.0) {
                    cells.push((from, to));
                }
            }
        }
        cells
    };
    assert_eq!(measured("ring"), vec![(0, 1), (1, 2), (2, 3), (3, 0)]);
    let incast = measured("incast:2");
    assert_eq!(incast.len(), 8);
    assert!(incast.contains(&(1, 0)) && incast.contains(&(2, 0)) && !incast.contains(&(3, 0)));
    let one = format!("one-to-all:{}", hosts[2]);
    assert_eq!(measured(&one), vec![(2, 0), (2, 1), (2, 3)]);
}

#[test]
fn the_coordinator_and_the_server_refuse_what_cannot_work_before_any_test() {
    let key = KeyFile::new("flags", "the mesh's secret");
    refused(
        &["mesh", "--auth-key", key.path(), "h1"],
        "at least two servers",
    );
    refused(&["mesh", "h1", "h2"], "--auth-key");
    refused(
        &["mesh", "--auth-key", key.path(), "h1", "h1"],
        "given twice",
    );
    refused(
        &[
            "mesh",
            "--auth-key",
            key.path(),
            "--pattern",
            "incast:2",
            "h1",
            "h2",
        ],
        "incast:K",
    );
    refused(&["-s", "--allow-mesh"], "--allow-mesh needs --auth-key");
    refused(&["-c", "h", "--allow-mesh"], "server option");
    // The host file: one per line, comments and blank lines left out.
    let file = std::env::temp_dir().join(format!("fperf-mesh-{}.hosts", std::process::id()));
    std::fs::write(&file, "# the servers\nh1\n\n h2:5000  # the second\n").expect("host file");
    let out = run(
        &[
            "mesh",
            "--auth-key",
            key.path(),
            "--hostfile",
            file.to_str().expect("path"),
            "--pattern",
            "one-to-all:h3",
        ],
        Duration::from_secs(10),
    );
    let _ = std::fs::remove_file(&file);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("h3 is not one of the hosts"), "{err}");
}

#[test]
fn congestion_control_segment_size_pacing_and_socket_buffers_reach_every_pair() {
    let key = KeyFile::new("tcp-options", "the mesh's secret");
    let servers = [mesh_server(&key), mesh_server(&key)];
    let hosts: Vec<String> = servers.iter().map(address).collect();
    let mut args = vec![
        "--auth-key",
        key.path(),
        "--time",
        "1",
        "-C",
        "reno",
        "--fq-rate",
        "40M",
        "-M",
        "1000",
        "-w",
        "16K",
    ];
    args.extend(hosts.iter().map(String::as_str));
    let (code, doc, stderr) = mesh_json(&args);
    assert_eq!(code, Some(0), "{stderr}");
    let pairs = doc["pairs"].as_array().expect("pairs");
    assert_eq!(pairs.len(), 2, "{doc:#}");
    for pair in pairs {
        for side in ["client", "server"] {
            let stream = &pair[side]["streams"][0];
            assert_eq!(stream["congestion"], "reno", "{side}: {pair:#}");
        }
        // The segment size in force keeps to -M (less any TCP options).
        let mss = pair["client"]["streams"][0]["figures"]["tcp"]["mss"]
            .as_u64()
            .expect("mss");
        assert!((900..=1000).contains(&mss), "mss {mss}: {pair:#}");
        // The receiving server's 16K buffer bounds the window it offers the sender.
        let window = pair["client"]["streams"][0]["figures"]["tcp"]["snd_wnd_bytes"]
            .as_u64()
            .expect("window");
        assert!(window <= 32 << 10, "window {window}: {pair:#}");
        let received = pair["server"]["total"]["bytes_received"]
            .as_f64()
            .expect("bytes");
        let ns = pair["server"]["total"]["duration_ns"].as_f64().expect("ns");
        let mbit = received * 8.0 / ns * 1e3;
        assert!((20.0..=48.0).contains(&mbit), "{mbit} Mbit/s: {pair:#}");
    }
    // TCP's options with UDP, and a window of nothing, are refused before any test.
    for (bad, why) in [
        (vec!["-u", "-C", "reno"], "cannot be used with"),
        (vec!["-u", "--fq-rate", "10M"], "cannot be used with"),
        (vec!["-M", "10"], "between 88 and 32767"),
        (vec!["-w", "0"], "--window must be between"),
    ] {
        let mut all = vec!["mesh", "--auth-key", key.path()];
        all.extend(bad.iter().copied());
        all.extend(hosts.iter().map(String::as_str));
        refused(&all, why);
    }
}

#[test]
fn the_sending_servers_limits_bound_the_tests_it_runs_for_a_coordinator() {
    let key = KeyFile::new("limits", "the mesh's secret");
    let open = mesh_server(&key);
    let capped = Server::start(&[
        "--allow-mesh",
        "--auth-key",
        key.path(),
        "--max-mb",
        "20",
        "--max-streams",
        "2",
    ]);
    let (a, b) = (address(&capped), address(&open));
    // A 2-second test over loopback moves far more than 20 MB: stopped on the way.
    let (_, doc, stderr) = mesh_json(&["--auth-key", key.path(), "--time", "2", &a, &b]);
    let why = pair_error(&doc, &a, &b);
    assert!(
        why.contains("went past this server's --max-mb (20 MB)"),
        "{why}\n{stderr}"
    );
    // As the receiving server, it applies the limit as to any client.
    assert!(pair_error(&doc, &b, &a).contains("--max-mb"));
    // More streams than the server allows: refused before any data.
    let (_, doc, _) = mesh_json(&["--auth-key", key.path(), "--time", "0.2", "-t", "3", &a, &b]);
    assert!(pair_error(&doc, &a, &b).contains("streams"));
}

#[test]
fn dash_4_and_dash_6_keep_the_coordinators_and_the_senders_connections_to_one_family() {
    let key = KeyFile::new("family", "the mesh's secret");
    let servers: Vec<Server> = (0..2)
        .map(|_| mesh_server_with(&key, &["--json"]))
        .collect();
    let ports = [servers[0].port, servers[1].port];
    // Each mesh run adds two lines to each server: the test it ran, the one it served.
    let mesh_line = |k: usize, lines: usize| -> serde_json::Value {
        let text = servers[k].wait_for(|o| o.lines().count() >= lines, Duration::from_secs(10));
        text.lines()
            .rev()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| panic!("{e}: {l}"))
            })
            .find(|l| l.get("mesh").is_some())
            .unwrap_or_else(|| panic!("no mesh test in {text}"))
    };
    let mesh = |flag: &str, hosts: [String; 2]| {
        let args = [
            "--auth-key",
            key.path(),
            "--time",
            "0.3",
            flag,
            &hosts[0],
            &hosts[1],
        ];
        mesh_json(&args)
    };

    // Each server's latest mesh test went to the other server at `ip`, and came from a
    // coordinator at `ip`.
    let over = |ip: &str, lines: usize| {
        for k in 0..2 {
            let ran = mesh_line(k, lines);
            let towards = format!("{ip}:{}", ports[1 - k]);
            assert_eq!(ran["mesh"]["towards"], towards, "{ran}");
            let coordinator = ran["mesh"]["coordinator"].as_str().unwrap_or_default();
            assert!(coordinator.starts_with(&format!("{ip}:")), "{ran}");
        }
    };
    // -6: the coordinator reaches each server over IPv6, and the sender the receiver.
    let (code, _, stderr) = mesh("-6", ports.map(|p| format!("[::1]:{p}")));
    assert_eq!(code, Some(0), "{stderr}");
    over("[::1]", 2);
    // -4 with names: the sender is handed the receiver's IPv4 address, not its name.
    let (code, _, stderr) = mesh("-4", ports.map(|p| format!("localhost:{p}")));
    assert_eq!(code, Some(0), "{stderr}");
    over("127.0.0.1", 4);

    // -6 with a name that has no IPv6 address: every pair fails and says why.
    let hosts = ports.map(|p| format!("localhost:{p}"));
    let (code, doc, stderr) = mesh("-6", hosts.clone());
    if common::localhost_has_ipv6() {
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(
            mesh_line(0, 6)["mesh"]["towards"],
            format!("[::1]:{}", ports[1])
        );
    } else {
        assert_ne!(code, Some(0), "{doc:#}");
        for (from, to) in [(0, 1), (1, 0)] {
            let error = pair_error(&doc, &hosts[from], &hosts[to]);
            assert!(error.contains("no IPv6 address"), "{error}");
        }
    }

    // An address of the other family is refused before any test.
    let v6 = format!("[::1]:{}", ports[0]);
    let v4 = format!("127.0.0.1:{}", ports[1]);
    refused(
        &["mesh", "--auth-key", key.path(), "-4", &v6, &v4],
        "-4 asks for IPv4 alone, and the host ::1 is an IPv6 address",
    );
    refused(
        &["mesh", "--auth-key", key.path(), "-6", &v6, &v4],
        "-6 asks for IPv6 alone, and the host 127.0.0.1 is an IPv4 address",
    );
}

#[test]
fn a_servers_error_cannot_add_lines_or_escapes_to_the_mesh_output() {
    let key = KeyFile::new("forger", "the mesh's secret");
    let honest = mesh_server(&key);
    // Answers every connection's first frame with an error full of escapes and lines.
    let forger = TcpListener::bind("127.0.0.1:0").expect("bind");
    let forger_addr = forger.local_addr().expect("address").to_string();
    std::thread::spawn(move || {
        for mut conn in forger.incoming().flatten() {
            let mut len = [0u8; 4];
            if std::io::Read::read_exact(&mut conn, &mut len).is_err() {
                continue;
            }
            let mut body = vec![0u8; u32::from_be_bytes(len).min(1 << 16) as usize];
            let _ = std::io::Read::read_exact(&mut conn, &mut body);
            let error = serde_json::json!({"type": "error",
                "message": "x\u{1b}[2J\nfperf mesh: 10.0.0.1:1 -> 10.0.0.2:1 failed: forged"});
            let body = error.to_string();
            let _ = conn.write_all(&(body.len() as u32).to_be_bytes());
            let _ = conn.write_all(body.as_bytes());
        }
    });
    let hosts = [forger_addr.clone(), address(&honest)];
    let (_, doc, stderr) = mesh_json(&[
        "--auth-key",
        key.path(),
        "--time",
        "0.2",
        &hosts[0],
        &hosts[1],
    ]);
    let error = pair_error(&doc, &hosts[0], &hosts[1]);
    assert!(
        error.contains("x\\u{1b}[2J\\nfperf mesh: 10.0.0.1:1 -> 10.0.0.2:1 failed: forged"),
        "{error}"
    );
    assert!(!stderr.contains('\x1b'), "{stderr}");
    assert!(
        !stderr
            .lines()
            .any(|l| l.starts_with("fperf mesh: 10.0.0.1:1")),
        "{stderr}"
    );
}

/// A mesh of more hosts or tests than a coordinator keeps in bounded memory is refused
/// at once, with the bound named, before any pair is made.
#[test]
fn a_mesh_too_large_to_keep_is_refused_at_once() {
    let key = KeyFile::new("huge", "the mesh's secret");
    let file = std::env::temp_dir().join(format!("fperf-mesh-{}-huge.hosts", std::process::id()));
    let mut text = String::new();
    for i in 0..10_000u32 {
        text.push_str(&format!("127.0.{}.{}:5201\n", i / 250, 1 + i % 250));
    }
    std::fs::write(&file, text).expect("write hosts");
    let hostfile = file.to_str().expect("UTF-8 path");
    for pattern in ["all-pairs", "ring"] {
        let started = std::time::Instant::now();
        let out = run(
            &[
                "mesh",
                "--auth-key",
                key.path(),
                "--pattern",
                pattern,
                "--hostfile",
                hostfile,
            ],
            Duration::from_secs(30),
        );
        let took = started.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{pattern}: {err}");
        assert!(
            err.contains("a mesh measures at most 1024 hosts, not 10000"),
            "{pattern}: {err}"
        );
        assert!(took < Duration::from_secs(3), "{pattern}: took {took:?}");
    }
    // Within the hosts, too many tests: all-pairs of 200 hosts is 39,800.
    let mut text = String::new();
    for i in 0..200u32 {
        text.push_str(&format!("127.0.0.{}:5201\n", 1 + i));
    }
    std::fs::write(&file, text).expect("write hosts");
    let out = run(
        &["mesh", "--auth-key", key.path(), "--hostfile", hostfile],
        Duration::from_secs(30),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("at most 16384 tests, and this pattern makes 39800 among 200 hosts"),
        "{err}"
    );
    let _ = std::fs::remove_file(&file);
}
