//! Each container's lifecycle as the agent acted on it or saw it happen, for `crilet describe`:
//! created, started, `started` and `ready` turning true (or ready false), killed and why, the
//! preStop hook's outcome, exited with its code; and for the pod, each termination and how much
//! of its grace budget it used.
//!
//! The pod workers write steps at the moment they act (`pod::start`, `pod::terminate`) and
//! when a published status differs from the previous one ([`status_steps`], pure); the registry
//! keeps a bounded [`Timeline`] per pod and the control API carries it to the client. Unlike
//! events, a timeline is per pod and bounded per container, so a busy node never pushes a
//! pod's steps out, and the readiness flips it holds do not flood `crilet events`.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodStatus};

/// Steps kept per container (oldest dropped first): a few restarts' worth.
pub const STEPS_PER_CONTAINER: usize = 40;
/// Pod-level steps kept (terminations).
pub const POD_STEPS: usize = 8;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// The agent created the instance (`CreateContainer`).
    Created,
    /// The agent started it (`StartContainer`).
    Started,
    /// `started` turned true: its startup probe passed, or it runs and has none.
    StartedTrue,
    /// `ready` turned true.
    Ready,
    /// `ready` turned false while it kept running (its readiness probe failed).
    NotReady,
    /// The agent began to kill it; the detail says why.
    Killing,
    /// Its preStop hook finished, failed or ran out of time.
    PreStop,
    /// The runtime shows it exited; the detail gives the exit code and reason.
    Exited,
    /// The agent began to stop the whole pod (a pod step).
    PodKilling,
    /// Every container of the pod stopped; the detail gives the grace budget used (a pod step).
    PodStopped,
}

impl StepKind {
    /// The name shown by `describe` and carried by the control API.
    pub fn label(self) -> &'static str {
        match self {
            StepKind::Created => "Created",
            StepKind::Started => "Started",
            StepKind::StartedTrue => "Started=true",
            StepKind::Ready => "Ready=true",
            StepKind::NotReady => "Ready=false",
            StepKind::Killing | StepKind::PodKilling => "Killing",
            StepKind::PreStop => "PreStop",
            StepKind::Exited => "Exited",
            StepKind::PodStopped => "Stopped",
        }
    }
}

/// One step.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub time: Timestamp,
    pub kind: StepKind,
    /// The container instance (bare runtime ID); empty for pod steps or when unknown.
    pub container_id: String,
    pub detail: String,
}

impl Step {
    /// A step happening now.
    pub fn now(kind: StepKind, container_id: &str, detail: impl Into<String>) -> Self {
        Self { time: Timestamp::now(), kind, container_id: container_id.to_string(), detail: detail.into() }
    }
}

/// One pod's steps: by container (`None` for the pod's own), each list in time order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timeline {
    steps: BTreeMap<Option<String>, VecDeque<Step>>,
}

impl Timeline {
    /// Adds a step in time order (an exit seen after the next instance was created still goes
    /// before it), dropping the oldest beyond the bound.
    pub fn add(&mut self, container: Option<&str>, step: Step) {
        let cap = if container.is_some() { STEPS_PER_CONTAINER } else { POD_STEPS };
        let list = self.steps.entry(container.map(str::to_string)).or_default();
        let at = list.iter().rposition(|s| s.time <= step.time).map_or(0, |i| i + 1);
        list.insert(at, step);
        while list.len() > cap {
            list.pop_front();
        }
    }

    /// Every step: the pod's first, then each container's (by name), each in time order.
    pub fn entries(&self) -> Vec<(Option<String>, Step)> {
        self.steps.iter().flat_map(|(c, list)| list.iter().map(move |s| (c.clone(), s.clone()))).collect()
    }
}

/// The bare runtime ID of a `containerd://…` container ID.
fn bare(id: &str) -> &str {
    id.split_once("://").map_or(id, |(_, id)| id)
}

