//! Container statuses (R9.1, R9.2, R6.5): one `ContainerStatus` per spec container, built from
//! the newest two runtime instances, the previous status, the last sync's start errors and the
//! probe results. Phase and conditions are computed from these, in `phase.rs`/`conditions.rs`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, ContainerUser, LinuxContainerUser, Pod,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::StartError;
use super::restart::should_restart;
use crate::model::{self, ObservedContainer, ObservedPod, ProbeState};
use crate::podspec::{Kind, app_containers, init_containers, restart_policy};

/// Upstream's reason and exit code for an instance the runtime lost track of (R9.1).
const STATUS_UNKNOWN: &str = "ContainerStatusUnknown";
const STATUS_UNKNOWN_EXIT: i32 = 137;
/// KEP-5532: the reason of a container removed by a RestartAllContainers (upstream
/// `RestartingAllContainers`), as its waiting state and its last termination.
pub(crate) const RESTARTING_ALL: &str = "RestartingAllContainers";
const RESTARTING_ALL_MESSAGE: &str = "The container is removed because RestartAllContainers in place";

/// Everything the per-container conversion reads, borrowed from the `StatusInput`.
pub(crate) struct Ctx<'a> {
    pub pod: &'a Pod,
    pub observed: &'a ObservedPod,
    pub probes: &'a BTreeMap<String, ProbeState>,
    pub start_errors: &'a BTreeMap<String, StartError>,
    pub termination_messages: &'a BTreeMap<String, String>,
    pub terminating: bool,
    /// KEP-5532: a RestartAllContainers is under way (an exit triggered it, or the previous
    /// status said so): a container without an instance was removed for it.
    pub restarting_all: bool,
}

/// `initContainerStatuses`, in spec order (sidecars included).
pub(crate) fn init_statuses(ctx: &Ctx, previous: &[ContainerStatus]) -> Vec<ContainerStatus> {
    init_containers(ctx.pod)
        .iter()
        .map(|c| {
            let kind = Kind::of_init(c);
            status_of(ctx, c, kind, find(previous, &c.name))
        })
        .collect()
}

/// `containerStatuses`, sorted by name.
pub(crate) fn app_statuses(ctx: &Ctx, previous: &[ContainerStatus]) -> Vec<ContainerStatus> {
    let mut out: Vec<_> = app_containers(ctx.pod)
        .iter()
        .map(|c| status_of(ctx, c, Kind::App, find(previous, &c.name)))
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// `ephemeralContainerStatuses`, in spec order: mapped as an app container's, never ready
/// (no probe, not part of the pod's readiness), as upstream.
pub(crate) fn ephemeral_statuses(ctx: &Ctx, previous: &[ContainerStatus]) -> Vec<ContainerStatus> {
    crate::podspec::ephemeral_containers(ctx.pod)
        .iter()
        .map(|(c, _)| {
            let mut st = status_of(ctx, c, Kind::App, find(previous, &c.name));
            st.ready = false;
            st
        })
        .collect()
}

pub(crate) fn find<'s>(statuses: &'s [ContainerStatus], name: &str) -> Option<&'s ContainerStatus> {
    statuses.iter().find(|s| s.name == name)
}

/// `containerd://<id>`, the kubelet's container ID form.
pub(crate) fn container_id(id: &str) -> String {
    format!("containerd://{id}")
}

/// Nanoseconds since the epoch → API time; 0 (unknown) or out of range → absent.
pub(crate) fn time_of(ns: i64) -> Option<Time> {
    if ns <= 0 {
        return None;
    }
    jiff::Timestamp::from_nanosecond(i128::from(ns)).ok().map(Time)
}

fn waiting(reason: Option<&str>, message: Option<&str>) -> ContainerState {
    let non_empty = |s: Option<&str>| s.filter(|s| !s.is_empty()).map(str::to_owned);
    ContainerState {
        waiting: Some(ContainerStateWaiting { reason: non_empty(reason), message: non_empty(message) }),
        ..Default::default()
    }
}

