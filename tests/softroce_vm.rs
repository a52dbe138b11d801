//! fperf's RDMA paths on a real, if software, RDMA device: Soft-RoCE (`rdma_rxe`) in a
//! QEMU VM started by `scripts/softroce/run.sh`. One VM boot runs every case below: a
//! fresh `fperf -s` and an `fperf -c` against the VM's own address over `rxe0`, for each
//! RDMA API this build implements. Both sides' byte counts are asserted.
//!
//! The release fperf binary under test goes into the VM; nothing is built here. The test
//! is marked ignored: scripts/test.sh runs it where `scripts/softroce/run.sh --prepare`
//! says the VM can run (QEMU, or root to install it, and a Debian kernel package), and
//! reports it as not run, saying why, elsewhere. Without KVM the VM runs under TCG
//! (the harness says which), so volumes are kept small.

mod common;
use common::*;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const MB: u64 = 1 << 20;
/// The harness's own limit for the VM; the test kills it a little later. Under TCG
/// the 26 cases take 50 to 105 s on a busy two-core host (a round trip case now and
/// then stalls for seconds), so there is room for twice that.
const VM_TIMEOUT_SECS: u64 = 240;
/// The harness's exit status when this host cannot run the VM.
const UNAVAILABLE: i32 = 3;

/// One fperf run inside the VM.
struct Case {
    name: String,
    args: Vec<&'static str>,
    /// Bytes the client sends and the server receives.
    bytes: u64,
    /// With `-r` or `--echo`: the bytes the server sends back (one 1-byte ACK per packet,
    /// or its replies).
    replies: Option<u64>,
    /// What the client's header line must contain (API, operation, device or provider).
    header: String,
}

/// Each RDMA API tested: its name, its flags, and how the client's header ends.
/// libfabric goes over verbs as `verbs;ofi_rxm` (reliable datagrams over RC queue pairs).
const APIS: &[(&str, &[&str], &str)] = &[
    ("ibverbs", &["-R", "--rdma-api", "ibverbs"], " device=rxe0"),
    ("cm", &["-R", "--rdma-api", "cm"], ""),
    ("rsocket", &["-R", "--rdma-api", "rsocket"], ""),
    (
        "ofi",
        &["-R", "--rdma-api", "ofi", "--ofi-provider", "verbs"],
        " provider=verbs;ofi_rxm",
    ),
];

/// How a header ends with `--echo`, and with `-r --response-size 4096`.
const ECHO_LABEL: &str = " reply=echo (mprtt = request + echo of pkt_size bytes)";
const SIZED_LABEL: &str = " reply=4096B (mprtt = request + reply of 4096 bytes)";

