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
    for args in [
        &["-s", "-p", "0"][..],
        &["-c", "::1", "-p", "0"],
        &["mesh", "-p", "0", "a", "b"],
    ] {
        refused(args, "0 is not in 1..=65535");
    }
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
fn help_and_the_readme_reference_name_the_same_flags() {
    let help = help_flags(&stdout_of(&["--help"]));
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let start = readme.find("\n## Reference").expect("a Reference section");
    let reference = &readme[start + 1..];
    let end = reference[3..]
        .find("\n## ")
        .map_or(reference.len(), |i| i + 3);
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
        "in --help, not in the README's reference: {undocumented:?}; \
         in the reference, not in --help: {unknown:?}"
    );
}

#[test]
fn short_help_lists_the_original_flags_a_line_each_and_long_help_groups_every_flag() {
    let short = stdout_of(&["-h"]);
    let original = [
        "--server",
        "--client",
        "--nstreams",
        "--nsockets",
        "--udp",
        "--rdma",
        "--mb",
        "--pktsize",
        "--qtype",
        "--mprtt",
        "--nodelay",
        "--quickack",
        "--rdmadev",
        "--help",
        "--version",
    ];
    let want: std::collections::BTreeSet<String> = original.iter().map(|f| f.to_string()).collect();
    assert_eq!(help_flags(&short), want, "{short}");
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
    assert_eq!(option_lines, original.len(), "{short}");
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
    assert!(help_flags(&long).len() > 2 * original.len());
}
