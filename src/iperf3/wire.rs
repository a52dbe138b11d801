//! iperf3's control protocol on the wire: the cookie that names a test, the one-byte
//! states, the length-prefixed JSON messages and the error codes its clients know.
//! Facts from iperf3's own sources (`iperf_api.h`, `iperf_api.c`); no I/O policy here
//! beyond reading and writing one message within a deadline.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Bytes of a cookie on the wire: 36 characters of `[a-z2-7]` and a NUL.
pub const COOKIE_LEN: usize = 37;

/// Largest parameter message accepted: what iperf3 itself accepts since 3.18, and far
/// more than any client sends (a few hundred bytes).
pub const MAX_PARAMS_BYTES: u32 = 8 << 10;

/// Largest results message accepted: a client's figures for 256 streams take about
/// 50 KiB.
pub const MAX_RESULTS_BYTES: u32 = 256 << 10;

/// Whether every byte of `bytes` is one a cookie is made of (`[a-z2-7]`).
pub fn cookie_chars(bytes: &[u8]) -> bool {
    bytes.iter().all(|b| matches!(b, b'a'..=b'z' | b'2'..=b'7'))
}

/// Whether `byte` is one an iperf3 server sends first to a new client: `PARAM_EXCHANGE`,
/// or `ACCESS_DENIED` or `SERVER_ERROR` when it is busy or failing.
pub fn opens_a_servers_answer(byte: u8) -> bool {
    [
        State::ParamExchange,
        State::AccessDenied,
        State::ServerError,
    ]
    .iter()
    .any(|state| state.byte() == byte)
}

/// A test's cookie: the first bytes on its control connection and on each of its TCP
/// data connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cookie([u8; COOKIE_LEN]);

impl Cookie {
    /// The cookie in `bytes`, if it is one as iperf3 makes them.
    pub fn parse(bytes: [u8; COOKIE_LEN]) -> Option<Cookie> {
        let (text, nul) = bytes.split_at(COOKIE_LEN - 1);
        (nul == [0] && cookie_chars(text)).then_some(Cookie(bytes))
    }

    /// A fresh cookie, as an iperf3 client makes one.
    pub fn random() -> io::Result<Cookie> {
        const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
        let mut bytes = [0u8; COOKIE_LEN];
        getrandom::getrandom(&mut bytes).map_err(|e| io::Error::other(e.to_string()))?;
        for b in &mut bytes[..COOKIE_LEN - 1] {
            *b = ALPHABET[usize::from(*b) % ALPHABET.len()];
        }
        bytes[COOKIE_LEN - 1] = 0;
        Ok(Cookie(bytes))
    }

    /// The bytes sent on the wire.
    pub fn bytes(&self) -> &[u8; COOKIE_LEN] {
        &self.0
    }

    /// The 36 characters, as iperf3's `-J` shows them.
    pub fn text(&self) -> &str {
        std::str::from_utf8(&self.0[..COOKIE_LEN - 1]).unwrap_or("")
    }

    /// The test id the server registers the test under: the cookie's first 8 bytes of
    /// SHA-256, so its data connections are routed like fperf's own.
    pub fn session_id(&self) -> u64 {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(self.0);
        let mut id = [0u8; 8];
        id.copy_from_slice(&digest[..8]);
        u64::from_le_bytes(id)
    }
}

/// The one-byte states of iperf3's control connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    TestStart,
    TestRunning,
    TestEnd,
    ParamExchange,
    CreateStreams,
    ServerTerminate,
    ClientTerminate,
    ExchangeResults,
    DisplayResults,
    IperfDone,
    AccessDenied,
    ServerError,
}

impl State {
    /// The byte on the wire.
    pub fn byte(self) -> u8 {
        match self {
            State::TestStart => 1,
            State::TestRunning => 2,
            State::TestEnd => 4,
            State::ParamExchange => 9,
            State::CreateStreams => 10,
            State::ServerTerminate => 11,
            State::ClientTerminate => 12,
            State::ExchangeResults => 13,
            State::DisplayResults => 14,
            State::IperfDone => 16,
            State::AccessDenied => 0xff,
            State::ServerError => 0xfe,
        }
    }

    /// The state a byte names, if any.
    pub fn from_byte(byte: u8) -> Option<State> {
        Some(match byte {
            1 => State::TestStart,
            2 => State::TestRunning,
            4 => State::TestEnd,
            9 => State::ParamExchange,
            10 => State::CreateStreams,
            11 => State::ServerTerminate,
            12 => State::ClientTerminate,
            13 => State::ExchangeResults,
            14 => State::DisplayResults,
            16 => State::IperfDone,
            0xff => State::AccessDenied,
            0xfe => State::ServerError,
            _ => return None,
        })
    }
}

/// iperf3's error codes that an fperf server sends, with `SERVER_ERROR`. An iperf3
/// client prints its own text for each; the server logs fperf's own reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    /// "test duration too long".
    Duration = 5,
    /// "number of parallel streams too large".
    NumStreams = 6,
    /// "an option you are trying to set is not implemented yet".
    Unimplemented = 13,
    /// "no SCTP support available".
    NoSctp = 18,
    /// "total required bandwidth is larger than server limit".
    TotalRate = 27,
    /// "unable to receive parameters from client", with the errno's text.
    RecvParams = 114,
    /// "unable to set TCP_CONGESTION".
    SetCongestion = 134,
    /// "unable to set IP Do-Not-Fragment flag".
    SetDontFragment = 145,
    /// "unable to start stream listener", with the errno's text.
    StreamListen = 202,
    /// "unable to accept stream connection", with the errno's text.
    StreamAccept = 204,
    /// "unable to write to stream socket", with the errno's text.
    StreamWrite = 205,
}

