//! The tests a server is running, and who may start one.
//!
//! By default a server runs one test at a time and every other client is told "server
//! busy" at once. With `--parallel N` it runs up to N at once, under one rule that keeps
//! their data ports apart: stream 0 of every test shares the base port (its connections
//! are routed by session id), but streams `i > 0` listen on `port + i` (and stream 0 of a
//! TCP test with `--window` on a port of its own), which two tests cannot both bind. So a
//! test that listens past the base port must have the server to itself: it is refused
//! while another test runs, and no test starts while it runs.
//!
//! Invariant: a session is registered exactly as long as its [`SessionGuard`] lives, so
//! no failure path can leave the server "busy" forever.

use crate::transport::DataConn;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard};

/// One running test.
struct Running {
    /// The id its data connections present.
    id: u64,
    /// Where data connections for it that arrive on the base port go, until its data
    /// streams are all connected; later ones are refused.
    route: Option<Sender<DataConn>>,
    /// It listens on ports after the base port and needs the server alone.
    alone: bool,
}

/// The running tests of one server.
pub struct Sessions {
    running: Mutex<Vec<Running>>,
    parallel: usize,
    /// Held while one test's report events are sent, so reports never interleave.
    report: Mutex<()>,
    /// Tests that have ended: their [`EndMark`]s dropped.
    ended: AtomicU64,
}

/// Keeps a session registered until dropped.
pub struct SessionGuard {
    sessions: Arc<Sessions>,
    id: u64,
}

impl Sessions {
    /// Room for `parallel` tests at once (at least one).
    pub fn new(parallel: usize) -> Arc<Sessions> {
        Arc::new(Sessions {
            running: Mutex::new(Vec::new()),
            parallel: parallel.max(1),
            report: Mutex::new(()),
            ended: AtomicU64::new(0),
        })
    }

    /// How many tests have ended, everything of them sent.
    pub fn ended(&self) -> u64 {
        self.ended.load(Ordering::Relaxed)
    }

    /// A mark that counts a test as ended once dropped.
    pub fn end_mark(self: &Arc<Self>) -> EndMark {
        EndMark(self.clone())
    }

    /// How many tests may run at once.
    pub fn parallel(&self) -> usize {
        self.parallel
    }

    fn lock(&self) -> Result<MutexGuard<'_, Vec<Running>>, String> {
        self.running
            .lock()
            .map_err(|_| "server state poisoned by a panic".to_string())
    }

    /// Registers a new test, or says why the server is busy.
    pub fn open(
        self: &Arc<Self>,
        id: u64,
        route: Sender<DataConn>,
    ) -> Result<SessionGuard, String> {
        let mut running = self.lock()?;
        if running.iter().any(|r| r.alone) {
            return Err(if self.parallel == 1 {
                "server busy: another test is running, try again later".into()
            } else {
                "server busy: a test listening past the base port has the server to itself, try again \
                 later"
                    .into()
            });
        }
        if running.len() >= self.parallel {
            return Err(if self.parallel == 1 {
                "server busy: another test is running, try again later".into()
            } else {
                format!(
                    "server busy: {} tests are running (--parallel {}), try again later",
                    running.len(),
                    self.parallel
                )
            });
        }
        running.push(Running {
            id,
            route: Some(route),
            alone: false,
        });
        Ok(SessionGuard {
            sessions: self.clone(),
            id,
        })
    }

    /// Whether session `id` is running.
    pub fn knows(&self, id: u64) -> bool {
        self.lock()
            .map(|running| running.iter().any(|r| r.id == id))
            .unwrap_or(false)
    }

    /// Where data connections for session `id` go, or why there is no place for one.
    pub fn route(&self, id: u64) -> Result<Sender<DataConn>, &'static str> {
        let running = self
            .lock()
            .map_err(|_| "server state poisoned by a panic")?;
        let test = running
            .iter()
            .find(|r| r.id == id)
            .ok_or("data connection for no running test")?;
        test.route
            .clone()
            .ok_or("data connection for a test whose data streams are all connected")
    }

    /// Holds back other tests' reports while one test sends its report events.
    pub fn report_lock(&self) -> Option<MutexGuard<'_, ()>> {
        self.report.lock().ok()
    }
}

