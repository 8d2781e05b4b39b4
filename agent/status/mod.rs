//! Pod status, computed purely from the desired pod, the observed runtime state, probe results
//! and the last sync's start errors (spec §9): phase, conditions, container statuses, IPs, QoS.
//!
//! Nothing here does I/O or reads a clock: the pod worker gathers the inputs (including the
//! termination messages it read from disk and `now`) and stores the result. The restart
//! decision (R7.1/R7.2) lives here too, so the planner and the waiting reasons agree.

mod conditions;
mod containers;
mod phase;
mod pod;

pub use pod::qos_class;
mod restart;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{HostIP, PodCondition, PodIP, PodStatus};

pub use self::conditions::{
    CONTAINERS_READY, IN_PLACE_UPDATE_READY, INITIALIZED, READY, READY_TO_START, SCHEDULED,
};
pub use self::phase::{
    FAILED, PENDING, RUNNING, SUCCEEDED, is_terminal, phase, phase_of_statuses, pod_initialized,
};
pub use self::restart::{
    all_containers_could_restart, container_should_restart, init_failed, restart_all_rule_matches,
    restart_all_triggered, restart_without_exit_code, should_restart,
};
use crate::model::{DesiredPod, ObservedPod, ProbeState};

/// A start error remembered from the last sync, shown as the waiting reason while the container
/// should be restarted (R7.10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartError {
    /// `CrashLoopBackOff`, `ErrImagePull`, `RunContainerError`, ...
    pub reason: String,
    pub message: String,
}

/// Everything `compute` reads.
pub struct StatusInput<'a> {
    pub desired: &'a DesiredPod,
    pub observed: &'a ObservedPod,
    /// Probe-derived flags keyed by container ID (only for the current instance). Missing entry:
    /// no probe results yet.
    pub probes: &'a BTreeMap<String, ProbeState>,
    /// Start errors from the last sync, keyed by container name.
    pub start_errors: &'a BTreeMap<String, StartError>,
    /// The pod is being terminated (manifest removed or replaced).
    pub terminating: bool,
    /// Conditions set from outside (readiness gates) — copied into the status.
    pub external_conditions: &'a [PodCondition],
    /// The previous computed status, for transition times and phase stickiness (R9.4).
    pub previous: Option<&'a PodStatus>,
    /// Termination messages read by the caller for exited instances, keyed by container ID.
    pub termination_messages: &'a BTreeMap<String, String>,
    pub host_ip: Option<&'a str>,
    pub now: jiff::Timestamp,
}

/// The pod's API status (R9.1–R9.5).
pub fn compute(input: &StatusInput) -> PodStatus {
    let pod = &*input.desired.pod;
    let ctx = containers::Ctx {
        pod,
        observed: input.observed,
        probes: input.probes,
        start_errors: input.start_errors,
        termination_messages: input.termination_messages,
        terminating: input.terminating,
        restarting_all: phase::restarting_all(&input.desired.pod, input.observed, input.previous),
    };
    let previous = input.previous;
    let prev_init = previous.and_then(|p| p.init_container_statuses.as_deref()).unwrap_or_default();
    let prev_apps = previous.and_then(|p| p.container_statuses.as_deref()).unwrap_or_default();
    let init = containers::init_statuses(&ctx, prev_init);
    let apps = containers::app_statuses(&ctx, prev_apps);
    let prev_ephemeral = previous.and_then(|p| p.ephemeral_container_statuses.as_deref()).unwrap_or_default();
    let ephemeral = containers::ephemeral_statuses(&ctx, prev_ephemeral);

    let computed =
        phase::phase_of_statuses(pod, &init, &apps, phase::has_active_app_container(pod, input.observed));
    let phase = phase::sticky(computed, previous);

    let conditions = conditions::conditions(&conditions::Input {
        pod,
        observed: input.observed,
        init: &init,
        apps: &apps,
        phase,
        external: input.external_conditions,
        previous,
        now: input.now,
        restarting_all: ctx.restarting_all,
        in_place_counts: !input.desired.source.is_api(),
    });

    // Reason and message belong to the phase: kept while it does not change (R9.4).
    let (reason, message) = match previous {
        Some(p) if p.phase.as_deref() == Some(phase) => (p.reason.clone(), p.message.clone()),
        _ => (None, None),
    };

    let host_network = pod.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false);
    let mut pod_ips = pod::sort_pod_ips(input.observed.pod_ips(), input.host_ip);
    if pod_ips.is_empty() && host_network {
        pod_ips.extend(input.host_ip.map(str::to_owned));
    }

    // The start time never changes once set; the first sandbox's creation is the pod's start.
    let start_time = previous
        .and_then(|p| p.start_time.clone())
        .or_else(|| input.observed.sandbox().and_then(|s| containers::time_of(s.created_at)));

    PodStatus {
        phase: Some(phase.to_owned()),
        reason,
        message,
        conditions: Some(conditions),
        init_container_statuses: (!init.is_empty()).then_some(init),
        container_statuses: Some(apps),
        ephemeral_container_statuses: (!ephemeral.is_empty()).then_some(ephemeral),
        host_ip: input.host_ip.map(str::to_owned),
        host_ips: input.host_ip.map(|ip| vec![HostIP { ip: ip.to_owned() }]),
        pod_ip: pod_ips.first().cloned(),
        pod_ips: (!pod_ips.is_empty()).then(|| pod_ips.into_iter().map(|ip| PodIP { ip }).collect()),
        qos_class: Some(pod::qos_class(pod).to_owned()),
        start_time,
        ..Default::default()
    }
}
