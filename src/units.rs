//! Human-readable quantities for messages and reports.

pub fn bytes(b: u128) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

pub fn seconds(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.1} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{s:.3} s")
    }
}

/// A memory size as a problem file or option gives it: bytes, or a string such as
/// "8GiB", "512 MiB", "1.5GB".
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(untagged)]
pub enum ByteSize {
    Bytes(i64),
    Text(String),
}

impl ByteSize {
    /// The size in bytes, or an error naming `field`.
    pub fn bytes(&self, field: &str) -> crate::error::Result<u64> {
        let bad = |v: &dyn std::fmt::Display| {
            crate::error::Error::invalid(
                field,
                v,
                "give a positive size such as 8GiB, 512MiB, 1.5GB or a number of bytes",
            )
        };
        match self {
            ByteSize::Bytes(b) if *b > 0 => Ok(*b as u64),
            ByteSize::Bytes(b) => Err(bad(b)),
            ByteSize::Text(t) => parse_bytes(t).ok_or_else(|| bad(&format!("\"{t}\""))),
        }
    }
}

/// "8GiB" → 8·2³⁰; decimal (kB, MB, GB, TB) and binary (KiB, MiB, GiB, TiB) units.
pub fn parse_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().ok()?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024f64.powi(2),
        "gib" => 1024f64.powi(3),
        "tib" => 1024f64.powi(4),
        _ => return None,
    };
    let bytes = value * scale;
    (bytes >= 1.0 && bytes.is_finite()).then_some(bytes as u64)
}
