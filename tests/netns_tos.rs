//! Marks in the IP header on the wire: in a network namespace of its own (only its
//! loopback, so nothing else is counted), nftables counts the packets of fperf's data
//! ports by their DSCP (`--tos` / `--dscp`), for TCP and UDP over IPv4 and IPv6, from the
//! client and from the server, and by their IPv6 flow label (`-L`). Every data packet
//! must carry the mark, and none go unmarked. Needs root, `ip` and `nft`: marked
//! ignored, and run by scripts/test.sh as root.

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
    /// A namespace whose name holds `tag`, so that tests running at once have their own.
    fn create(tag: &str) -> Namespace {
        let ns = Namespace(format!("fperf-{tag}-{}", std::process::id()));
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

    /// The packet counters of the rules of table `table`'s chain `out`, in order.
    fn counters(&self, table: &str) -> Vec<u64> {
        let text = sh(&[
            "ip", "netns", "exec", &self.0, "nft", "list", "chain", "inet", table, "out",
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
    let ns = Namespace::create("tos");
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
    let server = NsServer::start(&ns);
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
    drop(server);
    let counts = ns.counters("fperf_tos");
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

/// `fperf -s` in `ns`, once it listens; killed on drop.
struct NsServer(std::process::Child);

impl NsServer {
    fn start(ns: &Namespace) -> NsServer {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &ns.0, fperf_bin(), "-s"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start fperf -s");
        let out = collect(child.stdout.take().expect("stdout"));
        let server = NsServer(child);
        let t0 = Instant::now();
        while !out.lock().expect("out").contains("Server listening") {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }
}

impl Drop for NsServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[ignore = "needs root"]
fn every_data_packet_of_the_client_carries_its_ipv6_flow_label() {
    // SAFETY: geteuid() has no preconditions and cannot fail.
    assert_eq!(unsafe { libc::geteuid() }, 0, "needs root (ip netns, nft)");
    let ns = Namespace::create("flowlabel");
    // The client's packets to stream 1's port (the base port also carries the control
    // connection): with the label, and with any other (the kernel makes labels up).
    let data = format!("tcp dport {}", PORT + 1);
    ns.nft(&format!(
        "table inet fperf_label {{
           chain out {{ type filter hook output priority 0; policy accept;
             ip6 flowlabel 12345 {data} counter; ip6 flowlabel != 12345 {data} counter; }}
         }}"
    ));
    let _server = NsServer::start(&ns);
    let client = |extra: &[&str]| {
        let mut all = vec![fperf_bin(), "-c", "::1", "-t", "2", "-m", "8"];
        all.extend_from_slice(extra);
        ns.run(&all)
    };
    client(&[]);
    let unlabelled = ns.counters("fperf_label");
    assert_eq!(unlabelled[0], 0, "{unlabelled:?}");
    assert!(unlabelled[1] > 10, "{unlabelled:?}");
    for way in [&[][..], &["--reverse"][..]] {
        let before = ns.counters("fperf_label");
        let mut args = vec!["-L", "12345"];
        args.extend_from_slice(way);
        let report = client(&args);
        assert!(report.contains(" flowlabel=12345"), "{report}");
        let after = ns.counters("fperf_label");
        assert!(after[0] > before[0] + 10, "{way:?}: {after:?}");
        assert_eq!(after[1], before[1], "{way:?}: none without it");
    }
}
