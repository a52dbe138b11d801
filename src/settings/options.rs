//! The options of the test as a whole, whatever its transport, each declared once (see
//! [`crate::options`]): the command line, `fperf mesh`, the exporter's probe and the
//! iperf3 front end take them from [`OPTIONS`].

use super::{Settings, MAX_NSTREAMS};
use crate::options::{whole_number, Iperf3, Mesh, Takes, TestOption};

/// Every test-wide option declared here, in the order a probe's parameters list them.
pub static OPTIONS: [TestOption<Settings>; 2] = [
    TestOption {
        id: "nstreams",
        long: "nstreams",
        short: Some('t'),
        alias: None,
        takes: Takes::Value("N"),
        choices: &[],
        conflicts: &[],
        help:
            "Number of data STREAMs, each driven by its own thread.\n\nStream i uses port PORT+i.",
        // fperf mesh's -t is checked with the run's other settings, not as it is read.
        mesh: Mesh::No,
        probe: Some("streams"),
        // An iperf3 client's streams (-P) are iperf3's own, at most 128 each way.
        iperf3: Iperf3::No,
        // 1 to MAX_NSTREAMS.
        what: "1 to 256",
        set: |settings, text| {
            let n = whole_number(text, 1, MAX_NSTREAMS.into())?;
            settings.nstreams = u32::try_from(n).map_err(|e| e.to_string())?;
            Ok(())
        },
    },
    TestOption {
        id: "bitrate",
        long: "bitrate",
        short: Some('b'),
        alias: None,
        takes: Takes::Value("RATE"),
        choices: &[],
        conflicts: &["server"],
        help: "Target rate of each stream in bits/s, e.g. 100M (default: no limit).\n\n\
           K/M/G/T = 10^3..10^12. The client paces its sends to it, whole packets (-l) at \
           a time, so at a slow rate one packet must go within --idle-timeout. 0, as \
           iperf3's -b 0: as fast as possible.",
        mesh: Mesh::Help(
            "Target rate of each stream in bits/s (e.g. 100M, 2.5G); 0, as fast as possible \
         (the default).",
        ),
        probe: Some("bitrate"),
        // iperf3 sends 0 for no target.
        iperf3: Iperf3::Number("bandwidth"),
        // A probe's refusal is the rate parser's own.
        what: "",
        set: |settings, text| {
            // 0: no target, as iperf3's -b 0.
            settings.rate_bps = Some(crate::units::parse_target_rate(text)?).filter(|&b| b > 0);
            Ok(())
        },
    },
];

/// The test-wide option of clap name `id`.
pub fn option(id: &str) -> Option<&'static TestOption<Settings>> {
    OPTIONS.iter().find(|option| option.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_is_told_the_streams_it_may_ask_for() {
        let streams = option("nstreams").expect("declared");
        assert_eq!(streams.what, format!("1 to {MAX_NSTREAMS}"));
    }
}