fn cases() -> Vec<Case> {
    let mut all = Vec::new();
    for (api, flags, tail) in APIS {
        // Bulk runs' data threads run under SCHED_BATCH (one stream on the VM's two
        // vCPUs); round trips' do not.
        let header = |op: &str, bulk: bool| {
            let sched = if bulk { " sched=batch" } else { "" };
            format!("api={api} op={op}{tail}{sched}")
        };
        let with = |extra: &[&'static str]| -> Vec<&'static str> {
            flags.iter().chain(extra).copied().collect()
        };
        all.push(Case {
            name: format!("{api}-bulk"),
            args: with(&["-m", "4"]),
            bytes: 4 * MB,
            replies: None,
            header: header("send", true),
        });
        all.push(Case {
            name: format!("{api}-mprtt"),
            args: with(&["-r", "-m", "1", "-l", "1024"]),
            bytes: MB,
            replies: Some(1024),
            header: header("send", false),
        });
        // For ofi, this is the case that crashed libfabric 1.17 in fi_close most often
        // (2 runs in 12) before endpoints lingered before closing (CLOSE_LINGER).
        // Two streams on the VM's two vCPUs: `--sched auto` leaves SCHED_BATCH out
        // where the streams about match the CPUs.
        all.push(Case {
            name: format!("{api}-two-streams"),
            args: with(&["-t", "2", "-m", "2"]),
            bytes: 4 * MB,
            replies: None,
            header: header("send", false),
        });
        // Replies of any size: rsockets as a byte stream (as TCP); the other APIs as one
        // message each, into a slot of the client's ring.
        all.push(Case {
            name: format!("{api}-echo"),
            args: with(&["--echo", "-m", "1", "-l", "1024"]),
            bytes: MB,
            replies: Some(MB),
            header: header("send", false) + ECHO_LABEL,
        });
        all.push(Case {
            name: format!("{api}-response-size"),
            args: with(&["-r", "--response-size", "4096", "-m", "1", "-l", "1024"]),
            bytes: MB,
            replies: Some(4 * MB),
            header: header("send", false) + SIZED_LABEL,
        });
        // rsockets have no RDMA WRITE option (fperf refuses --rdma-write with them).
        if *api != "rsocket" {
            all.push(Case {
                name: format!("{api}-write"),
                args: with(&["--rdma-write", "-m", "4"]),
                bytes: 4 * MB,
                replies: None,
                header: header("write", true),
            });
            // Requests written, each ACK written back: ibverbs and cm find both by
            // polling ring memory, ofi by completions.
            all.push(Case {
                name: format!("{api}-mprtt-write"),
                args: with(&["-r", "--rdma-write", "-m", "1", "-l", "1024"]),
                bytes: MB,
                replies: Some(1024),
                header: header("write", false),
            });
            // Echoes written back (ibverbs, cm) or sent (ofi) into the client's ring.
            all.push(Case {
                name: format!("{api}-echo-write"),
                args: with(&["--echo", "--rdma-write", "-m", "1", "-l", "1024"]),
                bytes: MB,
                replies: Some(MB),
                header: header("write", false) + ECHO_LABEL,
            });
        }
    }
    all
}

/// The script the VM runs: each case against a fresh server, the client's and the
/// server's output between markers.
fn vm_script(cases: &[Case]) -> String {
    let mut s = String::from(
        r#"# libfabric's rxm sizes its verbs CQ as (tx + rx queue) x universe size (256):
# 65536 entries, past rxe's limit of 32767.
export FI_UNIVERSE_SIZE=64
run_case() {
  name=$1; port=$2; shift 2
  echo "=== case $name"
  fperf -s -p "$port" >"/tmp/$name.server" 2>&1 &
  server=$!
  i=0
  until grep -q "Server listening" "/tmp/$name.server" 2>/dev/null; do
    i=$((i + 1)); [ $i -lt 100 ] || break; sleep 0.1
  done
  timeout 60 fperf -c "$VM_IP" -p "$port" "$@" >"/tmp/$name.client" 2>&1
  echo "--- client exit $? (VM uptime $(cut -d' ' -f1 /proc/uptime)s)"
  cat "/tmp/$name.client"
  # The server prints its report as the session ends, about when the client exits.
  i=0
  until grep -q "^cpu" "/tmp/$name.server"; do
    i=$((i + 1)); [ $i -lt 50 ] || break; sleep 0.1
  done
  sleep 0.2
  kill "$server"; wait "$server"
  echo "--- server"
  cat "/tmp/$name.server"
  echo
}
"#,
    );
    for (i, c) in cases.iter().enumerate() {
        let args: Vec<String> = c.args.iter().map(|a| format!("'{a}'")).collect();
        s += &format!(
            "run_case {} {} {}\n",
            c.name,
            30000 + i * 10,
            args.join(" ")
        );
    }
    s += "echo '=== end'\n";
    s
}

/// The harness, killed with its whole process group (QEMU included) when dropped.
struct Vm(Child);

impl Drop for Vm {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group this test created for the harness.
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

fn harness() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/softroce/run.sh")
}

/// Fetches what the VM needs; `Err(why)` when this host cannot run it.
fn prepare() -> Result<(), String> {
    let out = Command::new(harness())
        .arg("--prepare")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", harness().display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    match out.status.code() {
        Some(0) => Ok(()),
        Some(UNAVAILABLE) => Err(stderr.trim().to_string()),
        _ => panic!("softroce harness --prepare failed:\n{stderr}"),
    }
}

