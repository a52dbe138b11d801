//! The client's latency probes: a sender thread that sends one probe every interval,
//! never waiting for replies, and a receiver thread that matches each echo to its probe
//! by sequence number. A probe without an echo is lost; it never holds up later ones.

use crate::latency_probe::datagram::{wall_ns, Probe, PROBE_LEN};
use crate::transport::udp::cmsg::{
    enable_rx_timestamps, recv_with_control, rx_timestamp_ns, ControlBuffer,
};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the receiver waits for a datagram before it looks at its stop flag.
const RECV_WAIT: Duration = Duration::from_millis(50);

/// One probe as the client saw it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProbeRecord {
    /// When it was sent, since the run began.
    pub sent: Duration,
    /// Its round trip, if its echo came back.
    pub rtt: Option<Duration>,
    /// The four clocks' readings (ns since the Unix epoch): the client's send, the
    /// server's receive and send, the client's receive; with the echo.
    pub stamps: Option<[u64; 4]>,
}

/// The probes sent so far, indexed by sequence number: bounded by
/// [`super::spec::MAX_PROBES`].
type Log = Arc<Mutex<Vec<(Instant, ProbeRecord)>>>;

/// The running probes.
pub struct Prober {
    log: Log,
    stop_sending: Arc<AtomicBool>,
    stop_receiving: Arc<AtomicBool>,
    sender: JoinHandle<()>,
    receiver: JoinHandle<()>,
}

impl Prober {
    /// Starts probing `echo` from `local`'s address, one probe every `interval` carrying
    /// `token`, at most `most` probes; `epoch` is the run's start.
    pub fn start(
        local: SocketAddr,
        echo: SocketAddr,
        token: u64,
        interval: Duration,
        most: u64,
        epoch: Instant,
    ) -> io::Result<Prober> {
        let sock = UdpSocket::bind(SocketAddr::new(local.ip(), 0))?;
        sock.connect(echo)?;
        sock.set_read_timeout(Some(RECV_WAIT))?;
        // The kernel's receive time: an echo that waited for the receiver thread (a
        // busy host) is not counted as time on the network.
        enable_rx_timestamps(&sock)?;
        let recv_sock = sock.try_clone()?;
        let log: Log = Arc::new(Mutex::new(Vec::new()));
        let stop_sending = Arc::new(AtomicBool::new(false));
        let stop_receiving = Arc::new(AtomicBool::new(false));
        let sender = {
            let (log, stop) = (log.clone(), stop_sending.clone());
            std::thread::Builder::new()
                .name("fperf-probe-tx".into())
                .spawn(move || send_probes(&sock, token, interval, most, epoch, &log, &stop))?
        };
        let receiver = {
            let (log, stop) = (log.clone(), stop_receiving.clone());
            std::thread::Builder::new()
                .name("fperf-probe-rx".into())
                .spawn(move || receive_echoes(&recv_sock, token, &log, &stop))?
        };
        Ok(Prober {
            log,
            stop_sending,
            stop_receiving,
            sender,
            receiver,
        })
    }

    /// Stops sending, waits `grace` for the last echoes, and returns every probe in
    /// the order sent.
    pub fn finish(self, grace: Duration) -> Vec<ProbeRecord> {
        self.stop_sending.store(true, Ordering::Relaxed);
        let _ = self.sender.join();
        std::thread::sleep(grace);
        self.stop_receiving.store(true, Ordering::Relaxed);
        let _ = self.receiver.join();
        let log = match self.log.lock() {
            Ok(log) => log,
            Err(poisoned) => poisoned.into_inner(),
        };
        log.iter().map(|(_, record)| *record).collect()
    }
}

/// Sends one probe every `interval` from `epoch` on, until `stop` or `most` probes.
fn send_probes(
    sock: &UdpSocket,
    token: u64,
    interval: Duration,
    most: u64,
    epoch: Instant,
    log: &Log,
    stop: &AtomicBool,
) {
    let mut next = Instant::now();
    for seq in 0..most {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
        // A late tick sends at once, without a burst to catch up.
        next = next.max(Instant::now() - interval) + interval;
        let probe = Probe {
            token,
            seq,
            client_send_ns: wall_ns(),
            server_recv_ns: 0,
            server_send_ns: 0,
        };
        let sent_at = Instant::now();
        if let Ok(mut log) = log.lock() {
            log.push((
                sent_at,
                ProbeRecord {
                    sent: sent_at.saturating_duration_since(epoch),
                    rtt: None,
                    stamps: None,
                },
            ));
        }
        // A probe the host could not send is lost like one the network dropped.
        let _ = sock.send(&probe.encode());
    }
}

/// A probe's time on the network from its four stamps, as TWAMP counts it: from its
/// sending to its echo's arrival (the kernel's receive time) on the client's clock, less
/// the time the server held it, on the server's. `None` where a clock stepped between.
fn on_network([t1, t2, t3, t4]: [u64; 4]) -> Option<Duration> {
    let round_trip = t4.checked_sub(t1)?;
    let held = t3.checked_sub(t2)?;
    round_trip
        .checked_sub(held)
        .filter(|&ns| ns > 0)
        .map(Duration::from_nanos)
}

/// Matches each echo to its probe until `stop`; drops anything else, and a second echo
/// of one probe.
fn receive_echoes(sock: &UdpSocket, token: u64, log: &Log, stop: &AtomicBool) {
    let mut buf = [0u8; PROBE_LEN + 1];
    let mut control = ControlBuffer::default();
    while !stop.load(Ordering::Relaxed) {
        let (len, used) = match recv_with_control(sock.as_raw_fd(), &mut buf, &mut control, 0) {
            Ok(got) => got,
            // Time-outs, and ICMP errors of earlier probes: keep listening.
            Err(_) => continue,
        };
        let arrived = Instant::now();
        let arrived_wall = rx_timestamp_ns(&control.0[..used]).unwrap_or_else(wall_ns);
        let Some(echo) = buf.get(..len).and_then(|b| Probe::decode(b, token)) else {
            continue;
        };
        let Ok(mut log) = log.lock() else {
            return;
        };
        let Some((sent_at, record)) = usize::try_from(echo.seq)
            .ok()
            .and_then(|seq| log.get_mut(seq))
        else {
            continue;
        };
        if record.rtt.is_none() {
            let stamps = [
                echo.client_send_ns,
                echo.server_recv_ns,
                echo.server_send_ns,
                arrived_wall,
            ];
            let waited = arrived.saturating_duration_since(*sent_at);
            record.rtt = Some(on_network(stamps).unwrap_or(waited));
            record.stamps = Some(stamps);
        }
    }
}
