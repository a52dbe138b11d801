//! TCP's own view of its connections, from the kernel's `TCP_INFO`: what the text
//! report, JSON, OpenMetrics and iperf3 documents show of TCP beyond bytes and
//! latencies.

use crate::transport::facts::{Amount, Entry, Facts, Metric, OnHeader, OnInterval, Shown};
use serde::{Deserialize, Serialize};
use std::io;
use std::os::fd::AsRawFd;

/// `TCP_INFO` of a stream's sockets (or of all streams'): retransmits added up (since
/// the connections opened, after `--omit`, or within an interval), congestion windows
/// and the peers' send windows added up in bytes, round-trip times as means in
/// microseconds, the smallest MSS and path MTU (0: the kernel did not say); and what
/// says why a flow was slow: the least round-trip time, the pacing and delivery rates,
/// and how long the sockets were busy sending and limited by the receiver's window or
/// their own send buffer (absent where the kernel or the peer did not say).
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
    /// The least round-trip time the kernel measured on the connections, in
    /// microseconds: the least over the sockets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_rtt: Option<u32>,
    /// The rate the kernel paces sending to, in bytes per second, added up over the
    /// sockets; absent where no socket was paced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pacing_rate: Option<u64>,
    /// The kernel's latest estimate of the rate the peer received data, in bytes per
    /// second, added up over the sockets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_rate: Option<u64>,
    /// Time the sockets had data in flight or waiting to be sent, in microseconds,
    /// added up over the sockets (since the connections opened, or within an interval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_time: Option<u64>,
    /// Of `busy_time`, the time sending waited for the receiver's window, in
    /// microseconds, added up over the sockets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rwnd_limited: Option<u64>,
    /// Of `busy_time`, the time sending waited for room in the socket's own send
    /// buffer, in microseconds, added up over the sockets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sndbuf_limited: Option<u64>,
}

/// A flow counts as mostly limited by one cause when it took more than half its busy
/// time.
const MOSTLY: f64 = 0.5;

impl TcpInfo {
    /// Reads `TCP_INFO` of one socket. A kernel older than a field leaves it 0, or
    /// for the figures that say why a flow was slow, absent.
    pub(crate) fn read(fd: &impl AsRawFd) -> io::Result<TcpInfo> {
        let (info, len) = getsockopt_tcp_info(fd)?;
        // Whether the kernel's struct reaches the end of a field.
        let filled = |end: usize| len >= end;
        let end_of = |offset: usize, size: usize| offset + size;
        use std::mem::{offset_of, size_of};
        let min_rtt = end_of(offset_of!(libc::tcp_info, tcpi_min_rtt), size_of::<u32>());
        let delivery = end_of(
            offset_of!(libc::tcp_info, tcpi_delivery_rate),
            size_of::<u64>(),
        );
        let limited = end_of(
            offset_of!(libc::tcp_info, tcpi_sndbuf_limited),
            size_of::<u64>(),
        );
        let pacing = end_of(
            offset_of!(libc::tcp_info, tcpi_pacing_rate),
            size_of::<u64>(),
        );
        Ok(TcpInfo {
            sockets: 1,
            retransmits: u64::from(info.tcpi_total_retrans),
            cwnd_bytes: u64::from(info.tcpi_snd_cwnd) * u64::from(info.tcpi_snd_mss),
            srtt_us: info.tcpi_rtt,
            rttvar_us: info.tcpi_rttvar,
            snd_wnd_bytes: u64::from(info.tcpi_snd_wnd),
            mss: info.tcpi_snd_mss,
            pmtu: info.tcpi_pmtu,
            // All ones: no round trip measured yet, or no pacing.
            min_rtt: Some(info.tcpi_min_rtt).filter(|&r| filled(min_rtt) && r != u32::MAX),
            pacing_rate: Some(info.tcpi_pacing_rate).filter(|&r| filled(pacing) && r != u64::MAX),
            delivery_rate: Some(info.tcpi_delivery_rate).filter(|_| filled(delivery)),
            busy_time: Some(info.tcpi_busy_time).filter(|_| filled(limited)),
            rwnd_limited: Some(info.tcpi_rwnd_limited).filter(|_| filled(limited)),
            sndbuf_limited: Some(info.tcpi_sndbuf_limited).filter(|_| filled(limited)),
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
        self.min_rtt = either(self.min_rtt, other.min_rtt, u32::min);
        let sum = |a: u64, b: u64| a.saturating_add(b);
        self.pacing_rate = either(self.pacing_rate, other.pacing_rate, sum);
        self.delivery_rate = either(self.delivery_rate, other.delivery_rate, sum);
        self.busy_time = either(self.busy_time, other.busy_time, sum);
        self.rwnd_limited = either(self.rwnd_limited, other.rwnd_limited, sum);
        self.sndbuf_limited = either(self.sndbuf_limited, other.sndbuf_limited, sum);
    }

    /// The share of busy time spent limited by the receiver's window and by the send
    /// buffer; `None` where the sockets were never busy or the kernel did not say.
    fn limited_shares(&self) -> Option<(f64, f64)> {
        let busy = self.busy_time.filter(|&b| b > 0)? as f64;
        let share = |t: Option<u64>| t.unwrap_or(0) as f64 / busy;
        Some((share(self.rwnd_limited), share(self.sndbuf_limited)))
    }

    /// The figures of an interval: retransmits and times since `earlier`, the rest as
    /// now.
    pub fn since(self, earlier: &TcpInfo) -> TcpInfo {
        let after = |now: Option<u64>, then: Option<u64>| match (now, then) {
            (Some(now), Some(then)) => Some(now.saturating_sub(then)),
            (now, _) => now,
        };
        TcpInfo {
            retransmits: self.retransmits.saturating_sub(earlier.retransmits),
            busy_time: after(self.busy_time, earlier.busy_time),
            rwnd_limited: after(self.rwnd_limited, earlier.rwnd_limited),
            sndbuf_limited: after(self.sndbuf_limited, earlier.sndbuf_limited),
            ..self
        }
    }
}

/// `a` and `b` combined by `f` where both are known, else the one that is.
fn either<T>(a: Option<T>, b: Option<T>, f: impl Fn(T, T) -> T) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(f(a, b)),
        (a, b) => a.or(b),
    }
}

