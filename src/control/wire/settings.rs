//! The settings of a run as they travel in `Settings` and `MeshTest`.

use super::WireError;
use crate::percentiles::{BoundedList, Percentiles};
use crate::settings::{self as domain, SchedPolicy};
use crate::stream::sender::QueueKind;
use crate::transport::settings::TransportSettings;
use crate::workload::{Reply, Workload};
use serde::{Deserialize, Serialize};

/// Everything both ends must agree on for one run (see [`domain::Settings`]). The
/// transport's own options travel as the transport writes them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub nstreams: u32,
    pub nsockets: u32,
    pub mb: u64,
    pub pktsize: u32,
    #[serde(flatten)]
    pub workload: WorkloadFlags,
    pub queue: Queue,
    #[serde(default)]
    pub time_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transactions: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_size: Option<u32>,
    #[serde(default)]
    pub interval_ms: Option<u64>,
    #[serde(default)]
    pub omit_ms: Option<u64>,
    #[serde(default)]
    pub rate_bps: Option<u64>,
    #[serde(default)]
    pub client_cpus: Vec<u32>,
    #[serde(default)]
    pub server_cpus: Vec<u32>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub flows: bool,
    #[serde(default, skip_serializing_if = "Sched::is_auto")]
    pub sched: Sched,
    /// At most [`crate::percentiles::MAX_PERCENTILES`]: a longer list is refused while
    /// decoding. Absent: the percentiles every run reported before the field existed.
    #[serde(default = "default_percentiles")]
    pub percentiles: BoundedList<f64>,
    #[serde(flatten)]
    pub transport: TransportSettings,
}

fn default_percentiles() -> BoundedList<f64> {
    Percentiles::default().into()
}

/// A workload as one flag per workload, as the command line has them (`mprtt` is set
/// by every request/response workload); only some combinations name one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadFlags {
    pub mprtt: bool,
    #[serde(default)]
    pub echo: bool,
    #[serde(default)]
    pub crr: bool,
    #[serde(default)]
    pub reverse: bool,
    #[serde(default)]
    pub bidir: bool,
}

/// The queue that feeds each stream's sender threads (`-q`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Queue {
    Mutex,
    LockFree,
}

/// The scheduling policy of both ends' data threads (`--sched`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sched {
    #[default]
    Auto,
    Normal,
    Batch,
}

impl Sched {
    fn is_auto(&self) -> bool {
        *self == Sched::Auto
    }
}

impl From<domain::Settings> for Settings {
    fn from(s: domain::Settings) -> Settings {
        Settings {
            nstreams: s.nstreams,
            nsockets: s.nsockets,
            mb: s.mb,
            pktsize: s.pktsize,
            workload: s.workload.into(),
            queue: s.queue.into(),
            time_ms: s.time_ms,
            transactions: s.transactions,
            response_size: s.response_size,
            interval_ms: s.interval_ms,
            omit_ms: s.omit_ms,
            rate_bps: s.rate_bps,
            client_cpus: s.client_cpus,
            server_cpus: s.server_cpus,
            flows: s.flows,
            sched: s.sched.into(),
            percentiles: s.percentiles.into(),
            transport: s.transport,
        }
    }
}

impl TryFrom<Settings> for domain::Settings {
    type Error = WireError;

    fn try_from(s: Settings) -> Result<domain::Settings, WireError> {
        Ok(domain::Settings {
            nstreams: s.nstreams,
            nsockets: s.nsockets,
            mb: s.mb,
            pktsize: s.pktsize,
            workload: s.workload.try_into()?,
            queue: s.queue.into(),
            time_ms: s.time_ms,
            transactions: s.transactions,
            response_size: s.response_size,
            interval_ms: s.interval_ms,
            omit_ms: s.omit_ms,
            rate_bps: s.rate_bps,
            client_cpus: s.client_cpus,
            server_cpus: s.server_cpus,
            flows: s.flows,
            sched: s.sched.into(),
            // Checked with the rest of the settings, by `Settings::validate`.
            percentiles: s.percentiles.into(),
            transport: s.transport,
        })
    }
}

