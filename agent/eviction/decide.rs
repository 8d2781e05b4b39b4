//! One eviction cycle's decision, as the kubelet's `synchronize`: which thresholds the
//! observations meet (a met threshold stays met until its minimum reclaim is available again),
//! since when (soft thresholds act only after their grace period), which node conditions that
//! sets (a condition stays for `--eviction-pressure-transition-period` after it was last seen),
//! and which threshold to reclaim for (memory first). Pure: the clock is an argument.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::threshold::{Condition, Signal, Threshold};

/// What one signal's reader saw: what is available of how much.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    pub available: i64,
    pub capacity: i64,
}

pub type Observations = BTreeMap<Signal, Observation>;

/// The thresholds `observations` meet (`thresholdsMet`): the threshold's amount (plus its
/// minimum reclaim when `with_min_reclaim`) is more than what is available. A signal not
/// observed meets nothing.
pub fn met(thresholds: &[Threshold], observations: &Observations, with_min_reclaim: bool) -> Vec<Threshold> {
    thresholds
        .iter()
        .filter(|t| {
            let Some(o) = observations.get(&t.signal) else { return false };
            let mut amount = t.value.amount(o.capacity);
            if with_min_reclaim {
                amount += t.min_reclaim.map_or(0, |m| m.amount(o.capacity));
            }
            amount > o.available
        })
        .cloned()
        .collect()
}

/// What the manager remembers from cycle to cycle.
#[derive(Debug, Default)]
pub struct State {
    /// Thresholds met now, and since when.
    first_observed: Vec<(Threshold, Duration)>,
    /// When each condition was last seen met.
    condition_seen: BTreeMap<Condition, Duration>,
    /// Thresholds met past their grace period at the last cycle, not yet reclaimed.
    acting: Vec<Threshold>,
}

/// One cycle's outcome.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Outcome {
    /// The node's pressure conditions now.
    pub conditions: BTreeSet<Condition>,
    /// The thresholds past their grace period, the one to reclaim for first (memory before the
    /// others, `byEvictionPriority`).
    pub acting: Vec<Threshold>,
}

impl State {
    /// A cycle at `now` (any monotonic clock): `thresholds` against `observations`, with the
    /// pressure transition period `transition`.
    pub fn step(
        &mut self,
        thresholds: &[Threshold],
        observations: &Observations,
        now: Duration,
        transition: Duration,
    ) -> Outcome {
        let mut current = met(thresholds, observations, false);
        // Met before and not yet reclaimed past the minimum: still met.
        for t in met(&self.acting, observations, true) {
            if !current.contains(&t) {
                current.push(t);
            }
        }
        let first_observed: Vec<(Threshold, Duration)> = current
            .into_iter()
            .map(|t| {
                let since = self.first_observed.iter().find(|(o, _)| *o == t).map_or(now, |(_, at)| *at);
                (t, since)
            })
            .collect();
        for (t, _) in &first_observed {
            self.condition_seen.insert(t.signal.condition(), now);
        }
        let conditions: BTreeSet<Condition> = self
            .condition_seen
            .iter()
            .filter(|(_, at)| now.saturating_sub(**at) < transition || **at == now)
            .map(|(c, _)| *c)
            .collect();
        self.condition_seen.retain(|c, _| conditions.contains(c));
        let mut acting: Vec<Threshold> = first_observed
            .iter()
            .filter(|(t, since)| now.saturating_sub(*since) >= t.grace_period)
            .map(|(t, _)| t.clone())
            .collect();
        acting.sort_by_key(|t| t.signal != Signal::MemoryAvailable);
        self.first_observed = first_observed;
        self.acting = acting.clone();
        Outcome { conditions, acting }
    }
}

#[cfg(test)]
mod tests {
    use super::super::threshold::Value;
    use super::*;

    const MI: i64 = 1 << 20;

    fn t(signal: Signal, value: Value, grace: u64, min_reclaim: Option<Value>) -> Threshold {
        Threshold { signal, value, grace_period: Duration::from_secs(grace), min_reclaim }
    }

    fn obs(list: &[(Signal, i64, i64)]) -> Observations {
        list.iter().map(|(s, a, c)| (*s, Observation { available: *a, capacity: *c })).collect()
    }

