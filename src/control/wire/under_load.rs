//! A mesh's run of latency under load as it travels in `MeshUnderLoad` and
//! `MeshUnderLoadResult`: the phases asked for, and each phase's figures.
//!
//! A peer's list of phases holds at most one of each kind: a longer one is refused while
//! decoding, before more is kept of it. A phase of a name this build does not know is
//! refused by the conversion ([`WireError::Phase`]). Whether a plan can be run, and
//! whether figures can be true of the plan they answer, are the session's checks
//! ([`crate::latency_probe::phases`]).

use super::WireError;
use crate::latency_probe::phases::{self as domain, PhaseKind, MOST_PHASES};
use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// The phases a coordinator asks for (see [`domain::PhasePlan`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhasePlan {
    pub phases: Phases<PlannedPhase>,
    pub flows: u32,
    pub probe_interval_ns: u64,
}

/// One phase asked for: its name (`idle`, `download`, `upload`, `bidir`) and length.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlannedPhase {
    pub name: String,
    pub length_ns: u64,
}

/// What one phase measured (see [`domain::PhaseReport`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseFigures {
    pub name: String,
    #[serde(default)]
    pub rtt: Option<RttFigures>,
    pub probes_sent: u64,
    pub probes_lost: u64,
    #[serde(default)]
    pub added_delay_ns: Option<i64>,
    pub up_bits_per_second: f64,
    pub down_bits_per_second: f64,
    #[serde(default)]
    pub rpm: Option<f64>,
}

/// A phase's round trips, in ns.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RttFigures {
    pub min_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

/// A list of at most [`MOST_PHASES`] phases; a longer one does not decode.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Phases<T>(pub Vec<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Phases<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Bounded<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Bounded<T> {
            type Value = Phases<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a list of at most {MOST_PHASES} phases")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Phases<T>, A::Error> {
                let mut phases = Vec::with_capacity(MOST_PHASES);
                while let Some(phase) = seq.next_element()? {
                    if phases.len() == MOST_PHASES {
                        return Err(serde::de::Error::invalid_length(MOST_PHASES + 1, &self));
                    }
                    phases.push(phase);
                }
                Ok(Phases(phases))
            }
        }
        deserializer.deserialize_seq(Bounded(std::marker::PhantomData))
    }
}

fn kind(name: &str) -> Result<PhaseKind, WireError> {
    PhaseKind::from_name(name).ok_or_else(|| WireError::Phase(name.to_owned()))
}

fn nanos(length: Duration) -> u64 {
    u64::try_from(length.as_nanos()).unwrap_or(u64::MAX)
}

impl From<&domain::PhasePlan> for PhasePlan {
    fn from(plan: &domain::PhasePlan) -> PhasePlan {
        let domain::PhasePlan {
            phases,
            flows,
            probe_interval,
        } = plan;
        PhasePlan {
            phases: Phases(
                phases
                    .iter()
                    .map(|&(kind, length)| PlannedPhase {
                        name: kind.name().to_owned(),
                        length_ns: nanos(length),
                    })
                    .collect(),
            ),
            flows: *flows,
            probe_interval_ns: nanos(*probe_interval),
        }
    }
}

impl TryFrom<PhasePlan> for domain::PhasePlan {
    type Error = WireError;

    fn try_from(plan: PhasePlan) -> Result<domain::PhasePlan, WireError> {
        let PhasePlan {
            phases,
            flows,
            probe_interval_ns,
        } = plan;
        Ok(domain::PhasePlan {
            phases: phases
                .0
                .into_iter()
                .map(|p| Ok((kind(&p.name)?, Duration::from_nanos(p.length_ns))))
                .collect::<Result<_, WireError>>()?,
            flows,
            probe_interval: Duration::from_nanos(probe_interval_ns),
        })
    }
}

// The same five figures each way; a field added to either type does not compile until
// its counterpart has it.
impl From<domain::RttFigures> for RttFigures {
    fn from(r: domain::RttFigures) -> RttFigures {
        let domain::RttFigures {
            min_ns,
            p50_ns,
            p90_ns,
            p99_ns,
            max_ns,
        } = r;
        RttFigures {
            min_ns,
            p50_ns,
            p90_ns,
            p99_ns,
            max_ns,
        }
    }
}

impl From<RttFigures> for domain::RttFigures {
    fn from(r: RttFigures) -> domain::RttFigures {
        let RttFigures {
            min_ns,
            p50_ns,
            p90_ns,
            p99_ns,
            max_ns,
        } = r;
        domain::RttFigures {
            min_ns,
            p50_ns,
            p90_ns,
            p99_ns,
            max_ns,
        }
    }
}

impl From<&domain::PhaseReport> for PhaseFigures {
    fn from(p: &domain::PhaseReport) -> PhaseFigures {
        let domain::PhaseReport {
            kind,
            rtt,
            probes_sent,
            probes_lost,
            added_delay_ns,
            up_bps,
            down_bps,
            rpm,
        } = p;
        PhaseFigures {
            name: kind.name().to_owned(),
            rtt: rtt.map(RttFigures::from),
            probes_sent: *probes_sent,
            probes_lost: *probes_lost,
            added_delay_ns: *added_delay_ns,
            up_bits_per_second: *up_bps,
            down_bits_per_second: *down_bps,
            rpm: *rpm,
        }
    }
}

