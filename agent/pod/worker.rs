//! One task per pod UID: observe the runtime, publish status, plan, execute; then wait for a
//! wake (PLEG, probes), a spec change, a back-off expiry or the periodic resync.
//! Termination is an explicit desire, never a side effect of the agent stopping.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::{Notify, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use super::backoff::Backoff;
use super::context::{Shared, now_ns};
use super::plan::{KillReason, PodKillReason, ProbeResults, is_sidecar, plan_held, settle_until};
use super::spec::{Kind, pod_dir, pod_log_dir, sandbox_config, termination_grace};
use super::start::{
    StartRequest, backoff_key, crash_backoff_wait, create_sandbox, ensure_image, start_container,
};
use super::terminate::{kill_one, kill_pod};
use super::update::{self, PulledImage, UpdateState};
use crate::model::{ContainerState, DesiredPod, ObservedPod, ProbeState, SandboxState};
use crate::probe::manager::ProbeManager;
use crate::registry::PodRecord;
use crate::status::{StartError, StatusInput, compute};

/// Periodic resync even without any wake (R12.6: 1 min).
const RESYNC: Duration = Duration::from_secs(60);
/// Retry delay after a failed sync (R12.9: 10 s; shorter here because a failed CRI call is
/// usually containerd restarting).
const RETRY: Duration = Duration::from_secs(2);

/// What the supervisor wants from a worker.
#[derive(Debug, Clone)]
pub enum Desire {
    Run(DesiredPod),
    /// Stop everything within the grace budget; with `remove`, also remove sandboxes, volumes
    /// and logs (the manifest is gone or replaced).
    Terminate {
        remove: bool,
    },
}

/// Annotation on the published pod: the pod log directory (for `crilet logs`).
pub const LOG_DIR_ANNOTATION: &str = crate::cli::LOG_DIRECTORY_ANNOTATION;

struct Worker {
    ctx: Shared,
    desired: DesiredPod,
    crash_backoff: Backoff,
    start_errors: BTreeMap<String, StartError>,
    status: Option<PodStatus>,
    termination_messages: BTreeMap<String, String>,
    probes: ProbeManager,
    /// The current or last in-place update (kept under the pod directory).
    update: Option<UpdateState>,
    /// `activeDeadlineSeconds` ran out: everything is stopped and stays stopped.
    deadline_exceeded: bool,
    first_seen: jiff::Timestamp,
    /// The outside (readiness-gate) conditions last saved under the pod's dir.
    saved_conditions: Option<Vec<PodCondition>>,
    /// The published status as last saved under the pod's dir.
    saved_status: Option<Vec<u8>>,
    /// During a sync that kills nothing: the runtime state as the sync's own starts changed it,
    /// published after each start (one targeted `ContainerStatus`), so a restart shows at once.
    live: Option<ObservedPod>,
    /// Instances the agent killed itself (their 137 is no sign of a sandbox going away).
    killed_by_agent: BTreeSet<String>,
    /// This sync executed something (sandbox, container, start error): observe and publish
    /// again before waiting, so the status never lags behind the agent's own actions.
    acted: bool,
}

/// Where a pod's outside conditions are saved: they live only in the agent (no API server), so
/// a restarted agent reloads them instead of flapping `Ready` (DESIGN: no readiness flap).
fn conditions_path(ctx: &Shared, uid: &str) -> std::path::PathBuf {
    pod_dir(&ctx.node, uid).join("conditions.json")
}

/// Where a pod's last published status is saved: the kubelet carries restartCount and lastState
/// forward from the status it published (kept by the API server); crilet keeps its own, so a
/// restarted agent still knows the last state of an instance the runtime has removed since.
fn status_path(ctx: &Shared, uid: &str) -> std::path::PathBuf {
    pod_dir(&ctx.node, uid).join("status.json")
}

/// Where a pod's crash-loop back-off is saved: restarting the agent must not restart a
/// crash-looping container early.
fn backoff_path(ctx: &Shared, uid: &str) -> std::path::PathBuf {
    pod_dir(&ctx.node, uid).join("crash-backoff.json")
}

