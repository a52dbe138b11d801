//! fperf as an iperf3 client: `fperf -c HOST --iperf3` runs a TCP test against an
//! unmodified `iperf3 -s`, over fperf's own STREAMs and data loops, and reports fperf's
//! figures for its side beside the iperf3 server's from the results exchange.
//!
//! The test goes as iperf3's protocol has it: the cookie, the parameters, one
//! connection per stream (each opening with the cookie), the server's start, the
//! client's `TEST_END` once its time or bytes are done, the results exchange (the
//! client's figures first), done. An iperf3 server stops counting at `TEST_END`, so
//! the client ends a test whose data comes from the server (`--reverse`, `--bidir`)
//! once its own time is up or its bytes have arrived.

use crate::client::{
    client_result, connect_control, resolve, start_streams, stream_infos, ClientConfig,
    ClientOutcome, Moved, RunObserver, StreamThread,
};
use crate::interval::{Collector, Schedule};
use crate::iperf3::results::{self, StreamFigures};
use crate::iperf3::udp;
use crate::iperf3::wire::{self, Cookie, State};
use crate::limits::TestWatch;
use crate::settings::{Settings, MB};
use crate::stats::datagrams::DatagramCounts;
use crate::sysinfo::CpuUsage;
use crate::transport::nth_client_port;
use crate::transport::settings::{Protocol, TransportSettings};
use crate::transport::stream::Stream;
use crate::transport::tcp::connect;
use crate::transport::LocalEnd;
use crate::transport::Role;
use crate::workload::Workload;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::io::{self, Write};
use std::net::TcpStream;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// iperf3's own port, the default with `--iperf3`.
pub const DEFAULT_PORT: u16 = 5201;
/// How often the client looks at the control connection and its streams while the
/// test runs.
const TICK: Duration = Duration::from_millis(20);
/// How long a UDP stream's receiver goes on once the server said it stopped sending:
/// the datagrams still on their way arrive.
const UDP_DRAIN: Duration = Duration::from_millis(250);

/// Why a run cannot go to an iperf3 server, if it cannot: checked before connecting.
pub fn check(settings: &Settings) -> Result<(), String> {
    let workload = match settings.workload {
        Workload::Bulk | Workload::Reverse | Workload::Bidir => None,
        Workload::RoundTrip(_) => Some("-r and --echo"),
        Workload::Crr => Some("--crr"),
    };
    if let Some(flags) = workload {
        return Err(format!("{flags}: an iperf3 server runs bulk tests only"));
    }
    match &settings.transport {
        TransportSettings::Tcp(_) => {}
        TransportSettings::Udp(udp) => {
            if udp.gso || udp.gro || udp.batch.is_some() {
                return Err(
                    "--gso, --gro and --udp-batch: iperf3's UDP goes one datagram per call".into(),
                );
            }
        }
        TransportSettings::Rdma(_) => return Err("-R: iperf3 servers have no RDMA".into()),
    }
    if settings.nsockets > 1 {
        return Err("-n above 1: an iperf3 stream is one connection".into());
    }
    if !settings.server_cpus.is_empty() {
        return Err("--server-cpu: an iperf3 server cannot be asked to pin its threads".into());
    }
    if let TransportSettings::Tcp(tcp) = &settings.transport {
        // Options of the receiving end: with the server receiving, nobody would apply them.
        let receivers = [
            (tcp.rcvlowat.is_some(), "--rcvlowat"),
            (tcp.skip_rx_copy, "--skip-rx-copy"),
        ];
        if let Some((_, flag)) = receivers.iter().find(|(given, _)| *given) {
            if settings.workload != Workload::Reverse {
                return Err(format!(
                    "{flag} applies to the receiving end, and the iperf3 server cannot apply \
                     it: use it with --reverse, where fperf receives"
                ));
            }
        }
    }
    let per_direction = match settings.workload {
        Workload::Bidir => settings.nstreams / 2,
        _ => settings.nstreams,
    };
    if per_direction > 128 {
        return Err(format!(
            "-t {per_direction}: an iperf3 server takes at most 128 streams each way"
        ));
    }
    Ok(())
}

