//! UDP across a real (virtual) link that loses packets: each test creates two network
//! namespaces joined by a veth pair (10.99.0.1 server, 10.99.0.2 client; the addresses
//! exist only inside those namespaces), runs `fperf -s` in one and the client in the
//! other, and has nftables in the server's namespace drop a known share of the
//! datagrams at random. nftables' own counters say exactly how many it dropped, which
//! the fperf figures must match. The namespaces are deleted when a test ends, failed or
//! not. Needs root, `ip` and `nft`: marked ignored, and run by scripts/test.sh as root.

mod common;
use common::{fperf_bin, nft_in, run_in, sh, NsServer};
use regex::Regex;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

const SERVER_IP: &str = "10.99.0.1";
const CLIENT_IP: &str = "10.99.0.2";
/// The default base port: a fresh namespace has nothing else on it.
const PORT: u16 = 28444;
/// Datagrams of this size fit the veth's 1500-byte MTU unfragmented, so each one is
/// one packet for nftables to drop.
const DATAGRAM: u64 = 1472;

fn is_root() -> bool {
    // SAFETY: geteuid() has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Fails the calling test at once, saying why, unless running as root.
fn require_root() {
    assert!(
        is_root(),
        "network-namespace tests need root (ip netns, nft)"
    );
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Two namespaces joined by a veth pair; deleted (with the veth) on drop.
struct Netns {
    server: String,
    client: String,
}

impl Netns {
    fn create() -> Netns {
        let tag = format!(
            "{}x{}",
            std::process::id() % 100_000,
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let ns = Netns {
            server: format!("fperf-udp-s{tag}"),
            client: format!("fperf-udp-c{tag}"),
        };
        // Interface names are at most 15 bytes.
        let (vs, vc) = (format!("fvs{tag}"), format!("fvc{tag}"));
        sh(&["ip", "netns", "add", &ns.server]);
        sh(&["ip", "netns", "add", &ns.client]);
        ns.link((&vs, &vc), (SERVER_IP, CLIENT_IP));
        for name in [&ns.server, &ns.client] {
            sh(&["ip", "-n", name, "link", "set", "lo", "up"]);
        }
        ns
    }

    /// Joins the namespaces with a veth pair named `devices` (server's, client's), up,
    /// with the addresses `ips` (each in a /24).
    fn link(&self, devices: (&str, &str), ips: (&str, &str)) {
        sh(&[
            "ip",
            "link",
            "add",
            devices.0,
            "netns",
            &self.server,
            "type",
            "veth",
            "peer",
            "name",
            devices.1,
            "netns",
            &self.client,
        ]);
        for (name, dev, ip) in [
            (&self.server, devices.0, ips.0),
            (&self.client, devices.1, ips.1),
        ] {
            sh(&[
                "ip",
                "-n",
                name,
                "addr",
                "add",
                &format!("{ip}/24"),
                "dev",
                dev,
            ]);
            sh(&["ip", "-n", name, "link", "set", dev, "up"]);
        }
    }

    /// Loads an nftables rule set into the server's namespace.
    fn nft(&self, rules: &str) {
        nft_in(&self.server, rules);
    }

    /// Drops `percent`% of the datagrams to the server's stream-0 port at random, and
    /// with `acks`, as many of the server's ACKs.
    fn drop_share(&self, percent: u32, acks: bool) {
        self.drop_share_on(percent, acks, 1);
    }

    /// As [`Netns::drop_share`], on the ports of streams `0..nstreams`.
    fn drop_share_on(&self, percent: u32, acks: bool, nstreams: u16) {
        assert!((1..=100).contains(&percent));
        let ports = format!("{PORT}-{}", PORT + nstreams - 1);
        // The random draw is 0..=99: it is below `percent` `percent` times in 100.
        let below = percent - 1;
        let ack_rule = if acks {
            format!("udp sport {ports} numgen random mod 100 <= {below} counter drop;")
        } else {
            String::new()
        };
        self.nft(&format!(
            "table inet fperf_loss {{
               chain input {{ type filter hook input priority 0; policy accept;
                 udp dport {ports} numgen random mod 100 <= {below} counter drop; }}
               chain output {{ type filter hook output priority 0; policy accept; {ack_rule} }}
             }}"
        ));
    }

    /// Packets and bytes (IP packets' lengths) the drop rule of `chain` ("input" or
    /// "output") dropped.
    fn dropped_counts(&self, chain: &str) -> (u64, u64) {
        let text = sh(&[
            "ip",
            "netns",
            "exec",
            &self.server,
            "nft",
            "list",
            "chain",
            "inet",
            "fperf_loss",
            chain,
        ]);
        Regex::new(r"counter packets (\d+) bytes (\d+)")
            .unwrap()
            .captures(&text)
            .map_or((0, 0), |c| (c[1].parse().unwrap(), c[2].parse().unwrap()))
    }

    /// Packets the drop rule of `chain` dropped.
    fn dropped(&self, chain: &str) -> u64 {
        self.dropped_counts(chain).0
    }

    /// Starts `fperf -s` in the server's namespace.
    fn server(&self) -> NsServer {
        NsServer::start(&self.server, &[])
    }

    /// Runs `fperf -c SERVER_IP -u ARGS` in the client's namespace; asserts success.
    fn client(&self, args: &[&str], server: &NsServer) -> String {
        let out = self.client_output(args);
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "client {args:?} failed\nstdout:\n{stdout}\nstderr:\n{}\nserver:\n{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            server.stdout(),
            server.stderr()
        );
        stdout
    }

    fn client_output(&self, args: &[&str]) -> Output {
        let mut all = vec![fperf_bin(), "-c", SERVER_IP, "-u"];
        all.extend_from_slice(args);
        run_in(&self.client, &all, Duration::from_secs(120))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for name in [&self.server, &self.client] {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}

/// A number after `key` on the line starting with `label`.
fn field(text: &str, label: &str, key: &str) -> u64 {
    let re = Regex::new(&format!(r"(?m)^{label}\s*:.*?\b{key}(\d+)")).unwrap();
    re.captures(text)
        .unwrap_or_else(|| panic!("no '{label}' ... '{key}N' in:\n{text}"))[1]
        .parse()
        .unwrap()
}

/// The exact byte count of a `label : NMB(N.NNGB NB)` line (or a smaller size's).
fn bytes(text: &str, label: &str) -> u64 {
    common::volume(text, label).bytes
}

#[test]
#[ignore = "needs root: network namespaces and nftables"]
fn plain_udp_reports_the_injected_loss() {
    require_root();
    let ns = Netns::create();
    ns.drop_share(10, false);
    let server = ns.server();
    // 8 MB in 1472-byte datagrams: 5698 full ones and one of 1152 bytes.
    let c = ns.client(&["-m", "8", "-l", &DATAGRAM.to_string()], &server);
    let s = server.report(1);
    let sent = field(&c, "datagrams", "sent=");
    assert_eq!(sent, 5699, "{c}");
    assert_eq!(bytes(&c, "sent"), 8 << 20);
    let dropped = ns.dropped("input");
    assert_eq!(field(&s, "datagrams", "sent="), sent, "{s}");
    let (received, lost) = (
        field(&s, "datagrams", "received="),
        field(&s, "datagrams", "lost="),
    );
    assert_eq!(field(&s, "datagrams", "duplicated="), 0, "{s}");
    assert_eq!(field(&s, "datagrams", "out-of-order="), 0, "{s}");
    assert_eq!(received + lost, sent, "{s}");
    // nftables drew ~10%; fperf must report exactly what was dropped (the veth loses
    // nothing on its own, and the receive buffer holds the whole run).
    let share = dropped as f64 / sent as f64;
    assert!(
        (0.07..0.13).contains(&share),
        "nft dropped {dropped} of {sent}"
    );
    assert_eq!(lost, dropped, "fperf's loss vs nftables' drops\n{s}");
    // The client's report says what the server saw.
    assert!(
        c.contains(&format!("lost {lost} of {sent} (")),
        "the server's loss on the client's terminal\n{c}"
    );
    let pct: f64 = Regex::new(r"lost=\d+ \(([\d.]+)%\)")
        .unwrap()
        .captures(&s)
        .unwrap()[1]
        .parse()
        .unwrap();
    assert!((pct - 100.0 * share).abs() < 0.006, "{pct}% vs {share}");
    // Bytes: everything but the dropped datagrams (the short last one may be among them).
    let missing = (8 << 20) - bytes(&s, "received");
    assert!(
        missing == lost * DATAGRAM || missing == (lost - 1) * DATAGRAM + 1152,
        "missing {missing} B for {lost} lost datagrams\n{s}"
    );
}

/// `-u -r` with drops: returns (client report, server report, retries).
fn mprtt_run(ns: &Netns) -> (String, String, u64) {
    let server = ns.server();
    // 1 MB in 1024-byte datagrams: 1024 packets, all the same size.
    let c = ns.client(
        &["-r", "-m", "1", "-l", "1024", "--ack-timeout", "20"],
        &server,
    );
    let s = server.report(1);
    assert_eq!(field(&c, "datagrams", "sent="), 1024, "{c}");
    assert_eq!(
        bytes(&c, "sent"),
        1 << 20,
        "the client counts each packet once"
    );
    assert_eq!(field(&s, "datagrams", "sent="), 1024, "{s}");
    assert_eq!(
        field(&s, "datagrams", "lost="),
        0,
        "every packet was ACKed\n{s}"
    );
    let retries = field(&c, "retries", "");
    (c, s, retries)
}

#[test]
#[ignore = "needs root: network namespaces and nftables"]
fn mprtt_resends_every_dropped_datagram() {
    require_root();
    let ns = Netns::create();
    ns.drop_share(10, false);
    let (c, s, retries) = mprtt_run(&ns);
    let dropped = ns.dropped("input");
    assert!(dropped > 0, "nothing dropped");
    // Each drop costs one time-out and one resend; a late ACK may add a resend whose
    // copy the server then sees twice.
    assert!(
        retries >= dropped,
        "retries {retries} < drops {dropped}\n{c}"
    );
    let received = field(&s, "datagrams", "received=");
    assert_eq!(received, 1024 + retries - dropped, "{s}");
    assert_eq!(
        field(&s, "datagrams", "duplicated="),
        retries - dropped,
        "{s}"
    );
    // The server counts every byte it got, duplicates included: more than was sent
    // whenever a resend was not needed.
    assert_eq!(bytes(&s, "received"), received * 1024, "{s}");
    // One ACK per datagram received; the client read them all (stale ones included)
    // but perhaps the last stale ones.
    assert_eq!(bytes(&s, "sent"), received, "{s}");
    let acks = bytes(&c, "received");
    assert!((1024..=received).contains(&acks), "ACK bytes {acks}\n{c}");
}

#[test]
#[ignore = "needs root: network namespaces and nftables"]
fn mprtt_survives_dropped_acks() {
    require_root();
    let ns = Netns::create();
    ns.drop_share(10, true);
    let (c, s, retries) = mprtt_run(&ns);
    let (data_dropped, acks_dropped) = (ns.dropped("input"), ns.dropped("output"));
    assert!(acks_dropped > 0 && data_dropped > 0, "nothing dropped");
    assert!(
        retries >= data_dropped + acks_dropped,
        "retries {retries} < drops {data_dropped} + {acks_dropped}\n{c}"
    );
    let received = field(&s, "datagrams", "received=");
    assert_eq!(received, 1024 + retries - data_dropped, "{s}");
    // A lost ACK makes the server see the datagram again: a duplicate, ACKed again.
    let duplicated = field(&s, "datagrams", "duplicated=");
    assert_eq!(duplicated, retries - data_dropped, "{s}");
    assert!(duplicated >= acks_dropped, "{s}");
    assert_eq!(bytes(&s, "received"), received * 1024, "{s}");
    // ACKs the server's firewall dropped were never sent.
    assert_eq!(bytes(&s, "sent"), received - acks_dropped, "{s}");
    let acks = bytes(&c, "received");
    assert!(
        (1024..=received - acks_dropped).contains(&acks),
        "ACK bytes {acks}\n{c}"
    );
}

#[test]
#[ignore = "needs root: network namespaces and nftables"]
fn several_streams_and_sockets_across_the_link() {
    require_root();
    let ns = Netns::create();
    ns.drop_share_on(10, false, 2);
    let server = ns.server();
    // Two streams of four sockets each; the server pairs its sockets on each port with
    // the client's by source address.
    let c = ns.client(&["-t", "2", "-n", "4", "-m", "4", "-l", "1472"], &server);
    let s = server.report(1);
    for k in 0..2u16 {
        let port = PORT + k;
        assert!(
            s.lines().any(|l| l.starts_with(&format!(
                "UDP STREAM {k} {SERVER_IP}:{port} <= {CLIENT_IP}:"
            ))),
            "{s}"
        );
    }
    // 4 MB in 1472-byte datagrams is 2850 per stream.
    let sent = field(&c, "datagrams", "sent=");
    assert_eq!(sent, 2 * 2850, "{c}");
    assert_eq!(field(&s, "datagrams", "sent="), sent, "{s}");
    let dropped = ns.dropped("input");
    let share = dropped as f64 / sent as f64;
    assert!(
        (0.07..0.13).contains(&share),
        "nft dropped {dropped} of {sent}"
    );
    assert_eq!(field(&s, "datagrams", "lost="), dropped, "{s}");
    assert_eq!(field(&s, "datagrams", "received="), sent - dropped, "{s}");
    assert_eq!(field(&s, "datagrams", "duplicated="), 0, "{s}");
}

#[test]
#[ignore = "needs root: network namespaces and nftables"]
fn mprtt_gives_up_naming_the_packet() {
    require_root();
    let ns = Netns::create();
    ns.drop_share(100, false);
    let server = ns.server();
    let out = ns.client_output(&["-r", "-l", "32K", "-m", "1", "--ack-timeout", "10"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a dead link must fail the run");
    assert!(
        err.contains("packet seq=0 (32768 bytes) was not acknowledged in ")
            && err.contains("(sent 11 times, waiting 10 ms for its ACK each time: --ack-timeout)"),
        "{err}"
    );
    // The first transmission and ten retries, all dropped.
    assert_eq!(ns.dropped("input"), 11);
    drop(server);
}

/// `--gso` (and `--gro`) across the veth: a GSO message crosses the link as one
/// packet, so nftables drops whole messages (up to 44 datagrams of 1472 bytes) and
/// counts each as one packet of IP length 28 + its payload. fperf's loss must be
/// exactly the datagrams in the dropped payload.
fn gso_loss(extra: &[&str]) {
    let ns = Netns::create();
    ns.drop_share(10, false);
    let server = ns.server();
    let mut args = vec!["-m", "8", "-l", "1472", "--gso"];
    args.extend_from_slice(extra);
    let c = ns.client(&args, &server);
    let s = server.report(1);
    let sent = field(&c, "datagrams", "sent=");
    assert_eq!(sent, 5699, "{c}");
    assert_eq!(field(&s, "datagrams", "sent="), sent, "{s}");
    let (packets, payload) = ns.dropped_counts("input");
    assert!(packets > 0, "nftables dropped nothing");
    let payload = payload - 28 * packets;
    // Every dropped message is whole datagrams of 1472 bytes, but for the run's
    // last, short one (1152 bytes).
    let lost_datagrams = payload / DATAGRAM + u64::from(payload % DATAGRAM != 0);
    assert_eq!(
        field(&s, "datagrams", "lost="),
        lost_datagrams,
        "fperf's loss vs nftables' drops ({packets} messages, {payload} B)\n{s}"
    );
    assert_eq!(
        field(&s, "datagrams", "received="),
        sent - lost_datagrams,
        "{s}"
    );
    assert_eq!(field(&s, "datagrams", "duplicated="), 0, "{s}");
    assert_eq!(bytes(&s, "received"), (8 << 20) - payload, "{s}");
}

#[test]
#[ignore = "needs root: network namespaces and nftables"]
fn gso_messages_lost_on_the_link_are_counted_datagram_by_datagram() {
    require_root();
    gso_loss(&[]);
}

#[test]
#[ignore = "needs root: network namespaces and nftables"]
fn gro_splits_what_crossed_the_link_and_counts_the_rest_as_lost() {
    require_root();
    gso_loss(&["--gro"]);
}

/// (datagrams of the data port with DF set, IP fragments) that arrived in namespace
/// `ns`, as the rules of [`dont_fragment_sends_whole_datagrams_with_df_or_refuses_the_size`]
/// count them before reassembly.
fn arrivals(ns: &str) -> (u64, u64) {
    let text = sh(&[
        "ip", "netns", "exec", ns, "nft", "list", "chain", "ip", "fperf_df", "pre",
    ]);
    let counts: Vec<u64> = Regex::new(r"counter packets (\d+)")
        .unwrap()
        .captures_iter(&text)
        .map(|c| c[1].parse().unwrap())
        .collect();
    assert_eq!(counts.len(), 2, "{text}");
    (counts[0], counts[1])
}

#[test]
#[ignore = "needs root"]
fn dont_fragment_sends_whole_datagrams_with_df_or_refuses_the_size() {
    require_root();
    let ns = Netns::create();
    // Each end counts what arrives before the kernel reassembles it: datagrams of the
    // data port with DF set, and fragments (a later fragment has no UDP header).
    for (name, port) in [(&ns.server, "dport"), (&ns.client, "sport")] {
        nft_in(
            name,
            &format!(
                "table ip fperf_df {{
                   chain pre {{ type filter hook prerouting priority 0; policy accept;
                     udp {port} {PORT} ip frag-off & 0x4000 != 0 counter;
                     ip frag-off & 0x3fff != 0 counter; }}
                 }}"
            ),
        );
    }
    let server = ns.server();
    // Without the flag, 2000-byte datagrams cross the 1500-byte MTU in fragments: the
    // rules see them.
    ns.client(&["-m", "1", "-l", "2000"], &server);
    let (_, fragments) = arrivals(&ns.server);
    assert!(
        fragments >= 2 * 524,
        "1 MiB in 2000-byte datagrams: {fragments}"
    );
    // With it, each way: every datagram whole, with DF set.
    for (way, at) in [(None, &ns.server), (Some("--reverse"), &ns.client)] {
        let (df_before, fragments_before) = arrivals(at);
        let mut args = vec!["-m", "2", "-l", "1472", "--dont-fragment"];
        args.extend(way);
        let report = ns.client(&args, &server);
        assert!(report.contains(" dont_fragment "), "{report}");
        let (df, fragments) = arrivals(at);
        assert!(
            df - df_before >= 1425,
            "2 MiB in 1472-byte datagrams: {way:?}"
        );
        assert_eq!(fragments, fragments_before, "{way:?}");
    }
    // A datagram the path cannot carry whole is refused before any is sent.
    for way in [None, Some("--reverse")] {
        let mut args = vec!["-m", "1", "-l", "1473", "--dont-fragment"];
        args.extend(way);
        let out = ns.client_output(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{way:?}: {err}");
        assert!(
            err.contains("1473-byte datagrams (-l) do not fit the path's MTU")
                && err.contains("at most 1472 bytes of UDP payload"),
            "{way:?}: {err}"
        );
    }
}

/// The packet counters of the `in` chain of table `fperf_dev` in namespace `ns`.
fn device_counts(ns: &str) -> Vec<u64> {
    let text = sh(&[
        "ip",
        "netns",
        "exec",
        ns,
        "nft",
        "list",
        "chain",
        "inet",
        "fperf_dev",
        "in",
    ]);
    Regex::new(r"counter packets (\d+)")
        .unwrap()
        .captures_iter(&text)
        .map(|c| c[1].parse().unwrap())
        .collect()
}

#[test]
#[ignore = "needs root"]
fn bind_dev_sends_every_socket_through_the_named_interface() {
    require_root();
    let ns = Netns::create();
    // A second link beside the first, on a subnet of its own: the route to the server's
    // address goes over the first.
    let tag = ns.server.trim_start_matches("fperf-udp-s");
    let (ws, wc) = (format!("fws{tag}"), format!("fwc{tag}"));
    ns.link((&ws, &wc), ("10.99.1.1", "10.99.1.2"));
    // The server counts, by the link they came in on, the TCP packets of its control
    // port and stream 0's side connection, and the datagrams of stream 0.
    let tcp = format!("tcp dport {PORT}-{}", PORT + 1);
    let udp = format!("udp dport {PORT}");
    ns.nft(&format!(
        "table inet fperf_dev {{
           chain in {{ type filter hook input priority 0; policy accept;
             iifname \"{ws}\" {tcp} counter; iifname \"{ws}\" {udp} counter;
             iifname != \"{ws}\" {tcp} counter; iifname != \"{ws}\" {udp} counter; }}
         }}"
    ));
    let server = ns.server();
    let datagrams = (1 << 20) / DATAGRAM;
    ns.client(&["-m", "1", "-l", "1472"], &server);
    let routed = device_counts(&ns.server);
    assert_eq!(
        routed[..2],
        [0, 0],
        "by the routes, the first link: {routed:?}"
    );
    assert!(routed[2] > 0 && routed[3] >= datagrams, "{routed:?}");
    // Bound to the second link, every socket goes through it, against the routes.
    let report = ns.client(&["-m", "1", "-l", "1472", "--bind-dev", &wc], &server);
    let bound = device_counts(&ns.server);
    assert!(bound[0] > 0, "TCP through the second link: {bound:?}");
    assert!(bound[1] >= datagrams, "UDP through it: {bound:?}");
    assert_eq!(bound[2..], routed[2..], "none through the first");
    assert_eq!(bytes(&report, "sent"), 1 << 20, "{report}");
    let out = ns.client_output(&["-m", "1", "--bind-dev", "nosuch0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot send through network interface nosuch0 (--bind-dev)"),
        "{err}"
    );
}
