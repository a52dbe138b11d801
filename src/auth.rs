//! Shared-key authentication: an HMAC-SHA256 challenge-response over the control stream.
//!
//! When the server holds a key it answers `Hello` with [`crate::control::Message::AuthChallenge`]
//! carrying a fresh 32-byte server nonce. The client draws its own nonce and answers
//! [`crate::control::Message::AuthResponse`] with `HMAC(key, "fperf-auth-v1 client" ‖ Ns ‖ Nc)`. The
//! server checks it in constant time (`hmac`'s `verify_slice`) and proves it holds the
//! key too with [`crate::control::Message::AuthConfirm`] = `HMAC(key, "fperf-auth-v1 server" ‖ Ns ‖ Nc)`.
//!
//! Invariants:
//! - a captured exchange cannot be replayed: every connection gets a new server nonce,
//!   so an old response never verifies;
//! - the session is bound to the exchange: the session id that data connections present
//!   in `DataHello` is [`bind_session`] of the public id, which only holders of the key
//!   can compute, so a data connection cannot be attached by someone who only saw the
//!   control stream;
//! - the key itself never crosses the network and never appears in `Debug` output.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::path::Path;
use thiserror::Error;

type HmacSha256 = Hmac<Sha256>;

/// Bytes of each nonce.
pub const NONCE_LEN: usize = 32;
/// The environment variable that may hold the key itself (instead of `--auth-key FILE`).
pub const KEY_ENV: &str = "FPERF_AUTH_KEY";
/// Largest key file read, so a mistyped path to a huge file fails quickly.
const MAX_KEY_FILE: u64 = 64 << 10;

const CLIENT_LABEL: &[u8] = b"fperf-auth-v1 client";
const SERVER_LABEL: &[u8] = b"fperf-auth-v1 server";
const SESSION_LABEL: &[u8] = b"fperf-auth-v1 session";

/// Why authentication failed.
#[derive(Debug, Error)]
pub enum AuthError {
    #[error("cannot read the key file {path}: {error}")]
    KeyFile { path: String, error: std::io::Error },
    #[error("the key {0} is empty")]
    EmptyKey(String),
    #[error("the key file {0} is larger than 64 KiB; is it the right file?")]
    KeyTooLarge(String),
    #[error("authentication failed: the client's key does not match the server's")]
    WrongKey,
    #[error("authentication failed: the server's proof does not match this client's key")]
    ServerWrongKey,
    #[error("malformed authentication message: {0}")]
    Malformed(&'static str),
    #[error("cannot draw a random nonce: {0}")]
    Entropy(String),
}

/// A shared secret, held as a keyed HMAC state; never printed.
#[derive(Clone)]
pub struct AuthKey(HmacSha256);

impl std::fmt::Debug for AuthKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthKey(..)")
    }
}

impl AuthKey {
    /// A key from raw bytes; trailing line breaks (from `echo` or an editor) are not
    /// part of it.
    pub fn new(bytes: &[u8], origin: &str) -> Result<AuthKey, AuthError> {
        let mut key = bytes.to_vec();
        while matches!(key.last(), Some(b'\n' | b'\r')) {
            key.pop();
        }
        if key.is_empty() {
            return Err(AuthError::EmptyKey(origin.to_string()));
        }
        HmacSha256::new_from_slice(&key)
            .map(AuthKey)
            .map_err(|_| AuthError::EmptyKey(origin.to_string()))
    }

    /// Reads the key from `path` (the whole file, trailing line breaks dropped).
    pub fn from_file(path: &Path) -> Result<AuthKey, AuthError> {
        use std::io::Read;
        let shown = path.display().to_string();
        let err = |error| AuthError::KeyFile {
            path: shown.clone(),
            error,
        };
        let file = std::fs::File::open(path).map_err(err)?;
        let mut bytes = Vec::new();
        file.take(MAX_KEY_FILE + 1)
            .read_to_end(&mut bytes)
            .map_err(err)?;
        if bytes.len() as u64 > MAX_KEY_FILE {
            return Err(AuthError::KeyTooLarge(shown));
        }
        AuthKey::new(&bytes, &format!("file {shown}"))
    }

    /// The key from `--auth-key FILE` if given, else from [`KEY_ENV`] if set.
    pub fn from_cli(file: Option<&Path>) -> Result<Option<AuthKey>, AuthError> {
        if let Some(path) = file {
            return AuthKey::from_file(path).map(Some);
        }
        match std::env::var_os(KEY_ENV) {
            Some(v) => {
                use std::os::unix::ffi::OsStrExt;
                AuthKey::new(v.as_bytes(), &format!("in ${KEY_ENV}")).map(Some)
            }
            None => Ok(None),
        }
    }

    fn mac(&self, label: &[u8], exchange: &Exchange) -> HmacSha256 {
        let mut mac = self.0.clone();
        mac.update(label);
        mac.update(&exchange.server_nonce);
        mac.update(&exchange.client_nonce);
        mac
    }
}

