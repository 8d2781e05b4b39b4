//! Which pod goes first, and what it is told: the kubelet's ranking functions
//! (`rankMemoryPressure`: usage above requests, then priority, then usage above requests by how
//! much; the disk ones the same over ephemeral storage; `rankPIDPressure`: priority, then
//! processes), its critical-pod rule, its eviction message and its admission under pressure.
//! Pure.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;

use super::decide::Observation;
use super::threshold::{self, Condition, Signal, Threshold};

/// The pod status reason and event reason of an eviction (and of a refusal under pressure).
pub const REASON: &str = "Evicted";
/// `scheduling.SystemCriticalPriority`.
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// What a pod uses, as far as the readers measured it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// The pod cgroup's memory working set, bytes.
    pub memory: i64,
    /// Its writable layers, logs and local volumes, bytes.
    pub disk: i64,
    /// The inodes those use.
    pub inodes: i64,
    /// The processes (tasks) in its cgroup.
    pub processes: i64,
}

/// A pod that may be evicted.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub uid: String,
    pub priority: i32,
    /// Its requests (`GetResourceRequestQuantity`: the larger of the app containers' sum and
    /// the largest init container's).
    pub memory_request: i64,
    pub disk_request: i64,
    /// `None`: no stats were found (such a pod goes first, as upstream).
    pub usage: Option<Usage>,
}

/// Orders `pods` for eviction under pressure of `signal`, first to go first.
pub fn rank(signal: Signal, pods: &mut [Candidate]) {
    let by_priority = |a: &Candidate, b: &Candidate| a.priority.cmp(&b.priority);
    // Pods without stats first (`cmpBool(!p1Found, !p2Found)`), then `rest` on both usages.
    let with_stats = |a: &Candidate, b: &Candidate, rest: &dyn Fn(&Usage, &Usage) -> Ordering| match (
        &a.usage, &b.usage,
    ) {
        (Some(ua), Some(ub)) => rest(ua, ub),
        (ua, ub) => ua.is_some().cmp(&ub.is_some()),
    };
    // true before false.
    let first_true = |a: bool, b: bool| b.cmp(&a);
    match signal {
        Signal::MemoryAvailable => pods.sort_by(|a, b| {
            with_stats(a, b, &|ua, ub| first_true(ua.memory > a.memory_request, ub.memory > b.memory_request))
                .then_with(|| by_priority(a, b))
                .then_with(|| {
                    with_stats(a, b, &|ua, ub| {
                        (ub.memory - b.memory_request).cmp(&(ua.memory - a.memory_request))
                    })
                })
        }),
        Signal::PidAvailable => pods.sort_by(|a, b| {
            by_priority(a, b).then_with(|| with_stats(a, b, &|ua, ub| ub.processes.cmp(&ua.processes)))
        }),
        Signal::NodeFsAvailable | Signal::ImageFsAvailable => pods.sort_by(|a, b| {
            with_stats(a, b, &|ua, ub| first_true(ua.disk > a.disk_request, ub.disk > b.disk_request))
                .then_with(|| by_priority(a, b))
                .then_with(|| {
                    with_stats(a, b, &|ua, ub| (ub.disk - b.disk_request).cmp(&(ua.disk - a.disk_request)))
                })
        }),
        // Inodes have no request: every pod with any inode in use "exceeds" it.
        Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => pods.sort_by(|a, b| {
            with_stats(a, b, &|ua, ub| first_true(ua.inodes > 0, ub.inodes > 0))
                .then_with(|| by_priority(a, b))
                .then_with(|| with_stats(a, b, &|ua, ub| ub.inodes.cmp(&ua.inodes)))
        }),
    }
}

/// Static and mirror pods and pods at or above the system-critical priority are critical
/// (`IsCriticalPod`): never evicted, always admitted.
pub fn is_critical(pod: &Pod, is_static: bool) -> bool {
    is_static
        || pod.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
        || pod.spec.as_ref().and_then(|s| s.priority).is_some_and(|p| p >= SYSTEM_CRITICAL_PRIORITY)
}

/// The annotation of a mirror pod (`kubetypes.ConfigMirrorAnnotationKey`).
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// A container's measured use of the starved resource, for the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerUse {
    pub name: String,
    pub usage: i64,
    pub request: i64,
}

