//! `fperf mesh` across network namespaces: hosts on a bridge, each running `fperf -s
//! --allow-mesh --auth-key FILE` in a namespace of its own, every link shaped by tbf,
//! one host's to a fifth of the others' rate. That host's pairs must show its rate and
//! be flagged, no other pair may be, a host that is down is marked, and the mesh takes
//! about rounds × test time. Needs root, `ip` and `tc`: marked ignored, and run by
//! scripts/test.sh as root.

mod common;
use common::{collect, fperf_bin, sh};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The rate of every host's link, and of the slow host's.
const LINK_MBIT: u64 = 500;
const SLOW_MBIT: u64 = 100;
/// TCP payload per Ethernet frame as tbf counts it: an MSS of 1448 bytes (timestamps
/// on) in 1448 + 32 (TCP) + 20 (IP) + 14 (Ethernet) bytes.
const GOODPUT_SHARE: f64 = 1448.0 / 1514.0;

/// A bridge in a namespace of its own (where the coordinator runs), and hosts on it,
/// each in its own namespace with its link shaped; all deleted on drop.
struct Mesh {
    prefix: String,
    hosts: usize,
    servers: Vec<Child>,
}

impl Mesh {
    fn create(hosts: usize, slow: usize) -> Mesh {
        let prefix = format!("fpm{}", std::process::id() % 100_000);
        let mesh = Mesh {
            prefix,
            hosts,
            servers: Vec::new(),
        };
        let hub = mesh.hub();
        sh(&["ip", "netns", "add", &hub]);
        sh(&["ip", "-n", &hub, "link", "set", "lo", "up"]);
        sh(&["ip", "-n", &hub, "link", "add", "br0", "type", "bridge"]);
        sh(&[
            "ip",
            "-n",
            &hub,
            "addr",
            "add",
            "10.77.0.100/24",
            "dev",
            "br0",
        ]);
        sh(&["ip", "-n", &hub, "link", "set", "br0", "up"]);
        for i in 0..hosts {
            let ns = mesh.host(i);
            let (inside, outside) = (format!("v{i}"), format!("b{i}"));
            sh(&["ip", "netns", "add", &ns]);
            sh(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
            sh(&[
                "ip", "-n", &hub, "link", "add", &outside, "type", "veth", "peer", "name", &inside,
                "netns", &ns,
            ]);
            sh(&[
                "ip", "-n", &hub, "link", "set", &outside, "master", "br0", "up",
            ]);
            sh(&[
                "ip",
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", mesh.address(i)),
                "dev",
                &inside,
            ]);
            sh(&["ip", "-n", &ns, "link", "set", &inside, "up"]);
            // Both ways: the host's sending and what the bridge sends it.
            let mbit = if i == slow { SLOW_MBIT } else { LINK_MBIT };
            for (namespace, dev) in [(&ns, &inside), (&hub, &outside)] {
                sh(&[
                    "ip",
                    "netns",
                    "exec",
                    namespace,
                    "tc",
                    "qdisc",
                    "add",
                    "dev",
                    dev,
                    "root",
                    "tbf",
                    "rate",
                    &format!("{mbit}mbit"),
                    "burst",
                    "64kb",
                    "latency",
                    "50ms",
                ]);
            }
        }
        mesh
    }

    fn hub(&self) -> String {
        format!("{}-hub", self.prefix)
    }

    fn host(&self, i: usize) -> String {
        format!("{}-h{i}", self.prefix)
    }

    fn address(&self, i: usize) -> String {
        format!("10.77.0.{}", i + 1)
    }

    /// Starts the mesh server of host `i`, waiting until it listens.
    fn serve(&mut self, i: usize, key: &str) {
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.host(i),
                fperf_bin(),
                "-s",
                "--allow-mesh",
            ])
            .args(["--auth-key", key, "-B", &self.address(i)])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start a server");
        let out = collect(child.stdout.take().expect("stdout"));
        let err = collect(child.stderr.take().expect("stderr"));
        self.servers.push(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !out.lock().expect("stdout").contains("Server listening") {
            assert!(
                Instant::now() < deadline,
                "host {i}'s server did not start: {}",
                err.lock().expect("stderr")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `fperf mesh ARGS --json` from the bridge's namespace: its exit status, its
    /// document and its progress.
    fn run(&self, args: &[&str]) -> (Option<i32>, serde_json::Value, String) {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.hub(),
                "timeout",
                "300",
                fperf_bin(),
                "mesh",
                "--json",
            ])
            .args(args)
            .output()
            .expect("run the mesh");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let doc = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));
        (out.status.code(), doc, stderr)
    }
}

