//! Fuzzes the control decoder and everything the server does with a decoded frame
//! before a test starts: frame reading (length prefix, truncation, JSON), version
//! checks, settings validation and the server's limits.
#![no_main]

use fperf::control::{self, Message};
use fperf::limits::Limits;
use libfuzzer_sys::fuzz_target;

fn act_on(msg: &Message) {
    match msg {
        Message::Hello { version, .. } | Message::DataHello { version, .. } => {
            let _ = control::check_version(*version);
        }
        Message::Settings { settings } => {
            if settings.validate().is_ok() {
                let _ = Limits::default().check(settings);
                // Validated settings must be safe to act on.
                let _ = settings.bytes_per_stream();
                let _ = settings.mode_label();
            }
        }
        Message::AuthChallenge { nonce } => {
            let _ = fperf::auth::from_hex::<32>(nonce);
        }
        Message::AuthResponse { nonce, mac } => {
            let _ = fperf::auth::from_hex::<32>(nonce);
            let _ = fperf::auth::from_hex::<32>(mac);
        }
        _ => {}
    }
    // Whatever decodes must encode again.
    let _ = control::encode(msg);
}

fuzz_target!(|data: &[u8]| {
    // As a stream of frames on a socket.
    let mut r = data;
    while let Ok(msg) = control::read_frame(&mut r) {
        act_on(&msg);
    }
    // As one frame body.
    if let Ok(msg) = control::decode(data) {
        act_on(&msg);
    }
});
