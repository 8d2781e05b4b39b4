//! What the stats keep between requests, as the kubelet keeps it, so that a request reads only
//! the cgroups and `/proc`: the runtime's numbers (CRI `ListContainerStats` for the writable
//! layers, `ListPodSandboxStats` for the pods' networks, `ImageFsInfo`) sampled every
//! [`HOUSEKEEPING_INTERVAL`] (cAdvisor's housekeeping in the kubelet), and the disk use of the
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
