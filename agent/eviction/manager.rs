//! The eviction manager's loop (the kubelet's `synchronize`, every monitoring period): read the
//! signals, decide (`decide`), publish the pressure conditions (on the `watch` channel for
//! `cluster`, and as the Node's conditions in the registry with their transition events,
//! `conditions`), and when a threshold acts, record `EvictionThresholdMet` on the node, reclaim
//! node-level disk first (unused images, for the signals `reclaims_images` names) and stop
//! there if no threshold is met any more; else rank the active pods and evict the first that is
//! not critical, one per cycle, waiting (at most 30 s) for it to stop before the next cycle.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::conditions;
use super::decide::{self, State};
use super::rank::{self, Candidate};
use super::{Config, PodRef, Pressure, Reclaim, Signals};
use crate::model::{PodKey, PodSource};
use crate::pod::supervisor::EvictRequest;
use crate::pod::worker::Eviction;
use crate::recorder::Recorder;
use crate::registry::Registry;

/// How long the manager waits for an evicted pod to stop (`podCleanupTimeout`).
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);
/// The grace a pod evicted for a hard threshold gets (`immediateEvictionGracePeriodSeconds`).
const HARD_GRACE: Duration = Duration::from_secs(1);

pub struct Manager<S, R> {
    pub config: Config,
    pub signals: S,
    pub reclaim: R,
    pub registry: Registry,
    pub recorder: Recorder,
    /// Where pod logs go (a pod's log dir is measured with its volumes).
    pub node: crate::node::NodeConfig,
    pub evict: mpsc::Sender<EvictRequest>,
    pub pressure: watch::Sender<Pressure>,
}

