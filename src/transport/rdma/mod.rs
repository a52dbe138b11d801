//! The RDMA transport (`-R`), one module per API.
//!
//! - `ibverbs` and `cm` ([`verbs`]): over verbs queue pairs;
//! - `rsocket` ([`rsocket`]): the TCP STREAM over librdmacm's rsockets;
//! - `ofi` ([`ofi`]): libfabric.
//!
//! Connection details travel over a TCP side connection ([`side`]) that the server's
//! accept loop routes to the session like any data connection; the control protocol
//! itself is untouched. Every API first checks what this host lacks (library, device)
//! and fails before anything is sent, saying what is missing.

pub mod endpoint;
mod facts;
mod ofi;
pub mod ofi_stream;
pub mod options;
pub mod ring;
mod rsocket;
pub mod rsocket_sys;
pub mod settings;
mod side;
mod verbs;
pub mod verbs_stream;

use crate::transport::settings::TransportSettings;
use crate::transport::stream::Stream;
use crate::transport::{Acceptor, ClientCtx, ServerCtx, Transport};
use anyhow::{anyhow, Result};
use settings::{RdmaApi, RdmaSettings};

/// The RDMA transport, with the run's RDMA options.
pub struct RdmaTransport(pub RdmaSettings);

/// Checks, before the server is contacted, that this host can run the RDMA API of
/// `settings`, and pins the libfabric provider to the one libfabric picks. Fails with
/// one line saying what is missing and how to get it.
pub fn prepare(settings: &TransportSettings) -> Result<TransportSettings> {
    let mut s = settings.clone();
    let TransportSettings::Rdma(rdma) = &mut s else {
        return Ok(s);
    };
    match rdma.api {
        RdmaApi::Ofi => ofi::prepare(rdma)?,
        RdmaApi::Ibverbs | RdmaApi::Cm => {
            if let Some(missing) = verbs_missing(rdma.api, rdma.device.as_deref()) {
                return Err(missing);
            }
            verbs::prepare(rdma)?;
        }
        RdmaApi::Rsocket => {
            if let Some(missing) = verbs_missing(rdma.api, rdma.device.as_deref()) {
                return Err(missing);
            }
            rsocket::check(rdma)?;
        }
    }
    Ok(s)
}

/// What this host lacks to run `api` over verbs (library, device, the device named), if
/// anything.
fn verbs_missing(api: RdmaApi, device: Option<&str>) -> Option<anyhow::Error> {
    let (lib, package) = match api {
        RdmaApi::Ibverbs => ("libibverbs.so.1", "libibverbs1 ibverbs-providers"),
        _ => ("librdmacm.so.1", "librdmacm1 ibverbs-providers"),
    };
    // SAFETY: loading rdma-core's library only runs its own initializers; it is unloaded
    // at once.
    if let Err(e) = unsafe { libloading::Library::new(lib) } {
        return Some(anyhow!(
            "--rdma-api {} needs {lib}, which cannot be loaded here ({e}); install it with `apt-get install {package}`",
            api.name()
        ));
    }
    let devices: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    if devices.is_empty() {
        return Some(anyhow!(
            "no RDMA device found (/sys/class/infiniband is empty or missing); add Soft-RoCE with `modprobe rdma_rxe; rdma link add rxe0 type rxe netdev eth0`, or run over libfabric with `--rdma-api ofi --ofi-provider tcp`; for data from the server to the client, use --reverse (-R is RDMA)"
        ));
    }
    if let Some(d) = device {
        if !devices.iter().any(|x| x == d) {
            return Some(anyhow!(
                "RDMA device '{d}' not found; devices here: {}",
                devices.join(", ")
            ));
        }
    }
    None
}

impl Transport for RdmaTransport {
    fn listen(&self, ctx: &ServerCtx) -> Result<Box<dyn Acceptor>> {
        let rdma = &self.0;
        match rdma.api {
            RdmaApi::Ofi => {}
            RdmaApi::Ibverbs | RdmaApi::Cm => {
                if let Some(missing) = verbs_missing(rdma.api, None) {
                    return Err(missing);
                }
                return verbs::listen(ctx, rdma);
            }
            RdmaApi::Rsocket => {
                if let Some(missing) = verbs_missing(rdma.api, None) {
                    return Err(missing);
                }
                return rsocket::listen(ctx, rdma);
            }
        }
        ofi::listen(ctx, rdma)
    }

    fn connect(&self, ctx: &ClientCtx) -> Result<Vec<Box<dyn Stream>>> {
        let rdma = &self.0;
        match rdma.api {
            RdmaApi::Ofi => ofi::connect(ctx, rdma),
            RdmaApi::Ibverbs | RdmaApi::Cm => verbs::connect(ctx, rdma),
            RdmaApi::Rsocket => rsocket::connect(ctx, rdma),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_settings_need_no_rdma_preparation() {
        let s = crate::settings::Settings::default().transport;
        assert_eq!(prepare(&s).expect("tcp"), s);
    }
}
