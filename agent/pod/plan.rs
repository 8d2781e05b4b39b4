//! The pure planner: from the desired pod, what the runtime shows and the probe results, decide
//! what to do next (the shape of the kubelet's `computePodActions`). No I/O, no clock.
//!
//! Each kubelet rule is written once here, with its spec rule number.

pub mod gc;
pub mod sync;

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::hash::{HASH_SCHEME_ANNOTATION, container_hash_with};
use crate::model::{ContainerState, ObservedContainer, ObservedPod, SandboxState};
use crate::podspec::{Kind, app_containers, init_containers, is_sidecar, restart_policy};
use crate::status::{
    container_should_restart, restart_all_rule_matches, restart_all_triggered, restart_without_exit_code,
    should_restart,
};

pub use crate::probe::{ProbeResult, ProbeResults};

/// Why a whole pod is killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodKillReason {
    /// The sandbox is gone or unusable and will be re-created (R2.6/R2.7).
    SandboxChanged,
    /// The sandbox is gone and the pod must not be re-created (R2.8).
    SandboxLostNoRestart,
    /// Every app container is done under Never/OnFailure (R4.7).
    PodCompleted,
    /// A regular init container failed under restartPolicy Never (R4.8).
    InitContainerFailed,
}

/// Why one container is killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillReason {
    SpecChanged,
    LivenessProbe,
    StartupProbe,
    /// State UNKNOWN: killed before a replacement starts, so two copies never run (R12.7).
    UnknownState,
}

/// One container to kill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerKill {
    pub id: String,
    pub name: String,
    pub reason: KillReason,
    /// The `Killing` event text.
    pub message: String,
}

/// One instance to stop (without preStop or grace) and remove for a RestartAllContainers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerReset {
    pub id: String,
    pub name: String,
    /// Still running (or unknown, or created): stopped before it is removed.
    pub kill: bool,
}

/// What one sync does, in this order: kill the pod or single containers, (purge init containers
/// and) create the sandbox, start init containers one by one, start app containers. A plan with
/// `reset` does that alone (KEP-5532).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// RestartAllContainers: every instance of the pod to stop and remove, in this order (the
    /// ones whose exit triggered it last, so an agent that dies halfway sees the trigger again).
    pub reset: Vec<ContainerReset>,
    pub kill_pod: Option<PodKillReason>,
    /// Create a sandbox with this attempt number (after killing the old pod).
    pub create_sandbox: Option<u32>,
    pub kills: Vec<ContainerKill>,
    pub init_to_start: Vec<String>,
    pub app_to_start: Vec<String>,
    /// Ephemeral containers never started yet (started first, never restarted).
    pub ephemeral_to_start: Vec<String>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        *self == Plan::default()
    }
}

/// The starts a sync makes at once after a sidecar it started shows running (`live`: the sync's
/// own snapshot, with the statuses read right after its starts): what the planner asks for
/// then, if that is only first starts (init, then app). Anything else (a restart, which has its
/// back-off; a kill; a new sandbox) is for the next sync.
pub fn gated_starts(
    pod: &Pod,
    live: &ObservedPod,
    probes: &ProbeResults,
    held: &BTreeSet<String>,
) -> Option<(Vec<String>, Vec<String>)> {
    let next = plan_held(pod, live, probes, held);
    let only_starts = next.reset.is_empty()
        && next.kill_pod.is_none()
        && next.create_sandbox.is_none()
        && next.kills.is_empty();
    let names = || next.init_to_start.iter().chain(&next.app_to_start);
    let first_starts = names().all(|n| live.newest(n).is_none());
    (only_starts && first_starts && names().next().is_some())
        .then_some((next.init_to_start, next.app_to_start))
}

/// How long the restart of an instance that someone else SIGKILLed waits (ns).
pub const KILLED_SETTLE_NS: i64 = 300_000_000;

