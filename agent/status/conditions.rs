//! Pod conditions (R9.5, upstream `status/generate.go`): the five the kubelet owns, in its
//! order, then the conditions set from outside (readiness gates) copied as given.
//! `lastTransitionTime` moves only when a condition's status changes (upstream status manager).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::containers::find;
use super::phase::{FAILED, SUCCEEDED};
use super::restart::all_containers_could_restart;
use crate::model::{ObservedPod, SandboxState};
use crate::podspec::{app_containers, init_containers, is_sidecar};

/// Condition types the kubelet owns, in the order they are listed.
pub const READY_TO_START: &str = "PodReadyToStartContainers";
/// See [`READY_TO_START`].
pub const INITIALIZED: &str = "Initialized";
/// See [`READY_TO_START`].
pub const READY: &str = "Ready";
/// See [`READY_TO_START`].
pub const CONTAINERS_READY: &str = "ContainersReady";
/// See [`READY_TO_START`].
pub const SCHEDULED: &str = "PodScheduled";
/// crilet's own condition, set from outside during an in-place image update. When present it
/// gates `Ready` like a readiness gate, without being listed in `spec.readinessGates`.
pub const IN_PLACE_UPDATE_READY: &str = "InPlaceUpdateReady";

/// KEP-5532: a pod with a RestartAllContainers rule reports whether it is restarting them.
pub const ALL_CONTAINERS_RESTARTING: &str = "AllContainersRestarting";

const KUBELET_OWNED: [&str; 6] =
    [READY_TO_START, INITIALIZED, READY, CONTAINERS_READY, SCHEDULED, ALL_CONTAINERS_RESTARTING];

/// What the conditions are computed from.
pub(crate) struct Input<'a> {
    pub pod: &'a Pod,
    pub observed: &'a ObservedPod,
    pub init: &'a [ContainerStatus],
    pub apps: &'a [ContainerStatus],
    pub phase: &'a str,
    pub external: &'a [PodCondition],
    pub previous: Option<&'a PodStatus>,
    pub now: Timestamp,
    /// A RestartAllContainers is under way (see `containers::Ctx::restarting_all`).
    pub restarting_all: bool,
    /// `InPlaceUpdateReady` counts for Ready without being a readiness gate: a static pod's,
    /// crilet's own (DESIGN "Updates"). An API pod's counts only as a gate, as upstream.
    pub in_place_counts: bool,
}

/// A condition without times (they are filled in by `conditions`).
struct Cond {
    type_: &'static str,
    status: bool,
    reason: Option<&'static str>,
    message: Option<String>,
}

impl Cond {
    fn yes(type_: &'static str) -> Self {
        Self { type_, status: true, reason: None, message: None }
    }
    fn no(type_: &'static str, reason: Option<&'static str>, message: Option<String>) -> Self {
        Self { type_, status: false, reason, message }
    }
}

/// All conditions, kubelet-owned first, then the external ones (any external condition with a
/// kubelet-owned type is dropped: the kubelet's own wins).
pub(crate) fn conditions(input: &Input) -> Vec<PodCondition> {
    let containers_ready = containers_ready(input);
    let mut owned = vec![
        Cond { status: sandbox_ready_to_start(input.pod, input.observed), ..Cond::yes(READY_TO_START) },
        initialized(input),
        ready(input, &containers_ready),
        containers_ready,
        Cond::yes(SCHEDULED),
    ];
    if all_containers_could_restart(input.pod) {
        owned.push(all_containers_restarting(input));
    }
    let prev = input.previous.and_then(|p| p.conditions.as_deref()).unwrap_or_default();
    let mut out: Vec<PodCondition> = owned
        .into_iter()
        .map(|c| {
            let status = if c.status { "True" } else { "False" };
            // The transition time stays as long as the status does (upstream status manager).
            let since = prev
                .iter()
                .find(|p| p.type_ == c.type_ && p.status == status)
                .and_then(|p| p.last_transition_time.clone())
                .unwrap_or(Time(input.now));
            PodCondition {
                type_: c.type_.to_owned(),
                status: status.to_owned(),
                reason: c.reason.map(str::to_owned),
                message: c.message,
                last_transition_time: Some(since),
                last_probe_time: None,
                observed_generation: None,
            }
        })
        .collect();
    out.extend(input.external.iter().filter(|c| !KUBELET_OWNED.contains(&c.type_.as_str())).cloned());
    out
}

/// KEP-5532 (upstream `GenerateAllContainersRestartingCondition`): True while a
/// RestartAllContainers runs and an instance is left to remove; False once none is (the pod
/// starts over), and in a terminal phase with its reason.
fn all_containers_restarting(input: &Input) -> Cond {
    match input.phase {
        SUCCEEDED => return Cond::no(ALL_CONTAINERS_RESTARTING, Some("PodCompleted"), None),
        FAILED => return Cond::no(ALL_CONTAINERS_RESTARTING, Some("PodFailed"), None),
        _ => {}
    }
    let names: Vec<&str> =
        init_containers(input.pod).iter().chain(app_containers(input.pod)).map(|c| c.name.as_str()).collect();
    let left = input.observed.containers.iter().any(|c| names.contains(&c.name.as_str()));
    if input.restarting_all && left {
        Cond {
            type_: ALL_CONTAINERS_RESTARTING,
            status: true,
            reason: Some("RestartAllContainersStarted"),
            message: Some("container exited with restart policy rule".into()),
        }
    } else {
        Cond::no(ALL_CONTAINERS_RESTARTING, None, None)
    }
}

