//! Which ordered pairs of hosts a mesh measures, and in which rounds: the tests of a
//! round run at once, and in a round no host is in two tests (but incast's receiver,
//! which takes its senders at once on purpose).

/// The pairs a mesh measures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Every ordered pair.
    AllPairs,
    /// Each host towards the next, the last towards the first.
    Ring,
    /// `K` senders at once into one receiver, every host in turn the receiver.
    Incast(usize),
    /// The host at this index towards every other host, one at a time.
    OneToAll(usize),
}

/// One test: the sending host's index, then the receiving host's.
pub type Pair = (usize, usize);

impl Pattern {
    /// `all-pairs`, `ring`, `incast:K` or `one-to-all:HOST` (`HOST` as one of `hosts`
    /// is written).
    pub fn parse(text: &str, hosts: &[String]) -> Result<Pattern, String> {
        let n = hosts.len();
        match text.split_once(':') {
            None if text == "all-pairs" => Ok(Pattern::AllPairs),
            None if text == "ring" => Ok(Pattern::Ring),
            Some(("incast", k)) => match k.parse::<usize>() {
                Ok(k) if (1..n).contains(&k) => Ok(Pattern::Incast(k)),
                _ => Err(format!(
                    "incast:K needs K senders from 1 to {} (one fewer than the hosts), not {k:?}",
                    n.saturating_sub(1)
                )),
            },
            Some(("one-to-all", host)) => hosts
                .iter()
                .position(|h| h == host)
                .map(Pattern::OneToAll)
                .ok_or_else(|| format!("one-to-all:{host}: {host} is not one of the hosts")),
            _ => Err(format!(
                "--pattern is all-pairs, ring, incast:K or one-to-all:HOST, not {text:?}"
            )),
        }
    }

    /// How many tests the pattern makes among `n` hosts, counted without making them.
    pub fn pair_count(&self, n: usize) -> usize {
        if n < 2 {
            return 0;
        }
        match *self {
            Pattern::AllPairs => n.saturating_mul(n - 1),
            Pattern::Ring => n,
            Pattern::Incast(k) => n.saturating_mul(k),
            Pattern::OneToAll(_) => n - 1,
        }
    }

    /// How many rounds the pattern takes among `n` hosts.
    pub fn round_count(&self, n: usize) -> usize {
        if n < 2 {
            return 0;
        }
        match *self {
            // The circle method's n - 1 matchings (n if odd), each run both ways.
            Pattern::AllPairs => 2 * (n + n % 2 - 1),
            // Alternate edges in two rounds; an odd ring's last edge in a third.
            Pattern::Ring => 2 + n % 2,
            Pattern::Incast(_) => n,
            Pattern::OneToAll(_) => n - 1,
        }
    }

    /// Round `index` (from 0) of the pattern among `n` hosts: made when it is run, so a
    /// mesh never holds more than one round's pairs.
    pub fn round(&self, n: usize, index: usize) -> Vec<Pair> {
        if index >= self.round_count(n) {
            return Vec::new();
        }
        match *self {
            Pattern::AllPairs => {
                let matching = circle_matching(n, index / 2);
                match index % 2 {
                    0 => matching,
                    _ => matching.into_iter().map(|(a, b)| (b, a)).collect(),
                }
            }
            Pattern::Ring => {
                let edge = |i: usize| (i, (i + 1) % n);
                match index {
                    // An odd ring's last edge meets both other rounds' hosts.
                    2 => vec![edge(n - 1)],
                    parity => (0..n)
                        .filter(|i| i % 2 == parity && !(n % 2 == 1 && *i == n - 1))
                        .map(edge)
                        .collect(),
                }
            }
            Pattern::Incast(k) => (1..=k).map(|i| ((index + i) % n, index)).collect(),
            Pattern::OneToAll(from) => {
                let to = if index < from { index } else { index + 1 };
                vec![(from, to)]
            }
        }
    }

    /// The pattern's tests among `n` hosts, round by round.
    #[cfg(test)]
    pub fn rounds(&self, n: usize) -> Vec<Vec<Pair>> {
        (0..self.round_count(n)).map(|i| self.round(n, i)).collect()
    }
}