fn status_of(ctx: &Ctx, spec: &Container, kind: Kind, prev: Option<&ContainerStatus>) -> ContainerStatus {
    let spec_image = spec.image.clone().unwrap_or_default();
    // R9.1 default: waiting with PodInitializing/ContainerCreating; restartCount and lastState
    // carried from the previous status, or the whole previous status if it was terminated.
    let default_reason =
        if init_containers(ctx.pod).is_empty() { "ContainerCreating" } else { "PodInitializing" };
    let mut st = match prev {
        Some(p) if p.state.as_ref().is_some_and(|s| s.terminated.is_some()) => p.clone(),
        _ => ContainerStatus {
            name: spec.name.clone(),
            image: spec_image.clone(),
            state: Some(waiting(Some(default_reason), None)),
            restart_count: prev.map_or(0, |p| p.restart_count),
            last_state: prev.and_then(|p| p.last_state.clone()),
            ..Default::default()
        },
    };

    let (newest, second) = ctx.observed.newest_two(&spec.name);
    match newest {
        Some(n) => {
            st = from_instance(ctx, n, &spec_image, prev);
            st.last_state = match second {
                Some(s) => from_instance(ctx, s, &spec_image, prev).state,
                None => carried_last_state(prev, &container_id(&n.id)),
            };
        }
        None => no_instance(ctx, kind, prev, &mut st),
    }

    // R7.10/R9.1: a container that will be started again shows the last start error as its
    // waiting reason; the terminated state it had moves to lastState.
    let policy = restart_policy(ctx.pod);
    let err = ctx
        .start_errors
        .get(&spec.name)
        .filter(|_| should_restart(spec, kind, policy, newest, ctx.terminating));
    if let Some(err) = err {
        if let Some(state) = st.state.take_if(|s| s.terminated.is_some()) {
            st.last_state = Some(state);
        }
        st.state = Some(waiting(Some(&err.reason), Some(&err.message)));
    }

    set_started_ready(ctx, spec, kind, newest, &mut st);
    st
}

/// `lastState` when the runtime holds only the newest instance (the older one was removed by
/// container GC, or by the runtime): carried forward from the previous status, as the kubelet
/// carries it from the status it published, never dropped.
/// - the previous status described this same instance: its lastState still holds;
/// - it described an instance that terminated and is gone: that termination is the last state.
/// - it was removed by a RestartAllContainers: the termination recorded for that stands.
fn carried_last_state(prev: Option<&ContainerStatus>, newest_id: &str) -> Option<ContainerState> {
    let prev = prev?;
    if prev.container_id.as_deref() == Some(newest_id) {
        return prev.last_state.clone();
    }
    if removed_for_restart_all(prev) {
        return prev.last_state.clone();
    }
    prev.state.clone().filter(|s| s.terminated.is_some())
}

/// KEP-5532: a status that shows its container removed by a RestartAllContainers.
pub(crate) fn removed_for_restart_all(s: &ContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.waiting.is_some())
        && s.last_state
            .as_ref()
            .and_then(|l| l.terminated.as_ref())
            .is_some_and(|t| t.reason.as_deref() == Some(RESTARTING_ALL))
}