    #[test]
    fn thresholds_are_met_below_their_amount() {
        let mem = t(Signal::MemoryAvailable, Value::Amount(100 * MI), 0, Some(Value::Amount(50 * MI)));
        let disk = t(Signal::NodeFsAvailable, Value::Fraction(0.1), 0, None);
        // (observations, with min reclaim, met signals)
        let cases = [
            (obs(&[(Signal::MemoryAvailable, 99 * MI, 1000 * MI)]), false, vec![Signal::MemoryAvailable]),
            (obs(&[(Signal::MemoryAvailable, 100 * MI, 1000 * MI)]), false, vec![]),
            (obs(&[(Signal::MemoryAvailable, 120 * MI, 1000 * MI)]), true, vec![Signal::MemoryAvailable]),
            (obs(&[(Signal::MemoryAvailable, 150 * MI, 1000 * MI)]), true, vec![]),
            (obs(&[(Signal::NodeFsAvailable, 9, 100)]), false, vec![Signal::NodeFsAvailable]),
            (obs(&[(Signal::NodeFsAvailable, 10, 100)]), false, vec![]),
            (obs(&[]), false, vec![]),
        ];
        for (i, (o, with, want)) in cases.into_iter().enumerate() {
            let got: Vec<Signal> =
                met(&[mem.clone(), disk.clone()], &o, with).into_iter().map(|t| t.signal).collect();
            assert_eq!(got, want, "case {i}");
        }
    }

    #[test]
    fn grace_periods_transition_period_and_min_reclaim_over_cycles() {
        let hard_mem = t(Signal::MemoryAvailable, Value::Amount(100 * MI), 0, Some(Value::Amount(50 * MI)));
        let soft_disk = t(Signal::NodeFsAvailable, Value::Fraction(0.1), 30, None);
        let all = [hard_mem.clone(), soft_disk.clone()];
        let transition = Duration::from_secs(300);
        let low_mem = (Signal::MemoryAvailable, 90 * MI, 1000 * MI);
        let mid_mem = (Signal::MemoryAvailable, 120 * MI, 1000 * MI);
        let ok_mem = (Signal::MemoryAvailable, 500 * MI, 1000 * MI);
        let low_disk = (Signal::NodeFsAvailable, 5, 100);
        let ok_disk = (Signal::NodeFsAvailable, 50, 100);
        use Condition::*;
        // (second, observations, conditions, acting signals)
        let steps: Vec<(u64, Observations, Vec<Condition>, Vec<Signal>)> = vec![
            (0, obs(&[low_mem, ok_disk]), vec![MemoryPressure], vec![Signal::MemoryAvailable]),
            // Above the threshold but below it plus the minimum reclaim: still acting.
            (10, obs(&[mid_mem, ok_disk]), vec![MemoryPressure], vec![Signal::MemoryAvailable]),
            // Reclaimed: no longer acting, the condition stays for the transition period.
            (20, obs(&[ok_mem, ok_disk]), vec![MemoryPressure], vec![]),
            // Soft disk threshold met: the condition at once, the action after 30 s.
            (30, obs(&[ok_mem, low_disk]), vec![MemoryPressure, DiskPressure], vec![]),
            (50, obs(&[ok_mem, low_disk]), vec![MemoryPressure, DiskPressure], vec![]),
            (60, obs(&[ok_mem, low_disk]), vec![MemoryPressure, DiskPressure], vec![Signal::NodeFsAvailable]),
            // Memory again: it is reclaimed first.
            (
                70,
                obs(&[low_mem, low_disk]),
                vec![MemoryPressure, DiskPressure],
                vec![Signal::MemoryAvailable, Signal::NodeFsAvailable],
            ),
            // All fine; conditions last 300 s after they were last seen.
            (80, obs(&[ok_mem, ok_disk]), vec![MemoryPressure, DiskPressure], vec![]),
            (369, obs(&[ok_mem, ok_disk]), vec![MemoryPressure, DiskPressure], vec![]),
            (370, obs(&[ok_mem, ok_disk]), vec![], vec![]),
            // A soft threshold that went away and came back starts its grace period again.
            (400, obs(&[ok_mem, low_disk]), vec![DiskPressure], vec![]),
            (420, obs(&[ok_mem, low_disk]), vec![DiskPressure], vec![]),
        ];
        let mut state = State::default();
        for (at, o, conditions, acting) in steps {
            let out = state.step(&all, &o, Duration::from_secs(at), transition);
            let got: Vec<Signal> = out.acting.iter().map(|t| t.signal).collect();
            assert_eq!(out.conditions.into_iter().collect::<Vec<_>>(), conditions, "at {at}s: conditions");
            assert_eq!(got, acting, "at {at}s: acting");
        }
        // A zero transition period: the condition is only there while met.
        let mut state = State::default();
        let zero = Duration::ZERO;
        let out = state.step(&all, &obs(&[low_mem]), Duration::from_secs(1), zero);
        assert_eq!(out.conditions.into_iter().collect::<Vec<_>>(), vec![MemoryPressure]);
        let out = state.step(&all, &obs(&[ok_mem]), Duration::from_secs(2), zero);
        assert!(out.conditions.is_empty());
    }
}
