//! One task per pod UID: observe the runtime, publish status, plan, execute; then wait for a
//! wake (PLEG, probes), a spec change, a back-off expiry or the periodic resync.
//! Termination is an explicit desire, never a side effect of the agent stopping.

mod cleanup;
mod inplace;
mod persist;
mod publish;
mod reset;
mod resize;
mod starts;
#[cfg(test)]
mod sync_tests;

use self::persist::conditions_path;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::{Notify, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use super::backoff::Backoff;
use super::context::{WorkerContext, now_ns};
use super::plan::sync::{self, SyncPlan, earliest};
use super::plan::{KillReason, PodKillReason, ProbeResults, gated_starts};
use super::spec::{Kind, pod_dir, pod_log_dir, termination_grace};
use super::start::{
    FAILED_MOUNT, ImagesSeen, StartRequest, backoff_key, crash_backoff_wait, create_sandbox, ensure_image,
    look_up_images, start_container,
};
use super::terminate::{kill_one, kill_pod};
use super::update::{self, PulledImage, UpdateState};
use crate::model::{ContainerState, DesiredPod, ObservedPod, ProbeState};
use crate::probe::manager::ProbeManager;
use crate::registry::PodRecord;
use crate::status::{StartError, StatusInput, compute};
use crate::timeline::StepKind;

/// Periodic resync even without any wake (R12.6: 1 min).
const RESYNC: Duration = Duration::from_secs(60);
/// First retry delay after a failed sync: a failed CRI call is usually containerd restarting.
const RETRY: Duration = Duration::from_secs(2);
/// The retry back-off's cap (the kubelet retries a failed sync after 10 s, R12.9).
const RETRY_MAX: Duration = Duration::from_secs(10);

/// The wait before retrying after `failures` failed syncs in a row: doubling from `RETRY` up to
/// `RETRY_MAX`, plus up to a fifth more at random so pods that failed together (a runtime
/// outage) do not all retry in the same instant.
fn retry_after(failures: u32, jitter: f64) -> Duration {
    doubling(RETRY, RETRY_MAX, failures).mul_f64(1.0 + 0.2 * jitter.clamp(0.0, 1.0))
}

/// The kubelet retries a failed volume set-up after 500 ms, doubling up to 2 min 2 s
/// (`exponentialbackoff`, the volume manager's operations), while the pod's sync waits for it.
/// A pod just bound needs this: the node authorizer learns of it a moment after the node does,
/// and until then the pod's token and `kube-root-ca.crt` are forbidden to the node.
fn mount_retry_after(failures: u32) -> Duration {
    doubling(Duration::from_millis(500), Duration::from_secs(122), failures)
}

/// `initial` after the first failure in a row, doubled after each further one, at most `cap`.
fn doubling(initial: Duration, cap: Duration, failures: u32) -> Duration {
    initial.saturating_mul(1 << failures.saturating_sub(1).min(16)).min(cap)
}

/// What the supervisor wants from a worker.
#[derive(Debug, Clone)]
pub enum Desire {
    Run(DesiredPod),
    /// Stop everything within the grace budget; with `remove`, also remove sandboxes, volumes
    /// and logs (the manifest is gone or replaced).
    Terminate {
        remove: bool,
        /// The grace budget when it is not the spec's: an API pod's `deletionGracePeriodSeconds`.
        grace: Option<Duration>,
        /// The node is shutting down: the pod fails for good (`pod::shutdown::mark`).
        node_shutdown: bool,
    },
    /// Node-pressure eviction (`eviction`): run no more; everything is stopped within `grace`
    /// and the pod fails for good, `Evicted` with `message`.
    Evict(DesiredPod, Eviction),
}

/// An eviction's terms: the grace its containers get, and the pod status message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    pub grace: Duration,
    pub message: String,
}

/// Why a pod failed for good while it ran: its phase stays Failed, with the kubelet's reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failed {
    /// `activeDeadlineSeconds` ran out: everything is stopped and stays stopped.
    DeadlineExceeded,
    /// Stopped for the node's shutdown.
    NodeShutdown,
    /// Evicted for node pressure (its terms in `Tracked::eviction`).
    Evicted,
}

/// Annotation on the published pod: the pod log directory (for `crilet logs`).
pub const LOG_DIR_ANNOTATION: &str = crate::model::keys::LOG_DIRECTORY;