impl Drop for Mesh {
    fn drop(&mut self) {
        for server in &mut self.servers {
            let _ = server.kill();
            let _ = server.wait();
        }
        for i in 0..self.hosts {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.host(i)])
                .status();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.hub()])
            .status();
    }
}

#[test]
#[ignore = "needs root"]
fn a_slow_link_shows_its_rate_and_is_flagged_and_a_host_that_is_down_is_marked() {
    // SAFETY: geteuid() has no preconditions and cannot fail.
    assert_eq!(unsafe { libc::geteuid() }, 0, "needs root (ip netns, tc)");
    let key = std::env::temp_dir().join(format!("fperf-netns-mesh-{}.key", std::process::id()));
    std::fs::write(&key, "the mesh's secret").expect("key file");
    let key_path = key.to_str().expect("path").to_owned();
    // Hosts 0..4 serve, host 2's link is the slow one, host 5 is down.
    let (hosts, slow, down) = (6, 2, 5);
    let mut mesh = Mesh::create(hosts, slow);
    for i in (0..hosts).filter(|&i| i != down) {
        mesh.serve(i, &key_path);
    }
    let names: Vec<String> = (0..hosts).map(|i| mesh.address(i)).collect();
    let test_secs = 2.0;
    let mut args = vec!["--auth-key", &key_path, "--time", "2"];
    args.extend(names.iter().map(String::as_str));
    let started = Instant::now();
    let (code, doc, stderr) = mesh.run(&args);
    let wall = started.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&key);
    // The host that is down fails its pairs, each way: the exit status says so, and
    // stderr counts them.
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("fperf mesh: 10 of 30 pairs failed"),
        "{stderr}"
    );

    // Six hosts: ten rounds of three tests, not thirty tests one after another (that
    // would take 20 x 2 s + 5 x 10 s). A server's test towards the host that is down
    // reports its failure only after the server's 10 s control time-out, whatever the
    // cause, so that no key holder can tell a closed port from a silent one: five of
    // the rounds hold one such test.
    let rounds = doc["rounds"].as_u64().expect("rounds") as f64;
    assert_eq!(rounds, 10.0);
    let (towards_down, failure_alike_secs) = ((hosts - 1) as f64, 10.0);
    assert!(wall >= rounds * test_secs, "{wall} s");
    assert!(
        wall < rounds * (test_secs + 1.0) + towards_down * (failure_alike_secs - test_secs),
        "{wall} s for {rounds} rounds: {stderr}"
    );

    let cell = |from: usize, to: usize| doc["matrix"][from][to].as_f64();
    let goodput = |mbit: u64| mbit as f64 * 1e6 * GOODPUT_SHARE;
    for from in 0..hosts {
        for to in (0..hosts).filter(|&to| to != from) {
            if from == down || to == down {
                assert_eq!(cell(from, to), None, "{from} -> {to}");
                continue;
            }
            let got = cell(from, to).unwrap_or_else(|| panic!("{from} -> {to}: {doc:#}"));
            let want = goodput(if from == slow || to == slow {
                SLOW_MBIT
            } else {
                LINK_MBIT
            });
            // The slow link within 3% of its goodput; the others near theirs.
            let slack = if from == slow || to == slow {
                0.03
            } else {
                0.10
            };
            assert!(
                (got - want).abs() <= want * slack,
                "{from} -> {to}: {got} bit/s, expected {want} within {slack}"
            );
        }
    }
    // Flagged: the slow host's pairs (below the median) and the down host's (failed).
    let host_index = |name: &serde_json::Value| names.iter().position(|n| name == n.as_str());
    let mut flagged: Vec<(usize, usize, String)> = doc["outliers"]
        .as_array()
        .expect("outliers")
        .iter()
        .map(|o| {
            let from = host_index(&o["from"]).expect("a host");
            let to = host_index(&o["to"]).expect("a host");
            (from, to, o["reason"].as_str().unwrap_or("").to_owned())
        })
        .collect();
    flagged.sort();
    let expected: Vec<(usize, usize)> = (0..hosts)
        .flat_map(|a| (0..hosts).map(move |b| (a, b)))
        .filter(|&(a, b)| a != b && [a, b].iter().any(|h| *h == slow || *h == down))
        .collect();
    assert_eq!(
        flagged.iter().map(|(a, b, _)| (*a, *b)).collect::<Vec<_>>(),
        expected,
        "{flagged:#?}"
    );
    for (from, to, reason) in &flagged {
        if *from == down || *to == down {
            assert!(reason.starts_with("failed"), "{reason}");
        } else {
            assert!(reason.contains("below 0.8 of the median"), "{reason}");
        }
    }
}