/// When the plan's starts should wait, if they should: a runtime stopping a sandbox (an
/// out-of-band `StopPodSandbox`, a sandbox lost) SIGKILLs its containers one by one before the
/// sandbox itself turns NotReady, and with CRI events the first exit is seen before the
/// sandbox is. Restarting into a sandbox being torn down only costs a restart for nothing
/// (upstream's 1 s relist usually sees both at once), so the start of an instance that exited
/// with 137 (not OOMKilled, not killed by the agent) within the last `KILLED_SETTLE_NS` waits
/// that long for the sandbox's fate to show.
pub fn settle_until(
    plan: &Plan,
    observed: &ObservedPod,
    killed_by_agent: &BTreeSet<String>,
    now: i64,
) -> Option<i64> {
    if plan.create_sandbox.is_some() {
        return None;
    }
    plan.init_to_start
        .iter()
        .chain(&plan.app_to_start)
        .filter_map(|name| observed.newest(name))
        .filter(|c| {
            c.state == ContainerState::Exited
                && c.exit_code == 137
                && c.reason != "OOMKilled"
                && !killed_by_agent.contains(&c.id)
        })
        .map(|c| c.finished_at.saturating_add(KILLED_SETTLE_NS))
        .filter(|until| *until > now)
        .max()
}

fn host_network(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false)
}

/// R2.4: a running container whose hash (under the scheme it was created with) differs from
/// the desired container's. An unknown scheme never counts as a change. A static pod's container
/// whose env read labels or annotations that have changed since counts too (`metadata_env`).
pub fn container_changed(pod: &Pod, spec: &Container, running: &ObservedContainer) -> bool {
    if crate::podspec::is_stand_in(pod) {
        return false;
    }
    let scheme = running.annotations.get(HASH_SCHEME_ANNOTATION).map(String::as_str);
    let hash_changed = match container_hash_with(scheme, spec) {
        Some(want) => want != running.hash,
        None => false,
    };
    hash_changed || super::metadata_env::changed(pod, spec, running)
}

/// What changed, for the `Killing` text: upstream's "definition changed", or (a static pod's
/// container whose env reads a label or annotation that changed) "environment from pod
/// metadata changed".
fn what_changed(pod: &Pod, spec: &Container, running: &ObservedContainer) -> &'static str {
    let scheme = running.annotations.get(HASH_SCHEME_ANNOTATION).map(String::as_str);
    let same_hash = container_hash_with(scheme, spec).is_none_or(|want| want == running.hash);
    if same_hash && super::metadata_env::changed(pod, spec, running) {
        "environment from pod metadata changed"
    } else {
        "definition changed"
    }
}

/// R2.6: must a new sandbox be created, and with which attempt number?
pub fn sandbox_change(pod: &Pod, observed: &ObservedPod) -> Option<u32> {
    let Some(newest) = observed.sandbox() else { return Some(0) };
    let next_attempt = observed.sandboxes.iter().map(|s| s.attempt).max().unwrap_or(0) + 1;
    let ready = observed.sandboxes.iter().filter(|s| s.state == SandboxState::Ready).count();
    let changed = ready > 1
        || newest.state != SandboxState::Ready
        || newest.host_network != host_network(pod)
        || (!host_network(pod) && newest.ips.is_empty());
    changed.then_some(next_attempt)
}

/// R4.1: the pod is initialized once any app container has a created or running instance.
fn app_created_or_running(pod: &Pod, observed: &ObservedPod) -> bool {
    app_containers(pod).iter().any(|c| {
        observed
            .newest(&c.name)
            .is_some_and(|o| matches!(o.state, ContainerState::Created | ContainerState::Running))
    })
}

/// Computes the next actions for a pod that is not being terminated.
pub fn plan(pod: &Pod, observed: &ObservedPod, probes: &ProbeResults) -> Plan {
    plan_held(pod, observed, probes, &BTreeSet::new())
}

