//! What the stats keep between requests, as the kubelet keeps it, so that a request reads only
//! the cgroups and `/proc`: the runtime's numbers (CRI `ListContainerStats` for the writable
//! layers, `ListPodSandboxStats` for the pods' networks, `ImageFsInfo`) sampled every
//! [`HOUSEKEEPING_INTERVAL`] (cAdvisor's housekeeping in the kubelet) while someone asks for
//! stats ([`IDLE_AFTER`]), and the disk use of the
//! pods' directories walked in the background: each container's log directory every
//! housekeeping, each emptyDir volume every `--volume-stats-agg-period` (the kubelet's
//! `fsResourceAnalyzer`; zero: volumes are not measured). Every cached number keeps the time it
//! was read. CPU and memory are never cached.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use super::shape::Disk;
use super::summary::Time;
use crate::cri::{ImageFs, api};

/// How often the runtime's numbers are sampled and the log directories walked (cAdvisor's
/// default `--housekeeping-interval`).
pub const HOUSEKEEPING_INTERVAL: Duration = Duration::from_secs(10);

/// Housekeeping pauses when nobody has asked for stats this long (metrics-server scrapes every
/// 60 s by default), so a node nobody scrapes makes no stats calls to its runtime; the next
/// request finds the sample stale and takes one itself.
pub const IDLE_AFTER: Duration = Duration::from_secs(180);

/// A runtime sample older than this is taken again by the request that finds it (after a pause,
/// or when housekeeping falls behind).
pub const STALE_AFTER: Duration = Duration::from_secs(2 * HOUSEKEEPING_INTERVAL.as_secs());

/// Does housekeeping run now: has anyone asked within [`IDLE_AFTER`]?
pub fn wanted(last_asked: Option<std::time::Instant>, now: std::time::Instant) -> bool {
    last_asked.is_some_and(|t| now.saturating_duration_since(t) < IDLE_AFTER)
}

/// Is a sample taken `at` still good `now`?
pub fn fresh(at: jiff::Timestamp, now: jiff::Timestamp) -> bool {
    let age_ms = now.as_millisecond() - at.as_millisecond();
    age_ms < STALE_AFTER.as_millis() as i64
}

/// The runtime's numbers at one time.
#[derive(Debug, Clone, Default)]
pub struct RuntimeSample {
    /// When the calls were made.
    pub at: jiff::Timestamp,
    /// By container ID.
    pub containers: HashMap<String, api::ContainerStats>,
    /// By pod UID.
    pub networks: HashMap<String, api::NetworkUsage>,
    pub image_fs: Option<ImageFs>,
}

/// A directory's measured use and when it was walked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measured {
    pub at: Time,
    pub used: Disk,
}

/// A directory the summary reports, and how often it is walked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub dir: PathBuf,
    pub period: Duration,
}

/// The directories to walk at `now`: those never measured, or last measured `period` or more
/// ago. Pure.
pub fn due(wanted: &[Wanted], have: &HashMap<PathBuf, Measured>, now: jiff::Timestamp) -> Vec<PathBuf> {
    wanted
        .iter()
        .filter(|w| match have.get(&w.dir) {
            None => true,
            Some(m) => {
                let age = now.duration_since(m.at.0);
                age.is_negative() || age.unsigned_abs() >= w.period
            }
        })
        .map(|w| w.dir.clone())
        .collect()
}

/// `have` with `walked` merged in and what is no longer wanted (a pod gone, a volume's period
/// turned off) dropped.
pub fn merge(have: &mut HashMap<PathBuf, Measured>, wanted: &[Wanted], walked: Vec<(PathBuf, Measured)>) {
    have.extend(walked);
    have.retain(|dir, _| wanted.iter().any(|w| &w.dir == dir));
}

#[cfg(test)]
mod tests {
    #[test]
    fn housekeeping_runs_only_while_asked_and_samples_go_stale() {
        let now = std::time::Instant::now();
        let ago = |s: u64| now.checked_sub(Duration::from_secs(s));
        for (name, asked, want) in [
            ("never asked", None, false),
            ("asked just now", ago(0), true),
            ("asked a scrape ago", ago(60), true),
            ("idle for longer than IDLE_AFTER", ago(181), false),
        ] {
            assert_eq!(wanted(asked, now), want, "{name}");
        }
        let t = jiff::Timestamp::from_second(1_000_000).unwrap();
        let later = |s: i64| jiff::Timestamp::from_second(1_000_000 + s).unwrap();
        for (name, now, want) in [
            ("just taken", t, true),
            ("one housekeeping old", later(10), true),
            ("two old", later(20), false),
        ] {
            assert_eq!(fresh(t, now), want, "{name}");
        }
    }

    use super::*;

    fn at(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(s).expect("time")
    }

    #[test]
    fn what_is_due() {
        let w = |d: &str, secs: u64| Wanted { dir: d.into(), period: Duration::from_secs(secs) };
        let m = |s: i64| Measured { at: Time(at(s)), used: (1, 1) };
        let wanted = [w("/logs", 10), w("/vol", 60)];
        // (what was measured when, now, what is due)
        let cases: [(&[(&str, i64)], i64, &[&str]); 6] = [
            (&[], 100, &["/logs", "/vol"]),
            (&[("/logs", 95), ("/vol", 95)], 100, &[]),
            (&[("/logs", 90), ("/vol", 95)], 100, &["/logs"]),
            (&[("/logs", 95), ("/vol", 40)], 100, &["/vol"]),
            (&[("/logs", 95)], 100, &["/vol"]),
            // A clock stepped back: measured "in the future", walked again.
            (&[("/logs", 200), ("/vol", 95)], 100, &["/logs"]),
        ];
        for (have, now, want) in cases {
            let have: HashMap<PathBuf, Measured> =
                have.iter().map(|(d, s)| (PathBuf::from(d), m(*s))).collect();
            let got = due(&wanted, &have, at(now));
            let want: Vec<PathBuf> = want.iter().map(PathBuf::from).collect();
            assert_eq!(got, want, "have {have:?} at {now}");
        }
    }

    #[test]
    fn merge_keeps_only_what_is_wanted() {
        let m = |s: i64, b: u64| Measured { at: Time(at(s)), used: (b, 1) };
        let wanted = [Wanted { dir: "/a".into(), period: HOUSEKEEPING_INTERVAL }];
        let mut have: HashMap<PathBuf, Measured> =
            [(PathBuf::from("/a"), m(1, 1)), (PathBuf::from("/gone"), m(1, 1))].into();
        merge(&mut have, &wanted, vec![(PathBuf::from("/a"), m(2, 5))]);
        assert_eq!(have, [(PathBuf::from("/a"), m(2, 5))].into());
    }
}
