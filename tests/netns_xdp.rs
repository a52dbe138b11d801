//! UDP over AF_XDP (`--xdp`) across a veth pair between two network namespaces
//! (10.98.0.1 server, 10.98.0.2 client; the addresses exist only inside them): an AF_XDP
//! client against the kernel's UDP server, a kernel client against an AF_XDP server,
//! and AF_XDP at both ends, each moving an exact count of bytes and datagrams; loss
//! counted exactly against nftables' drops; a ping and a TCP test across the same link
//! while AF_XDP runs; the XDP program gone once the run ends, also when fperf is killed
//! with SIGKILL; and the refusals of a user without privileges and of a missing
//! interface. The namespaces are deleted when a test ends, failed or not.
//!
//! A kernel UDP sender on veth leaves the UDP checksum to an offload that never happens
//! on a virtual link (the frame carries only the pseudo-header's sum), which an AF_XDP
//! receiver, reading the frame as it is, rightly refuses: the tests turn the transmit
//! checksum offload off on both veths (`ethtool -K DEV tx off`), so the kernel fills it
//! in, as a real NIC would on the wire.
//!
//! Needs root, `ip`, `nft`, `ethtool`, `ping` and `setpriv`: marked ignored, and run by
//! scripts/test.sh as root.

mod common;
use common::{finish_within, fperf_bin, nft_in, sh, spawn_in, NsServer};
use regex::Regex;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const SERVER_IP: &str = "10.98.0.1";
const CLIENT_IP: &str = "10.98.0.2";
const PORT: u16 = 28444;
/// A second fperf server, for a TCP test across the link while AF_XDP runs.
const TCP_PORT: u16 = 29444;
/// Fits the veth's 1500-byte MTU: one datagram, one frame.
const DATAGRAM: u64 = 1472;
/// 8 MiB in datagrams of [`DATAGRAM`] bytes: 5699 datagrams, the last one short.
const VOLUME_MB: &str = "8";
const VOLUME: u64 = 8 << 20;

static NEXT: AtomicU32 = AtomicU32::new(0);

fn require_root() {
    // SAFETY: geteuid() has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() == 0 };
    assert!(root, "AF_XDP tests need root (ip netns, nft, XDP)");
}

/// Two namespaces joined by a veth pair; deleted (with the veth) on drop.
struct Netns {
    server: String,
    client: String,
    server_dev: String,
    client_dev: String,
}

impl Netns {
    fn create() -> Netns {
        let tag = format!(
            "{}x{}",
            std::process::id() % 100_000,
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let ns = Netns {
            server: format!("xd-s{tag}"),
            client: format!("xd-c{tag}"),
            server_dev: format!("xds{tag}"),
            client_dev: format!("xdc{tag}"),
        };
        sh(&["ip", "netns", "add", &ns.server]);
        sh(&["ip", "netns", "add", &ns.client]);
        sh(&[
            "ip",
            "link",
            "add",
            &ns.server_dev,
            "netns",
            &ns.server,
            "type",
            "veth",
            "peer",
            "name",
            &ns.client_dev,
            "netns",
            &ns.client,
        ]);
        for (name, dev, ip) in [
            (&ns.server, &ns.server_dev, SERVER_IP),
            (&ns.client, &ns.client_dev, CLIENT_IP),
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
            sh(&["ip", "-n", name, "link", "set", "lo", "up"]);
            sh(&["ip", "-n", name, "link", "set", dev, "up"]);
            sh(&[
                "ip", "netns", "exec", name, "ethtool", "-K", dev, "tx", "off",
            ]);
        }
        ns
    }

    /// Runs `args` in namespace `ns`.
    fn exec(&self, ns: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns]).args(args);
        cmd
    }

    /// Whether an XDP program is attached to `dev` in `ns`, as `ip link` shows it.
    fn has_xdp(&self, ns: &str, dev: &str) -> bool {
        sh(&["ip", "-n", ns, "link", "show", "dev", dev]).contains("xdp")
    }

    /// Starts `fperf -s -p port ARGS` in the server's namespace.
    fn server(&self, port: u16, args: &[&str]) -> NsServer {
        let port = port.to_string();
        let mut all = vec!["-p", port.as_str()];
        all.extend_from_slice(args);
        NsServer::start(&self.server, &all)
    }

    /// Starts `fperf -c SERVER_IP ARGS` in the client's namespace.
    fn spawn_client(&self, args: &[&str]) -> Child {
        let mut all = vec![fperf_bin(), "-c", SERVER_IP];
        all.extend_from_slice(args);
        spawn_in(&self.client, &all)
    }

    /// Runs `fperf -c SERVER_IP ARGS` in the client's namespace, at most 60 s.
    fn client_output(&self, args: &[&str]) -> Output {
        finish_within(self.spawn_client(args), Duration::from_secs(60))
    }

    /// As [`Netns::client_output`], asserting success; its stdout.
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
}