/// A pod's worker: its loop state. What it remembers of the pod is in `saved` (also kept under
/// the pod's dir) and `tracked` (in memory only).
struct Worker {
    ctx: Arc<WorkerContext>,
    /// The pod as last wanted.
    desired: DesiredPod,
    /// The pod's probe tasks and their results.
    probes: ProbeManager,
    saved: Saved,
    tracked: Tracked,
    /// During a sync that kills nothing: the runtime state as the sync's own starts changed it,
    /// published after each start (one targeted `ContainerStatus`), so a restart shows at once.
    live: Option<ObservedPod>,
    /// This sync executed something (sandbox, container, start error): observe and publish
    /// again before waiting, so the status never lags behind the agent's own actions.
    acted: bool,
}

/// What the worker keeps of the pod under its dir (`persist`), read back by `Worker::new`: a
/// restarted agent carries on from it.
struct Saved {
    /// The crash-loop back-off (`crash-backoff.json`).
    crash_backoff: Backoff,
    /// The current or last in-place update (`inplace-update.json`).
    update: Option<UpdateState>,
    /// The status last published (`status.json`).
    status: Option<PodStatus>,
    /// The published status as last written.
    status_json: Option<Vec<u8>>,
    /// The outside (readiness-gate) conditions as last written (`conditions.json`).
    conditions: Option<Vec<PodCondition>>,
    /// A pod kill's deadline may be saved under the pod's dir (one began, or an earlier agent
    /// left one): `end_kill` has a file to remove.
    kill: bool,
}

/// What the worker tracks of the pod from sync to sync in memory only: a restarted agent starts
/// it afresh.
struct Tracked {
    /// Why each container that could not start did not (its waiting reason).
    start_errors: BTreeMap<String, StartError>,
    /// Termination messages of exited instances, by instance ID (read once each).
    termination_messages: BTreeMap<String, String>,
    /// The pod failed for good (its deadline ran out, the node shut down, it was evicted).
    failed: Option<Failed>,
    /// The eviction's terms, once evicted.
    eviction: Option<Eviction>,
    /// When this worker first saw the pod (its creation time, unless a sandbox is older).
    first_seen: jiff::Timestamp,
    /// Instances the agent killed itself (their 137 is no sign of a sandbox going away).
    killed_by_agent: BTreeSet<String>,
    /// Sandboxes a pod kill of this worker stopped: a not-ready one outside this set died by
    /// itself and is stopped by the next pod kill (after an agent restart, once more: the call
    /// is a no-op on a stopped sandbox).
    stopped_sandboxes: BTreeSet<String>,
    /// In-place resize (KEP-1287): the allocation (also saved, `allocation.json`) and the resize
    /// conditions.
    resize: resize::ResizeState,
    /// Volume set-ups that failed in a row (their own back-off, `mount_retry_after`).
    mount_failures: u32,
}

