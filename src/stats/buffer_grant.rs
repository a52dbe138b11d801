//! What the kernel made of a socket buffer size asked for: the socket option helpers
//! set it, and UDP's datagram figures report it.

use serde::{Deserialize, Serialize};

/// A socket buffer size asked for and the size the kernel granted, in bytes (0 and 0:
/// not set).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize,
)]
#[schemars(rename = "buffer_grant")]
#[schemars(deny_unknown_fields)]
pub struct BufferGrant {
    pub requested: u64,
    pub granted: u64,
}

impl BufferGrant {
    /// Keeps the smaller grant of `self` and `other` (one not set does not count).
    pub(crate) fn merge(&mut self, other: &BufferGrant) {
        if other.requested == 0 {
            return;
        }
        if self.requested == 0 || other.granted < self.granted {
            *self = *other;
        }
    }

    /// Whether the kernel granted less than asked.
    pub fn capped(&self) -> bool {
        self.granted < self.requested
    }
}