impl Drop for Netns {
    fn drop(&mut self) {
        for name in [&self.server, &self.client] {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}

/// The number after `key=` on the line starting with `label`.
fn field(text: &str, label: &str, key: &str) -> u64 {
    let re = Regex::new(&format!(r"(?m)^{label}\s*:.*?\b{key}=(\d+)")).unwrap();
    re.captures(text)
        .unwrap_or_else(|| panic!("no '{label}' ... '{key}=N' in:\n{text}"))[1]
        .parse()
        .unwrap()
}

/// The exact byte count of a `label : NMB(N.NNGB NB)` line.
fn bytes(text: &str, label: &str) -> u64 {
    let re = Regex::new(&format!(r"(?m)^{label}\s*:.*?[( ](\d+)B\)")).unwrap();
    re.captures(text)
        .unwrap_or_else(|| panic!("no '{label}' byte count in:\n{text}"))[1]
        .parse()
        .unwrap()
}

/// Datagrams of [`DATAGRAM`] bytes that carry `volume` bytes.
fn datagrams(volume: u64) -> u64 {
    volume.div_ceil(DATAGRAM)
}

/// Bulk of [`VOLUME_MB`] MiB in [`DATAGRAM`]-byte datagrams, paced so that nothing is
/// lost on the way to a debug build's receiver.
const BULK: [&str; 7] = ["-u", "-l", "1472", "-m", VOLUME_MB, "-b", "100M"];

/// Asserts that both ends of a bulk run counted [`VOLUME`] bytes in exactly as many
/// datagrams, none lost.
fn assert_exact(client: &str, server: &str) {
    let n = datagrams(VOLUME);
    assert_eq!(bytes(client, "sent"), VOLUME, "{client}");
    assert_eq!(field(client, "datagrams", "sent"), n, "{client}");
    assert_eq!(bytes(server, "received"), VOLUME, "{server}");
    assert_eq!(field(server, "datagrams", "received"), n, "{server}");
    assert_eq!(field(server, "datagrams", "lost"), 0, "{server}");
    assert_eq!(field(server, "datagrams", "duplicated"), 0, "{server}");
}

#[test]
#[ignore = "needs root, network namespaces, nft, ethtool and ping: run by scripts/test.sh as root"]
fn an_af_xdp_client_against_a_kernel_server_while_other_traffic_goes_on() {
    require_root();
    let ns = Netns::create();
    let server = ns.server(PORT, &["-1"]);
    let tcp_server = ns.server(TCP_PORT, &[]);
    let xdp = ns.client_dev.clone();
    // About 3.4 s at 20 Mbit/s, for the traffic beside it.
    let args = [
        "-p", "28444", "--xdp", &xdp, "-u", "-l", "1472", "-m", VOLUME_MB, "-b", "20M",
    ];
    let client = ns.spawn_client(&args);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ns.has_xdp(&ns.client, &ns.client_dev) {
        assert!(Instant::now() < deadline, "no XDP program was attached");
        std::thread::sleep(Duration::from_millis(20));
    }
    // While the program is attached: a ping (ICMP, and ARP if the entry expired) and a
    // TCP test go through the same interface untouched.
    let ping = ns
        .exec(
            &ns.client,
            &["ping", "-c", "3", "-i", "0.2", "-W", "1", SERVER_IP],
        )
        .output()
        .expect("ping");
    assert!(
        ping.status.success(),
        "{}",
        String::from_utf8_lossy(&ping.stdout)
    );
    let tcp = finish_within(
        ns.spawn_client(&["-p", &TCP_PORT.to_string(), "-m", "1"]),
        Duration::from_secs(30),
    );
    let tcp_out = String::from_utf8_lossy(&tcp.stdout).to_string();
    assert!(
        tcp.status.success(),
        "{tcp_out}\n{}",
        String::from_utf8_lossy(&tcp.stderr)
    );
    assert_eq!(bytes(&tcp_out, "sent"), 1 << 20, "{tcp_out}");
    assert!(
        ns.has_xdp(&ns.client, &ns.client_dev),
        "the AF_XDP run ended before the other traffic did: nothing was shown"
    );
    let out = finish_within(client, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("af_xdp=") && stdout.contains("native copy"),
        "{stdout}"
    );
    assert_exact(&stdout, &server.report(1));
    assert!(
        !ns.has_xdp(&ns.client, &ns.client_dev),
        "the program stayed attached"
    );
    drop(tcp_server);
}

#[test]
#[ignore = "needs root, network namespaces, nft and ethtool: run by scripts/test.sh as root"]
fn af_xdp_at_either_end_or_both_moves_exact_counts_and_round_trips() {
    require_root();
    let ns = Netns::create();
    let (cdev, sdev) = (ns.client_dev.clone(), ns.server_dev.clone());
    let kernel_server = ns.server(PORT, &[]);
    let xdp_server = ns.server(PORT + 1000, &["--xdp", &sdev]);
    let on = |server: u16, xdp: bool, rest: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = vec!["-p".into(), server.to_string()];
        if xdp {
            args.extend(["--xdp".into(), cdev.clone()]);
        }
        args.extend(rest.iter().map(|s| s.to_string()));
        args
    };
    let cases = [
        ("AF_XDP client, kernel server", PORT, true, &kernel_server),
        (
            "kernel client, AF_XDP server",
            PORT + 1000,
            false,
            &xdp_server,
        ),
        ("AF_XDP at both ends", PORT + 1000, true, &xdp_server),
    ];
    // Tests each server ran so far.
    let mut tests = [0usize; 2];
    for (what, port, xdp, server) in cases {
        let ran = &mut tests[usize::from(port != PORT)];
        let mut last = |server: &NsServer| {
            *ran += 1;
            server.report(*ran)
        };
        let args = on(port, xdp, &BULK);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let client = ns.client(&args, server);
        let report = last(server);
        assert!(report.contains("UDP connection"), "{what}: {report}");
        assert_exact(&client, &report);
        assert_eq!(report.contains("af_xdp="), port != PORT, "{what}: {report}");
        if port != PORT {
            // Unpaced, a kernel server would sample a batch of datagrams at a time;
            // through AF_XDP each datagram is a sample, as the header says.
            let args = on(port, xdp, &["-u", "-l", "1472", "-m", "1"]);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            ns.client(&args, server);
            let report = last(server);
            assert!(!report.contains("per-batch"), "{what}: {report}");
        }
        // Round trips, sized and echoed: every request answered, counted both ends.
        for mode in [["-r", "-l", "64"], ["--echo", "-l", "300"]] {
            let mut rest: Vec<&str> = vec!["-u", "--time", "1"];
            rest.extend(mode);
            let args = on(port, xdp, &rest);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let client = ns.client(&args, server);
            let sent = field(&client, "datagrams", "sent");
            assert!(sent > 100, "{what} {mode:?}: {client}");
            let report = last(server);
            assert_eq!(
                field(&report, "datagrams", "received"),
                sent,
                "{what}: {report}"
            );
            assert_eq!(field(&report, "datagrams", "lost"), 0, "{what}: {report}");
        }
    }
    assert!(!ns.has_xdp(&ns.client, &cdev) && !ns.has_xdp(&ns.server, &sdev));
}

#[test]
#[ignore = "needs root, network namespaces, nft and ethtool: run by scripts/test.sh as root"]
fn loss_over_af_xdp_is_what_nftables_dropped() {
    require_root();
    let ns = Netns::create();
    // Datagrams to the kernel server, dropped on its input; to the AF_XDP server (whose
    // program takes them before netfilter could), dropped on the client's output.
    nft_in(
        &ns.server,
        &format!(
            "table inet xd_loss {{ chain input {{ type filter hook input priority 0; policy accept;
               udp dport {PORT} numgen random mod 100 <= 4 counter drop; }}
             }}"
        ),
    );
    let to_xdp = PORT + 1000;
    nft_in(
        &ns.client,
        &format!(
            "table inet xd_loss {{ chain output {{ type filter hook output priority 0; policy accept;
               udp dport {to_xdp} numgen random mod 100 <= 4 counter drop; }}
             }}"
        ),
    );
    let dropped = |netns: &str, chain: &str| -> u64 {
        let text = sh(&[
            "ip", "netns", "exec", netns, "nft", "list", "chain", "inet", "xd_loss", chain,
        ]);
        Regex::new(r"counter packets (\d+)")
            .unwrap()
            .captures(&text)
            .unwrap()[1]
            .parse()
            .unwrap()
    };
    let kernel_server = ns.server(PORT, &["-1"]);
    let mut args = vec!["-p", "28444", "--xdp", &ns.client_dev];
    args.extend(BULK);
    let client = ns.client(&args, &kernel_server);
    let report = kernel_server.report(1);
    let lost = field(&report, "datagrams", "lost");
    assert!(lost > 0, "5% of {} datagrams: {report}", datagrams(VOLUME));
    assert_eq!(lost, dropped(&ns.server, "input"), "{report}");
    assert_eq!(field(&client, "datagrams", "sent"), datagrams(VOLUME));

    let sdev = ns.server_dev.clone();
    let xdp_server = ns.server(to_xdp, &["-1", "--xdp", &sdev]);
    let port = to_xdp.to_string();
    // Slower: a kernel sender's bursts must not overflow the veth's XDP queue.
    let args = [
        "-p", &port, "-u", "-l", "1472", "-m", VOLUME_MB, "-b", "40M",
    ];
    ns.client(&args, &xdp_server);
    let report = xdp_server.report(1);
    let lost = field(&report, "datagrams", "lost");
    assert!(lost > 0, "{report}");
    let link = sh(&["ip", "-s", "-n", &ns.server, "link", "show", "dev", &sdev]);
    assert_eq!(lost, dropped(&ns.client, "output"), "{report}\n{link}");
    assert_eq!(
        field(&report, "datagrams", "received") + lost,
        datagrams(VOLUME),
        "{report}"
    );
}

