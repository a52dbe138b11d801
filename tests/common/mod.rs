//! Shared helpers for integration tests: run the real `fperf` binary as server and
//! client on loopback, with ports no other test uses, bounded in time, killed on drop.
#![allow(dead_code)]

use regex::Regex;
use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, UdpSocket};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Path of the fperf binary under test.
pub fn fperf_bin() -> &'static str {
    env!("CARGO_BIN_EXE_fperf")
}

static NEXT_BLOCK: AtomicU16 = AtomicU16::new(0);

/// A base port such that `base..base+width` are free on 127.0.0.1 and ::1 for TCP and
/// UDP. Test binaries run one after another and tests in parallel threads; the pid
/// spreads binaries apart and the counter spreads tests. The blocks lie below the
/// kernel's ephemeral range (32768 and up), where any outgoing connection on the machine
/// could take a port between this check and the test's bind.
pub fn port_block(width: u16) -> u16 {
    const FIRST: u16 = 20000;
    const EPHEMERAL: u16 = 32768;
    let width = width.max(12);
    let spread = (std::process::id() % 64) as u16 * 300;
    loop {
        let block = NEXT_BLOCK.fetch_add(1, Ordering::Relaxed);
        let base =
            FIRST + spread.wrapping_add(block.wrapping_mul(12)) % (EPHEMERAL - FIRST - width);
        let free = (0..width).all(|i| {
            let p = base + i;
            TcpListener::bind(("127.0.0.1", p)).is_ok()
                && UdpSocket::bind(("127.0.0.1", p)).is_ok()
                && TcpListener::bind(("::1", p)).is_ok()
        });
        if free {
            return base;
        }
    }
}

/// A running `fperf -s`, killed when dropped.
pub struct Server {
    child: Child,
    pub port: u16,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

pub fn collect(r: impl Read + Send + 'static) -> Arc<Mutex<String>> {
    collect_joinable(r).0
}

/// Reads `r` to its end in a thread; joining the handle waits for the last byte.
pub fn collect_joinable(
    mut r: impl Read + Send + 'static,
) -> (Arc<Mutex<String>>, std::thread::JoinHandle<()>) {
    let text = Arc::new(Mutex::new(String::new()));
    let t = text.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            t.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    (text, reader)
}

impl Server {
    /// Starts a server on a fresh port block with `args` added; waits until it listens.
    pub fn start(args: &[&str]) -> Server {
        Server::start_program(fperf_bin(), args)
    }

    /// [`Server::start`] with another fperf binary (another release's).
    pub fn start_program(program: &str, args: &[&str]) -> Server {
        // Checking a port and binding it are two steps: something else can take the
        // port between them. Then the next free block is tried.
        for _ in 0..5 {
            if let Some(s) = Server::try_start_on(program, port_block(12), args) {
                return s;
            }
        }
        panic!("every port block tried was taken before the server could bind it");
    }

