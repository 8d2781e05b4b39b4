//! One task per pod UID: observe the runtime, publish status, plan, execute; then wait for a
//! wake (PLEG, probes), a spec change, a back-off expiry or the periodic resync.
//! Termination is an explicit desire, never a side effect of the agent stopping.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::{Notify, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use super::backoff::Backoff;
use super::context::{Shared, now_ns};
use super::plan::{KillReason, PodKillReason, is_sidecar, plan};
use super::spec::{Kind, pod_dir, pod_log_dir, sandbox_config, termination_grace};
use super::start::{StartRequest, backoff_key, crash_backoff_wait, create_sandbox, start_container};
use super::terminate::{kill_one, kill_pod};
use crate::model::{ContainerState, DesiredPod, ObservedPod, SandboxState};
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
    first_seen: jiff::Timestamp,
    /// The outside (readiness-gate) conditions last saved under the pod's dir.
    saved_conditions: Option<Vec<PodCondition>>,
}

/// Where a pod's outside conditions are saved: they live only in the agent (no API server), so
/// a restarted agent reloads them instead of flapping `Ready` (DESIGN: no readiness flap).
fn conditions_path(ctx: &Shared, uid: &str) -> std::path::PathBuf {
    pod_dir(&ctx.node, uid).join("conditions.json")
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
    let saved_conditions: Option<Vec<PodCondition>> =
        std::fs::read(conditions_path(&ctx, &initial.uid)).ok().and_then(|b| serde_json::from_slice(&b).ok());
    if ctx.registry.external_conditions(&initial.key).is_empty() {
        for c in saved_conditions.iter().flatten() {
            ctx.registry.set_external_condition(&initial.key, c.clone(), false);
        }
    }
    let mut w = Worker {
        ctx: ctx.clone(),
        desired: initial,
        crash_backoff: Backoff::crash_loop(),
        start_errors: BTreeMap::new(),
        status: None,
        termination_messages: BTreeMap::new(),
        probes,
        first_seen: jiff::Timestamp::now(),
        saved_conditions,
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
                    match w.sync_once().await {
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
    fn publish(&mut self, observed: &ObservedPod, terminating: bool) {
        let ctx = &self.ctx;
        let (_, probe_states) = self.probes.view();
        let external = ctx.registry.external_conditions(&self.desired.key);
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
        let status = compute(&StatusInput {
            desired: &self.desired,
            observed,
            probes: &probe_states,
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
        pod.status = Some(status.clone());
        self.status = Some(status);
        ctx.registry.put_pod(
            self.desired.key.clone(),
            PodRecord {
                pod,
                manifest_file: self.desired.file.display().to_string(),
                warnings: self.desired.warnings.clone(),
            },
        );
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
        self.publish(&observed, false);
        let (probe_results, _) = self.probes.view();
        let the_plan = plan(&pod, &observed, &probe_results);
        if the_plan.is_empty() {
            self.collect_garbage(&observed).await;
            return Ok(None);
        }
        debug!(plan = ?the_plan, "sync plan");
        let key = self.desired.key.clone();
        let grace = termination_grace(&pod);

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
                kill_pod(&ctx, &key, &pod, &observed, grace, why).await;
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
            let inits: Vec<String> = all_containers(&pod)
                .into_iter()
                .filter(|(_, k)| *k != Kind::App)
                .map(|(c, _)| c.name)
                .collect();
            for c in observed.containers.iter().filter(|c| inits.contains(&c.name)) {
                if let Err(e) = ctx.cri.remove_container(&c.id).await {
                    warn!(container = %c.name, error = %e, "removing init container instance failed");
                }
            }
        }

        let pod_ip = observed.pod_ips().first().cloned();
        for k in &the_plan.kills {
            let Some((spec, _)) = all_containers(&pod).into_iter().find(|(c, _)| c.name == k.name) else {
                continue;
            };
            let g = match k.reason {
                KillReason::LivenessProbe => probe_grace(spec.liveness_probe.as_ref()).unwrap_or(grace),
                KillReason::StartupProbe => probe_grace(spec.startup_probe.as_ref()).unwrap_or(grace),
                _ => grace,
            };
            kill_one(&ctx, &self.desired, &spec, &k.id, g, &k.message, pod_ip.as_deref()).await;
        }

        let (sandbox_id, pod_ips, attempt) = match the_plan.create_sandbox {
            Some(attempt) => match create_sandbox(&ctx, &self.desired, attempt).await {
                Ok((id, ips)) => (id, ips, attempt),
                Err(e) => {
                    warn!(error = %e.message, "creating the sandbox failed");
                    return Ok(None);
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
        let mut requeue: Option<i64> = None;
        let containers = all_containers(&pod);
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
        }
        let req = StartRequest {
            desired: &self.desired,
            spec,
            kind,
            observed,
            sandbox_id,
            pod_ips,
            sandbox_config: sb_config,
        };
        match start_container(&self.ctx, &req).await {
            Ok(_) => {
                self.start_errors.remove(&spec.name);
                true
            }
            Err(e) => {
                if e.reason == "ErrImagePull" || e.reason == "ImagePullBackOff" {
                    // Come back when the image back-off ends (R7.11).
                    let at = now + 10_000_000_000;
                    *requeue = Some(requeue.map_or(at, |r| r.min(at)));
                }
                self.start_errors.insert(spec.name.clone(), e);
                false
            }
        }
    }

    /// R12.5 / R4.10: keep only the newest exited instance of each container, and remove dead
    /// sandboxes that are not the newest and hold no containers.
    async fn collect_garbage(&self, observed: &ObservedPod) {
        let mut seen_exited: HashMap<&str, bool> = HashMap::new();
        for c in &observed.containers {
            if c.state != ContainerState::Exited {
                continue;
            }
            let seen = seen_exited.entry(c.name.as_str()).or_insert(false);
            if *seen {
                debug!(container = %c.name, id = %c.id, "removing old exited instance");
                if self.ctx.cri.remove_container(&c.id).await.is_ok() && !c.log_path.is_empty() {
                    let _ = std::fs::remove_file(&c.log_path);
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
        self.publish(&observed, true);
        let grace = termination_grace(&self.desired.pod);
        kill_pod(&ctx, &key, &self.desired.pod, &observed, grace, "pod deleted").await;
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
            let _ = std::fs::remove_dir_all(pod_dir(&ctx.node, &self.desired.uid));
            let _ = std::fs::remove_dir_all(pod_log_dir(&ctx.node, &self.desired));
            remove_pod_cgroups(&self.desired.uid);
            self.probes.stop();
            ctx.registry.remove_pod(&key);
            ctx.normal(&key, None, "Removed", format!("Pod {} removed", key));
        }
        true
    }
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

/// Best-effort removal of the pod's cgroups (cgroupfs layout, v1 and v2).
fn remove_pod_cgroups(uid: &str) {
    let Ok(controllers) = std::fs::read_dir("/sys/fs/cgroup") else { return };
    let mut roots: Vec<std::path::PathBuf> = controllers.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    roots.push("/sys/fs/cgroup".into());
    for root in roots {
        for qos in ["kubepods/besteffort", "kubepods/burstable", "kubepods"] {
            let dir = root.join(qos).join(format!("pod{uid}"));
            if dir.is_dir() {
                let _ = std::fs::remove_dir(&dir);
            }
        }
    }
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
