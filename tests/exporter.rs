//! `fperf exporter`: probes that run real tests against a real fperf server on loopback,
//! scraped over HTTP as Prometheus scrapes them, and the limits that bound them.
//!
//! The tests that need Prometheus's own programs (promtool, prometheus) are ignored
//! unless asked for; scripts/test.sh runs them where Debian's prometheus is installed.

mod common;

use common::{collect, fperf_bin, port_block, tcp_info_mss, Server};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running `fperf exporter` on a port the kernel chose, killed when dropped.
struct Exporter {
    child: Child,
    addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
}

impl Exporter {
    fn start(args: &[&str]) -> Exporter {
        Exporter::start_command(Command::new(fperf_bin()), args)
    }

    /// Starts `command`, which runs fperf, as an exporter.
    fn start_command(mut command: Command, args: &[&str]) -> Exporter {
        let mut child = command
            .args(["exporter", "--listen", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start fperf exporter");
        let stdout = collect(child.stdout.take().expect("stdout"));
        let stderr = collect(child.stderr.take().expect("stderr"));
        let deadline = Instant::now() + Duration::from_secs(10);
        let addr = loop {
            let text = stdout.lock().unwrap().clone();
            if let Some(rest) = text.split("listening on http://").nth(1) {
                let addr = rest.split('/').next().expect("address");
                break addr.parse().expect("a socket address");
            }
            assert!(
                Instant::now() < deadline,
                "the exporter did not start: {text} {}",
                stderr.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        Exporter {
            child,
            addr,
            stderr,
        }
    }

    fn get(&self, path: &str) -> (u16, String) {
        http_get(self.addr, path, &[])
    }

    /// A probe's answer as its samples, after checking it succeeded as `success` says.
    fn probe(&self, query: &str, success: bool) -> Metrics {
        let (status, body) = self.get(&format!("/probe?{query}"));
        assert_eq!(status, 200, "{body}");
        let metrics = Metrics::parse(&body);
        assert_eq!(
            metrics.get("fperf_probe_success"),
            if success { 1.0 } else { 0.0 },
            "{body}\n{}",
            self.stderr()
        );
        metrics
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until the exporter's log has a line for which `pred` holds (its stderr is
    /// read by another thread, a moment after the answer).
    fn logged(&self, pred: impl Fn(&str) -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if self.stderr().lines().any(&pred) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A GET with `headers`, over HTTP/1.0 so that the answer ends with the connection.
fn http_get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read time-out");
    let mut request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    conn.write_all(request.as_bytes()).expect("send request");
    let mut answer = String::new();
    conn.read_to_string(&mut answer).expect("read answer");
    let (head, body) = answer.split_once("\r\n\r\n").expect("headers end");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status code");
    (status, body.to_owned())
}

/// Samples of a page in Prometheus's text format, by name with labels as written.
struct Metrics(HashMap<String, f64>);

impl Metrics {
    fn parse(text: &str) -> Metrics {
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| {
                let (name, value) = l.rsplit_once(' ').expect("a sample");
                (name.to_owned(), value.parse().expect("a number"))
            });
        Metrics(samples.collect())
    }

    fn get(&self, sample: &str) -> f64 {
        *self
            .0
            .get(sample)
            .unwrap_or_else(|| panic!("no {sample} among {:?}", self.0.keys()))
    }

    fn has(&self, sample: &str) -> bool {
        self.0.contains_key(sample)
    }
}

fn assert_near(what: &str, got: f64, want: f64, share: f64) {
    assert!(
        (got - want).abs() <= want * share,
        "{what}: {got}, expected {want} within {share}"
    );
}

#[test]
fn a_probe_runs_a_tcp_test_and_answers_with_both_ends_figures() {
    let server = Server::start(&[]);
    let exporter = Exporter::start(&[]);
    let m = exporter.probe(
        &format!("target=127.0.0.1:{}&duration=1", server.port),
        true,
    );
    let sent = m.get(r#"fperf_sent_bytes{end="client"}"#);
    assert!(sent > 0.0);
    assert_eq!(m.get(r#"fperf_received_bytes{end="server"}"#), sent);
    let client_secs = m.get(r#"fperf_test_duration_seconds{end="client"}"#);
    assert_near("client's test time", client_secs, 1.0, 0.2);
    assert_near(
        "client's rate",
        m.get(r#"fperf_sent_bytes_per_second{end="client"}"#),
        sent / client_secs,
        1e-6,
    );
    let server_secs = m.get(r#"fperf_test_duration_seconds{end="server"}"#);
    assert_near(
        "server's rate",
        m.get(r#"fperf_received_bytes_per_second{end="server"}"#),
        sent / server_secs,
        1e-6,
    );
    assert!(m.has(r#"fperf_retransmitted_segments{end="client"}"#));
    // The sending end was busy for part of the probe, and never longer.
    let busy = m.get(r#"fperf_tcp_busy_seconds{end="client"}"#);
    let client_secs = m.get(r#"fperf_test_duration_seconds{end="client"}"#);
    assert!(
        busy > 0.0 && busy <= client_secs + 0.01,
        "{busy} of {client_secs}"
    );
    for waited in ["receive_window", "send_buffer"] {
        let name = format!(r#"fperf_tcp_{waited}_limited_seconds{{end="client"}}"#);
        assert!(m.get(&name) <= busy, "{name}");
    }
    assert!(m.get(r#"fperf_cpu_seconds{end="server",mode="system"}"#) > 0.0);
    assert!(m.has(r#"fperf_cpu_seconds{end="client",mode="user"}"#));
    for end in ["client", "server"] {
        assert!(
            m.get(&format!(
                r#"fperf_max_resident_memory_bytes{{end="{end}"}}"#
            )) > 1e6
        );
        assert!(m.get(&format!(r#"fperf_page_faults{{end="{end}",kind="minor"}}"#)) > 0.0);
        assert!(m.has(&format!(
            r#"fperf_context_switches{{end="{end}",kind="voluntary"}}"#
        )));
    }
    let took = m.get("fperf_probe_duration_seconds");
    assert!((1.0..5.0).contains(&took), "probe took {took} s");
    assert!(!m.has(r#"fperf_round_trip_seconds{percentile="50"}"#));
    // The server saw one test: the exporter is an ordinary client.
    server.wait_for(|o| o.contains("new TCP connection"), Duration::from_secs(5));
}

#[test]
fn a_probe_sets_the_window_congestion_control_segment_size_and_pacing_it_asks_for() {
    let server = Server::start(&[]);
    let exporter = Exporter::start(&[]);
    let m = exporter.probe(
        &format!(
            "target=127.0.0.1:{}&duration=1&window=16K&congestion=reno&mss=1000&fq_rate=40M",
            server.port
        ),
        true,
    );
    assert_near(
        "paced rate",
        m.get(r#"fperf_received_bytes_per_second{end="server"}"#),
        40e6 / 8.0,
        0.3,
    );
    // The server's report names what its end of the test was set to, and the segment
    // size in force keeps to mss= (less any TCP options).
    let report = server.wait_for(|o| o.contains("tcp_info"), Duration::from_secs(5));
    for label in ["cc=reno", "window=16KB", "mss=1000", "fq_rate=40.0Mbit/s"] {
        assert!(report.contains(label), "{label}: {report}");
    }
    let mss = tcp_info_mss(&report);
    assert!((900..=1000).contains(&mss), "mss {mss}: {report}");
}

#[test]
fn a_request_response_probe_gives_round_trip_percentiles_and_a_udp_one_its_loss() {
    let server = Server::start(&[]);
    let exporter = Exporter::start(&[]);
    let m = exporter.probe(
        &format!(
            "target=127.0.0.1:{}&workload=echo&size=64&duration=0.5",
            server.port
        ),
        true,
    );
    let p50 = m.get(r#"fperf_round_trip_seconds{percentile="50"}"#);
    let p99 = m.get(r#"fperf_round_trip_seconds{percentile="99"}"#);
    assert!(0.0 < p50 && p50 <= p99 && p99 < 0.1, "p50 {p50} p99 {p99}");
    // An echo answers each request with as many bytes.
    assert_eq!(
        m.get(r#"fperf_received_bytes{end="client"}"#),
        m.get(r#"fperf_sent_bytes{end="client"}"#)
    );
    let transactions = m.get(r#"fperf_sent_bytes{end="client"}"#) / 64.0;
    assert_near(
        "transactions per second",
        m.get("fperf_transactions_per_second"),
        transactions / m.get(r#"fperf_test_duration_seconds{end="client"}"#),
        1e-6,
    );

    // The probe's own percentiles, and the maximum as the 100th.
    let m = exporter.probe(
        &format!(
            "target=127.0.0.1:{}&workload=rr&size=64&duration=0.5&percentiles=50,99.99",
            server.port
        ),
        true,
    );
    let p50 = m.get(r#"fperf_round_trip_seconds{percentile="50"}"#);
    let p9999 = m.get(r#"fperf_round_trip_seconds{percentile="99.99"}"#);
    let max = m.get(r#"fperf_round_trip_seconds{percentile="100"}"#);
    assert!(
        0.0 < p50 && p50 <= p9999 && p9999 <= max,
        "{p50} {p9999} {max}"
    );
    assert!(!m.has(r#"fperf_round_trip_seconds{percentile="90"}"#));

    // UDP at a set rate: the server's loss and what it received at that rate.
    let m = exporter.probe(
        &format!(
            "target=127.0.0.1:{}&protocol=udp&bitrate=80M&size=1K&duration=1",
            server.port
        ),
        true,
    );
    let lost = m.get(r#"fperf_lost_datagrams{end="server"}"#);
    let ratio = m.get(r#"fperf_loss_ratio{end="server"}"#);
    assert!((0.0..=1.0).contains(&ratio));
    assert_eq!(lost == 0.0, ratio == 0.0);
    assert!(!m.has(r#"fperf_retransmitted_segments{end="client"}"#));
    assert_near(
        "UDP rate sent",
        m.get(r#"fperf_sent_bytes{end="client"}"#) * 8.0
            / m.get(r#"fperf_test_duration_seconds{end="client"}"#),
        80e6,
        0.1,
    );
}

#[test]
fn a_probe_that_cannot_run_answers_success_0_and_logs_why() {
    let server = Server::start(&[]);
    let nothing = port_block(1);
    let exporter = Exporter::start(&[
        "--max-duration",
        "2",
        "--allow",
        &format!("127.0.0.1:{}", server.port),
        "--allow",
        &format!("localhost:{nothing}"),
    ]);
    let cases = [
        (format!("target=localhost:{nothing}"), "cannot connect"),
        (
            format!("target=127.0.0.1:{}&duration=3", server.port),
            "at most the exporter's 2s",
        ),
        (
            format!("target=127.0.0.1:{}", server.port + 1),
            "allow-list",
        ),
        (
            format!("target=127.0.0.1:{}&size=huge", server.port),
            "size",
        ),
        (
            format!("target=127.0.0.1:{}&mode=x", server.port),
            "unknown parameter mode",
        ),
        ("duration=1".to_owned(), "target parameter is missing"),
    ];
    for (query, reason) in cases {
        let started = Instant::now();
        let (status, body) = exporter.get(&format!("/probe?{query}"));
        assert_eq!(status, 200);
        let m = Metrics::parse(&body);
        assert_eq!(m.get("fperf_probe_success"), 0.0, "{query}: {body}");
        assert!(body.contains(reason), "{query}: {body}");
        assert!(started.elapsed() < Duration::from_secs(5), "{query}");
        // The log names the target the query asked for, even when it refused the query.
        let target = query
            .split('&')
            .find_map(|p| p.strip_prefix("target="))
            .map_or("probe failed: ".to_owned(), |t| {
                format!("probe of {t:?} failed: ")
            });
        assert!(
            exporter.logged(|l| l.contains(&target) && l.contains(reason)),
            "{query}: {}",
            exporter.stderr()
        );
    }
    let (_, text) = exporter.get("/metrics");
    let own = Metrics::parse(&text);
    assert_eq!(
        own.get(r#"fperf_exporter_probes_total{result="failure"}"#),
        6.0
    );
    assert_eq!(
        own.get(r#"fperf_exporter_probes_total{result="success"}"#),
        0.0
    );
    assert_eq!(exporter.get("/nowhere").0, 404);
}

#[test]
fn a_probe_answers_within_prometheus_scrape_timeout() {
    // Takes connections and never answers: the test's set-up would wait its full time.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    let target = silent.local_addr().expect("address");
    let exporter = Exporter::start(&[]);
    let started = Instant::now();
    let (status, body) = http_get(
        exporter.addr,
        &format!("/probe?target={target}&duration=1"),
        &[("X-Prometheus-Scrape-Timeout-Seconds", "2.5")],
    );
    let took = started.elapsed();
    assert_eq!(status, 200);
    assert_eq!(Metrics::parse(&body).get("fperf_probe_success"), 0.0);
    assert!(
        took < Duration::from_millis(2500),
        "answered after {took:?}: {body}"
    );

    // A test longer than the scrape allows is refused at once.
    let started = Instant::now();
    let (_, body) = http_get(
        exporter.addr,
        &format!("/probe?target={target}&duration=2"),
        &[("X-Prometheus-Scrape-Timeout-Seconds", "2")],
    );
    assert!(
        body.contains("does not fit in the scrape's time-out"),
        "{body}"
    );
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[test]
fn probes_beyond_the_most_at_once_are_refused_with_429() {
    let server = Server::start(&["--parallel", "2"]);
    let exporter = Exporter::start(&["--max-probes", "1"]);
    let long = {
        let addr = exporter.addr;
        let query = format!("/probe?target=127.0.0.1:{}&duration=2", server.port);
        std::thread::spawn(move || http_get(addr, &query, &[]))
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while Metrics::parse(&exporter.get("/metrics").1).get("fperf_exporter_probes_running") < 1.0 {
        assert!(Instant::now() < deadline, "the first probe never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, body) = exporter.get(&format!("/probe?target=127.0.0.1:{}", server.port));
    assert_eq!(status, 429, "{body}");
    let (status, body) = long.join().expect("first probe");
    assert_eq!(status, 200);
    assert_eq!(
        Metrics::parse(&body).get("fperf_probe_success"),
        1.0,
        "{body}"
    );
    let own = Metrics::parse(&exporter.get("/metrics").1);
    assert_eq!(own.get("fperf_exporter_probes_refused_total"), 1.0);
    assert_eq!(
        own.get(r#"fperf_exporter_probes_total{result="success"}"#),
        1.0
    );
    assert_eq!(own.get("fperf_exporter_probes_running"), 0.0);
    assert!(exporter.logged(|l| l.contains("probe refused")));
}

/// Connections that never send a request, from `source`, until one is turned away with
/// 503 (returned) or `most` are open.
fn idle_connections(to: SocketAddr, source: &str, most: usize) -> (Vec<TcpStream>, Option<String>) {
    let mut open = Vec::new();
    while open.len() < most {
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        let from: SocketAddr = format!("{source}:0").parse().expect("source address");
        sock.bind(&from.into()).expect("bind the source address");
        sock.connect_timeout(&to.into(), Duration::from_secs(5))
            .expect("connect");
        let mut conn: TcpStream = sock.into();
        // A connection the exporter turned away has its answer at once.
        conn.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("read time-out");
        let mut answer = String::new();
        if conn.read_to_string(&mut answer).is_ok() {
            return (open, Some(answer));
        }
        open.push(conn);
    }
    (open, None)
}

#[test]
fn connections_that_send_no_request_are_capped_and_do_not_crowd_out_a_scraper() {
    let exporter = Exporter::start(&[]);
    let (idle, refused) = idle_connections(exporter.addr, "127.0.0.2", 200);
    let refused = refused.expect("a connection beyond the cap is refused");
    assert!(refused.starts_with("HTTP/1.1 503 "), "{refused}");
    assert!(refused.contains("too many connections"), "{refused}");
    assert!(idle.len() >= 4, "only {} idle connections held", idle.len());

    // Another address is still answered while they wait.
    let (status, body) = exporter.get("/metrics");
    assert_eq!(status, 200, "{body}");
    assert!(Metrics::parse(&body).get("fperf_exporter_connections_refused_total") >= 1.0);
    assert!(exporter.logged(|l| l.contains("connection from 127.0.0.2") && l.contains("refused")));

    // A flood of them is counted in full but logged within a limit.
    for _ in 0..150 {
        let (_, refused) = idle_connections(exporter.addr, "127.0.0.2", 1);
        assert!(refused.is_some_and(|r| r.starts_with("HTTP/1.1 503 ")));
    }
    let (_, body) = exporter.get("/metrics");
    assert!(Metrics::parse(&body).get("fperf_exporter_connections_refused_total") >= 151.0);
    assert!(exporter.logged(|l| l.contains("over 100 failed or refused requests within 10 s")));
    let refusals = exporter
        .stderr()
        .lines()
        .filter(|l| l.contains("connection from"))
        .count();
    assert_eq!(refusals, 100, "{}", exporter.stderr());

    // A connection that sends half a request is told so, then closed.
    let mut slow = TcpStream::connect(exporter.addr).expect("connect");
    slow.write_all(b"GET /metrics HTTP/1.1\r\n").expect("send");
    slow.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("read time-out");
    let mut answer = String::new();
    slow.read_to_string(&mut answer).expect("read the answer");
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    drop(idle);
}

#[test]
fn running_out_of_descriptors_does_not_stop_the_exporter() {
    let mut command = Command::new(fperf_bin());
    // SAFETY: setrlimit is async-signal-safe, and `few` lives on the child's stack.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(|| {
            let few = libc::rlimit {
                rlim_cur: 48,
                rlim_max: 48,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &few) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let exporter = Exporter::start_command(command, &[]);
    // More connections than the exporter has descriptors, from addresses enough that
    // the per-address caps do not turn them away first.
    let idle: Vec<TcpStream> = (2..6)
        .flat_map(|host| idle_connections(exporter.addr, &format!("127.0.0.{host}"), 15).0)
        .collect();
    assert!(idle.len() >= 48, "{} connections", idle.len());
    drop(idle);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, body) = exporter.get("/metrics");
        if status == 200 {
            assert!(Metrics::parse(&body).has("fperf_exporter_probes_total{result=\"success\"}"));
            break;
        }
        assert!(Instant::now() < deadline, "{status}: {body}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(exporter.get("/").0, 200);
}

#[test]
fn the_exporter_refuses_to_answer_other_hosts_without_an_allow_list() {
    let out = Command::new(fperf_bin())
        .args(["exporter", "--listen", "0.0.0.0:0"])
        .output()
        .expect("run fperf exporter");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--allow"), "{err}");
}

/// promtool, Prometheus's own checker, reads the exporter's pages without a complaint.
#[test]
#[ignore = "needs promtool (Debian's prometheus package)"]
fn promtool_accepts_the_probe_and_metrics_pages() {
    let server = Server::start(&[]);
    let exporter = Exporter::start(&[]);
    let probes = [
        format!("target=127.0.0.1:{}&duration=0.5", server.port),
        format!(
            "target=127.0.0.1:{}&duration=0.5&protocol=udp&workload=rr",
            server.port
        ),
        "target=127.0.0.1:1".to_owned(),
    ];
    let pages = probes
        .iter()
        .map(|q| exporter.get(&format!("/probe?{q}")).1)
        .chain([exporter.get("/metrics").1]);
    for page in pages {
        let mut check = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run promtool");
        check
            .stdin
            .take()
            .expect("stdin")
            .write_all(page.as_bytes())
            .expect("write page");
        let out = check.wait_with_output().expect("promtool's verdict");
        assert!(
            out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
            "promtool: {}{}\n{page}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A real Prometheus server scrapes a probe, and its query API returns the bandwidth.
#[test]
#[ignore = "needs prometheus (Debian's prometheus package)"]
fn prometheus_scrapes_a_probe_and_serves_the_bandwidth_series() {
    let server = Server::start(&[]);
    let exporter = Exporter::start(&[]);
    let dir = std::env::temp_dir().join(format!("fperf-prometheus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        // As the README's example: the probe's target from the scrape's, the exporter
        // as the address scraped.
        format!(
            "global:\n  scrape_interval: 2s\n  scrape_timeout: 1800ms\n\
             scrape_configs:\n  - job_name: fperf\n    metrics_path: /probe\n\
             \x20   params: {{duration: ['0.5']}}\n\
             \x20   static_configs:\n      - targets: ['127.0.0.1:{}']\n\
             \x20   relabel_configs:\n\
             \x20     - {{source_labels: [__address__], target_label: __param_target}}\n\
             \x20     - {{source_labels: [__param_target], target_label: instance}}\n\
             \x20     - {{target_label: __address__, replacement: '{}'}}\n",
            server.port, exporter.addr
        ),
    )
    .expect("write config");
    let web = port_block(1);
    let mut prometheus = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{web}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start prometheus");
    let log = collect(prometheus.stderr.take().expect("stderr"));
    let web: SocketAddr = ([127, 0, 0, 1], web).into();
    let query = "/api/v1/query?query=fperf_received_bytes_per_second%7Bend%3D%22server%22%7D";
    let deadline = Instant::now() + Duration::from_secs(60);
    let answer = loop {
        let answer = TcpStream::connect_timeout(&web, Duration::from_secs(1))
            .ok()
            .map(|_| http_get(web, query, &[]));
        if let Some((200, body)) = &answer {
            let doc: serde_json::Value = serde_json::from_str(body).expect("JSON");
            if doc["data"]["result"]
                .as_array()
                .is_some_and(|r| !r.is_empty())
            {
                break doc;
            }
        }
        if Instant::now() > deadline {
            let _ = prometheus.kill();
            let _ = prometheus.wait();
            let _ = std::fs::remove_dir_all(&dir);
            panic!("no series after 60 s: {answer:?}\n{}", log.lock().unwrap());
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let (_, up) = http_get(web, "/api/v1/query?query=up", &[]);
    let _ = prometheus.kill();
    let _ = prometheus.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let sample = &answer["data"]["result"][0];
    assert_eq!(sample["metric"]["job"], "fperf");
    assert_eq!(
        sample["metric"]["instance"],
        format!("127.0.0.1:{}", server.port)
    );
    let value: f64 = sample["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .expect("a value");
    assert!(value > 0.0, "{answer}");
    let up: serde_json::Value = serde_json::from_str(&up).expect("JSON");
    assert_eq!(up["data"]["result"][0]["value"][1], "1", "{up}");
}

#[test]
fn a_probe_keeps_to_the_ip_family_it_asks_for() {
    let server = Server::start(&["--json"]);
    let port = server.port;
    let exporter = Exporter::start(&[
        "--allow",
        &format!("localhost:{port}"),
        "--allow",
        &format!("[::1]:{port}"),
    ]);
    // Each test the server served is a line naming the client's address.
    let client_of_test = |n: usize| -> String {
        let text = server.wait_for(|o| o.lines().count() >= n, Duration::from_secs(10));
        let line = text.lines().nth(n - 1).expect("the test's line");
        let doc: serde_json::Value = serde_json::from_str(line).expect("JSON");
        doc["client"].as_str().unwrap_or_default().to_owned()
    };
    exporter.probe(
        &format!("target=localhost:{port}&family=4&duration=0.3"),
        true,
    );
    assert!(client_of_test(1).starts_with("127.0.0.1:"));
    exporter.probe(&format!("target=[::1]:{port}&family=6&duration=0.3"), true);
    assert!(client_of_test(2).starts_with("[::1]:"));

    let query = format!("target=localhost:{port}&family=6&duration=0.3");
    if common::localhost_has_ipv6() {
        exporter.probe(&query, true);
        assert!(client_of_test(3).starts_with("[::1]:"));
    } else {
        let (_, body) = exporter.get(&format!("/probe?{query}"));
        assert!(body.contains("fperf_probe_success 0"), "{body}");
        assert!(
            exporter.logged(|l| l.contains("no IPv6 address")),
            "{}",
            exporter.stderr()
        );
    }
    let (_, body) = exporter.get(&format!("/probe?target=[::1]:{port}&family=4"));
    assert!(body.contains("fperf_probe_success 0"), "{body}");
    assert!(body.contains("not an IPv4 address"), "{body}");
}

/// The status and body of `request`, sent as it is (its head's last line included).
fn raw_request(addr: SocketAddr, request: &str) -> (u16, String) {
    let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read time-out");
    conn.write_all(request.as_bytes()).expect("send request");
    let mut answer = String::new();
    conn.read_to_string(&mut answer).expect("read answer");
    let (head, body) = answer.split_once("\r\n\r\n").expect("headers end");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status code");
    (status, body.to_owned())
}

#[test]
fn requests_for_another_host_or_from_another_sites_page_are_refused() {
    let server = Server::start(&[]);
    let exporter = Exporter::start(&["--host-name", "metrics.example"]);
    let addr = exporter.addr;
    let probe = format!("/probe?target=127.0.0.1:{}&duration=0.2", server.port);
    let get = |headers: &str| {
        raw_request(
            addr,
            &format!("GET {probe} HTTP/1.1\r\n{headers}Connection: close\r\n\r\n"),
        )
    };
    for (headers, why) in [
        // DNS rebinding: a page's own name, pointed at the exporter's address.
        ("Host: rebound.example:{port}\r\n", "Host"),
        ("Host: 127.0.0.1:1\r\n", "Host"),
        ("Host: {addr}\r\nOrigin: http://evil.example\r\n", "Origin"),
        ("Host: {addr}\r\nOrigin: null\r\n", "Origin"),
        (
            "Host: {addr}\r\nSec-Fetch-Site: cross-site\r\n",
            "Sec-Fetch-Site",
        ),
        (
            "Host: {addr}\r\nSec-Fetch-Site: same-site\r\n",
            "Sec-Fetch-Site",
        ),
    ] {
        let headers = headers
            .replace("{port}", &addr.port().to_string())
            .replace("{addr}", &addr.to_string());
        let (status, body) = get(&headers);
        assert_eq!(status, 403, "{headers}: {body}");
        assert!(body.contains(why), "{headers}: {body}");
    }
    // Nothing ran: the refused requests never reached a probe.
    let own = Metrics::parse(&exporter.get("/metrics").1);
    assert_eq!(
        own.get(r#"fperf_exporter_probes_total{result="success"}"#),
        0.0
    );
    assert_eq!(
        own.get(r#"fperf_exporter_probes_total{result="failure"}"#),
        0.0
    );
    // Its own address, localhost, a name it was given, and its own page's origin.
    for headers in [
        format!("Host: {addr}\r\n"),
        format!("Host: localhost:{}\r\n", addr.port()),
        "Host: metrics.example\r\n".to_owned(),
        format!("Host: {addr}\r\nOrigin: http://{addr}\r\nSec-Fetch-Site: same-origin\r\n"),
        String::new(),
    ] {
        let (status, body) = get(&headers);
        assert_eq!(status, 200, "{headers}: {body}");
        assert_eq!(
            Metrics::parse(&body).get("fperf_probe_success"),
            1.0,
            "{headers}: {body}"
        );
    }
}

#[test]
fn a_closed_port_and_a_listener_that_is_no_fperf_server_answer_alike() {
    // One port nothing listens on, one whose listener closes each connection at once,
    // one whose listener takes connections and never answers.
    let closed = port_block(1);
    let closing = TcpListener::bind("127.0.0.1:0").expect("bind");
    let closing_port = closing.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for conn in closing.incoming() {
            drop(conn);
        }
    });
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent_port = silent.local_addr().expect("address").port();
    let exporter = Exporter::start(&[]);
    let probes: Vec<_> = [closed, closing_port, silent_port]
        .into_iter()
        .map(|port| {
            let addr = exporter.addr;
            std::thread::spawn(move || {
                let started = Instant::now();
                let path = format!("/probe?target=127.0.0.1:{port}&duration=0.2");
                let (status, body) = http_get(addr, &path, &[]);
                (status, body, started.elapsed())
            })
        })
        .collect();
    let answers: Vec<(u16, String, Duration)> = probes
        .into_iter()
        .map(|p| p.join().expect("probe"))
        .collect();
    let (status, body, _) = &answers[0];
    assert_eq!(*status, 200);
    assert_eq!(Metrics::parse(body).get("fperf_probe_success"), 0.0);
    assert!(
        !body.contains("cannot connect") && !body.contains("refused"),
        "{body}"
    );
    for (other_status, other, took) in &answers {
        assert_eq!(
            (other_status, other),
            (status, body),
            "the same answer for each"
        );
        // Each took the probe's whole time-out (0.2 s and 5 s of set-up).
        assert!(
            *took >= Duration::from_millis(5100),
            "answered after {took:?}"
        );
    }
    // The exporter's own log still says why each failed.
    assert!(exporter
        .logged(|l| l.contains(&format!("127.0.0.1:{closed}")) && l.contains("cannot connect")));
    drop(silent);
}

#[test]
fn a_bad_parameter_cannot_add_lines_to_the_page_or_the_log() {
    let exporter = Exporter::start(&[]);
    let forged = "x%0Afperf_probe_success%201%0A%1B%5B2J";
    let (status, body) = exporter.get(&format!("/probe?target=127.0.0.1:1&{forged}=1"));
    assert_eq!(status, 200);
    let successes: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("fperf_probe_success"))
        .collect();
    assert_eq!(successes, ["fperf_probe_success 0"], "{body}");
    assert!(!body.contains('\x1b'), "{body}");
    assert!(
        body.contains("unknown parameter x\\nfperf_probe_success 1\\n"),
        "{body}"
    );
    assert!(exporter.logged(|l| l.contains("unknown parameter x\\nfperf_probe_success")));
    let log = exporter.stderr();
    assert!(!log.contains('\x1b'), "{log}");
    assert!(
        !log.lines().any(|l| l.starts_with("fperf_probe_success")),
        "{log}"
    );
}

#[test]
fn an_under_load_probe_answers_each_phases_added_delay_and_rpm() {
    let server = Server::start(&[]);
    let exporter = Exporter::start(&[]);
    let m = exporter.probe(
        &format!(
            "target=127.0.0.1:{}&under_load=1&phases=idle,upload&duration=1&load_flows=2",
            server.port
        ),
        true,
    );
    for phase in ["idle", "upload"] {
        assert!(m.get(&format!(r#"fperf_under_load_rpm{{phase="{phase}"}}"#)) > 0.0);
        assert_eq!(
            m.get(&format!(
                r#"fperf_under_load_probe_loss_ratio{{phase="{phase}"}}"#
            )),
            0.0
        );
        let p50 =
            format!(r#"fperf_under_load_round_trip_seconds{{percentile="50",phase="{phase}"}}"#);
        assert!(m.get(&p50) > 0.0, "{p50}");
    }
    assert_eq!(
        m.get(r#"fperf_under_load_added_delay_seconds{phase="idle"}"#),
        0.0
    );
    assert!(m.has(r#"fperf_under_load_added_delay_seconds{phase="upload"}"#));
    assert!(m.get(r#"fperf_under_load_bits_per_second{direction="up",phase="upload"}"#) > 1e6);
    // Phases that do not fit in the exporter's longest test are refused.
    let (_, body) = exporter.get(&format!(
        "/probe?target=127.0.0.1:{}&under_load=1&phase_time=60",
        server.port
    ));
    assert!(body.contains("fperf_probe_success 0"), "{body}");
}
