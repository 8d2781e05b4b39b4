//! Graceful node shutdown's rules (the kubelet's `pkg/kubelet/nodeshutdown`): which pods stop in
//! which order, and with what grace, when the node is about to power off. `shutdownGracePeriod`
//! is split in two groups by pod priority: regular pods get the period minus
//! `shutdownGracePeriodCriticalPods` and stop first, then pods at or above the system-critical
//! priority get the rest. The supervisor applies the groups in order; `systemd::logind` learns of
//! the shutdown and holds it off meanwhile.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The pod status reason and message of a pod stopped for the node's shutdown (the kubelet's
/// `nodeShutdownReason`/`nodeShutdownMessage`).
pub const REASON: &str = "Terminated";
pub const MESSAGE: &str = "Pod was terminated in response to imminent node shutdown.";
/// The rejection of a pod that arrives while the node shuts down (the kubelet's
/// `nodeShutdownNotAdmittedReason`/`Message`).
pub const NOT_ADMITTED_REASON: &str = "NodeShutdown";
pub const NOT_ADMITTED_MESSAGE: &str = "Pod was rejected as the node is shutting down.";
/// The condition a pod stopped for the shutdown carries (shared with the API server's
/// evictions and the scheduler's preemptions), and this node's reason in it.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
pub const DISRUPTED_BY_NODE: &str = "TerminationByKubelet";
/// Why the Node is not ready meanwhile (the kubelet's `nodeShutdownManager.ShutdownStatus`).
pub const NODE_NOT_READY: &str = "node is shutting down";
/// `scheduling.SystemCriticalPriority`: pods at or above it are critical.
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;
/// `scheduling.DefaultPriorityWhenNoDefaultClassExists`.
const DEFAULT_PRIORITY: i32 = 0;

/// Pods at or above `priority` (and below the next group's) stop within `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    pub priority: i32,
    pub period: Duration,
}

/// The groups of `shutdownGracePeriod` = `grace` and `shutdownGracePeriodCriticalPods` =
/// `critical`, lowest priority first (the kubelet's `migrateConfig`, whole seconds as it counts
/// them); none when the feature is off (`grace` 0) or `critical` exceeds `grace`.
pub fn groups(grace: Duration, critical: Duration) -> Vec<Group> {
    if grace.is_zero() || critical > grace {
        return Vec::new();
    }
    let secs = |d: Duration| Duration::from_secs(d.as_secs());
    vec![
        Group { priority: DEFAULT_PRIORITY, period: secs(grace - critical) },
        Group { priority: SYSTEM_CRITICAL_PRIORITY, period: secs(critical) },
    ]
}

/// The index of the group a pod of `priority` belongs to (the kubelet's `groupByPriority`):
/// the highest group at or below it; below the lowest group, the lowest.
pub fn group_of(groups: &[Group], priority: i32) -> usize {
    groups.iter().rposition(|g| g.priority <= priority).unwrap_or(0)
}

/// A pod's priority (`spec.priority`; unset is 0).
pub fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(DEFAULT_PRIORITY)
}

/// The grace a pod gets in `group`: the group's period, or the pod's own
/// `terminationGracePeriodSeconds` when that is shorter.
pub fn pod_grace(group: &Group, pod: &Pod) -> Duration {
    let own = pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds);
    match own.and_then(|s| u64::try_from(s).ok()).map(Duration::from_secs) {
        Some(own) if own <= group.period => own,
        _ => group.period,
    }
}

/// What the kubelet's kill marks on a pod stopped for the shutdown: phase Failed (a pod that
/// already succeeded stays Succeeded), the reason and message, and a `DisruptionTarget`
/// condition (`TerminationByKubelet`), its transition time kept once set.
pub fn mark(status: &mut PodStatus, now: jiff::Timestamp) {
    mark_failed(status, REASON, MESSAGE, now);
}