/// Like [`plan`], but running containers named in `held` are kept even when their definition
/// changed: an in-place update holds them until their turn (wait period, image pulled, sidecars
/// first).
pub fn plan_held(pod: &Pod, observed: &ObservedPod, probes: &ProbeResults, held: &BTreeSet<String>) -> Plan {
    let mut plan = plan_containers(pod, observed, probes, held);
    // Upstream `computePodActions`: an ephemeral container without any instance is started, in
    // the pod's current sandbox, before init containers (so it runs even while they fail); one
    // that ran is never started again. Not while the pod is killed or gets a new sandbox.
    if plan.kill_pod.is_none() && plan.create_sandbox.is_none() && plan.reset.is_empty() {
        plan.ephemeral_to_start = crate::pod::spec::ephemeral_containers(pod)
            .into_iter()
            .filter(|(c, _)| observed.newest(&c.name).is_none())
            .map(|(c, _)| c.name)
            .collect();
    }
    plan
}

fn plan_containers(
    pod: &Pod,
    observed: &ObservedPod,
    probes: &ProbeResults,
    held: &BTreeSet<String>,
) -> Plan {
    let policy = restart_policy(pod);
    let mut plan = Plan::default();

    // KEP-5532 (upstream `computePodActions`): a RestartAllContainers exit comes before
    // anything else; the next sync, with no instance left, starts the pod over in its sandbox.
    if let Some(reset) = restart_all(pod, observed) {
        plan.reset = reset;
        return plan;
    }

    if let Some(attempt) = sandbox_change(pod, observed) {
        // R2.7/R2.8: a new sandbox means killing whatever still runs first.
        let had_sandbox = !observed.sandboxes.is_empty();
        if had_sandbox {
            plan.kill_pod = Some(PodKillReason::SandboxChanged);
        }
        // R2.8(a): a Never pod whose sandbox died after containers ran is not re-created.
        if policy == "Never" && attempt != 0 && !observed.containers.is_empty() {
            plan.kill_pod = Some(PodKillReason::SandboxLostNoRestart);
            return plan;
        }
        let apps: Vec<String> = app_containers(pod)
            .iter()
            .filter(|c| !(runs_once(c, policy) && succeeded(observed, &c.name)))
            .map(|c| c.name.clone())
            .collect();
        // R2.8(b): nothing left to run and the app containers already ran.
        if apps.is_empty() && app_containers(pod).iter().any(|c| observed.newest(&c.name).is_some()) {
            plan.kill_pod.get_or_insert(PodKillReason::PodCompleted);
            return plan;
        }
        // KEP-5307: with containers' own policies, a pod whose policy restarts can still be done
        // for good: an init container failed and may not retry, or every app container ended
        // and none may run again. Upstream's phase is then terminal and the pod is not started
        // over in a new sandbox.
        if attempt != 0 {
            if init_failed_for_good(pod, observed) {
                plan.kill_pod = Some(PodKillReason::InitContainerFailed);
                return plan;
            }
            let ended = |c: &Container| {
                observed.newest(&c.name).is_some_and(|o| {
                    o.state == ContainerState::Exited && !container_should_restart(c, policy, o.exit_code)
                })
            };
            if app_containers(pod).iter().all(ended) {
                plan.kill_pod = Some(PodKillReason::PodCompleted);
                return plan;
            }
        }
        plan.create_sandbox = Some(attempt);
        match init_containers(pod).first() {
            Some(first) => plan.init_to_start.push(first.name.clone()),
            None => plan.app_to_start = apps,
        }
        return plan;
    }

    let initialized = plan_init_containers(pod, observed, probes, held, &mut plan);
    if plan.kill_pod.is_some() || !initialized {
        return plan;
    }

    let mut keep = 0;
    for spec in app_containers(pod) {
        let newest = observed.newest(&spec.name);
        match newest {
            Some(c) if c.state == ContainerState::Running => {
                let (message, restart) = if container_changed(pod, spec, c) && !held.contains(&spec.name) {
                    // R2.4: a changed definition restarts regardless of restartPolicy.
                    (format!("Container {} {}", spec.name, what_changed(pod, spec, c)), true)
                } else if probes.liveness.get(&c.id) == Some(&ProbeResult::Failure) {
                    // KEP-5307: no exit code, so no rules: the container's own policy decides.
                    (
                        format!("Container {} failed liveness probe", spec.name),
                        restart_without_exit_code(spec, policy),
                    )
                } else if probes.startup.get(&c.id) == Some(&ProbeResult::Failure) {
                    (
                        format!("Container {} failed startup probe", spec.name),
                        restart_without_exit_code(spec, policy),
                    )
                } else {
                    keep += 1;
                    continue;
                };
                let reason = if message.ends_with("changed") {
                    KillReason::SpecChanged
                } else if message.ends_with("liveness probe") {
                    KillReason::LivenessProbe
                } else {
                    KillReason::StartupProbe
                };
                let message = if restart { format!("{message}, will be restarted") } else { message };
                plan.kills.push(ContainerKill { id: c.id.clone(), name: spec.name.clone(), reason, message });
                if restart {
                    plan.app_to_start.push(spec.name.clone());
                }
            }
            _ => {
                if should_restart(spec, Kind::App, policy, newest, false) {
                    plan.app_to_start.push(spec.name.clone());
                    if let Some(c) = newest.filter(|c| c.state == ContainerState::Unknown) {
                        plan.kills.push(ContainerKill {
                            id: c.id.clone(),
                            name: spec.name.clone(),
                            reason: KillReason::UnknownState,
                            message: format!(
                                "Container {} is in an unknown state, will be restarted",
                                spec.name
                            ),
                        });
                    }
                }
            }
        }
    }
    // R4.7: nothing runs and nothing will: the pod is done; sidecars must not keep it alive.
    if keep == 0 && plan.app_to_start.is_empty() {
        plan.kill_pod = Some(PodKillReason::PodCompleted);
        plan.init_to_start.clear();
    }
    plan
}

