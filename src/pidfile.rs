//! `-I/--pidfile`: this process's ID in a file while it runs, as iperf3's option, for a
//! service manager or a script that must stop the server later.

use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// The file, removed when this is dropped if it still names this process.
pub struct PidFile {
    path: PathBuf,
    pid: u32,
}

impl PidFile {
    /// Writes this process's ID to `path`, unless the file names another process that
    /// is still running (a second server started by mistake).
    pub fn create(path: &Path) -> Result<PidFile> {
        let pid = std::process::id();
        if let Some(other) = running_owner(path).filter(|&p| p != pid) {
            bail!(
                "--pidfile {}: process {other} is running and wrote it (another fperf?); \
                 stop it, or remove the file",
                path.display()
            );
        }
        fs::write(path, format!("{pid}\n"))
            .with_context(|| format!("cannot write --pidfile {}", path.display()))?;
        Ok(PidFile {
            path: path.to_path_buf(),
            pid,
        })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        // Another process may have taken the file over since: leave it to that one.
        if read_pid(&self.path) == Some(self.pid) {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// The process ID in the file at `path`, if it holds one.
fn read_pid(path: &Path) -> Option<u32> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The process the file at `path` names, if it is still running.
fn running_owner(path: &Path) -> Option<u32> {
    let pid = read_pid(path).filter(|&p| p > 0)?;
    let raw = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: signal 0 only asks whether the process exists; nothing is sent.
    let alive = unsafe { libc::kill(raw, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    alive.then_some(pid)
}
