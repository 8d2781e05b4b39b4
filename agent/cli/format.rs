//! Small pure formatters shared by the printers: kubectl's human durations (`AGE`, `LAST SEEN`,
//! `(5m ago)`), its describe timestamps, and the readers of the optional fields of the Pod type.

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// `duration.HumanDuration` from k8s.io/apimachinery: about two significant figures.
pub(crate) fn human_duration(d: SignedDuration) -> String {
    // Go truncates toward zero; up to one second in the future is tolerated as clock skew.
    let seconds = d.as_secs();
    if seconds < -1 {
        return "<invalid>".to_string();
    }
    if seconds < 0 {
        return "0s".to_string();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{}d", hours / 24),
            h => format!("{}d{h}h", hours / 24),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        return match (hours / 24) % 365 {
            0 => format!("{}y", hours / 24 / 365),
            d => format!("{}y{d}d", hours / 24 / 365),
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// kubectl's `translateTimestampSince`: `<unknown>` for a missing time.
pub(crate) fn since(t: Option<Timestamp>, now: Timestamp) -> String {
    match t {
        Some(t) => human_duration(now.duration_since(t)),
        None => "<unknown>".to_string(),
    }
}

/// Go's `time.RFC1123Z` in the given zone, as `describe` prints times.
pub(crate) fn rfc1123z(t: Timestamp, tz: &TimeZone) -> String {
    t.to_zoned(tz.clone()).strftime("%a, %d %b %Y %H:%M:%S %z").to_string()
}

/// The instant of an optional API time.
pub(crate) fn ts(t: Option<&Time>) -> Option<Timestamp> {
    t.map(|t| t.0)
}

/// An optional string, empty when unset (Go's zero value, which the printers compare against).
pub(crate) fn s(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_duration_cases() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (5, "5s"),
            (119, "119s"),
            (120, "2m"),
            (182, "3m2s"),
            (599, "9m59s"),
            (600, "10m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 25 * 60, "3h25m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (48 * 3600, "2d"),
            (51 * 3600, "2d3h"),
            (8 * 86400, "8d"),
            (400 * 86400, "400d"),
            (730 * 86400, "2y"),
            (740 * 86400, "2y10d"),
            (9 * 365 * 86400, "9y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(SignedDuration::from_secs(secs)), want, "{secs}s");
        }
    }

    #[test]
    fn since_and_rfc1123z() {
        let now: Timestamp = "2024-05-06T07:08:09Z".parse().expect("valid timestamp");
        let earlier: Timestamp = "2024-05-06T07:05:07Z".parse().expect("valid timestamp");
        assert_eq!(since(Some(earlier), now), "3m2s");
        assert_eq!(since(None, now), "<unknown>");
        assert_eq!(rfc1123z(earlier, &TimeZone::UTC), "Mon, 06 May 2024 07:05:07 +0000");
    }
}