/// The parameter message for `settings`, as iperf3's client writes it.
fn params(settings: &Settings) -> Value {
    let per_direction = match settings.workload {
        Workload::Bidir => settings.nstreams / 2,
        _ => settings.nstreams,
    };
    let omit_ms = settings.omit_ms.unwrap_or(0);
    let secs = |ms: u64| ms.div_ceil(1000);
    let (time, num) = match settings.time_ms {
        Some(ms) => (secs(ms.saturating_sub(omit_ms)).max(1), 0),
        None => (0, settings.mb * MB * u64::from(per_direction)),
    };
    let mut p = json!({
        "omit": secs(omit_ms),
        "time": time,
        "num": num,
        "blockcount": 0,
        "parallel": per_direction,
        "len": settings.pktsize,
        "client_version": concat!("fperf ", env!("CARGO_PKG_VERSION")),
    });
    match settings.protocol() {
        Protocol::Udp => {
            p["udp"] = json!(true);
            p["udp_counters_64bit"] = json!(1);
            if settings.dont_fragment() {
                p["dont_fragment"] = json!(1);
            }
        }
        _ => p["tcp"] = json!(true),
    }
    match settings.workload {
        Workload::Reverse => p["reverse"] = json!(true),
        Workload::Bidir => p["bidirectional"] = json!(true),
        _ => {}
    }
    if let Some(rate) = settings.rate_bps {
        p["bandwidth"] = json!(rate);
    }
    if let Some(window) = settings.transport.sockets().and_then(|s| s.window) {
        p["window"] = json!(window);
    }
    if let Some(tos) = settings.transport.sockets().and_then(|s| s.tos) {
        p["TOS"] = json!(tos);
    }
    if let TransportSettings::Tcp(tcp) = &settings.transport {
        if let Some(cc) = &tcp.congestion {
            p["congestion"] = json!(cc);
        }
        if tcp.nodelay {
            p["nodelay"] = json!(true);
        }
        if let Some(mss) = tcp.mss {
            p["MSS"] = json!(mss);
        }
        if let Some(rate) = tcp.fq_rate {
            p["fqrate"] = json!(rate);
        }
        if let Some(label) = tcp.flowlabel {
            p["flowlabel"] = json!(label);
        }
    }
    p
}

/// Reads the next state byte, failing with what the server said if it is an error.
fn read_state(sock: &mut TcpStream, deadline: Instant) -> Result<State> {
    let mut byte = [0u8; 1];
    wire::read_exact_by(sock, &mut byte, deadline).map_err(|e| match e.kind() {
        io::ErrorKind::TimedOut => anyhow!("the iperf3 server did not answer in time"),
        io::ErrorKind::UnexpectedEof => anyhow!("the iperf3 server closed the connection"),
        _ => anyhow!("the iperf3 server's connection failed: {e}"),
    })?;
    match State::from_byte(byte[0]) {
        Some(State::AccessDenied) => {
            bail!("the iperf3 server is busy running a test, try again later")
        }
        Some(State::ServerError) => {
            let mut codes = [0u8; 8];
            let said = wire::read_exact_by(sock, &mut codes, deadline);
            let code = i32::from_be_bytes([codes[0], codes[1], codes[2], codes[3]]);
            let errno = i32::from_be_bytes([codes[4], codes[5], codes[6], codes[7]]);
            match said {
                Ok(()) => bail!(
                    "the iperf3 server refused the test: {} (iperf3 error {code}{})",
                    wire::error_text(code),
                    if errno != 0 {
                        format!(", {}", io::Error::from_raw_os_error(errno))
                    } else {
                        String::new()
                    }
                ),
                Err(_) => bail!("the iperf3 server refused the test"),
            }
        }
        Some(State::ServerTerminate) => bail!("the iperf3 server stopped (it was interrupted)"),
        Some(state) => Ok(state),
        None => bail!(
            "the iperf3 server sent an unknown control message ({})",
            byte[0]
        ),
    }
}

/// Reads the next state, which must be `want`.
fn expect(sock: &mut TcpStream, want: State, deadline: Instant) -> Result<()> {
    match read_state(sock, deadline)? {
        got if got == want => Ok(()),
        got => bail!("the iperf3 server sent {got:?} where {want:?} belongs"),
    }
}

