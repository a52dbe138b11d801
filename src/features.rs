//! What a test can need of the peer beyond the protocol's major version.
//!
//! Peers of one major version talk whatever their minors. A newer minor may add
//! options, and a field that changes what is measured must never be silently ignored by
//! an older peer: each such option comes with a [`Feature`], declared beside it by its
//! owner (the test's own in [`crate::settings`], each transport's in its folder). The
//! client's `Hello` lists the features its test needs, the server's `Welcome` the
//! features it supports, and a test needing one the peer lacks is refused before any
//! data flows, naming the option. This module collects every feature of the build.

use crate::latency_probe;
use crate::options::Feature;
use crate::settings::TEST_FEATURES;
use crate::transport::{rdma, sockets, tcp, udp};

/// How many features this build supports.
const COUNT: usize = TEST_FEATURES.len()
    + tcp::settings::FEATURES.len()
    + udp::settings::FEATURES.len()
    + sockets::FEATURES.len()
    + rdma::settings::FEATURES.len()
    + latency_probe::FEATURES.len();

impl Feature {
    /// Every feature this build supports: the test's own, each transport's, then the
    /// latency probes'.
    pub const ALL: [Feature; COUNT] = concat(&[
        &TEST_FEATURES,
        &tcp::settings::FEATURES,
        &udp::settings::FEATURES,
        &sockets::FEATURES,
        &rdma::settings::FEATURES,
        &latency_probe::FEATURES,
    ]);

    /// The feature of that wire name, if this build knows it.
    pub fn from_name(name: &str) -> Option<Feature> {
        Feature::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// `lists` one after another; `N` is their lengths' sum.
const fn concat<const N: usize>(lists: &[&[Feature]]) -> [Feature; N] {
    let mut out = [Feature::new("", ""); N];
    let (mut list, mut at) = (0, 0);
    while list < lists.len() {
        let mut i = 0;
        while i < lists[list].len() {
            out[at] = lists[list][i];
            at += 1;
            i += 1;
        }
        list += 1;
    }
    assert!(at == N, "COUNT is the lists' lengths summed");
    out
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
            assert!(!f.name().is_empty(), "{f:?}");
            assert!(f.option().starts_with('-'), "{f:?}");
        }
        let mut names: Vec<_> = Feature::ALL.iter().map(|f| f.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Feature::ALL.len());
        assert_eq!(Feature::from_name("warp_drive"), None);
    }

    #[test]
    fn the_first_minors_features_keep_their_names_on_the_wire() {
        let mut names = supported_names();
        names.retain(|n| Feature::from_name(n).is_some_and(|f| f.since_minor() == 0));
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "bidir",
                "crr",
                "dont_fragment",
                "flowlabel",
                "flows",
                "fq_rate",
                "mss",
                "percentiles",
                "rdma_write_trailer",
                "response_size",
                "reverse",
                "rx_timestamps",
                "sched",
                "tos",
                "transactions",
                "udp_echo",
            ]
        );
    }

    #[test]
    fn a_peer_without_a_list_has_the_first_minors_features() {
        let rx_timestamps = udp::settings::RX_TIMESTAMPS;
        assert!(peer_supports(None, rx_timestamps));
        assert!(!peer_supports(Some(&[]), rx_timestamps));
        assert!(peer_supports(
            Some(&["rx_timestamps".to_string()]),
            rx_timestamps
        ));
        assert!(!peer_supports(
            None,
            Feature::new("later", "--later").since(1)
        ));
    }
}