impl From<Workload> for WorkloadFlags {
    fn from(workload: Workload) -> WorkloadFlags {
        WorkloadFlags {
            mprtt: workload.mprtt(),
            echo: workload.echo(),
            crr: workload == Workload::Crr,
            reverse: workload == Workload::Reverse,
            bidir: workload == Workload::Bidir,
        }
    }
}

impl TryFrom<WorkloadFlags> for Workload {
    type Error = WireError;

    fn try_from(f: WorkloadFlags) -> Result<Workload, WireError> {
        match (f.mprtt, f.echo, f.crr, f.reverse, f.bidir) {
            (false, false, false, false, false) => Ok(Workload::Bulk),
            (true, false, false, false, false) => Ok(Workload::RoundTrip(Reply::Ack)),
            (true, true, false, false, false) => Ok(Workload::RoundTrip(Reply::Echo)),
            (true, false, true, false, false) => Ok(Workload::Crr),
            (false, false, false, true, false) => Ok(Workload::Reverse),
            (false, false, false, false, true) => Ok(Workload::Bidir),
            _ => Err(WireError::Workload {
                mprtt: f.mprtt,
                echo: f.echo,
                crr: f.crr,
                reverse: f.reverse,
                bidir: f.bidir,
            }),
        }
    }
}

impl From<QueueKind> for Queue {
    fn from(queue: QueueKind) -> Queue {
        match queue {
            QueueKind::Mutex => Queue::Mutex,
            QueueKind::LockFree => Queue::LockFree,
        }
    }
}

impl From<Queue> for QueueKind {
    fn from(queue: Queue) -> QueueKind {
        match queue {
            Queue::Mutex => QueueKind::Mutex,
            Queue::LockFree => QueueKind::LockFree,
        }
    }
}

impl From<SchedPolicy> for Sched {
    fn from(sched: SchedPolicy) -> Sched {
        match sched {
            SchedPolicy::Auto => Sched::Auto,
            SchedPolicy::Normal => Sched::Normal,
            SchedPolicy::Batch => Sched::Batch,
        }
    }
}