/// What the kubelet's abnormal termination (`TerminatePodAbnormallyAndWait`: node shutdown,
/// node-pressure eviction) marks on a pod: phase Failed (unless it succeeded), `reason` and
/// `message`, and a `DisruptionTarget` condition (`TerminationByKubelet`) with the message.
pub fn mark_failed(status: &mut PodStatus, reason: &str, message: &str, now: jiff::Timestamp) {
    if status.phase.as_deref() != Some("Succeeded") {
        status.phase = Some("Failed".into());
    }
    status.reason = Some(reason.into());
    status.message = Some(message.into());
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let since = conditions
        .iter()
        .find(|c| c.type_ == DISRUPTION_TARGET && c.status == "True")
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    conditions.retain(|c| c.type_ != DISRUPTION_TARGET);
    conditions.push(PodCondition {
        type_: DISRUPTION_TARGET.into(),
        status: "True".into(),
        reason: Some(DISRUPTED_BY_NODE.into()),
        message: Some(message.into()),
        last_transition_time: Some(since),
        ..Default::default()
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    const CRITICAL: i32 = SYSTEM_CRITICAL_PRIORITY;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn the_two_periods_split_the_grace_period() {
        // (shutdownGracePeriod, shutdownGracePeriodCriticalPods, groups)
        let cases = [
            (s(0), s(0), vec![]),
            (s(30), s(10), vec![(0, s(20)), (CRITICAL, s(10))]),
            (s(30), s(0), vec![(0, s(30)), (CRITICAL, s(0))]),
            (s(30), s(30), vec![(0, s(0)), (CRITICAL, s(30))]),
            (s(10), s(20), vec![]),
            (Duration::from_millis(30_900), s(10), vec![(0, s(20)), (CRITICAL, s(10))]),
        ];
        for (grace, critical, want) in cases {
            let want: Vec<Group> =
                want.into_iter().map(|(priority, period)| Group { priority, period }).collect();
            assert_eq!(groups(grace, critical), want, "grace {grace:?}, critical {critical:?}");
        }
    }

    #[test]
    fn pods_fall_in_the_highest_group_at_or_below_their_priority() {
        let g = groups(s(30), s(10));
        // (pod priority, group index)
        let cases = [
            (0, 0),
            (-5, 0),
            (1000, 0),
            (CRITICAL - 1, 0),
            (CRITICAL, 1),
            (CRITICAL + 1000, 1),
            (i32::MAX, 1),
        ];
        for (priority, want) in cases {
            assert_eq!(group_of(&g, priority), want, "priority {priority}");
        }
    }

    fn pod(priority: Option<i32>, grace: Option<i64>) -> Pod {
        Pod {
            spec: Some(PodSpec { priority, termination_grace_period_seconds: grace, ..Default::default() }),
            ..Default::default()
        }
    }

    #[test]
    fn a_pod_gets_its_groups_period_or_its_own_shorter_grace() {
        let group = Group { priority: 0, period: s(20) };
        // (terminationGracePeriodSeconds, grace)
        let cases = [(None, s(20)), (Some(5), s(5)), (Some(20), s(20)), (Some(60), s(20)), (Some(0), s(0))];
        for (own, want) in cases {
            assert_eq!(pod_grace(&group, &pod(None, own)), want, "own grace {own:?}");
        }
        assert_eq!(priority(&pod(None, None)), 0);
        assert_eq!(priority(&pod(Some(CRITICAL), None)), CRITICAL);
    }

    #[test]
    fn a_stopped_pod_fails_with_the_kubelets_reason_unless_it_succeeded() {
        let t0 = jiff::Timestamp::from_second(1_000).expect("time");
        let t1 = jiff::Timestamp::from_second(2_000).expect("time");
        for (phase, want) in [("Running", "Failed"), ("Pending", "Failed"), ("Succeeded", "Succeeded")] {
            let mut status = PodStatus { phase: Some(phase.into()), ..Default::default() };
            mark(&mut status, t0);
            assert_eq!(status.phase.as_deref(), Some(want), "{phase}");
            assert_eq!(status.reason.as_deref(), Some(REASON));
            assert_eq!(status.message.as_deref(), Some(MESSAGE));
            // Marked again later: one condition, its first transition time kept.
            mark(&mut status, t1);
            let c: Vec<_> =
                status.conditions.iter().flatten().filter(|c| c.type_ == "DisruptionTarget").collect();
            assert_eq!(c.len(), 1, "{phase}: one DisruptionTarget condition");
            assert_eq!(c[0].reason.as_deref(), Some("TerminationByKubelet"));
            assert_eq!(c[0].last_transition_time, Some(Time(t0)), "{phase}: transition time kept");
        }
    }
}
