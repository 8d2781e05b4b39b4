//! Pod phase (R9.3, upstream `getPhase`) and its stickiness (R9.4), plus the two "has the pod
//! been initialized?" questions: R4.1 for the planner, and "a regular container exists in the
//! current sandbox" for the phase.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};

use super::containers::{self, Ctx, find, removed_for_restart_all};
use super::restart::container_should_restart;
use crate::model::{ContainerState, ObservedPod, ProbeState};
use crate::podspec::{app_containers, init_containers, is_sidecar, restart_policy};

/// `status.phase` values.
pub const PENDING: &str = "Pending";
/// See [`PENDING`].
pub const RUNNING: &str = "Running";
/// See [`PENDING`].
pub const SUCCEEDED: &str = "Succeeded";
/// See [`PENDING`].
pub const FAILED: &str = "Failed";

/// True for `Succeeded` and `Failed`.
pub fn is_terminal(phase: &str) -> bool {
    phase == SUCCEEDED || phase == FAILED
}

/// The pod phase from the runtime state alone, with R9.4 stickiness against `previous`. Start
/// errors and termination messages do not change the phase, so they are not needed here; the
/// planner can ask "is this pod done?" with what it has. Same answer as `compute(..).phase`.
pub fn phase(
    pod: &Pod,
    observed: &ObservedPod,
    probes: &BTreeMap<String, ProbeState>,
    previous: Option<&PodStatus>,
) -> &'static str {
    let (no_errors, no_messages) = (BTreeMap::new(), BTreeMap::new());
    let ctx = Ctx {
        pod,
        observed,
        probes,
        start_errors: &no_errors,
        termination_messages: &no_messages,
        terminating: false,
        restarting_all: restarting_all(pod, observed, previous),
    };
    let prev_init = previous.and_then(|p| p.init_container_statuses.as_deref()).unwrap_or_default();
    let prev_apps = previous.and_then(|p| p.container_statuses.as_deref()).unwrap_or_default();
    let init = containers::init_statuses(&ctx, prev_init);
    let apps = containers::app_statuses(&ctx, prev_apps);
    let computed = phase_of_statuses(pod, &init, &apps, has_active_app_container(pod, observed));
    sticky(computed, previous)
}

/// KEP-5532 (upstream `ShouldAllContainersRestart`): an exit asks for all containers to
/// restart, or the previous status says they are restarting.
pub(crate) fn restarting_all(pod: &Pod, observed: &ObservedPod, previous: Option<&PodStatus>) -> bool {
    let said = previous
        .and_then(|p| p.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == super::conditions::ALL_CONTAINERS_RESTARTING && c.status == "True");
    said || super::restart::restart_all_triggered(pod, observed)
}

