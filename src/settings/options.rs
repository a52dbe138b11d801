//! The options of the test as a whole, whatever its transport, each declared once (see
//! [`crate::options`]): the command line, `fperf mesh`, the exporter's probe and the
//! iperf3 front end take them from [`OPTIONS`].

use super::{Settings, MAX_NSTREAMS};
use crate::options::{whole_number, Iperf3, Mesh, Takes, TestOption};
use crate::percentiles::PercentilesError;
use crate::stream::MAX_PKTSIZE;
use crate::workload::{Reply, Workload, WorkloadError};

/// Every test-wide option declared here, in the order a probe's parameters list them.
pub static OPTIONS: [TestOption<Settings>; 3] = [
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
        mesh: Mesh::Help("Data streams per test."),
        probe: Some("streams"),
        // An iperf3 client's -P; with --bidir, as with fperf's, streams each way.
        iperf3: Iperf3::Number("parallel"),
        // 1 to MAX_NSTREAMS.
        what: "1 to 256",
        set: |settings, text| {
            let n = whole_number(text, 1, MAX_NSTREAMS.into())?;
            settings.nstreams = u32::try_from(n).map_err(|e| e.to_string())?;
            Ok(())
        },
    },
    TestOption {
        id: "pktsize",
        long: "pktsize",
        short: Some('l'),
        alias: Some("length"),
        takes: Takes::Value("BYTES"),
        choices: &[],
        conflicts: &[],
        help: "Bytes per send (K, M, G binary) [default: 32K; 1472 with -u; 1 with -r]\n\n\
           K, M and G are binary: 128K = 131072. Default: 32K; with -u 1472 (1452 over \
           IPv6), a datagram that a 1500-byte MTU carries whole; with -r, --echo or --crr \
           1, as qperf, netperf and neper send.",
        mesh: Mesh::Help(
            "Bytes per send (K, M, G = 2^10, 2^20, 2^30) [default: 32K; 1472 with -u, 1452 \
         with -u -6; 1 with -r or --echo].",
        ),
        // Absent, a probe's size= and an iperf3 client's len have their own front
        // end's default (the workload's and family's; iperf3's).
        probe: Some("size"),
        iperf3: Iperf3::Count("len"),
        what: "1 to 64M bytes (K, M and G are 2^10, 2^20, 2^30)",
        set: |settings, text| {
            settings.pktsize = parse_pktsize(text)?;
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

/// `-l BYTES`: a byte count from 1 up to the largest packet fperf sends.
fn parse_pktsize(text: &str) -> Result<u32, String> {
    let bytes = crate::units::parse_bytes(text).ok_or_else(|| {
        format!("'{text}' is not a byte count (digits, optionally ending in K, M or G)")
    })?;
    if bytes == 0 {
        return Err("a packet is at least 1 byte".into());
    }
    if bytes > u64::from(MAX_PKTSIZE) {
        return Err(format!(
            "a packet is at most 64M ({MAX_PKTSIZE} bytes): give -l 64M or less"
        ));
    }
    // At most MAX_PKTSIZE, so it fits.
    Ok(bytes as u32)
}

/// The test's outputs that both ends make, declared once.
pub static OUTPUT_OPTIONS: [TestOption<Settings>; 1] = [TestOption {
    id: "percentiles",
    long: "percentiles",
    short: None,
    alias: None,
    takes: Takes::Value("LIST"),
    choices: &[],
    conflicts: &["server", "sweep"],
    help: "The latency percentiles both ends report, in the text, --json and --csv: \
           comma-separated, each above 0 and at most 100, at most 16 (e.g. 50,99,99.99). \
           Default: 50,90,99,99.9.",
    mesh: Mesh::No,
    probe: Some("percentiles"),
    iperf3: Iperf3::No,
    // A probe's refusal is the parser's own words, which name the option.
    what: "",
    set: |settings, text| {
        settings.percentiles = text.parse().map_err(|e: PercentilesError| e.to_string())?;
        Ok(())
    },
}];

/// The test's length as `--time` gave it, in seconds; each front end makes it the
/// run's milliseconds with its own default.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GivenTime {
    pub secs: Option<f64>,
}

/// `--time`, declared once.
pub static TIME_OPTION: TestOption<GivenTime> = TestOption {
    id: "time",
    long: "time",
    short: None,
    alias: None,
    takes: Takes::Value("SECS"),
    choices: &[],
    conflicts: &["mb", "server"],
    help: "Bound the run by time: each stream sends for SECS seconds [default: 10 s].\n\n\
           It replaces --mb's bound. Without -m, --time or --transactions a run lasts 10 s \
           (plus --omit). SECS is a number of seconds, or a number with a unit: ms, s, m or \
           h (e.g. 500ms, 2s, 1.5m).",
    mesh: Mesh::Help("Each pair's test length in seconds (or with a unit: 500ms, 2s, 1m)."),
    // A probe's duration= is bounded by the exporter's limit, an iperf3 client's time
    // (0: bounded by bytes or blocks) by iperf3's own.
    probe: Some("duration"),
    iperf3: Iperf3::Number("time"),
    what: "a number of seconds",
    set: |time, text| {
        time.secs = Some(crate::units::parse_seconds(text)?);
        Ok(())
    },
};

/// `--omit`, declared once: what it sets is a span, as `--time`'s.
pub static OMIT_OPTION: TestOption<GivenTime> = TestOption {
    id: "omit",
    long: "omit",
    short: None,
    alias: None,
    takes: Takes::Value("SECS"),
    choices: &[],
    conflicts: &["server"],
    help: "Leave the first SECS seconds (warm-up) out of the totals, as iperf3's -O (units as \
           --time's).",
    mesh: Mesh::No,
    probe: None,
    // An iperf3 client's -O, in whole seconds (0: none), bounded by iperf3's own rule.
    iperf3: Iperf3::Number("omit"),
    what: "a number of seconds",
    set: |omit, text| {
        omit.secs = Some(crate::units::parse_seconds(text)?);
        Ok(())
    },
};

/// The flags that pick a test's workload, as given; [`WorkloadFlags::workload`] makes
/// them one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkloadFlags {
    /// `-r`: each packet waits for a 1-byte reply.
    pub mprtt: bool,
    /// `--echo`: each packet waits for itself back.
    pub echo: bool,
    /// `--crr`: a connection per request.
    pub crr: bool,
    /// `--reverse`: bulk data from the server.
    pub reverse: bool,
    /// `--bidir`: bulk data both ways.
    pub bidir: bool,
}