/// A regular init container's newest instance failed and its policy and rules do not retry it.
fn init_failed_for_good(pod: &Pod, observed: &ObservedPod) -> bool {
    init_containers(pod).iter().filter(|c| !is_sidecar(c)).any(|c| {
        observed.newest(&c.name).is_some_and(|o| {
            o.state == ContainerState::Exited
                && crate::status::init_failed(o)
                && !container_should_restart(c, restart_policy(pod), o.exit_code)
        })
    })
}

/// Is a succeeded instance of this container left alone when the sandbox is re-created? Under
/// `OnFailure`, the container's own policy first (KEP-5307).
fn runs_once(c: &Container, pod_policy: &str) -> bool {
    c.restart_policy.as_deref().unwrap_or(pod_policy) == "OnFailure"
}

/// KEP-5532 (upstream `getContainersToReset`): when triggered, every instance of every init
/// and app container, in the order app targets, init targets, app sources, init sources (a
/// source is an exited instance whose code matches a RestartAllContainers rule).
fn restart_all(pod: &Pod, observed: &ObservedPod) -> Option<Vec<ContainerReset>> {
    if !restart_all_triggered(pod, observed) {
        return None;
    }
    let split = |specs: &[Container]| {
        let (mut sources, mut targets) = (Vec::new(), Vec::new());
        for spec in specs {
            for c in observed.containers.iter().filter(|c| c.name == spec.name) {
                let exited = c.state == ContainerState::Exited;
                let r = ContainerReset { id: c.id.clone(), name: c.name.clone(), kill: !exited };
                if exited && restart_all_rule_matches(spec, c.exit_code) {
                    sources.push(r);
                } else {
                    targets.push(r);
                }
            }
        }
        (sources, targets)
    };
    let (init_sources, init_targets) = split(init_containers(pod));
    let (app_sources, app_targets) = split(app_containers(pod));
    Some([app_targets, init_targets, app_sources, init_sources].concat())
}

fn succeeded(observed: &ObservedPod, name: &str) -> bool {
    observed.newest(name).is_some_and(|c| c.state == ContainerState::Exited && c.exit_code == 0)
}

