//! Unit formatting for reports.
//!
//! Byte sizes and byte rates are binary (MB = 2^20 B, GB/s = 2^30 B/s), as in the original design;
//! bit rates are decimal (Gbit/s = 10^9 bit/s), as link speeds are quoted.

/// A byte count as users write it: digits, optionally ending in `K`, `M` or `G` (binary,
/// as iperf3 reads them: `128K` = 131072). None if it is not one or overflows.
pub fn parse_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 1 << 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

/// `parse_bytes` for a command-line option that must fit in 32 bits (clap's
/// value parser).
pub fn parse_bytes_u32(text: &str) -> Result<u32, String> {
    let bytes = parse_bytes(text).ok_or_else(|| {
        format!("'{text}' is not a byte count (digits, optionally ending in K, M or G)")
    })?;
    u32::try_from(bytes).map_err(|_| format!("'{text}' is more than {} bytes", u32::MAX))
}

/// `10240MB(10.00GB 10737418240B)`: rounded MB, GB with two decimals, exact bytes, as
/// the original design prints sizes. Under 1 MB that would read `0MB(0.00GB 32B)`, so
/// smaller sizes are `640.0KB(655360B)`, or `32B` under 1 KB.
pub fn size_triplet(bytes: u64) -> String {
    if bytes < 1 << 10 {
        return format!("{bytes}B");
    }
    if bytes < 1 << 20 {
        return format!("{:.1}KB({bytes}B)", bytes as f64 / 1024.0);
    }
    let mb = (bytes as f64 / (1u64 << 20) as f64).round() as u64;
    let gb = bytes as f64 / (1u64 << 30) as f64;
    format!("{mb}MB({gb:.2}GB {bytes}B)")
}

/// Three significant digits, as `30.4`, `3.54`, `354`.
fn three_digits(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A byte count in binary units, three significant digits: `3.54GB`, `812MB`.
pub fn size(bytes: f64) -> String {
    const UNITS: [&str; 4] = ["B", "KB", "MB", "GB"];
    let mut v = bytes.max(0.0);
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{}{}", three_digits(v), UNITS[unit])
}

/// A byte rate in binary units: `3.54GB/s`, `812MB/s`.
pub fn byte_rate(bytes_per_sec: f64) -> String {
    format!("{}/s", size(bytes_per_sec))
}

/// A bit rate in decimal units: `30.4Gbit/s`, `812Mbit/s`.
pub fn bit_rate(bytes_per_sec: f64) -> String {
    const UNITS: [&str; 5] = ["bit/s", "Kbit/s", "Mbit/s", "Gbit/s", "Tbit/s"];
    let mut v = (bytes_per_sec * 8.0).max(0.0);
    let mut unit = 0;
    while v >= 1000.0 && unit + 1 < UNITS.len() {
        v /= 1000.0;
        unit += 1;
    }
    format!("{}{}", three_digits(v), UNITS[unit])
}

/// Bytes per second, zero for an empty interval.
pub fn rate(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / secs
    } else {
        0.0
    }
}

/// Whether `bytes` came in no measurable time (a receiver's one read): no rate can be
/// given for them, and a 0 would read as nothing moved.
pub fn rate_unmeasured(bytes: u64, secs: f64) -> bool {
    bytes > 0 && secs <= 0.0
}

/// [`bit_rate`] of `bytes` over `secs` for a report, `n/a` where [`rate_unmeasured`].
pub fn bit_rate_over(bytes: u64, secs: f64) -> String {
    if rate_unmeasured(bytes, secs) {
        "n/a".to_string()
    } else {
        bit_rate(rate(bytes, secs))
    }
}

/// A packet size as the server header shows it: `32KB` when a whole number of KB.
pub fn pkt_size(bytes: u32) -> String {
    if bytes >= 1024 && bytes % 1024 == 0 {
        format!("{}KB", bytes / 1024)
    } else {
        format!("{bytes}B")
    }
}

/// Parses a rate in bits/s with an optional decimal suffix: `500K`, `100M`, `2.5G`,
/// `1T` (K = 10^3). A trailing `bit/s` or `bps` is accepted.
pub fn parse_rate(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let t = t
        .strip_suffix("bit/s")
        .or_else(|| t.strip_suffix("bps"))
        .unwrap_or(t);
    let (number, scale) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let scale = match c.to_ascii_uppercase() {
                'K' => 1e3,
                'M' => 1e6,
                'G' => 1e9,
                'T' => 1e12,
                _ => {
                    return Err(format!(
                        "unknown rate unit '{c}' in '{text}' (use K, M, G or T)"
                    ))
                }
            };
            (&t[..i], scale)
        }
        _ => (t, 1.0),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a rate such as 100M or 2.5G (bits/s)"))?;
    let bits = value * scale;
    if !bits.is_finite() || bits < 1.0 || bits > u64::MAX as f64 {
        return Err(format!("rate '{text}' is out of range"));
    }
    Ok(bits as u64)
}

