//! iperf3's protocol, spoken by fperf: an fperf server serves unmodified iperf3 clients
//! on a port of their own (`server/iperf3.rs`), and an fperf client runs against an
//! unmodified iperf3 server ([`crate::client::iperf3`]), both over the same STREAMs,
//! data loops, limits and reports as fperf's own tests. This module holds what both
//! speak: [`wire`] the protocol's facts (cookie, states, messages, error codes),
//! [`params`] what an iperf3 client may ask for, [`results`] the results exchange and
//! [`udp`] its UDP streams.

pub mod params;
pub mod results;
pub mod udp;
pub mod wire;

use crate::stats::datagrams::DatagramCounts;
use crate::stats::StreamStats;
use serde_json::{Map, Value};

/// What this crate reads from an iperf3 peer's JSON messages, from their bytes: a
/// client's parameters (`params`) as the server reads them, then a results message
/// (`results`) as each end reads the other's, for the test those parameters make. The
/// fuzz target and the property tests drive the readers through it.
pub fn read_messages(params: &[u8], results: &[u8]) -> Result<params::Iperf3Test, String> {
    let asked: Map<String, Value> = serde_json::from_slice(params).map_err(|e| e.to_string())?;
    let test = params::parse(&asked).map_err(|e| e.to_string())?;
    let Ok(theirs) = serde_json::from_slice::<Map<String, Value>>(results) else {
        return Ok(test);
    };
    let streams = test.run.nstreams as usize;
    let mut stats = vec![StreamStats::default(); streams];
    let warm_ups = vec![DatagramCounts::default(); streams];
    let received = (0..)
        .zip(stats.iter_mut())
        .zip(&warm_ups)
        .map(|((i, s), w)| (i, s, w));
    results::count_losses(&test.run, received, &theirs);
    results::server_result(&test.run, &theirs, &warm_ups).map_err(|e| format!("{e:#}"))?;
    Ok(test)
}
