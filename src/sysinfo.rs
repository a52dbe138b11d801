//! Facts about the machine and the process that frame a measurement: host, CPU, kernel,
//! fperf version ([`SystemFacts`]), the CPU time a run cost ([`CpuUsage`], from
//! `getrusage`).
//!
//! Everything here is read outside the hot path: at the start and end of a run and at
//! interval boundaries. A fact the system does not provide is `None`, never a guess.

use serde::Serialize;

/// One end's machine (`--conf`); `None` where the system does not say.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "system")]
#[schemars(deny_unknown_fields)]
pub struct SystemFacts {
    /// Host name.
    #[serde(default)]
    pub hostname: Option<String>,
    /// CPU model name as /proc/cpuinfo gives it.
    #[serde(default)]
    pub cpu_model: Option<String>,
    /// Logical CPUs online.
    pub cpu_cores: Option<u32>,
    /// Operating system and kernel release, e.g. `Linux 6.1.0-18-amd64`.
    #[serde(default)]
    pub kernel: Option<String>,
    /// Machine architecture, e.g. `x86_64`.
    pub arch: String,
    /// The fperf version of this end.
    pub fperf_version: String,
}

impl SystemFacts {
    /// Reads the facts of this machine.
    pub fn collect() -> SystemFacts {
        let uts = uname();
        SystemFacts {
            hostname: uts.as_ref().map(|u| u.0.clone()).filter(|h| !h.is_empty()),
            cpu_model: cpu_model(),
            cpu_cores: std::thread::available_parallelism()
                .ok()
                .and_then(|n| u32::try_from(n.get()).ok()),
            kernel: uts.map(|u| format!("{} {}", u.1, u.2)),
            arch: std::env::consts::ARCH.to_string(),
            fperf_version: crate::VERSION.to_string(),
        }
    }
}

/// The two ends' facts side by side (`fperf -c HOST --conf`).
pub fn side_by_side(client: &SystemFacts, server: &SystemFacts) -> String {
    let rows = |f: &SystemFacts| {
        let or_unknown = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".into());
        [
            or_unknown(&f.hostname),
            or_unknown(&f.cpu_model),
            f.cpu_cores
                .map_or_else(|| "unknown".into(), |n| n.to_string()),
            or_unknown(&f.kernel),
            f.arch.clone(),
            f.fperf_version.clone(),
        ]
    };
    let (c, s) = (rows(client), rows(server));
    let width = c.iter().map(String::len).max().unwrap_or(0).max(6);
    let mut out = format!("{:<10}  {:<width$}  {}\n", "", "client", "server");
    for (i, label) in ["host", "cpu", "cores", "kernel", "arch", "fperf"]
        .iter()
        .enumerate()
    {
        out += &format!("{label:<10}  {:<width$}  {}\n", c[i], s[i]);
    }
    out
}

/// (nodename, sysname, release) from `uname()`.
fn uname() -> Option<(String, String, String)> {
    // SAFETY: utsname is plain old data; zeroed is a valid value for it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, exclusively borrowed utsname for the call.
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    let field = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Some((field(&u.nodename), field(&u.sysname), field(&u.release)))
}

/// The first `model name` (x86) or `Processor`/`cpu model` (other architectures) in
/// /proc/cpuinfo.
fn cpu_model() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    parse_cpu_model(&text)
}

fn parse_cpu_model(cpuinfo: &str) -> Option<String> {
    ["model name", "Processor", "cpu model", "uarch", "cpu"]
        .iter()
        .find_map(|key| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == *key && !v.trim().is_empty()).then(|| v.trim().to_string())
            })
        })
}

/// CPU time used by this process, in microseconds (as `getrusage` counts it), and what
/// else the kernel counts for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CpuUsage {
    pub user_us: u64,
    pub system_us: u64,
    /// Context switches, page faults and peak memory; `None` where the end did not say
    /// (an iperf3 peer reports CPU time only).
    pub counts: Option<UsageCounts>,
}

/// What `getrusage` counts besides CPU time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UsageCounts {
    /// Context switches while waiting (for data, a lock, the socket buffer).
    pub voluntary_switches: u64,
    /// Context switches the scheduler forced (time slice used up, a task preferred).
    pub involuntary_switches: u64,
    /// Peak resident memory of the process since it started, in KiB: a high-water
    /// mark, so never a difference.
    pub max_rss_kib: u64,
    /// Page faults served without I/O.
    pub minor_faults: u64,
    /// Page faults that read from disk.
    pub major_faults: u64,
}