/// The two nonces of one authenticated control connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exchange {
    pub server_nonce: [u8; NONCE_LEN],
    pub client_nonce: [u8; NONCE_LEN],
}

/// A fresh random nonce.
pub fn nonce() -> Result<[u8; NONCE_LEN], AuthError> {
    let mut n = [0u8; NONCE_LEN];
    getrandom::getrandom(&mut n).map_err(|e| AuthError::Entropy(e.to_string()))?;
    Ok(n)
}

/// The client's proof for `exchange`.
pub fn client_proof(key: &AuthKey, exchange: &Exchange) -> [u8; 32] {
    key.mac(CLIENT_LABEL, exchange)
        .finalize()
        .into_bytes()
        .into()
}

/// The server's proof for `exchange`.
pub fn server_proof(key: &AuthKey, exchange: &Exchange) -> [u8; 32] {
    key.mac(SERVER_LABEL, exchange)
        .finalize()
        .into_bytes()
        .into()
}

/// The session id data connections present, derived from the public id announced in
/// `Welcome` and the authenticated exchange.
pub fn bind_session(key: &AuthKey, exchange: &Exchange, public_session: u64) -> u64 {
    let mut mac = key.mac(SESSION_LABEL, exchange);
    mac.update(&public_session.to_be_bytes());
    let tag = mac.finalize().into_bytes();
    let mut id = [0u8; 8];
    id.copy_from_slice(&tag[..8]);
    u64::from_be_bytes(id)
}

/// Server side: checks the client's answer (`client_nonce` and `mac`, in hex) to the
/// challenge `server_nonce`, in constant time; the exchange it proves.
pub fn verify_client(
    key: &AuthKey,
    server_nonce: [u8; NONCE_LEN],
    client_nonce: &str,
    mac: &str,
) -> Result<Exchange, AuthError> {
    let exchange = Exchange {
        server_nonce,
        client_nonce: from_hex(client_nonce).ok_or(AuthError::Malformed("client nonce"))?,
    };
    let mac: [u8; 32] = from_hex(mac).ok_or(AuthError::Malformed("client proof"))?;
    key.mac(CLIENT_LABEL, &exchange)
        .verify_slice(&mac)
        .map_err(|_| AuthError::WrongKey)?;
    Ok(exchange)
}

/// Client side: checks the server's proof (`mac`, in hex) for `exchange`, in constant
/// time.
pub fn verify_server(key: &AuthKey, exchange: &Exchange, mac: &str) -> Result<(), AuthError> {
    let mac: [u8; 32] = from_hex(mac).ok_or(AuthError::Malformed("server proof"))?;
    key.mac(SERVER_LABEL, exchange)
        .verify_slice(&mac)
        .map_err(|_| AuthError::ServerWrongKey)
}

/// Lower-case hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

/// Exactly `N` bytes from hex text, or `None`.
pub fn from_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digits = text.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (o, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        *o = (hi * 16 + lo) as u8;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> AuthKey {
        AuthKey::new(s.as_bytes(), "test").expect("key")
    }

    fn exchange(a: u8, b: u8) -> Exchange {
        Exchange {
            server_nonce: [a; NONCE_LEN],
            client_nonce: [b; NONCE_LEN],
        }
    }

    #[test]
    fn proofs_depend_on_key_nonces_and_side() {
        let (k, x) = (key("secret"), exchange(1, 2));
        let p = client_proof(&k, &x);
        assert_eq!(p, client_proof(&key("secret\n"), &x), "newline is trimmed");
        assert_ne!(p, client_proof(&key("other"), &x));
        assert_ne!(p, client_proof(&k, &exchange(3, 2)), "server nonce");
        assert_ne!(p, client_proof(&k, &exchange(1, 3)), "client nonce");
        assert_ne!(p, server_proof(&k, &x), "sides differ");
        assert_ne!(bind_session(&k, &x, 7), 7);
        assert_ne!(bind_session(&k, &x, 7), bind_session(&key("other"), &x, 7));
    }

    #[test]
    fn empty_keys_are_refused() {
        assert!(AuthKey::new(b"\n", "x").is_err());
        assert!(AuthKey::new(b"", "x").is_err());
        assert_eq!(format!("{:?}", key("hunter2")), "AuthKey(..)");
    }

    #[test]
    fn hex_roundtrips_and_rejects_junk() {
        let b = [0u8, 1, 0xab, 0xff];
        assert_eq!(to_hex(&b), "0001abff");
        assert_eq!(from_hex::<4>("0001abff"), Some(b));
        assert_eq!(from_hex::<4>("0001ABFF"), Some(b));
        assert_eq!(from_hex::<4>("0001abf"), None);
        assert_eq!(from_hex::<4>("0001abfg"), None);
        assert_eq!(from_hex::<2>("é1"), None);
        assert_eq!(from_hex::<4>("+001abff"), None);
    }
}
