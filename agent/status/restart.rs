//! Container kinds (init, sidecar, regular) and the "should this container be (re)started?"
//! decision of R7.1/R7.2. The planner and the status both use it, so the waiting reason a user
//! sees and the restart the planner schedules can never disagree.

use k8s_openapi::api::core::v1::{Container, ContainerRestartRule, Pod};

use crate::model::{ContainerState, ObservedContainer, ObservedPod};
use crate::podspec::{Kind, app_containers, init_containers};

/// A regular init container failed when it exited non-zero, or was OOM-killed even with exit 0
/// (R4.2, R12.4).
pub fn init_failed(c: &ObservedContainer) -> bool {
    c.exit_code != 0 || c.reason == "OOMKilled"
}

/// KEP-5307 (upstream `podutil.ContainerShouldRestart`): does a container that exited with
/// `exit_code` restart? With a `restartPolicy` of its own, its first matching rule with action
/// `Restart` says yes; otherwise its own policy decides. Without one, the pod's policy does.
/// (A rule whose action is `RestartAllContainers` falls through to the container's policy here;
/// it restarts the whole pod instead, see [`restart_all_rule_matches`].)
pub fn container_should_restart(container: &Container, pod_policy: &str, exit_code: i32) -> bool {
    if let Some(own) = container.restart_policy.as_deref() {
        if matching_rule(container, exit_code).is_some_and(|r| r.action == "Restart") {
            return true;
        }
        match own {
            "Always" => return true,
            "OnFailure" => return exit_code != 0,
            "Never" => return false,
            _ => {}
        }
    }
    match pod_policy {
        "OnFailure" => exit_code != 0,
        "Never" => false,
        _ => true,
    }
}

/// Without an exit code (a liveness or startup probe failed, the state is unknown), rules
/// cannot be evaluated: the container's own policy decides (anything but `Never` restarts),
/// else the pod's.
pub fn restart_without_exit_code(container: &Container, pod_policy: &str) -> bool {
    match container.restart_policy.as_deref() {
        Some(own) => own != "Never",
        None => pod_policy != "Never",
    }
}

/// Does the container's first rule that matches `exit_code` restart the whole pod
/// (KEP-5532)? Only with a container `restartPolicy` of its own, as upstream.
pub fn restart_all_rule_matches(container: &Container, exit_code: i32) -> bool {
    container.restart_policy.is_some()
        && matching_rule(container, exit_code).is_some_and(|r| r.action == "RestartAllContainers")
}

/// KEP-5532: does an exit ask for all containers to restart, that is, did the newest instance
/// of some init or app container exit with a code whose first matching rule is
/// `RestartAllContainers`?
pub fn restart_all_triggered(pod: &Pod, observed: &ObservedPod) -> bool {
    init_containers(pod).iter().chain(app_containers(pod)).any(|spec| {
        observed
            .newest(&spec.name)
            .is_some_and(|c| c.state == ContainerState::Exited && restart_all_rule_matches(spec, c.exit_code))
    })
}

/// Does any container carry a `RestartAllContainers` rule (upstream `AllContainersCouldRestart`:
/// the pod then reports the `AllContainersRestarting` condition)?
pub fn all_containers_could_restart(pod: &Pod) -> bool {
    init_containers(pod)
        .iter()
        .chain(app_containers(pod))
        .any(|c| c.restart_policy.is_some() && rules(c).any(|r| r.action == "RestartAllContainers"))
}

fn rules(container: &Container) -> impl Iterator<Item = &ContainerRestartRule> {
    container.restart_policy_rules.iter().flatten()
}

/// The first rule whose `exitCodes` match (`In`: the code is listed, `NotIn`: it is not); a
/// rule with another operator is skipped, as upstream.
fn matching_rule(container: &Container, exit_code: i32) -> Option<&ContainerRestartRule> {
    rules(container).find(|r| {
        r.exit_codes.as_ref().is_some_and(|e| {
            let listed = e.values.iter().flatten().any(|v| *v == exit_code);
            match e.operator.as_str() {
                "In" => listed,
                "NotIn" => !listed,
                _ => false,
            }
        })
    })
}

/// R7.1 + R7.2 with KEP-5307: should the newest instance (`None` = no instance) of this
/// container be (re)started? `kind` decides which policy applies.
///
/// - a terminating pod restarts nothing (upstream: the pod has a deletion timestamp);
/// - no instance → start; RUNNING → no; UNKNOWN or CREATED → yes (an UNKNOWN instance is killed
///   first, so two copies never run);
/// - EXITED: a sidecar always restarts, whatever the pod policy; a regular init container
///   restarts only when it failed and [`container_should_restart`] says so for its exit code;
///   a regular container as [`container_should_restart`] says (the pod policy unless the
///   container has its own policy and rules).
pub fn should_restart(
    spec: &Container,
    kind: Kind,
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
            Kind::Sidecar => true,
            Kind::Init => init_failed(c) && container_should_restart(spec, pod_restart_policy, c.exit_code),
            Kind::App => container_should_restart(spec, pod_restart_policy, c.exit_code),
            // Started once, never restarted.
            Kind::Ephemeral => false,
        },
    }
}