/// The steps a newly computed status shows against the previous one: `started` or `ready`
/// turning true for an instance, `ready` turning false while it runs, and instances that
/// terminated since (from `state` and `lastState`, so an exit followed at once by a restart is
/// not missed). With no previous status every terminated instance counts as new.
pub fn status_steps(
    pod: &Pod,
    prev: Option<&PodStatus>,
    new: &PodStatus,
    now: Timestamp,
) -> Vec<(String, Step)> {
    let lists = |s: &PodStatus| -> Vec<ContainerStatus> {
        s.init_container_statuses.iter().chain(s.container_statuses.iter()).flatten().cloned().collect()
    };
    let before = prev.map(lists).unwrap_or_default();
    let spec = pod.spec.as_ref();
    let inits: Vec<&Container> =
        spec.and_then(|s| s.init_containers.as_ref()).into_iter().flatten().collect();
    let mut out = Vec::new();
    for st in lists(new) {
        let old = before.iter().find(|p| p.name == st.name);
        let id = st.container_id.as_deref().map(bare).unwrap_or_default().to_string();
        let same = old.is_some_and(|o| o.container_id == st.container_id);
        let regular_init = inits.iter().any(|c| c.name == st.name && !crate::podspec::is_sidecar(c));
        let container = spec
            .into_iter()
            .flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten()))
            .find(|c| c.name == st.name);
        let running = st.state.as_ref().is_some_and(|s| s.running.is_some());
        let mut push = |kind, time, id: &str, detail: String| {
            out.push((st.name.clone(), Step { time, kind, container_id: id.to_string(), detail }))
        };
        let was = |f: fn(&ContainerStatus) -> bool| same && old.is_some_and(f);
        if st.started == Some(true) && !was(|o| o.started == Some(true)) {
            let detail = match container.and_then(|c| c.startup_probe.as_ref()) {
                Some(_) => "startup probe succeeded",
                None => "running; no startup probe",
            };
            push(StepKind::StartedTrue, now, &id, detail.to_string());
        }
        if !regular_init && st.ready && !was(|o| o.ready) {
            let detail = match container.and_then(|c| c.readiness_probe.as_ref()) {
                Some(_) => "readiness probe succeeded",
                None => "started; no readiness probe",
            };
            push(StepKind::Ready, now, &id, detail.to_string());
        }
        if !regular_init && !st.ready && running && was(|o| o.ready) {
            push(StepKind::NotReady, now, &id, "readiness probe failed".to_string());
        }
        let seen = old.map(terminated).unwrap_or_default();
        for (tid, t) in terminated(&st) {
            if seen.iter().any(|(s, _)| *s == tid) {
                continue;
            }
            let time = t.finished_at.as_ref().map_or(now, |f| f.0);
            let mut detail = format!("exit code {}", t.exit_code);
            if let Some(reason) = t.reason.as_deref().filter(|r| !r.is_empty()) {
                detail.push_str(&format!(" ({reason})"));
            }
            push(StepKind::Exited, time, &tid, detail);
        }
    }
    out
}

/// The terminated instances a status shows (current state and last state), by bare ID.
fn terminated(st: &ContainerStatus) -> Vec<(String, k8s_openapi::api::core::v1::ContainerStateTerminated)> {
    let mut out = Vec::new();
    if let Some(t) = st.state.as_ref().and_then(|s| s.terminated.as_ref()) {
        if let Some(id) = t.container_id.as_deref().or(st.container_id.as_deref()) {
            out.push((bare(id).to_string(), t.clone()));
        }
    }
    if let Some(t) = st.last_state.as_ref().and_then(|s| s.terminated.as_ref()) {
        if let Some(id) = t.container_id.as_deref() {
            out.push((bare(id).to_string(), t.clone()));
        }
    }
    out
}

/// Why a container is killed, for its `Killing` step: the planner's message, or for an image
/// changed in place, the new image.
pub fn kill_why(message: &str, new_image: Option<&str>) -> String {
    match new_image {
        // An in-place update restarts a container for its env from pod metadata with the
        // image it already has: the message says why.
        Some(image) if !message.contains("pod metadata") => {
            format!("image changed to {image} (in-place update)")
        }
        _ => message.to_string(),
    }
}

/// How much of a pod kill's grace budget has been used when the kill ends at `left` before its
/// deadline (or `over` after it): the budget is `grace` long and ends at the deadline.
pub fn budget_used(grace: Duration, left: Duration, over: Duration) -> Duration {
    grace.saturating_sub(left) + over
}

/// The `Stopped` step's detail (and the `PodStopped` event's message).
pub fn stopped_detail(reason: &str, used: Duration, grace: Duration) -> String {
    let mut text = format!(
        "{reason}: all containers stopped in {:.1}s of {}s grace",
        used.as_secs_f64(),
        grace.as_secs()
    );
    if used > grace {
        text.push_str(&format!(" (overran by {:.1}s)", (used - grace).as_secs_f64()));
    }
    text
}

#[cfg(test)]
#[path = "timeline_tests.rs"]
mod tests;
