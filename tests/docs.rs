//! The README's "coming from" tables, run as written: every fperf command they give runs
//! against a real server on loopback, within the time a reader is promised, and prints
//! its figures. The docs' links all lead somewhere. So the docs cannot drift from fperf.

mod common;
use common::*;
use regex::Regex;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The tools the README maps from, each with a table of its own.
const TOOLS: [&str; 6] = [
    "iperf3",
    "qperf",
    "sockperf",
    "neper",
    "netperf",
    "sfnettest",
];
/// What the README promises each command takes on loopback; the time it asks for must
/// leave a second or more of it for setting up.
const PROMISED: Duration = Duration::from_secs(15);
/// Past this a command is killed, and the test fails (other tests share the machine).
const BOUND: Duration = Duration::from_secs(20);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Each table of the README's "Coming from" section: the tool its header names, and the
/// fperf commands (`fperf -c HOST ...`) of its rows.
fn coming_from() -> Vec<(String, Vec<String>)> {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("Coming from"))
        .expect("a \"Coming from\" section in README.md");
    let command = Regex::new(r"`(fperf -c HOST[^`]*)`").unwrap();
    let mut tables: Vec<(String, Vec<String>)> = Vec::new();
    for line in section.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.get(2) == Some(&"fperf") {
            tables.push((cells[1].to_string(), Vec::new()));
        } else if let (Some(table), Some(fperf)) = (tables.last_mut(), cells.get(2)) {
            table
                .1
                .extend(command.captures_iter(fperf).map(|c| c[1].to_string()));
        }
    }
    tables
}

/// Runs every command of `tool`'s table against a fresh server; checks each exits 0,
/// within the time promised, and prints the figures its workload has.
fn run_rows(tool: &str) {
    let tables = coming_from();
    let names: Vec<&str> = tables.iter().map(|t| t.0.as_str()).collect();
    assert_eq!(names, TOOLS, "the README's tables, in order");
    let (_, commands) = tables.iter().find(|t| t.0 == tool).unwrap();
    assert!(
        !commands.is_empty(),
        "{tool}: no fperf command in its table"
    );
    let server = Server::start(&[]);
    let port = server.port.to_string();
    for command in commands {
        assert!(
            !command.contains(['"', '\'']),
            "{command}: quoted words cannot be run as written"
        );
        let mut args: Vec<&str> = command
            .split_whitespace()
            .skip(1)
            .map(|w| if w == "HOST" { "127.0.0.1" } else { w })
            .collect();
        args.extend(["-p", &port]);
        let asked = asked_time(command);
        assert!(
            asked + 1.0 <= PROMISED.as_secs_f64(),
            "{command}: asks for {asked} s, more than the README promises"
        );
        let start = Instant::now();
        let out = run(&args, BOUND);
        let took = start.elapsed();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let context = || {
            format!(
                "{command}\nstdout:\n{stdout}\nstderr:\n{}\nserver:\n{}{}",
                String::from_utf8_lossy(&out.stderr),
                server.stdout(),
                server.stderr()
            )
        };
        assert!(out.status.success(), "exit {:?}: {}", out.status, context());
        assert!(took <= BOUND, "took {took:?}: {}", context());
        assert_figures(command, &stdout).unwrap_or_else(|e| panic!("{e}: {}", context()));
    }
}

/// The seconds `command` asks to run for: `--time` per run, times the runs of a sweep.
/// A run bounded by volume (`-m`) or asking nothing (`--conf`) asks for none.
fn asked_time(command: &str) -> f64 {
    let words: Vec<&str> = command.split_whitespace().collect();
    let after = |flag: &str| {
        let at = words.iter().position(|w| *w == flag)?;
        words.get(at + 1).copied()
    };
    let time: f64 = after("--time").map_or(0.0, |t| t.parse().expect("--time SECS"));
    let tests = after("--tests").map_or(1, |t| t.split(',').count());
    time * (sweep_values(after("--sweep")) * tests) as f64
}

/// How many values a `--sweep NAME=LO..HI[:*K|:+K]` runs (1 without one).
fn sweep_values(spec: Option<&str>) -> usize {
    let Some(spec) = spec else { return 1 };
    let range = spec.split_once('=').expect("NAME=RANGE").1;
    let (bounds, step) = range.split_once(':').unwrap_or((range, "*2"));
    let (lo, hi) = bounds.split_once("..").expect("LO..HI");
    let number = |n: &str| match n.strip_suffix('K') {
        Some(k) => k.parse::<u64>().expect("a size") << 10,
        None => n.parse::<u64>().expect("a size"),
    };
    let (mut v, hi) = (number(lo), number(hi));
    let k: u64 = step[1..].parse().expect("a step");
    let mut count = 0;
    while v <= hi {
        count += 1;
        v = if step.starts_with('*') { v * k } else { v + k };
    }
    count
}

