//! The server's events on their way from its session threads to the caller's thread.

use super::config::ServerEvent;
use crate::results::IntervalResult;
use crate::settings::Settings;
use std::sync::mpsc::{self, Receiver, Sender};

/// The session threads' end.
#[derive(Clone)]
pub(crate) struct EventSender {
    tx: Sender<ServerEvent>,
}

/// The caller's end.
pub(crate) struct EventReceiver {
    rx: Receiver<ServerEvent>,
}

pub(crate) fn channel() -> (EventSender, EventReceiver) {
    let (tx, rx) = mpsc::channel();
    (EventSender { tx }, EventReceiver { rx })
}

impl EventSender {
    /// One of a test's report events (not an interval).
    pub fn report(&self, event: ServerEvent) {
        let _ = self.tx.send(event);
    }

    /// An interval of a running test.
    pub fn interval(&self, settings: &Settings, result: Box<IntervalResult>) {
        let _ = self.tx.send(ServerEvent::Interval {
            settings: settings.clone(),
            result,
        });
    }

    /// An error a peer caused.
    pub fn client_error(&self, peer: String, error: String) {
        let _ = self.tx.send(ServerEvent::ClientError { peer, error });
    }
}

impl EventReceiver {
    /// Hands the waiting events to `on_event`. Returns whether events may still wait.
    pub fn hand_on(&self, on_event: &mut dyn FnMut(ServerEvent)) -> bool {
        while let Ok(event) = self.rx.try_recv() {
            on_event(event);
        }
        false
    }
}
