//! An iperf3 peer's JSON messages: a client's parameters as the server reads them,
//! then a results message as each end reads the other's (`fperf::iperf3::read_messages`).
//! The input is the parameters, a NUL, and the results (JSON holds no raw NUL). A panic
//! is a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (params, results) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let _ = fperf::iperf3::read_messages(params, results);
});
