//! What a test can need of the peer beyond the protocol's major version.
//!
//! Peers of one major version talk whatever their minors. A newer minor may add
//! options, and a field that changes what is measured must never be silently ignored by
//! an older peer: each such option is a [`Feature`]. The client's `Hello` lists the
//! features its test needs, the server's `Welcome` the features it supports, and a test
//! needing one the peer lacks is refused before any data flows, naming the option.

/// One capability a test may need of the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Feature {
    Reverse,
    Bidir,
    Crr,
    Transactions,
    Flows,
    ResponseSize,
    UdpEcho,
    RxTimestamps,
    Sched,
    Percentiles,
    Mss,
    DontFragment,
    FqRate,
    FlowLabel,
    Tos,
    RdmaWriteTrailer,
}

impl Feature {
    /// Every feature this build supports.
    pub const ALL: [Feature; 16] = [
        Feature::Reverse,
        Feature::Bidir,
        Feature::Crr,
        Feature::Transactions,
        Feature::Flows,
        Feature::ResponseSize,
        Feature::UdpEcho,
        Feature::RxTimestamps,
        Feature::Sched,
        Feature::Percentiles,
        Feature::Mss,
        Feature::DontFragment,
        Feature::FqRate,
        Feature::FlowLabel,
        Feature::Tos,
        Feature::RdmaWriteTrailer,
    ];

    /// Its name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Feature::Reverse => "reverse",
            Feature::Bidir => "bidir",
            Feature::Crr => "crr",
            Feature::Transactions => "transactions",
            Feature::Flows => "flows",
            Feature::ResponseSize => "response_size",
            Feature::UdpEcho => "udp_echo",
            Feature::RxTimestamps => "rx_timestamps",
            Feature::Sched => "sched",
            Feature::Percentiles => "percentiles",
            Feature::Mss => "mss",
            Feature::DontFragment => "dont_fragment",
            Feature::FqRate => "fq_rate",
            Feature::FlowLabel => "flowlabel",
            Feature::Tos => "tos",
            Feature::RdmaWriteTrailer => "rdma_write_trailer",
        }
    }

    /// The option a user gives for it, for messages.
    pub fn option(self) -> &'static str {
        match self {
            Feature::Reverse => "--reverse",
            Feature::Bidir => "--bidir",
            Feature::Crr => "--crr",
            Feature::Transactions => "--transactions",
            Feature::Flows => "--flows",
            Feature::ResponseSize => "--response-size",
            Feature::UdpEcho => "-u --echo",
            Feature::RxTimestamps => "--rx-timestamps",
            Feature::Sched => "--sched",
            Feature::Percentiles => "--percentiles",
            Feature::Mss => "-M",
            Feature::DontFragment => "--dont-fragment",
            Feature::FqRate => "--fq-rate",
            Feature::FlowLabel => "--flowlabel",
            Feature::Tos => "--tos",
            Feature::RdmaWriteTrailer => "--rdma-write",
        }
    }

    /// The protocol minor version that brought it; peers of an older minor lack it.
    /// Minor 0 is what a peer that announces no features supports.
    pub fn since_minor(self) -> u32 {
        0
    }

    /// The feature of that wire name, if this build knows it.
    pub fn from_name(name: &str) -> Option<Feature> {
        Feature::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// The wire names of every feature this build supports.
pub fn supported_names() -> Vec<String> {
    Feature::ALL.iter().map(|f| f.name().to_string()).collect()
}

/// Whether a peer that announced `names` (or nothing, as peers of minor 0 do) supports
/// `feature`.
pub fn peer_supports(names: Option<&[String]>, feature: Feature) -> bool {
    match names {
        Some(names) => names.iter().any(|n| n == feature.name()),
        None => feature.since_minor() == 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found_again() {
        for f in Feature::ALL {
            assert_eq!(Feature::from_name(f.name()), Some(f));
            assert!(f.option().starts_with('-'), "{f:?}");
        }
        let mut names: Vec<_> = Feature::ALL.iter().map(|f| f.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Feature::ALL.len());
        assert_eq!(Feature::from_name("warp_drive"), None);
    }

    #[test]
    fn a_peer_without_a_list_has_the_first_minors_features() {
        assert!(peer_supports(None, Feature::RxTimestamps));
        assert!(!peer_supports(Some(&[]), Feature::RxTimestamps));
        assert!(peer_supports(
            Some(&["rx_timestamps".to_string()]),
            Feature::RxTimestamps
        ));
    }
}
