//! `fperf mesh`: measures between many fperf servers, as a coordinator that never
//! carries data. For each pair it asks the sending host's server, over the control
//! protocol, to run the test as a client towards the receiving host's server and to
//! return both ends' figures (a third-party test; such servers run with
//! `--allow-mesh` and a key). The pairs run in rounds ([`pattern`]); the figures become
//! a matrix, its outliers and its outputs ([`report`], [`heatmap`]).
//!
//! With `--under-load` the sending host's server runs the phases of latency under load
//! towards the receiving host's, and the matrix is the delay each loaded phase added.
//! Those pairs run one at a time, never a round at once: a phase loads the links it
//! crosses to the full, and two pairs sharing a link or a switch would add each other's
//! queues to their figures.

pub mod heatmap;
pub mod pattern;
pub mod report;

use crate::auth::AuthKey;
use crate::client::{self, ClientConfig};
use crate::family::IpFamily;
use crate::latency_probe::phases::{PhasePlan, PhaseReport};
use crate::results::SideResult;
use crate::settings::Settings;
use pattern::{Pair, Pattern};
use report::MeshReport;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Beyond its own length, how long a pair's test may take: setting up and the results,
/// at both servers.
const TEST_ALLOWANCE: Duration = Duration::from_secs(30);
/// Beyond its own length, how long one phase of latency under load may take: the pause
/// before it, and its test's setting up and results.
const PHASE_ALLOWANCE: Duration = Duration::from_secs(6);

/// Most hosts one mesh measures between: its matrix then holds at most 1024 x 1024
/// figures (16 MiB).
pub const MOST_HOSTS: usize = 1024;
/// Most tests one mesh runs: each pair's figures at both ends are kept for the report
/// (a few KiB each).
pub const MOST_PAIRS: usize = 16_384;

/// Refuses a mesh of more hosts than one coordinator measures between.
pub fn check_hosts(hosts: usize) -> Result<(), String> {
    if hosts > MOST_HOSTS {
        return Err(format!(
            "a mesh measures at most {MOST_HOSTS} hosts, not {hosts}: split the hosts \
             into several meshes"
        ));
    }
    Ok(())
}

/// Refuses a mesh of more hosts or tests than one coordinator keeps in bounded memory,
/// before anything is made for it.
pub fn check_size(hosts: usize, pattern: &Pattern) -> Result<(), String> {
    check_hosts(hosts)?;
    let pairs = pattern.pair_count(hosts);
    if pairs > MOST_PAIRS {
        return Err(format!(
            "a mesh runs at most {MOST_PAIRS} tests, and this pattern makes {pairs} \
             among {hosts} hosts: use fewer hosts or another --pattern (ring, incast:K, \
             one-to-all:HOST)"
        ));
    }
    Ok(())
}

/// One host of the mesh: its fperf server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeshHost {
    /// As given (`HOST` or `HOST:PORT`), for the report.
    pub name: String,
    pub host: String,
    pub port: u16,
}

impl MeshHost {
    /// `HOST`, `HOST:PORT`, `[IPv6]:PORT` or a bare IPv6 address; `port` when none is
    /// given.
    pub fn parse(text: &str, port: u16) -> Result<MeshHost, String> {
        let (host, given) = client::split_host_port(text)
            .map_err(|_| format!("{text:?} is not HOST, HOST:PORT or [IPv6]:PORT"))?;
        Ok(MeshHost {
            name: text.to_owned(),
            host,
            port: given.unwrap_or(port),
        })
    }

    /// `HOST:PORT` as another server reaches it.
    fn address(&self) -> String {
        client::join_host_port(&self.host, self.port)
    }
}

/// What to measure, between which hosts.
#[derive(Clone, Debug)]
pub struct MeshConfig {
    pub hosts: Vec<MeshHost>,
    pub pattern: Pattern,
    /// Each pair's test; time-bounded (`time_ms`).
    pub settings: Settings,
    /// The key every server holds; the coordinator proves it to each.
    pub auth: Option<AuthKey>,
    /// Longest wait for a server during set-up.
    pub control_timeout: Duration,
    /// The IP family of every connection (`-4`, `-6`); with one, the coordinator
    /// resolves each receiving host's name and hands the sender its address.
    pub family: IpFamily,
    /// Pairs below this share of the median are outliers (latency: above the median
    /// over this share).
    pub outlier_below: f64,
    /// `--under-load`: each pair runs these phases of latency under load instead of
    /// one test, with `settings`' options for the load.
    pub under_load: Option<PhasePlan>,
}

/// What a pair measured.
#[derive(Clone, Debug)]
pub enum PairFigures {
    /// Both ends' figures of its test, the sender's (the client's) first.
    Test {
        client: Box<SideResult>,
        server: Box<SideResult>,
    },
    /// Each phase of latency under load, the sender the client.
    UnderLoad(Vec<PhaseReport>),
}

