//! A mesh coordinator's request to a server: the control frame that carries it, the
//! peer it names, and its settings as the server checks them before it would run the
//! test. A panic is a finding.
#![no_main]

use fperf::control::{self, session::mesh_peer, Message};
use fperf::limits::Limits;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Message::MeshTest { peer, settings }) = control::decode(data) {
        let _ = mesh_peer(&peer);
        if settings.validate().is_ok() {
            let _ = Limits::default().check(&settings);
        }
    }
    // The peer's text on its own, whatever bytes it is made of.
    let _ = mesh_peer(&String::from_utf8_lossy(data));
});
