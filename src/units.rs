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
#[derive(Debug, Clone, PartialEq)]
pub enum ByteSize {
    Bytes(i64),
    Text(String),
}

impl<'de> serde::Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ByteSize;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a size such as \"8GiB\" or \"512MiB\", or a number of bytes")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ByteSize, E> {
                Ok(ByteSize::Bytes(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize::Bytes(v.min(i64::MAX as u64) as i64))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ByteSize, E> {
                Ok(ByteSize::Text(v.to_string()))
            }
        }
        d.deserialize_any(Visitor)
    }
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
    (1.0..9.2e18).contains(&bytes).then_some(bytes as u64)
}

/// Text as a message shows it: control characters escaped, at most 120 characters.
pub fn clip(s: &str) -> String {
    let mut out: String = s.chars().take(120).flat_map(char::escape_debug).collect();
    if s.chars().count() > 120 {
        out.push('…');
    }
    // escape_debug also escapes quotes, which messages show as they are.
    out.replace("\\\"", "\"").replace("\\'", "'")
}

/// A number as a message shows it: plain where short, in exponent form otherwise.
pub fn num(v: f64) -> String {
    let a = v.abs();
    if v == 0.0 || !v.is_finite() || (1e-4..1e15).contains(&a) {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

/// The number of points of a grid, or an error naming `field` when the product does not
/// fit in memory addresses (no machine could hold it).
pub fn checked_cells(field: &str, shape: &[usize], bytes_per_point: usize) -> crate::Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |a, &n| a.checked_mul(n))
        .filter(|&c| {
            c.checked_mul(bytes_per_point.max(1))
                .is_some_and(|b| b <= isize::MAX as usize)
        })
        .ok_or_else(|| {
            crate::Error::invalid(
                field,
                format!("{shape:?}"),
                "the grid has more points than any machine can address; use a smaller grid",
            )
        })
}

/// A message as the terminal should get it: control characters escaped, lines kept.
pub fn printable(s: &str) -> String {
    s.split('\n')
        .map(|l| {
            l.chars()
                .flat_map(|c| match c {
                    '\t' => vec!['\t'],
                    c if c.is_control() => c.escape_default().collect(),
                    c => vec![c],
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}
