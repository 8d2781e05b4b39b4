//! Parsing Kubernetes resource quantities (`500m`, `1.5`, `128Mi`, `1G`, `1e3`) into the
//! integer units CRI needs: milli-units for CPU, bytes for memory.

/// The value of `q` times 1000 (milli-units), rounded up as the API server rounds CPU.
pub fn parse_milli(q: &str) -> Option<i64> {
    let (num, mult) = split(q)?;
    Some((num * mult * 1000.0).ceil() as i64)
}

/// The value of `q` in base units (bytes for memory), rounded up.
pub fn parse_units(q: &str) -> Option<i64> {
    let (num, mult) = split(q)?;
    Some((num * mult).ceil() as i64)
}

fn split(q: &str) -> Option<(f64, f64)> {
    let q = q.trim();
    let suffixes: [(&str, f64); 14] = [
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
    ];
    for (s, mult) in suffixes {
        if let Some(n) = q.strip_suffix(s) {
            return n.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0).map(|v| (v, mult));
        }
    }
    if let Some(n) = q.strip_suffix('E') {
        return n.parse::<f64>().ok().map(|v| (v, 1e18));
    }
    q.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0).map(|v| (v, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases() {
        assert_eq!(parse_milli("500m"), Some(500));
        assert_eq!(parse_milli("1"), Some(1000));
        assert_eq!(parse_milli("0.25"), Some(250));
        assert_eq!(parse_units("128Mi"), Some(128 * 1024 * 1024));
        assert_eq!(parse_units("1G"), Some(1_000_000_000));
        assert_eq!(parse_units("1e3"), Some(1000));
        assert_eq!(parse_units("64k"), Some(64_000));
        assert_eq!(parse_units("x"), None);
        assert_eq!(parse_units("-1"), None);
    }
}
