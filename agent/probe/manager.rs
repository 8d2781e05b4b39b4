//! The probes of one pod: starts a task per probe for each running container instance, stops
//! them when the instance is gone, and turns results into the planner's and status's views.
//! Readiness and `started` are saved under `--root-dir`, so a restarted agent keeps them until
//! fresh results arrive (DESIGN: no Ready flap).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::ProbeResults;
use super::tracker::{ProbeKind, ProbeResult};
use super::worker::{ProbeTask, Results};
use crate::context::ProbeContext;
use crate::model::{ContainerState, ObservedPod, PodKey, ProbeState};

/// Saved per container ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Saved {
    ready: bool,
    started: bool,
}

pub struct ProbeManager {
    ctx: Arc<ProbeContext>,
    key: PodKey,
    results: Results,
    tasks: HashMap<(String, ProbeKind), CancellationToken>,
    wake: Arc<Notify>,
    cancel: CancellationToken,
    save_path: PathBuf,
    restored: HashMap<String, Saved>,
    last_saved: BTreeMap<String, Saved>,
}

fn probes_of(c: &Container) -> Vec<(ProbeKind, Probe)> {
    let mut v = Vec::new();
    if let Some(p) = &c.startup_probe {
        v.push((ProbeKind::Startup, p.clone()));
    }
    if let Some(p) = &c.readiness_probe {
        v.push((ProbeKind::Readiness, p.clone()));
    }
    if let Some(p) = &c.liveness_probe {
        v.push((ProbeKind::Liveness, p.clone()));
    }
    v
}

/// Containers that may have probes: sidecars and app containers (R4.9).
fn probed_containers(pod: &Pod) -> Vec<&Container> {
    let Some(s) = pod.spec.as_ref() else { return Vec::new() };
    s.init_containers
        .iter()
        .flatten()
        .filter(|c| crate::podspec::is_sidecar(c))
        .chain(s.containers.iter())
        .collect()
}

impl ProbeManager {
    /// The probes of pod `uid`, with their results saved under its dir on `node` (read back
    /// off the async threads).
    pub async fn new(
        ctx: Arc<ProbeContext>,
        node: &crate::node::NodeConfig,
        key: PodKey,
        uid: &str,
        wake: Arc<Notify>,
        cancel: CancellationToken,
    ) -> Self {
        let save_path = crate::node::pod_dir(node, uid).join("probe-results.json");
        let restored: HashMap<String, Saved> = tokio::fs::read(&save_path)
            .await
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        Self {
            ctx,
            key,
            results: Results::default(),
            tasks: HashMap::new(),
            wake,
            cancel,
            save_path,
            last_saved: restored.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            restored,
        }
    }

    /// Starts and stops probe tasks to match the running instances. While terminating, only
    /// readiness keeps running (R5.10, R5.11).
    pub fn reconcile(&mut self, pod: &Pod, observed: &ObservedPod, terminating: bool) {
        let pod_ip = observed.pod_ips().first().cloned();
        let mut wanted: Vec<(String, ProbeKind)> = Vec::new();
        for spec in probed_containers(pod) {
            let Some(c) = observed.newest(&spec.name).filter(|c| c.state == ContainerState::Running) else {
                continue;
            };
            for (kind, probe) in probes_of(spec) {
                if terminating && kind != ProbeKind::Readiness {
                    continue;
                }
                let key = (c.id.clone(), kind);
                wanted.push(key.clone());
                if self.tasks.contains_key(&key) {
                    continue;
                }
                let saved = self.restored.get(&c.id).copied();
                let initial = match (kind, saved) {
                    (ProbeKind::Readiness, Some(s)) => {
                        if s.ready {
                            ProbeResult::Success
                        } else {
                            ProbeResult::Failure
                        }
                    }
                    (ProbeKind::Startup, Some(s)) if s.started => ProbeResult::Success,
                    _ => kind.initial(),
                };
                if let Ok(mut r) = self.results.lock() {
                    r.insert(key.clone(), initial);
                }
                let token = self.cancel.child_token();
                let period = std::time::Duration::from_secs(
                    u64::try_from(probe.period_seconds.unwrap_or(10).max(1)).unwrap_or(10),
                );
                // Behind a pointer: the spec is large and the task, which lives as long as its
                // container, only reads it.
                let spec = Arc::new(spec.clone());
                let task = ProbeTask {
                    ctx: self.ctx.clone(),
                    key: self.key.clone(),
                    kind,
                    probe,
                    spec: spec.clone(),
                    container_id: c.id.clone(),
                    started_at_ns: c.started_at,
                    pod_ip: pod_ip.clone(),
                    initial,
                    // R6.2: only while the agent itself started less than a period ago (not
                    // the pod: a pod added to a running agent is probed at once).
                    jitter: self.ctx.started.elapsed() < period,
                    results: self.results.clone(),
                    wake: self.wake.clone(),
                    metrics: crate::metrics::ProbeSeries::new(
                        kind.title(),
                        &spec.name,
                        &self.key,
                        &observed.uid,
                    ),
                };
                tokio::spawn(task.run(token.clone()));
                self.tasks.insert(key, token);
            }
        }
        // R6.12: results belong to an instance; drop them with its tasks.
        self.tasks.retain(|k, token| {
            let keep = wanted.contains(k);
            if !keep {
                token.cancel();
            }
            keep
        });
        if let Ok(mut r) = self.results.lock() {
            r.retain(|k, _| wanted.contains(k));
        }
    }

    /// The planner's view (startup and liveness by container ID) and status's (started, ready).
    pub fn view(&self) -> (ProbeResults, BTreeMap<String, ProbeState>) {
        let mut planner = ProbeResults::default();
        let mut status: BTreeMap<String, ProbeState> = BTreeMap::new();
        let Ok(r) = self.results.lock() else { return (planner, status) };
        for ((id, kind), result) in r.iter() {
            let entry = status.entry(id.clone()).or_default();
            match kind {
                ProbeKind::Startup => {
                    planner.startup.insert(id.clone(), *result);
                    entry.started = Some(*result == ProbeResult::Success);
                }
                ProbeKind::Liveness => {
                    planner.liveness.insert(id.clone(), *result);
                }
                ProbeKind::Readiness => entry.ready = Some(*result == ProbeResult::Success),
            }
        }
        (planner, status)
    }

    /// Saves the results the status shows (started, ready) when they changed since the last
    /// save, for an agent that restarts (a durable write: on the blocking pool, awaited). The
    /// worker calls it after each `reconcile`.
    pub async fn save(&mut self) {
        let (_, status) = self.view();
        let now: BTreeMap<String, Saved> = status
            .iter()
            .map(|(id, s)| {
                (id.clone(), Saved { ready: s.ready.unwrap_or(false), started: s.started.unwrap_or(true) })
            })
            .collect();
        if now == self.last_saved {
            return;
        }
        if crate::checkpoint::write_json_async(self.save_path.clone(), &now).await.is_ok() {
            self.last_saved = now;
        }
    }

    /// Stops every probe task (pod gone or agent stopping).
    pub fn stop(&mut self) {
        for t in self.tasks.values() {
            t.cancel();
        }
        self.tasks.clear();
    }
}

impl Drop for ProbeManager {
    fn drop(&mut self) {
        self.stop();
    }
}