impl Facts for TcpInfo {
    fn title(&self) -> &'static str {
        "tcp_info"
    }

    fn entries(&self) -> Vec<Entry> {
        let summary = Shown {
            summary: true,
            ..Shown::default()
        };
        let mut entries = vec![
            Entry {
                key: "retransmits",
                label: "retransmits",
                amount: Amount::Count(self.retransmits),
                shown: Shown {
                    summary: true,
                    interval: Some(OnInterval::Always),
                    header: None,
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
                    header: None,
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
        ];
        let known = [
            (
                "pacing_rate",
                self.pacing_rate.map(Amount::BytesPerSecond),
                None,
            ),
            (
                "delivery_rate",
                self.delivery_rate.map(Amount::BytesPerSecond),
                None,
            ),
            (
                "busy_time",
                self.busy_time.map(Amount::Micros),
                Some(Metric {
                    name: "fperf_tcp_busy_seconds",
                    help: "Time the end's TCP sockets had data to send, added up over them.",
                }),
            ),
            (
                "rwnd_limited",
                self.rwnd_limited.map(Amount::Micros),
                Some(Metric {
                    name: "fperf_tcp_receive_window_limited_seconds",
                    help: "Of the end's busy time, the time sending waited for the \
                           receiver's window, added up over its sockets.",
                }),
            ),
            (
                "sndbuf_limited",
                self.sndbuf_limited.map(Amount::Micros),
                Some(Metric {
                    name: "fperf_tcp_send_buffer_limited_seconds",
                    help: "Of the end's busy time, the time sending waited for room in \
                           its own send buffer, added up over its sockets.",
                }),
            ),
        ];
        // Where the kernel says, the least round trip goes on the summary line before
        // the segment size, which ends it.
        if let Some(rtt) = self.min_rtt {
            let mss = entries.iter().position(|e| e.key == "mss").unwrap_or(0);
            entries.insert(
                mss,
                Entry {
                    key: "min_rtt",
                    label: "min_rtt",
                    amount: Amount::Micros(u64::from(rtt)),
                    shown: summary,
                    metric: None,
                },
            );
        }
        for (key, amount, metric) in known {
            if let Some(amount) = amount {
                entries.push(Entry {
                    key,
                    label: key,
                    amount,
                    shown: Shown::default(),
                    metric,
                });
            }
        }
        entries
    }

    fn sentences(&self) -> Vec<String> {
        let Some((window, buffer)) = self.limited_shares() else {
            return Vec::new();
        };
        [
            (window, "the receiver's window"),
            (buffer, "its own send buffer"),
        ]
        .into_iter()
        .filter(|&(share, _)| share > MOSTLY)
        .map(|(share, cause)| {
            format!(
                "mostly limited by {cause} ({:.0}% of busy time)",
                share * 100.0
            )
        })
        .collect()
    }
}

/// What a stream's TCP sockets ended up with, as the kernel reported it of socket 0:
/// each `None` where the kernel did not say or the setting does not apply.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct TcpInForce {
    /// TCP: the congestion control algorithm of this end's sockets, as the kernel
    /// reports it (`TCP_CONGESTION`); `None` for UDP and RDMA.
    pub congestion: Option<String>,
    /// TCP, the server's streams: the receive low-water mark of its sockets, as the
    /// kernel reports it (`SO_RCVLOWAT`: the server's default or `--rcvlowat`, as the
    /// kernel capped it); `None` on the client and for UDP and RDMA.
    pub rcvlowat: Option<u32>,
    /// TCP, the receiving end's streams (the server's; with `--reverse` or `--bidir`'s
    /// second half the client's): how long a read that finds no data naps, in
    /// microseconds, while data flows, before it reads once more and only then sleeps
    /// on the socket; `None` where reads do not nap.
    pub rx_nap_us: Option<u32>,
}

