//! The derived numbers of the stats: the CPU rate from two cumulative samples (as the kubelet's
//! CRI stats provider keeps one previous sample per container), the working set and the
//! memory the node has left, which the eviction signal `memory.available` is. Pure.

use std::collections::HashMap;

/// Two samples closer than this give the previous rate back instead of a new, noisy one
/// (the kubelet's cadvisor samples every 10–15 s; scrapers may come much closer together).
pub const MIN_WINDOW_NS: i64 = 1_000_000_000;
/// A key not seen for this long is forgotten (a removed container's, a gone pod's).
pub const FORGET_AFTER_NS: i64 = 5 * 60 * 1_000_000_000;

/// A cumulative CPU reading: core-nanoseconds used by `at_ns` (Unix ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuSample {
    pub at_ns: i64,
    pub usage_ns: u64,
}

/// CPU cores in use between two readings, in nano-cores (1e9 = one core busy all the time);
/// `None` when the counter went back (a new cgroup under the same key) or time did not advance.
pub fn nano_cores(prev: CpuSample, cur: CpuSample) -> Option<u64> {
    let elapsed = cur.at_ns.checked_sub(prev.at_ns).filter(|e| *e > 0)?;
    let used = cur.usage_ns.checked_sub(prev.usage_ns)?;
    Some((used as f64 / elapsed as f64 * 1e9) as u64)
}

/// The working set: usage less the inactive file cache (cadvisor's, which the kubelet's
/// memory.available and metrics-server both use); never below zero.
pub fn working_set(usage: u64, inactive_file: u64) -> u64 {
    usage.saturating_sub(inactive_file)
}

/// What memory the node has left as the kubelet's eviction manager computes `memory.available`
/// (and the summary's node `availableBytes`): capacity less the working set, never below zero.
pub fn memory_available(capacity: u64, working_set: u64) -> u64 {
    capacity.saturating_sub(working_set)
}

/// The previous sample of each key (a container ID, a cgroup), and the rate it gave.
#[derive(Debug, Default)]
pub struct Rates {
    prev: HashMap<String, (CpuSample, Option<u64>)>,
}

impl Rates {
    /// The rate of `key` between its previous sample and `cur` (see [`nano_cores`]). The first
    /// sample of a key has none. A sample within [`MIN_WINDOW_NS`] of the previous one gives the
    /// previous rate and is not kept, so the next window is measured from the older sample.
    pub fn observe(&mut self, key: &str, cur: CpuSample) -> Option<u64> {
        let Some(&(prev, rate)) = self.prev.get(key) else {
            self.prev.insert(key.to_string(), (cur, None));
            return None;
        };
        if cur.usage_ns < prev.usage_ns || cur.at_ns < prev.at_ns {
            self.prev.insert(key.to_string(), (cur, None));
            return None;
        }
        if cur.at_ns - prev.at_ns < MIN_WINDOW_NS {
            return rate.or_else(|| nano_cores(prev, cur));
        }
        let rate = nano_cores(prev, cur);
        self.prev.insert(key.to_string(), (cur, rate));
        rate
    }

    /// Forgets the keys last sampled more than [`FORGET_AFTER_NS`] before `now_ns`.
    pub fn forget_stale(&mut self, now_ns: i64) {
        self.prev.retain(|_, (s, _)| now_ns - s.at_ns < FORGET_AFTER_NS);
    }

    pub fn len(&self) -> usize {
        self.prev.len()
    }

    pub fn is_empty(&self) -> bool {
        self.prev.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    fn at(secs: i64, usage_ns: u64) -> CpuSample {
        CpuSample { at_ns: secs * S, usage_ns }
    }

    #[test]
    fn nano_cores_of_two_samples() {
        for (prev, cur, want) in [
            (at(0, 0), at(10, 5_000_000_000), Some(500_000_000)),
            (at(0, 0), at(2, 4_000_000_000), Some(2_000_000_000)),
            (at(5, 100), at(5, 200), None),
            (at(5, 100), at(4, 200), None),
            (at(0, 200), at(1, 100), None),
            (at(0, 7), at(10, 7), Some(0)),
        ] {
            assert_eq!(nano_cores(prev, cur), want, "{prev:?} -> {cur:?}");
        }
    }

    #[test]
    fn memory_derivations() {
        for (usage, inactive, capacity, ws, available) in
            [(100, 30, 1000, 70, 930), (100, 130, 1000, 0, 1000), (0, 0, 0, 0, 0), (500, 0, 400, 500, 0)]
        {
            assert_eq!(working_set(usage, inactive), ws);
            assert_eq!(memory_available(capacity, working_set(usage, inactive)), available);
        }
    }

    /// A sequence of samples of one key and the rate each gives.
    #[test]
    fn rates_follow_the_kubelets_cache() {
        let mut r = Rates::default();
        let steps = [
            (at(0, 0), None, "first sample: no rate"),
            (at(10, 10 * S as u64), Some(S as u64), "one core over 10 s"),
            (at(10, 10 * S as u64 + 1), Some(S as u64), "same instant: the previous rate"),
            (
                CpuSample { at_ns: 10 * S + S / 2, usage_ns: 11 * S as u64 },
                Some(S as u64),
                "within the window",
            ),
            (at(12, 11 * S as u64), Some(S as u64 / 2), "measured from the kept sample at 10 s"),
            (at(20, 5), None, "counter went back: a new cgroup"),
            (at(30, 5 + 5 * S as u64), Some(S as u64 / 2), "half a core from the reset"),
        ];
        for (cur, want, why) in steps {
            assert_eq!(r.observe("c", cur), want, "{why}");
        }
        let mut fresh = Rates::default();
        fresh.observe("c", at(0, 0));
        assert_eq!(
            fresh.observe("c", CpuSample { at_ns: S / 2, usage_ns: S as u64 / 4 }),
            Some(S as u64 / 2),
            "no rate yet: the short window's"
        );
        r.observe("old", at(0, 0));
        r.forget_stale(31 * S + FORGET_AFTER_NS - 2 * S);
        assert_eq!(r.len(), 1, "only the recent key stays");
    }
}
