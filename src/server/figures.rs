//! What a server keeps of a test once its streams ended, and how it closes the test,
//! whichever front end ran it.

use super::config::ServerEvent;
use super::events::EventSender;
use crate::engine::Received;
use crate::results::{nanos, Figures, SideResult, SideTotals, StreamResult};
use crate::sessions::SessionGuard;
use crate::settings::Settings;
use crate::transport::Role;
use std::time::Duration;

/// The server's figures: each stream over its span (its first byte received to its
/// last; with `--reverse` its first sent to the client's confirmation, or to its last
/// send where that ends its time), and the total
/// from the earliest start to the latest end.
pub(crate) fn server_result(settings: &Settings, per_stream: &[(u32, Received)]) -> SideResult {
    let mut totals = SideTotals::new(settings.first_server_stream());
    let streams = per_stream
        .iter()
        .map(|(index, r)| {
            totals.add(*index, &r.stats, &r.transport, r.span);
            if let Some(d) = r.drain {
                totals.add_drain(*index, d);
            }
            let time = r
                .span
                .map_or(Duration::ZERO, |(a, b)| b.saturating_duration_since(a));
            let mut figures = Figures::new(&r.stats, time, &settings.percentiles);
            figures.transport.merge(&r.transport);
            figures.drain_ns = r.drain.map(nanos);
            StreamResult {
                index: *index,
                local: r.local.clone(),
                peer: r.peer.clone(),
                in_force: r.in_force.clone(),
                figures,
            }
        })
        .collect();
    let (total, reverse_total) = totals.figures(&settings.percentiles);
    SideResult {
        role: Role::Server,
        total,
        reverse_total,
        streams,
        system: None,
        cpu: None,
        intervals: Vec::new(),
    }
}

/// Gives the memory a finished test freed back to the system: its threads' allocator
/// arenas would otherwise keep it (tens of MiB after a test of many streams).
pub(crate) fn return_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Ends a test's session: `Listening` goes out under the report lock (so it ends this
/// test's report before another's begins), then the test's slot is freed and its
/// memory given back, before its client hears the last word: a client that starts its
/// next test on reading it is never told "server busy".
pub(crate) fn close_session(registered: SessionGuard, events: &EventSender) {
    {
        let _in_order = registered.sessions().report_lock();
        events.report(ServerEvent::Listening);
    }
    free_session(registered);
}

/// Frees a test's slot and gives its memory back, leaving `Listening` to the caller
/// (which has more of the test to report first).
pub(crate) fn free_session(registered: SessionGuard) {
    drop(registered);
    return_freed_memory();
}
