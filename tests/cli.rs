//! The command line: help, and invalid combinations refused before anything starts with
//! one clear line and a non-zero exit status.

mod common;
use common::*;
use std::time::Duration;

fn refused(args: &[&str], needle: &str) {
    let out = run(args, Duration::from_secs(10));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} was accepted");
    assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
    assert_eq!(
        err.trim().lines().count(),
        1,
        "{args:?}: not one line:\n{err}"
    );
    assert!(err.contains(needle), "{args:?}: '{needle}' not in: {err}");
}

#[test]
fn iperf3_habits_get_fperfs_spelling_and_flag_errors_exit_2() {
    for (args, want) in [
        (vec!["-P", "4"], "fperf's streams are -t 4"),
        (vec!["-S", "0x10"], "fperf's is --tos 0x10"),
        (vec!["-P8"], "-t 8"),
        (vec!["-J"], "--json"),
        (vec!["-f", "m"], "MB and GB"),
        (vec!["-t", "10s"], "did you mean --time 10?"),
        (vec!["-t", "2m"], "did you mean --time 120?"),
        (vec!["-O", "2"], "fperf's is --omit 2"),
        (vec!["-N"], "fperf's is -d (--nodelay)"),
        (vec!["-Z"], "fperf's is --zerocopy"),
        (vec!["-A", "1"], "fperf's is --cpu 1"),
        (vec!["-A", "0,1"], "fperf's is --cpu 0 --server-cpu 1"),
        (vec!["-k", "100"], "-m MB, or for --time seconds"),
        (
            vec!["--get-server-output"],
            "reports the server's figures anyway",
        ),
        (
            vec!["-n", "10M"],
            "iperf3's -n (bytes to send) is -m, MB per stream: -m 10",
        ),
        (vec!["-n1G"], "-m 1024"),
        (vec!["--rcv-timeout", "2500"], "fperf's is --idle-timeout 3"),
        (vec!["--snd-timeout=500"], "fperf's is --idle-timeout 1"),
        (
            vec!["--server-bitrate-limit", "1G"],
            "fperf's is --max-rate 1G",
        ),
        (
            vec!["--forceflush"],
            "each line of its report as it is made",
        ),
        (vec!["--daemon"], "systemctl enable --now fperf"),
        (
            vec!["-B", "10.0.0.2%eth1"],
            "fperf's is -B 10.0.0.2 --bind-dev eth1",
        ),
        (vec!["-n", "500K"], "in whole MB"),
        (
            vec!["--bytes", "10M"],
            "fperf's is -m, MB per stream: -m 10",
        ),
        (vec!["--bytes=1000"], "in whole MB"),
        (vec!["--blockcount", "10"], "-m MB, or for --time seconds"),
        (vec!["--format", "m"], "MB and GB"),
        (vec!["--format=g"], "MB and GB"),
        (
            vec!["-V"],
            "more detail is always on here: the header names the settings in force",
        ),
        (vec!["-V"], "(-V alone prints fperf's version)"),
        (vec!["--verbose"], "--verbose is iperf3's; its more detail"),
        (vec!["--debug"], "--debug is iperf3's; its more detail"),
        (vec!["--udp-counters-64bit"], "always 64 bits"),
        (vec!["-t", "0"], "nstreams"),
        (vec!["-u", "-d"], "TCP option"),
        (vec!["--max-mb", "5"], "server option"),
    ] {
        let mut all = vec!["-c", "127.0.0.1", "-p", "1"];
        all.extend_from_slice(&args);
        let out = run(&all, Duration::from_secs(10));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: '{want}' not in {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    // iperf3's long forms of options fperf has are accepted as they are.
    let out = run(
        &["--loopback", "--length", "1K", "--version6", "-m", "1"],
        Duration::from_secs(20),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text.contains("=> [::1]:") && text.contains("pkt_size=1024B"),
        "{text}"
    );
    let out = run(
        &[
            "--loopback",
            "--no-delay",
            "--version4",
            "-m",
            "1",
            "--json",
        ],
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json");
    assert_eq!(doc["settings"]["nodelay"], true, "{doc}");
    // iperf3's daemon flag, given to a server, where fperf's -D names an RDMA device.
    let out = run(&["-s", "-p", "1", "-D"], Duration::from_secs(10));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("-D is iperf3's daemon mode"), "{err}");
    // A failed run (nothing listens on port 1) exits 1.
    let out = run(
        &["-c", "127.0.0.1", "-p", "1", "-t", "10"],
        Duration::from_secs(10),
    );
    assert_eq!(out.status.code(), Some(1));
}

/// A server runs each test as its client describes it: an option that describes a test,
/// given to a server, is refused by name rather than ignored.
#[test]
fn options_that_describe_a_test_are_refused_by_a_server() {
    for (args, name) in [
        (&["-t", "4"][..], "-t/--nstreams"),
        (&["-u"], "-u/--udp"),
        (&["-l", "1000"], "-l/--pktsize"),
        (&["-r"], "-r/--mprtt"),
        (&["--reverse"], "--reverse"),
        (&["--cpu", "0"], "--cpu"),
        (&["--sched", "normal"], "--sched"),
        (&["-C", "cubic"], "-C/--congestion"),
        (&["-w", "1M"], "-w/--window"),
        (&["--table", "sfnt"], "--table"),
        (&["--iperf3"], "--iperf3"),
    ] {
        let mut all = vec!["-s", "-p", "1"];
        all.extend_from_slice(args);
        let out = run(&all, Duration::from_secs(10));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(&format!("{name} describes a test")) && err.contains("client (-c)"),
            "{args:?}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

#[test]
fn invalid_combinations_are_refused() {
    refused(&["-s", "-c", "127.0.0.1"], "cannot be used with");
    refused(&[], "required");
    refused(&["-c", "127.0.0.1", "-q", "2"], "qtype");
    refused(&["-c", "127.0.0.1", "-l", "0"], "pktsize");
    refused(&["-c", "127.0.0.1", "-n", "0"], "nsockets");
    refused(&["-c", "127.0.0.1", "-n", "101"], "nsockets");
    refused(&["-c", "127.0.0.1", "-t", "0"], "nstreams");
    refused(&["-c", "127.0.0.1", "-m", "0"], "--mb");
    refused(&["-c", "127.0.0.1", "-D", "mlx5_0"], "--rdma");
    refused(&["-c", "127.0.0.1", "-u", "-R"], "cannot be used with");
    refused(&["-c", "127.0.0.1", "-l", "x"], "invalid value");
    refused(
        &["-c", "127.0.0.1", "-u", "-d"],
        "--nodelay is a TCP option; it cannot be used with UDP",
    );
    refused(
        &["-c", "127.0.0.1", "-u", "-d", "-a"],
        "--nodelay and --quickack are TCP options; they cannot be used with UDP",
    );
    refused(&["-c", "127.0.0.1", "-u", "-C", "cubic"], "TCP option");
    refused(&["-c", "127.0.0.1", "-C", "cubic;reno"], "algorithm name");
    refused(&["-c", "127.0.0.1", "-u", "--rcvlowat", "1"], "TCP option");
    for lowat in ["0", "67108865"] {
        refused(
            &["-c", "127.0.0.1", "--rcvlowat", lowat],
            "--rcvlowat must be between 1 byte and 67108864 bytes (64M)",
        );
    }
    refused(
        &["-c", "127.0.0.1", "-r", "--rcvlowat", "1"],
        "bulk receiving",
    );
    refused(
        &["-c", "127.0.0.1", "-u", "--crr"],
        "--crr is a TCP workload",
    );
    refused(
        &["-c", "127.0.0.1", "-R", "--reverse"],
        "--reverse is implemented for TCP and UDP only",
    );
    refused(
        &["-c", "127.0.0.1", "-r", "--reverse"],
        "--reverse turns bulk sending around",
    );
    refused(
        &["-c", "127.0.0.1", "-R", "--bidir"],
        "--bidir is implemented for TCP and UDP only",
    );
    for flag in ["--reverse", "-r", "--crr", "--echo"] {
        refused(
            &["-c", "127.0.0.1", "--bidir", flag],
            &format!("--bidir runs bulk both ways; it cannot be used with {flag}"),
        );
    }
    refused(
        &["-c", "127.0.0.1", "--bidir", "-t", "129"],
        "-t must be at most 128",
    );
    refused(
        &["-c", "127.0.0.1", "--bidir", "--sweep", "mb=1,2"],
        "cannot be used with",
    );
    for (flag, value) in [
        ("-n", "2"),
        ("--echo", ""),
        ("-w", "1M"),
        ("--busy-poll", ""),
    ] {
        let mut args = vec!["-c", "127.0.0.1", "--crr", flag];
        args.extend((!value.is_empty()).then_some(value));
        refused(&args, &format!("it cannot be used with {flag}"));
    }
    refused(&["-c", "127.0.0.1", "-u", "--skip-rx-copy"], "TCP option");
    refused(
        &["-c", "127.0.0.1", "-u", "--io-uring"],
        "--io-uring is a TCP option; it cannot be used with UDP",
    );
    refused(
        &["-c", "127.0.0.1", "--io-uring", "--zerocopy"],
        "--io-uring and --zerocopy are two ways to send",
    );
    refused(
        &["-c", "127.0.0.1", "--crr", "--io-uring"],
        "it cannot be used with --io-uring",
    );
    refused(
        &["-c", "127.0.0.1", "-R", "--epoll"],
        "--epoll is a TCP and UDP option; it cannot be used with RDMA",
    );
    for other in ["--busy-poll", "--io-uring"] {
        refused(
            &["-c", "127.0.0.1", "--epoll", other],
            "cannot be used with",
        );
    }
    refused(
        &["-c", "127.0.0.1", "--crr", "--epoll"],
        "it cannot be used with --epoll",
    );
    refused(
        &["-c", "127.0.0.1", "-R", "-w", "64K"],
        "cannot be used with RDMA",
    );
    for window in ["0", "257M"] {
        refused(
            &["-c", "127.0.0.1", "-w", window],
            "--window must be between 1 byte",
        );
    }
    refused(
        &["-c", "127.0.0.1", "-r", "--skip-rx-copy"],
        "bulk receiving",
    );
    refused(
        &["-c", "127.0.0.1", "-C", "a_name_far_too_long"],
        "algorithm name",
    );
    refused(
        &["-c", "127.0.0.1", "-u", "-l", "65528"],
        "one UDP datagram",
    );
    refused(&["-c", "127.0.0.1", "-u", "-l", "65508"], "over IPv4");
    refused(&["-c", "127.0.0.1", "--ack-timeout", "50"], "-u -r");
    refused(&["-c", "127.0.0.1", "-u", "--ack-timeout", "50"], "-u -r");
    refused(
        &["-c", "127.0.0.1", "-u", "-r", "--ack-timeout", "0"],
        "--ack-timeout",
    );
    // Port 0 would listen on a port nobody is told, or connect nowhere.
    for args in [&["-s", "-p", "0"][..], &["-c", "::1", "-p", "0"]] {
        refused(args, "0 is not in 1..=65535");
    }
    // The mesh's missing key is named too, on a line of its own.
    common::refused(&["mesh", "-p", "0", "a", "b"], "0 is not in 1..=65535");
    refused(&["-s", "--iperf3-port", "0"], "0 is not in 1..=65535");
    // A CPU this host lacks (no test machine has 1024) is refused before connecting,
    // with the CPUs it has; --loopback's server runs here too.
    refused(
        &["-c", "127.0.0.1", "--cpu", "0,1023"],
        "--cpu names CPU 1023, but this host lets fperf run on CPUs 0",
    );
    refused(
        &["--loopback", "--server-cpu", "1023"],
        "--server-cpu names CPU 1023, but this host lets fperf run on CPUs 0",
    );
    refused(
        &["-c", "127.0.0.1", "--sweep", "mb=0..4"],
        "cannot start at 0, which stays 0",
    );
    // A number that does not parse is named in users' words, not Rust's.
    refused(
        &["-c", "127.0.0.1", "-t", "abc"],
        "invalid value 'abc' for '--nstreams <N>': not a whole number",
    );
    refused(
        &["-s", "--idle-timeout", "0.5"],
        "'0.5' for '--idle-timeout <SECS>': not a whole number",
    );
    refused(
        &["-c", "127.0.0.1", "-m", "99999999999999999999"],
        "too large a number",
    );
}

#[test]
fn a_stream_port_beyond_65535_is_named_with_what_to_lower() {
    let out = run(
        &["--loopback", "-p", "65535", "-t", "2", "--time", "1"],
        Duration::from_secs(10),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        out.stdout.is_empty(),
        "no report, not even blank lines: {out:?}"
    );
    // The in-process server logs it too: the client's own line comes last.
    assert_eq!(
        err.trim().lines().last(),
        Some(
            "fperf: error: server: a stream needs port 65536, beyond 65535: lower --port or \
             --nstreams"
        ),
        "{err}"
    );
}

#[test]
fn help_explains_every_flag() {
    let out = run(&["--help"], Duration::from_secs(10));
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "-s, --server",
        "-c, --client",
        "-t, --nstreams",
        "-n, --nsockets",
        "-u, --udp",
        "-R, --rdma",
        "-D, --rdmadev",
        "-m, --mb",
        "-r, --mprtt",
        "-l, --pktsize",
        "-q, --qtype",
        "-d, --nodelay",
        "-a, --quickack",
        "-h, --help",
        "-p, --port",
        "-B, --bind",
        "-b, --bitrate",
        "--ack-timeout",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
}

#[test]
fn a_closed_stdout_ends_the_run_quietly() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    // A port the probe found free can be taken before fperf listens (once in CI): a
    // fresh block then, up to three times.
    let mut attempts = 0;
    let mut child = loop {
        attempts += 1;
        let port = port_block(12).to_string();
        let mut child = Command::new(fperf_bin())
            .args(["--loopback", "-m", "64", "-p", &port])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start fperf");
        let mut first = String::new();
        {
            // Read the header line, then close the pipe as `| head -1` would.
            let mut out = BufReader::new(child.stdout.take().expect("stdout"));
            out.read_line(&mut first).expect("read");
        }
        if first.starts_with("TCP CLIENT => 127.0.0.1:") {
            break child;
        }
        let _ = child.wait();
        let mut err = String::new();
        let _ = std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err);
        if !(err.contains("Address already in use") && attempts < 3) {
            panic!("no header line: {first:?}; stderr: {err}");
        }
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        assert!(std::time::Instant::now() < deadline, "fperf did not end");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    let _ = std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err);
    assert!(status.success(), "{status:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// The long flags of the option lines in `help` (`  -x, --flag ...`, `      --flag`),
/// and their aliases (`[aliases: --other]`).
fn help_flags(help: &str) -> std::collections::BTreeSet<String> {
    let options = regex::Regex::new(r"(?m)^\s+(?:-\w, )?(--[a-z0-9][a-z0-9-]*)").unwrap();
    let aliases = regex::Regex::new(r"\[alias(?:es)?: (--[a-z0-9][a-z0-9-]*)").unwrap();
    options
        .captures_iter(help)
        .chain(aliases.captures_iter(help))
        .map(|c| c[1].to_string())
        .collect()
}

fn stdout_of(args: &[&str]) -> String {
    let out = run(args, Duration::from_secs(10));
    assert!(out.status.success(), "{args:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn help_and_the_reference_page_name_the_same_flags() {
    let help = help_flags(&stdout_of(&["--help"]));
    let reference =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/reference.md"))
            .expect("docs/reference.md");
    let end = reference.len();
    // The first cell of each table row, `|` escaped as `\|` inside it.
    let first_cell = regex::Regex::new(r"(?m)^\|((?:[^|\\]|\\.)*)\|").unwrap();
    let flag = regex::Regex::new(r"--[a-z0-9][a-z0-9-]*").unwrap();
    let documented: std::collections::BTreeSet<String> = first_cell
        .captures_iter(&reference[..end])
        .flat_map(|c| {
            flag.find_iter(c.get(1).map_or("", |m| m.as_str()))
                .map(|m| m.as_str().to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    let undocumented: Vec<_> = help.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&help).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "in --help, not in docs/reference.md: {undocumented:?}; \
         in docs/reference.md, not in --help: {unknown:?}"
    );
}

#[test]
fn short_help_fits_a_screen_and_starts_with_what_a_newcomer_needs() {
    let short = stdout_of(&["-h"]);
    assert!(short.lines().count() <= 60, "{short}");
    // The options, in the order -h lists them.
    let listed: Vec<String> = regex::Regex::new(r"(?m)^\s+(?:-\w, )?(--[a-z0-9][a-z0-9-]*)")
        .unwrap()
        .captures_iter(&short)
        .map(|c| c[1].to_string())
        .collect();
    let first = [
        "--server",
        "--client",
        "--time",
        "--port",
        "--interval",
        "--bitrate",
        "--reverse",
        "--json",
        "--loopback",
    ];
    assert_eq!(listed[..first.len()], first, "{short}");
    for rest in [
        "--nstreams",
        "--udp",
        "--mb",
        "--pktsize",
        "--mprtt",
        "--help",
    ] {
        assert!(listed.iter().any(|f| f == rest), "-h lacks {rest}: {short}");
    }
    assert!(!short.contains("original"), "{short}");
    // The commands' summaries are whole sentences.
    assert!(
        short.contains(
            "exporter  Serve fperf tests to Prometheus: each scrape of /probe runs one test\n"
        ),
        "{short}"
    );
    assert!(
        short.contains("fperf --help"),
        "a pointer to the rest: {short}"
    );
    // One line per option: its flags and what it does side by side, never wrapped onto
    // a second, indented line.
    let option_lines = short
        .lines()
        .filter(|l| l.trim_start().starts_with('-'))
        .count();
    assert_eq!(option_lines, listed.len(), "{short}");
    assert!(
        short.lines().all(|l| !l.starts_with("          ")),
        "more than a line for an option: {short}"
    );
    let long = stdout_of(&["--help"]);
    for heading in [
        "Roles:",
        "Test:",
        "Workloads",
        "TCP options:",
        "TCP and UDP options:",
        "UDP options:",
        "RDMA options:",
        "Output:",
        "Tuning:",
        "Limits and authentication:",
    ] {
        assert!(long.contains(heading), "no {heading} heading:\n{long}");
    }
    assert!(help_flags(&long).len() > 2 * listed.len());
    assert!(long.contains("--generate <WHAT>"), "{long}");
    assert!(!long.contains("original"), "{long}");
}

/// The man pages, as the package ships them: every option with its description, and
/// examples; fperf mesh has its own page.
#[test]
fn the_man_pages_describe_every_option_and_give_examples() {
    for (what, name) in [
        ("man", "fperf"),
        ("man-mesh", "fperf-mesh"),
        ("man-exporter", "fperf-exporter"),
    ] {
        let page = stdout_of(&["--generate", what]);
        assert!(page.contains(&format!(".TH {name} 1")), "{what}: {page}");
        assert!(page.contains(".SH EXAMPLES\n.TP\n"), "{what}: no examples");
        // clap_mangen writes each option as `.TP` then its flags, then its description
        // (the next `.TP`, or the section's end, comes right after the flags when the
        // description is empty); each topic of --help is a section of its own.
        let options = &page[page.find(".SH OPTIONS").expect("OPTIONS")..];
        let end = [".SH SUBCOMMANDS", ".SH EXTRA", ".SH EXAMPLES"]
            .iter()
            .filter_map(|s| options.find(s))
            .min()
            .unwrap_or(options.len());
        let options = &options[..end];
        let entries: Vec<&str> = options.split("\n.TP\n").skip(1).collect();
        assert!(entries.len() > 3, "{what}: {options}");
        for entry in entries {
            let mut lines = entry.lines();
            let flags = lines.next().unwrap_or_default();
            let text: String = lines.filter(|l| !l.starts_with('.')).collect();
            assert!(text.trim().len() > 10, "{what}: {flags} has no description");
        }
    }
    let fperf = stdout_of(&["--generate", "man"]);
    assert!(fperf.contains("fperf\\-mesh(1)"), "{fperf}");
    assert!(
        fperf.contains("\\-\\-time") && fperf.contains("with a unit: ms, s, m or h"),
        "--time's units"
    );
}

/// A command line with many mistakes gets every one of them in one run, each with its
/// fix, and exit status 2.
#[test]
fn every_flag_problem_of_a_command_line_is_reported_at_once() {
    let out = run(
        &[
            "-c",
            "127.0.0.1",
            "-P",
            "4",
            "--time",
            "-1",
            "-l",
            "10G",
            "--bogus",
            "-J",
            "-i",
            "2x",
        ],
        Duration::from_secs(10),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(out.stdout.is_empty(), "{out:?}");
    for want in [
        "fperf's streams are -t 4",
        "'-1' for '--time <SECS>': a time cannot be negative: give 0 or more seconds",
        "'10G' for '--pktsize <BYTES>': a packet is at most 64M (67108864 bytes): give -l \
         64M or less",
        "'--bogus'",
        "fperf's JSON is --json",
        "'2x' for '--interval <SECS>': not a time: give seconds (10, 0.5) or a number with \
         a unit, ms, s, m or h",
    ] {
        assert!(err.contains(want), "'{want}' not in:\n{err}");
    }
    assert_eq!(err.trim().lines().count(), 6, "a line each:\n{err}");
    assert!(err.lines().all(|l| l.starts_with("fperf: ")), "{err}");
    assert!(!err.contains("4294967295"), "{err}");
    // Options of the other role, all named, with what the flags need besides.
    let out = run(
        &[
            "-c",
            "127.0.0.1",
            "--max-mb",
            "5",
            "--parallel",
            "2",
            "-1",
            "-t",
            "0",
        ],
        Duration::from_secs(10),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for want in [
        "-1/--one-off is a server option (use it with -s)",
        "--max-mb is a server option (use it with -s)",
        "--parallel is a server option (use it with -s)",
        "nstreams",
    ] {
        assert!(err.contains(want), "'{want}' not in:\n{err}");
    }
    assert_eq!(err.trim().lines().count(), 4, "a line each:\n{err}");
    // A mistyped option gets the one meant; an unknown one's value is not a problem of
    // its own; a negative count is out of the counts' range, not an unknown option.
    let out = run(
        &["-c", "127.0.0.1", "--bidr", "-x", "3", "-t", "-1"],
        Duration::from_secs(10),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for want in [
        "unexpected argument '--bidr' found; tip: a similar argument exists: '--bidir'",
        "unexpected argument '-x' found",
        "'-1' for '--nstreams <N>': -1 is not in 1..=256",
    ] {
        assert!(err.contains(want), "'{want}' not in:\n{err}");
    }
    assert_eq!(err.trim().lines().count(), 3, "a line each:\n{err}");
}

/// Times take units, and an IPv6 address in brackets is an address.
#[test]
fn times_take_units_and_a_bracketed_ipv6_address_is_accepted() {
    let port = port_block(4).to_string();
    let started = std::time::Instant::now();
    let out = run(
        &["--loopback", "-p", &port, "--time", "300ms", "--json"],
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json");
    assert_eq!(doc["settings"]["time_ms"], 300, "{doc}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let out = run(
        &["--loopback", "-p", &port, "--time", "0.005m", "--json"],
        Duration::from_secs(20),
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json");
    assert_eq!(doc["settings"]["time_ms"], 300, "{doc}");
    let server = Server::start(&["-B", "[::1]"]);
    let text = client_ok(&server, "[::1]", &["-m", "1"]);
    assert!(text.contains("=> [::1]:"), "{text}");
    refused(&["-c", "[::1"], "is not an IPv6 address in brackets");
}

/// A run stopped by SIGTERM says so, not that Ctrl-C stopped it.
#[test]
fn a_run_stopped_by_sigterm_says_so() {
    let server = Server::start(&[]);
    let port = server.port.to_string();
    let out = run_with(
        &["-c", "127.0.0.1", "-p", &port, "--time", "30"],
        Duration::from_secs(20),
        |child| {
            std::thread::sleep(Duration::from_millis(1500));
            // SAFETY: signalling our own child process by its pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        },
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("(stopped by SIGTERM: the figures cover what was sent until then)"),
        "{out:?}"
    );
    assert!(!text.contains("Ctrl-C"), "{text}");
}

/// The server says where it listens and which ports its tests use, on a line of its own.
#[test]
fn the_server_names_its_address_and_the_ports_its_tests_use() {
    let server = Server::start(&["-B", "127.0.0.1", "--max-streams", "4"]);
    let text = server.wait_for(|o| o.contains('\n'), Duration::from_secs(10));
    let p = server.port;
    assert_eq!(
        text.lines().next().unwrap_or_default(),
        format!(
            "Server listening on 127.0.0.1:{p}; its tests use TCP and UDP ports {p}-{}: \
             stream i on {p}+i (--crr: {p}+1+i; -w, --flows: stream 0 on {p}+N of N streams)",
            p + 4
        ),
        "{text}"
    );
    assert!(text.ends_with('\n'), "{text:?}");
    // A test's report follows on lines of its own, and the server listens again.
    client_ok(&server, "127.0.0.1", &["-m", "1"]);
    let text = server.wait_for(
        |o| o.ends_with(&format!("Server listening on 127.0.0.1:{p}\n")),
        Duration::from_secs(10),
    );
    assert!(
        text.contains("N streams)\nnew TCP connection from 127.0.0.1:"),
        "{text}"
    );
    // Without a cap on streams, a test may open 256.
    let server = Server::start(&[]);
    let text = server.wait_for(|o| o.contains('\n'), Duration::from_secs(10));
    let p = server.port;
    assert!(
        text.starts_with("Server listening on ")
            && text.contains(&format!(
                ":{p}; its tests use TCP and UDP ports {p}-{}",
                p + 256
            )),
        "{text}"
    );
}
