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

use crate::latency_probe::MAX_PROBE_SESSIONS;
use crate::transport::DataConn;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
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
    /// Where its client connects from, once known.
    client: Option<IpAddr>,
}

/// The running tests of one server.
pub struct Sessions {
    running: Mutex<Vec<Running>>,
    parallel: usize,
    /// Held while one test's report events are sent, so reports never interleave.
    report: Mutex<()>,
    /// Tests that have ended: their [`EndMark`]s dropped.
    ended: AtomicU64,
    /// Probe sessions (`--under-load`'s latency probes) echoing now: apart from the
    /// tests, which they neither block nor wait for.
    probes: AtomicUsize,
}

/// Keeps a probe session counted until dropped.
pub struct ProbeGuard(Arc<Sessions>);

impl Drop for ProbeGuard {
    fn drop(&mut self) {
        self.0.probes.fetch_sub(1, Ordering::Relaxed);
    }
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
            probes: AtomicUsize::new(0),
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

    /// Counts a new probe session, or says why the server is busy: at most
    /// [`MAX_PROBE_SESSIONS`] at once.
    pub fn open_probe(self: &Arc<Self>) -> Result<ProbeGuard, String> {
        self.probes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < MAX_PROBE_SESSIONS).then_some(n + 1)
            })
            .map(|_| ProbeGuard(self.clone()))
            .map_err(|n| {
                format!("server busy: {n} latency probe sessions are running, try again later")
            })
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
            client: None,
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

    /// Hands data connection `conn` to session `id`, or says why there is no place for
    /// it (and gives it back). Handed over under the registry's lock, so none arrives
    /// once [`SessionGuard::streams_connected`] has returned.
    pub fn deliver(&self, id: u64, conn: DataConn) -> Result<(), (&'static str, DataConn)> {
        let running = match self.lock() {
            Ok(running) => running,
            Err(_) => return Err(("server state poisoned by a panic", conn)),
        };
        let Some(test) = running.iter().find(|r| r.id == id) else {
            return Err(("data connection for no running test", conn));
        };
        let Some(route) = &test.route else {
            return Err((
                "data connection for a test whose data streams are all connected",
                conn,
            ));
        };
        // A test that stopped waiting has dropped its end: the connection closes here.
        let _ = route.send(conn);
        Ok(())
    }

    /// Whether a running test whose streams are still connecting has its client at
    /// `ip`: that client's connections wait for a place among the pending ones.
    pub fn connecting_from(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.lock()
            .map(|running| {
                running
                    .iter()
                    .any(|r| r.route.is_some() && r.client == Some(ip))
            })
            .unwrap_or(false)
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

    /// The test's client connects from `ip`.
    pub fn client_at(&self, ip: IpAddr) {
        if let Ok(mut running) = self.sessions.lock() {
            for r in running.iter_mut().filter(|r| r.id == self.id) {
                r.client = Some(ip.to_canonical());
            }
        }
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

    /// As [`streams_connected`](Self::streams_connected), and closes at once the
    /// connections `routed` holds beyond those the test took.
    pub fn streams_connected_from(&self, routed: &Receiver<DataConn>) {
        self.streams_connected();
        while routed.try_recv().is_ok() {}
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
        // The test's buffers, histograms and threads are gone by now: what the
        // allocator kept of them goes back to the system, so the server returns to
        // its baseline between tests.
        crate::limits::release_freed_memory();
        self.0.ended.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A data connection over loopback, with its far end (to see it closed).
    fn conn() -> (DataConn, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let far =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (sock, _) = listener.accept().expect("accept");
        let conn = DataConn {
            stream: 0,
            socket: 0,
            sock,
            accepted: std::time::Instant::now(),
        };
        (conn, far)
    }

    /// Whether the far end of a connection sees it closed.
    fn closed(mut far: std::net::TcpStream) -> bool {
        use std::io::Read;
        far.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("timeout");
        matches!(far.read(&mut [0u8; 1]), Ok(0))
    }

    #[test]
    fn one_at_a_time_by_default() {
        let s = Sessions::new(1);
        let (tx, _rx) = mpsc::channel();
        let a = s.open(1, tx.clone()).expect("first");
        assert!(s.open(2, tx.clone()).expect_err("busy").contains("busy"));
        assert!(s.deliver(1, conn().0).is_ok() && s.deliver(2, conn().0).is_err());
        drop(a);
        assert!(s.deliver(1, conn().0).is_err(), "no state left behind");
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
        let (tx, rx) = mpsc::channel();
        let a = s.open(7, tx).expect("open");
        let (taken, _taken_far) = conn();
        let (extra, extra_far) = conn();
        assert!(s.deliver(7, taken).is_ok());
        assert!(s.deliver(7, extra).is_ok());
        assert!(rx.try_recv().is_ok(), "the one the test takes");
        // The one beyond what the test took is closed as the streams are connected.
        a.streams_connected_from(&rx);
        assert!(closed(extra_far));
        let (late, late_far) = conn();
        let (why, late) = s
            .deliver(7, late)
            .expect_err("a late connection is refused");
        assert!(why.contains("all connected"), "{why}");
        drop(late);
        assert!(closed(late_far));
        let (why, _) = s.deliver(8, conn().0).expect_err("unknown");
        assert!(why.contains("no running test"));
    }

    #[test]
    fn only_a_connecting_tests_client_may_wait_for_a_place() {
        let s = Sessions::new(1);
        let (tx, _rx) = mpsc::channel();
        let a = s.open(7, tx).expect("open");
        let client: IpAddr = [10, 0, 0, 1].into();
        assert!(!s.connecting_from(client), "not known yet");
        a.client_at(client);
        assert!(s.connecting_from(client));
        let mapped: IpAddr = std::net::Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped().into();
        assert!(s.connecting_from(mapped));
        assert!(!s.connecting_from([10, 0, 0, 2].into()));
        a.streams_connected();
        assert!(!s.connecting_from(client), "its streams are connected");
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