#[test]
#[ignore = "needs root, network namespaces and ethtool: run by scripts/test.sh as root"]
fn a_killed_fperf_leaves_no_program_behind() {
    require_root();
    let ns = Netns::create();
    let sdev = ns.server_dev.clone();
    let _server = ns.server(PORT, &["--xdp", &sdev]);
    let cdev = ns.client_dev.clone();
    let mut client = ns.spawn_client(&[
        "-p", "28444", "-u", "--xdp", &cdev, "--time", "30", "-b", "50M",
    ]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(ns.has_xdp(&ns.client, &cdev) && ns.has_xdp(&ns.server, &sdev)) {
        assert!(
            Instant::now() < deadline,
            "no XDP program was attached at both ends"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    // `ip netns exec` runs fperf in its own process: the child is fperf itself.
    sh(&["kill", "-9", &client.id().to_string()]);
    let _ = client.wait();
    let deadline = Instant::now() + Duration::from_secs(5);
    while ns.has_xdp(&ns.client, &cdev) {
        assert!(
            Instant::now() < deadline,
            "the killed client's program stayed attached"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The server abandons the test once the data stops, and its program goes with it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while ns.has_xdp(&ns.server, &sdev) {
        assert!(
            Instant::now() < deadline,
            "the server's program stayed attached"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs root (to set up the namespaces), setpriv: run by scripts/test.sh as root"]
fn af_xdp_is_refused_in_one_line_without_privileges_or_an_interface() {
    require_root();
    let ns = Netns::create();
    let server = ns.server(PORT, &[]);
    // A copy of the binary any user may run.
    let dir = std::env::temp_dir().join(format!("xd-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("fperf");
    std::fs::copy(fperf_bin(), &bin).unwrap();
    sh(&["chmod", "755", dir.to_str().unwrap(), bin.to_str().unwrap()]);
    let unprivileged = ns
        .exec(
            &ns.client,
            &[
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
                bin.to_str().unwrap(),
                "-c",
                SERVER_IP,
                "-p",
                "28444",
                "-u",
                "--xdp",
                &ns.client_dev,
                "-m",
                "1",
            ],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv");
    let out = finish_within(unprivileged, Duration::from_secs(30));
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--xdp: cannot")
            && stderr.contains("needs root, or CAP_NET_ADMIN and CAP_BPF"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");

    let out = ns.client_output(&["-p", "28444", "-u", "--xdp", "xd-missing", "-m", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success());
    assert!(
        stderr.contains("--xdp: there is no network interface xd-missing"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    drop(server);
}