impl CpuUsage {
    /// CPU time this process used so far (every thread), with its counts.
    pub fn now() -> Option<CpuUsage> {
        // SAFETY: rusage is plain old data; zeroed is a valid value for it.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `ru` is a valid, exclusively borrowed rusage for the call.
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
            return None;
        }
        let us = |tv: libc::timeval| {
            u64::try_from(tv.tv_sec).unwrap_or(0) * 1_000_000
                + u64::try_from(tv.tv_usec).unwrap_or(0)
        };
        let count = |n: libc::c_long| u64::try_from(n).unwrap_or(0);
        Some(CpuUsage {
            user_us: us(ru.ru_utime),
            system_us: us(ru.ru_stime),
            counts: Some(UsageCounts {
                voluntary_switches: count(ru.ru_nvcsw),
                involuntary_switches: count(ru.ru_nivcsw),
                // Linux counts it in KiB.
                max_rss_kib: count(ru.ru_maxrss),
                minor_faults: count(ru.ru_minflt),
                major_faults: count(ru.ru_majflt),
            }),
        })
    }

    /// The CPU time and counts between `earlier` and `self`; the peak memory as of `self`.
    pub fn since(self, earlier: CpuUsage) -> CpuUsage {
        let counts = match (self.counts, earlier.counts) {
            (Some(now), Some(then)) => Some(UsageCounts {
                voluntary_switches: now
                    .voluntary_switches
                    .saturating_sub(then.voluntary_switches),
                involuntary_switches: now
                    .involuntary_switches
                    .saturating_sub(then.involuntary_switches),
                max_rss_kib: now.max_rss_kib,
                minor_faults: now.minor_faults.saturating_sub(then.minor_faults),
                major_faults: now.major_faults.saturating_sub(then.major_faults),
            }),
            _ => None,
        };
        CpuUsage {
            user_us: self.user_us.saturating_sub(earlier.user_us),
            system_us: self.system_us.saturating_sub(earlier.system_us),
            counts,
        }
    }

    /// User seconds.
    pub fn user_secs(self) -> f64 {
        self.user_us as f64 / 1e6
    }

    /// System seconds.
    pub fn system_secs(self) -> f64 {
        self.system_us as f64 / 1e6
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_of_this_machine_are_read() {
        let f = SystemFacts::collect();
        assert!(f.hostname.is_some());
        assert!(f.kernel.as_deref().is_some_and(|k| k.starts_with("Linux ")));
        assert!(f.cpu_cores.is_some_and(|n| n >= 1));
        assert_eq!(f.fperf_version, crate::VERSION);
    }

    #[test]
    fn cpu_model_is_found_on_x86_and_arm_layouts() {
        let x86 = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU\n";
        assert_eq!(
            parse_cpu_model(x86).as_deref(),
            Some("Intel(R) Xeon(R) CPU")
        );
        let arm = "processor\t: 0\nBogoMIPS\t: 50.00\n\nProcessor\t: ARMv8 rev 1\n";
        assert_eq!(parse_cpu_model(arm).as_deref(), Some("ARMv8 rev 1"));
        assert_eq!(parse_cpu_model("flags : x\n"), None);
    }

    #[test]
    fn side_by_side_has_one_row_per_fact() {
        let f = SystemFacts::collect();
        let text = side_by_side(&f, &f);
        assert_eq!(text.lines().count(), 7);
        assert!(text.lines().nth(3).is_some_and(|l| l.starts_with("cores ")));
    }

    #[test]
    fn cpu_usage_grows_with_work() {
        // The kernel splits a process's CPU time into user and system by the ticks it
        // sampled, so one short burst of work may be booked as system time while other
        // test threads make system calls: work until user time shows it, for up to 2 s.
        let a = CpuUsage::now().expect("getrusage");
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut x = 0u64;
        loop {
            for i in 0..20_000_000u64 {
                x = x.wrapping_mul(31).wrapping_add(i);
            }
            std::hint::black_box(x);
            let b = CpuUsage::now().expect("getrusage");
            if b.since(a).user_us > 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < give_up,
                "2 s of work booked no user time"
            );
        }
    }

    #[test]
    fn usage_counts_grow_with_work_and_keep_the_peak_memory() {
        let a = CpuUsage::now().expect("getrusage");
        // Touching fresh pages faults them in (a fresh mapping: the heap may hand back
        // pages other tests already touched); sleeping is a voluntary switch.
        let mut pages = memmap2::MmapMut::map_anon(8 << 20).expect("mmap");
        pages.fill(1);
        std::hint::black_box(&pages);
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = CpuUsage::now().expect("getrusage");
        let (then, now) = (a.counts.expect("counts"), b.counts.expect("counts"));
        let d = b.since(a).counts.expect("counts");
        assert!(d.minor_faults > 0, "{then:?} -> {now:?}");
        assert!(d.voluntary_switches > 0, "{then:?} -> {now:?}");
        assert!(now.max_rss_kib >= 8 << 10, "{now:?}");
        assert_eq!(d.max_rss_kib, now.max_rss_kib);
        // A side without counts (an iperf3 peer) gives none, not zeros.
        let bare = CpuUsage { counts: None, ..b };
        assert_eq!(bare.since(a).counts, None);
    }
}