impl From<Sched> for SchedPolicy {
    fn from(sched: Sched) -> SchedPolicy {
        match sched {
            Sched::Auto => SchedPolicy::Auto,
            Sched::Normal => SchedPolicy::Normal,
            Sched::Batch => SchedPolicy::Batch,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{self, Message};
    use crate::transport::sockets::SocketSettings;
    use crate::transport::tcp::settings::TcpSettings;
    use crate::transport::tcp::zerocopy::ZeroCopy;
    use crate::transport::udp::settings::UdpSettings;

    fn encode(s: &domain::Settings) -> serde_json::Value {
        serde_json::to_value(Settings::from(s.clone())).expect("encodes")
    }

    fn decode(json: serde_json::Value) -> Result<domain::Settings, String> {
        let wire: Settings = serde_json::from_value(json).map_err(|e| e.to_string())?;
        domain::Settings::try_from(wire).map_err(|e| e.to_string())
    }

    /// Every field away from its default, the transport's options included.
    fn rich() -> domain::Settings {
        domain::Settings {
            nstreams: 3,
            nsockets: 5,
            mb: 7,
            pktsize: 1000,
            workload: Workload::RoundTrip(Reply::Echo),
            queue: QueueKind::LockFree,
            time_ms: Some(1500),
            transactions: Some(9),
            response_size: Some(1000),
            interval_ms: Some(250),
            omit_ms: Some(20),
            rate_bps: Some(123_456),
            client_cpus: vec![0, 2],
            server_cpus: vec![1],
            flows: true,
            sched: SchedPolicy::Batch,
            percentiles: "1,99.999".parse().expect("a valid list"),
            // Travels as TCP writes it: a few options show that it does.
            transport: TransportSettings::Tcp(TcpSettings {
                nodelay: true,
                zerocopy: ZeroCopy::Msg,
                congestion: Some("bbr".into()),
                sockets: SocketSettings {
                    window: Some(1 << 16),
                    ..SocketSettings::default()
                },
                ..TcpSettings::default()
            }),
        }
    }

    #[test]
    fn settings_keep_every_field_through_the_wire() {
        for settings in [rich(), domain::Settings::default()] {
            let back = domain::Settings::try_from(Settings::from(settings.clone()));
            assert_eq!(back.as_ref(), Ok(&settings));
            assert_eq!(decode(encode(&settings)), Ok(settings.clone()));
            for msg in [
                Message::Settings {
                    settings: settings.clone(),
                },
                Message::MeshTest {
                    peer: "[::1]:28444".into(),
                    settings,
                },
            ] {
                let frame = control::encode(&msg).expect("encodes");
                let body = &frame[control::HEADER_LEN..];
                assert_eq!(control::decode(body).expect("decodes"), msg);
            }
        }
        for sched in [SchedPolicy::Auto, SchedPolicy::Normal, SchedPolicy::Batch] {
            assert_eq!(SchedPolicy::from(Sched::from(sched)), sched);
        }
        for queue in [QueueKind::Mutex, QueueKind::LockFree] {
            assert_eq!(QueueKind::from(Queue::from(queue)), queue);
        }
    }

    #[test]
    fn every_workload_travels_as_its_flags_and_back() {
        for workload in Workload::EVERY {
            let flags = WorkloadFlags::from(workload);
            assert_eq!(Workload::try_from(flags), Ok(workload), "{flags:?}");
        }
        let crr = encode(&domain::Settings {
            workload: Workload::Crr,
            ..domain::Settings::default()
        });
        for (flag, set) in [
            ("mprtt", true),
            ("echo", false),
            ("crr", true),
            ("reverse", false),
            ("bidir", false),
        ] {
            assert_eq!(crr[flag], set, "{crr}");
        }
    }

    #[test]
    fn flags_that_name_no_single_workload_are_refused() {
        let base = encode(&domain::Settings::default());
        for hostile in [
            serde_json::json!({"mprtt": false, "echo": true}),
            serde_json::json!({"mprtt": false, "crr": true}),
            serde_json::json!({"mprtt": true, "reverse": true}),
            serde_json::json!({"mprtt": false, "reverse": true, "bidir": true}),
            serde_json::json!({"mprtt": true, "echo": true, "crr": true}),
        ] {
            let mut json = base.clone();
            for flag in ["mprtt", "echo", "crr", "reverse", "bidir"] {
                json[flag] = hostile.get(flag).cloned().unwrap_or(false.into());
            }
            let decoded = decode(json);
            assert!(
                decoded
                    .as_ref()
                    .is_err_and(|e| e.contains("no single workload")),
                "{hostile} decoded as {decoded:?}"
            );
        }
    }

    #[test]
    fn a_transport_carries_only_its_own_options_over_the_wire() {
        let udp = domain::Settings {
            pktsize: 1472,
            transport: TransportSettings::Udp(UdpSettings::default()),
            ..domain::Settings::default()
        };
        let gso = domain::Settings {
            transport: TransportSettings::Udp(UdpSettings {
                gso: true,
                ..UdpSettings::default()
            }),
            ..udp.clone()
        };
        let json = encode(&gso);
        assert_eq!(json["protocol"], "udp");
        assert_eq!(json["gso"], true);
        assert!(json.get("nodelay").is_none(), "{json}");
        assert_eq!(decode(json), Ok(gso));
        // A TCP option sent with UDP settings is not a UDP option: it is dropped, never
        // applied.
        let mut hostile = encode(&udp);
        hostile["nodelay"] = true.into();
        assert_eq!(decode(hostile), Ok(udp));
    }

    #[test]
    fn settings_without_percentiles_report_the_usual_ones() {
        let mut json = encode(&domain::Settings::default());
        json.as_object_mut()
            .expect("an object")
            .remove("percentiles");
        let decoded = decode(json).expect("decodes");
        assert_eq!(decoded.percentiles, Percentiles::default());
    }
}
