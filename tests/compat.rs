//! Mixed versions, for real.
//!
//! - Every host: a peer of a newer minor, whose messages carry fields and features this
//!   build has never seen, talks to this build's server; a feature it does not know is
//!   refused before any data flows.
//! - `needs_previous_release::`: this build against the previous release, both ways
//!   (its client against this server, this client against its server) for TCP, UDP and
//!   reverse, and one mesh pair each way; a previous release without latency probes
//!   refuses `--under-load` before it starts. `scripts/compat-check.sh` builds the previous
//!   release from the repository's history (CHANGELOG.md names its commit) and runs them
//!   with `FPERF_PREVIOUS` set to its binary.

mod common;
use common::*;
use fperf::control::{self, Message, PROTOCOL_MAJOR, PROTOCOL_MINOR};
use serde_json::{json, Value};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Sends `frame` (JSON) as one control frame.
fn send_raw(sock: &mut TcpStream, body: &Value) {
    let bytes = serde_json::to_vec(body).expect("json");
    let mut frame = (bytes.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&bytes);
    std::io::Write::write_all(sock, &frame).expect("send");
}

fn newer_hello(features: &[&str]) -> Value {
    json!({
        "type": "hello",
        "version": PROTOCOL_MAJOR,
        "software": "fperf 99.0.0",
        "minor": PROTOCOL_MINOR + 7,
        "features": features,
        "a_field_of_a_newer_minor": {"nested": [1, 2, 3]},
    })
}

#[test]
fn a_newer_minor_peer_with_unknown_fields_is_welcomed_and_told_what_this_server_supports() {
    let server = Server::start(&[]);
    let t = Duration::from_secs(10);
    let mut sock = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    sock.set_read_timeout(Some(t)).expect("time-out");
    send_raw(&mut sock, &newer_hello(&["reverse"]));
    match control::read_frame(&mut sock).expect("an answer") {
        Message::Welcome {
            version,
            minor,
            features: Some(features),
            ..
        } => {
            assert_eq!((version, minor), (PROTOCOL_MAJOR, PROTOCOL_MINOR));
            assert!(features.iter().any(|f| f == "reverse"), "{features:?}");
        }
        other => panic!("not a welcome: {other:?}"),
    }
}

#[test]
fn a_feature_this_server_does_not_know_is_refused_before_any_data_naming_both_versions() {
    let server = Server::start(&[]);
    let t = Duration::from_secs(10);
    let mut sock = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    sock.set_read_timeout(Some(t)).expect("time-out");
    send_raw(&mut sock, &newer_hello(&["reverse", "teleport"]));
    assert!(matches!(
        control::read_frame(&mut sock).expect("an answer"),
        Message::Welcome { .. }
    ));
    // The settings of a newer client: a field this build does not know beside them.
    let mut settings = serde_json::to_value(control::wire::Settings::from(
        fperf::settings::Settings::default(),
    ))
    .expect("settings");
    settings["teleport_distance"] = json!(42);
    send_raw(
        &mut sock,
        &json!({"type": "settings", "settings": settings}),
    );
    match control::read_frame(&mut sock).expect("an answer") {
        Message::Error { message } => {
            let ours = format!("protocol {PROTOCOL_MAJOR}.{PROTOCOL_MINOR}");
            let theirs = format!("protocol {PROTOCOL_MAJOR}.{}", PROTOCOL_MINOR + 7);
            assert!(
                message.contains("\"teleport\"")
                    && message.contains(&ours)
                    && message.contains(&theirs)
                    && message.contains("fperf 99.0.0"),
                "{message}"
            );
        }
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn fperf_version_names_the_protocol() {
    let out = run(&["--version"], Duration::from_secs(10));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.trim(),
        format!(
            "fperf {} (protocol {PROTOCOL_MAJOR}.{PROTOCOL_MINOR})",
            env!("CARGO_PKG_VERSION")
        )
    );
}

/// The previous release's binary, from `FPERF_PREVIOUS`.
fn previous() -> PathBuf {
    let path = std::env::var_os("FPERF_PREVIOUS")
        .map(PathBuf::from)
        .expect("FPERF_PREVIOUS names the previous release's binary (scripts/compat-check.sh)");
    assert!(path.exists(), "{}", path.display());
    path
}

fn current() -> PathBuf {
    PathBuf::from(fperf_bin())
}

fn server_of(program: &Path, args: &[&str]) -> Server {
    Server::start_program(program.to_str().expect("a UTF-8 path"), args)
}

fn address(server: &Server) -> String {
    format!("127.0.0.1:{}", server.port)
}

/// Runs `program ARGS` to its end (at most 60 s); asserts it succeeded; its JSON
/// document.
fn json_of(program: &Path, args: &[&str]) -> Value {
    let bin = program.to_str().expect("a UTF-8 path");
    let out = run_program(bin, args, Duration::from_secs(60), |_| {});
    let (text, errors) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "{bin} {args:?}: {}\n{text}\n{errors}",
        out.status
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}\n{errors}"))
}

fn total(doc: &Value, side: &str, field: &str) -> u64 {
    doc[side]["total"][field]
        .as_u64()
        .unwrap_or_else(|| panic!("{side}.total.{field}: {doc:#}"))
}

