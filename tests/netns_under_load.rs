//! `--under-load` against a path whose queues are known: three network namespaces,
//! client, router and server, joined by a veth pair each side (10.77.1.0/24 and
//! 10.77.2.0/24; the addresses exist only inside them). On the router each egress
//! interface has a `tbf` qdisc of rate R and a queue limit of its own, so each loaded
//! direction's queue adds up to L/R to the round trip: the figures fperf reports must
//! match those. nftables on the router drops every 20th probe of one run, which must
//! show as 5% loss without moving the median. The namespaces are deleted when the test
//! ends, failed or not. Needs root, `ip`, `tc` and `nft`: marked ignored, and run by
//! scripts/test.sh as root.

mod common;
use common::{fperf_bin, nft_in, run_in, sh, NsServer};
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

const CLIENT_IP: &str = "10.77.1.2";
const ROUTER_CLIENT_SIDE: &str = "10.77.1.1";
const ROUTER_SERVER_SIDE: &str = "10.77.2.1";
const SERVER_IP: &str = "10.77.2.2";

/// The bottleneck's rate each way, bits per second.
const RATE_BPS: f64 = 50e6;
/// Each direction's queue: the upload's (router → server) and the download's (router
/// → client), in bytes: 50 ms and 100 ms at the rate.
const UP_QUEUE: u64 = 312_500;
const DOWN_QUEUE: u64 = 625_000;
/// tbf's bucket: the burst it may send at once beyond the rate.
const BURST: u64 = 32 * 1024;
/// A full frame on the wire as tbf counts it (the IP packet and the Ethernet header)
/// and the TCP payload it carries (1500 less IP, TCP and its timestamp option).
const FRAME: f64 = 1514.0;
const PAYLOAD: f64 = 1448.0;

fn require_root() {
    // SAFETY: geteuid() has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() == 0 };
    assert!(
        root,
        "network-namespace tests need root (ip netns, tc, nft)"
    );
}

/// The time `bytes` take at the bottleneck's rate, in ms.
fn at_rate_ms(bytes: u64) -> f64 {
    bytes as f64 * 8.0 / RATE_BPS * 1e3
}

/// Client, router and server namespaces; deleted (with their veths) on drop.
struct Path {
    client: String,
    router: String,
    server: String,
}

impl Path {
    fn create() -> Path {
        let tag = std::process::id() % 100_000;
        let path = Path {
            client: format!("ul-c{tag}"),
            router: format!("ul-r{tag}"),
            server: format!("ul-s{tag}"),
        };
        for ns in [&path.client, &path.router, &path.server] {
            sh(&["ip", "netns", "add", ns]);
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        // Interface names are at most 15 bytes.
        let (cr, rc) = (format!("ulc{tag}"), format!("ulrc{tag}"));
        let (rs, sr) = (format!("ulrs{tag}"), format!("uls{tag}"));
        path.veth(
            (&path.client, &cr, CLIENT_IP),
            (&path.router, &rc, ROUTER_CLIENT_SIDE),
        );
        path.veth(
            (&path.router, &rs, ROUTER_SERVER_SIDE),
            (&path.server, &sr, SERVER_IP),
        );
        sh(&[
            "ip",
            "-n",
            &path.client,
            "route",
            "add",
            "default",
            "via",
            ROUTER_CLIENT_SIDE,
        ]);
        sh(&[
            "ip",
            "-n",
            &path.server,
            "route",
            "add",
            "default",
            "via",
            ROUTER_SERVER_SIDE,
        ]);
        sh(&[
            "ip",
            "netns",
            "exec",
            &path.router,
            "sysctl",
            "-qw",
            "net.ipv4.ip_forward=1",
        ]);
        path
    }

    /// A veth pair between two (namespace, device, address) ends, up, each in a /24.
    fn veth(&self, a: (&str, &str, &str), b: (&str, &str, &str)) {
        sh(&[
            "ip", "link", "add", a.1, "netns", a.0, "type", "veth", "peer", "name", b.1, "netns",
            b.0,
        ]);
        for (ns, dev, ip) in [a, b] {
            sh(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{ip}/24"),
                "dev",
                dev,
            ]);
            sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
        }
    }

