//! RDMA's options, each declared once (see [`crate::options`]); the command line takes
//! them from [`OPTIONS`].

use super::settings::{RdmaApi, RdmaSettings};
use crate::options::{Iperf3, Mesh, Takes, TestOption};

/// Every RDMA option, in the order the help lists them.
pub static OPTIONS: [TestOption<RdmaSettings>; 4] = [
    TestOption {
        id: "rdmadev",
        long: "rdmadev",
        short: Some('D'),
        alias: None,
        takes: Takes::Value("DEV"),
        choices: &[],
        conflicts: &[],
        help: "RDMA device name (default: the first one found).",
        mesh: Mesh::No,
        probe: None,
        iperf3: Iperf3::No,
        what: "a device name",
        set: |rdma, text| {
            rdma.device = Some(text.to_owned());
            Ok(())
        },
    },
    TestOption {
        id: "rdma_api",
        long: "rdma-api",
        short: None,
        alias: None,
        takes: Takes::Value("API"),
        choices: &["ibverbs", "cm", "rsocket", "ofi"],
        conflicts: &[],
        help: "RDMA programming interface: ibverbs (raw verbs, the default), cm (verbs with \
               rdma_cm connection set-up), rsocket (librdmacm's socket calls) or ofi \
               (libfabric).",
        mesh: Mesh::No,
        probe: None,
        iperf3: Iperf3::No,
        what: "ibverbs, cm, rsocket or ofi",
        set: |rdma, text| {
            rdma.api = match text {
                "ibverbs" => RdmaApi::Ibverbs,
                "cm" => RdmaApi::Cm,
                "rsocket" => RdmaApi::Rsocket,
                "ofi" => RdmaApi::Ofi,
                other => return Err(format!("'{other}' is not ibverbs, cm, rsocket or ofi")),
            };
            Ok(())
        },
    },
    TestOption {
        id: "ofi_provider",
        long: "ofi-provider",
        short: None,
        alias: None,
        takes: Takes::Value("NAME"),
        choices: &[],
        conflicts: &[],
        help: "libfabric provider for --rdma-api ofi (verbs, efa, tcp, shm, \"tcp;ofi_rxm\", \
               ...; default: the first of verbs, efa, tcp that works).",
        mesh: Mesh::No,
        probe: None,
        iperf3: Iperf3::No,
        what: "a provider name",
        set: |rdma, text| {
            rdma.ofi_provider = Some(text.to_owned());
            Ok(())
        },
    },
    TestOption {
        id: "rdma_write",
        long: "rdma-write",
        short: None,
        alias: None,
        takes: Takes::Nothing,
        choices: &[],
        conflicts: &[],
        help: "Move the data with RDMA WRITEs into the receiver's buffer ring instead of \
               SEND/RECV. With --rdma-api ibverbs or cm they carry no immediate data and the \
               receiver finds them by polling its memory, as ib_write_bw and ib_write_lat \
               do; in round trips (-r, --echo, --response-size) the answers are written too. \
               With --rdma-api ofi the writes carry immediate data and the answers are sent.",
        mesh: Mesh::No,
        probe: None,
        iperf3: Iperf3::No,
        what: "a flag",
        set: |rdma, _| {
            rdma.write = true;
            Ok(())
        },
    },
];