/// Runs one test against an iperf3 server, telling `observer` about connected streams
/// and the client's intervals.
pub fn run_observed(
    cfg: &ClientConfig,
    abort: Arc<AtomicBool>,
    observer: &mut dyn RunObserver,
) -> Result<ClientOutcome> {
    let settings = &cfg.settings;
    settings.validate()?;
    check(settings).map_err(|e| anyhow!("{e}"))?;
    let server = resolve(&cfg.host, cfg.port, cfg.family)?;
    if let Some(tcp) = settings.tcp() {
        crate::transport::tcp::check_flowlabel(tcp, server)?;
    }
    let setup = cfg.control_timeout;
    let mut control = connect_control(cfg, server, "iperf3")?;
    control.set_nodelay(true)?;
    let cookie = Cookie::random()?;
    control.write_all(cookie.bytes())?;
    expect(&mut control, State::ParamExchange, Instant::now() + setup)?;
    wire::write_json(&mut control, &params(settings))?;
    expect(&mut control, State::CreateStreams, Instant::now() + setup)?;
    let udp = settings.protocol() == Protocol::Udp;
    let streams: Vec<Box<dyn Stream>> = if udp {
        let tos = settings.transport.sockets().and_then(|s| s.tos);
        let ports = (0..settings.nstreams)
            .map(|i| nth_client_port(cfg.cport, u64::from(i)))
            .collect::<Result<Vec<_>>>()?;
        let from = (cfg.bind, cfg.bind_device.as_deref());
        let streams = udp::connect_streams(server, from, &ports, true, setup, &abort)?;
        for s in &streams {
            s.mark(tos)?;
            // Either way: an iperf3 server may not set DF on its own sockets.
            if settings.dont_fragment() {
                s.forbid_fragments(settings.pktsize as usize)?;
            }
        }
        streams
            .into_iter()
            .map(|s| Box::new(s) as Box<dyn Stream>)
            .collect()
    } else {
        let conns = (0..settings.nstreams)
            .map(|i| {
                let from = LocalEnd {
                    ip: cfg.bind,
                    port: nth_client_port(cfg.cport, u64::from(i))?,
                    device: cfg.bind_device.as_deref(),
                };
                let mut sock = connect(server, from, Some(&settings.transport), setup)
                    .with_context(|| format!("stream {i}: cannot connect to {server}"))?;
                sock.write_all(cookie.bytes())?;
                Ok(sock)
            })
            .collect::<Result<Vec<_>>>()?;
        crate::transport::tcp::streams_over(
            &settings.stream_plan(),
            Role::Client,
            conns,
            abort.clone(),
        )?
    };
    let infos = stream_infos(&streams);
    expect(&mut control, State::TestStart, Instant::now() + setup)?;
    expect(&mut control, State::TestRunning, Instant::now() + setup)?;
    observer.connected(&infos);

    let start = Instant::now();
    let cpu_start = CpuUsage::now();
    let schedule = Schedule::new(settings, start);
    let (meter_tx, meter_rx) = crate::interval::meter_channel(infos.len());
    let mut collector = Collector::new(start, infos.len(), cpu_start, settings);
    let watch = Arc::new(TestWatch::new(infos.len(), None, abort.clone()));
    // An iperf3 server counts a test's bytes over all its streams, not each one's.
    let workers = start_streams(
        settings,
        streams,
        (schedule, &meter_tx),
        (&abort, &watch),
        cfg.stall_timeout,
        false,
    )?;
    observer.started(&watch);
    drop(meter_tx);
    let mut intervals = Vec::new();
    let mut take_intervals = |collector: &mut Collector, observer: &mut dyn RunObserver| {
        while let Ok(msg) = meter_rx.try_recv() {
            for r in collector.push(msg) {
                observer.interval(Role::Client, &r);
                intervals.push(r);
            }
        }
    };
    control.set_read_timeout(Some(TICK))?;
    // The client ends the test: once its own streams are done and the server's data
    // has run its time or its bytes.
    loop {
        take_intervals(&mut collector, observer);
        if peek_state(&mut control)? {
            // An error or a stop (which read_state reports), or a state out of turn.
            let state = read_state(&mut control, Instant::now() + setup)?;
            bail!("the iperf3 server sent {state:?} in the middle of the test");
        }
        if test_done(settings, &schedule, &watch, &workers) || abort_set(&abort) {
            break;
        }
    }
    let user_stopped = abort_set(&abort);
    // An iperf3 server confirms no data: it counts until TEST_END, where the sending
    // streams' time ends too (not after the wait for the last datagrams that follows).
    let ended_at = Instant::now();
    let seconds = results::test_seconds(settings, start, ended_at);
    wire::write_state(&mut control, State::TestEnd)?;
    // The server closes its TCP streams now, which ends the receiving ones. UDP has no
    // end to read: its streams read on until the server's next word says it stopped
    // sending, and a moment more for the datagrams still on their way.
    let mut give_up = Instant::now() + setup;
    let mut server_stopped = false;
    while !workers.iter().all(|w| w.is_finished()) {
        take_intervals(&mut collector, observer);
        if Instant::now() > give_up {
            abort.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if server_stopped {
            std::thread::sleep(TICK);
        } else if peek_state(&mut control)? {
            server_stopped = true;
            if udp {
                give_up = give_up.min(Instant::now() + UDP_DRAIN);
            }
        }
    }
    let mut moved = Vec::with_capacity(workers.len());
    for (i, w) in workers.into_iter().enumerate() {
        match w.join() {
            Ok(Ok(m)) => moved.push(m),
            Ok(Err(e)) => bail!("stream {i}: {e}"),
            Err(_) => bail!("stream {i}: its thread panicked"),
        }
    }
    take_intervals(&mut collector, observer);
    for r in collector.flush() {
        observer.interval(Role::Client, &r);
        intervals.push(r);
    }
    let wall = start.elapsed();
    let cpu = CpuUsage::now().zip(cpu_start).map(|(n, s)| n.since(s));
    control.set_read_timeout(None)?;
    expect(&mut control, State::ExchangeResults, Instant::now() + setup)?;
    let end = Instant::now();
    wire::write_json(
        &mut control,
        &own_results(settings, &moved, cpu, (seconds, wall)),
    )?;
    let theirs = wire::read_json(
        &mut control,
        wire::MAX_RESULTS_BYTES,
        Instant::now() + setup,
    )
    .map_err(|e| anyhow!("the iperf3 server's results: {e}"))?;
    expect(&mut control, State::DisplayResults, Instant::now() + setup)?;
    let _ = wire::write_state(&mut control, State::IperfDone);
    let warm_ups: Vec<DatagramCounts> = moved.iter().map(|m| m.warm_up).collect();
    let (server, server_sent) = results::server_result(settings, &theirs, &warm_ups)?;
    for (m, sent) in moved.iter_mut().zip(server_sent) {
        if let Some(sent) = sent {
            count_unseen_as_lost(&mut m.stats.datagrams, &m.warm_up, sent);
        }
    }
    let (client, send_latency) = client_result(
        settings,
        &moved,
        &infos,
        (end, Some(ended_at)),
        cpu,
        intervals,
    );
    Ok(ClientOutcome {
        test_id: cookie.text().to_owned(),
        client,
        server,
        interrupted: user_stopped,
        send_latency,
    })
}

fn abort_set(abort: &AtomicBool) -> bool {
    abort.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether the server sent something while the test runs (it should send nothing);
/// waits up to the control connection's read time-out.
fn peek_state(control: &mut TcpStream) -> Result<bool> {
    let mut byte = [0u8; 1];
    match control.peek(&mut byte) {
        Ok(0) => bail!("the iperf3 server closed the connection mid-test"),
        Ok(_) => Ok(true),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Ok(false)
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) => Err(anyhow!("the iperf3 server's connection failed: {e}")),
    }
}

/// Whether the client's part of the test is done: its sending streams finished, and
/// the streams the server sends on ran their time or brought their bytes.
fn test_done(
    settings: &Settings,
    schedule: &Schedule,
    watch: &TestWatch,
    workers: &[StreamThread],
) -> bool {
    let sent = workers
        .iter()
        .enumerate()
        .filter(|(i, _)| Role::Client.sends_on(settings, *i as u32))
        .all(|(_, w)| w.is_finished());
    let receiving: Vec<usize> = (0..workers.len())
        .filter(|&i| !Role::Client.sends_on(settings, i as u32))
        .collect();
    let received = receiving.is_empty()
        || match (schedule.deadline(), settings.byte_limit()) {
            (Some(deadline), _) => Instant::now() >= deadline,
            // An iperf3 server counts its bytes over all its streams, not each one's.
            (None, Some(bytes)) => {
                let total: u64 = receiving.iter().map(|&i| watch.stream_total(i)).sum();
                total >= bytes.saturating_mul(receiving.len() as u64)
            }
            (None, None) => true,
        }
        || receiving.iter().all(|&i| workers[i].is_finished());
    sent && received
}

/// The client's half of the results exchange, in iperf3's layout. `seconds`: the
/// test's ([`results::test_seconds`]); `wall`: the time its CPU use is a share of.
fn own_results(
    settings: &Settings,
    moved: &[Moved],
    cpu: Option<CpuUsage>,
    (seconds, wall): (f64, Duration),
) -> Value {
    let streams = moved.iter().enumerate().map(|(i, m)| StreamFigures {
        index: i as u32,
        sending: Role::Client.sends_on(settings, i as u32),
        stats: &m.stats,
        warm_up: &m.warm_up,
        tcp: m.transport.tcp,
        seconds,
    });
    results::message(settings.protocol(), streams, cpu, wall, None)
}

/// A receiving stream's loss counted from the numbers misses the datagrams the server
/// sent after the highest one that arrived in time. With the server's own count of what
/// it sent on the stream (`sent_in_all`, the warm-up's included), they count as lost
/// too: every datagram sent was received or lost, as in fperf's own tests. `counted`:
/// the stream's counts after its `warm_up`.
fn count_unseen_as_lost(counted: &mut DatagramCounts, warm_up: &DatagramCounts, sent_in_all: u64) {
    let numbered = warm_up.peer_sent.saturating_add(counted.peer_sent);
    let unseen = sent_in_all.saturating_sub(numbered);
    counted.peer_sent = counted.peer_sent.saturating_add(unseen);
    counted.lost = counted.lost.saturating_add(unseen);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::tcp::settings::TcpSettings;

    #[test]
    fn parameters_say_what_iperf3_clients_say() {
        let timed = Settings {
            nstreams: 4,
            time_ms: Some(3000),
            omit_ms: Some(1000),
            workload: Workload::Bidir,
            ..Settings::default()
        };
        let p = params(&timed);
        assert_eq!(p["parallel"], 2, "--bidir: -t counts both ways");
        assert_eq!(p["time"], 2, "iperf3's time leaves the omitted second out");
        assert_eq!(p["omit"], 1);
        assert_eq!(p["bidirectional"], true);
        assert!(p.get("reverse").is_none(), "flags are sent only when set");
        let sized = Settings {
            nstreams: 2,
            mb: 3,
            ..Settings::default()
        };
        let p = params(&sized);
        assert_eq!(p["num"], 6 * MB, "iperf3's -n counts all streams");
        assert_eq!(p["time"], 0);
        assert!(p.get("MSS").is_none() && p.get("dont_fragment").is_none());
        assert!(p.get("fqrate").is_none());
        let segmented = Settings {
            transport: TransportSettings::Tcp(TcpSettings {
                mss: Some(1000),
                fq_rate: Some(50_000_000),
                flowlabel: Some(7),
                ..TcpSettings::default()
            }),
            ..Settings::default()
        };
        assert_eq!(params(&segmented)["MSS"], 1000);
        assert_eq!(params(&segmented)["fqrate"], 50_000_000, "bits/s");
        assert_eq!(params(&segmented)["flowlabel"], 7);
        let whole = Settings {
            transport: TransportSettings::Udp(crate::transport::udp::settings::UdpSettings {
                dont_fragment: true,
                ..Default::default()
            }),
            ..Settings::default()
        };
        assert_eq!(params(&whole)["dont_fragment"], 1);
    }

    #[test]
    fn workloads_iperf3_cannot_serve_are_refused_before_connecting() {
        for (settings, want) in [
            (
                Settings {
                    workload: Workload::Crr,
                    ..Settings::default()
                },
                "--crr",
            ),
            (
                Settings {
                    workload: Workload::RoundTrip(crate::workload::Reply::Echo),
                    ..Settings::default()
                },
                "-r and --echo",
            ),
            (
                Settings {
                    nsockets: 2,
                    ..Settings::default()
                },
                "-n above 1",
            ),
            (
                Settings {
                    transport: TransportSettings::Udp(
                        crate::transport::udp::settings::UdpSettings {
                            gso: true,
                            ..Default::default()
                        },
                    ),
                    ..Settings::default()
                },
                "--gso",
            ),
            (
                Settings {
                    nstreams: 129,
                    ..Settings::default()
                },
                "128",
            ),
            (
                Settings {
                    server_cpus: vec![1],
                    ..Settings::default()
                },
                "--server-cpu",
            ),
            (
                Settings {
                    transport: TransportSettings::Tcp(TcpSettings {
                        skip_rx_copy: true,
                        ..TcpSettings::default()
                    }),
                    ..Settings::default()
                },
                "--skip-rx-copy",
            ),
            (
                Settings {
                    workload: Workload::Bidir,
                    nstreams: 2,
                    transport: TransportSettings::Tcp(TcpSettings {
                        rcvlowat: Some(4096),
                        ..TcpSettings::default()
                    }),
                    ..Settings::default()
                },
                "--rcvlowat",
            ),
        ] {
            let e = check(&settings).expect_err(want);
            assert!(e.contains(want), "{e}");
        }
        assert_eq!(check(&Settings::default()), Ok(()));
        let receiving = Settings {
            workload: Workload::Reverse,
            transport: TransportSettings::Tcp(TcpSettings {
                rcvlowat: Some(4096),
                skip_rx_copy: true,
                ..TcpSettings::default()
            }),
            ..Settings::default()
        };
        assert_eq!(check(&receiving), Ok(()), "fperf receives with --reverse");
        let udp = Settings {
            transport: TransportSettings::Udp(Default::default()),
            rate_bps: Some(1_000_000),
            ..Settings::default()
        };
        assert_eq!(check(&udp), Ok(()));
        let p = params(&udp);
        assert_eq!(
            (p["udp"].clone(), p["udp_counters_64bit"].clone()),
            (json!(true), json!(1))
        );
        assert!(p.get("tcp").is_none());
    }

    #[test]
    fn datagrams_the_server_sent_after_the_last_one_seen_count_as_lost() {
        let s = Settings {
            workload: Workload::Reverse,
            transport: TransportSettings::Udp(Default::default()),
            rate_bps: Some(1_000_000),
            ..Settings::default()
        };
        let theirs = json!({"streams": [{"id": 1, "bytes": 14_000, "packets": 10,
                                         "omitted_packets": 2, "end_time": 1.0}]});
        let theirs = theirs.as_object().expect("object");
        let (_, sent) = results::server_result(&s, theirs, &[]).expect("valid");
        assert_eq!(sent, [Some(10)], "the warm-up's datagrams included");
        // This end saw numbers 1 to 2 in the warm-up and 3 to 8 after it, 5 missing.
        let warm_up = DatagramCounts {
            peer_sent: 2,
            received: 2,
            ..DatagramCounts::default()
        };
        let mut counted = DatagramCounts {
            peer_sent: 6,
            received: 5,
            lost: 1,
            ..DatagramCounts::default()
        };
        count_unseen_as_lost(&mut counted, &warm_up, 10);
        assert_eq!(
            (counted.peer_sent, counted.received, counted.lost),
            (8, 5, 3)
        );
        // A count below what this end saw takes nothing away.
        count_unseen_as_lost(&mut counted, &warm_up, 4);
        assert_eq!((counted.peer_sent, counted.lost), (8, 3));
    }

    #[test]
    fn a_udp_servers_totals_count_each_datagram_once() {
        let s = Settings {
            nstreams: 2,
            transport: TransportSettings::Udp(Default::default()),
            rate_bps: Some(1_000_000),
            ..Settings::default()
        };
        let theirs = json!({"streams": [
            {"id": 1, "bytes": 14_000, "packets": 10, "errors": 1, "end_time": 1.0},
            {"id": 3, "bytes": 7_000, "packets": 5, "errors": 0, "end_time": 1.0}]});
        let theirs = theirs.as_object().expect("object");
        let (r, _) = results::server_result(&s, theirs, &[]).expect("valid");
        let total = r.total.transport.udp.datagrams.expect("datagrams");
        assert_eq!(
            (total.peer_sent, total.received, total.lost),
            (15, 14, 1),
            "the streams' counts, added once"
        );
    }

    #[test]
    fn a_servers_impossible_or_unknown_streams_are_refused() {
        let s = Settings {
            nstreams: 2,
            mb: 1,
            ..Settings::default()
        };
        let doc = |streams: Value| {
            json!({"cpu_util_total": 1.0, "streams": streams})
                .as_object()
                .cloned()
                .expect("object")
        };
        let ok = doc(json!([{"id":1,"bytes":1048576,"end_time":1.0},
                            {"id":3,"bytes":1000,"retransmits":18446744073709551615u64,"end_time":1.0}]));
        let (r, _) = results::server_result(&s, &ok, &[]).expect("valid");
        assert_eq!(r.total.bytes_received, 1_048_576 + 1000);
        assert!(
            r.streams.iter().all(|s| s.figures.transport.tcp.is_none()),
            "-1 is no count"
        );
        for bad in [
            json!([{"id":2,"bytes":1}]),
            json!([{"id":1,"bytes":1},{"id":1,"bytes":1}]),
            json!([{"id":1,"bytes":1},{"id":3,"bytes":1},{"id":4,"bytes":1}]),
            json!([{"id":1,"bytes":1u64 << 40}]),
            json!([{"id":1,"bytes":1,"end_time":-5.0}]),
            json!("streams"),
        ] {
            assert!(
                results::server_result(&s, &doc(bad.clone()), &[]).is_err(),
                "{bad}"
            );
        }
    }
}