/// The eviction message (`evictionMessage`): the starved resource, the threshold's quantity and
/// what was available, and each container using more than it requested.
pub fn message(threshold: &Threshold, observed: Option<Observation>, containers: &[ContainerUse]) -> String {
    let signal = threshold.signal;
    let resource = signal.resource();
    let mut m = format!("The node was low on resource: {resource}. ");
    if let Some(o) = observed {
        m += &format!(
            "Threshold quantity: {}, available: {}. ",
            threshold::format(signal, threshold.value.amount(o.capacity)),
            threshold::format(signal, o.available)
        );
    }
    for c in containers.iter().filter(|c| c.usage > c.request) {
        m += &format!(
            "Container {} was using {}, request is {}, has larger consumption of {resource}. ",
            c.name,
            threshold::format(signal, c.usage),
            threshold::format(signal, c.request)
        );
    }
    m
}

/// The refusal of a pod under pressure (the eviction manager's `Admit`): none without a
/// condition or for a critical pod; under memory pressure alone only BestEffort pods are
/// refused, and not those that tolerate the memory-pressure taint; under any other condition
/// every pod is. The message names the conditions as the kubelet prints them.
pub fn admit(pod: &Pod, conditions: &BTreeSet<Condition>, is_static: bool) -> Option<String> {
    if conditions.is_empty() || is_critical(pod, is_static) {
        return None;
    }
    if conditions.len() == 1 && conditions.contains(&Condition::MemoryPressure) {
        let best_effort = crate::status::qos_class(pod) == "BestEffort";
        if !best_effort || tolerates_memory_pressure(pod) {
            return None;
        }
    }
    let names: Vec<&str> = conditions.iter().map(|c| c.as_str()).collect();
    Some(format!("The node had condition: [{}]. ", names.join(" ")))
}

/// The taint the node lifecycle controller puts on a node under memory pressure.
pub const MEMORY_PRESSURE_TAINT: &str = "node.kubernetes.io/memory-pressure";

