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
    refused(&["-c", "127.0.0.1", "-u", "-d"], "TCP options");
    refused(&["-c", "127.0.0.1", "-u", "-a"], "TCP options");
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
        "--ack-timeout",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
}