impl<S: Signals, R: Reclaim> Manager<S, R> {
    /// Runs until cancelled.
    pub async fn run(self, cancel: CancellationToken) {
        // The conditions exist from the start (the kubelet's setters run with the eviction
        // manager off too), each one's first status recorded as a transition from Unknown.
        self.publish_conditions(&Pressure::new());
        if self.config.thresholds.is_empty() {
            info!("eviction: no thresholds; the manager is off");
            return cancel.cancelled().await;
        }
        let start = tokio::time::Instant::now();
        let mut state = State::default();
        let mut tick = tokio::time::interval(self.config.monitoring_period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            if let Some(evicted) = self.cycle(&mut state, start.elapsed()).await {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = self.wait_stopped(&evicted) => {}
                }
            }
        }
    }

    /// One cycle; the pod it evicted, if any.
    async fn cycle(&self, state: &mut State, now: Duration) -> Option<PodKey> {
        let observations = self.signals.observe().await;
        let out = state.step(&self.config.thresholds, &observations, now, self.config.transition_period);
        self.pressure.send_if_modified(|cur| {
            if *cur == out.conditions {
                return false;
            }
            let names = |s: &Pressure| s.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(",");
            info!(conditions = %names(&out.conditions), was = %names(cur), "eviction: node pressure changed");
            cur.clone_from(&out.conditions);
            true
        });
        self.publish_conditions(&out.conditions);
        let threshold = out.acting.first()?.clone();
        let signal = threshold.signal;
        let resource = signal.resource();
        info!(signal = %signal, resource, "eviction: attempting to reclaim");
        self.registry.record_node(
            "Warning",
            conditions::THRESHOLD_MET,
            conditions::threshold_met_message(resource),
        );
        let mut observations = observations;
        // An image filesystem that cannot be found is taken as the nodefs (images reclaimed
        // for either); the kubelet skips the whole cycle until it knows.
        let dedicated = self.signals.dedicated_image_fs().await.unwrap_or(false);
        if super::reclaims_images(signal, dedicated) {
            self.reclaim.free_disk().await;
            observations = self.signals.observe().await;
            // `reclaimNodeLevelResources`: done when no threshold at all is met any more (none
            // of the configured ones, minimum reclaim and grace periods aside).
            let still = decide::met(&self.config.thresholds, &observations, false);
            if still.is_empty() {
                info!(resource, "eviction: able to reduce pressure without evicting pods");
                return None;
            }
            let names: Vec<&str> = still.iter().map(|t| t.signal.as_str()).collect();
            info!(resource, still_met = %names.join(","), "eviction: must evict pod(s) to reclaim");
        }
        let active = self.active_pods();
        if active.is_empty() {
            warn!("eviction: thresholds met, but no pods are active to evict");
            return None;
        }
        let refs: Vec<PodRef> = active.iter().map(|(_, pod, _)| self.pod_ref(pod)).collect();
        let disk = signal.condition() == super::Condition::DiskPressure;
        let usage = self.signals.usage(&refs, disk).await;
        let mut candidates: Vec<Candidate> = active
            .iter()
            .map(|(_, pod, _)| {
                let uid = uid(pod);
                let (_, memory_request) = crate::podspec::requests(pod);
                Candidate {
                    usage: usage.get(&uid).copied(),
                    uid,
                    priority: pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0),
                    memory_request,
                    disk_request: ephemeral_request(pod),
                }
            })
            .collect();
        rank::rank(signal, &mut candidates);
        for c in candidates {
            let Some((key, pod, is_static)) = active.iter().find(|(_, p, _)| uid(p) == c.uid) else {
                continue;
            };
            if rank::is_critical(pod, *is_static) {
                warn!(pod = %key, "eviction: cannot evict a critical pod");
                continue;
            }
            let grace = if threshold.is_hard() {
                HARD_GRACE
            } else {
                crate::pod::spec::termination_grace(pod).min(self.config.max_pod_grace_period)
            };
            let message = rank::message(&threshold, observations.get(&signal).copied(), &[]);
            self.recorder.warning(key, None, rank::REASON, message.clone());
            info!(pod = %key, grace_s = grace.as_secs(), message = %message, "eviction: evicting pod");
            let request = EvictRequest { uid: c.uid.clone(), eviction: Eviction { grace, message } };
            if self.evict.send(request).await.is_err() {
                return None;
            }
            return Some(key.clone());
        }
        warn!("eviction: unable to evict any pods from the node");
        None
    }

    /// Sets the node's pressure conditions in the registry for `pressure` (their heartbeat is
    /// this cycle) and records the kubelet's `Node <name> status is now: ...` event for each
    /// that changed.
    fn publish_conditions(&self, pressure: &Pressure) {
        let previous = self.registry.node_conditions();
        let (now, events) = conditions::pressure_conditions(pressure, &previous, jiff::Timestamp::now());
        self.registry.set_node_conditions(now);
        for event in events {
            self.registry.record_node(
                "Normal",
                event,
                conditions::status_message(&self.node.node_name, event),
            );
        }
    }

    /// The pods that may still run: published, not finished (key, pod, whether static).
    fn active_pods(&self) -> Vec<(PodKey, Pod, bool)> {
        self.registry
            .pods()
            .into_iter()
            .filter(|r| {
                let phase = r.pod.status.as_ref().and_then(|s| s.phase.as_deref());
                !matches!(phase, Some("Succeeded" | "Failed")) && r.pod.metadata.uid.is_some()
            })
            .map(|r| {
                let is_static = !PodSource::parse(&r.manifest_file).is_api();
                let key = PodKey::new(
                    r.pod.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
                    r.pod.metadata.name.clone().unwrap_or_default(),
                );
                (key, r.pod, is_static)
            })
            .collect()
    }

    fn pod_ref(&self, pod: &Pod) -> PodRef {
        let uid = uid(pod);
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        PodRef {
            qos: crate::cgroup::Qos::from_class(crate::status::qos_class(pod)),
            dirs: vec![
                crate::node::pod_dir(&self.node, &uid),
                self.node.pod_logs_dir.join(format!("{ns}_{name}_{uid}")),
            ],
            uid,
        }
    }

    /// Waits until the evicted pod has stopped (published Failed with nothing running), at
    /// most [`CLEANUP_TIMEOUT`].
    async fn wait_stopped(&self, key: &PodKey) {
        let deadline = tokio::time::Instant::now() + CLEANUP_TIMEOUT;
        while tokio::time::Instant::now() < deadline {
            let stopped = self.registry.pod(key).is_none_or(|r| {
                let status = r.pod.status.unwrap_or_default();
                let running = status
                    .container_statuses
                    .iter()
                    .flatten()
                    .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
                status.phase.as_deref() == Some("Failed") && !running
            });
            if stopped {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        warn!(pod = %key, "eviction: timed out waiting for the evicted pod to stop");
    }
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// The pod's ephemeral-storage request (the larger of its app containers' sum and its largest
/// init container's).
fn ephemeral_request(pod: &Pod) -> i64 {
    let Some(spec) = pod.spec.as_ref() else { return 0 };
    let of = |c: &k8s_openapi::api::core::v1::Container| {
        c.resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("ephemeral-storage"))
            .and_then(|q| crate::quantity::Quantity::parse(&q.0))
            .and_then(|q| q.value())
            .and_then(|v| i64::try_from(v).ok())
            .unwrap_or(0)
    };
    let apps: i64 = spec.containers.iter().map(of).sum();
    let inits = spec.init_containers.iter().flatten().map(of).max().unwrap_or(0);
    apps.max(inits)
}
