//! The exporter's reading of a request: the HTTP head, whom it is addressed to and
//! from (Host, Origin, Sec-Fetch-Site), and a probe's query, with an allow-list and
//! without (`fperf::exporter::read_request`). A panic is a finding.
#![no_main]

use fperf::exporter::{Allow, ExporterConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let open = ExporterConfig {
        listen: "0.0.0.0:9579".parse().expect("address"),
        host_names: vec!["metrics.example".into()],
        ..ExporterConfig::default()
    };
    let listed = ExporterConfig {
        allow: Allow::Only(vec![("127.0.0.1".into(), None), ("::1".into(), Some(5201))]),
        ..ExporterConfig::default()
    };
    for config in [&open, &listed] {
        let _ = fperf::exporter::read_request(data, config);
    }
});
