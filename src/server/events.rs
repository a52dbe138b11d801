//! The server's events on their way from its session threads to the caller's thread.
//!
//! That thread also accepts connections, and while it writes them out (a paused
//! terminal, a pipe nobody reads) the events wait. A test's report is a few events and
//! the tests at once are bounded (`--parallel`), so those always go. Interval reports
//! and client errors come as fast as peers make them: at most [`MAX_PACED_WAITING`] of
//! them wait, the rest are counted, and the count is handed on with
//! [`ServerEvent::LeftOut`] once the caller has caught up.

use super::config::ServerEvent;
use crate::results::IntervalResult;
use crate::settings::Settings;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;

/// Most interval reports and client errors waiting at once. The caller's thread takes
/// them at least every 50 ms; 64 tests at once with the shortest interval (10 ms) make
/// 320 in that time.
const MAX_PACED_WAITING: usize = 1024;

/// Most events the caller's thread takes before it looks at its listeners again.
const MAX_TAKEN_AT_ONCE: usize = 256;

/// What the two ends share: how many paced events wait, and those left out.
#[derive(Default)]
struct Paced {
    waiting: AtomicUsize,
    left_out_intervals: AtomicU64,
    left_out_errors: AtomicU64,
}

/// An event on its way, and whether it holds a place among the paced events.
type Queued = (ServerEvent, bool);

/// The session threads' end.
#[derive(Clone)]
pub(crate) struct EventSender {
    tx: Sender<Queued>,
    paced: Arc<Paced>,
}

/// The caller's end.
pub(crate) struct EventReceiver {
    rx: Receiver<Queued>,
    paced: Arc<Paced>,
}

pub(crate) fn channel() -> (EventSender, EventReceiver) {
    let (tx, rx) = mpsc::channel();
    let paced = Arc::new(Paced::default());
    (
        EventSender {
            tx,
            paced: paced.clone(),
        },
        EventReceiver { rx, paced },
    )
}

impl EventSender {
    /// One of a test's report events (not an interval): these always go.
    pub fn report(&self, event: ServerEvent) {
        let _ = self.tx.send((event, false));
    }

    /// An interval of a running test (of `client`, with tests in parallel), left out
    /// while too many paced events wait.
    pub fn interval(&self, settings: &Settings, client: Option<&str>, result: Box<IntervalResult>) {
        if self.claim_place(&self.paced.left_out_intervals) {
            let event = ServerEvent::Interval {
                settings: settings.clone(),
                result,
                client: client.map(str::to_owned),
            };
            let _ = self.tx.send((event, true));
        }
    }

    /// An error a peer caused, left out while too many paced events wait.
    pub fn client_error(&self, peer: String, error: String) {
        if self.claim_place(&self.paced.left_out_errors) {
            let _ = self
                .tx
                .send((ServerEvent::ClientError { peer, error }, true));
        }
    }

    /// Takes a place among the paced events waiting, or counts one more in `left_out`.
    fn claim_place(&self, left_out: &AtomicU64) -> bool {
        let claimed = self
            .paced
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_PACED_WAITING).then_some(n + 1)
            })
            .is_ok();
        if !claimed {
            left_out.fetch_add(1, Ordering::Relaxed);
        }
        claimed
    }
}

impl EventReceiver {
    /// Hands the waiting events to `on_event`, at most [`MAX_TAKEN_AT_ONCE`]; then, if
    /// no paced event waits any more but some were left out, their count. Returns
    /// whether events may still wait.
    pub fn hand_on(&self, on_event: &mut dyn FnMut(ServerEvent)) -> bool {
        for _ in 0..MAX_TAKEN_AT_ONCE {
            let Ok((event, paced)) = self.rx.try_recv() else {
                self.hand_on_left_out(on_event);
                return false;
            };
            if paced {
                self.paced.waiting.fetch_sub(1, Ordering::AcqRel);
            }
            on_event(event);
        }
        self.hand_on_left_out(on_event);
        true
    }

    fn hand_on_left_out(&self, on_event: &mut dyn FnMut(ServerEvent)) {
        if self.paced.waiting.load(Ordering::Acquire) > 0 {
            return;
        }
        let intervals = self.paced.left_out_intervals.swap(0, Ordering::Relaxed);
        let errors = self.paced.left_out_errors.swap(0, Ordering::Relaxed);
        if intervals > 0 || errors > 0 {
            on_event(ServerEvent::LeftOut { intervals, errors });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(sender: &EventSender, n: usize) {
        for i in 0..n {
            sender.client_error(format!("peer {i}"), "junk".into());
        }
    }

    #[test]
    fn paced_events_beyond_the_bound_are_counted_and_reports_always_go() {
        let (sender, receiver) = channel();
        error(&sender, MAX_PACED_WAITING + 5);
        sender.report(ServerEvent::Listening);
        let mut seen = Vec::new();
        while receiver.hand_on(&mut |e| seen.push(e)) {}
        let errors = seen
            .iter()
            .filter(|e| matches!(e, ServerEvent::ClientError { .. }))
            .count();
        assert_eq!(errors, MAX_PACED_WAITING);
        let left_out: Vec<_> = seen
            .iter()
            .filter_map(|e| match e {
                ServerEvent::LeftOut { intervals, errors } => Some((*intervals, *errors)),
                _ => None,
            })
            .collect();
        assert_eq!(left_out, [(0, 5)]);
        assert!(matches!(seen.last(), Some(ServerEvent::Listening)));
        assert_eq!(seen.len(), MAX_PACED_WAITING + 2);
    }

    #[test]
    fn the_count_waits_until_no_paced_event_does_and_places_are_given_back() {
        let (sender, receiver) = channel();
        error(&sender, MAX_PACED_WAITING + 1);
        let mut seen = Vec::new();
        // The first pass takes some of those waiting: no count yet.
        assert!(receiver.hand_on(&mut |e| seen.push(e)));
        assert!(!seen
            .iter()
            .any(|e| matches!(e, ServerEvent::LeftOut { .. })));
        // Places taken are free again.
        error(&sender, MAX_TAKEN_AT_ONCE);
        while receiver.hand_on(&mut |e| seen.push(e)) {}
        assert_eq!(seen.len(), MAX_PACED_WAITING + MAX_TAKEN_AT_ONCE + 1);
        assert!(matches!(
            seen.last(),
            Some(ServerEvent::LeftOut {
                intervals: 0,
                errors: 1
            })
        ));
        // Nothing left out since: nothing more to say.
        seen.clear();
        assert!(!receiver.hand_on(&mut |e| seen.push(e)));
        assert!(seen.is_empty());
    }
}