    /// The router's bottleneck: tbf at the rate on both egress interfaces, the upload's
    /// queue towards the server and the download's towards the client.
    fn shape(&self) {
        let tag = std::process::id() % 100_000;
        for (dev, limit) in [
            (format!("ulrs{tag}"), UP_QUEUE),
            (format!("ulrc{tag}"), DOWN_QUEUE),
        ] {
            sh(&[
                "ip",
                "netns",
                "exec",
                &self.router,
                "tc",
                "qdisc",
                "add",
                "dev",
                &dev,
                "root",
                "tbf",
                "rate",
                &format!("{}", RATE_BPS as u64),
                "burst",
                &BURST.to_string(),
                "limit",
                &limit.to_string(),
            ]);
        }
    }

    /// Starts `fperf -s` in the server's namespace.
    fn server(&self) -> NsServer {
        NsServer::start(&self.server, &[])
    }

    /// Runs `fperf -c SERVER_IP --under-load --json ARGS` in the client's namespace and
    /// returns its `under_load` object.
    fn under_load(&self, args: &[&str], server: &NsServer) -> Value {
        let mut all = vec![fperf_bin(), "-c", SERVER_IP, "--under-load", "--json"];
        all.extend_from_slice(args);
        let output = run_in(&self.client, &all, Duration::from_secs(60));
        let status = output.status;
        let out = String::from_utf8_lossy(&output.stdout).to_string();
        let err = String::from_utf8_lossy(&output.stderr).to_string();
        assert!(
            status.success(),
            "client {args:?} failed\n{out}\n{err}\nserver:\n{}\n{}",
            server.stdout(),
            server.stderr()
        );
        let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        doc["under_load"].clone()
    }
}

impl Drop for Path {
    fn drop(&mut self) {
        for ns in [&self.client, &self.router, &self.server] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// The phase named `name` of an `under_load` object.
fn phase<'a>(under_load: &'a Value, name: &str) -> &'a Value {
    under_load["phases"]
        .as_array()
        .and_then(|phases| phases.iter().find(|p| p["name"] == name))
        .unwrap_or_else(|| panic!("no {name} phase in {under_load}"))
}

/// A figure of a phase in ms: `rtt`'s `key` (`p50_ns`, `max_ns`) or `added_delay_ns`.
fn ms(phase: &Value, key: &str) -> f64 {
    let v = match key {
        "added_delay_ns" => &phase[key],
        _ => &phase["rtt"][key],
    };
    v.as_f64().unwrap_or_else(|| panic!("no {key} in {phase}")) / 1e6
}

