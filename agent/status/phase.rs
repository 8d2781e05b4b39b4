//! Pod phase (R9.3, upstream `getPhase`) and its stickiness (R9.4), plus the two "has the pod
//! been initialized?" questions: R4.1 for the planner, and "a regular container exists in the
//! current sandbox" for the phase.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};

use super::containers::{self, Ctx, find};
use super::restart::{app_containers, init_containers, is_sidecar, restart_policy};
use crate::model::{ContainerState, ObservedPod, ProbeState};

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
    };
    let prev_init = previous.and_then(|p| p.init_container_statuses.as_deref()).unwrap_or_default();
    let prev_apps = previous.and_then(|p| p.container_statuses.as_deref()).unwrap_or_default();
    let init = containers::init_statuses(&ctx, prev_init);
    let apps = containers::app_statuses(&ctx, prev_apps);
    let computed = phase_of_statuses(pod, &init, &apps, has_active_app_container(pod, observed));
    sticky(computed, previous)
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
    let (mut pending_init, mut pending_sidecars, mut failed_init) = (0, 0, 0);
    let (mut unknown, mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);

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
        } else if is_terminated {
            let code = s.state.as_ref().and_then(|s| s.terminated.as_ref()).map_or(0, |t| t.exit_code);
            if code != 0 {
                failed_init += 1;
            }
        } else if is_waiting && last_exit(s).is_some() {
            if last_exit(s) != Some(0) {
                failed_init += 1;
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
        } else if is_terminated {
            stopped += 1;
            let code = s.state.as_ref().and_then(|s| s.terminated.as_ref()).map_or(0, |t| t.exit_code);
            if code == 0 {
                succeeded += 1;
            }
        } else if is_waiting && last_exit(s).is_some() {
            // Restarting (or about to be): stopped, but never counted as succeeded.
            stopped += 1;
        } else if is_waiting {
            waiting += 1;
        } else {
            unknown += 1;
        }
    }

    let policy = restart_policy(pod);
    if failed_init > 0 && policy == "Never" {
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
        return match policy {
            "Always" => RUNNING,
            _ if stopped == succeeded => SUCCEEDED,
            "Never" => FAILED,
            _ => RUNNING,
        };
    }
    PENDING
}
