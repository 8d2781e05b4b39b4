//! Pure: when a cached service account token must be requested again (the kubelet's
//! `pkg/kubelet/token/token_manager.go`), and what a failed refresh means.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use super::IssuedToken;

/// A token is requested again once it is this old, whatever its lifetime.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// Up to this much earlier, at random, so the pods of a node do not all refresh at once.
pub const MAX_JITTER: Duration = Duration::from_secs(10);

/// A token in the cache, with when it arrived.
#[derive(Debug, Clone)]
pub struct CachedToken {
    pub issued: IssuedToken,
    pub received_at: Timestamp,
}

/// Whether `t` must be requested again at `now`: when 80 % of its lifetime has passed, or it is
/// older than 24 hours, each less `jitter`. The lifetime is counted from when the token arrived
/// (upstream counts it from `expirationTimestamp - expirationSeconds`: the same unless the API
/// server shortened the lifetime, which this way cannot make the agent ask on every resync).
pub fn needs_refresh(t: &CachedToken, now: Timestamp, jitter: Duration) -> bool {
    let jitter = SignedDuration::try_from(jitter).unwrap_or(SignedDuration::ZERO);
    let ttl = t.issued.expires_at.duration_since(t.received_at);
    if ttl <= SignedDuration::ZERO {
        return true;
    }
    let max = SignedDuration::try_from(MAX_TTL).unwrap_or(SignedDuration::MAX);
    let age = now.duration_since(t.received_at);
    if age > max - jitter {
        return true;
    }
    let remaining = t.issued.expires_at.duration_since(now);
    remaining < ttl / 5 + jitter
}

/// Whether the token can no longer be used.
pub fn expired(t: &CachedToken, now: Timestamp) -> bool {
    now >= t.issued.expires_at
}

/// The token to use after a request at `now` that failed with `error` (upstream
/// `GetServiceAccountToken`): the cached one while it is valid, else an error.
pub fn after_failed_refresh(
    cached: Option<&CachedToken>,
    now: Timestamp,
    error: &str,
) -> Result<String, String> {
    match cached {
        None => Err(format!("failed to fetch token: {error}")),
        Some(t) if expired(t, now) => Err(format!("token expired and refresh failed: {error}")),
        Some(t) => Ok(t.issued.token.clone()),
    }
}

/// A random jitter in whole seconds below [`MAX_JITTER`].
pub fn jitter() -> Duration {
    Duration::from_secs(fastrand::u64(..MAX_JITTER.as_secs()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_cases() {
        let t0: Timestamp = "2026-12-01T12:00:00Z".parse().expect("time");
        let s = |n: i64| SignedDuration::from_secs(n);
        let token = |ttl: i64| CachedToken {
            issued: IssuedToken { token: "t".into(), expires_at: t0 + s(ttl) },
            received_at: t0,
        };
        let none = Duration::ZERO;
        let ten = Duration::from_secs(10);
        // (name, lifetime s, seconds after issue, jitter, refresh?)
        let cases = [
            ("fresh", 3607, 60, none, false),
            ("just before 80 %", 3600, 2879, none, false),
            ("past 80 %", 3600, 2881, none, true),
            ("jitter brings it earlier", 3600, 2871, ten, true),
            ("expired", 3600, 4000, none, true),
            ("a year-long token: fresh at 23 h", 365 * 86400, 23 * 3600, none, false),
            ("a year-long token: 24 h old", 365 * 86400, 24 * 3600 + 1, none, true),
            ("already expired on arrival", 0, 0, none, true),
        ];
        for (name, ttl, after, jitter, want) in cases {
            assert_eq!(needs_refresh(&token(ttl), t0 + s(after), jitter), want, "{name}");
        }
    }

    #[test]
    fn failed_refresh_keeps_a_valid_token() {
        let t0: Timestamp = "2026-12-01T12:00:00Z".parse().expect("time");
        let cached = CachedToken {
            issued: IssuedToken { token: "old".into(), expires_at: t0 + SignedDuration::from_secs(100) },
            received_at: t0,
        };
        let cases = [
            ("never fetched", None, 0, Err("failed to fetch token: down".to_string())),
            ("still valid", Some(&cached), 90, Ok("old".to_string())),
            ("expired", Some(&cached), 100, Err("token expired and refresh failed: down".to_string())),
        ];
        for (name, c, after, want) in cases {
            assert_eq!(
                after_failed_refresh(c, t0 + SignedDuration::from_secs(after), "down"),
                want,
                "{name}"
            );
        }
    }
}