#[test]
#[ignore = "needs root: creates network namespaces, tc qdiscs and nftables rules"]
fn the_delay_a_loaded_queue_adds_is_the_queue_s_length_at_the_rate() {
    require_root();
    let path = Path::create();
    let server = path.server();

    // The path unshaped: its round trip, and every 20th probe dropped on the way.
    nft_in(
        &path.router,
        &format!(
            "table inet ul_probe_loss {{
               chain forward {{ type filter hook forward priority 0; policy accept;
                 ip saddr {CLIENT_IP} udp length 56 numgen inc mod 20 == 0 counter drop; }}
             }}"
        ),
    );
    let unshaped = path.under_load(&["--phases", "idle:3"], &server);
    let idle = phase(&unshaped, "idle");
    let dropped: u64 = {
        let rules = sh(&[
            "ip",
            "netns",
            "exec",
            &path.router,
            "nft",
            "list",
            "table",
            "inet",
            "ul_probe_loss",
        ]);
        let at = rules.find("counter packets ").expect("a counter") + "counter packets ".len();
        rules[at..].split(' ').next().unwrap().parse().unwrap()
    };
    sh(&[
        "ip",
        "netns",
        "exec",
        &path.router,
        "nft",
        "delete",
        "table",
        "inet",
        "ul_probe_loss",
    ]);
    let (sent, lost) = (
        idle["probes_sent"].as_u64().unwrap(),
        idle["probes_lost"].as_u64().unwrap(),
    );
    let loss = idle["probe_loss"].as_f64().unwrap();
    eprintln!(
        "unshaped: {sent} probes, {lost} lost ({dropped} dropped by nftables in all), p50 {:.3} ms",
        ms(idle, "p50_ns")
    );
    assert!((0.04..=0.06).contains(&loss), "loss {loss} of {idle}");
    assert!(
        lost <= dropped && dropped <= lost + 2,
        "lost {lost}, dropped {dropped}"
    );
    let base_p50 = ms(idle, "p50_ns");
    assert!(base_p50 < 5.0, "the unshaped path's p50: {base_p50} ms");

    path.shape();
    let cubic = path.under_load(
        &[
            "-C",
            "cubic",
            "--phases",
            "idle:2,download:5,upload:5,bidir:5",
        ],
        &server,
    );
    let (up_queue, down_queue) = (at_rate_ms(UP_QUEUE), at_rate_ms(DOWN_QUEUE));
    let burst = at_rate_ms(BURST);
    let goodput = RATE_BPS * PAYLOAD / FRAME;
    let idle = phase(&cubic, "idle");
    assert!(
        (ms(idle, "p50_ns") - base_p50).abs() <= 1.0,
        "idle p50 {} ms, unshaped {base_p50} ms",
        ms(idle, "p50_ns")
    );
    let mut added = Vec::new();
    for (name, queue, key) in [
        ("download", down_queue, "down_bits_per_second"),
        ("upload", up_queue, "up_bits_per_second"),
    ] {
        let p = phase(&cubic, name);
        let (delay, max) = (ms(p, "added_delay_ns"), ms(p, "max_ns"));
        let bps = p[key].as_f64().unwrap();
        eprintln!(
            "cubic {name}: queue {queue:.1} ms, p50 {:.1} ms, p99 {:.1} ms, added {delay:.1} ms, \
             max {max:.1} ms, {:.2} Mbit/s (goodput at the rate {:.2}), TCP RTT p50 {:.1} ms",
            ms(p, "p50_ns"),
            ms(p, "p99_ns"),
            bps / 1e6,
            goodput / 1e6,
            p["loaded_connection_rtt"]["p50_ns"].as_f64().unwrap_or(0.0) / 1e6
        );
        assert!(
            (0.6 * queue..=queue).contains(&delay),
            "{name}: added {delay} ms against a {queue} ms queue"
        );
        assert!(
            max <= queue + burst + base_p50 + 2.0,
            "{name}: a probe took {max} ms through a {queue} ms queue"
        );
        assert!(
            (bps - goodput).abs() <= 0.05 * goodput,
            "{name}: {bps} bit/s against {goodput}"
        );
        added.push(delay);
    }
    let bidir = phase(&cubic, "bidir");
    let delay = ms(bidir, "added_delay_ns");
    eprintln!(
        "cubic bidir: added {delay:.1} ms, p99 {:.1} ms, up {:.2} down {:.2} Mbit/s",
        ms(bidir, "p99_ns"),
        bidir["up_bits_per_second"].as_f64().unwrap() / 1e6,
        bidir["down_bits_per_second"].as_f64().unwrap() / 1e6
    );
    assert!(
        delay >= 0.6 * added[0].max(added[1]),
        "bidir added {delay} ms, single directions {added:?}"
    );
    assert!(
        delay <= up_queue + down_queue + 2.0 * burst,
        "bidir added {delay} ms"
    );

    // BBR paces at its estimate of the bottleneck: the same queue stays short.
    let bbr = path.under_load(&["-C", "bbr", "--phases", "idle:2,download:5"], &server);
    let p = phase(&bbr, "download");
    eprintln!(
        "bbr download: queue {down_queue:.1} ms, p50 {:.1} ms, added {:.1} ms, {:.2} Mbit/s",
        ms(p, "p50_ns"),
        ms(p, "added_delay_ns"),
        p["down_bits_per_second"].as_f64().unwrap() / 1e6
    );
    assert!(
        ms(p, "added_delay_ns") < added[0],
        "bbr added {} ms, cubic {} ms",
        ms(p, "added_delay_ns"),
        added[0]
    );
}