impl WorkloadFlags {
    /// The workload the flags ask for, refusing flags that ask for two.
    pub fn workload(&self) -> Result<Workload, WorkloadError> {
        if self.bidir {
            let other = [
                (self.reverse, "--reverse"),
                (self.crr, "--crr"),
                (self.echo, "--echo"),
                (self.mprtt, "-r"),
            ]
            .into_iter()
            .find_map(|(given, flag)| given.then_some(flag));
            return match other {
                Some(flag) => Err(WorkloadError::BidirConflict(flag)),
                None => Ok(Workload::Bidir),
            };
        }
        if self.reverse {
            return match self.mprtt || self.echo || self.crr {
                true => Err(WorkloadError::ReverseMprtt),
                false => Ok(Workload::Reverse),
            };
        }
        match (self.crr, self.echo, self.mprtt) {
            (true, true, _) => Err(WorkloadError::CrrConflict("with --echo")),
            (true, false, _) => Ok(Workload::Crr),
            (false, true, _) => Ok(Workload::RoundTrip(Reply::Echo)),
            (false, false, true) => Ok(Workload::RoundTrip(Reply::Ack)),
            (false, false, false) => Ok(Workload::Bulk),
        }
    }
}

/// The flags that pick a test's workload, each declared once, in the order the help
/// lists them.
pub static WORKLOAD_OPTIONS: [TestOption<WorkloadFlags>; 5] = [
    TestOption {
        id: "mprtt",
        long: "mprtt",
        short: Some('r'),
        alias: None,
        takes: Takes::Nothing,
        choices: &[],
        conflicts: &[],
        help: "Wait for a 1-byte ACK after each packet and report its round trip (mprtt).\n\n\
               \"Most-practical round-trip time\": each packet waits for the peer's answer \
               before the next is sent.",
        mesh: Mesh::Help(
            "A latency matrix: each packet answered by 1 byte (median round trip per pair).",
        ),
        probe: None,
        iperf3: Iperf3::No,
        what: "a flag",
        set: |flags, _| {
            flags.mprtt = true;
            Ok(())
        },
    },
    TestOption {
        id: "echo",
        long: "echo",
        short: None,
        alias: None,
        takes: Takes::Nothing,
        choices: &[],
        conflicts: &[],
        help: "TCP, UDP or RDMA (every --rdma-api): MPRTT (implies -r) where the server \
               answers each packet with the packet itself (as many bytes, like \
               sockperf/qperf ping-pong) instead of a 1-byte ACK; mprtt is then the round \
               trip of a request and its full-size echo",
        mesh: Mesh::Help("A latency matrix: each packet echoed whole."),
        probe: None,
        iperf3: Iperf3::No,
        what: "a flag",
        set: |flags, _| {
            flags.echo = true;
            Ok(())
        },
    },
    TestOption {
        id: "crr",
        long: "crr",
        short: None,
        alias: None,
        takes: Takes::Nothing,
        choices: &[],
        conflicts: &[],
        help: "TCP only: connect-request-response (implies -r), as netperf's TCP_CRR and \
               neper's tcp_crr: every packet is a new connection (connect, the -l-byte \
               request, a 1-byte reply, the server closes, the client closes), and mprtt is \
               that whole life of a connection. Stream i uses the server's port PORT+1+i",
        mesh: Mesh::No,
        probe: None,
        iperf3: Iperf3::No,
        what: "a flag",
        set: |flags, _| {
            flags.crr = true;
            Ok(())
        },
    },
    TestOption {
        id: "reverse",
        long: "reverse",
        short: None,
        alias: None,
        takes: Takes::Nothing,
        choices: &[],
        conflicts: &[],
        help: "Data from the server to the client, as iperf3's -R (fperf's -R is RDMA).\n\n\
               TCP or UDP bulk in reverse: the server sends and the client receives, with \
               the same flags and figures; the client's report is then the receiving end's \
               (with UDP its loss, reordering and jitter).",
        mesh: Mesh::No,
        // 1 (or true) turns bulk sending around; 0 (or false) leaves it.
        probe: Some("reverse"),
        iperf3: Iperf3::Present("reverse"),
        what: "0 or 1",
        set: |flags, text| {
            flags.reverse = match text {
                "1" | "true" => true,
                "0" | "false" => false,
                _ => return Err("0 or 1".into()),
            };
            Ok(())
        },
    },
    TestOption {
        id: "bidir",
        long: "bidir",
        short: None,
        alias: None,
        takes: Takes::Nothing,
        choices: &[],
        conflicts: &["sweep"],
        help: "TCP bulk both ways at once, as iperf3's --bidir: -t N streams carry the \
               client's data and N more the server's (streams N..2N-1). Each end reports \
               what it sent and what it received, each direction over its own time",
        mesh: Mesh::No,
        probe: None,
        iperf3: Iperf3::Present("bidirectional"),
        what: "a flag",
        set: |flags, _| {
            flags.bidir = true;
            Ok(())
        },
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_is_told_the_streams_it_may_ask_for() {
        let streams = option("nstreams").expect("declared");
        assert_eq!(streams.what, format!("1 to {MAX_NSTREAMS}"));
    }
}