/// Runs a pod worker until its pod has terminated (or the agent stops). `synced` fires after the
/// first sync (for systemd readiness).
pub async fn run_worker(
    ctx: Shared,
    initial: DesiredPod,
    mut desire: watch::Receiver<Desire>,
    wake: Arc<Notify>,
    cancel: CancellationToken,
    mut synced: Option<oneshot::Sender<()>>,
) {
    let span = info_span!("pod", pod = %initial.key, uid = %initial.uid);
    ctx.registry.register_waker(&initial.key, wake.clone());
    let probes =
        ProbeManager::new(ctx.clone(), initial.key.clone(), &initial.uid, wake.clone(), cancel.child_token());
    let update = UpdateState::load(&update_state_path(&ctx, &initial.uid));
    let saved_conditions: Option<Vec<PodCondition>> =
        std::fs::read(conditions_path(&ctx, &initial.uid)).ok().and_then(|b| serde_json::from_slice(&b).ok());
    if ctx.registry.external_conditions(&initial.key).is_empty() {
        for c in saved_conditions.iter().flatten() {
            ctx.registry.set_external_condition(&initial.key, c.clone(), false);
        }
    }
    let crash_backoff = match std::fs::read(backoff_path(&ctx, &initial.uid)) {
        Ok(json) => Backoff::crash_loop().with_json(&json),
        Err(_) => Backoff::crash_loop(),
    };
    let saved_status = std::fs::read(status_path(&ctx, &initial.uid)).ok();
    let status: Option<PodStatus> = saved_status.as_deref().and_then(|b| serde_json::from_slice(b).ok());
    let mut w = Worker {
        ctx: ctx.clone(),
        desired: initial,
        crash_backoff,
        start_errors: BTreeMap::new(),
        status,
        termination_messages: BTreeMap::new(),
        probes,
        update,
        deadline_exceeded: false,
        first_seen: jiff::Timestamp::now(),
        saved_conditions,
        saved_status,
        killed_by_agent: BTreeSet::new(),
        live: None,
        acted: false,
    };
    async move {
        loop {
            let want = desire.borrow_and_update().clone();
            let mut next = Some(tokio::time::Instant::now() + RESYNC);
            match want {
                Desire::Terminate { remove } => {
                    if w.terminate(remove, &cancel).await {
                        info!("pod terminated");
                        return;
                    }
                    if cancel.is_cancelled() {
                        return;
                    }
                    next = Some(tokio::time::Instant::now() + RETRY);
                }
                Desire::Run(d) => {
                    w.desired = d;
                    match w.sync().await {
                        Ok(requeue) => {
                            if let Some(at) = requeue {
                                let delay = Duration::from_nanos(u64::try_from(at - now_ns()).unwrap_or(0));
                                next = Some(tokio::time::Instant::now() + delay.min(RESYNC));
                            }
                        }
                        Err(e) => {
                            warn!(error = %e, "sync failed; retrying");
                            next = Some(tokio::time::Instant::now() + RETRY);
                        }
                    }
                    if let Some(tx) = synced.take() {
                        let _ = tx.send(());
                    }
                }
            }
            let deadline = next.unwrap_or_else(|| tokio::time::Instant::now() + RESYNC);
            tokio::select! {
                _ = cancel.cancelled() => return,
                r = desire.changed() => if r.is_err() { return },
                _ = wake.notified() => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
    .instrument(span)
    .await
}

fn all_containers(pod: &Pod) -> Vec<(Container, Kind)> {
    let Some(spec) = pod.spec.as_ref() else { return Vec::new() };
    let inits = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| (c.clone(), if is_sidecar(c) { Kind::Sidecar } else { Kind::Init }));
    inits.chain(spec.containers.iter().map(|c| (c.clone(), Kind::App))).collect()
}

impl Worker {
    fn publish(
        &mut self,
        observed: &ObservedPod,
        terminating: bool,
        probe_states: &BTreeMap<String, ProbeState>,
    ) {
        let ctx = &self.ctx;
        let mut external = ctx.registry.external_conditions(&self.desired.key);
        if self.saved_conditions.as_deref().unwrap_or_default() != external.as_slice() {
            let path = conditions_path(ctx, &self.desired.uid);
            let tmp = path.with_extension("tmp");
            let written = serde_json::to_vec(&external).is_ok_and(|json| {
                std::fs::write(&tmp, json).and_then(|_| std::fs::rename(&tmp, &path)).is_ok()
            });
            if written {
                self.saved_conditions = Some(external.clone());
            }
        }
        if let Some(u) = &self.update {
            external.retain(|c| c.type_ != update::CONDITION);
            external.push(u.condition());
        }
        let status = compute(&StatusInput {
            desired: &self.desired,
            observed,
            probes: probe_states,
            start_errors: &self.start_errors,
            terminating,
            external_conditions: &external,
            previous: self.status.as_ref(),
            termination_messages: &self.termination_messages,
            host_ip: ctx.node.host_ip.as_deref(),
            now: jiff::Timestamp::now(),
        });
        let mut pod = (*self.desired.pod).clone();
        let annotations = pod.metadata.annotations.get_or_insert_with(Default::default);
        annotations
            .insert(LOG_DIR_ANNOTATION.into(), pod_log_dir(&ctx.node, &self.desired).display().to_string());
        let created = observed
            .sandboxes
            .last()
            .and_then(|s| jiff::Timestamp::from_nanosecond(i128::from(s.created_at)).ok())
            .filter(|t| *t < self.first_seen)
            .unwrap_or(self.first_seen);
        pod.metadata.creation_timestamp = Some(Time(created));
        if terminating {
            pod.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
            pod.metadata.deletion_grace_period_seconds =
                pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds);
        }
        let mut status = status;
        if self.deadline_exceeded {
            // Upstream's active-deadline handler: the pod fails for good.
            status.phase = Some("Failed".into());
            status.reason = Some("DeadlineExceeded".into());
            status.message = Some("Pod was active on the node longer than the specified deadline".into());
        }
        pod.status = Some(status.clone());
        self.ctx.registry.put_pod(
            self.desired.key.clone(),
            PodRecord {
                pod,
                manifest_file: self.desired.file.display().to_string(),
                warnings: self.desired.warnings.clone(),
            },
        );
        self.save_status(&status);
        self.status = Some(status);
    }

    fn save_backoff(&self) {
        let Some(json) = self.crash_backoff.to_json() else { return };
        let path = backoff_path(&self.ctx, &self.desired.uid);
        let tmp = path.with_extension("tmp");
        if let Err(e) = std::fs::write(&tmp, json).and_then(|_| std::fs::rename(&tmp, &path)) {
            debug!(error = %e, path = %path.display(), "saving the crash-loop back-off failed");
        }
    }

    /// Saves the published status under the pod's dir when it changed (atomically).
    fn save_status(&mut self, status: &PodStatus) {
        let Ok(json) = serde_json::to_vec(status) else { return };
        if self.saved_status.as_deref() == Some(json.as_slice()) {
            return;
        }
        let path = status_path(&self.ctx, &self.desired.uid);
        let tmp = path.with_extension("tmp");
        match std::fs::write(&tmp, &json).and_then(|_| std::fs::rename(&tmp, &path)) {
            Ok(()) => self.saved_status = Some(json),
            Err(e) => debug!(error = %e, path = %path.display(), "saving the pod status failed"),
        }
    }

    /// One sync, then, if it executed anything, a fresh observation published before the worker
    /// waits: `get pods`, `logs --previous` and conditions show what the agent just did.
    async fn sync(&mut self) -> Result<Option<i64>, crate::cri::CriError> {
        self.acted = false;
        let result = self.sync_once().await;
        self.live = None;
        if self.acted {
            self.observe_and_publish(false).await;
        }
        result
    }

    /// Observes the pod and publishes its status (after actions; errors only delay that to the
    /// next sync).
    async fn observe_and_publish(&mut self, terminating: bool) {
        match self.ctx.cri.observe(&self.desired.uid).await {
            Ok(observed) => {
                self.read_termination_messages(&observed);
                let pod = self.desired.pod.clone();
                self.probes.reconcile(&pod, &observed, terminating);
                let (_, probe_states) = self.probes.view();
                self.publish(&observed, terminating, &probe_states);
            }
            Err(e) => debug!(error = %e, "observing the pod after the sync failed; the next sync publishes"),
        }
    }

    /// The deadline of a pod kill starting (or, after an agent restart, resuming) now.
    fn begin_kill(&self, grace: Duration) -> tokio::time::Instant {
        super::terminate::begin_kill(&pod_dir(&self.ctx.node, &self.desired.uid), grace, now_ns())
    }

    fn end_kill(&self) {
        super::terminate::end_kill(&pod_dir(&self.ctx.node, &self.desired.uid));
    }

    /// Publishes the sync's live snapshot with the instance just started spliced in.
    async fn publish_started(&mut self, id: &str, sandbox_id: &str) {
        if self.live.is_none() {
            return;
        }
        let started = match self.ctx.cri.container_status(id, sandbox_id).await {
            Ok(c) => c,
            Err(e) => return debug!(error = %e, "status of the started container; the sync's end publishes"),
        };
        let Some(live) = self.live.as_mut() else { return };
        live.containers.retain(|c| c.id != started.id);
        live.containers.insert(0, started);
        let snapshot = live.clone();
        let (_, probe_states) = self.probes.view();
        self.publish(&snapshot, false, &probe_states);
    }

    /// R9.2: termination messages of exited instances, read once per instance.
    fn read_termination_messages(&mut self, observed: &ObservedPod) {
        for c in observed.containers.iter().filter(|c| c.state == ContainerState::Exited) {
            if self.termination_messages.contains_key(&c.id) {
                continue;
            }
            let mut msg = c
                .annotations
                .get(super::spec::TERMINATION_FILE_ANNOTATION)
                .and_then(|f| std::fs::read(f).ok())
                .map(|b| tail_bytes(&b, 4096))
                .unwrap_or_default();
            let fallback =
                c.annotations.get(crate::model::keys::TERMINATION_MESSAGE_POLICY).map(String::as_str)
                    == Some("FallbackToLogsOnError");
            if msg.is_empty() && fallback && c.exit_code != 0 {
                msg = std::fs::read(&c.log_path).map(|b| log_tail(&b, 80, 2048)).unwrap_or_default();
            }
            self.termination_messages.insert(c.id.clone(), msg);
        }
        self.termination_messages.retain(|id, _| observed.containers.iter().any(|c| &c.id == id));
    }

    /// One sync (R12.1 order). Returns when to come back for a back-off, if any.
    async fn sync_once(&mut self) -> Result<Option<i64>, crate::cri::CriError> {
        let ctx = self.ctx.clone();
        let observed = ctx.cri.observe(&self.desired.uid).await?;
        self.read_termination_messages(&observed);
        let pod = self.desired.pod.clone();
        self.probes.reconcile(&pod, &observed, false);
        let (probe_results, probe_states) = self.probes.view();
        let (held, update_requeue) = self.step_update(&observed, &probe_results, &probe_states).await;
        let deadline = self.active_deadline(&observed);
        if deadline.is_some_and(|d| d <= now_ns()) && !self.deadline_exceeded {
            self.deadline_exceeded = true;
            ctx.warning(
                &self.desired.key,
                None,
                "DeadlineExceeded",
                "Pod was active on the node longer than the specified deadline".into(),
            );
        }
        self.crash_backoff.gc(now_ns());
        self.publish(&observed, false, &probe_states);
        if self.deadline_exceeded {
            let running = observed
                .containers
                .iter()
                .any(|c| matches!(c.state, ContainerState::Running | ContainerState::Unknown))
                || observed.sandboxes.iter().any(|s| s.state == SandboxState::Ready);
            if running {
                self.acted = true;
                let grace = termination_grace(&pod);
                let deadline = self.begin_kill(grace);
                let key = &self.desired.key;
                if kill_pod(&ctx, key, &pod, &observed, grace, deadline, "active deadline exceeded").await {
                    self.end_kill();
                }
            }
            return Ok(None);
        }
        let mut the_plan = plan_held(&pod, &observed, &probe_results, &held);
        if the_plan.kill_pod.is_none() {
            // No pod kill is under way: a deadline saved by one that ended with the agent is void.
            self.end_kill();
        }
        let mut update_requeue = match (update_requeue, deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.killed_by_agent.retain(|id| observed.containers.iter().any(|c| &c.id == id));
        if let Some(until) = settle_until(&the_plan, &observed, &self.killed_by_agent, now_ns()) {
            debug!("an instance was SIGKILLed from outside; starts wait to see whether the sandbox goes too");
            the_plan.init_to_start.clear();
            the_plan.app_to_start.clear();
            update_requeue = Some(update_requeue.map_or(until, |r| r.min(until)));
        }
        if the_plan.is_empty() {
            self.collect_garbage(&observed).await;
            return Ok(update_requeue);
        }
        debug!(plan = ?the_plan, "sync plan");
        self.acted = true;
        let only_starts =
            the_plan.kill_pod.is_none() && the_plan.kills.is_empty() && the_plan.create_sandbox.is_none();
        self.live = only_starts.then(|| observed.clone());
        let key = self.desired.key.clone();
        let grace = termination_grace(&pod);
        let containers = all_containers(&pod);

        if let Some(reason) = the_plan.kill_pod {
            let anything = observed
                .containers
                .iter()
                .any(|c| matches!(c.state, ContainerState::Running | ContainerState::Unknown))
                || observed.sandboxes.iter().any(|s| s.state == SandboxState::Ready);
            if anything {
                let why = match reason {
                    PodKillReason::SandboxChanged => "sandbox changed",
                    PodKillReason::SandboxLostNoRestart => "sandbox lost",
                    PodKillReason::PodCompleted => "pod completed",
                    PodKillReason::InitContainerFailed => "init container failed",
                };
                info!(reason = why, "killing pod");
                let deadline = self.begin_kill(grace);
                if kill_pod(&ctx, &key, &pod, &observed, grace, deadline, why).await {
                    self.end_kill();
                }
            }
            if the_plan.create_sandbox.is_none() {
                return Ok(None);
            }
            if !observed.sandboxes.is_empty() {
                ctx.normal(
                    &key,
                    None,
                    "SandboxChanged",
                    "Pod sandbox changed, it will be killed and re-created.".into(),
                );
            }
            // R2.7: the init sequence re-runs in the new sandbox.
            let is_init = |name: &str| containers.iter().any(|(c, k)| *k != Kind::App && c.name == name);
            for c in observed.containers.iter().filter(|c| is_init(&c.name)) {
                if let Err(e) = ctx.cri.remove_container(&c.id).await {
                    warn!(container = %c.name, error = %e, "removing init container instance failed");
                }
            }
        }

        let pod_ip = observed.pod_ips().first().cloned();
        for k in &the_plan.kills {
            let Some((spec, _)) = containers.iter().find(|(c, _)| c.name == k.name) else { continue };
            let g = match k.reason {
                KillReason::LivenessProbe => probe_grace(spec.liveness_probe.as_ref()).unwrap_or(grace),
                KillReason::StartupProbe => probe_grace(spec.startup_probe.as_ref()).unwrap_or(grace),
                _ => grace,
            };
            self.killed_by_agent.insert(k.id.clone());
            kill_one(&ctx, &self.desired, spec, &k.id, g, &k.message, pod_ip.as_deref()).await;
        }

        let (sandbox_id, pod_ips, attempt) = match the_plan.create_sandbox {
            Some(attempt) => match create_sandbox(&ctx, &self.desired, attempt).await {
                Ok((id, ips)) => (id, ips, attempt),
                Err(e) => {
                    // Retried after the kubelet's sync back-off (10 s, R12.9).
                    warn!(error = %e.message, "creating the sandbox failed; retrying");
                    return Ok(Some(now_ns() + 10_000_000_000));
                }
            },
            None => match observed.sandbox() {
                Some(s) => (s.id.clone(), s.ips.clone(), s.attempt),
                None => return Ok(None),
            },
        };
        let sb_config = sandbox_config(&ctx.node, &self.desired, attempt);
        // Starts are planned from the snapshot taken before kills; for the back-off check and
        // restart counts that snapshot is what the kubelet uses too (R6.6 nuance).
        // The in-place update's own wake-up (end of the drain wait, pull retry) must survive a
        // sync that also had other work, or it waits for an unrelated wake (a crash back-off).
        let mut requeue: Option<i64> = update_requeue;
        for name in &the_plan.init_to_start {
            let Some((spec, kind)) = containers.iter().find(|(c, _)| &c.name == name) else { continue };
            let ok =
                self.start(&observed, spec, *kind, &sandbox_id, &pod_ips, &sb_config, &mut requeue).await;
            // R4.4: a failed regular init container ends this sync; a sidecar does not.
            if !ok && *kind == Kind::Init {
                return Ok(requeue);
            }
        }
        for name in &the_plan.app_to_start {
            let Some((spec, kind)) = containers.iter().find(|(c, _)| &c.name == name) else { continue };
            self.start(&observed, spec, *kind, &sandbox_id, &pod_ips, &sb_config, &mut requeue).await;
        }
        Ok(requeue)
    }

    #[allow(clippy::too_many_arguments)]
    async fn start(
        &mut self,
        observed: &ObservedPod,
        spec: &Container,
        kind: Kind,
        sandbox_id: &str,
        pod_ips: &[String],
        sb_config: &crate::cri::api::PodSandboxConfig,
        requeue: &mut Option<i64>,
    ) -> bool {
        let now = now_ns();
        if let Some((e, until)) = crash_backoff_wait(&self.crash_backoff, &self.desired, spec, observed, now)
        {
            self.ctx.warning(
                &self.desired.key,
                Some(&spec.name),
                "BackOff",
                format!(
                    "Back-off restarting failed container {} in pod {}",
                    spec.name, self.desired.key.name
                ),
            );
            self.start_errors.insert(spec.name.clone(), e);
            *requeue = Some(requeue.map_or(until, |r| r.min(until)));
            return false;
        }
        if let Some(exited) =
            observed.containers.iter().find(|o| o.name == spec.name && o.state == ContainerState::Exited)
        {
            self.crash_backoff.next(&backoff_key(spec), exited.finished_at, now);
            self.save_backoff();
        }
        // An in-place update pulled this image before stopping the old instance (DESIGN
        // difference 4): start from that image, not from a second pull after the stop, which
        // could fail with the old container gone or resolve a moved tag to other content.
        let pulled_image = self
            .update
            .as_ref()
            .filter(|u| !u.done && u.images.get(&spec.name) == spec.image.as_ref())
            .and_then(|u| u.pulled.get(&spec.name))
            .map(|p| p.id.as_str());
        let req = StartRequest {
            desired: &self.desired,
            spec,
            kind,
            observed,
            sandbox_id,
            pod_ips,
            sandbox_config: sb_config,
            pulled_image,
        };
        match start_container(&self.ctx, &req).await {
            Ok(id) => {
                self.start_errors.remove(&spec.name);
                self.publish_started(&id, sandbox_id).await;
                true
            }
            Err(e) => {
                // A failed start is retried after the kubelet's sync back-off (10 s, R12.9),
                // which is also when a pull back-off first expires (R7.11).
                let at = now + 10_000_000_000;
                *requeue = Some(requeue.map_or(at, |r| r.min(at)));
                self.start_errors.insert(spec.name.clone(), e);
                false
            }
        }
    }

    fn remove_legacy_link(&self, container: &str, id: &str) {
        if let Some(link) = super::spec::legacy_log_symlink(&self.ctx.node, &self.desired.key, container, id)
        {
            let _ = std::fs::remove_file(link);
        }
    }

    /// When `activeDeadlineSeconds` (counted from the pod's start time) runs out, in ns.
    fn active_deadline(&self, observed: &ObservedPod) -> Option<i64> {
        let secs = self.desired.pod.spec.as_ref()?.active_deadline_seconds?;
        let published = self.status.as_ref().and_then(|s| s.start_time.as_ref());
        let start_ns = match published {
            Some(t) => i64::try_from(t.0.as_nanosecond()).ok()?,
            None => observed.sandboxes.iter().map(|s| s.created_at).min()?,
        };
        Some(start_ns.saturating_add(secs.saturating_mul(1_000_000_000)))
    }

    fn save_update(&self) {
        if let Some(u) = &self.update {
            if let Err(e) = u.save(&update_state_path(&self.ctx, &self.desired.uid)) {
                warn!(error = %e, "saving the in-place update state failed");
            }
        }
    }

    /// One step of an in-place update (see `update`): returns the containers to hold and when to
    /// come back.
    async fn step_update(
        &mut self,
        observed: &ObservedPod,
        probes: &ProbeResults,
        probe_states: &BTreeMap<String, ProbeState>,
    ) -> (BTreeSet<String>, Option<i64>) {
        let ctx = self.ctx.clone();
        let pod = self.desired.pod.clone();
        let key = self.desired.key.clone();
        let now = now_ns();
        let changed = update::changed_containers(&pod, observed);
        let desired_images: BTreeMap<String, String> = all_containers(&pod)
            .into_iter()
            .map(|(c, _)| (c.name.clone(), c.image.unwrap_or_default()))
            .collect();
        if changed.is_empty() {
            let Some(state) = self.update.as_mut().filter(|u| !u.done) else {
                return (BTreeSet::new(), None);
            };
            // A container edited back to what it runs is no longer part of the update.
            state.images.retain(|n, img| desired_images.get(n) == Some(img));
            for (name, image) in state.images.clone() {
                if let std::collections::btree_map::Entry::Vacant(e) = state.pulled.entry(name) {
                    if let Ok(Some(img)) = ctx.cri.image_id(&image).await {
                        e.insert(PulledImage { id: img.id, repo_digests: img.repo_digests });
                    }
                }
            }
            if update::finished(&pod, observed, state, probe_states) {
                state.done = true;
                state.blocked = None;
                state.transition = jiff::Timestamp::now().to_string();
                info!("in-place update complete");
                ctx.normal(
                    &key,
                    None,
                    "InPlaceUpdated",
                    "In-place update complete: every updated container runs its new image and is ready"
                        .into(),
                );
            }
            self.save_update();
            return (BTreeSet::new(), None);
        }

        // Start an update, or fold a newer edit into the one under way (the newest spec wins).
        let fresh = self.update.as_ref().is_none_or(|u| u.done);
        if fresh {
            self.update = Some(UpdateState {
                started_ns: now,
                transition: jiff::Timestamp::now().to_string(),
                ..Default::default()
            });
        }
        let Some(state) = self.update.as_mut() else { return (BTreeSet::new(), None) };
        state.images.retain(|n, img| desired_images.get(n) == Some(img));
        let mut newly: Vec<String> = Vec::new();
        for (name, image) in &changed {
            if state.images.get(name) != Some(image) {
                state.images.insert(name.clone(), image.clone());
                state.pulled.remove(name);
                newly.push(format!("{name}: {image}"));
            }
        }
        if !newly.is_empty() {
            info!(containers = ?newly, "updating container images in place");
            ctx.normal(
                &key,
                None,
                "InPlaceUpdate",
                format!("Updating in place (same sandbox and IP): {}", newly.join(", ")),
            );
            for (name, image) in &changed {
                if update::floating_tag(image) {
                    ctx.warning(&key, Some(name), "FloatingTag", format!("Image \"{image}\" uses a floating tag: an in-place update cannot tell which version will run"));
                }
            }
        }
        let grace_s: i64 = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(update::GRACE_ANNOTATION))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let wait_until = state.started_ns + grace_s.max(0) * 1_000_000_000;
        let waiting = now < wait_until;
        let mut requeue = waiting.then_some(wait_until);
        if !waiting {
            // Pull every new image before stopping anything: a failed pull leaves the old
            // container running.
            let attempt = observed.sandbox().map_or(0, |s| s.attempt);
            let sb_config = sandbox_config(&ctx.node, &self.desired, attempt);
            let mut blocked: Vec<String> = Vec::new();
            for (name, image) in &changed {
                if state.pulled.contains_key(name) {
                    continue;
                }
                let Some((spec, _)) = all_containers(&pod).into_iter().find(|(c, _)| &c.name == name) else {
                    continue;
                };
                match ensure_image(&ctx, &self.desired, &spec, &sb_config).await {
                    Ok(_) => match ctx.cri.image_id(image).await {
                        Ok(Some(img)) => {
                            state.pull_errors.remove(image);
                            let pulled = PulledImage { id: img.id, repo_digests: img.repo_digests };
                            if update::digest_matches(image, &pulled) {
                                state.pulled.insert(name.clone(), pulled);
                            } else {
                                blocked.push(format!(
                                    "image {image} does not carry the digest it names (runtime has {})",
                                    pulled.id
                                ));
                            }
                        }
                        _ => blocked.push(format!("image {image} not present after pull")),
                    },
                    Err(e) => {
                        let why = format!("{}: {}", e.reason, e.message);
                        // No pull is tried while the image back-off lasts: keep naming the last
                        // pull's error, or the condition would only say "Back-off pulling image".
                        let why = match state.pull_errors.get(image) {
                            Some(last) if e.reason == "ImagePullBackOff" => format!("{why}: {last}"),
                            _ => {
                                state.pull_errors.insert(image.clone(), why.clone());
                                why
                            }
                        };
                        blocked.push(why);
                        let at = now + 10_000_000_000;
                        requeue = Some(requeue.map_or(at, |r| r.min(at)));
                    }
                }
            }
            let images = &state.images;
            state.pull_errors.retain(|image, _| images.values().any(|i| i == image));
            state.blocked = (!blocked.is_empty()).then(|| blocked.join("; "));
        }
        let pulled: BTreeSet<String> = state.pulled.keys().cloned().collect();
        let held = update::held(&pod, observed, &changed, &pulled, waiting, probes);
        self.save_update();
        (held, requeue)
    }

    /// R12.5 / R4.10: keep only the newest exited instance of each container, and remove dead
    /// sandboxes that are not the newest and hold no containers.
    async fn collect_garbage(&mut self, observed: &ObservedPod) {
        let mut seen_exited: HashMap<&str, bool> = HashMap::new();
        for c in &observed.containers {
            if c.state != ContainerState::Exited {
                continue;
            }
            let seen = seen_exited.entry(c.name.as_str()).or_insert(false);
            if *seen {
                debug!(container = %c.name, id = %c.id, "removing old exited instance");
                if self.ctx.cri.remove_container(&c.id).await.is_ok() {
                    self.acted = true;
                    if !c.log_path.is_empty() {
                        let _ = std::fs::remove_file(&c.log_path);
                    }
                    self.remove_legacy_link(&c.name, &c.id);
                }
            }
            *seen = true;
        }
        for sb in observed.sandboxes.iter().skip(1) {
            let used = observed.containers.iter().any(|c| c.sandbox_id == sb.id);
            if sb.state == SandboxState::NotReady && !used {
                let _ = self.ctx.cri.remove_sandbox(&sb.id).await;
            }
        }
    }

    /// Stops the pod within its grace budget; with `remove`, also removes sandboxes, volumes
    /// and logs. Returns false when the runtime could not be reached (the caller retries).
    async fn terminate(&mut self, remove: bool, cancel: &CancellationToken) -> bool {
        let ctx = self.ctx.clone();
        let key = self.desired.key.clone();
        let observed = match ctx.cri.observe(&self.desired.uid).await {
            Ok(o) => o,
            Err(e) => {
                warn!(error = %e, "cannot observe the pod to terminate it; retrying");
                return false;
            }
        };
        if cancel.is_cancelled() {
            return false;
        }
        self.probes.reconcile(&self.desired.pod.clone(), &observed, true);
        let (_, probe_states) = self.probes.view();
        self.publish(&observed, true, &probe_states);
        let grace = termination_grace(&self.desired.pod);
        let deadline = self.begin_kill(grace);
        // A stop that failed (the runtime is down) is retried within the same deadline.
        if !kill_pod(&ctx, &key, &self.desired.pod, &observed, grace, deadline, "pod deleted").await {
            return false;
        }
        self.end_kill();
        if !remove {
            self.observe_and_publish(true).await;
        }
        // Sandboxes that were already not ready were skipped by kill_pod; stop them too so their
        // network is released.
        for sb in observed.sandboxes.iter().filter(|s| s.state != SandboxState::Ready) {
            let _ = ctx.cri.stop_sandbox(&sb.id).await;
        }
        if remove {
            for sb in &observed.sandboxes {
                if let Err(e) = ctx.cri.remove_sandbox(&sb.id).await {
                    warn!(sandbox = %sb.id, error = %e, "removing sandbox failed; retrying");
                    return false;
                }
            }
            // Containers of a sandbox that vanished earlier.
            if let Ok(left) = ctx.cri.observe(&self.desired.uid).await {
                for c in &left.containers {
                    let _ = ctx.cri.stop_container(&c.id, Duration::ZERO).await;
                    let _ = ctx.cri.remove_container(&c.id).await;
                }
            }
            for c in &observed.containers {
                self.remove_legacy_link(&c.name, &c.id);
            }
            let _ = std::fs::remove_dir_all(pod_log_dir(&ctx.node, &self.desired));
            super::cgroups::remove_pod_cgroups_settled(&self.desired.uid).await;
            // The pod dir goes last: an agent killed before this point finds it at its next
            // start and finishes the removal (Supervisor::reap_leftover_dirs).
            let _ = std::fs::remove_dir_all(pod_dir(&ctx.node, &self.desired.uid));
            self.probes.stop();
            ctx.registry.remove_pod(&key);
            ctx.normal(&key, None, "Removed", format!("Pod {} removed", key));
        }
        true
    }
}

fn update_state_path(ctx: &Shared, uid: &str) -> std::path::PathBuf {
    pod_dir(&ctx.node, uid).join("inplace-update.json")
}

fn probe_grace(p: Option<&k8s_openapi::api::core::v1::Probe>) -> Option<Duration> {
    p?.termination_grace_period_seconds.map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)))
}

