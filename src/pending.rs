//! Caps on connections that have not yet said what they are: per source address, so
//! strangers cannot crowd out a client's own connections, and in all, so a flood from
//! many addresses still costs bounded threads and descriptors.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

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
    /// Signalled when a place is freed, for connections waiting for one.
    freed: Condvar,
    /// Connections waiting for a place (see [`PendingCaps::wait_turn`]).
    waiting: AtomicUsize,
    most_waiting: usize,
}

/// A connection's turn to wait for a place; dropping it ends the wait.
#[derive(Debug)]
pub struct WaitTurn {
    caps: Arc<PendingCaps>,
    source: IpAddr,
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
        PendingCaps::letting_wait(per_source, total, 0)
    }

    /// As [`new`](Self::new), and beyond the caps `most_waiting` wanted connections may
    /// wait for a place.
    pub fn letting_wait(per_source: usize, total: usize, most_waiting: usize) -> Arc<PendingCaps> {
        Arc::new(PendingCaps {
            per_source,
            total,
            counts: Mutex::new(HashMap::new()),
            freed: Condvar::new(),
            waiting: AtomicUsize::new(0),
            most_waiting,
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<IpAddr, usize>> {
        // The counts stay consistent whatever a panicking holder did: each change is
        // one insert or one decrement.
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a connection from `source`, or why there is none.
    pub fn claim(self: &Arc<Self>, source: IpAddr) -> Result<PendingSlot, Crowded> {
        let mut by_source = self.lock();
        self.claim_locked(&mut by_source, source)
    }

    /// A turn to wait for a place, for a connection the caller knows is wanted (a
    /// running test's own), or `crowded` when `most_waiting` already wait.
    pub fn wait_turn(
        self: &Arc<Self>,
        source: IpAddr,
        crowded: Crowded,
    ) -> Result<WaitTurn, Crowded> {
        let taken = self
            .waiting
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.most_waiting).then_some(n + 1)
            });
        match taken {
            Ok(_) => Ok(WaitTurn {
                caps: self.clone(),
                source,
            }),
            Err(_) => Err(crowded),
        }
    }

    fn claim_locked(
        self: &Arc<Self>,
        by_source: &mut HashMap<IpAddr, usize>,
        source: IpAddr,
    ) -> Result<PendingSlot, Crowded> {
        let source = source.to_canonical();
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
        drop(by_source);
        self.caps.freed.notify_all();
    }
}

impl WaitTurn {
    /// How often a waiting connection asks `wanted` whether it still is.
    const RECHECK: Duration = Duration::from_millis(50);

    /// Waits until `deadline` for a place, while `wanted` says the connection still is;
    /// `Crowded` if none came.
    pub fn wait(
        self,
        deadline: Instant,
        wanted: impl Fn() -> bool,
    ) -> Result<PendingSlot, Crowded> {
        let caps = &self.caps;
        let mut by_source = caps.lock();
        loop {
            let crowded = match caps.claim_locked(&mut by_source, self.source) {
                Ok(slot) => return Ok(slot),
                Err(crowded) => crowded,
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(crowded);
            }
            by_source = caps
                .freed
                .wait_timeout(by_source, left.min(Self::RECHECK))
                .map(|(guard, _)| guard)
                .unwrap_or_else(|e| e.into_inner().0);
            // `wanted` may take other locks: asked without this one held.
            drop(by_source);
            if !wanted() {
                return Err(crowded);
            }
            by_source = caps.lock();
        }
    }
}

impl Drop for WaitTurn {
    fn drop(&mut self) {
        self.caps.waiting.fetch_sub(1, Ordering::Relaxed);
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

    #[test]
    fn a_wanted_connection_waits_for_a_place_and_the_waiting_are_bounded() {
        let caps = PendingCaps::letting_wait(1, 4, 1);
        let a: IpAddr = [10, 0, 0, 1].into();
        let first = caps.claim(a).expect("first");
        let crowded = caps.claim(a).expect_err("crowded");
        let turn = caps.wait_turn(a, crowded).expect("a turn");
        assert_eq!(
            caps.wait_turn(a, crowded).err(),
            Some(crowded),
            "one may wait"
        );
        let freer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(first);
        });
        let started = Instant::now();
        let slot = turn
            .wait(started + Duration::from_secs(5), || true)
            .expect("the freed place");
        assert!(started.elapsed() < Duration::from_secs(2));
        freer.join().expect("freer");
        // No longer wanted, or past its deadline: no place.
        let crowded = caps.claim(a).expect_err("crowded again");
        let turn = caps.wait_turn(a, crowded).expect("the turn was given back");
        let started = Instant::now();
        assert!(turn
            .wait(started + Duration::from_secs(5), || false)
            .is_err());
        assert!(started.elapsed() < Duration::from_secs(1));
        let turn = caps.wait_turn(a, crowded).expect("a turn");
        assert!(turn
            .wait(Instant::now() + Duration::from_millis(60), || true)
            .is_err());
        drop(slot);
    }
}