/// No runtime instance: the previous status stands, with two upstream inferences.
fn no_instance(ctx: &Ctx, kind: Kind, prev: Option<&ContainerStatus>, st: &mut ContainerStatus) {
    // KEP-5532 (upstream): removed by a RestartAllContainers, it waits to run again; the removal
    // is its last termination, and it counts as a restart.
    if ctx.restarting_all && !ctx.terminating {
        if let Some(p) = prev.filter(|p| p.state.as_ref().is_none_or(|s| s.waiting.is_none())) {
            st.state = Some(waiting(Some(RESTARTING_ALL), Some(RESTARTING_ALL_MESSAGE)));
            st.last_state = Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: STATUS_UNKNOWN_EXIT,
                    reason: Some(RESTARTING_ALL.into()),
                    message: Some(RESTARTING_ALL_MESSAGE.into()),
                    ..Default::default()
                }),
                ..Default::default()
            });
            st.restart_count = p.restart_count.saturating_add(1);
            st.container_id = None;
            st.ready = false;
            st.started = Some(false);
            return;
        }
    }
    let waiting_now = st.state.as_ref().is_some_and(|s| s.waiting.is_some());
    let has_last_termination = st.last_state.as_ref().is_some_and(|s| s.terminated.is_some());
    // A container that was running and vanished from the runtime did terminate, we just do not
    // know how; saying so keeps the pod from falling back to Pending.
    if prev.and_then(|p| p.state.as_ref()).is_some_and(|s| s.running.is_some())
        && waiting_now
        && !has_last_termination
    {
        st.last_state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: STATUS_UNKNOWN_EXIT,
                reason: Some(STATUS_UNKNOWN.into()),
                message: Some(
                    "The container could not be located when the pod was deleted.  \
                     The container used to be Running"
                        .into(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        });
        if !ctx.terminating {
            st.restart_count += 1;
        }
    }
    // A regular init container pruned from the runtime after a regular container was created
    // must have completed (R4.10 removes old init instances; static pods keep no API status).
    let app_created = app_containers(ctx.pod).iter().any(|c| ctx.observed.newest(&c.name).is_some());
    if kind == Kind::Init && app_created && st.state.as_ref().is_some_and(|s| s.waiting.is_some()) {
        st.state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 0,
                reason: Some("Completed".into()),
                message: Some(
                    "Unable to get init container status from container runtime and pod has been \
                     initialized, treat it as exited normally"
                        .into(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
}

/// One runtime instance → API status (R9.1 state mapping, R9.2 message).
fn from_instance(
    ctx: &Ctx,
    c: &ObservedContainer,
    spec_image: &str,
    prev: Option<&ContainerStatus>,
) -> ContainerStatus {
    let cid = container_id(&c.id);
    let mut restart_count = i32::try_from(c.restart_count).unwrap_or(i32::MAX);
    let state = match c.state {
        model::ContainerState::Running => ContainerState {
            running: Some(ContainerStateRunning { started_at: time_of(c.started_at) }),
            ..Default::default()
        },
        model::ContainerState::Created => waiting(None, None),
        model::ContainerState::Exited => ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: c.exit_code,
                reason: Some(c.reason.clone()).filter(|r| !r.is_empty()),
                message: join_message(&c.message, ctx.termination_messages.get(&c.id)),
                started_at: time_of(c.started_at),
                finished_at: time_of(c.finished_at),
                container_id: Some(cid.clone()),
                signal: None,
            }),
            ..Default::default()
        },
        model::ContainerState::Unknown => match prev {
            // It was running and the runtime no longer knows it: it terminated, somehow.
            Some(p) if p.state.as_ref().is_some_and(|s| s.running.is_some()) => {
                restart_count = p.restart_count.saturating_add(1);
                ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: STATUS_UNKNOWN_EXIT,
                        reason: Some(STATUS_UNKNOWN.into()),
                        message: Some(
                            "The container could not be located when the pod was terminated".into(),
                        ),
                        ..Default::default()
                    }),
                    ..Default::default()
                }
            }
            _ => waiting(None, None),
        },
    };
    ContainerStatus {
        name: c.name.clone(),
        image: display_image(&c.image, spec_image),
        image_id: c.image_ref.clone(),
        container_id: Some(cid),
        restart_count,
        state: Some(state),
        // KEP-4960: the effective signal as the runtime reports it (absent when it reports
        // none: a runtime that ignores `lifecycle.stopSignal` must not look as if it used it).
        stop_signal: c.stop_signal.clone(),
        // KEP-3619 (GA in 1.35): the uid, gid and supplemental groups the runtime gave the
        // first process, as it reports them; absent when it reports none.
        user: c.user.as_ref().map(|u| ContainerUser {
            linux: Some(LinuxContainerUser {
                uid: u.uid,
                gid: u.gid,
                supplemental_groups: Some(u.supplemental_groups.clone()),
            }),
        }),
        ..Default::default()
    }
}

/// The runtime's image name, unless it is a bare image ID (containerd reports `sha256:…` when
/// the image has no tag left); then the spec's image string says more to a reader.
fn display_image(observed: &str, spec_image: &str) -> String {
    let bare = observed.strip_prefix("sha256:").unwrap_or(observed);
    let is_id = bare.len() == 64 && bare.bytes().all(|b| b.is_ascii_hexdigit());
    if observed.is_empty() || is_id { spec_image.to_owned() } else { observed.to_owned() }
}

/// R9.2: the runtime message, then the termination message, joined by ": ".
fn join_message(runtime: &str, termination: Option<&String>) -> Option<String> {
    let parts: Vec<&str> =
        [runtime, termination.map_or("", String::as_str)].into_iter().filter(|s| !s.is_empty()).collect();
    (!parts.is_empty()).then(|| parts.join(": "))
}

/// R6.5: `started` and `ready`, from the final state and the current instance's probe results.
fn set_started_ready(
    ctx: &Ctx,
    spec: &Container,
    kind: Kind,
    newest: Option<&ObservedContainer>,
    st: &mut ContainerStatus,
) {
    let running = st.state.as_ref().is_some_and(|s| s.running.is_some());
    let probe = newest.filter(|_| running).and_then(|n| ctx.probes.get(&n.id)).copied().unwrap_or_default();
    let started = running && (spec.startup_probe.is_none() || probe.started == Some(true));
    st.started = Some(started);
    st.ready = match kind {
        // Regular init containers have no probes: ready means completed.
        Kind::Init => st.state.as_ref().and_then(|s| s.terminated.as_ref()).is_some_and(|t| t.exit_code == 0),
        Kind::Sidecar | Kind::App | Kind::Ephemeral => {
            started && (spec.readiness_probe.is_none() || probe.ready == Some(true))
        }
    };
}
