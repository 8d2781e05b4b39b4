//! Pod start latency, as the kubelet's `PodStartupLatencyTracker` measures it: from the moment
//! the agent first sees a pod to the first status in which every app container runs, minus the
//! time spent pulling images (the "pod startup latency SLI"). Pure: every call takes `now`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::PodStatus;

/// What one pod's start looked like so far.
#[derive(Debug, Clone)]
struct PodStart {
    first_seen: Instant,
    /// From the first pull's start to the last pull's end (the kubelet subtracts this span).
    first_pull_started: Option<Instant>,
    last_pull_finished: Option<Instant>,
    /// `kubelet_pod_start_duration_seconds` was observed (phase Running).
    running_recorded: bool,
    /// The SLI sample was taken (every container running).
    sli_recorded: bool,
}

/// Samples due after a status was observed.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StartSamples {
    /// First seen → phase Running (`kubelet_pod_start_duration_seconds`).
    pub start: Option<Duration>,
    /// First seen → every container running, images pulls excluded / included, and whether it
    /// is the node's first pod with its own network (the `first_with_network` label).
    pub sli: Option<SliSample>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SliSample {
    pub without_pulls: Duration,
    pub total: Duration,
    pub first_with_network: bool,
}

/// Start latency of the pods this agent saw begin, by pod UID.
#[derive(Debug, Default)]
pub struct StartupTracker {
    pods: HashMap<String, PodStart>,
    first_network_pod_seen: bool,
}

impl StartupTracker {
    /// The agent sees pod `uid` for the first time. A pod that had started before (a restarted
    /// agent adopting it: its saved status has a start time) is not tracked, as the kubelet
    /// tracks only pods whose `status.startTime` is unset when first seen.
    pub fn seen(&mut self, uid: &str, already_started: bool, now: Instant) {
        if already_started || self.pods.contains_key(uid) {
            return;
        }
        let start = PodStart {
            first_seen: now,
            first_pull_started: None,
            last_pull_finished: None,
            running_recorded: false,
            sli_recorded: false,
        };
        self.pods.insert(uid.to_string(), start);
    }

    /// One image pull of pod `uid` ran from `started` to `finished` (successful or not: either
    /// way the time went to the registry, not to the agent).
    pub fn pulled(&mut self, uid: &str, started: Instant, finished: Instant) {
        let Some(p) = self.pods.get_mut(uid) else { return };
        p.first_pull_started = Some(p.first_pull_started.map_or(started, |t| t.min(started)));
        p.last_pull_finished = Some(p.last_pull_finished.map_or(finished, |t| t.max(finished)));
    }

    /// A status of pod `uid` was published; returns the samples it completes. The pod is
    /// forgotten once both samples are taken, or when it turns out terminal first.
    pub fn observe(
        &mut self,
        uid: &str,
        status: &PodStatus,
        host_network: bool,
        now: Instant,
    ) -> StartSamples {
        let phase = status.phase.as_deref().unwrap_or("");
        if matches!(phase, "Succeeded" | "Failed") {
            self.pods.remove(uid);
            return StartSamples::default();
        }
        let Some(p) = self.pods.get_mut(uid) else { return StartSamples::default() };
        let mut out = StartSamples::default();
        let total = now.saturating_duration_since(p.first_seen);
        if phase == "Running" && !p.running_recorded {
            p.running_recorded = true;
            out.start = Some(total);
        }
        if !p.sli_recorded && all_containers_running(status) {
            p.sli_recorded = true;
            let pulling = match (p.first_pull_started, p.last_pull_finished) {
                (Some(a), Some(b)) => b.saturating_duration_since(a),
                _ => Duration::ZERO,
            };
            let first_with_network = !host_network && !self.first_network_pod_seen;
            self.first_network_pod_seen |= first_with_network;
            out.sli =
                Some(SliSample { without_pulls: total.saturating_sub(pulling), total, first_with_network });
        }
        if p.running_recorded && p.sli_recorded {
            self.pods.remove(uid);
        }
        out
    }

    /// The pod is gone (terminated, removed): nothing more is measured for it.
    pub fn forget(&mut self, uid: &str) {
        self.pods.remove(uid);
    }

    /// How many pods are being tracked (for tests).
    pub fn tracked(&self) -> usize {
        self.pods.len()
    }
}

/// The kubelet's `hasPodStartedSLO`: every app container has a running state with a start time.
/// A status that lists no container yet has not started (upstream always lists them).
pub fn all_containers_running(status: &PodStatus) -> bool {
    let Some(statuses) = status.container_statuses.as_ref().filter(|s| !s.is_empty()) else {
        return false;
    };
    statuses
        .iter()
        .all(|c| c.state.as_ref().and_then(|s| s.running.as_ref()).is_some_and(|r| r.started_at.is_some()))
}