/// The last `max` bytes of `b` as text.
fn tail_bytes(b: &[u8], max: usize) -> String {
    let start = b.len().saturating_sub(max);
    String::from_utf8_lossy(&b[start..]).to_string()
}

/// R9.2 fallback: the last `lines` lines of a CRI log file's content, at most `max` bytes.
fn log_tail(b: &[u8], lines: usize, max: usize) -> String {
    let text = String::from_utf8_lossy(b);
    let content: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(4, ' ');
            let (_ts, _stream, tag, msg) =
                (parts.next()?, parts.next()?, parts.next()?, parts.next().unwrap_or(""));
            Some(if tag == "P" { msg.to_string() } else { format!("{msg}\n") })
        })
        .collect();
    let joined: String = content[content.len().saturating_sub(lines)..].concat();
    tail_bytes(joined.as_bytes(), max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_tail_joins_partials_and_bounds() {
        let log = b"2024-01-01T00:00:00Z stdout F one\n2024-01-01T00:00:00Z stderr P tw\n2024-01-01T00:00:00Z stderr F o\n";
        assert_eq!(log_tail(log, 80, 2048), "one\ntwo\n");
        assert_eq!(log_tail(log, 1, 2048), "o\n");
        assert_eq!(log_tail(log, 80, 3), "wo\n");
    }
}
