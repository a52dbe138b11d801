//! Bulk data from the client to the server: the original design's default run.

use super::Behaviour;

/// The bulk workload.
pub struct Bulk;

impl Behaviour for Bulk {
    fn flag(&self) -> &'static str {
        ""
    }
}