    /// Starts a server on `port`; `None` if the port was taken when it bound.
    fn try_start_on(program: &str, port: u16, args: &[&str]) -> Option<Server> {
        let child = Command::new(program)
            .args(["-s", "-p", &port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start fperf server");
        let mut child = child;
        let stdout = collect(child.stdout.take().unwrap());
        let stderr = collect(child.stderr.take().unwrap());
        let s = Server {
            child,
            port,
            stdout,
            stderr,
        };
        let port_taken = || s.stderr().contains("Address already in use");
        // A server with --json prints nothing until its first test: its socket says.
        let quiet = args.contains(&"--json");
        s.wait_for(
            |o| o.contains("Server listening") || port_taken() || (quiet && listening(port)),
            Duration::from_secs(10),
        );
        if port_taken() {
            return None;
        }
        Some(s)
    }

    /// What the server printed on stdout so far.
    pub fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// What the server printed on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until `pred(stdout)` holds; panics with the output after `timeout`.
    pub fn wait_for(&self, pred: impl Fn(&str) -> bool, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let out = self.stdout();
            if pred(&out) {
                return out;
            }
            if Instant::now() > deadline {
                panic!(
                    "server output did not match in {timeout:?}:\n{out}\nstderr:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the report of the `n`th test (1-based) and returns that report's text.
    /// A client's error (a connection that never said hello, a refused test) reprints
    /// `Server listening on ...` with no test between: only sections with a test's header
    /// count, each complete once the next `Server listening` starts.
    pub fn report(&self, n: usize) -> String {
        let reports = |o: &str| -> Vec<String> {
            let sections: Vec<&str> = o.split("Server listening").collect();
            let complete = sections.len().saturating_sub(1);
            sections[..complete]
                .iter()
                .filter(|s| s.contains(" connection from "))
                .map(|s| s.to_string())
                .collect()
        };
        let out = self.wait_for(|o| reports(o).len() >= n, Duration::from_secs(60));
        reports(&out)
            .into_iter()
            .nth(n.saturating_sub(1))
            .unwrap_or_default()
    }

    /// The server process, e.g. to signal it.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the server to exit within `timeout`; returns its exit code.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A failed test shows what the server said to its operator, e.g. a client error.
        if std::thread::panicking() {
            // Not `stderr()`: a poisoned lock must not panic again while unwinding.
            let said = self.stderr.lock().map(|s| s.clone()).unwrap_or_default();
            eprintln!("server on port {} stderr:\n{said}", self.port);
        }
    }
}

/// Runs `fperf ARGS`, killing it after `timeout` (then panicking).
pub fn run(args: &[&str], timeout: Duration) -> Output {
    run_with(args, timeout, |_| {})
}

/// Starts `fperf ARGS`, hands the running child to `meanwhile` (e.g. to signal it),
/// then waits for it to exit, killing it after `timeout` from the start (then
/// panicking); returns its status and everything it printed.
pub fn run_with(args: &[&str], timeout: Duration, meanwhile: impl FnOnce(&Child)) -> Output {
    run_program(fperf_bin(), args, timeout, meanwhile)
}

/// [`run_with`] with another fperf binary (another release's).
pub fn run_program(
    program: &str,
    args: &[&str],
    timeout: Duration,
    meanwhile: impl FnOnce(&Child),
) -> Output {
    let deadline = Instant::now() + timeout;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fperf");
    let pipes = Pipes::of(&mut child);
    meanwhile(&child);
    pipes.finish(child, deadline, &format!("fperf {args:?}"))
}

/// A child's two output pipes, each read to its end by a thread of its own.
pub struct Pipes {
    out: (Arc<Mutex<String>>, std::thread::JoinHandle<()>),
    err: (Arc<Mutex<String>>, std::thread::JoinHandle<()>),
}

impl Pipes {
    /// Starts reading `child`'s stdout and stderr (both piped).
    pub fn of(child: &mut Child) -> Pipes {
        Pipes {
            out: collect_joinable(child.stdout.take().expect("stdout piped")),
            err: collect_joinable(child.stderr.take().expect("stderr piped")),
        }
    }

    /// Waits for `child` to exit, killing it at `deadline` (then panicking, naming
    /// `what`); its status and everything it printed.
    pub fn finish(self, mut child: Child, deadline: Instant, what: &str) -> Output {
        let status = loop {
            if let Some(st) = child.try_wait().expect("wait") {
                break st;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{what} did not finish in time\nstdout:\n{}\nstderr:\n{}",
                    self.out.0.lock().unwrap(),
                    self.err.0.lock().unwrap()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // The process exited: read its pipes to the end (a fixed pause lost output under
        // load).
        let _ = (self.out.1.join(), self.err.1.join());
        let stdout = self.out.0.lock().unwrap().clone().into_bytes();
        let stderr = self.err.0.lock().unwrap().clone().into_bytes();
        Output {
            status,
            stdout,
            stderr,
        }
    }
}

/// Starts `ip netns exec NS ARGS` (stdout and stderr piped).
pub fn spawn_in(ns: &str, args: &[&str]) -> Child {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a command in a namespace")
}

/// Runs `ip netns exec NS ARGS` to its end, killing it after `limit` (then panicking).
pub fn run_in(ns: &str, args: &[&str], limit: Duration) -> Output {
    finish_within(spawn_in(ns, args), limit)
}

/// Waits for `child` (its output piped) at most `limit`, killing it then and
/// panicking; its status and everything it printed.
pub fn finish_within(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    Pipes::of(&mut child).finish(child, deadline, "a command")
}

/// `fperf -s ARGS` inside a network namespace, killed on drop.
pub struct NsServer {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

impl NsServer {
    /// Starts `fperf -s ARGS` in namespace `ns`; returns once it listens.
    pub fn start(ns: &str, args: &[&str]) -> NsServer {
        let mut all = vec![fperf_bin(), "-s"];
        all.extend_from_slice(args);
        let mut child = spawn_in(ns, &all);
        let server = NsServer {
            stdout: collect(child.stdout.take().expect("stdout piped")),
            stderr: collect(child.stderr.take().expect("stderr piped")),
            child,
        };
        server.wait_for(1);
        server
    }

    /// What it printed so far.
    pub fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// What it printed on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits (at most 60 s) until it printed `Server listening` `n` times; all it
    /// printed.
    pub fn wait_for(&self, n: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = self.stdout();
            if out.matches("Server listening").count() >= n {
                return out;
            }
            assert!(
                Instant::now() < deadline,
                "server did not get there:\n{out}\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The report of test `n` (from 1), once complete: its last line is the client's
    /// (`client   : sent ...`).
    pub fn report(&self, n: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = self.stdout();
            let section = out.split("Server listening").nth(n).unwrap_or_default();
            if section.lines().any(|l| l.starts_with("client ")) {
                return section.to_string();
            }
            assert!(
                Instant::now() < deadline,
                "no complete report of test {n}:\n{out}\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for NsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a client against `server` at `host` with `args`, whatever its outcome.
pub fn client_run(server: &Server, host: &str, args: &[&str]) -> Output {
    let port = server.port.to_string();
    let mut all = vec!["-c", host, "-p", &port];
    all.extend_from_slice(args);
    run(&all, Duration::from_secs(120))
}

/// Runs a client against `server` with `args`; asserts it succeeded; returns stdout.
pub fn client_ok(server: &Server, host: &str, args: &[&str]) -> String {
    let out = client_run(server, host, args);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "client {args:?} against port {} failed: {:?}\nstdout:\n{stdout}\nstderr:\n{}\nserver:\n{}\n{}",
        server.port,
        out.status,
        String::from_utf8_lossy(&out.stderr),
        server.stdout(),
        server.stderr()
    );
    stdout
}

/// A `label : NMB(N.NNGB NB) in S.SSs. (bw: R R)` line, parsed.
#[derive(Debug, Clone, Copy)]
pub struct Volume {
    pub mb: u64,
    pub bytes: u64,
    pub secs: f64,
}

/// Finds the volume line with `label` (e.g. "sent", "received") in `text`.
pub fn volume(text: &str, label: &str) -> Volume {
    // From 1 MB `10MB(0.01GB 10485760B)`; below, `4.0KB(4096B)` or `32B`.
    let re = Regex::new(&format!(
        r"(?m)^{label}\s*: (?:(\d+)MB\((\d+\.\d\d)GB (\d+)B\)|(\d+\.\d)KB\((\d+)B\)|(\d+)B)(?: in (\d+\.\d\d)s\. \(bw: (?:[\d.]+[KMG]?B/s [\d.]+[KMGT]?bit/s|n/a)\))?$"
    ))
    .unwrap();
    let c = re
        .captures(text)
        .unwrap_or_else(|| panic!("no '{label}' line in:\n{text}"));
    let number = |i: usize| c.get(i).map(|m| m.as_str());
    let bytes: u64 = number(3)
        .or(number(5))
        .or(number(6))
        .and_then(|b| b.parse().ok())
        .unwrap();
    if let (Some(mb), Some(gb)) = (number(1), number(2)) {
        assert!(bytes >= 1 << 20, "{bytes}B in MB");
        let mb: u64 = mb.parse().unwrap();
        assert_eq!(
            mb,
            (bytes as f64 / 1048576.0).round() as u64,
            "MB figure of {bytes}B"
        );
        let gb: f64 = gb.parse().unwrap();
        assert!(
            (gb - bytes as f64 / 1073741824.0).abs() < 0.006,
            "GB figure of {bytes}B"
        );
    } else if let Some(kb) = number(4) {
        assert!((1 << 10..1 << 20).contains(&bytes), "{bytes}B in KB");
        let kb: f64 = kb.parse().unwrap();
        assert!(
            (kb - bytes as f64 / 1024.0).abs() < 0.06,
            "KB figure of {bytes}B"
        );
    } else {
        assert!(bytes < 1 << 10, "{bytes}B without a unit");
    }
    Volume {
        mb: (bytes as f64 / 1048576.0).round() as u64,
        bytes,
        secs: c.get(7).map_or(0.0, |m| m.as_str().parse().unwrap()),
    }
}

/// A latency line with `label`, parsed into (avg, min, max) in microseconds; checks the
/// percentile fields are present and ordered.
pub fn latency(text: &str, label: &str) -> (f64, f64, f64) {
    let re = Regex::new(&format!(
        r"(?m)^{label}\s*: avg=([\d.]+)us  min=([\d.]+)us  max=([\d.]+)us  p50=([\d.]+)us  p90=([\d.]+)us  p99=([\d.]+)us  p99\.9=([\d.]+)us  stddev=([\d.]+)us$"
    ))
    .unwrap();
    let c = re
        .captures(text)
        .unwrap_or_else(|| panic!("no '{label}' latency line in:\n{text}"));
    let v: Vec<f64> = (1..=8).map(|i| c[i].parse().unwrap()).collect();
    let (avg, min, max) = (v[0], v[1], v[2]);
    assert!(
        min <= avg && avg <= max,
        "{label}: min {min} avg {avg} max {max}"
    );
    assert!(
        min <= v[3] && v[3] <= v[4] && v[4] <= v[5] && v[5] <= v[6] && v[6] <= max,
        "{label}: percentiles out of order: {v:?}"
    );
    (avg, min, max)
}

/// Whether `text` has a line starting with `prefix`.
pub fn has_line(text: &str, prefix: &str) -> bool {
    text.lines().any(|l| l.starts_with(prefix))
}

/// Reads lines from a child's stdout until `pred` matches one.
pub fn read_until(r: impl Read, pred: impl Fn(&str) -> bool) -> Option<String> {
    BufReader::new(r)
        .lines()
        .map_while(Result::ok)
        .find(|l| pred(l))
}

/// The client sent `bytes` and the server received them, by both reports (and by the
/// line of the client's report that says what the server saw).
pub fn assert_bytes(client: &str, server: &str, bytes: u64) {
    assert_eq!(volume(client, "sent").bytes, bytes, "client sent\n{client}");
    assert_eq!(
        volume(server, "received").bytes,
        bytes,
        "server received\n{server}"
    );
    assert_eq!(peer_bytes(client, "received"), bytes, "{client}");
}

/// The bytes the `server :` line of a client's report says the server `verb` (`sent`,
/// `received`).
pub fn peer_bytes(client: &str, verb: &str) -> u64 {
    let re = Regex::new(&format!(
        r"(?m)^server\s*: .*\b{verb} (?:\d+MB\(\d+\.\d\dGB |\d+\.\dKB\()?(\d+)B\)? in \d+\.\d\ds \("
    ))
    .unwrap();
    let c = re
        .captures(client)
        .unwrap_or_else(|| panic!("no 'server : {verb}' line in:\n{client}"));
    c[1].parse().unwrap()
}

/// With `-r`, the server answered each of `acks` packets with one byte (a small run:
/// under 1 MB of ACKs).
pub fn assert_one_ack_byte_per_packet(client: &str, server: &str, acks: u64) {
    assert!(
        client.contains(&format!("received  : {}", fperf::units::size_triplet(acks))),
        "one ACK byte per packet:\n{client}"
    );
    assert!(
        server.contains(&format!("sent     : {}", fperf::units::size_triplet(acks))),
        "{server}"
    );
}

/// Starts a client against `server` with `args`, sends it Ctrl-C (SIGINT) after
/// `after`, and waits at most `within` more for it to exit (killing it and failing if
/// it does not); checks it exited as interrupted (130) and returns its stdout.
pub fn interrupted_client(
    server: &Server,
    args: &[&str],
    after: Duration,
    within: Duration,
) -> String {
    let port = server.port.to_string();
    let mut all = vec!["-c", "127.0.0.1", "-p", &port];
    all.extend_from_slice(args);
    let out = run_with(&all, after + within, |child| {
        std::thread::sleep(after);
        // SAFETY: signalling our own child process by its pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    });
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    text
}

/// Whether a TCP socket listens on `port` (IPv4 or IPv6), per /proc/net.
pub fn listening(port: u16) -> bool {
    let local = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|table| {
        std::fs::read_to_string(table).is_ok_and(|text| {
            text.lines().any(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                fields.len() > 3 && format!("{} ", fields[1]).ends_with(&local) && fields[3] == "0A"
            })
        })
    })
}

/// Runs a `--json` client with `args` against a fresh server; returns the document.
pub fn run_json(args: &[&str]) -> serde_json::Value {
    let server = Server::start(&[]);
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = client_ok(&server, "127.0.0.1", &all);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"))
}

/// The number at `path` in a JSON document (panics naming the path if it is not one).
pub fn json_u64(v: &serde_json::Value, path: &[&str]) -> u64 {
    let mut at = v;
    for key in path {
        at = &at[key];
    }
    at.as_u64()
        .unwrap_or_else(|| panic!("{path:?} is not a number in {v}"))
}

/// The segment size in force on a report's `tcp_info` line (`mss=NB`).
pub fn tcp_info_mss(report: &str) -> u64 {
    let in_force = Regex::new(r"(?m)^tcp_info\s*:.*  mss=(\d+)B$").expect("regex");
    let mss = in_force.captures(report).map(|c| c[1].to_string());
    mss.and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("no tcp_info mss in {report}"))
}

/// Runs a command to completion; panics with its output if it fails.
pub fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Loads an nftables rule set into network namespace `namespace`.
pub fn nft_in(namespace: &str, rules: &str) {
    use std::io::Write;
    let mut child = Command::new("ip")
        .args(["netns", "exec", namespace, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run nft");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(rules.as_bytes())
        .expect("write the rules");
    let out = child.wait_with_output().expect("nft");
    assert!(
        out.status.success(),
        "nft: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether this host's name `localhost` has an IPv6 address (in /etc/hosts, most often).
pub fn localhost_has_ipv6() -> bool {
    std::net::ToSocketAddrs::to_socket_addrs(&("localhost", 1))
        .map(|mut addrs| addrs.any(|a| a.is_ipv6()))
        .unwrap_or(false)
}

/// Runs `fperf ARGS`; asserts it was refused as a flag error (exit 2) saying `why`.
pub fn refused(args: &[&str], why: &str) {
    let out = run(args, Duration::from_secs(10));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(why), "{args:?}: {err}");
}

/// A fake server on loopback that takes one control connection and welcomes its
/// client as `software`, a server of protocol minor `minor` announcing `features`,
/// would; then `then` has the channel (and the listener, for data connections).
/// Returns its port and what `then` returned.
pub fn fake_server<R: Send + 'static>(
    software: &'static str,
    minor: u32,
    features: Option<Vec<String>>,
    then: impl FnOnce(&mut fperf::control::Channel, &TcpListener) -> R + Send + 'static,
) -> (u16, std::thread::JoinHandle<R>) {
    use fperf::control::{Channel, Message, PROTOCOL_MAJOR};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let fake = std::thread::spawn(move || {
        let t = Duration::from_secs(10);
        let (s, _) = listener.accept().unwrap();
        let mut chan = Channel::new(s, t).unwrap();
        assert!(matches!(chan.recv(t).unwrap(), Message::Hello { .. }));
        chan.send(&Message::Welcome {
            version: PROTOCOL_MAJOR,
            software: software.into(),
            session: 9,
            minor,
            features,
        })
        .unwrap();
        then(&mut chan, &listener)
    });
    (port, fake)
}

/// A [`fake_server`] that only listens: returns the kinds of the messages it got after
/// its welcome.
pub fn older_server(
    software: &'static str,
    minor: u32,
    features: Option<Vec<String>>,
) -> (u16, std::thread::JoinHandle<Vec<String>>) {
    fake_server(software, minor, features, |chan, _| {
        let mut after = Vec::new();
        while let Ok(message) = chan.recv(Duration::from_secs(10)) {
            after.push(fperf::control::kind(&message));
        }
        after
    })
}
