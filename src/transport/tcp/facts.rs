//! TCP's own view of its connections, from the kernel's `TCP_INFO`: what the text
//! report, JSON, OpenMetrics and iperf3 documents show of TCP beyond bytes and
//! latencies.

use crate::transport::facts::{Amount, Entry, Facts, Metric, OnInterval, Shown};
use serde::{Deserialize, Serialize};
use std::io;
use std::os::fd::AsRawFd;

/// `TCP_INFO` of a stream's sockets (or of all streams'): retransmits added up (since
/// the connections opened, after `--omit`, or within an interval), congestion windows
/// and the peers' send windows added up in bytes, round-trip times as means in
/// microseconds, the smallest MSS and path MTU (0: the kernel did not say).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize,
)]
#[schemars(rename = "tcp_info")]
#[schemars(deny_unknown_fields)]
pub struct TcpInfo {
    /// Sockets these figures cover.
    pub sockets: u32,
    /// Segments retransmitted (since the connections opened, or within an interval).
    pub retransmits: u64,
    /// Congestion windows added up, in bytes (segments × MSS).
    pub cwnd_bytes: u64,
    /// Smoothed round-trip time, mean over the sockets, in microseconds.
    pub srtt_us: u32,
    /// Round-trip time variation, mean over the sockets, in microseconds.
    pub rttvar_us: u32,
    /// Send windows the peers advertised, added up, in bytes.
    pub snd_wnd_bytes: u64,
    /// Maximum segment size for sending, the smallest over the sockets, in bytes.
    pub mss: u32,
    /// Path MTU, the smallest over the sockets, in bytes.
    pub pmtu: u32,
}

impl TcpInfo {
    /// Reads `TCP_INFO` of one socket. A kernel older than a field leaves it 0.
    pub(crate) fn read(fd: &impl AsRawFd) -> io::Result<TcpInfo> {
        let info = read_tcp_info(fd)?;
        Ok(TcpInfo {
            sockets: 1,
            retransmits: u64::from(info.tcpi_total_retrans),
            cwnd_bytes: u64::from(info.tcpi_snd_cwnd) * u64::from(info.tcpi_snd_mss),
            srtt_us: info.tcpi_rtt,
            rttvar_us: info.tcpi_rttvar,
            snd_wnd_bytes: u64::from(info.tcpi_snd_wnd),
            mss: info.tcpi_snd_mss,
            pmtu: info.tcpi_pmtu,
        })
    }

    /// Combines the figures of two disjoint sets of sockets.
    pub fn merge(&mut self, other: &TcpInfo) {
        let n = u64::from(self.sockets) + u64::from(other.sockets);
        if n > 0 {
            let mean = |a: u32, b: u32| {
                ((u64::from(a) * u64::from(self.sockets) + u64::from(b) * u64::from(other.sockets))
                    / n) as u32
            };
            self.srtt_us = mean(self.srtt_us, other.srtt_us);
            self.rttvar_us = mean(self.rttvar_us, other.rttvar_us);
        }
        self.sockets += other.sockets;
        self.retransmits += other.retransmits;
        self.cwnd_bytes += other.cwnd_bytes;
        self.snd_wnd_bytes += other.snd_wnd_bytes;
        // 0 is "not known" (a kernel too old to say): the other's figure stands.
        let least = |a: u32, b: u32| match (a, b) {
            (0, x) | (x, 0) => x,
            (a, b) => a.min(b),
        };
        self.mss = least(self.mss, other.mss);
        self.pmtu = least(self.pmtu, other.pmtu);
    }

    /// The figures of an interval: retransmits since `earlier`, the rest as now.
    pub fn since(self, earlier: &TcpInfo) -> TcpInfo {
        TcpInfo {
            retransmits: self.retransmits.saturating_sub(earlier.retransmits),
            ..self
        }
    }
}

impl Facts for TcpInfo {
    fn title(&self) -> &'static str {
        "tcp_info"
    }

    fn entries(&self) -> Vec<Entry> {
        let summary = Shown {
            summary: true,
            interval: None,
        };
        vec![
            Entry {
                key: "retransmits",
                label: "retransmits",
                amount: Amount::Count(self.retransmits),
                shown: Shown {
                    summary: true,
                    interval: Some(OnInterval::Always),
                },
                metric: Some(Metric {
                    name: "fperf_retransmitted_segments",
                    help: "TCP segments the end retransmitted.",
                }),
            },
            Entry {
                key: "cwnd_bytes",
                label: "cwnd",
                amount: Amount::Bytes(self.cwnd_bytes),
                shown: Shown {
                    summary: true,
                    interval: Some(OnInterval::Sending),
                },
                metric: None,
            },
            Entry {
                key: "srtt_us",
                label: "srtt",
                amount: Amount::Micros(u64::from(self.srtt_us)),
                shown: summary,
                metric: None,
            },
            Entry {
                key: "rttvar_us",
                label: "rttvar",
                amount: Amount::Micros(u64::from(self.rttvar_us)),
                shown: summary,
                metric: None,
            },
            Entry {
                key: "mss",
                label: "mss",
                amount: Amount::Bytes(u64::from(self.mss)),
                shown: summary,
                metric: None,
            },
            Entry {
                key: "sockets",
                label: "sockets",
                amount: Amount::Count(u64::from(self.sockets)),
                shown: Shown::default(),
                metric: None,
            },
            Entry {
                key: "snd_wnd_bytes",
                label: "snd_wnd",
                amount: Amount::Bytes(self.snd_wnd_bytes),
                shown: Shown::default(),
                metric: None,
            },
            Entry {
                key: "pmtu",
                label: "pmtu",
                amount: Amount::Bytes(u64::from(self.pmtu)),
                shown: Shown::default(),
                metric: None,
            },
        ]
    }
}

/// `TCP_INFO` of one socket as the kernel gives it; a kernel older than a field
/// leaves it 0.
pub(crate) fn read_tcp_info(fd: &impl AsRawFd) -> io::Result<libc::tcp_info> {
    // SAFETY: tcp_info is plain old data; zeroed is a valid value for it.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the pointer and length describe `info`, exclusively borrowed for the
    // call; the kernel writes at most `len` bytes and updates `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_info_merges_sums_and_means() {
        let mut a = TcpInfo {
            sockets: 1,
            retransmits: 2,
            cwnd_bytes: 100,
            srtt_us: 10,
            rttvar_us: 2,
            snd_wnd_bytes: 1000,
            mss: 1448,
            pmtu: 0,
        };
        a.merge(&TcpInfo {
            sockets: 3,
            retransmits: 1,
            cwnd_bytes: 300,
            srtt_us: 30,
            rttvar_us: 6,
            snd_wnd_bytes: 3000,
            mss: 1400,
            pmtu: 1500,
        });
        assert_eq!(
            a,
            TcpInfo {
                sockets: 4,
                retransmits: 3,
                cwnd_bytes: 400,
                srtt_us: 25,
                rttvar_us: 5,
                snd_wnd_bytes: 4000,
                mss: 1400,
                pmtu: 1500,
            }
        );
        let later = TcpInfo {
            retransmits: 10,
            ..a
        };
        assert_eq!(later.since(&a).retransmits, 7);
    }
}
