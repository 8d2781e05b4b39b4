//! Kubernetes resource quantities (`500m`, `1.5`, `128Mi`, `1e3`, `2G`): parsing and exact
//! integer conversion, for validating `resources` and `emptyDir.sizeLimit` in manifests and for turning
//! limits into CRI values elsewhere. Follows apimachinery's `resource.Quantity` grammar:
//! `[+-]digits[.digits]` then one suffix: binary SI (`Ki`..`Ei`), decimal SI (`n u m k M G T P E`)
//! or a decimal exponent (`e3`, `E-2`).

use std::cmp::Ordering;

/// A parsed quantity: `mantissa × 10^exp10 × 2^exp2`, exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    mantissa: i128,
    exp10: i32,
    exp2: u32,
}

impl Quantity {
    /// Parses a quantity string; `None` if it does not follow the grammar or is out of range.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        let (negative, rest) = match s.as_bytes().first()? {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let num_len = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(num_len);
        let (int, frac) = number.split_once('.').unwrap_or((number, ""));
        if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
            return None;
        }
        let mut mantissa: i128 = 0;
        for c in int.bytes().chain(frac.bytes()) {
            mantissa = mantissa.checked_mul(10)?.checked_add(i128::from(c - b'0'))?;
        }
        let frac_len = i32::try_from(frac.len()).ok()?;
        let (exp10, exp2) = match suffix {
            "" => (0, 0),
            "n" => (-9, 0),
            "u" => (-6, 0),
            "m" => (-3, 0),
            "k" => (3, 0),
            "M" => (6, 0),
            "G" => (9, 0),
            "T" => (12, 0),
            "P" => (15, 0),
            "E" => (18, 0),
            "Ki" => (0, 10),
            "Mi" => (0, 20),
            "Gi" => (0, 30),
            "Ti" => (0, 40),
            "Pi" => (0, 50),
            "Ei" => (0, 60),
            _ => (exponent(suffix)?, 0),
        };
        let mantissa = if negative { -mantissa } else { mantissa };
        Some(Self { mantissa, exp10: exp10.checked_sub(frac_len)?, exp2 })
    }

    /// True for values below zero.
    pub fn is_negative(&self) -> bool {
        self.mantissa < 0
    }

    /// The value in whole units, rounded up (as `Quantity.Value()`); `None` on overflow.
    pub fn value(&self) -> Option<i128> {
        self.scaled(0)
    }

    /// The value in thousandths, rounded up (as `Quantity.MilliValue()`); `None` on overflow.
    pub fn milli_value(&self) -> Option<i128> {
        self.scaled(3)
    }

    /// `value × 10^shift`, rounded up.
    fn scaled(&self, shift: i32) -> Option<i128> {
        let exp = self.exp10.checked_add(shift)?;
        let base = self.mantissa.checked_mul(1i128.checked_shl(self.exp2)?)?;
        if exp >= 0 {
            base.checked_mul(10i128.checked_pow(u32::try_from(exp).ok()?)?)
        } else {
            let Some(den) = 10i128.checked_pow(exp.unsigned_abs()) else {
                // Smaller than any representable unit: rounds up to 1 (or down to 0).
                return Some(i128::from(base > 0));
            };
            Some(div_ceil(base, den))
        }
    }

    /// Compares two quantities exactly when both fit, at nano precision otherwise.
    pub fn cmp_value(&self, other: &Self) -> Option<Ordering> {
        Some(self.scaled(9)?.cmp(&other.scaled(9)?))
    }
}

fn div_ceil(num: i128, den: i128) -> i128 {
    let q = num / den;
    if num % den > 0 { q + 1 } else { q }
}

/// A decimal exponent suffix `e<int>` or `E<int>`.
fn exponent(suffix: &str) -> Option<i32> {
    let rest = suffix.strip_prefix(['e', 'E'])?;
    let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    rest.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantity_cases() {
        let cases: [(&str, Option<i128>, Option<i128>); 16] = [
            ("1", Some(1), Some(1000)),
            ("500m", Some(1), Some(500)),
            ("0.5", Some(1), Some(500)),
            ("1.5", Some(2), Some(1500)),
            ("128Mi", Some(128 << 20), Some((128 << 20) * 1000)),
            ("1Gi", Some(1 << 30), Some((1 << 30) * 1000)),
            ("2G", Some(2_000_000_000), Some(2_000_000_000_000)),
            ("1e3", Some(1000), Some(1_000_000)),
            ("1E-3", Some(1), Some(1)),
            ("100n", Some(1), Some(1)),
            ("+4k", Some(4000), Some(4_000_000)),
            ("-1", Some(-1), Some(-1000)),
            (".5", Some(1), Some(500)),
            ("0", Some(0), Some(0)),
            ("1Ki", Some(1024), Some(1_024_000)),
            ("250u", Some(1), Some(1)),
        ];
        for (s, value, milli) in cases {
            let q = Quantity::parse(s).unwrap_or_else(|| panic!("{s} should parse"));
            assert_eq!(q.value(), value, "value of {s}");
            assert_eq!(q.milli_value(), milli, "milli of {s}");
        }
        for bad in ["", "m", "1.2.3", "1Kb", "1 Gi", "abc", "1e", "1e+", "--1", "."] {
            assert_eq!(Quantity::parse(bad), None, "{bad:?} must not parse");
        }
        let (a, b) = (Quantity::parse("500m"), Quantity::parse("1"));
        assert_eq!(a.and_then(|a| a.cmp_value(&b?)), Some(Ordering::Less));
    }
}