impl TcpInForce {
    /// What a sending stream reports of these: the receive settings are the receiving
    /// end's.
    pub fn sending(&self) -> TcpInForce {
        TcpInForce {
            congestion: self.congestion.clone(),
            rcvlowat: None,
            rx_nap_us: None,
        }
    }
}

impl Facts for TcpInForce {
    fn title(&self) -> &'static str {
        "tcp"
    }

    fn entries(&self) -> Vec<Entry> {
        let mut entries = Vec::new();
        let mut add = |key, label, amount, header| {
            entries.push(Entry {
                key,
                label,
                amount,
                shown: Shown {
                    header,
                    ..Shown::default()
                },
                metric: None,
            })
        };
        if let Some(name) = &self.congestion {
            add(
                "congestion",
                "cc",
                Amount::Text(name.clone()),
                Some(OnHeader::EveryEnd),
            );
        }
        if let Some(mark) = self.rcvlowat {
            // The kernel's default of 1 byte goes unsaid; the server picks a higher one
            // by its cores unless `--rcvlowat` is given.
            let header = (mark > 1).then_some(OnHeader::Server);
            add(
                "rcvlowat",
                "rcvlowat",
                Amount::Bytes(u64::from(mark)),
                header,
            );
        }
        if let Some(nap) = self.rx_nap_us {
            add(
                "rx_nap_us",
                "rx_nap",
                Amount::Micros(u64::from(nap)),
                Some(OnHeader::Server),
            );
        }
        entries
    }
}

/// `TCP_INFO` of one socket as the kernel gives it; a kernel older than a field
/// leaves it 0.
pub(crate) fn read_tcp_info(fd: &impl AsRawFd) -> io::Result<libc::tcp_info> {
    getsockopt_tcp_info(fd).map(|(info, _)| info)
}

/// `TCP_INFO` of one socket and how many bytes of it the kernel filled.
fn getsockopt_tcp_info(fd: &impl AsRawFd) -> io::Result<(libc::tcp_info, usize)> {
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
    Ok((info, len as usize))
}

/// `tcpi_options` bit: both ends agreed to scale windows (`linux/tcp.h`).
const TCPI_OPT_WSCALE: u8 = 4;

