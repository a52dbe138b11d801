//! The human report of a client's run: the header once the streams are connected, a
//! line per client interval (`-i`), and at the end the client's figures and a line of
//! what the server saw.

use super::{RunEnd, RunStart, Sink};
use crate::output::report::{client_body, client_header, interval_line, peer_line};
use crate::results::IntervalResult;
use crate::settings::Settings;
use crate::transport::Role;
use anyhow::Result;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by the command's SIGTERM handler: a run cut short then says SIGTERM stopped it,
/// not Ctrl-C. A signal handler can only reach a static.
pub static SIGTERM_RECEIVED: AtomicBool = AtomicBool::new(false);

/// The human report, written to `out` (flushed after each event).
pub struct Text<W: Write> {
    out: W,
    /// What the header adds: how long a run lasts that was given no length.
    length_note: Option<String>,
}

impl<W: Write> Text<W> {
    pub fn new(out: W, length_note: Option<String>) -> Text<W> {
        Text { out, length_note }
    }
}

impl<W: Write> Sink for Text<W> {
    fn start(&mut self, run: &RunStart) -> Result<()> {
        let list: Vec<_> = run
            .streams
            .iter()
            .map(|s| (s.index, s.local.clone(), s.peer.clone()))
            .collect();
        let in_force = run.streams.first().map(|s| &s.in_force);
        write!(
            self.out,
            "{}",
            client_header(run.settings, &list, in_force, self.length_note.as_deref())
        )?;
        Ok(self.out.flush()?)
    }

    fn interval(&mut self, settings: &Settings, role: Role, r: &IntervalResult) -> Result<()> {
        // The server's intervals are in its own report.
        if role == Role::Client {
            writeln!(self.out, "{}", interval_line(role, settings, r))?;
            self.out.flush()?;
        }
        Ok(())
    }

    fn end(&mut self, run: &RunEnd) -> Result<()> {
        write!(
            self.out,
            "{}",
            client_body(run.settings, &run.outcome.client)
        )?;
        write!(
            self.out,
            "{}",
            peer_line(run.settings, &run.outcome.server, 10)
        )?;
        if run.outcome.interrupted {
            let moved = Role::Client.moved(run.settings);
            if SIGTERM_RECEIVED.load(Ordering::Relaxed) {
                writeln!(
                    self.out,
                    "(stopped by SIGTERM: the figures cover what was {moved} until then)"
                )?;
            } else {
                writeln!(
                    self.out,
                    "(interrupted: the figures cover what was {moved} before Ctrl-C)"
                )?;
            }
        }
        Ok(self.out.flush()?)
    }
}
