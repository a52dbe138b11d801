//! The options of the test as a whole, whatever its transport, each declared once (see
//! [`crate::options`]): the command line, `fperf mesh`, the exporter's probe and the
//! iperf3 front end take them from [`OPTIONS`].

use super::Settings;
use crate::options::{Iperf3, Mesh, Takes, TestOption};

/// Every test-wide option declared here.
pub static OPTIONS: [TestOption<Settings>; 1] = [TestOption {
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
}];

/// The test-wide option of clap name `id`.
pub fn option(id: &str) -> Option<&'static TestOption<Settings>> {
    OPTIONS.iter().find(|option| option.id == id)
}