/// Round `r` of a round-robin tournament of `n` hosts (the circle method): each host
/// meets another in each of about `n` rounds. An odd count gets a stand-in host;
/// whoever meets it sits the round out.
fn circle_matching(n: usize, r: usize) -> Vec<Pair> {
    let m = n + n % 2;
    (0..m / 2)
        .map(|i| {
            let a = if i == 0 { m - 1 } else { (r + i) % (m - 1) };
            let b = (r + m - 1 - i) % (m - 1);
            (a, b)
        })
        .filter(|&(a, b)| a < n && b < n)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn hosts(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("h{i}")).collect()
    }

    /// Each round has no host twice.
    fn assert_disjoint(rounds: &[Vec<Pair>]) {
        for round in rounds {
            let mut seen = BTreeSet::new();
            for &(a, b) in round {
                assert!(seen.insert(a) && seen.insert(b), "{round:?}");
            }
        }
    }

    #[test]
    fn all_pairs_measures_every_ordered_pair_once_in_about_2n_rounds() {
        for n in 2..=17 {
            let rounds = Pattern::AllPairs.rounds(n);
            assert_disjoint(&rounds);
            let pairs: Vec<Pair> = rounds.iter().flatten().copied().collect();
            let unique: BTreeSet<Pair> = pairs.iter().copied().collect();
            assert_eq!(pairs.len(), n * (n - 1), "n = {n}");
            assert_eq!(unique.len(), pairs.len());
            assert!(pairs.iter().all(|&(a, b)| a != b && a < n && b < n));
            assert_eq!(rounds.len(), 2 * (n + n % 2 - 1), "n = {n}");
        }
        assert!(Pattern::AllPairs.rounds(1).is_empty());
    }

    #[test]
    fn a_ring_runs_in_two_or_three_rounds_each_host_sending_to_the_next() {
        for n in 2..=9 {
            let rounds = Pattern::Ring.rounds(n);
            assert_disjoint(&rounds);
            let pairs: BTreeSet<Pair> = rounds.iter().flatten().copied().collect();
            let want: BTreeSet<Pair> = (0..n).map(|i| (i, (i + 1) % n)).collect();
            assert_eq!(pairs, want);
            assert!(rounds.len() <= 3, "{n}: {rounds:?}");
        }
    }

    #[test]
    fn a_round_is_made_alone_however_many_hosts() {
        let n = 10_000;
        assert_eq!(Pattern::AllPairs.round_count(n), 2 * (n - 1));
        let last = Pattern::AllPairs.round(n, 2 * (n - 1) - 1);
        assert_eq!(last.len(), n / 2);
        assert_disjoint(&[last]);
        assert!(Pattern::AllPairs.round(n, 2 * (n - 1)).is_empty());
        assert_eq!(Pattern::Ring.round(n + 1, 2), vec![(n, 0)]);
        assert_eq!(Pattern::OneToAll(3).round(n, 3), vec![(3, 4)]);
    }

    #[test]
    fn the_pair_count_is_the_rounds_pairs() {
        for n in 0..=9 {
            let patterns = [
                Pattern::AllPairs,
                Pattern::Ring,
                Pattern::Incast(1),
                Pattern::OneToAll(0),
            ];
            for p in patterns {
                let made: usize = p.rounds(n).iter().map(Vec::len).sum();
                assert_eq!(p.pair_count(n), made, "{p:?} of {n}");
            }
        }
        assert_eq!(Pattern::AllPairs.pair_count(10_000), 99_990_000);
    }

    #[test]
    fn incast_takes_k_senders_into_each_host_in_turn() {
        let rounds = Pattern::Incast(3).rounds(5);
        assert_eq!(rounds.len(), 5);
        for (to, round) in rounds.iter().enumerate() {
            assert_eq!(round.len(), 3);
            assert!(round.iter().all(|&(a, b)| b == to && a != to));
        }
        let one = Pattern::OneToAll(2).rounds(4);
        assert_eq!(one, vec![vec![(2, 0)], vec![(2, 1)], vec![(2, 3)]]);
    }

    #[test]
    fn patterns_parse_or_say_what_they_take() {
        let h = hosts(4);
        assert_eq!(Pattern::parse("all-pairs", &h), Ok(Pattern::AllPairs));
        assert_eq!(Pattern::parse("ring", &h), Ok(Pattern::Ring));
        assert_eq!(Pattern::parse("incast:3", &h), Ok(Pattern::Incast(3)));
        assert_eq!(
            Pattern::parse("one-to-all:h2", &h),
            Ok(Pattern::OneToAll(2))
        );
        assert!(Pattern::parse("incast:4", &h)
            .unwrap_err()
            .contains("1 to 3"));
        assert!(Pattern::parse("incast:0", &h).is_err());
        assert!(Pattern::parse("one-to-all:h9", &h)
            .unwrap_err()
            .contains("not one of"));
        assert!(Pattern::parse("star", &h)
            .unwrap_err()
            .contains("all-pairs, ring"));
    }
}
