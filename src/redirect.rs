//! Where the process's output goes: `--logfile` (stdout and stderr appended to a file),
//! `--timestamps` (each line of stdout begins with the wall-clock time) and `--title`
//! (then with the title), as iperf3's options of those names do. They work on the file
//! descriptors, so every line is covered, whichever part of fperf writes it.

use anyhow::{Context, Result};
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;
use std::thread::JoinHandle;

/// Appends stdout and stderr to `path` from now on.
pub fn log_to(path: &Path) -> Result<()> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open --logfile {}", path.display()))?;
    for fd in [libc::STDOUT_FILENO, libc::STDERR_FILENO] {
        // SAFETY: both descriptors are open; dup2 replaces `fd` atomically.
        if unsafe { libc::dup2(file.as_raw_fd(), fd) } < 0 {
            return Err(io::Error::last_os_error()).context("cannot redirect output to --logfile");
        }
    }
    Ok(())
}

/// What begins each line of stdout: the time in a strftime format (`--timestamps`),
/// then `TITLE:  ` (`--title`), in iperf3's order.
#[derive(Clone, Debug, Default)]
pub struct LinePrefix {
    pub time_format: Option<String>,
    pub title: Option<String>,
}

impl LinePrefix {
    /// Whether lines get anything at all.
    pub fn is_empty(&self) -> bool {
        self.time_format.is_none() && self.title.is_none()
    }
}

/// Stdout as a pipe, each line stamped by a thread on its way to where stdout went
/// before. [`Stamper::finish`] writes out what is left.
pub struct Stamper {
    thread: JoinHandle<()>,
}

impl Stamper {
    /// Begins each line of stdout with `prefix`.
    pub fn install(prefix: &LinePrefix) -> Result<Stamper> {
        let format = (prefix.time_format.as_deref())
            .map(CString::new)
            .transpose()
            .context("--timestamps: the format has a NUL byte")?;
        let title = prefix.title.as_ref().map(|t| format!("{t}:  "));
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error()).context("--timestamps");
        }
        // SAFETY: pipe2 opened both; each File owns one from here.
        let (reader, writer) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
        // SAFETY: stdout is open; the duplicate is owned by the File.
        let original = unsafe { libc::dup(libc::STDOUT_FILENO) };
        if original < 0 {
            return Err(io::Error::last_os_error()).context("--timestamps");
        }
        // SAFETY: as above.
        let original = unsafe { File::from_raw_fd(original) };
        // SAFETY: both open; stdout now feeds the pipe (the writer's own fd then closes).
        if unsafe { libc::dup2(writer.as_raw_fd(), libc::STDOUT_FILENO) } < 0 {
            return Err(io::Error::last_os_error()).context("--timestamps");
        }
        drop(writer);
        let thread = std::thread::Builder::new()
            .name("fperf-timestamps".into())
            .spawn(move || stamp_lines(reader, original, format.as_ref(), title.as_deref()))?;
        Ok(Stamper { thread })
    }

    /// Closes the pipe and waits until every line went out.
    pub fn finish(self) {
        let _ = io::stdout().flush();
        // Stdout onto /dev/null: the pipe's last writer closes, and the thread sees its end.
        if let Ok(null) = File::options().write(true).open("/dev/null") {
            // SAFETY: both descriptors are open.
            unsafe { libc::dup2(null.as_raw_fd(), libc::STDOUT_FILENO) };
        }
        let _ = self.thread.join();
    }
}

/// Copies `from` to `to`, `format`'s time and then `title` at the start of each line.
fn stamp_lines(mut from: File, mut to: File, format: Option<&CString>, title: Option<&str>) {
    let mut buf = [0u8; 8192];
    let mut line_start = true;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut out = Vec::with_capacity(n + 64);
        for &byte in &buf[..n] {
            if line_start {
                if let Some(format) = format {
                    out.extend_from_slice(now(format).as_bytes());
                }
                out.extend_from_slice(title.unwrap_or_default().as_bytes());
            }
            out.push(byte);
            line_start = byte == b'\n';
        }
        if to.write_all(&out).is_err() {
            return;
        }
    }
}

/// The local time now in strftime's `format`.
fn now(format: &CString) -> String {
    // SAFETY: time() with a null pointer only returns the time.
    let t = unsafe { libc::time(std::ptr::null_mut()) };
    // SAFETY: tm is plain old data; localtime_r fills it from `t`.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to live locals.
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return String::new();
    }
    let mut text = [0u8; 256];
    // SAFETY: strftime writes at most `text.len()` bytes, and returns how many.
    let n = unsafe { libc::strftime(text.as_mut_ptr().cast(), text.len(), format.as_ptr(), &tm) };
    String::from_utf8_lossy(&text[..n]).into_owned()
}
