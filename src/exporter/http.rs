//! The exporter's HTTP/1.1 front end, kept to what a scraper needs: one request per
//! connection (every answer closes it), its head parsed by `httparse`.
//!
//! Every connection comes from the network, so each of its costs is bounded. The
//! blocking HTTP server crates are not: they start a thread for every connection, let it
//! wait forever for a request, and stop accepting for good once descriptors run out.
//! Here:
//! - connections still sending their request are capped per source address and in all
//!   (one more is answered 503 at once and closed), and each has [`HEAD_TIMEOUT`] to
//!   send it;
//! - a request's head is at most [`MAX_HEAD`] bytes and [`MAX_HEADERS`] headers;
//! - a failed accept (descriptors exhausted) is waited out, never fatal.
//!
//! A connection whose request was read holds a thread while it is answered; the probes,
//! the answers that take long, are bounded by the caller.

use crate::pending::{Crowded, PendingCaps, PendingSlot};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a connection has to send its whole request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest request head (request line and headers) read.
const MAX_HEAD: usize = 8 << 10;
/// Most headers in a request.
const MAX_HEADERS: usize = 32;
/// Connections still sending their request, per source address and in all.
const MAX_UNREAD_PER_SOURCE: usize = 16;
const MAX_UNREAD: usize = 64;
/// Longest wait for the peer to take each write of an answer.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the accept loop looks at its stop flag.
const STOP_POLL: Duration = Duration::from_millis(200);
/// The pause after an accept that failed, before the next try.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// A request's line and headers.
#[derive(Debug)]
pub struct Request {
    pub method: String,
    /// The path and query, as sent.
    pub target: String,
    headers: Vec<(String, String)>,
}

impl Request {
    /// The value of header `name` (in any case), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// An answer.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Response {
    /// Plain text, for people.
    pub fn text(status: u16, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into().into_bytes(),
        }
    }

    /// The whole answer as sent: status line, headers, body.
    fn bytes(&self) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        )
        .into_bytes();
        out.extend_from_slice(&self.body);
        out
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// Why no request was read from a connection.
#[derive(Debug)]
pub(super) enum Unread {
    /// Not HTTP/1.x.
    Malformed,
    /// A head beyond [`MAX_HEAD`] or [`MAX_HEADERS`].
    TooLarge,
    /// No whole head within [`HEAD_TIMEOUT`].
    TimedOut,
    /// The peer closed the connection or it failed.
    Gone,
}

impl Unread {
    /// What tells the peer, if it is still there.
    pub(super) fn answer(&self) -> Option<Response> {
        match self {
            Unread::Malformed => Some(Response::text(400, "not an HTTP/1.x request\n")),
            Unread::TooLarge => Some(Response::text(
                431,
                format!("request heads are at most {MAX_HEAD} bytes and {MAX_HEADERS} headers\n"),
            )),
            Unread::TimedOut => Some(Response::text(
                408,
                format!(
                    "the request did not arrive within {}s\n",
                    HEAD_TIMEOUT.as_secs()
                ),
            )),
            Unread::Gone => None,
        }
    }
}

/// Reads one request head from `sock`, all of it by `deadline`.
fn read_request(sock: &mut TcpStream, deadline: Instant) -> Result<Request, Unread> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let left = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or(Unread::TimedOut)?;
        sock.set_read_timeout(Some(left))
            .map_err(|_| Unread::Gone)?;
        // One byte past the limit tells a head that is too long from one that fits.
        let room = (MAX_HEAD + 1 - head.len()).min(chunk.len());
        let n = match sock.read(&mut chunk[..room]) {
            Ok(0) => return Err(Unread::Gone),
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(Unread::TimedOut)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(Unread::Gone),
        };
        head.extend_from_slice(&chunk[..n]);
        if let Some(request) = parse_head(&head)? {
            return Ok(request);
        }
    }
}

/// The request in `head`, once it is whole (`None` until then).
pub(super) fn parse_head(head: &[u8]) -> Result<Option<Request>, Unread> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    match parsed.parse(head) {
        Ok(httparse::Status::Complete(_)) => Ok(Some(Request {
            method: parsed.method.unwrap_or_default().to_owned(),
            target: parsed.path.unwrap_or_default().to_owned(),
            headers: parsed
                .headers
                .iter()
                .map(|h| {
                    let value = String::from_utf8_lossy(h.value).into_owned();
                    (h.name.to_owned(), value)
                })
                .collect(),
        })),
        Ok(httparse::Status::Partial) if head.len() > MAX_HEAD => Err(Unread::TooLarge),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(Unread::TooLarge),
        Err(_) => Err(Unread::Malformed),
    }
}

/// Sends `response` and ends the connection; a peer that went away is no one's concern.
fn respond(mut sock: TcpStream, response: &Response) {
    if sock.set_write_timeout(Some(WRITE_TIMEOUT)).is_ok() {
        let _ = sock.write_all(&response.bytes());
    }
    let _ = sock.shutdown(Shutdown::Write);
}

/// Answers a connection beyond the caps without ever blocking the accept loop.
fn refuse(sock: TcpStream, crowded: Crowded) {
    if sock.set_nonblocking(true).is_ok() {
        let answer = Response::text(503, format!("{crowded}; try again later\n"));
        let _ = (&sock).write(&answer.bytes());
    }
}