/// R2.6/R2.9: true exactly when the planner would keep the newest sandbox.
pub(crate) fn sandbox_ready_to_start(pod: &Pod, observed: &ObservedPod) -> bool {
    let Some(newest) = observed.sandbox() else { return false };
    let host_network = pod.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false);
    let ready_count = observed.sandboxes.iter().filter(|s| s.state == SandboxState::Ready).count();
    ready_count <= 1
        && newest.state == SandboxState::Ready
        && newest.host_network == host_network
        && (host_network || newest.ips.first().is_some_and(|ip| !ip.is_empty()))
}

/// Go's `%s` of a `[]string`: `[a b]`.
fn go_list(names: &[&str]) -> String {
    format!("[{}]", names.join(" "))
}

fn status_of<'s>(input: &'s Input, name: &str) -> Option<&'s ContainerStatus> {
    find(input.init, name).or_else(|| find(input.apps, name))
}

fn initialized(input: &Input) -> Cond {
    let (mut unknown, mut incomplete) = (Vec::new(), Vec::new());
    for spec in init_containers(input.pod) {
        let Some(s) = status_of(input, &spec.name) else {
            unknown.push(spec.name.as_str());
            continue;
        };
        // A sidecar counts once started; a regular init container once it completed.
        let done = if is_sidecar(spec) { s.started == Some(true) } else { s.ready };
        if !done {
            incomplete.push(spec.name.as_str());
        }
    }
    if input.phase == SUCCEEDED && unknown.is_empty() {
        return Cond { reason: Some("PodCompleted"), ..Cond::yes(INITIALIZED) };
    }
    // Once a regular container has run, a restarting sidecar never un-initializes the pod.
    let app_started = app_containers(input.pod).iter().any(|spec| {
        find(input.apps, &spec.name)
            .and_then(|s| s.state.as_ref())
            .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
    });
    if app_started {
        return Cond::yes(INITIALIZED);
    }
    let mut messages = Vec::new();
    if !unknown.is_empty() {
        messages.push(format!("containers with unknown status: {}", go_list(&unknown)));
    }
    if !incomplete.is_empty() {
        messages.push(format!("containers with incomplete status: {}", go_list(&incomplete)));
    }
    if messages.is_empty() {
        Cond::yes(INITIALIZED)
    } else {
        Cond::no(INITIALIZED, Some("ContainersNotInitialized"), Some(messages.join(", ")))
    }
}

fn containers_ready(input: &Input) -> Cond {
    let (mut unknown, mut unready) = (Vec::new(), Vec::new());
    let sidecars = init_containers(input.pod).iter().filter(|c| is_sidecar(c));
    for spec in sidecars.chain(app_containers(input.pod)) {
        match status_of(input, &spec.name) {
            None => unknown.push(spec.name.as_str()),
            Some(s) if !s.ready => unready.push(spec.name.as_str()),
            Some(_) => {}
        }
    }
    if input.phase == SUCCEEDED && unknown.is_empty() {
        return Cond::no(CONTAINERS_READY, Some("PodCompleted"), None);
    }
    if input.phase == FAILED {
        return Cond::no(CONTAINERS_READY, Some("PodFailed"), None);
    }
    let mut messages = Vec::new();
    if !unknown.is_empty() {
        messages.push(format!("containers with unknown status: {}", go_list(&unknown)));
    }
    if !unready.is_empty() {
        messages.push(format!("containers with unready status: {}", go_list(&unready)));
    }
    if messages.is_empty() {
        Cond::yes(CONTAINERS_READY)
    } else {
        Cond::no(CONTAINERS_READY, Some("ContainersNotReady"), Some(messages.join(", ")))
    }
}

fn ready(input: &Input, containers_ready: &Cond) -> Cond {
    if !containers_ready.status {
        return Cond::no(READY, containers_ready.reason, containers_ready.message.clone());
    }
    let gates = input.pod.spec.as_ref().and_then(|s| s.readiness_gates.as_deref()).unwrap_or_default();
    let mut types: Vec<&str> = gates.iter().map(|g| g.condition_type.as_str()).collect();
    if input.in_place_counts
        && input.external.iter().any(|c| c.type_ == IN_PLACE_UPDATE_READY)
        && !types.contains(&IN_PLACE_UPDATE_READY)
    {
        types.push(IN_PLACE_UPDATE_READY);
    }
    let messages: Vec<String> = types
        .iter()
        .filter_map(|t| match input.external.iter().find(|c| c.type_ == *t) {
            None => Some(format!("corresponding condition of pod readiness gate {t:?} does not exist.")),
            Some(c) if c.status != "True" => {
                Some(format!("the status of pod readiness gate {t:?} is not \"True\", but {}", c.status))
            }
            Some(_) => None,
        })
        .collect();
    if messages.is_empty() {
        Cond::yes(READY)
    } else {
        Cond::no(READY, Some("ReadinessGatesNotReady"), Some(messages.join(", ")))
    }
}