/// One client of `client` against a server of `server`, both ways of every workload.
fn tests_between(client: &Path, server: &Path) {
    let s = server_of(server, &[]);
    let port = s.port.to_string();
    let base = ["-c", "127.0.0.1", "-p", port.as_str(), "--json"];
    let with =
        |more: &[&str]| -> Vec<String> { base.iter().chain(more).map(|a| a.to_string()).collect() };
    let run = |more: &[&str]| {
        let args = with(more);
        json_of(client, &args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let mib = 1 << 20;

    let tcp = run(&["-m", "8"]);
    assert_eq!(total(&tcp, "client", "bytes_sent"), 8 * mib, "TCP");
    assert_eq!(total(&tcp, "server", "bytes_received"), 8 * mib, "TCP");

    let reverse = run(&["--reverse", "-m", "8"]);
    assert_eq!(total(&reverse, "server", "bytes_sent"), 8 * mib, "reverse");
    assert_eq!(
        total(&reverse, "client", "bytes_received"),
        8 * mib,
        "reverse"
    );

    // 1 KiB datagrams divide 2 MiB: every datagram is whole.
    let udp = run(&["-u", "-l", "1024", "-m", "2", "-b", "100M"]);
    assert_eq!(total(&udp, "client", "bytes_sent"), 2 * mib, "UDP");
    let datagrams = &udp["server"]["total"]["datagrams"];
    let count = |k: &str| {
        datagrams[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k}: {udp:#}"))
    };
    assert_eq!(count("peer_sent"), 2048, "UDP: {datagrams}");
    assert_eq!(count("received") + count("lost"), 2048, "UDP: {datagrams}");
    assert_eq!(
        total(&udp, "server", "bytes_received"),
        count("received") * 1024,
        "UDP"
    );
    drop(s);
}

#[test]
#[ignore = "needs the previous release's binary: scripts/compat-check.sh"]
fn needs_previous_release_its_client_against_this_server() {
    tests_between(&previous(), &current());
}

#[test]
#[ignore = "needs the previous release's binary: scripts/compat-check.sh"]
fn needs_previous_release_this_client_against_its_server() {
    tests_between(&current(), &previous());
}

#[test]
#[ignore = "needs the previous release's binary: scripts/compat-check.sh"]
fn needs_previous_release_a_mesh_pair_each_way() {
    let key = std::env::temp_dir().join(format!("fperf-compat-{}.key", std::process::id()));
    std::fs::write(&key, "the fleet's secret").expect("key");
    let key_path = key.to_str().expect("path");
    let mesh_args = ["--allow-mesh", "--auth-key", key_path];
    let old = server_of(&previous(), &mesh_args);
    let new = server_of(&current(), &mesh_args);
    let (a, b) = (address(&old), address(&new));
    for coordinator in [current(), previous()] {
        let doc = json_of(
            &coordinator,
            &[
                "mesh",
                "--json",
                "--auth-key",
                key_path,
                "--time",
                "0.5",
                &a,
                &b,
            ],
        );
        let pairs = doc["pairs"].as_array().expect("pairs");
        assert_eq!(pairs.len(), 2, "{doc:#}");
        for pair in pairs {
            assert!(pair["error"].is_null(), "{pair:#}");
            let sent = pair["client"]["total"]["bytes_sent"]
                .as_u64()
                .expect("sent");
            let received = pair["server"]["total"]["bytes_received"]
                .as_u64()
                .expect("received");
            assert!(sent > 0 && sent == received, "{pair:#}");
        }
    }
    for server in [old, new] {
        server.wait_for(|o| o.contains("mesh test for"), Duration::from_secs(5));
    }
    let _ = std::fs::remove_file(&key);
}

/// The previous release's protocol minor, from its `--version` (`... (protocol 16.N)`).
fn previous_minor() -> u32 {
    let out = run_program(
        previous().to_str().expect("a UTF-8 path"),
        &["--version"],
        Duration::from_secs(10),
        |_| {},
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let minor = text
        .split("(protocol ")
        .nth(1)
        .and_then(|rest| rest.split(['.', ')']).nth(1))
        .and_then(|m| m.parse().ok());
    minor.unwrap_or_else(|| panic!("no protocol version in {text:?}"))
}

#[test]
#[ignore = "needs the previous release's binary: scripts/compat-check.sh"]
fn needs_previous_release_refuses_latency_under_load_before_it_starts_if_it_lacks_it() {
    let s = server_of(&previous(), &[]);
    let port = s.port.to_string();
    let bin = fperf_bin();
    let args = [
        "-c",
        "127.0.0.1",
        "-p",
        &port,
        "--under-load",
        "--phases",
        "idle:1,download:1",
        "--load-flows",
        "1",
    ];
    let out = run_program(bin, &args, Duration::from_secs(60), |_| {});
    let errors = String::from_utf8_lossy(&out.stderr).to_string();
    let minor = previous_minor();
    // Latency probe sessions came with protocol minor 3.
    if minor >= 3 {
        assert!(out.status.success(), "{errors}");
        return;
    }
    assert!(!out.status.success(), "an older server ran it: {errors}");
    let ours = format!("protocol {PROTOCOL_MAJOR}.{PROTOCOL_MINOR}");
    for needle in [
        "does not support --under-load".to_string(),
        format!("protocol {PROTOCOL_MAJOR}.{minor}"),
        ours,
    ] {
        assert!(errors.contains(&needle), "{needle:?} in {errors}");
    }
    drop(s);
}