/// Whether a toleration of `pod` tolerates `node.kubernetes.io/memory-pressure:NoSchedule`
/// (`TolerationsTolerateTaint`).
fn tolerates_memory_pressure(pod: &Pod) -> bool {
    let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.as_ref());
    tolerations.into_iter().flatten().any(|t| {
        let effect = t.effect.as_deref().unwrap_or("");
        if !effect.is_empty() && effect != "NoSchedule" {
            return false;
        }
        let key = t.key.as_deref().unwrap_or("");
        match t.operator.as_deref().unwrap_or("Equal") {
            "Exists" => key.is_empty() || key == MEMORY_PRESSURE_TAINT,
            "Equal" => key == MEMORY_PRESSURE_TAINT && t.value.as_deref().unwrap_or("").is_empty(),
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::threshold::Value;
    use super::*;

    const MI: i64 = 1 << 20;

    fn cand(uid: &str, priority: i32, memory_request: i64, usage: Option<i64>) -> Candidate {
        Candidate {
            uid: uid.into(),
            priority,
            memory_request,
            disk_request: 0,
            usage: usage.map(|m| Usage { memory: m, disk: m, inodes: m, processes: m }),
        }
    }

    #[test]
    fn pods_rank_as_the_kubelet_ranks_them() {
        // (signal, pods, order)
        let cases: Vec<(&str, Signal, Vec<Candidate>, Vec<&str>)> = vec![
            (
                "a BestEffort pod (over its zero request) before a Burstable within its request",
                Signal::MemoryAvailable,
                vec![cand("burstable", 0, 64 * MI, Some(10 * MI)), cand("besteffort", 0, 0, Some(MI))],
                vec!["besteffort", "burstable"],
            ),
            (
                "over requests first, even at a higher priority",
                Signal::MemoryAvailable,
                vec![cand("low-within", 0, 64 * MI, Some(10 * MI)), cand("high-over", 1000, 0, Some(MI))],
                vec!["high-over", "low-within"],
            ),
            (
                "then lower priority first",
                Signal::MemoryAvailable,
                vec![cand("high", 100, 0, Some(90 * MI)), cand("low", 0, 0, Some(MI))],
                vec!["low", "high"],
            ),
            (
                "then the larger use above requests first",
                Signal::MemoryAvailable,
                vec![
                    cand("small", 0, 0, Some(MI)),
                    cand("big", 0, 0, Some(50 * MI)),
                    cand("mid", 0, 0, Some(9 * MI)),
                ],
                vec!["big", "mid", "small"],
            ),
            (
                "a pod without stats first",
                Signal::MemoryAvailable,
                vec![cand("measured", 0, 0, Some(50 * MI)), cand("unknown", 100, 0, None)],
                vec!["unknown", "measured"],
            ),
            (
                "disk: the same rules over ephemeral storage",
                Signal::NodeFsAvailable,
                vec![cand("small", 0, 0, Some(MI)), cand("big", 0, 0, Some(50 * MI))],
                vec!["big", "small"],
            ),
            (
                "pids: priority, then processes",
                Signal::PidAvailable,
                vec![
                    cand("many-high", 10, 0, Some(500)),
                    cand("few-low", 0, 0, Some(1)),
                    cand("many-low", 0, 0, Some(90)),
                ],
                vec!["many-low", "few-low", "many-high"],
            ),
        ];
        for (name, signal, mut pods, want) in cases {
            rank(signal, &mut pods);
            let got: Vec<&str> = pods.iter().map(|c| c.uid.as_str()).collect();
            assert_eq!(got, want, "{name}");
        }
    }

    fn pod(yaml: &str) -> Pod {
        serde_yaml_ng::from_str(yaml).expect("pod yaml")
    }

    #[test]
    fn critical_pods_and_admission_under_pressure() {
        let besteffort = "spec: {containers: [{name: a, image: i}]}";
        let burstable = "spec: {containers: [{name: a, image: i, resources: {requests: {memory: 1Mi}}}]}";
        let critical = "spec: {priority: 2000000000, containers: [{name: a, image: i}]}";
        let tolerates = "spec: {tolerations: [{key: node.kubernetes.io/memory-pressure, operator: Exists, effect: NoSchedule}], containers: [{name: a, image: i}]}";
        let tolerates_all = "spec: {tolerations: [{operator: Exists}], containers: [{name: a, image: i}]}";
        let tolerates_disk = "spec: {tolerations: [{key: node.kubernetes.io/disk-pressure, operator: Exists}], containers: [{name: a, image: i}]}";
        use Condition::*;
        let mem = BTreeSet::from([MemoryPressure]);
        let disk = BTreeSet::from([DiskPressure]);
        let both = BTreeSet::from([MemoryPressure, DiskPressure]);
        let none = BTreeSet::new();
        // (pod, static, conditions, refused with)
        let cases = [
            (besteffort, false, &none, None),
            (besteffort, false, &mem, Some("The node had condition: [MemoryPressure]. ")),
            (burstable, false, &mem, None),
            (critical, false, &mem, None),
            (besteffort, true, &mem, None),
            (tolerates, false, &mem, None),
            (tolerates_all, false, &mem, None),
            (tolerates_disk, false, &mem, Some("The node had condition: [MemoryPressure]. ")),
            (burstable, false, &disk, Some("The node had condition: [DiskPressure]. ")),
            (tolerates, false, &both, Some("The node had condition: [MemoryPressure DiskPressure]. ")),
            (critical, false, &disk, None),
        ];
        for (i, (yaml, is_static, conditions, want)) in cases.into_iter().enumerate() {
            assert_eq!(admit(&pod(yaml), conditions, is_static).as_deref(), want, "case {i}: {yaml}");
        }
        let mirror = "metadata: {annotations: {kubernetes.io/config.mirror: x}}\nspec: {containers: []}";
        assert!(is_critical(&pod(mirror), false));
        assert!(!is_critical(&pod(burstable), false));
    }

    #[test]
    fn the_message_names_the_resource_threshold_and_containers() {
        let hard = Threshold {
            signal: Signal::MemoryAvailable,
            value: Value::Amount(100 * MI),
            grace_period: Duration::ZERO,
            min_reclaim: None,
        };
        let o = Observation { available: 1536 * 1024, capacity: 1000 * MI };
        let containers = [
            ContainerUse { name: "hog".into(), usage: 20 * MI, request: 0 },
            ContainerUse { name: "calm".into(), usage: MI, request: 8 * MI },
        ];
        assert_eq!(
            message(&hard, Some(o), &containers),
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 1536Ki. \
             Container hog was using 20Mi, request is 0, has larger consumption of memory. "
        );
        let disk = Threshold { signal: Signal::NodeFsAvailable, value: Value::Fraction(0.5), ..hard };
        let o = Observation { available: 3 * MI, capacity: 16 * MI };
        assert_eq!(
            message(&disk, Some(o), &[]),
            "The node was low on resource: ephemeral-storage. Threshold quantity: 8Mi, available: 3Mi. "
        );
        assert_eq!(message(&disk, None, &[]), "The node was low on resource: ephemeral-storage. ");
    }
}
