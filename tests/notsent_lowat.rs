//! `--notsent-lowat`, a TCP option declared once, reaches the data sockets from every
//! front end that takes it (the command line, `fperf mesh`, the exporter's probe), and a
//! server that lacks it refuses the test before any data flows.
//!
//! The servers run in this process, so that their data sockets can be read back with
//! getsockopt(TCP_NOTSENT_LOWAT) while a test runs.

mod common;

use common::{fperf_bin, older_server, run, run_with};
use fperf::auth::AuthKey;
use fperf::control::PROTOCOL_MINOR;
use fperf::server::{Server, ServerConfig};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::RawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// An fperf server in this process, serving until dropped.
struct LocalServer {
    port: u16,
    stop: Arc<AtomicBool>,
    serving: Option<JoinHandle<()>>,
}

impl LocalServer {
    fn start(config: ServerConfig) -> LocalServer {
        let server = Server::bind(ServerConfig {
            bind: Some("127.0.0.1".parse().unwrap()),
            port: 0,
            ..config
        })
        .expect("bind");
        let port = server.local_addr().expect("address").port();
        let stop = Arc::new(AtomicBool::new(false));
        let serving = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let _ = server.run(&stop, &mut |_event| {});
            })
        };
        LocalServer {
            port,
            stop,
            serving: Some(serving),
        }
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(serving) = self.serving.take() {
            let _ = serving.join();
        }
    }
}

/// This process's sockets whose `TCP_NOTSENT_LOWAT` is `bytes`.
fn sockets_holding_unsent_to(bytes: i32) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    dir.flatten()
        .filter(|entry| {
            std::fs::read_link(entry.path())
                .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"))
        })
        .filter_map(|entry| entry.file_name().to_str()?.parse::<RawFd>().ok())
        .filter(|&fd| notsent_lowat(fd) == Some(bytes))
        .count()
}

fn notsent_lowat(fd: RawFd) -> Option<i32> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` describe a c_int; a descriptor closed meanwhile fails.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(value)
}

/// Waits up to `within` for a socket of this process holding unsent bytes to `bytes`.
fn saw_sockets_holding_unsent_to(bytes: i32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if sockets_holding_unsent_to(bytes) > 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[test]
fn the_command_lines_notsent_lowat_reaches_the_servers_data_sockets() {
    let server = LocalServer::start(ServerConfig::default());
    let port = server.port.to_string();
    let mut seen = false;
    let out = run_with(
        &[
            "-c",
            "127.0.0.1",
            "-p",
            &port,
            "--time",
            "2",
            "--notsent-lowat",
            "24K",
        ],
        Duration::from_secs(30),
        |_| seen = saw_sockets_holding_unsent_to(24 << 10, Duration::from_secs(2)),
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(seen, "no data socket held unsent bytes to 24K:\n{stdout}");
    assert!(stdout.contains(" notsent_lowat=24"), "{stdout}");
}

#[test]
fn a_probes_notsent_lowat_reaches_the_servers_data_sockets() {
    let server = LocalServer::start(ServerConfig::default());
    let mut exporter = Command::new(fperf_bin())
        .args(["exporter", "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start fperf exporter");
    let mut stdout = exporter.stdout.take().expect("stdout");
    let mut said = String::new();
    let mut byte = [0u8; 1];
    while !said.contains("listening on http://") || !said.ends_with('\n') {
        match stdout.read(&mut byte) {
            Ok(1) => said.push(byte[0] as char),
            _ => panic!("the exporter did not start: {said}"),
        }
    }
    let addr = said
        .split("listening on http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .expect("an address")
        .to_owned();
    let query = format!(
        "/probe?target=127.0.0.1:{}&duration=2&notsent_lowat=20K",
        server.port
    );
    let probe = std::thread::spawn(move || {
        let mut conn = TcpStream::connect(&addr).expect("connect");
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("time-out");
        write!(conn, "GET {query} HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("request");
        let mut answer = String::new();
        conn.read_to_string(&mut answer).expect("answer");
        answer
    });
    let seen = saw_sockets_holding_unsent_to(20 << 10, Duration::from_secs(3));
    let answer = probe.join().expect("the probe");
    let _ = exporter.kill();
    let _ = exporter.wait();
    assert!(answer.contains("fperf_probe_success 1"), "{answer}");
    assert!(seen, "no data socket held unsent bytes to 20K");
}

#[test]
fn a_meshs_notsent_lowat_reaches_the_sending_servers_data_sockets() {
    let key_path = std::env::temp_dir().join(format!("fperf-notsent-{}.key", std::process::id()));
    std::fs::write(&key_path, "a shared secret of the mesh").expect("key");
    let key = AuthKey::from_file(&key_path).expect("a key");
    let config = || ServerConfig {
        auth: Some(key.clone()),
        allow_mesh: true,
        ..ServerConfig::default()
    };
    let (a, b) = (LocalServer::start(config()), LocalServer::start(config()));
    let hosts = [
        format!("127.0.0.1:{}", a.port),
        format!("127.0.0.1:{}", b.port),
    ];
    let mut seen = false;
    let out = run_with(
        &[
            "mesh",
            &hosts[0],
            &hosts[1],
            "--auth-key",
            key_path.to_str().expect("a UTF-8 path"),
            "--pattern",
            "ring",
            "--time",
            "2",
            "--notsent-lowat",
            "28K",
        ],
        Duration::from_secs(60),
        |_| seen = saw_sockets_holding_unsent_to(28 << 10, Duration::from_secs(4)),
    );
    let _ = std::fs::remove_file(&key_path);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(seen, "no data socket held unsent bytes to 28K:\n{stdout}");
}

#[test]
fn a_server_without_notsent_lowat_refuses_it_before_any_data_flows() {
    let mut known = fperf::features::supported_names();
    known.retain(|name| name != "notsent_lowat");
    for (minor, features) in [(PROTOCOL_MINOR, Some(known)), (0, None)] {
        let (port, fake) = older_server("fperf 0.2.0", minor, features);
        let out = run(
            &[
                "-c",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "--time",
                "1",
                "--notsent-lowat",
                "16K",
            ],
            Duration::from_secs(20),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains("the server (fperf 0.2.0, protocol")
                && err.contains("does not support --notsent-lowat"),
            "{err}"
        );
        let after = fake.join().unwrap();
        assert!(
            !after.iter().any(|kind| kind == "settings"),
            "the client went on: {after:?}"
        );
    }
}

#[test]
fn notsent_lowat_is_refused_where_it_cannot_hold() {
    for (args, want) in [
        (
            &["--notsent-lowat", "16K", "--fq-rate", "1G"][..],
            "--fq-rate bounds the unsent bytes itself",
        ),
        (
            &["--notsent-lowat", "0"][..],
            "--notsent-lowat must be between 1 byte",
        ),
        (
            &["--notsent-lowat", "16K", "-u"][..],
            "--notsent-lowat is a TCP option",
        ),
        (
            &["--notsent-lowat", "lots"][..],
            "'lots' is not a byte count",
        ),
    ] {
        let mut all = vec!["-c", "127.0.0.1", "-p", "9"];
        all.extend_from_slice(args);
        let out = run(&all, Duration::from_secs(10));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