/// Runs a pod worker until its pod has terminated (or the agent stops). `synced` fires after the
/// first sync (for systemd readiness).
pub async fn run_worker(
    ctx: Arc<WorkerContext>,
    initial: DesiredPod,
    mut desire: watch::Receiver<Desire>,
    wake: Arc<Notify>,
    cancel: CancellationToken,
    mut synced: Option<oneshot::Sender<()>>,
) {
    let span = info_span!("pod", pod = %initial.key, uid = %initial.uid);
    let key = initial.key.clone();
    ctx.registry.register_waker(&key, wake.clone());
    let registered = wake.clone();
    let mut w = Worker::new(ctx.clone(), initial, wake.clone(), &cancel).await;
    async move {
        let mut failures: u32 = 0;
        loop {
            let want = desire.borrow_and_update().clone();
            if let Desire::Evict(_, eviction) = &want {
                w.evicted(eviction);
            }
            let mut next = Some(tokio::time::Instant::now() + RESYNC);
            match want {
                Desire::Terminate { remove, grace, node_shutdown } => {
                    if node_shutdown {
                        w.tracked.failed = Some(Failed::NodeShutdown);
                    }
                    if Box::pin(w.terminate(remove, grace, &mut desire, &cancel)).await {
                        info!("pod terminated");
                        let names: Vec<String> =
                            all_containers(&w.desired.pod).into_iter().map(|(c, _)| c.name).collect();
                        w.ctx.metrics.forget_pod(&w.desired.key, &w.desired.uid, &names);
                        w.ctx.ledger.set(&w.desired.uid, None);
                        w.ctx.runtime_uids.release(&w.desired.uid);
                        return;
                    }
                    if cancel.is_cancelled() {
                        return;
                    }
                    failures = failures.saturating_add(1);
                    next = Some(tokio::time::Instant::now() + retry_after(failures, fastrand::f64()));
                }
                // An eviction's terms were taken above: from here it runs as a sync.
                Desire::Run(d) | Desire::Evict(d, _) => {
                    w.desired = d;
                    // Boxed: a sync's state is large and lives only while it runs; inline, it
                    // would size every idle worker's task (36 KB each, measured with massif).
                    match Box::pin(w.sync()).await {
                        Ok(requeue) => {
                            failures = 0;
                            if let Some(at) = requeue {
                                let delay = Duration::from_nanos(u64::try_from(at - now_ns()).unwrap_or(0));
                                next = Some(tokio::time::Instant::now() + delay.min(RESYNC));
                            }
                        }
                        Err(e) => {
                            failures = failures.saturating_add(1);
                            let wait = retry_after(failures, fastrand::f64());
                            warn!(error = %e, retry_in_ms = wait.as_millis() as u64, "sync failed; retrying");
                            next = Some(tokio::time::Instant::now() + wait);
                        }
                    }
                    if let Some(tx) = synced.take() {
                        let _ = tx.send(());
                    }
                }
            }
            let deadline = next.unwrap_or_else(|| tokio::time::Instant::now() + RESYNC);
            // The profile's `wait`: the time between syncs (for a wake: an event, the relist, a
            // probe result, a back-off's end).
            let wait = tracing::trace_span!("wait");
            let woke = async {
                tokio::select! {
                    _ = cancel.cancelled() => false,
                    r = desire.changed() => r.is_ok(),
                    _ = wake.notified() => true,
                    _ = tokio::time::sleep_until(deadline) => true,
                }
            };
            if !woke.instrument(wait).await {
                return;
            }
        }
    }
    .instrument(span)
    .await;
    ctx.registry.unregister_waker(&key, &registered);
}

impl Worker {
    /// Node-pressure eviction: from now on the pod's sync stops everything within the
    /// eviction's grace and keeps it stopped, and its status is Failed, `Evicted`.
    fn evicted(&mut self, eviction: &Eviction) {
        if self.tracked.eviction.is_none() {
            info!(grace_s = eviction.grace.as_secs_f64(), message = %eviction.message, "evicting pod");
            self.tracked.failed = Some(Failed::Evicted);
            self.tracked.eviction = Some(eviction.clone());
        }
    }

    /// A worker for `initial`, carrying on from what an earlier agent saved under the pod's dir
    /// (back-off, status, in-place update, outside conditions, a kill under way, probe results),
    /// read on the blocking pool.
    async fn new(
        ctx: Arc<WorkerContext>,
        initial: DesiredPod,
        wake: Arc<Notify>,
        cancel: &CancellationToken,
    ) -> Self {
        let probes = ProbeManager::new(
            ctx.probes.clone(),
            &ctx.node,
            initial.key.clone(),
            &initial.uid,
            wake,
            cancel.child_token(),
        );
        let (probes, saved) = futures::future::join(probes, Saved::load(&ctx.node, &initial.uid)).await;
        if ctx.registry.external_conditions(&initial.key).is_empty() {
            for c in saved.conditions.iter().flatten() {
                ctx.registry.set_external_condition(&initial.key, c.clone(), false);
            }
        }
        ctx.metrics.pod_seen(&initial.uid, saved.status.as_ref());
        // An eviction outlives the agent: a pod it published as evicted stays stopped.
        let eviction = saved
            .status
            .as_ref()
            .filter(|s| s.phase.as_deref() == Some("Failed") && s.reason.as_deref() == Some("Evicted"))
            .map(|s| Eviction { grace: Duration::ZERO, message: s.message.clone().unwrap_or_default() });
        Worker {
            ctx,
            desired: initial,
            probes,
            saved,
            tracked: Tracked {
                start_errors: BTreeMap::new(),
                termination_messages: BTreeMap::new(),
                failed: eviction.as_ref().map(|_| Failed::Evicted),
                eviction,
                first_seen: jiff::Timestamp::now(),
                killed_by_agent: BTreeSet::new(),
                stopped_sandboxes: BTreeSet::new(),
                resize: resize::ResizeState::default(),
                mount_failures: 0,
            },
            live: None,
            acted: false,
        }
    }
}

