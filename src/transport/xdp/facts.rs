//! What an AF_XDP stream says of itself in reports: the interface and queue, where the
//! XDP program runs, whether frames are copied, need_wakeup and busy polling, shown on
//! the report's header line; and frames refused for bad checksums, where there were
//! any.

use crate::transport::facts::{Amount, Entry, Facts, OnHeader, Shown};
use serde::Serialize;

/// The settings an AF_XDP stream runs with, as the kernel granted them; empty for
/// every other stream.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct XdpInForce {
    /// AF_XDP: the interface and queue the socket is bound to (`IFACE:QUEUE`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xdp_queue: Option<String>,
    /// AF_XDP: where the XDP program runs, `native` (in the driver) or `generic`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xdp_attach: Option<String>,
    /// AF_XDP: `zero-copy` or `copy`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xdp_copy: Option<String>,
    /// AF_XDP: whether the kernel is woken only when it asks (need_wakeup).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xdp_need_wakeup: Option<bool>,
    /// AF_XDP: whether the socket prefers busy polling (`--busy-poll`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xdp_busy_poll: Option<bool>,
    /// AF_XDP: frames of the flow dropped on arrival for a bad IP or UDP checksum.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xdp_bad_checksums: Option<u64>,
}

impl XdpInForce {
    /// What a sending stream reports of these: all but the receiving side's refusals.
    pub fn sending(&self) -> XdpInForce {
        XdpInForce {
            xdp_bad_checksums: None,
            ..self.clone()
        }
    }
}

impl Facts for XdpInForce {
    fn title(&self) -> &'static str {
        "xdp"
    }

    fn entries(&self) -> Vec<Entry> {
        let Some(queue) = &self.xdp_queue else {
            return Vec::new();
        };
        let mut words = vec![queue.clone()];
        words.extend(self.xdp_attach.clone());
        words.extend(self.xdp_copy.clone());
        if self.xdp_need_wakeup == Some(true) {
            words.push("need_wakeup".into());
        }
        if self.xdp_busy_poll == Some(true) {
            words.push("busy_poll".into());
        }
        let header = Shown {
            header: Some(OnHeader::EveryEnd),
            ..Shown::default()
        };
        let mut entries = vec![Entry {
            key: "af_xdp",
            label: "af_xdp",
            amount: Amount::Text(words.join(" ")),
            shown: header,
            metric: None,
        }];
        if let Some(n) = self.xdp_bad_checksums.filter(|&n| n > 0) {
            entries.push(Entry {
                key: "xdp_bad_checksums",
                label: "bad checksums",
                amount: Amount::Count(n),
                shown: Shown {
                    summary: true,
                    ..Shown::default()
                },
                metric: None,
            });
        }
        entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_names_queue_and_modes_and_refusals_show_only_when_there_are_some() {
        let facts = XdpInForce {
            xdp_queue: Some("eth0:3".into()),
            xdp_attach: Some("native".into()),
            xdp_copy: Some("copy".into()),
            xdp_need_wakeup: Some(true),
            xdp_busy_poll: Some(false),
            xdp_bad_checksums: Some(0),
        };
        let entries = facts.entries();
        assert_eq!(entries.len(), 1);
        assert_eq!(
            entries[0].amount,
            Amount::Text("eth0:3 native copy need_wakeup".into())
        );
        let refused = XdpInForce {
            xdp_bad_checksums: Some(2),
            ..facts.clone()
        };
        assert_eq!(refused.entries()[1].amount, Amount::Count(2));
        assert_eq!(refused.sending().entries().len(), 1);
        assert!(XdpInForce::default().entries().is_empty());
    }
}
