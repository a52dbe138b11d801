//! `-I/--pidfile`: this process's ID in a file while it runs, as iperf3's option, for a
//! service manager or a script that must stop the server later.

use anyhow::{bail, Context, Result};
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
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

    /// What a signal handler that ends the process at once (a second Ctrl-C) needs to
    /// remove the file too, prepared now: a handler may not allocate.
    pub fn removal(&self) -> Option<PidFileRemoval> {
        Some(PidFileRemoval {
            path: CString::new(self.path.as_os_str().as_bytes()).ok()?,
            content: format!("{}\n", self.pid).into_bytes(),
        })
    }
}

/// Removes the pid file from a signal handler, where only async-signal-safe calls may
/// be made: `open`, `read`, `close` and `unlink`, on memory prepared beforehand.
pub struct PidFileRemoval {
    path: CString,
    /// The file's bytes as this process wrote them.
    content: Vec<u8>,
}

impl PidFileRemoval {
    /// Removes the file if it still holds what this process wrote.
    pub fn remove_now(&self) {
        let mut held = [0u8; 24];
        // SAFETY: `path` is a valid C string and `held` a buffer of the length given;
        // open, read, close and unlink are async-signal-safe.
        unsafe {
            let fd = libc::open(self.path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return;
            }
            let n = libc::read(fd, held.as_mut_ptr().cast(), held.len());
            libc::close(fd);
            if usize::try_from(n).ok() == Some(self.content.len())
                && held[..self.content.len()] == self.content[..]
            {
                libc::unlink(self.path.as_ptr());
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signal_safe_removal_takes_only_this_process_file() {
        let dir = std::env::temp_dir().join(format!("fperf-removal-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("fperf.pid");
        let file = PidFile::create(&path).expect("pid file");
        let removal = file.removal().expect("removal");
        // Taken over by another process since: left alone.
        fs::write(&path, "999999999\n").expect("rewrite");
        removal.remove_now();
        assert!(path.exists());
        fs::write(&path, format!("{}\n", std::process::id())).expect("rewrite");
        removal.remove_now();
        assert!(!path.exists());
        // Already gone: nothing to do, and no failure.
        removal.remove_now();
        drop(file);
        let _ = fs::remove_dir_all(&dir);
    }
}
