//! Caps on connections that have not yet said what they are: per source address, so
//! strangers cannot crowd out a client's own connections, and in all, so a flood from
//! many addresses still costs bounded threads and descriptors.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

/// Why a connection was refused a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crowded {
    /// Its address already has `per_source` connections pending.
    Source(usize),
    /// `total` connections are pending.
    Total(usize),
}

impl std::fmt::Display for Crowded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Crowded::Source(n) => write!(
                f,
                "too many connections: {n} from this address are already waiting to say what they are"
            ),
            Crowded::Total(n) => write!(
                f,
                "too many connections: {n} are already waiting to say what they are"
            ),
        }
    }
}

/// The pending connections of one listener, counted per source address.
#[derive(Debug)]
pub struct PendingCaps {
    per_source: usize,
    total: usize,
    /// Pending connections per address, no entry at zero: at most `total` entries.
    counts: Mutex<HashMap<IpAddr, usize>>,
}

/// A pending connection's place; dropping it frees the place.
#[derive(Debug)]
pub struct PendingSlot {
    caps: Arc<PendingCaps>,
    source: IpAddr,
}

impl PendingCaps {
    /// Room for `per_source` pending connections per address, `total` in all.
    pub fn new(per_source: usize, total: usize) -> Arc<PendingCaps> {
        Arc::new(PendingCaps {
            per_source,
            total,
            counts: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<IpAddr, usize>> {
        // The counts stay consistent whatever a panicking holder did: each change is
        // one insert or one decrement.
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a connection from `source`, or why there is none.
    pub fn claim(self: &Arc<Self>, source: IpAddr) -> Result<PendingSlot, Crowded> {
        let source = source.to_canonical();
        let mut by_source = self.lock();
        if by_source.values().sum::<usize>() >= self.total {
            return Err(Crowded::Total(self.total));
        }
        let count = by_source.entry(source).or_insert(0);
        if *count >= self.per_source {
            return Err(Crowded::Source(self.per_source));
        }
        *count += 1;
        Ok(PendingSlot {
            caps: self.clone(),
            source,
        })
    }
}

impl Drop for PendingSlot {
    fn drop(&mut self) {
        let mut by_source = self.caps.lock();
        if let Some(count) = by_source.get_mut(&self.source) {
            *count -= 1;
            if *count == 0 {
                by_source.remove(&self.source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_has_its_own_cap_under_a_total_one() {
        let caps = PendingCaps::new(2, 3);
        let a: IpAddr = [127, 0, 0, 2].into();
        let b: IpAddr = [127, 0, 0, 1].into();
        let a1 = caps.claim(a).expect("a1");
        let _a2 = caps.claim(a).expect("a2");
        assert_eq!(caps.claim(a).err(), Some(Crowded::Source(2)));
        // Another address is not crowded out by the first one's connections.
        let _b1 = caps.claim(b).expect("b1");
        assert_eq!(caps.claim(b).err(), Some(Crowded::Total(3)));
        drop(a1);
        let _b2 = caps.claim(b).expect("a freed place");
        // IPv4-mapped IPv6 is the same address.
        let mapped: IpAddr = std::net::Ipv4Addr::new(127, 0, 0, 2)
            .to_ipv6_mapped()
            .into();
        assert_eq!(caps.claim(mapped).err(), Some(Crowded::Total(3)));
    }

    #[test]
    fn freed_places_leave_nothing_behind() {
        let caps = PendingCaps::new(4, 8);
        let slots: Vec<_> = (0..8u8)
            .map(|i| caps.claim([10, 0, 0, i].into()).expect("claim"))
            .collect();
        drop(slots);
        assert!(caps.lock().is_empty());
    }
}