/// What answers each request; it runs on the request's own thread.
pub type Handler = Arc<dyn Fn(Request) -> Response + Send + Sync>;

/// A bound listener.
pub struct HttpListener {
    listener: TcpListener,
    unread: Arc<PendingCaps>,
}

impl HttpListener {
    pub fn bind(addr: SocketAddr) -> io::Result<HttpListener> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        Ok(HttpListener {
            listener,
            unread: PendingCaps::new(MAX_UNREAD_PER_SOURCE, MAX_UNREAD),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves connections until `stop` is set, each on a thread of its own that reads
    /// its request and answers it with `handler`. `refused` hears of each connection
    /// turned away by the caps.
    pub fn run(&self, stop: &AtomicBool, handler: &Handler, refused: &dyn Fn(SocketAddr, Crowded)) {
        let mut pfd = libc::pollfd {
            fd: self.listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        while !stop.load(Ordering::Relaxed) {
            pfd.revents = 0;
            // SAFETY: `pfd` is one valid pollfd, and one is the count given.
            let rc = unsafe { libc::poll(&mut pfd, 1, STOP_POLL.as_millis() as libc::c_int) };
            if rc <= 0 {
                continue;
            }
            match self.listener.accept() {
                Ok((sock, peer)) => match self.unread.claim(peer.ip()) {
                    Ok(slot) => serve(sock, slot, handler.clone()),
                    Err(crowded) => {
                        refused(peer, crowded);
                        refuse(sock, crowded);
                    }
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Out of descriptors, or the connection went before it was taken: wait
                // and go on, as a server must.
                Err(_) => std::thread::sleep(ACCEPT_RETRY),
            }
        }
    }
}

/// Reads and answers `sock`'s request on a thread of its own. The thread holds `slot`
/// until the request is read.
fn serve(sock: TcpStream, slot: PendingSlot, handler: Handler) {
    let connection = move || {
        let mut sock = sock;
        // Linux's accept() does not pass the listener's O_NONBLOCK on: the socket blocks,
        // within the read time-outs `read_request` sets.
        let read = read_request(&mut sock, Instant::now() + HEAD_TIMEOUT);
        drop(slot);
        match read {
            Ok(request) => respond(sock, &handler(request)),
            Err(unread) => {
                if let Some(answer) = unread.answer() {
                    respond(sock, &answer);
                }
            }
        }
    };
    // A thread that cannot start takes the connection with it, closed.
    let _ = std::thread::Builder::new()
        .name("fperf-scrape".into())
        .spawn(connection);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connected pair on loopback: (client, server side).
    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        (client, server)
    }

    fn read_after(sent: &[u8], within: Duration) -> Result<Request, Unread> {
        let (mut client, mut server) = pair();
        client.write_all(sent).expect("send");
        read_request(&mut server, Instant::now() + within)
    }

    #[test]
    fn a_request_in_pieces_is_read_whole_with_its_headers() {
        let (mut client, mut server) = pair();
        let sender = std::thread::spawn(move || {
            for piece in [
                &b"GET /probe?target=h"[..],
                b":1 HTTP/1.1\r\nX-Prometheus-Scrape",
            ] {
                client.write_all(piece).expect("send");
                std::thread::sleep(Duration::from_millis(20));
            }
            client
                .write_all(b"-Timeout-Seconds: 9.5\r\nHost: x\r\n\r\n")
                .expect("send");
            client
        });
        let request =
            read_request(&mut server, Instant::now() + Duration::from_secs(5)).expect("a request");
        sender.join().expect("sender");
        assert_eq!(request.method, "GET");
        assert_eq!(request.target, "/probe?target=h:1");
        assert_eq!(
            request.header("x-prometheus-scrape-timeout-seconds"),
            Some("9.5")
        );
        assert_eq!(request.header("Accept"), None);
    }

    #[test]
    fn what_is_not_a_bounded_http_request_is_named() {
        let garbage = read_after(b"\x16\x03\x01\x02\x00\x01\r\n\r\n", Duration::from_secs(5));
        assert!(matches!(garbage, Err(Unread::Malformed)), "{garbage:?}");

        let mut long = b"GET /".to_vec();
        long.extend(std::iter::repeat(b'a').take(MAX_HEAD));
        let too_long = read_after(&long, Duration::from_secs(5));
        assert!(matches!(too_long, Err(Unread::TooLarge)), "{too_long:?}");

        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend(format!("H{i}: v\r\n").bytes());
        }
        many.extend(b"\r\n");
        let too_many = read_after(&many, Duration::from_secs(5));
        assert!(matches!(too_many, Err(Unread::TooLarge)), "{too_many:?}");

        let started = Instant::now();
        let silent = read_after(b"GET / HTTP/1.1\r\n", Duration::from_millis(200));
        assert!(matches!(silent, Err(Unread::TimedOut)), "{silent:?}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn an_answer_carries_its_length_and_closes_the_connection() {
        let (mut client, server) = pair();
        respond(server, &Response::text(429, "busy\n"));
        let mut answer = String::new();
        client.read_to_string(&mut answer).expect("read");
        assert_eq!(
            answer,
            "HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain; charset=utf-8\r\n\
             Content-Length: 5\r\nConnection: close\r\n\r\nbusy\n"
        );
    }
}