/// Parses a `-b` target rate as [`parse_rate`] does, and also `0`: as iperf3's `-b 0`,
/// no target, as fast as possible (returned as 0).
pub fn parse_target_rate(text: &str) -> Result<u64, String> {
    match text.trim().parse::<f64>() {
        Ok(0.0) => Ok(0),
        _ => parse_rate(text),
    }
}

/// A time as users write it seconds, or a number ending in ms, s,
/// sec, m or h (`500ms`, `2s`, `1.5m`), in seconds.
pub fn parse_seconds(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let (number, scale) = [
        ("ms", 0.001),
        ("sec", 1.0),
        ("s", 1.0),
        ("m", 60.0),
        ("h", 3600.0),
    ]
    .iter()
    .find_map(|&(unit, scale)| t.strip_suffix(unit).map(|n| (n, scale)))
    .unwrap_or((t, 1.0));
    let value = number
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| {
            "not a time: give seconds (10, 0.5) or a number with a unit, ms, s, m or h (500ms, \
         2s, 1.5m)"
                .to_string()
        })?;
    if value < 0.0 {
        return Err("a time cannot be negative: give 0 or more seconds (e.g. 10 or 2s)".into());
    }
    Ok(value * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_with_decimal_units() {
        assert_eq!(parse_rate("100M"), Ok(100_000_000));
        assert_eq!(parse_rate("2.5G"), Ok(2_500_000_000));
        assert_eq!(parse_rate("800k"), Ok(800_000));
        assert_eq!(parse_rate("1Gbit/s"), Ok(1_000_000_000));
        assert_eq!(parse_rate("12345"), Ok(12345));
        assert!(parse_rate("0").is_err(), "a cap of 0 is no cap");
        for unlimited in ["0", "0.0", " 0"] {
            assert_eq!(parse_target_rate(unlimited), Ok(0), "{unlimited}");
        }
        assert_eq!(parse_target_rate("10M"), Ok(10_000_000));
        assert!(parse_target_rate("0.1").is_err(), "below 1 bit/s");
        for bad in ["", "M", "fast", "10X", "-1M", "0", "1e30T", "NaN"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn byte_counts_take_binary_suffixes() {
        assert_eq!(parse_bytes("1472"), Some(1472));
        assert_eq!(parse_bytes("128K"), Some(131072));
        assert_eq!(parse_bytes("64k"), Some(65536));
        assert_eq!(parse_bytes("2M"), Some(2 << 20));
        assert_eq!(parse_bytes("1G"), Some(1 << 30));
        for bad in ["", "K", "1.5K", "-1", "12KB", "99999999999999999999G"] {
            assert_eq!(parse_bytes(bad), None, "{bad}");
        }
        assert_eq!(
            parse_bytes_u32("4G").map_err(|e| e.contains("more than")),
            Err(true)
        );
        assert_eq!(parse_bytes_u32("4095M"), Ok(4095 << 20));
    }

    #[test]
    fn seed_figures() {
        assert_eq!(
            size_triplet(10_737_418_240),
            "10240MB(10.00GB 10737418240B)"
        );
        assert_eq!(size_triplet(1_048_576), "1MB(0.00GB 1048576B)");
        assert_eq!(size_triplet(327_680), "320.0KB(327680B)");
        assert_eq!(size_triplet(1023), "1023B");
        assert_eq!(size_triplet(0), "0B");
        // 10 GiB in 2.83 s: 3.53 GiB/s, and 30.4 Gbit/s decimal (not the original design's 28).
        let r = rate(10_737_418_240, 2.83);
        assert_eq!(byte_rate(r), "3.53GB/s");
        assert_eq!(bit_rate(r), "30.4Gbit/s");
        assert_eq!(pkt_size(32768), "32KB");
        assert_eq!(pkt_size(1000), "1000B");
    }

    #[test]
    fn small_rates_pick_smaller_units() {
        assert_eq!(byte_rate(5.0 * 1024.0 * 1024.0), "5.00MB/s");
        assert_eq!(bit_rate(5_000_000.0 / 8.0), "5.00Mbit/s");
        assert_eq!(bit_rate(0.0), "0.00bit/s");
        assert_eq!(rate(10, 0.0), 0.0);
    }
}
