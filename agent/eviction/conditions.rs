//! The node's pressure conditions as the kubelet's node status setters keep them
//! (`MemoryPressureCondition`, `DiskPressureCondition`, `PIDPressureCondition` in
//! `pkg/kubelet/nodestatus/setters.go`): each condition's status, reason and message from the
//! eviction manager's pressure, its transition time kept while the status stays, and the
//! `Node <name> status is now: <event>` event when it changes (a condition seen for the first
//! time changes from Unknown). Pure: the clock is an argument. The Node's status (`cluster`) and
//! the control socket (`crilet describe node`) both show what this computes.

use k8s_openapi::api::core::v1::NodeCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{Condition, Pressure};

/// One pressure condition's two faces: (reason, message, event reason) under pressure and not.
struct Face {
    condition: Condition,
    under: (&'static str, &'static str, &'static str),
    clear: (&'static str, &'static str, &'static str),
}

/// The setters' reasons, messages and events, in the order the kubelet sets the conditions.
const FACES: [Face; 3] = [
    Face {
        condition: Condition::MemoryPressure,
        under: (
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available",
            "NodeHasInsufficientMemory",
        ),
        clear: (
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
            "NodeHasSufficientMemory",
        ),
    },
    Face {
        condition: Condition::DiskPressure,
        under: ("KubeletHasDiskPressure", "kubelet has disk pressure", "NodeHasDiskPressure"),
        clear: ("KubeletHasNoDiskPressure", "kubelet has no disk pressure", "NodeHasNoDiskPressure"),
    },
    Face {
        condition: Condition::PidPressure,
        under: (
            "KubeletHasInsufficientPID",
            "kubelet has insufficient PID available",
            "NodeHasInsufficientPID",
        ),
        clear: ("KubeletHasSufficientPID", "kubelet has sufficient PID available", "NodeHasSufficientPID"),
    },
];

/// The three pressure conditions for `pressure` at `now`, after `previous` (the conditions as
/// they were; a type not among them was Unknown), and the event reasons of those whose status
/// changed (`Normal`, on the Node; the message is [`status_message`]).
pub fn pressure_conditions(
    pressure: &Pressure,
    previous: &[NodeCondition],
    now: jiff::Timestamp,
) -> (Vec<NodeCondition>, Vec<&'static str>) {
    let mut events = Vec::new();
    let conditions = FACES
        .iter()
        .map(|f| {
            let type_ = f.condition.as_str();
            let under = pressure.contains(&f.condition);
            let (reason, message, event) = if under { f.under } else { f.clear };
            let status = if under { "True" } else { "False" };
            let kept = previous
                .iter()
                .find(|c| c.type_ == type_ && c.status == status)
                .and_then(|c| c.last_transition_time.clone());
            if kept.is_none() {
                events.push(event);
            }
            NodeCondition {
                type_: type_.to_string(),
                status: status.to_string(),
                reason: Some(reason.to_string()),
                message: Some(message.to_string()),
                last_heartbeat_time: Some(Time(now)),
                last_transition_time: Some(kept.unwrap_or(Time(now))),
            }
        })
        .collect();
    (conditions, events)
}

/// The message of a node status event (`recordNodeStatusEvent`).
pub fn status_message(node: &str, event: &str) -> String {
    format!("Node {node} status is now: {event}")
}

/// The reason of the event the eviction manager records on the Node when a threshold acts.
pub const THRESHOLD_MET: &str = "EvictionThresholdMet";

/// Its message: the resource it will reclaim (`signalToResource`).
pub fn threshold_met_message(resource: &str) -> String {
    format!("Attempting to reclaim {resource}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_and_their_transition_events() {
        use Condition::*;
        let t0: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: jiff::Timestamp = "2026-01-01T00:00:10Z".parse().unwrap();
        // Each step: (pressure, statuses of Memory/Disk/PID, reasons, events, transition times
        // moved to now)
        type Step = (Vec<Condition>, [&'static str; 3], [&'static str; 3], Vec<&'static str>, [bool; 3]);
        let steps: Vec<Step> = vec![
            // From Unknown: every condition transitions, as on a new Node.
            (
                vec![],
                ["False"; 3],
                ["KubeletHasSufficientMemory", "KubeletHasNoDiskPressure", "KubeletHasSufficientPID"],
                vec!["NodeHasSufficientMemory", "NodeHasNoDiskPressure", "NodeHasSufficientPID"],
                [true; 3],
            ),
            // The same again: no event, transition times kept.
            (
                vec![],
                ["False"; 3],
                ["KubeletHasSufficientMemory", "KubeletHasNoDiskPressure", "KubeletHasSufficientPID"],
                vec![],
                [false; 3],
            ),
            (
                vec![DiskPressure],
                ["False", "True", "False"],
                ["KubeletHasSufficientMemory", "KubeletHasDiskPressure", "KubeletHasSufficientPID"],
                vec!["NodeHasDiskPressure"],
                [false, true, false],
            ),
            (
                vec![MemoryPressure, DiskPressure, PidPressure],
                ["True"; 3],
                ["KubeletHasInsufficientMemory", "KubeletHasDiskPressure", "KubeletHasInsufficientPID"],
                vec!["NodeHasInsufficientMemory", "NodeHasInsufficientPID"],
                [true, false, true],
            ),
            (
                vec![],
                ["False"; 3],
                ["KubeletHasSufficientMemory", "KubeletHasNoDiskPressure", "KubeletHasSufficientPID"],
                vec!["NodeHasSufficientMemory", "NodeHasNoDiskPressure", "NodeHasSufficientPID"],
                [true; 3],
            ),
        ];
        let mut previous = Vec::new();
        for (i, (pressure, statuses, reasons, events, moved)) in steps.into_iter().enumerate() {
            let pressure: Pressure = pressure.into_iter().collect();
            let now = if i == 0 { t0 } else { t1 + jiff::SignedDuration::from_secs(i as i64) };
            let (got, got_events) = pressure_conditions(&pressure, &previous, now);
            let types: Vec<&str> = got.iter().map(|c| c.type_.as_str()).collect();
            assert_eq!(types, ["MemoryPressure", "DiskPressure", "PIDPressure"], "step {i}");
            for (j, c) in got.iter().enumerate() {
                assert_eq!(c.status, statuses[j], "step {i}: {}", c.type_);
                assert_eq!(c.reason.as_deref(), Some(reasons[j]), "step {i}: {}", c.type_);
                assert_eq!(c.last_heartbeat_time, Some(Time(now)), "step {i}");
                let at_now = c.last_transition_time == Some(Time(now));
                assert_eq!(at_now, moved[j], "step {i}: {} transition time", c.type_);
            }
            assert_eq!(got_events, events, "step {i}");
            previous = got;
        }
    }

    #[test]
    fn event_messages_are_the_kubelets() {
        let cases = [
            (status_message("n1", "NodeHasDiskPressure"), "Node n1 status is now: NodeHasDiskPressure"),
            (threshold_met_message("ephemeral-storage"), "Attempting to reclaim ephemeral-storage"),
            (threshold_met_message("memory"), "Attempting to reclaim memory"),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
    }
}