/// Both ends' figures of one pair's test, or why there are none.
#[derive(Clone, Debug)]
pub struct PairResult {
    pub from: usize,
    pub to: usize,
    pub outcome: Result<PairFigures, String>,
}

/// What a mesh tells its caller while it runs.
pub enum MeshEvent<'a> {
    /// Round `index` (from 1) of `rounds` starts, with `pairs` tests at once; `done` of
    /// `total` pairs are done.
    Round {
        index: usize,
        rounds: usize,
        pairs: usize,
        done: usize,
        total: usize,
    },
    /// A pair's test ended; `done` of `total` pairs have.
    Pair {
        result: &'a PairResult,
        done: usize,
        total: usize,
    },
}

/// Runs the mesh round by round until done or `abort` is set, and reports on it. A pair
/// that fails (a host down, refusing or too slow) is kept with its reason; the rest go
/// on.
pub fn run(
    config: &MeshConfig,
    abort: &AtomicBool,
    on_event: &mut dyn FnMut(MeshEvent),
) -> MeshReport {
    let n = config.hosts.len();
    let total = config.pattern.pair_count(n);
    // Under load, one pair at a time (see the module's doc).
    let one_at_a_time = config.under_load.is_some();
    let rounds = if one_at_a_time {
        total
    } else {
        config.pattern.round_count(n)
    };
    let started = Instant::now();
    let mut results = Vec::with_capacity(total.min(MOST_PAIRS));
    let mut index = 0;
    for made in 0..config.pattern.round_count(n) {
        let round = config.pattern.round(n, made);
        let groups: Vec<&[Pair]> = if one_at_a_time {
            round.chunks(1).collect()
        } else {
            vec![&round[..]]
        };
        for group in groups {
            if abort.load(Ordering::Relaxed) {
                return MeshReport::new(config, rounds, results, started.elapsed());
            }
            index += 1;
            on_event(MeshEvent::Round {
                index,
                rounds,
                pairs: group.len(),
                done: results.len(),
                total,
            });
            for result in run_at_once(config, group) {
                results.push(result);
                if let Some(result) = results.last() {
                    on_event(MeshEvent::Pair {
                        result,
                        done: results.len(),
                        total,
                    });
                }
            }
        }
    }
    MeshReport::new(config, rounds, results, started.elapsed())
}

/// The tests of `pairs`, all at once.
fn run_at_once(config: &MeshConfig, pairs: &[Pair]) -> Vec<PairResult> {
    std::thread::scope(|scope| {
        let tests: Vec<_> = pairs
            .iter()
            .map(|&pair| scope.spawn(move || test_pair(config, pair)))
            .collect();
        tests
            .into_iter()
            .zip(pairs)
            .map(|(test, &(from, to))| {
                test.join().unwrap_or_else(|_| PairResult {
                    from,
                    to,
                    outcome: Err("the test's thread failed".into()),
                })
            })
            .collect()
    })
}

/// How long a pair's phases of latency under load may take: the phases, and for each
/// the pause before it and its test's setting up and results.
fn under_load_length(plan: &PhasePlan) -> Duration {
    let phases = u32::try_from(plan.phases.len()).unwrap_or(u32::MAX);
    plan.total() + PHASE_ALLOWANCE.saturating_mul(phases)
}

/// One pair's third-party test.
fn test_pair(config: &MeshConfig, (from, to): Pair) -> PairResult {
    let (sender, receiver) = (&config.hosts[from], &config.hosts[to]);
    let client = ClientConfig {
        connect_timeout: config.control_timeout,
        control_timeout: config.control_timeout,
        auth: config.auth.clone(),
        family: config.family,
        ..ClientConfig::new(sender.host.clone(), sender.port, config.settings.clone())
    };
    let length = Duration::from_millis(config.settings.time_ms.unwrap_or(0));
    // The sending server resolves a name as it likes; an address keeps it to the family.
    let peer = match config.family {
        IpFamily::Any => Ok(receiver.address()),
        family => client::resolve(&receiver.host, receiver.port, family).map(|a| a.to_string()),
    };
    let outcome = peer
        .and_then(|peer| match &config.under_load {
            Some(plan) => client::mesh_under_load(
                &client,
                &peer,
                plan,
                under_load_length(plan) + TEST_ALLOWANCE,
            )
            .map(PairFigures::UnderLoad),
            None => client::mesh_test(&client, &peer, length + TEST_ALLOWANCE).map(
                |(client, server)| PairFigures::Test {
                    client: Box::new(client),
                    server: Box::new(server),
                },
            ),
        })
        .map_err(|e| crate::peer_text::printable(&format!("{e:#}")));
    PairResult { from, to, outcome }
}
