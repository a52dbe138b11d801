//! TCP keepalive on the control connection (`--cntl-ka`, as iperf3's). During a long test
//! the control connection carries nothing for minutes; keepalive probes keep it open
//! through NAT and stateful firewalls that drop idle flows, and notice a peer that is
//! gone.

use socket2::{SockRef, TcpKeepalive};
use std::io;
use std::net::TcpStream;
use std::time::Duration;

/// The kernel's upper bounds on `TCP_KEEPIDLE`/`TCP_KEEPINTVL` (seconds) and `TCP_KEEPCNT`.
const MAX_SECS: u32 = 32767;
const MAX_PROBES: u32 = 127;

/// `--cntl-ka[=IDLE/INTERVAL/COUNT]`: each part may be left out (the kernel's default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ControlKeepalive {
    /// Seconds of silence before the first probe (`TCP_KEEPIDLE`).
    pub idle: Option<u32>,
    /// Seconds between unanswered probes (`TCP_KEEPINTVL`).
    pub interval: Option<u32>,
    /// Unanswered probes before the connection is given up (`TCP_KEEPCNT`).
    pub count: Option<u32>,
}

impl ControlKeepalive {
    /// Parses `IDLE/INTERVAL/COUNT`, where any part may be empty or missing (`""`,
    /// `"60"`, `"60/5"`, `"//3"`).
    pub fn parse(text: &str) -> Result<ControlKeepalive, String> {
        let mut parts = text.split('/');
        let mut next = |name: &str, max: u32| -> Result<Option<u32>, String> {
            match parts.next() {
                None | Some("") => Ok(None),
                Some(value) => value
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=max).contains(n))
                    .map(Some)
                    .ok_or_else(|| {
                        format!("{name} is a whole number from 1 to {max}, not '{value}'")
                    }),
            }
        };
        let keepalive = ControlKeepalive {
            idle: next("IDLE (seconds)", MAX_SECS)?,
            interval: next("INTERVAL (seconds)", MAX_SECS)?,
            count: next("COUNT (probes)", MAX_PROBES)?,
        };
        if parts.next().is_some() {
            return Err("takes at most three values, IDLE/INTERVAL/COUNT".into());
        }
        Ok(keepalive)
    }

    /// Turns keepalive on for `sock` with the parts given.
    pub fn apply(&self, sock: &TcpStream) -> io::Result<()> {
        let secs = |s: u32| Duration::from_secs(u64::from(s));
        let mut params = TcpKeepalive::new();
        if let Some(idle) = self.idle {
            params = params.with_time(secs(idle));
        }
        if let Some(interval) = self.interval {
            params = params.with_interval(secs(interval));
        }
        if let Some(count) = self.count {
            params = params.with_retries(count);
        }
        SockRef::from(sock).set_tcp_keepalive(&params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_part_is_optional_and_bounded() {
        let ka = |idle, interval, count| ControlKeepalive {
            idle,
            interval,
            count,
        };
        assert_eq!(ControlKeepalive::parse(""), Ok(ka(None, None, None)));
        assert_eq!(ControlKeepalive::parse("60"), Ok(ka(Some(60), None, None)));
        assert_eq!(
            ControlKeepalive::parse("60/5/3"),
            Ok(ka(Some(60), Some(5), Some(3)))
        );
        assert_eq!(ControlKeepalive::parse("//3"), Ok(ka(None, None, Some(3))));
        for bad in ["0", "x", "60/5/128", "32768", "1/2/3/4", "-1"] {
            assert!(ControlKeepalive::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn apply_sets_what_was_given_and_leaves_the_rest() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let sock = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let kernel = SockRef::from(&sock).keepalive_interval().expect("interval");
        ControlKeepalive::parse("7//2")
            .expect("parse")
            .apply(&sock)
            .expect("apply");
        let sock = SockRef::from(&sock);
        assert!(sock.keepalive().expect("keepalive"));
        assert_eq!(sock.keepalive_time().expect("idle"), Duration::from_secs(7));
        assert_eq!(sock.keepalive_interval().expect("interval"), kernel);
        assert_eq!(sock.keepalive_retries().expect("count"), 2);
    }
}
