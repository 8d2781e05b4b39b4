//! Container kinds (init, sidecar, regular) and the "should this container be (re)started?"
//! decision of R7.1/R7.2. The planner and the status both use it, so the waiting reason a user
//! sees and the restart the planner schedules can never disagree.

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::model::{ContainerState, ObservedContainer};

/// What role a spec container plays in the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerKind {
    /// `spec.initContainers[i]` without `restartPolicy`: runs once to completion, in order.
    Init,
    /// `spec.initContainers[i]` with `restartPolicy: Always` (upstream "restartable init container").
    Sidecar,
    /// `spec.containers[i]`.
    App,
}

/// The pod's `restartPolicy`, defaulted as the API server does.
pub(crate) fn restart_policy(pod: &Pod) -> &str {
    pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()).unwrap_or("Always")
}

/// A sidecar is an init container whose own `restartPolicy` is `Always`.
pub fn is_sidecar(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

/// The pod's init containers (regular and sidecars) in spec order.
pub(crate) fn init_containers(pod: &Pod) -> &[Container] {
    pod.spec.as_ref().and_then(|s| s.init_containers.as_deref()).unwrap_or_default()
}

/// The pod's regular containers in spec order.
pub(crate) fn app_containers(pod: &Pod) -> &[Container] {
    pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default()
}

/// Which spec containers exist, with their kind, in spec order (init containers first).
pub fn container_kinds(pod: &Pod) -> Vec<(String, ContainerKind)> {
    let init = init_containers(pod).iter().map(|c| {
        let kind = if is_sidecar(c) { ContainerKind::Sidecar } else { ContainerKind::Init };
        (c.name.clone(), kind)
    });
    let apps = app_containers(pod).iter().map(|c| (c.name.clone(), ContainerKind::App));
    init.chain(apps).collect()
}

/// A regular init container failed when it exited non-zero, or was OOM-killed even with exit 0
/// (R4.2, R12.4).
pub fn init_failed(c: &ObservedContainer) -> bool {
    c.exit_code != 0 || c.reason == "OOMKilled"
}

/// R7.1 + R7.2: should the newest instance (`None` = no instance) of this container be
/// (re)started? `kind` decides which policy applies.
///
/// - a terminating pod restarts nothing (upstream: the pod has a deletion timestamp);
/// - no instance → start; RUNNING → no; UNKNOWN or CREATED → yes (an UNKNOWN instance is killed
///   first, so two copies never run);
/// - EXITED: a sidecar always restarts, whatever the pod policy; a regular init container
///   restarts only when it failed and the policy is not `Never`; a regular container follows
///   the pod policy (`Never` → no, `OnFailure` → only on a non-zero exit, `Always` → yes).
pub fn should_restart(
    kind: ContainerKind,
    pod_restart_policy: &str,
    newest: Option<&ObservedContainer>,
    terminating: bool,
) -> bool {
    if terminating {
        return false;
    }
    let Some(c) = newest else { return true };
    match c.state {
        ContainerState::Running => false,
        ContainerState::Unknown | ContainerState::Created => true,
        ContainerState::Exited => match kind {
            ContainerKind::Sidecar => true,
            ContainerKind::Init => init_failed(c) && pod_restart_policy != "Never",
            ContainerKind::App => match pod_restart_policy {
                "Never" => false,
                "OnFailure" => c.exit_code != 0,
                _ => true,
            },
        },
    }
}