/// The images of the containers `plan` starts.
fn images_to_start(plan: &crate::pod::plan::Plan, containers: &[(Container, Kind)]) -> BTreeSet<String> {
    plan.init_to_start
        .iter()
        .chain(&plan.app_to_start)
        .filter_map(|name| containers.iter().find(|(c, _)| &c.name == name))
        .filter_map(|(c, _)| c.image.clone())
        .collect()
}

fn all_containers(pod: &Pod) -> Vec<(Container, Kind)> {
    let Some(spec) = pod.spec.as_ref() else { return Vec::new() };
    let inits = spec.init_containers.iter().flatten().map(|c| (c.clone(), Kind::of_init(c)));
    inits.chain(spec.containers.iter().map(|c| (c.clone(), Kind::App))).collect()
}

impl Worker {
    /// One sync, then, if it executed anything, a fresh observation published before the worker
    /// waits: `get pods`, `logs --previous` and conditions show what the agent just did.
    async fn sync(&mut self) -> Result<Option<i64>, crate::cri::CriError> {
        self.acted = false;
        let since = self.ctx.exec.cri.statuses_generation();
        let result = self.sync_once().instrument(tracing::trace_span!("sync")).await;
        // The sync's own snapshot holds every object of the pod with the statuses read as it
        // made them: the observation below, and the syncs the runtime's events of those starts
        // wake, reuse them while the lists agree (anything the snapshot misses, or any state it
        // no longer shows, and the statuses are read again).
        if let Some(live) = self.live.take().filter(|_| result.is_ok()) {
            self.ctx.exec.cri.keep_statuses(since, live);
        }
        if self.acted {
            self.observe_and_publish(false).await;
        }
        result
    }

