//! `fperf mesh --under-load` on loopback: three real servers with `--allow-mesh`, each
//! running the phases of latency under load towards the others at the coordinator's
//! request, one pair at a time; the matrices of the added delay and each pair's phases
//! in the JSON, the text and the CSV.

mod common;

use common::{run, Server};
use std::path::PathBuf;
use std::time::Duration;

/// A file in the temp directory, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        let path = std::env::temp_dir().join(format!(
            "fperf-mesh-under-load-{}-{name}",
            std::process::id()
        ));
        std::fs::write(&path, text).expect("write the file");
        TempFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("UTF-8 path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `fperf mesh ARGS`: its exit status, stdout and stderr.
fn mesh(args: &[&str]) -> (Option<i32>, String, String) {
    let mut all = vec!["mesh"];
    all.extend_from_slice(args);
    let out = run(&all, Duration::from_secs(180));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_pair_runs_every_phase_and_the_added_delay_is_a_matrix() {
    let key = TempFile::new("key", "the mesh's secret");
    let csv = TempFile::new("pairs.csv", "");
    let servers: Vec<Server> = (0..3)
        .map(|_| Server::start(&["--allow-mesh", "--auth-key", key.path()]))
        .collect();
    let hosts: Vec<String> = servers
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port))
        .collect();
    let mut args = vec![
        "--auth-key",
        key.path(),
        "--under-load",
        "--phases",
        "idle:1,download:1,upload:1",
        "--load-flows",
        "2",
        "--json",
        "--csv",
        csv.path(),
    ];
    args.extend(hosts.iter().map(String::as_str));
    let (code, stdout, stderr) = mesh(&args);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let doc: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    // One pair at a time: a round per pair.
    assert_eq!(doc["rounds"], 6, "{doc:#}");
    assert_eq!(
        doc["phase"], "download",
        "no bidir: download's is the headline"
    );
    let pairs = doc["pairs"].as_array().expect("pairs");
    assert_eq!(pairs.len(), 6);
    for pair in pairs {
        assert!(pair.get("error").is_none(), "{pair:#}");
        let phases = pair["phases"].as_array().expect("phases");
        let names: Vec<&str> = phases.iter().filter_map(|p| p["name"].as_str()).collect();
        assert_eq!(names, ["idle", "download", "upload"], "{pair:#}");
        for phase in phases {
            let rtt = &phase["rtt"];
            let order: Vec<u64> = ["min_ns", "p50_ns", "p90_ns", "p99_ns", "max_ns"]
                .iter()
                .map(|k| rtt[k].as_u64().unwrap_or_else(|| panic!("{k}: {phase:#}")))
                .collect();
            assert!(order.windows(2).all(|w| w[0] <= w[1]), "{phase:#}");
            assert!(order[4] < 1_000_000_000, "a round trip over 1 s: {phase:#}");
            // Loopback drops no probe (100 per phase at one every 10 ms).
            assert_eq!(phase["probes_lost"], 0, "{phase:#}");
            assert_eq!(phase["probe_loss"], 0.0, "{phase:#}");
            assert!(phase["probes_sent"].as_u64() >= Some(80), "{phase:#}");
            assert!(
                phase["rpm"].as_f64().is_some_and(f64::is_finite),
                "{phase:#}"
            );
            assert!(phase["added_delay_ns"].as_i64().is_some(), "{phase:#}");
            let (up, down) = (
                phase["up_bits_per_second"].as_f64().expect("up"),
                phase["down_bits_per_second"].as_f64().expect("down"),
            );
            match phase["name"].as_str() {
                Some("idle") => {
                    assert_eq!((up, down), (0.0, 0.0), "{phase:#}");
                    assert_eq!(phase["added_delay_ns"], 0);
                }
                // Loopback carries well over 100 Mbit/s even in a debug build.
                Some("download") => assert!(down > 1e8 && up == 0.0, "{phase:#}"),
                _ => assert!(up > 1e8 && down == 0.0, "{phase:#}"),
            }
        }
    }
    // The matrices: the headline's, and one per loaded phase, null on the diagonal.
    for matrix in [
        &doc["matrix"],
        &doc["added_delay"]["download"],
        &doc["added_delay"]["upload"],
    ] {
        for (from, row) in matrix.as_array().expect("rows").iter().enumerate() {
            for (to, cell) in row.as_array().expect("cells").iter().enumerate() {
                assert_eq!(cell.is_null(), from == to, "{matrix}");
            }
        }
    }
    assert_eq!(doc["matrix"], doc["added_delay"]["download"]);
    let rows = std::fs::read_to_string(&csv.0).expect("the CSV");
    assert_eq!(rows.lines().count(), 1 + 6 * 3, "{rows}");
    assert!(rows.starts_with("from,to,phase,rtt_p50_ns,"), "{rows}");

    // The text: a matrix of each loaded phase's added delay, in ms.
    let mut text_args = vec![
        "--auth-key",
        key.path(),
        "--under-load",
        "--phases",
        "idle:0.5,bidir:0.5",
        "--load-flows",
        "1",
    ];
    text_args.extend(hosts[..2].iter().map(String::as_str));
    let (code, stdout, stderr) = mesh(&text_args);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with("Delay added under bidir load (ms), senders as rows"),
        "{stdout}"
    );
    assert!(
        stdout.contains("2 pairs one at a time, 1.0 s of phases each"),
        "{stdout}"
    );
    let row = stdout
        .lines()
        .find(|l| l.starts_with(hosts[0].as_str()))
        .unwrap_or_else(|| panic!("no row of {}: {stdout}", hosts[0]));
    let cells: Vec<&str> = row.split_whitespace().skip(1).collect();
    assert_eq!(cells[0], "-", "{stdout}");
    assert!(cells[1].parse::<f64>().is_ok(), "{stdout}");
}

#[test]
fn what_a_mesh_under_load_cannot_run_is_refused_before_it_starts() {
    let key = TempFile::new("refusals", "the mesh's secret");
    let base = ["--auth-key", key.path(), "127.0.0.1:9", "127.0.0.1:10"];
    for (more, says) in [
        (&["--under-load", "--phases", "download:1"][..], "idle one"),
        (
            &["--under-load", "--phases", "idle:1,upload:1,idle:1"][..],
            "at most once",
        ),
        (&["--under-load", "-u"][..], "cannot be used with"),
        (
            &["--under-load", "--pattern", "incast:1"][..],
            "one pair at a time",
        ),
        (&["--phases", "idle:1,upload:1"][..], "--under-load"),
    ] {
        let mut args = base.to_vec();
        args.extend_from_slice(more);
        let (code, stdout, stderr) = mesh(&args);
        assert_ne!(code, Some(0), "{more:?}: {stdout}");
        assert!(stderr.contains(says), "{more:?}: {stderr}");
    }
}
