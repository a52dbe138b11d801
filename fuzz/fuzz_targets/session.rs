//! Both ends' control sessions driven by arbitrary scripts of well-formed, hostile and
//! raw messages (see `fperf::control::script`): a broken session rule or a panic is a
//! finding.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let keyed = data.first().is_some_and(|b| b % 2 == 0);
    let script = fperf::control::script::messages(data, 256);
    if let Err(rule) = fperf::control::script::check_sessions(&script, keyed) {
        panic!("{rule}");
    }
});
