//! One sync's whole decision, pure: from everything the worker gathered (the pod as it runs, the
//! runtime's state, probe results, the in-place update's holds, the clock and the wake-ups others
//! asked for), what the sync does. The worker applies it (`worker::sync_once`).
//!
//! The order of the kubelet's `SyncPod` is kept: an active deadline that ran out stops everything
//! first; a RestartAllContainers reset goes before anything else; then the container plan, held
//! back while a SIGKILL from outside may be a sandbox going away; then the resize's actions,
//! folded in as kills and starts where a container's resize policy asks for a restart.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;

use super::{ContainerKill, ContainerReset, KillReason, Plan, ProbeResults, plan_held, settle_until};
use crate::model::{ContainerState, ObservedPod, SandboxState};
use crate::pod::resize::{self, Actions, Amounts};

/// What a sync knows when it decides.
pub struct SyncFacts<'a> {
    /// The pod as it runs: its spec with the allocated resources (KEP-1287).
    pub pod: &'a Pod,
    pub observed: &'a ObservedPod,
    pub probes: &'a ProbeResults,
    /// Containers an in-place update holds back from starting.
    pub held: &'a BTreeSet<String>,
    /// Now, in ns since the epoch.
    pub now: i64,
    /// When `activeDeadlineSeconds` runs out (ns), if the pod has one.
    pub deadline: Option<i64>,
    /// The deadline ran out at an earlier sync.
    pub deadline_exceeded: bool,
    /// Instances the agent killed itself (their 137 is no sign of a sandbox going away).
    pub killed_by_agent: &'a BTreeSet<String>,
    /// Sandboxes the agent has stopped (`StopPodSandbox`).
    pub stopped_sandboxes: &'a BTreeSet<String>,
    /// When the in-place update and the resize asked to be woken.
    pub update_requeue: Option<i64>,
    pub resize_requeue: Option<i64>,
    /// The resources the runtime applied to each running instance (read only when a resize can
    /// act: the pod keeps its sandbox).
    pub actual: &'a dyn Fn() -> BTreeMap<String, Amounts>,
}

/// What a sync does.
#[derive(Debug, Clone, PartialEq)]
pub enum SyncPlan {
    /// `activeDeadlineSeconds` ran out (`newly`: at this sync): everything is stopped (`kill`:
    /// something still runs) and stays stopped.
    Deadline { newly: bool, kill: bool },
    /// RestartAllContainers: every instance stopped and removed, in this order. `kill_under_way`:
    /// a pod kill is planned too (so a saved kill deadline stays).
    Reset { reset: Vec<ContainerReset>, kill_under_way: bool },
    /// Nothing to do but collect garbage; come back at `requeue`.
    Idle { requeue: Option<i64> },
    /// Apply `plan` and the resize's `actions`; come back at `requeue` at the latest.
    Act { plan: Plan, resize: Actions, requeue: Option<i64> },
}

/// One sync's decision.
pub fn decide(f: &SyncFacts<'_>) -> SyncPlan {
    if f.deadline_exceeded || f.deadline.is_some_and(|d| d <= f.now) {
        let kill = anything_to_stop(f.observed, f.stopped_sandboxes);
        return SyncPlan::Deadline { newly: !f.deadline_exceeded, kill };
    }
    let mut plan = plan_held(f.pod, f.observed, f.probes, f.held);
    let mut requeue = earliest(earliest(f.update_requeue, f.deadline), f.resize_requeue);
    if let Some(until) = settle_until(&plan, f.observed, f.killed_by_agent, f.now) {
        // An instance was SIGKILLed from outside: starts wait to see whether the sandbox goes too.
        plan.init_to_start.clear();
        plan.app_to_start.clear();
        requeue = earliest(requeue, Some(until));
    }
    if !plan.reset.is_empty() {
        return SyncPlan::Reset { kill_under_way: plan.kill_pod.is_some(), reset: plan.reset };
    }
    // KEP-1287: what actuating the allocation takes, for a pod that keeps its sandbox.
    let actions = if plan.kill_pod.is_none() && plan.create_sandbox.is_none() {
        resize::actions(f.pod, f.observed, &(f.actual)())
    } else {
        Actions::default()
    };
    fold_resize_restarts(&mut plan, &actions, f.pod);
    if plan.is_empty() && actions.is_empty() {
        return SyncPlan::Idle { requeue };
    }
    SyncPlan::Act { plan, resize: actions, requeue }
}

/// Whether anything of the pod still runs (a container running or unknown, a ready sandbox).
pub fn anything_runs(observed: &ObservedPod) -> bool {
    observed.containers.iter().any(|c| matches!(c.state, ContainerState::Running | ContainerState::Unknown))
        || observed.sandboxes.iter().any(|s| s.state == SandboxState::Ready)
}

/// Whether a pod kill has anything to stop: something runs, or a sandbox the agent has not
/// stopped (`stopped`) died by itself. Upstream's `killPodWithSyncResult` stops every sandbox of
/// the pod, ready or not: a dead sandbox keeps its network until `StopPodSandbox` tears it down.
pub fn anything_to_stop(observed: &ObservedPod, stopped: &BTreeSet<String>) -> bool {
    anything_runs(observed) || observed.sandboxes.iter().any(|s| !stopped.contains(&s.id))
}

/// The earlier of two optional times.
pub fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The containers a resize restarts, folded into the plan: killed and started again in this
/// sync, whatever the restart policy, as upstream.
fn fold_resize_restarts(plan: &mut Plan, actions: &Actions, pod: &Pod) {
    for (name, id) in &actions.restart {
        if plan.kills.iter().any(|k| &k.id == id) {
            continue;
        }
        plan.kills.push(ContainerKill {
            id: id.clone(),
            name: name.clone(),
            reason: KillReason::SpecChanged,
            message: format!("Container {name} resize requires restart"),
        });
        let sidecar = crate::podspec::init_containers(pod).iter().any(|c| &c.name == name);
        let starts = if sidecar { &mut plan.init_to_start } else { &mut plan.app_to_start };
        if !starts.contains(name) {
            starts.push(name.clone());
        }
    }
}