/// The figures a report of `command` must hold.
fn assert_figures(command: &str, stdout: &str) -> Result<(), String> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let has = |w: &str| words.contains(&w);
    let need = |ok: bool, what: &str| {
        if ok {
            Ok(())
        } else {
            Err(format!("no {what}"))
        }
    };
    if has("--conf") {
        return need(stdout.contains("cores"), "facts of both hosts");
    }
    if has("--sweep") {
        let spec = words
            .iter()
            .position(|w| *w == "--sweep")
            .map(|i| words[i + 1]);
        let sizes = sweep_values(spec);
        let rows = stdout
            .lines()
            .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
            .count();
        need(
            rows == sizes,
            &format!("{sizes} rows, one per size ({rows})"),
        )?;
        if has("--tests") {
            return need(stdout.contains("bw_Gbit/s"), "bandwidth column");
        }
        return need(stdout.contains("rtt_median"), "round-trip columns");
    }
    let volume = Regex::new(r"(?m)^(sent|received)\s*: .* in [\d.]+s\. \(bw: ").unwrap();
    need(volume.is_match(stdout), "volume and rate line")?;
    let round_trips = has("-r") || has("--echo") || has("--crr");
    let label = if round_trips { "mprtt" } else { "latency" };
    let percentiles = Regex::new(&format!(r"(?m)^{label}\s*: avg=.* p50=.* p99=")).unwrap();
    need(
        percentiles.is_match(stdout),
        &format!("{label} percentiles"),
    )?;
    if round_trips {
        need(stdout.contains("tps"), "transactions per second")?;
    }
    if has("-u") && !round_trips {
        let counts = Regex::new(r"(?m)^server\s*: received .*; lost \d+ of \d+ ").unwrap();
        need(counts.is_match(stdout), "the server's datagram counts")?;
    }
    if has("-t") {
        need(stdout.contains("Per Stream:"), "per-stream lines")?;
    }
    Ok(())
}

#[test]
fn iperf3_rows_run_as_written() {
    run_rows("iperf3");
}

#[test]
fn qperf_rows_run_as_written() {
    run_rows("qperf");
}

#[test]
fn sockperf_rows_run_as_written() {
    run_rows("sockperf");
}

#[test]
fn neper_rows_run_as_written() {
    run_rows("neper");
}

#[test]
fn netperf_rows_run_as_written() {
    run_rows("netperf");
}

#[test]
fn sfnettest_rows_run_as_written() {
    run_rows("sfnettest");
}

/// The README and every page in docs/: each relative link names a file that exists and,
/// with `#anchor`, a heading of that file.
#[test]
fn every_relative_link_resolves() {
    let mut pages = vec![root().join("README.md"), root().join("bench/README.md")];
    let docs = std::fs::read_dir(root().join("docs")).expect("docs/");
    pages.extend(
        docs.map(|e| e.expect("docs entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    let link = Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("page");
        for c in link.captures_iter(&text) {
            let target = &c[1];
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
            let path = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            if !path.exists() {
                broken.push(format!("{}: {target}: no such file", page.display()));
            } else if !anchor.is_empty() && !anchors(&path).iter().any(|a| a == anchor) {
                broken.push(format!("{}: {target}: no such heading", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The anchors GitHub gives a Markdown file's headings.
fn anchors(path: &Path) -> Vec<String> {
    if path.extension().and_then(|e| e.to_str()) != Some("md") {
        return Vec::new();
    }
    let text = std::fs::read_to_string(path).expect("linked page");
    let mut in_code = false;
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        if in_code || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim().to_lowercase();
        let slug: String = title
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.iter().filter(|s| **s == slug).count();
        seen.push(slug.clone());
        out.push(if n == 0 { slug } else { format!("{slug}-{n}") });
    }
    out
}

/// No page for users names internal runs, kernel build tags or the builds before.
#[test]
fn user_docs_speak_to_users() {
    let mut pages = vec![root().join("README.md"), root().join("bench/README.md")];
    pages.extend(
        std::fs::read_dir(root().join("docs"))
            .expect("docs/")
            .map(|e| e.expect("docs entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    let internal =
        Regex::new(r"\br\d\d\b|\brun [A-Z]\b|build before|-fc-v\d+|\bv\d{3}\b|\bseed\b|issue #?\d")
            .unwrap();
    let mut found = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("page");
        for (n, line) in text.lines().enumerate() {
            if let Some(m) = internal.find(line) {
                found.push(format!("{}:{}: {}", page.display(), n + 1, m.as_str()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "internal words in user docs:\n{}",
        found.join("\n")
    );
    let lines = |p: &str| {
        std::fs::read_to_string(root().join(p))
            .unwrap()
            .lines()
            .count()
    };
    assert!(
        lines("README.md") <= 300,
        "README.md: {} lines",
        lines("README.md")
    );
    assert!(
        lines("bench/README.md") <= 300,
        "bench/README.md: {} lines",
        lines("bench/README.md")
    );
    assert!(!root().join("docs/bench-history.md").exists());
}

/// Every option `--help` lists (of fperf, `fperf mesh` and `fperf exporter`) is on its
/// page, by its short or its long name.
#[test]
fn every_option_of_the_help_is_documented() {
    let option = Regex::new(r"(?m)^\s+(?:-(\w), )?--([a-z0-9-]+)").unwrap();
    for (command, page) in [
        (vec!["--help"], "docs/reference.md"),
        (vec!["mesh", "--help"], "docs/mesh.md"),
        (vec!["exporter", "--help"], "docs/exporter.md"),
    ] {
        let out = run(&command, Duration::from_secs(10));
        let help = String::from_utf8_lossy(&out.stdout);
        let text = std::fs::read_to_string(root().join(page)).expect("page");
        let mut missing = Vec::new();
        for c in option.captures_iter(&help) {
            let long = format!("--{}", &c[2]);
            if ["--help", "--version"].contains(&long.as_str()) {
                continue;
            }
            let named = |name: &str| {
                ["`", " ", "=", "["]
                    .iter()
                    .any(|end| text.contains(&format!("`{name}{end}")))
            };
            let short = c.get(1).map(|s| format!("-{}", s.as_str()));
            if !named(&long) && !short.is_some_and(|s| named(&s)) {
                missing.push(long);
            }
        }
        assert!(help.contains("Usage"), "{help}");
        assert!(missing.is_empty(), "{page} lacks {missing:?}");
    }
}