    /// One sync (R12.1 order). Returns when to come back for a back-off, if any.
    async fn sync_once(&mut self) -> Result<Option<i64>, crate::cri::CriError> {
        let ctx = self.ctx.clone();
        let observed = ctx.observe(&self.desired.uid).await?;
        self.read_termination_messages(&observed).await;
        // The pod as it runs: its spec with the allocated resources (KEP-1287).
        let (pod, resize_requeue) = self.resize_admit().await;
        self.probes.reconcile(&pod, &observed, false);
        self.probes.save().await;
        let (probe_results, probe_states) = self.probes.view();
        let (held, update_requeue) = self.step_update(&observed, &probe_results, &probe_states).await;
        self.tracked.killed_by_agent.retain(|id| observed.containers.iter().any(|c| &c.id == id));
        self.tracked.stopped_sandboxes.retain(|id| observed.sandboxes.iter().any(|s| &s.id == id));
        let actual = || self.actual_resources(&pod, &observed);
        let decision = sync::decide(&sync::SyncFacts {
            pod: &pod,
            observed: &observed,
            probes: &probe_results,
            held: &held,
            now: now_ns(),
            deadline: self.active_deadline(&observed),
            // An evicted pod stops and stays stopped as one past its deadline does.
            deadline_exceeded: matches!(
                self.tracked.failed,
                Some(Failed::DeadlineExceeded | Failed::Evicted)
            ),
            killed_by_agent: &self.tracked.killed_by_agent,
            stopped_sandboxes: &self.tracked.stopped_sandboxes,
            update_requeue,
            resize_requeue,
            actual: &actual,
        });
        if let SyncPlan::Deadline { newly: true, .. } = decision {
            self.tracked.failed = Some(Failed::DeadlineExceeded);
            ctx.exec.rec.warning(
                &self.desired.key,
                None,
                "DeadlineExceeded",
                "Pod was active on the node longer than the specified deadline".into(),
            );
        }
        self.saved.crash_backoff.gc(now_ns());
        self.publish(&observed, false, &probe_states).await;
        let (the_plan, resize_actions, mut update_requeue) = match decision {
            SyncPlan::Deadline { kill, .. } => {
                if kill {
                    self.acted = true;
                    let (grace, why) = match &self.tracked.eviction {
                        Some(e) => (e.grace, "evicted"),
                        None => (termination_grace(&pod), "active deadline exceeded"),
                    };
                    let deadline = self.begin_kill(grace).await;
                    let key = &self.desired.key;
                    if kill_pod(&ctx.exec, key, &pod, &observed, grace, deadline, why).await {
                        self.end_kill().await;
                        self.sandboxes_stopped(&observed);
                    }
                }
                return Ok(None);
            }
            SyncPlan::Reset { reset, kill_under_way } => {
                if !kill_under_way {
                    // No pod kill is under way: a deadline saved by one that ended with the agent is void.
                    self.end_kill().await;
                }
                self.acted = true;
                return self.reset_all(&observed, &reset).await;
            }
            SyncPlan::Idle { requeue } => {
                self.end_kill().await;
                self.resize_settled(&pod, &crate::pod::resize::Actions::default());
                self.collect_garbage(&observed).await;
                return Ok(requeue);
            }
            SyncPlan::Act { plan, resize, requeue } => (plan, resize, requeue),
        };
        if the_plan.kill_pod.is_none() {
            self.end_kill().await;
        }
        self.resize_settled(&pod, &resize_actions);
        debug!(plan = ?the_plan, "sync plan");
        self.acted = true;
        let only_starts =
            the_plan.kill_pod.is_none() && the_plan.kills.is_empty() && the_plan.create_sandbox.is_none();
        self.live = only_starts.then(|| observed.clone());
        let key = self.desired.key.clone();
        let grace = termination_grace(&pod);
        let containers = all_containers(&pod);

        if let Some(reason) = the_plan.kill_pod {
            if sync::anything_to_stop(&observed, &self.tracked.stopped_sandboxes) {
                let why = match reason {
                    PodKillReason::SandboxChanged => "sandbox changed",
                    PodKillReason::SandboxLostNoRestart => "sandbox lost",
                    PodKillReason::PodCompleted => "pod completed",
                    PodKillReason::InitContainerFailed => "init container failed",
                };
                info!(reason = why, "killing pod");
                let deadline = self.begin_kill(grace).await;
                if kill_pod(&ctx.exec, &key, &pod, &observed, grace, deadline, why).await {
                    self.end_kill().await;
                    self.sandboxes_stopped(&observed);
                }
            }
            if the_plan.create_sandbox.is_none() {
                return Ok(None);
            }
            if !observed.sandboxes.is_empty() {
                ctx.exec.rec.normal(
                    &key,
                    None,
                    "SandboxChanged",
                    "Pod sandbox changed, it will be killed and re-created.".into(),
                );
            }
            // R2.7: the init sequence re-runs in the new sandbox.
            let is_init = |name: &str| containers.iter().any(|(c, k)| *k != Kind::App && c.name == name);
            for c in observed.containers.iter().filter(|c| is_init(&c.name)) {
                if let Err(e) = ctx.exec.cri.remove_container(&c.id).await {
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
            self.tracked.killed_by_agent.insert(k.id.clone());
            let new_image =
                self.saved.update.as_ref().filter(|u| !u.done).and_then(|u| u.images.get(&k.name));
            let why = crate::timeline::kill_why(&k.message, new_image.map(String::as_str));
            ctx.exec.rec.step(&key, Some(&k.name), crate::timeline::Step::now(StepKind::Killing, &k.id, why));
            kill_one(&ctx.exec, &self.desired, spec, &k.id, g, &k.message, pod_ip.as_deref()).await;
        }

        if let Some(at) = self.resize_actuate(&pod, &resize_actions).await {
            update_requeue = earliest(update_requeue, Some(at));
        }

        let mut images_seen = None;
        let (sandbox_id, pod_ips, attempt) = match the_plan.create_sandbox {
            Some(attempt) => {
                // A new pod whose first start is a sidecar: the sync follows the instances it
                // starts (`publish_started`) from the new sandbox's status, so what the sidecar
                // gates can start in this same sync; all its images are looked up with the sandbox.
                let fresh = observed.sandboxes.is_empty() && observed.containers.is_empty();
                let follow = fresh
                    && the_plan
                        .init_to_start
                        .iter()
                        .any(|n| containers.iter().any(|(c, k)| *k == Kind::Sidecar && &c.name == n));
                // The pod's cgroup exists with its values before its sandbox (the kubelet's
                // `EnsureExists`; under systemd its slice, which the sandbox's scope goes in).
                let name = crate::pod::spec::pod_cgroup_name(&pod, &self.desired.uid);
                if let Err(e) = ctx.cgroups.ensure_pod(&name, &crate::pod::resize::pod_cgroup(&pod)).await {
                    ctx.exec.rec.warning(
                        &self.desired.key,
                        None,
                        "FailedToCreatePodContainer",
                        format!("unable to ensure pod container exists: {e}"),
                    );
                    warn!(error = %e, "making the pod cgroup failed; retrying");
                    return Ok(Some(now_ns() + 10_000_000_000));
                }
                let sandbox = create_sandbox(&ctx.starts, &self.desired, attempt)
                    .instrument(tracing::trace_span!("create_sandbox"));
                // The images of this sync's starts are looked up while the sandbox is made.
                let images = match follow {
                    true => containers.iter().filter_map(|(c, _)| c.image.clone()).collect(),
                    false => images_to_start(&the_plan, &containers),
                };
                let (made, seen) =
                    futures::future::join(sandbox, look_up_images(&ctx.starts.images, images)).await;
                images_seen = Some(seen);
                match made {
                    Ok((id, status)) => {
                        self.tracked.mount_failures = 0;
                        // The pod cgroup's values, before any container starts (the kubelet's pod
                        // container manager); under cgroupfs the runtime made the cgroup with the
                        // sandbox.
                        let name = crate::pod::spec::pod_cgroup_name(&pod, &self.desired.uid);
                        let values = crate::pod::resize::pod_cgroup(&pod);
                        let written = ctx
                            .cgroups
                            .write_values(&name, &values)
                            .instrument(tracing::trace_span!("pod_cgroup"))
                            .await;
                        if let Err(e) = written {
                            warn!(error = %e, "setting the pod cgroup's limits failed");
                        }
                        let ips = status.as_ref().map(|s| s.ips.clone()).unwrap_or_default();
                        if let Some(sb) = status.filter(|_| follow) {
                            let uid = self.desired.uid.clone();
                            self.live =
                                Some(ObservedPod { uid, sandboxes: vec![sb], containers: Vec::new() });
                        }
                        (id, ips, attempt)
                    }
                    Err(e) if e.reason == FAILED_MOUNT => {
                        self.tracked.mount_failures = self.tracked.mount_failures.saturating_add(1);
                        let wait = mount_retry_after(self.tracked.mount_failures);
                        warn!(error = %e.message, retry_in_ms = wait.as_millis() as u64, "setting up the volumes failed; retrying");
                        return Ok(Some(
                            now_ns().saturating_add(i64::try_from(wait.as_nanos()).unwrap_or(i64::MAX)),
                        ));
                    }
                    Err(e) => {
                        // Retried after the kubelet's sync back-off (10 s, R12.9).
                        warn!(error = %e.message, "creating the sandbox failed; retrying");
                        return Ok(Some(now_ns() + 10_000_000_000));
                    }
                }
            }
            None => match observed.sandbox() {
                Some(s) => (s.id.clone(), s.ips.clone(), s.attempt),
                None => return Ok(None),
            },
        };
        if the_plan.ephemeral_to_start.is_empty()
            && the_plan.init_to_start.is_empty()
            && the_plan.app_to_start.is_empty()
        {
            return Ok(update_requeue);
        }
        let sb_config =
            match crate::pod::start::existing_sandbox_config(&ctx.starts, &self.desired, attempt).await {
                Ok(config) => config,
                Err(e) => {
                    // Retried after the kubelet's sync back-off, as a sandbox that failed.
                    warn!(error = %e.message, "forming the pod's sandbox config failed; retrying");
                    return Ok(Some(now_ns() + 10_000_000_000));
                }
            };
        // Starts are planned from the snapshot taken before kills; for the back-off check and
        // restart counts that snapshot is what the kubelet uses too (R6.6 nuance).
        // The in-place update's own wake-up (end of the drain wait, pull retry) must survive a
        // sync that also had other work, or it waits for an unrelated wake (a crash back-off).
        let mut requeue: Option<i64> = update_requeue;
        if !the_plan.ephemeral_to_start.is_empty() {
            let sandbox = starts::Sandbox {
                id: &sandbox_id,
                ips: &pod_ips,
                config: &sb_config,
                images_seen: images_seen.as_ref(),
            };
            let ephemeral = crate::pod::spec::ephemeral_containers(&pod);
            for name in &the_plan.ephemeral_to_start {
                let Some((spec, _)) = ephemeral.iter().find(|(c, _)| &c.name == name) else { continue };
                self.start(&observed, spec, Kind::Ephemeral, &sandbox, &mut requeue).await;
            }
        }
        let (mut inits, mut apps) = (the_plan.init_to_start, the_plan.app_to_start);
        let mut current = observed;
        let mut seen = images_seen.as_ref();
        let present: Option<ImagesSeen> = images_seen.as_ref().map(|all| {
            all.iter().filter(|(_, i)| i.is_some()).map(|(k, v)| (k.clone(), v.clone())).collect()
        });
        // One round per sidecar that gates the next start, at most.
        for _ in 0..=containers.len() {
            let sandbox =
                starts::Sandbox { id: &sandbox_id, ips: &pod_ips, config: &sb_config, images_seen: seen };
            let mut sidecar_started = false;
            for name in &inits {
                let Some((spec, kind)) = containers.iter().find(|(c, _)| &c.name == name) else { continue };
                let ok = self.start(&current, spec, *kind, &sandbox, &mut requeue).await;
                // R4.4: a failed regular init container ends this sync; a sidecar does not.
                if !ok && *kind == Kind::Init {
                    return Ok(requeue);
                }
                sidecar_started |= ok && *kind == Kind::Sidecar;
            }
            for name in &apps {
                let Some((spec, kind)) = containers.iter().find(|(c, _)| &c.name == name) else { continue };
                self.start(&current, spec, *kind, &sandbox, &mut requeue).await;
            }
            // The planner, from the snapshot with the started sidecar's status (read right after
            // its start), decides what the next sync would after the runtime's event. Only the
            // first start of what the sidecar gated is taken here; anything else (a sidecar that
            // already exited, a kill) is left to the next sync.
            let Some(live) = self.live.clone().filter(|_| sidecar_started) else { break };
            let Some((next_inits, next_apps)) = gated_starts(&pod, &live, &probe_results, &held) else {
                break;
            };
            debug!(init = ?next_inits, app = ?next_apps, "the sidecar runs; starting what it gated");
            (inits, apps) = (next_inits, next_apps);
            current = live;
            // Only an image found moments ago is taken as present: one found missing may have
            // been pulled by the starts since.
            seen = present.as_ref();
        }
        Ok(requeue)
    }

    /// A pod kill stopped every sandbox of `observed`.
    fn sandboxes_stopped(&mut self, observed: &ObservedPod) {
        self.tracked.stopped_sandboxes.extend(observed.sandboxes.iter().map(|s| s.id.clone()));
    }

    /// When `activeDeadlineSeconds` (counted from the pod's start time) runs out, in ns.
    fn active_deadline(&self, observed: &ObservedPod) -> Option<i64> {
        let secs = self.desired.pod.spec.as_ref()?.active_deadline_seconds?;
        let published = self.saved.status.as_ref().and_then(|s| s.start_time.as_ref());
        let start_ns = match published {
            Some(t) => i64::try_from(t.0.as_nanosecond()).ok()?,
            None => observed.sandboxes.iter().map(|s| s.created_at).min()?,
        };
        Some(start_ns.saturating_add(secs.saturating_mul(1_000_000_000)))
    }
}

fn probe_grace(p: Option<&k8s_openapi::api::core::v1::Probe>) -> Option<Duration> {
    p?.termination_grace_period_seconds.map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_syncs_back_off_up_to_the_cap() {
        let s = Duration::from_secs;
        // (failures in a row, jitter draw, wait)
        let cases = [
            (1, 0.0, s(2)),
            (2, 0.0, s(4)),
            (3, 0.0, s(8)),
            (4, 0.0, s(10)),
            (40, 0.0, s(10)),
            (1, 1.0, Duration::from_millis(2400)),
            (40, 1.0, s(12)),
            (0, 0.0, s(2)),
        ];
        for (failures, jitter, want) in cases {
            assert_eq!(retry_after(failures, jitter), want, "{failures} failures, jitter {jitter}");
        }
    }

    #[test]
    fn failed_mounts_back_off_from_half_a_second_to_the_kubelets_cap() {
        let ms = Duration::from_millis;
        // (failed set-ups in a row, wait)
        let cases = [
            (0, ms(500)),
            (1, ms(500)),
            (2, ms(1000)),
            (3, ms(2000)),
            (8, ms(64_000)),
            (9, ms(122_000)),
            (99, ms(122_000)),
        ];
        for (failures, want) in cases {
            assert_eq!(mount_retry_after(failures), want, "{failures} failures");
        }
    }
}
