//! Whom the exporter answers: requests addressed to it, and not made by another site's
//! page in a browser.
//!
//! A page on any site can make a browser on the exporter's host send it requests, and
//! with a name of its own that it points at the exporter's address (DNS rebinding) read
//! the answers too. Such requests name another site: in `Host` (the page's own name),
//! in `Origin`, or in `Sec-Fetch-Site`. A request is answered only when
//! - its `Host`, if it sends one, names the exporter: the address it listens on; a
//!   loopback address or `localhost` when it listens on loopback or on every address;
//!   any IP address when it listens on every address; or a name given with
//!   `--host-name` (on any port: a proxy in front may use its own). A port given with
//!   an address or `localhost` must be the one the exporter listens on.
//! - its `Origin`, if it sends one, is `http://` and such a name (with the port the
//!   exporter listens on, 80 where it names none);
//! - its `Sec-Fetch-Site`, if it sends one, is neither `cross-site` nor `same-site`.

use std::net::{IpAddr, SocketAddr};

/// What a request may be addressed to.
#[derive(Clone, Debug)]
pub struct Guard {
    /// The address the exporter listens on, with its port.
    listen: SocketAddr,
    /// The names given with `--host-name`, without a trailing dot.
    names: Vec<String>,
}

/// Why a request was refused (HTTP 403), in the words of its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    Host,
    Origin,
    FetchSite,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refusal::Host => {
                "the request's Host names neither the address this exporter listens on nor a \
                 name given with --host-name"
            }
            Refusal::Origin => "the request comes from another site's page (Origin)",
            Refusal::FetchSite => "the request comes from another site's page (Sec-Fetch-Site)",
        })
    }
}

impl Guard {
    /// The guard of an exporter listening on `listen`, also known as `names`.
    pub fn new(listen: SocketAddr, names: &[String]) -> Guard {
        Guard {
            listen,
            names: names.iter().map(|n| bare_name(n).to_owned()).collect(),
        }
    }

    /// Whether a request with these headers is answered.
    pub fn check(
        &self,
        host: Option<&str>,
        origin: Option<&str>,
        fetch_site: Option<&str>,
    ) -> Result<(), Refusal> {
        if let Some(host) = host {
            let (name, port) = split_authority(host.trim()).ok_or(Refusal::Host)?;
            if !self.names_us(name, port) {
                return Err(Refusal::Host);
            }
        }
        if let Some(origin) = origin {
            let authority = origin
                .trim()
                .strip_prefix("http://")
                .ok_or(Refusal::Origin)?;
            let (name, port) = split_authority(authority).ok_or(Refusal::Origin)?;
            if !self.names_us(name, Some(port.unwrap_or(80))) {
                return Err(Refusal::Origin);
            }
        }
        if fetch_site.is_some_and(|site| {
            let site = site.trim();
            site.eq_ignore_ascii_case("cross-site") || site.eq_ignore_ascii_case("same-site")
        }) {
            return Err(Refusal::FetchSite);
        }
        Ok(())
    }

    /// Whether `name` (an address or a host name) on `port` (where given) is this
    /// exporter.
    fn names_us(&self, name: &str, port: Option<u16>) -> bool {
        let name = bare_name(name);
        if self.names.iter().any(|n| n.eq_ignore_ascii_case(name)) {
            return true;
        }
        if port.is_some_and(|p| p != self.listen.port()) {
            return false;
        }
        let listen = self.listen.ip().to_canonical();
        let local = listen.is_loopback() || listen.is_unspecified();
        match name.parse::<IpAddr>().map(|ip| ip.to_canonical()) {
            Ok(ip) => ip == listen || listen.is_unspecified() || (local && ip.is_loopback()),
            Err(_) => local && name.eq_ignore_ascii_case("localhost"),
        }
    }
}

/// A name without the trailing dot that makes it fully qualified.
fn bare_name(name: &str) -> &str {
    name.strip_suffix('.').unwrap_or(name)
}

/// `NAME`, `NAME:PORT`, `[IPv6]` or `[IPv6]:PORT` as the name (an IPv6 address without
/// its brackets) and the port, if given; `None` for anything else.
fn split_authority(text: &str) -> Option<(&str, Option<u16>)> {
    let (name, port) = match text.strip_prefix('[') {
        Some(rest) => {
            let (ip, after) = rest.split_once(']')?;
            ip.parse::<std::net::Ipv6Addr>().ok()?;
            match after {
                "" => (ip, None),
                _ => (ip, Some(after.strip_prefix(':')?)),
            }
        }
        None => match text.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (text, None),
        },
    };
    let plausible = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':');
    if name.is_empty() || !name.chars().all(plausible) {
        return None;
    }
    let port = match port {
        None => None,
        Some(port) => Some(port.parse::<u16>().ok()?),
    };
    Some((name, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(listen: &str, names: &[&str]) -> Guard {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        Guard::new(listen.parse().expect("address"), &names)
    }

    fn host(g: &Guard, host: &str) -> bool {
        g.check(Some(host), None, None).is_ok()
    }

    #[test]
    fn host_must_name_the_listening_address_or_a_given_name() {
        let loopback = guard("127.0.0.1:9579", &[]);
        for ok in [
            "127.0.0.1:9579",
            "127.0.0.1",
            "localhost:9579",
            "LOCALHOST",
            "[::1]:9579",
        ] {
            assert!(host(&loopback, ok), "{ok}");
        }
        for refused in [
            "evil.example:9579",
            "127.0.0.1:80",
            "localhost:1",
            "10.0.0.1:9579",
            "127.0.0.1.evil.example",
            "",
            "[::1",
            "a b",
            "localhost:x",
        ] {
            assert_eq!(
                loopback.check(Some(refused), None, None),
                Err(Refusal::Host),
                "{refused}"
            );
        }
        assert!(loopback.check(None, None, None).is_ok(), "no Host at all");

        let public = guard("192.0.2.7:9579", &["metrics.example."]);
        assert!(host(&public, "192.0.2.7:9579"));
        assert!(host(&public, "metrics.example:443"), "behind a proxy");
        assert!(host(&public, "Metrics.Example."));
        assert!(
            !host(&public, "localhost:9579"),
            "not listening on loopback"
        );
        assert!(!host(&public, "198.51.100.1:9579"));

        let wildcard = guard("[::]:9579", &[]);
        for ok in [
            "198.51.100.1:9579",
            "[2001:db8::1]:9579",
            "localhost",
            "[::1]",
        ] {
            assert!(host(&wildcard, ok), "{ok}");
        }
        assert!(!host(&wildcard, "rebound.example:9579"));
    }

    #[test]
    fn another_sites_page_is_refused() {
        let g = guard("127.0.0.1:9579", &[]);
        let origin = |o: &str| g.check(Some("127.0.0.1:9579"), Some(o), None);
        assert_eq!(origin("http://127.0.0.1:9579"), Ok(()));
        assert_eq!(origin("http://localhost:9579"), Ok(()));
        for refused in [
            "http://evil.example",
            "https://127.0.0.1:9579",
            "null",
            "http://127.0.0.1",
            "http://127.0.0.1:9579/x",
        ] {
            assert_eq!(origin(refused), Err(Refusal::Origin), "{refused}");
        }
        let site = |s: &str| g.check(Some("127.0.0.1:9579"), None, Some(s));
        assert_eq!(site("cross-site"), Err(Refusal::FetchSite));
        assert_eq!(site("Same-Site"), Err(Refusal::FetchSite));
        assert_eq!(site("same-origin"), Ok(()));
        assert_eq!(site("none"), Ok(()));
    }
}
