//! End-to-end runs of `--epoll`: both ends' sockets never block and each thread waits
//! in an epoll instance of its own. Every byte, datagram and ACK is counted from both
//! ends' `--json` figures, and the processes are looked at while they run: with the
//! flag each end holds an epoll instance, without it neither does.

mod common;
use common::*;
use serde_json::Value;
use std::time::{Duration, Instant};

const MB: u64 = 1 << 20;

#[test]
fn tcp_moves_and_echoes_every_byte() {
    // Two streams of two sockets: the receiving path waits for both in one instance.
    let doc = run_json(&["-m", "4", "-t", "2", "-n", "2", "--epoll"]);
    assert_eq!(doc["settings"]["epoll"], Value::Bool(true));
    assert_eq!(json_u64(&doc, &["client", "total", "bytes_sent"]), 8 * MB);
    assert_eq!(
        json_u64(&doc, &["server", "total", "bytes_received"]),
        8 * MB
    );
    let doc = run_json(&["-m", "4", "--reverse", "--epoll", "--zerocopy"]);
    assert_eq!(json_u64(&doc, &["server", "total", "bytes_sent"]), 4 * MB);
    assert_eq!(
        json_u64(&doc, &["client", "total", "bytes_received"]),
        4 * MB
    );
    // 1 MB in 1000-byte packets: 1049 round trips, the short last one echoed too.
    let doc = run_json(&["-m", "1", "-l", "1000", "--echo", "--epoll"]);
    assert_eq!(json_u64(&doc, &["client", "total", "bytes_received"]), MB);
    assert_eq!(json_u64(&doc, &["server", "total", "bytes_sent"]), MB);
    assert_eq!(
        json_u64(&doc, &["client", "total", "send_latency", "count"]),
        1049
    );
    let doc = run_json(&["-m", "1"]);
    assert_eq!(doc["settings"]["epoll"], Value::Bool(false));
}

#[test]
fn udp_counts_every_datagram_and_ack() {
    let doc = run_json(&["-u", "-l", "32K", "-m", "4", "-n", "2", "--epoll"]);
    let received = &doc["server"]["total"]["datagrams"];
    assert_eq!(
        json_u64(&doc, &["client", "total", "datagrams", "sent"]),
        4 * MB / 32768
    );
    assert_eq!(
        json_u64(received, &["received"]),
        4 * MB / 32768,
        "{received}"
    );
    assert_eq!(json_u64(received, &["lost"]), 0);
    // MPRTT: an ACK per datagram, each waited for in epoll_wait() on both ends. A
    // generous ACK time-out keeps a stalled machine from resending; should it happen,
    // the counts must still agree.
    let doc = run_json(&[
        "-u",
        "-r",
        "-m",
        "1",
        "-l",
        "1000",
        "--ack-timeout",
        "2000",
        "--epoll",
    ]);
    let retries = json_u64(&doc, &["client", "total", "retries"]);
    assert_eq!(
        json_u64(&doc, &["client", "total", "datagrams", "sent"]),
        1049
    );
    assert_eq!(
        json_u64(&doc, &["server", "total", "datagrams", "received"]),
        1049 + retries
    );
    assert_eq!(
        json_u64(&doc, &["server", "total", "bytes_sent"]),
        1049 + retries
    );
    let acks = json_u64(&doc, &["client", "total", "bytes_received"]);
    assert!((1049..=1049 + retries).contains(&acks), "{acks} ACK bytes");
}

/// The epoll instances in process `pid`'s descriptor table.
fn epoll_instances(pid: u32) -> usize {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy() == "anon_inode:[eventpoll]")
        .count()
}

/// Runs a 2-second MPRTT client with `args` against `server` and returns how many epoll
/// instances the client and the server held at most while it ran, and the client's
/// output.
fn instances_while_running(server: &Server, args: &[&str]) -> (usize, usize, String) {
    let port = server.port.to_string();
    let mut all = vec!["-c", "127.0.0.1", "-p", &port, "-r", "--time", "2"];
    all.extend_from_slice(args);
    let (mut client_most, mut server_most) = (0, 0);
    let out = run_with(&all, Duration::from_secs(30), |child| {
        let until = Instant::now() + Duration::from_millis(1500);
        while Instant::now() < until {
            client_most = client_most.max(epoll_instances(child.id()));
            server_most = server_most.max(epoll_instances(server.pid()));
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (client_most, server_most, text)
}

#[test]
fn both_ends_wait_in_epoll_only_when_asked_and_say_so() {
    for udp in [false, true] {
        let server = Server::start(&[]);
        let proto: &[&str] = if udp { &["-u"] } else { &[] };
        let (client, served, text) = instances_while_running(&server, proto);
        assert_eq!((client, served), (0, 0), "without --epoll:\n{text}");
        assert!(!text.contains("engine="), "{text}");
        let args = [proto, &["--epoll"]].concat();
        let (client, served, text) = instances_while_running(&server, &args);
        assert!(client >= 1 && served >= 1, "{client} {served}\n{text}");
        let header = text.lines().next().unwrap_or_default();
        assert!(header.contains(" engine=epoll"), "{text}");
        assert!(
            server.report(2).contains(" engine=epoll"),
            "{}",
            server.report(2)
        );
    }
}