impl SessionGuard {
    /// Claims the server for this test alone (one that listens past the base port); refused
    /// while another test runs.
    pub fn claim_alone(&self) -> Result<(), String> {
        let mut running = self.sessions.lock()?;
        if running.len() > 1 {
            return Err(format!(
                "server busy: this server runs several tests at once (--parallel {}) and \
                 another one is running; a test with several streams (-t > 1) or a TCP \
                 --window needs the server alone (it listens on ports after the base \
                 port), try again later",
                self.sessions.parallel
            ));
        }
        for r in running.iter_mut().filter(|r| r.id == self.id) {
            r.alone = true;
        }
        Ok(())
    }

    /// The test's data streams are all connected: refuses every later data connection
    /// that names it, so none is held until the test ends.
    pub fn streams_connected(&self) {
        if let Ok(mut running) = self.sessions.lock() {
            for r in running.iter_mut().filter(|r| r.id == self.id) {
                r.route = None;
            }
        }
    }

    /// The id data connections of this session present.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The sessions this one belongs to.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }
}

impl std::fmt::Debug for SessionGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionGuard")
            .field("id", &self.id)
            .finish()
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if let Ok(mut running) = self.sessions.running.lock() {
            running.retain(|r| r.id != self.id);
        }
    }
}

/// Counts a test as ended when dropped. The thread that serves a test holds it until it
/// has sent all of the test (results, report), which may be after the test's slot is
/// free for the next one.
pub struct EndMark(Arc<Sessions>);

impl Drop for EndMark {
    fn drop(&mut self) {
        self.0.ended.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn one_at_a_time_by_default() {
        let s = Sessions::new(1);
        let (tx, _rx) = mpsc::channel();
        let a = s.open(1, tx.clone()).expect("first");
        assert!(s.open(2, tx.clone()).expect_err("busy").contains("busy"));
        assert!(s.route(1).is_ok() && s.route(2).is_err());
        drop(a);
        assert!(s.route(1).is_err(), "no state left behind");
        let _b = s.open(2, tx).expect("free again");
    }

    #[test]
    fn a_test_ends_when_its_mark_drops_not_when_its_slot_is_freed() {
        let s = Sessions::new(1);
        let (tx, _rx) = mpsc::channel();
        let slot = s.open(1, tx).expect("open");
        let mark = s.end_mark();
        drop(slot);
        assert_eq!(s.ended(), 0, "its results may still be on their way");
        drop(mark);
        assert_eq!(s.ended(), 1);
    }

    #[test]
    fn data_connections_are_routed_only_until_the_streams_are_connected() {
        let s = Sessions::new(1);
        let (tx, _rx) = mpsc::channel();
        let a = s.open(7, tx).expect("open");
        assert!(s.route(7).is_ok());
        a.streams_connected();
        let late = s.route(7).expect_err("a late connection is refused");
        assert!(late.contains("all connected"), "{late}");
        assert!(s.route(8).expect_err("unknown").contains("no running test"));
    }

    #[test]
    fn parallel_tests_and_the_several_streams_rule() {
        let s = Sessions::new(2);
        let (tx, _rx) = mpsc::channel();
        let a = s.open(1, tx.clone()).expect("a");
        let b = s.open(2, tx.clone()).expect("b");
        assert!(s
            .open(3, tx.clone())
            .expect_err("full")
            .contains("--parallel 2"));
        assert!(b.claim_alone().expect_err("a runs").contains("-t > 1"));
        drop(a);
        b.claim_alone().expect("alone now");
        assert!(s.open(4, tx).expect_err("b alone").contains("to itself"));
    }
}