/// What an iperf3 client prints for error `code` (the ones a server sends).
pub fn error_text(code: i32) -> &'static str {
    match code {
        5 => "test duration too long",
        6 => "number of parallel streams too large",
        7 => "block size too large",
        13 => "an option you are trying to set is not implemented yet",
        18 => "no SCTP support available",
        27 => "total required bandwidth is larger than server limit",
        114 => "unable to receive parameters from client",
        134 => "unable to set TCP_CONGESTION",
        142 => "test authorization failed",
        145 => "unable to set IP Do-Not-Fragment flag",
        200 => "unable to create a new stream",
        202 => "unable to start stream listener",
        204 => "unable to accept stream connection",
        205 => "unable to write to stream socket",
        _ => "an iperf3 error",
    }
}

/// iperf3's id of the `index`-th stream of a test: 1, 3, 4, 5, ... (iperf3 skips 2).
pub fn stream_id(index: u32) -> u32 {
    if index == 0 {
        1
    } else {
        index + 2
    }
}

/// Reads exactly `buf.len()` bytes before `deadline`.
pub fn read_exact_by(sock: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        sock.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
        match sock.read(&mut buf[at..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(io::ErrorKind::TimedOut.into())
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Why a JSON message could not be read.
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("a message of {0} bytes is larger than the {1} allowed")]
    TooLarge(u32, u32),
    #[error("an empty message")]
    Empty,
    /// serde's text quotes the message (a string where an object belongs).
    #[error("a message that is not a JSON object: {}", crate::peer_text::printable(&.0.to_string()))]
    NotJson(#[from] serde_json::Error),
}

/// Reads one length-prefixed JSON object of at most `max` bytes before `deadline`: the
/// length is checked before anything is allocated.
pub fn read_json(
    sock: &mut TcpStream,
    max: u32,
    deadline: Instant,
) -> Result<serde_json::Map<String, serde_json::Value>, MessageError> {
    let mut len = [0u8; 4];
    read_exact_by(sock, &mut len, deadline)?;
    let len = u32::from_be_bytes(len);
    if len == 0 {
        return Err(MessageError::Empty);
    }
    if len > max {
        return Err(MessageError::TooLarge(len, max));
    }
    let mut body = vec![0u8; len as usize];
    read_exact_by(sock, &mut body, deadline)?;
    Ok(serde_json::from_slice(&body)?)
}

/// Writes one length-prefixed JSON message.
pub fn write_json(sock: &mut TcpStream, value: &serde_json::Value) -> io::Result<()> {
    let body = serde_json::to_vec(value).map_err(io::Error::other)?;
    let len = u32::try_from(body.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "message too large"))?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&body);
    sock.write_all(&frame)
}

/// Writes one state byte.
pub fn write_state(sock: &mut TcpStream, state: State) -> io::Result<()> {
    sock.write_all(&[state.byte()])
}

/// Tells an iperf3 client the test failed: `SERVER_ERROR`, iperf3's error code and an
/// errno, both big-endian.
pub fn write_error(sock: &mut TcpStream, code: ErrorCode, errno: i32) -> io::Result<()> {
    let mut msg = [0u8; 9];
    msg[0] = State::ServerError.byte();
    msg[1..5].copy_from_slice(&(code as i32).to_be_bytes());
    msg[5..].copy_from_slice(&errno.to_be_bytes());
    sock.write_all(&msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_iperf3s_alphabet_and_a_nul() {
        let cookie = Cookie::random().expect("entropy");
        assert_eq!(Cookie::parse(*cookie.bytes()), Some(cookie));
        assert_eq!(cookie.text().len(), 36);
        let mut bad = *cookie.bytes();
        bad[3] = b'1';
        assert!(Cookie::parse(bad).is_none(), "1 is not in the alphabet");
        let mut no_nul = *cookie.bytes();
        no_nul[36] = b'a';
        assert!(Cookie::parse(no_nul).is_none());
        // A fperf hello is no cookie.
        let mut frame = [0u8; COOKIE_LEN];
        frame[..4].copy_from_slice(&100u32.to_be_bytes());
        assert!(Cookie::parse(frame).is_none());
    }

    #[test]
    fn a_message_that_is_no_object_is_quoted_printable() {
        let not_json = serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(
            b"\"forged\\n\\u001b[2J\"",
        )
        .expect_err("a string, not an object");
        let shown = MessageError::from(not_json).to_string();
        assert!(shown.contains("forged\\n\\u{1b}[2J"), "{shown}");
        assert!(!shown.chars().any(char::is_control), "{shown}");
    }

    #[test]
    fn stream_ids_skip_two_as_iperf3s_do() {
        let ids: Vec<u32> = (0..5).map(stream_id).collect();
        assert_eq!(ids, [1, 3, 4, 5, 6]);
    }

    #[test]
    fn every_state_byte_reads_back() {
        for byte in 0..=255u8 {
            if let Some(state) = State::from_byte(byte) {
                assert_eq!(state.byte(), byte);
            }
        }
        assert_eq!(State::from_byte(3), None, "RESULT_REQUEST is never sent");
    }
}