/// R9.4: once a pod's phase is terminal it never changes.
pub(crate) fn sticky(computed: &'static str, previous: Option<&PodStatus>) -> &'static str {
    match previous.and_then(|p| p.phase.as_deref()) {
        Some(SUCCEEDED) => SUCCEEDED,
        Some(FAILED) => FAILED,
        _ => computed,
    }
}

/// R4.1: the pod counts as initialized when any regular container has an instance that is
/// CREATED or RUNNING (exited ones do not count: after a reboot they all are, and the new
/// sandbox must run its init containers again).
pub fn pod_initialized(desired: &Pod, observed: &ObservedPod) -> bool {
    app_containers(desired).iter().any(|spec| {
        observed.containers.iter().any(|c| {
            c.name == spec.name && matches!(c.state, ContainerState::Created | ContainerState::Running)
        })
    })
}

/// Whether a regular container has an instance, in any state, in the newest sandbox (upstream
/// `HasAnyActiveRegularContainerStarted`): a restarting sidecar must not send such a pod back to
/// Pending, while a re-created sandbox that re-runs its init containers does.
pub(crate) fn has_active_app_container(pod: &Pod, observed: &ObservedPod) -> bool {
    let Some(sandbox) = observed.sandbox() else { return false };
    app_containers(pod)
        .iter()
        .any(|spec| observed.containers.iter().any(|c| c.name == spec.name && c.sandbox_id == sandbox.id))
}

fn state_of(s: &ContainerStatus) -> (bool, bool, bool) {
    let st = s.state.as_ref();
    (
        st.is_some_and(|s| s.running.is_some()),
        st.is_some_and(|s| s.terminated.is_some()),
        st.is_some_and(|s| s.waiting.is_some()),
    )
}

/// The exit code of a terminated status, else of its last termination.
fn exit_of(s: &ContainerStatus) -> Option<i32> {
    s.state.as_ref().and_then(|st| st.terminated.as_ref()).map(|t| t.exit_code).or_else(|| last_exit(s))
}

fn last_exit(s: &ContainerStatus) -> Option<i32> {
    s.last_state.as_ref().and_then(|l| l.terminated.as_ref()).map(|t| t.exit_code)
}

/// R9.3 over API container statuses. `has_initialized`: a regular container exists in the
/// current sandbox (see `has_active_app_container`).
pub fn phase_of_statuses(
    pod: &Pod,
    init: &[ContainerStatus],
    apps: &[ContainerStatus],
    has_initialized: bool,
) -> &'static str {
    let status = |name: &str| find(init, name).or_else(|| find(apps, name));
    let policy = restart_policy(pod);
    // KEP-5307 (upstream with ContainerRestartRules on): what decides is whether the exit will
    // be restarted, by the container's rules and policy, not the pod policy alone.
    let (mut pending_init, mut pending_sidecars, mut failed_init_final) = (0, 0, 0);
    let (mut unknown, mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    let mut stopped_final = 0;

    for spec in init_containers(pod) {
        let Some(s) = status(&spec.name) else {
            if is_sidecar(spec) {
                unknown += 1;
            } else {
                pending_init += 1;
            }
            continue;
        };
        let (is_running, is_terminated, is_waiting) = state_of(s);
        if is_sidecar(spec) {
            if is_running {
                // A sidecar that runs but has not passed its startup probe still blocks init.
                if s.started != Some(true) {
                    pending_sidecars += 1;
                }
                running += 1;
            } else if is_terminated || (is_waiting && last_exit(s).is_some()) {
                // An exited sidecar does not decide the phase: it restarts, or the pod is done.
            } else if is_waiting {
                pending_sidecars += 1;
                waiting += 1;
            } else {
                pending_sidecars += 1;
                unknown += 1;
            }
        } else if removed_for_restart_all(s) {
            // KEP-5532: removed to run again: the pod is Pending meanwhile.
            pending_init += 1;
        } else if is_terminated || (is_waiting && last_exit(s).is_some()) {
            let code = exit_of(s).unwrap_or(0);
            if code != 0 && !container_should_restart(spec, policy, code) {
                failed_init_final += 1;
            }
        } else {
            // Running, waiting for its first run, or unknown.
            pending_init += 1;
        }
    }

    for spec in app_containers(pod) {
        let Some(s) = status(&spec.name) else {
            unknown += 1;
            continue;
        };
        let (is_running, is_terminated, is_waiting) = state_of(s);
        if is_running {
            running += 1;
        } else if removed_for_restart_all(s) {
            waiting += 1;
        } else if is_terminated || (is_waiting && last_exit(s).is_some()) {
            stopped += 1;
            let code = exit_of(s).unwrap_or(0);
            if !container_should_restart(spec, policy, code) {
                stopped_final += 1;
            }
            // Restarting (waiting after an exit) is never counted as succeeded.
            if is_terminated && code == 0 {
                succeeded += 1;
            }
        } else if is_waiting {
            waiting += 1;
        } else {
            unknown += 1;
        }
    }

    if failed_init_final > 0 {
        return FAILED;
    }
    if pending_init > 0 || (pending_sidecars > 0 && !has_initialized) || waiting > 0 {
        return PENDING;
    }
    if running > 0 && unknown == 0 {
        return RUNNING;
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        // Step 5a ("the pod is terminal, so nothing restarts") never applies: every crilet pod
        // is a static pod (R3.8), also while it is being terminated.
        // Some container will run again: the pod is still running.
        if stopped != stopped_final {
            return RUNNING;
        }
        return if stopped == succeeded { SUCCEEDED } else { FAILED };
    }
    PENDING
}