/// Runs `script` in the VM; returns (exit status, stdout, stderr).
fn run_in_vm(script: &str) -> (i32, String, String) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join(format!("softroce-{}.sh", std::process::id()));
    std::fs::write(&path, script).unwrap();
    let child = Command::new(harness())
        .args([
            "--fperf",
            fperf_bin(),
            "--timeout",
            &VM_TIMEOUT_SECS.to_string(),
        ])
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut vm = Vm(child);
    let stdout = collect_joinable(vm.0.stdout.take().unwrap());
    let stderr = collect_joinable(vm.0.stderr.take().unwrap());
    let limit = Instant::now() + Duration::from_secs(VM_TIMEOUT_SECS + 30);
    let status = loop {
        if let Some(s) = vm.0.try_wait().unwrap() {
            break s.code().unwrap_or(-1);
        }
        if Instant::now() > limit {
            drop(vm);
            panic!("the softroce harness overran its own time-out; killed it");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    drop(vm);
    let _ = std::fs::remove_file(&path);
    let text = |(text, reader): (Arc<Mutex<String>>, JoinHandle<()>)| {
        reader.join().unwrap();
        let s = text.lock().unwrap().clone();
        s
    };
    (status, text(stdout), text(stderr))
}

/// The client's and the server's output of case `name`.
fn case_output<'a>(all: &'a str, name: &str) -> (i32, &'a str, &'a str) {
    let start = all
        .find(&format!("=== case {name}\n"))
        .unwrap_or_else(|| panic!("case {name} did not run:\n{all}"));
    let rest = &all[start..];
    let rest = &rest[rest.find('\n').unwrap() + 1..];
    let end = rest.find("=== ").unwrap_or(rest.len());
    let block = &rest[..end];
    let status_line = block.lines().next().unwrap();
    let status: i32 = status_line
        .strip_prefix("--- client exit ")
        .and_then(|s| s.split(' ').next())
        .unwrap_or_else(|| panic!("case {name}: no client status:\n{block}"))
        .parse()
        .unwrap();
    let body = &block[status_line.len() + 1..];
    let split = body
        .find("--- server\n")
        .unwrap_or_else(|| panic!("case {name}: no server output:\n{block}"));
    (
        status,
        &body[..split],
        &body[split + "--- server\n".len()..],
    )
}

#[test]
#[ignore = "needs QEMU and a kernel package for the Soft-RoCE VM"]
fn rdma_transfers_over_soft_roce_in_a_vm() {
    if let Err(why) = prepare() {
        panic!("the Soft-RoCE VM cannot run here: {why}");
    }
    let cases = cases();
    let started = Instant::now();
    let (status, out, err) = run_in_vm(&vm_script(&cases));
    eprintln!(
        "softroce VM ran {} cases in {:.1}s\n{err}",
        cases.len(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        status, 0,
        "VM script failed\nstdout:\n{out}\nstderr:\n{err}"
    );
    assert!(out.contains("=== end"), "{out}");
    for line in out
        .lines()
        .filter(|l| l.starts_with("=== case ") || l.starts_with("--- client exit"))
    {
        eprintln!("{line}");
    }
    for c in &cases {
        let (code, client, server) = case_output(&out, &c.name);
        assert_eq!(
            code, 0,
            "case {}: client failed\n{client}\nserver:\n{server}",
            c.name
        );
        let head = client.lines().next().unwrap_or_default();
        assert!(
            head.starts_with("RDMA ") && head.ends_with(&c.header),
            "case {}: {head}",
            c.name
        );
        assert!(
            server.contains("\nnew RDMA connection from 10.0.2.15"),
            "case {}: {server}",
            c.name
        );
        assert_eq!(
            volume(client, "sent").bytes,
            c.bytes,
            "case {}: client sent\n{client}",
            c.name
        );
        assert_eq!(
            volume(server, "received").bytes,
            c.bytes,
            "case {}: server received\n{server}",
            c.name
        );
        if let Some(replies) = c.replies {
            assert_eq!(volume(client, "received").bytes, replies, "{client}");
            assert_eq!(volume(server, "sent").bytes, replies, "{server}");
            latency(client, "mprtt");
        }
    }
}