/// Whether a connected socket's window scale, fixed in its handshake, is short of a
/// receive window of `bytes` (as the kernel offers one: rounded down to whole segments).
/// If so, returns the largest window the scale lets it advertise: 65535 bytes shifted
/// by the scale it offered, or unshifted if scaling was not agreed.
pub(crate) fn receive_window_short_of(fd: &impl AsRawFd, bytes: u64) -> io::Result<Option<u64>> {
    let info = read_tcp_info(fd)?;
    // Two 4-bit fields, `tcpi_snd_wscale` first: the low bits on a little-endian target.
    let both = info.tcpi_snd_rcv_wscale;
    let rcv_wscale = if cfg!(target_endian = "little") {
        both >> 4
    } else {
        both & 0xf
    };
    let shift = if info.tcpi_options & TCPI_OPT_WSCALE != 0 {
        rcv_wscale
    } else {
        0
    };
    let limit = u64::from(u16::MAX) << shift;
    let offered = bytes - bytes % u64::from(info.tcpi_advmss).max(1);
    Ok((limit < offered).then_some(limit))
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
            min_rtt: Some(8),
            pacing_rate: None,
            delivery_rate: Some(1000),
            busy_time: Some(100),
            rwnd_limited: Some(60),
            sndbuf_limited: Some(0),
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
            min_rtt: Some(5),
            pacing_rate: Some(500),
            delivery_rate: Some(3000),
            busy_time: Some(300),
            rwnd_limited: Some(100),
            sndbuf_limited: Some(10),
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
                min_rtt: Some(5),
                pacing_rate: Some(500),
                delivery_rate: Some(4000),
                busy_time: Some(400),
                rwnd_limited: Some(160),
                sndbuf_limited: Some(10),
            }
        );
        let later = TcpInfo {
            retransmits: 10,
            busy_time: Some(1000),
            rwnd_limited: Some(700),
            ..a
        };
        let interval = later.since(&a);
        assert_eq!(interval.retransmits, 7);
        assert_eq!(interval.busy_time, Some(600));
        assert_eq!(interval.rwnd_limited, Some(540));
        assert_eq!(interval.sndbuf_limited, Some(0));
        assert_eq!(interval.min_rtt, Some(5));
    }

    #[test]
    fn every_figure_listed_is_one_of_the_json_document() {
        let full = TcpInfo {
            sockets: 1,
            min_rtt: Some(1),
            pacing_rate: Some(2),
            delivery_rate: Some(3),
            busy_time: Some(4),
            rwnd_limited: Some(5),
            sndbuf_limited: Some(6),
            ..TcpInfo::default()
        };
        for info in [full, TcpInfo::default()] {
            let doc = serde_json::to_value(info).expect("JSON");
            let keys: Vec<&str> = info.entries().iter().map(|e| e.key).collect();
            let mut listed = keys.clone();
            listed.sort_unstable();
            let mut written: Vec<&str> = doc
                .as_object()
                .expect("object")
                .keys()
                .map(String::as_str)
                .collect();
            written.sort_unstable();
            assert_eq!(listed, written, "{keys:?}");
        }
        let summary: Vec<&str> = full
            .entries()
            .into_iter()
            .filter(|e| e.shown.summary)
            .map(|e| e.label)
            .collect();
        assert_eq!(
            summary,
            ["retransmits", "cwnd", "srtt", "rttvar", "min_rtt", "mss"]
        );
    }

    #[test]
    fn a_flow_limited_most_of_its_busy_time_says_by_what() {
        let busy = |rwnd, sndbuf| TcpInfo {
            busy_time: Some(1000),
            rwnd_limited: Some(rwnd),
            sndbuf_limited: Some(sndbuf),
            ..TcpInfo::default()
        };
        assert_eq!(
            busy(720, 0).sentences(),
            ["mostly limited by the receiver's window (72% of busy time)"]
        );
        assert_eq!(
            busy(0, 640).sentences(),
            ["mostly limited by its own send buffer (64% of busy time)"]
        );
        assert!(busy(500, 400).sentences().is_empty());
        // Never busy, or a peer that does not say: nothing to tell.
        assert!(busy(0, 0).sentences().is_empty());
        assert!(TcpInfo::default().sentences().is_empty());
    }

    #[test]
    fn older_figures_without_the_new_ones_read_and_write_alike() {
        let old = r#"{"sockets":1,"retransmits":5,"cwnd_bytes":65536,"srtt_us":20,"rttvar_us":3,"snd_wnd_bytes":131072,"mss":1448,"pmtu":1500}"#;
        let info: TcpInfo = serde_json::from_str(old).expect("decodes");
        assert_eq!(info.min_rtt, None);
        assert_eq!(serde_json::to_string(&info).expect("encodes"), old);
    }

    #[test]
    fn a_loopback_connection_reads_its_least_round_trip_and_delivery_rate() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut client =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (mut server, _) = listener.accept().expect("accept");
        use std::io::{Read, Write};
        client.write_all(&[7; 100_000]).expect("write");
        let mut got = vec![0; 100_000];
        server.read_exact(&mut got).expect("read");
        let info = TcpInfo::read(&client).expect("TCP_INFO");
        let min_rtt = info.min_rtt.expect("min_rtt");
        assert!(min_rtt > 0 && min_rtt <= info.srtt_us, "{info:?}");
        // Busy time counts in the kernel's ticks: a burst this short may take none.
        assert!(info.busy_time.is_some(), "{info:?}");
        assert!(info.delivery_rate.is_some_and(|r| r > 0), "{info:?}");
    }
}