/// R4.2 (`computeInitContainerActions`): fills init starts/kills; returns whether the pod is
/// initialized.
fn plan_init_containers(
    pod: &Pod,
    observed: &ObservedPod,
    probes: &ProbeResults,
    held: &BTreeSet<String>,
    plan: &mut Plan,
) -> bool {
    let inits = init_containers(pod);
    if inits.is_empty() {
        return true;
    }
    let previously_initialized = app_created_or_running(pod, observed);
    let mut initialized = previously_initialized;
    let policy = restart_policy(pod);
    let mut starts: Vec<usize> = Vec::new();
    let mut kill = |c: &ObservedContainer, reason: KillReason, message: String| {
        plan.kills.push(ContainerKill { id: c.id.clone(), name: c.name.clone(), reason, message });
    };
    let mut any_status = false;

    for (i, spec) in inits.iter().enumerate().rev() {
        let sidecar = is_sidecar(spec);
        let Some(status) = observed.newest(&spec.name) else {
            // A sidecar of an initialized pod whose instances vanished is simply started again.
            if previously_initialized && sidecar {
                starts.push(i);
            }
            continue;
        };
        any_status = true;
        if previously_initialized && !sidecar {
            // After initialization only sidecars are kept running.
            continue;
        }
        match status.state {
            // Created but never started: the start failed; start a new instance.
            ContainerState::Created => starts.push(i),
            ContainerState::Running if !sidecar => {} // wait for it to finish
            ContainerState::Running => {
                let startup = probes.startup.get(&status.id).copied();
                let mut started = true;
                if spec.startup_probe.is_some() {
                    match startup {
                        Some(ProbeResult::Success) => {}
                        Some(ProbeResult::Failure) => {
                            kill(
                                status,
                                KillReason::StartupProbe,
                                format!(
                                    "Init container {} failed startup probe, will be restarted",
                                    spec.name
                                ),
                            );
                            starts.push(i);
                            started = false;
                        }
                        _ => started = false,
                    }
                }
                if started {
                    if i == inits.len() - 1 {
                        initialized = true;
                    } else if !previously_initialized {
                        starts.push(i + 1);
                    }
                    if container_changed(pod, spec, status) && !held.contains(&spec.name) {
                        kill(
                            status,
                            KillReason::SpecChanged,
                            format!(
                                "Init container {} {}, will be restarted",
                                spec.name,
                                what_changed(pod, spec, status)
                            ),
                        );
                        starts.push(i);
                    } else if spec.liveness_probe.is_some()
                        && probes.liveness.get(&status.id) == Some(&ProbeResult::Failure)
                    {
                        kill(
                            status,
                            KillReason::LivenessProbe,
                            format!("Init container {} failed liveness probe, will be restarted", spec.name),
                        );
                        starts.push(i);
                    }
                }
            }
            // R4.6: a sidecar that exited is restarted whatever the pod's policy.
            ContainerState::Exited if sidecar => starts.push(i),
            ContainerState::Exited => {
                if crate::status::init_failed(status) {
                    // KEP-5307: the exit code against the container's rules and policy.
                    if !container_should_restart(spec, policy, status.exit_code) {
                        plan.kill_pod = Some(PodKillReason::InitContainerFailed);
                        plan.init_to_start.clear();
                        return false;
                    }
                    starts.push(i);
                } else if i == inits.len() - 1 {
                    initialized = true;
                } else {
                    starts.push(i + 1);
                }
            }
            ContainerState::Unknown => {
                if !sidecar && !restart_without_exit_code(spec, policy) {
                    plan.kill_pod = Some(PodKillReason::InitContainerFailed);
                    plan.init_to_start.clear();
                    return false;
                }
                kill(
                    status,
                    KillReason::UnknownState,
                    format!("Init container {} is in an unknown state, will be restarted", spec.name),
                );
                starts.push(i);
            }
        }
        if !previously_initialized {
            // Only the last init container with an instance decides the next step.
            break;
        }
    }
    if !any_status && !previously_initialized {
        starts.push(0);
    }
    // Started in spec order.
    starts.sort_unstable();
    starts.dedup();
    plan.init_to_start = starts.into_iter().map(|i| inits[i].name.clone()).collect();
    initialized
}

#[cfg(test)]
#[path = "plan/tests.rs"]
mod tests;
