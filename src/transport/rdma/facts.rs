//! What RDMA says of a run in its reports: the programming interface, the operation
//! that moves the data, and the libfabric provider and device (as the client resolved
//! them, see [`RdmaSettings`]).

use super::settings::RdmaSettings;
use crate::transport::facts::{Amount, Entry, Facts, OnHeader, Shown};

impl Facts for RdmaSettings {
    fn title(&self) -> &'static str {
        "rdma"
    }

    fn entries(&self) -> Vec<Entry> {
        let op = if self.write { "write" } else { "send" };
        let named = [
            ("api", Some(self.api.name())),
            ("op", Some(op)),
            ("provider", self.ofi_provider.as_deref()),
            ("device", self.device.as_deref()),
        ];
        named
            .into_iter()
            .filter_map(|(key, name)| {
                Some(Entry {
                    key,
                    label: key,
                    amount: Amount::Text(name?.to_string()),
                    shown: Shown {
                        header: Some(OnHeader::EveryEnd),
                        ..Shown::default()
                    },
                    metric: None,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::rdma::settings::RdmaApi;

    #[test]
    fn headers_name_the_api_operation_provider_and_device() {
        let rdma = RdmaSettings {
            api: RdmaApi::Ofi,
            ofi_provider: Some("tcp;ofi_rxm".into()),
            device: Some("mlx5_0".into()),
            write: true,
        };
        let shown: Vec<(&str, Amount)> = (rdma.entries().into_iter())
            .map(|e| (e.label, e.amount))
            .collect();
        let text = |t: &str| Amount::Text(t.to_string());
        assert_eq!(
            shown,
            [
                ("api", text("ofi")),
                ("op", text("write")),
                ("provider", text("tcp;ofi_rxm")),
                ("device", text("mlx5_0")),
            ]
        );
        let verbs = RdmaSettings::default();
        let labels: Vec<&str> = verbs.entries().iter().map(|e| e.label).collect();
        assert_eq!(labels, ["api", "op"]);
    }
}
