//! Threshold counting for one probe (R6.4): the cached result changes only after
//! `successThreshold` consecutive successes or `failureThreshold` consecutive failures.

pub use super::results::ProbeResult;

/// The outcome of one probe attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure,
}

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeKind {
    Startup,
    Readiness,
    Liveness,
}

impl ProbeKind {
    pub fn title(self) -> &'static str {
        match self {
            ProbeKind::Startup => "Startup",
            ProbeKind::Readiness => "Readiness",
            ProbeKind::Liveness => "Liveness",
        }
    }

    /// R6.3: the result a new container instance starts from.
    pub fn initial(self) -> ProbeResult {
        match self {
            ProbeKind::Startup => ProbeResult::Unknown,
            ProbeKind::Readiness => ProbeResult::Failure,
            ProbeKind::Liveness => ProbeResult::Success,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Tracker {
    success_threshold: u32,
    failure_threshold: u32,
    result: ProbeResult,
    last: Option<Outcome>,
    run: u32,
}

impl Tracker {
    pub fn new(initial: ProbeResult, success_threshold: u32, failure_threshold: u32) -> Self {
        Self {
            success_threshold: success_threshold.max(1),
            failure_threshold: failure_threshold.max(1),
            result: initial,
            last: None,
            run: 0,
        }
    }

    pub fn result(&self) -> ProbeResult {
        self.result
    }

    /// Counts one outcome; returns the new result when it changed.
    pub fn observe(&mut self, o: Outcome) -> Option<ProbeResult> {
        if self.last == Some(o) {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = Some(o);
            self.run = 1;
        }
        let (threshold, settled) = match o {
            Outcome::Success => (self.success_threshold, ProbeResult::Success),
            Outcome::Failure => (self.failure_threshold, ProbeResult::Failure),
        };
        if self.run >= threshold && self.result != settled {
            self.result = settled;
            return Some(settled);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Outcome::{Failure as F, Success as S};

    #[test]
    fn threshold_cases() {
        let cases: Vec<(&str, ProbeKind, u32, u32, Vec<Outcome>, Vec<Option<ProbeResult>>)> = vec![
            (
                "liveness: two failures then a pass never settles Failure",
                ProbeKind::Liveness,
                1,
                3,
                vec![F, F, S, F, F, S],
                vec![None; 6],
            ),
            (
                "liveness: three failures in a row settle Failure on the third",
                ProbeKind::Liveness,
                1,
                3,
                vec![F, F, F, F],
                vec![None, None, Some(ProbeResult::Failure), None],
            ),
            (
                "readiness: first success with threshold 1 flips to Success",
                ProbeKind::Readiness,
                1,
                3,
                vec![S, S, F],
                vec![Some(ProbeResult::Success), None, None],
            ),
            (
                "readiness: successThreshold 2 needs two in a row",
                ProbeKind::Readiness,
                2,
                1,
                vec![S, F, S, S, F],
                vec![None, None, None, Some(ProbeResult::Success), Some(ProbeResult::Failure)],
            ),
            (
                "startup: Unknown until the first success",
                ProbeKind::Startup,
                1,
                3,
                vec![F, S],
                vec![None, Some(ProbeResult::Success)],
            ),
        ];
        for (name, kind, st, ft, outcomes, want) in cases {
            let mut t = Tracker::new(kind.initial(), st, ft);
            let got: Vec<Option<ProbeResult>> = outcomes.into_iter().map(|o| t.observe(o)).collect();
            assert_eq!(got, want, "{name}");
        }
    }
}
