//! CPU pinning of a STREAM's threads (`--cpu`, `--server-cpu`) and their scheduling
//! policy ([`crate::settings::Settings::batch_threads`]), shared by all transports.
//!
//! A run names a list of CPUs per end; stream `i`'s threads (the thread driving it and
//! its sender threads) all run on entry `i mod len`, so the threads of one stream share
//! a core's caches and the two ends of a loopback run can be kept apart.

use std::io;

/// CPUs a CPU set can name (`CPU_SETSIZE`).
pub const MAX_CPUS: usize = libc::CPU_SETSIZE as usize;

/// The CPU for stream `index` from `list`, or `None` when the list is empty (no pinning).
pub fn cpu_for(list: &[u32], index: u32) -> Option<usize> {
    if list.is_empty() {
        return None;
    }
    list.get(index as usize % list.len()).map(|&c| c as usize)
}

/// Pins the calling thread to `cpu`; does nothing for `None`.
pub fn pin_current_thread(cpu: Option<usize>) -> io::Result<()> {
    let Some(cpu) = cpu else { return Ok(()) };
    if cpu >= MAX_CPUS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} is beyond the {MAX_CPUS} a CPU set can name"),
        ));
    }
    set_affinity(cpu).map_err(|e| {
        let allowed = pinnable_cpus();
        let why = if allowed.contains(&cpu) {
            e.to_string()
        } else {
            format!(
                "this host lets fperf run on CPUs {}",
                cpu_list_text(&allowed)
            )
        };
        io::Error::new(e.kind(), format!("cannot pin a thread to CPU {cpu}: {why}"))
    })
}

/// Pins the calling thread to `cpu` (< `MAX_CPUS`).
fn set_affinity(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: callers keep `cpu` < CPU_SETSIZE, so CPU_SET stays inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; the pointer and size describe `set`.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Those of `cpus` a thread of this process cannot be pinned to. Each is tried on a
/// thread of its own, so the kernel's rule decides (online, and in this process's
/// cpuset), not the mask `taskset` started it with, which pinning may widen.
fn unpinnable(cpus: impl Iterator<Item = usize> + Send) -> Vec<usize> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                cpus.filter(|&c| c >= MAX_CPUS || set_affinity(c).is_err())
                    .collect()
            })
            .join()
            .unwrap_or_default()
    })
}

/// The CPUs a thread of this process can be pinned to.
fn pinnable_cpus() -> Vec<usize> {
    let refused = unpinnable(0..MAX_CPUS);
    (0..MAX_CPUS).filter(|c| !refused.contains(c)).collect()
}

/// Refuses a CPU of `list` (given with `flag`) that no thread of this process can be
/// pinned to, before a test starts rather than when its first thread is pinned.
pub fn check_pinnable(flag: &str, list: &[u32]) -> Result<(), String> {
    if list.is_empty() {
        return Ok(());
    }
    match unpinnable(list.iter().map(|&c| c as usize)).first() {
        Some(cpu) => Err(format!(
            "{flag} names CPU {cpu}, but this host lets fperf run on CPUs {}",
            cpu_list_text(&pinnable_cpus())
        )),
        None => Ok(()),
    }
}

/// `cpus` (ascending) as `taskset -c` writes a list: runs as ranges, e.g. `0-3,8`.
fn cpu_list_text(cpus: &[usize]) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &c in cpus {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == c => *last = c,
            _ => runs.push((c, c)),
        }
    }
    let texts: Vec<String> = runs
        .iter()
        .map(|&(first, last)| {
            if first == last {
                first.to_string()
            } else {
                format!("{first}-{last}")
            }
        })
        .collect();
    if texts.is_empty() {
        "none".to_string()
    } else {
        texts.join(",")
    }
}

/// Sets up the calling thread to drive a STREAM: pinned to `cpu` (if given) and, with
/// `batch`, under `SCHED_BATCH` ([`crate::settings::Settings::batch_threads`]).
pub fn place_current_thread(cpu: Option<usize>, batch: bool) -> io::Result<()> {
    pin_current_thread(cpu)?;
    if batch {
        batch_current_thread()?;
    }
    Ok(())
}

/// Puts the calling thread under `SCHED_BATCH` (threads it starts later inherit it).
/// Needs no privilege: the priority stays the normal one.
fn batch_current_thread() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for the call.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    checked(rc, || {
        "cannot run a data thread under SCHED_BATCH".to_string()
    })
}

/// `Ok` for a call's return code `rc` of 0 or more; else the OS error, with `what`
/// failed in front of it.
fn checked(rc: libc::c_int, what: impl FnOnce() -> String) -> io::Result<()> {
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{}: {e}", what())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU the calling thread last ran on.
    fn current_cpu() -> io::Result<usize> {
        // SAFETY: sched_getcpu takes no arguments and only reads kernel state.
        let rc = unsafe { libc::sched_getcpu() };
        usize::try_from(rc).map_err(|_| io::Error::last_os_error())
    }

    #[test]
    fn streams_take_cpus_round_robin() {
        assert_eq!(cpu_for(&[], 3), None);
        assert_eq!(cpu_for(&[1], 3), Some(1));
        assert_eq!(cpu_for(&[0, 1], 3), Some(1));
        assert_eq!(cpu_for(&[0, 1], 4), Some(0));
    }

    #[test]
    fn a_pinned_thread_runs_on_its_cpu() {
        std::thread::spawn(|| {
            pin_current_thread(Some(0)).expect("pin to CPU 0");
            assert_eq!(current_cpu().expect("getcpu"), 0);
        })
        .join()
        .expect("join");
    }

    #[test]
    fn a_batch_thread_and_the_threads_it_starts_run_under_sched_batch() {
        // SAFETY: sched_getscheduler(0) only reads the calling thread's policy.
        let policy = || unsafe { libc::sched_getscheduler(0) };
        std::thread::spawn(move || {
            assert_eq!(policy(), libc::SCHED_OTHER);
            batch_current_thread().expect("SCHED_BATCH");
            assert_eq!(policy(), libc::SCHED_BATCH);
            let child = std::thread::spawn(policy).join().expect("join");
            assert_eq!(child, libc::SCHED_BATCH);
        })
        .join()
        .expect("join");
    }

    #[test]
    fn cpu_lists_are_written_as_runs() {
        assert_eq!(cpu_list_text(&[0, 1, 2, 3, 8]), "0-3,8");
        assert_eq!(cpu_list_text(&[1, 3]), "1,3");
        assert_eq!(cpu_list_text(&[]), "none");
    }

    #[test]
    fn a_cpu_the_host_lacks_is_refused_with_those_it_has() {
        // No test machine has 1024 CPUs; every one has CPU 0.
        let absent = MAX_CPUS as u32 - 1;
        assert_eq!(check_pinnable("--cpu", &[0, 0]), Ok(()));
        let refused = check_pinnable("--cpu", &[0, absent]).expect_err("absent CPU");
        assert!(
            refused.starts_with("--cpu names CPU 1023, but this host lets fperf run on CPUs 0"),
            "{refused}"
        );
        let pinning = std::thread::spawn(move || pin_current_thread(Some(absent as usize)))
            .join()
            .expect("join")
            .expect_err("absent CPU");
        assert!(
            pinning
                .to_string()
                .starts_with("cannot pin a thread to CPU 1023: this host lets fperf run on CPUs 0"),
            "{pinning}"
        );
    }

    #[test]
    fn a_cpu_beyond_the_set_is_refused() {
        assert!(pin_current_thread(Some(MAX_CPUS)).is_err());
    }
}
