//! `--tos` / `--dscp` on the wire: in a network namespace of its own (only its
//! loopback, so nothing else is counted), nftables counts the packets of fperf's data
//! ports by their DSCP, for TCP and UDP over IPv4 and IPv6, from the client and from the
//! server. Every data packet must carry the mark, and none go unmarked. Needs root, `ip`
//! and `nft`: marked ignored, and run by scripts/test.sh as root.

mod common;
use common::{collect, fperf_bin, nft_in, sh};
use regex::Regex;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The server's base port (control, and TCP stream 0); TCP stream 1 has the next one.
const PORT: u16 = 28444;

/// A namespace with only its loopback up; deleted on drop.
struct Namespace(String);

impl Namespace {
    fn create() -> Namespace {
        let ns = Namespace(format!("fperf-tos-{}", std::process::id()));
        sh(&["ip", "netns", "add", &ns.0]);
        sh(&["ip", "-n", &ns.0, "link", "set", "lo", "up"]);
        ns
    }

    /// `args` run inside the namespace, with a time limit.
    fn run(&self, args: &[&str]) -> String {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.0])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ip netns exec");
        let out = collect(child.stdout.take().expect("stdout"));
        let err = collect(child.stderr.take().expect("stderr"));
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{args:?} did not finish in 60 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        std::thread::sleep(Duration::from_millis(50));
        let text = out.lock().expect("stdout").clone();
        assert!(
            status.success(),
            "{args:?}: {text}\n{}",
            err.lock().expect("stderr")
        );
        text
    }

    fn nft(&self, rules: &str) {
        nft_in(&self.0, rules);
    }

    /// The packet counters of the chain's rules, in order.
    fn counters(&self) -> Vec<u64> {
        let text = sh(&[
            "ip",
            "netns",
            "exec",
            &self.0,
            "nft",
            "list",
            "chain",
            "inet",
            "fperf_tos",
            "out",
        ]);
        Regex::new(r"counter packets (\d+)")
            .expect("regex")
            .captures_iter(&text)
            .map(|c| c[1].parse().expect("number"))
            .collect()
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

#[test]
#[ignore = "needs root"]
fn every_data_packet_of_both_ends_carries_the_dscp_over_tcp_and_udp_v4_and_v6() {
    // SAFETY: geteuid() has no preconditions and cannot fail.
    assert_eq!(unsafe { libc::geteuid() }, 0, "needs root (ip netns, nft)");
    let ns = Namespace::create();
    // Per case, in this order: marked EF, then anything else. TCP's data port is stream
    // 1's (the base port also carries the control connection); every UDP datagram of
    // the ports is data.
    let cases = [
        ("ip", "tcp", format!("{}", PORT + 1)),
        ("ip6", "tcp", format!("{}", PORT + 1)),
        ("ip", "udp", format!("{PORT}-{}", PORT + 1)),
        ("ip6", "udp", format!("{PORT}-{}", PORT + 1)),
    ];
    let mut rules = String::new();
    for (family, proto, ports) in &cases {
        for way in ["dport", "sport"] {
            rules += &format!(
                "meta nfproto {} {proto} {way} {ports} {family} dscp ef counter;
                 meta nfproto {} {proto} {way} {ports} {family} dscp != ef counter;\n",
                if *family == "ip" { "ipv4" } else { "ipv6" },
                if *family == "ip" { "ipv4" } else { "ipv6" },
            );
        }
    }
    ns.nft(&format!(
        "table inet fperf_tos {{
           chain out {{ type filter hook output priority 0; policy accept;
             {rules} }}
         }}"
    ));
    let mut server = Command::new("ip")
        .args(["netns", "exec", &ns.0, fperf_bin(), "-s"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fperf -s");
    let server_out = collect(server.stdout.take().expect("stdout"));
    let t0 = Instant::now();
    while !server_out.lock().expect("out").contains("Server listening") {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "server did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let runs: [(&str, &[&str]); 6] = [
        ("127.0.0.1", &["-t", "2", "-m", "8"]),
        ("::1", &["-t", "2", "-m", "8"]),
        ("127.0.0.1", &["-u", "-t", "2", "-m", "2", "-b", "200M"]),
        (
            "127.0.0.1",
            &["-u", "-t", "2", "-m", "2", "-b", "200M", "--reverse"],
        ),
        ("::1", &["-u", "-t", "2", "-m", "2", "-b", "200M"]),
        (
            "::1",
            &["-u", "-t", "2", "-m", "2", "-b", "200M", "--reverse"],
        ),
    ];
    for (host, args) in runs {
        let mut all = vec![fperf_bin(), "-c", host, "--dscp", "EF"];
        all.extend_from_slice(args);
        let report = ns.run(&all);
        assert!(report.contains(" tos=0xb8"), "the header says so: {report}");
    }
    let _ = server.kill();
    let _ = server.wait();
    let counts = ns.counters();
    assert_eq!(counts.len(), 16, "{counts:?}");
    for (i, (family, proto, _)) in cases.iter().enumerate() {
        for (j, way) in ["client to server", "server to client"].iter().enumerate() {
            let at = 4 * i + 2 * j;
            let (marked, unmarked) = (counts[at], counts[at + 1]);
            assert!(marked > 10, "{family} {proto} {way}: {counts:?}");
            assert_eq!(unmarked, 0, "{family} {proto} {way}: {counts:?}");
        }
    }
}
