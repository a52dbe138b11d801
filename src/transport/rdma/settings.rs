//! RDMA's own options: the programming interface, the device or libfabric provider,
//! and how the data moves (SEND/RECV or RDMA WRITE).

use super::ring::{endpoint_bytes_at_most, TRAILER_BYTES};
use crate::options::Feature;
use crate::transport::labels::{Sample, Samples};
use crate::transport::shape::RunShape;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Longest RDMA device or libfabric provider name accepted.
pub const MAX_RDMA_NAME: usize = 128;

/// Which RDMA programming interface `-R` uses.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize,
)]
#[schemars(rename = "rdma_api")]
#[serde(rename_all = "lowercase")]
pub enum RdmaApi {
    /// Raw verbs (libibverbs), the original default.
    #[default]
    Ibverbs,
    /// rdma_cm connection management (librdmacm).
    Cm,
    /// rsocket (librdmacm's socket-like calls).
    Rsocket,
    /// libfabric (OFI), any provider: verbs, efa, tcp, ...
    Ofi,
}

impl RdmaApi {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            RdmaApi::Ibverbs => "ibverbs",
            RdmaApi::Cm => "cm",
            RdmaApi::Rsocket => "rsocket",
            RdmaApi::Ofi => "ofi",
        }
    }
}

/// The options of an RDMA run. The client pins the device and provider it resolved
/// before the server sees them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize)]
#[schemars(rename = "rdma_settings")]
pub struct RdmaSettings {
    /// The programming interface (`--rdma-api`).
    #[serde(default, rename = "rdma_api")]
    pub api: RdmaApi,
    /// The device (`-D`); for libfabric, the domain name.
    #[serde(default, rename = "rdma_device")]
    pub device: Option<String>,
    /// `--rdma-api ofi` only: the libfabric provider; the client resolves it to the one
    /// libfabric picks (e.g. `tcp` to `tcp;ofi_rxm`).
    #[serde(default)]
    pub ofi_provider: Option<String>,
    /// Move data with RDMA WRITEs into the receiver's ring (`--rdma-write`) instead of
    /// SEND/RECV.
    #[serde(default, rename = "rdma_write")]
    pub write: bool,
}

/// Why [`RdmaSettings`] were refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RdmaSettingsError {
    #[error("{0} must be 1 to {MAX_RDMA_NAME} printable characters")]
    Name(&'static str),
    #[error("--ofi-provider needs --rdma-api ofi")]
    ProviderWithoutOfi,
}

/// What `--rdma-write` needs of the peer.
pub const RDMA_WRITE_TRAILER: Feature = Feature::new("rdma_write_trailer", "--rdma-write");
/// Every feature RDMA's options may need of the peer (see [`crate::features`]).
pub const FEATURES: [Feature; 1] = [RDMA_WRITE_TRAILER];

impl RdmaSettings {
    /// The features of the peer these options need (see [`crate::features`]).
    pub fn features(&self, out: &mut Vec<Feature>) {
        if self.write {
            out.push(RDMA_WRITE_TRAILER);
        }
    }

    /// Most bytes of registered packet buffers either end of the run holds: an
    /// endpoint's rings per socket, whose slots hold a packet or a larger
    /// `--response-size` reply, and written by verbs a trailer.
    pub fn buffer_bytes(&self, run: &RunShape) -> u64 {
        let endpoints = u64::from(run.nstreams) * u64::from(run.nsockets);
        let mut slot = run.pktsize.max(run.response_size.unwrap_or(0)) as usize;
        if self.write && self.api != RdmaApi::Ofi {
            slot += TRAILER_BYTES;
        }
        endpoints * endpoint_bytes_at_most(slot)
    }

    /// A sample per packet, but rsocket's, which are read as TCP's are.
    pub fn samples(&self, run: &RunShape) -> Samples {
        Samples {
            send: Sample::Packet,
            recv: if self.api == RdmaApi::Rsocket {
                crate::transport::tcp::settings::read_sample(run)
            } else {
                Sample::Packet
            },
        }
    }

    /// Checks the names a client may send.
    pub fn validate(&self) -> Result<(), RdmaSettingsError> {
        if self.ofi_provider.is_some() && self.api != RdmaApi::Ofi {
            return Err(RdmaSettingsError::ProviderWithoutOfi);
        }
        let names = [
            ("--rdmadev", &self.device),
            ("--ofi-provider", &self.ofi_provider),
        ];
        for (flag, name) in names {
            let Some(name) = name else { continue };
            let printable = name.chars().all(|c| c.is_ascii_graphic());
            if name.is_empty() || name.len() > MAX_RDMA_NAME || !printable {
                return Err(RdmaSettingsError::Name(flag));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_printable_and_bounded() {
        let rdma = RdmaSettings {
            api: RdmaApi::Ofi,
            ofi_provider: Some("tcp;ofi_rxm".into()),
            device: Some("mlx5_0".into()),
            write: true,
        };
        assert_eq!(rdma.validate(), Ok(()));
        for bad in ["", "a b", "x\0", &"p".repeat(MAX_RDMA_NAME + 1)] {
            let s = RdmaSettings {
                ofi_provider: Some(bad.to_string()),
                ..rdma.clone()
            };
            assert_eq!(
                s.validate(),
                Err(RdmaSettingsError::Name("--ofi-provider")),
                "{bad:?}"
            );
        }
        let verbs = RdmaSettings {
            api: RdmaApi::Cm,
            ..rdma
        };
        assert_eq!(verbs.validate(), Err(RdmaSettingsError::ProviderWithoutOfi));
    }
}