impl TryFrom<PhaseFigures> for domain::PhaseReport {
    type Error = WireError;

    fn try_from(p: PhaseFigures) -> Result<domain::PhaseReport, WireError> {
        let PhaseFigures {
            name,
            rtt,
            probes_sent,
            probes_lost,
            added_delay_ns,
            up_bits_per_second,
            down_bits_per_second,
            rpm,
        } = p;
        Ok(domain::PhaseReport {
            kind: kind(&name)?,
            rtt: rtt.map(domain::RttFigures::from),
            probes_sent,
            probes_lost,
            added_delay_ns,
            up_bps: up_bits_per_second,
            down_bps: down_bits_per_second,
            rpm,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::control::{self, Message};
    use crate::latency_probe::phases::{PhaseKind, PhasePlan, PhaseReport, RttFigures};
    use crate::settings::Settings;
    use serde_json::{json, Value};
    use std::time::Duration;

    fn plan() -> PhasePlan {
        PhasePlan {
            phases: vec![
                (PhaseKind::Idle, Duration::from_millis(1500)),
                (PhaseKind::Bidir, Duration::from_secs(2)),
            ],
            flows: 3,
            probe_interval: Duration::from_millis(7),
        }
    }

    fn report(kind: PhaseKind) -> PhaseReport {
        PhaseReport {
            kind,
            rtt: Some(RttFigures {
                min_ns: 1,
                p50_ns: 2,
                p90_ns: 3,
                p99_ns: 4,
                max_ns: 5,
            }),
            probes_sent: 10,
            probes_lost: 1,
            added_delay_ns: Some(-3),
            up_bps: 1.5e9,
            down_bps: 2.5e9,
            rpm: None,
        }
    }

    fn body(msg: &Message) -> Value {
        let frame = control::encode(msg).expect("encodes");
        serde_json::from_slice(&frame[control::HEADER_LEN..]).expect("json")
    }

    fn decoded(body: &Value) -> Result<Message, control::ControlError> {
        control::decode(&serde_json::to_vec(body).expect("bytes"))
    }

    #[test]
    fn the_plan_and_the_figures_keep_every_field_through_the_wire() {
        let ask = Message::MeshUnderLoad {
            peer: "b:5201".into(),
            settings: Settings::default(),
            plan: plan(),
        };
        let answer = Message::MeshUnderLoadResult {
            phases: vec![
                PhaseReport {
                    rtt: None,
                    probes_lost: 10,
                    added_delay_ns: None,
                    ..report(PhaseKind::Idle)
                },
                PhaseReport {
                    rpm: Some(12_000.5),
                    ..report(PhaseKind::Bidir)
                },
            ],
        };
        for msg in [ask, answer] {
            assert_eq!(decoded(&body(&msg)).expect("decodes"), msg);
        }
        let sent = body(&Message::MeshUnderLoadResult {
            phases: vec![report(PhaseKind::Upload)],
        });
        assert_eq!(sent["type"], "mesh_under_load_result");
        assert_eq!(sent["phases"][0]["name"], "upload");
        assert_eq!(sent["phases"][0]["rtt"]["p99_ns"], 4);
        assert_eq!(sent["phases"][0]["up_bits_per_second"], 1.5e9);
        let asked = body(&Message::MeshUnderLoad {
            peer: "b:5201".into(),
            settings: Settings::default(),
            plan: plan(),
        });
        assert_eq!(
            asked["plan"]["phases"][0],
            json!({"name": "idle", "length_ns": 1_500_000_000u64})
        );
        assert_eq!(asked["plan"]["probe_interval_ns"], 7_000_000);
    }

    #[test]
    fn a_peer_cannot_send_more_phases_than_there_are_kinds_or_one_unknown() {
        let most = Message::MeshUnderLoadResult {
            phases: PhaseKind::ALL.iter().map(|&k| report(k)).collect(),
        };
        let mut long = body(&most);
        assert!(decoded(&long).is_ok());
        let mut phases = long["phases"].as_array().cloned().unwrap_or_default();
        phases.push(phases[0].clone());
        long["phases"] = Value::from(phases);
        assert!(decoded(&long).is_err(), "five phases");

        let mut odd = body(&most);
        odd["phases"][1]["name"] = "sideways\u{1b}[2J".into();
        let e = decoded(&odd).expect_err("an unknown phase");
        assert!(e.to_string().contains("sideways"), "{e}");
        assert!(!e.to_string().contains('\u{1b}'), "{e}");

        let mut plan = body(&Message::MeshUnderLoad {
            peer: "b:5201".into(),
            settings: Settings::default(),
            plan: plan(),
        });
        plan["plan"]["phases"] = Value::from(vec![json!({"name": "idle", "length_ns": 1}); 1000]);
        assert!(decoded(&plan).is_err(), "a long plan");
        let mut nan = body(&most);
        nan["phases"][0]["up_bits_per_second"] = Value::Null;
        assert!(decoded(&nan).is_err(), "not a number");
    }
}
