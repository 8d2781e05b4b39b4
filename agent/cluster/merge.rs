//! One pod set from two sources: the manifest directory's static pods and the API server's pods
//! for this node, admitted as the kubelet admits them. The supervisor sees one [`ManifestSet`]
//! and never learns where a pod came from.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::admit::{self, NodeRoom, Rejection, Used};
use super::pods::{self, ApiPods};
use crate::ledger::Ledger;
use crate::model::{Deleting, ManifestSet};
use crate::registry::Registry;

/// Conditions the node writes itself; every other condition of an API pod is a controller's
/// (a readiness gate such as OpenKruise's `InPlaceUpdateReady`) and reaches status as external.
pub const NODE_OWNED: [&str; 8] = [
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
    "PodScheduled",
    "AllContainersRestarting",
    crate::pod::resize::PENDING,
    crate::pod::resize::IN_PROGRESS,
];

/// The pods refused at admission, by UID: the status writer fails them in the API.
pub type Rejections = BTreeMap<String, (crate::model::PodKey, Rejection)>;

struct Merger {
    registry: Registry,
    room: NodeRoom,
    /// Pod UIDs the runtime had when the agent started (a finished API pod is adopted, not run
    /// again, only when its containers are still here).
    runtime_uids: BTreeSet<String>,
    /// The API pods admitted (and not gone from the API server since).
    admitted: BTreeSet<String>,
    /// What the node's pods hold, shared with the pod workers (which enter their allocation).
    ledger: Ledger,
    rejected: Rejections,
    /// Static pod keys an API pod collided with (reported once).
    collisions: BTreeSet<String>,
    /// Each API pod's DesiredPod by UID, with the resourceVersion it was made from.
    desired: BTreeMap<String, (Option<String>, crate::model::DesiredPod)>,
    /// The node is shutting down (graceful node shutdown): new pods are refused.
    shutting_down: watch::Receiver<bool>,
    /// The node's pressure conditions (`eviction`): pods are admitted by them.
    pressure: watch::Receiver<crate::eviction::Pressure>,
}

fn is_terminal(phase: Option<&str>) -> bool {
    matches!(phase, Some("Succeeded" | "Failed"))
}

impl Merger {
    fn merge(&mut self, files: &ManifestSet, api: &ApiPods) -> ManifestSet {
        let mut out = files.clone();
        out.api_synced = api.synced;
        let mut by_age: Vec<&Arc<Pod>> = api.pods.values().collect();
        by_age.sort_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
        let live: BTreeSet<&str> = api.pods.values().filter_map(|p| p.metadata.uid.as_deref()).collect();
        let ledger = &self.ledger;
        self.admitted.retain(|uid| {
            let keep = live.contains(uid.as_str());
            if !keep {
                ledger.set(uid, None);
            }
            keep
        });
        self.rejected.retain(|uid, _| live.contains(uid.as_str()));
        self.desired.retain(|uid, _| live.contains(uid.as_str()));
        for pod in by_age {
            if super::mirror::is_mirror(pod) {
                continue; // its static pod runs; the mirror only shows it
            }
            let key = pods::key_of(pod);
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            if pod.metadata.deletion_timestamp.is_some() {
                let secs = pod
                    .metadata
                    .deletion_grace_period_seconds
                    .or_else(|| pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds))
                    .unwrap_or(30);
                let grace = Duration::from_secs(u64::try_from(secs).unwrap_or(0));
                out.deleting.insert(key, Deleting { uid, grace });
                continue;
            }
            if files.pods.contains_key(&key) {
                if self.collisions.insert(uid.clone()) {
                    warn!(pod = %key, "an API pod has the name of a static pod on this node; the static pod wins");
                }
                continue;
            }
            if self.rejected.contains_key(&uid) {
                continue;
            }
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if !self.admitted.contains(&uid) {
                if is_terminal(phase) && !self.runtime_uids.contains(&uid) {
                    continue; // finished before this agent saw it: nothing to run
                }
                let known = self.runtime_uids.contains(&uid);
                let verdict = if known {
                    None
                } else if *self.shutting_down.borrow() {
                    Some(Rejection {
                        reason: crate::pod::shutdown::NOT_ADMITTED_REASON.into(),
                        message: crate::pod::shutdown::NOT_ADMITTED_MESSAGE.into(),
                    })
                } else if let Some(message) =
                    crate::eviction::rank::admit(pod, &self.pressure.borrow(), false)
                {
                    // The eviction manager's admit handler: BestEffort pods under memory
                    // pressure, every pod under disk or PID pressure (critical ones pass).
                    Some(Rejection { reason: crate::eviction::rank::REASON.into(), message })
                } else {
                    admit::admit(pod, &self.room, self.used(files))
                };
                match verdict {
                    Some(r) => {
                        info!(pod = %key, reason = %r.reason, message = %r.message, "pod rejected at admission");
                        self.registry.record("Warning", &key, None, &r.reason, r.message.clone());
                        self.rejected.insert(uid, (key, r));
                        continue;
                    }
                    None => {
                        self.ledger.set(&uid, Some(crate::ledger::Held::of(pod)));
                        self.admitted.insert(uid.clone());
                    }
                }
            }
            self.sync_external_conditions(&key, pod);
            let version = pod.metadata.resource_version.clone();
            let d = match self.desired.get(&uid) {
                Some((v, d)) if *v == version => d.clone(),
                _ => {
                    let d = pods::desired(pod, &self.room.name);
                    self.desired.insert(uid, (version, d.clone()));
                    d
                }
            };
            out.pods.insert(key, d);
        }
        out
    }

    /// What admitted pods use now: finished ones no longer count (the kubelet's active pods).
    fn used(&self, files: &ManifestSet) -> Used {
        let finished: BTreeSet<String> = self
            .registry
            .pods()
            .into_iter()
            .filter(|r| is_terminal(r.pod.status.as_ref().and_then(|s| s.phase.as_deref())))
            .filter_map(|r| r.pod.metadata.uid)
            .collect();
        let api_pods = self.admitted.iter().filter(|uid| !finished.contains(*uid)).count();
        let (cpu_milli, memory) = self.ledger.active(&finished);
        Used { pods: u32::try_from(files.pods.len() + api_pods).unwrap_or(u32::MAX), cpu_milli, memory }
    }

    /// The controllers' conditions of an API pod become the pod's external conditions (its
    /// readiness gates), so Ready honours them.
    fn sync_external_conditions(&self, key: &crate::model::PodKey, pod: &Pod) {
        let foreign: Vec<PodCondition> = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|c| !NODE_OWNED.contains(&c.type_.as_str()))
            .collect();
        let current = self.registry.external_conditions(key);
        let same = |a: &PodCondition, b: &PodCondition| {
            a.type_ == b.type_ && a.status == b.status && a.reason == b.reason && a.message == b.message
        };
        let changed =
            foreign.len() != current.len() || foreign.iter().any(|f| !current.iter().any(|c| same(c, f)));
        if !changed {
            return;
        }
        for c in &current {
            if !foreign.iter().any(|f| f.type_ == c.type_) {
                self.registry.set_external_condition(key, c.clone(), true);
            }
        }
        for f in foreign {
            self.registry.set_external_condition(key, f, false);
        }
    }
}

/// Runs the merge until cancelled: every change of either source publishes a new combined set.
/// (Room freed by a finished pod matters only to pods admitted later, which come with a change.)
#[allow(clippy::too_many_arguments)]
pub async fn run(
    mut files: watch::Receiver<ManifestSet>,
    mut api: watch::Receiver<ApiPods>,
    registry: Registry,
    room: NodeRoom,
    runtime_uids: BTreeSet<String>,
    ledger: Ledger,
    out: watch::Sender<ManifestSet>,
    rejections: watch::Sender<Rejections>,
    shutting_down: watch::Receiver<bool>,
    pressure: watch::Receiver<crate::eviction::Pressure>,
    cancel: CancellationToken,
) {
    let mut m = Merger {
        registry,
        room,
        runtime_uids,
        admitted: BTreeSet::new(),
        ledger,
        rejected: BTreeMap::new(),
        collisions: BTreeSet::new(),
        desired: BTreeMap::new(),
        shutting_down,
        pressure,
    };
    // The API's part of the last merge: a change of mirror pods alone (their status, written by
    // this node) changes nothing the merge reads.
    let mut merged_api: Option<ApiInputs> = None;
    let mut files_changed = true;
    loop {
        let a = api.borrow_and_update().clone();
        let inputs = ApiInputs::of(&a);
        if files_changed || merged_api.as_ref() != Some(&inputs) {
            let f = files.borrow_and_update().clone();
            let set = m.merge(&f, &a);
            merged_api = Some(inputs);
            out.send_if_modified(|cur| {
                if *cur == set {
                    false
                } else {
                    *cur = set;
                    true
                }
            });
            rejections.send_if_modified(|cur| {
                if *cur == m.rejected {
                    false
                } else {
                    *cur = m.rejected.clone();
                    true
                }
            });
        }
        files_changed = false;
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = files.changed() => {
                if r.is_err() { return }
                files_changed = true;
            }
            r = api.changed() => if r.is_err() { return },
        }
    }
}

/// What a merge reads of the API's pods: whether the list is complete, and each pod that is not
/// a mirror pod, by UID and resourceVersion (any change of it makes a new version).
#[derive(PartialEq)]
struct ApiInputs {
    synced: bool,
    pods: Vec<(Option<String>, Option<String>)>,
}

impl ApiInputs {
    fn of(api: &ApiPods) -> Self {
        let pods = api
            .pods
            .values()
            .filter(|p| !super::mirror::is_mirror(p))
            .map(|p| (p.metadata.uid.clone(), p.metadata.resource_version.clone()))
            .collect();
        Self { synced: api.synced, pods }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A merge is redone when an API pod changes or the list completes, not when only a mirror
    /// pod (whose status this node writes) does.
    #[test]
    fn only_what_the_merge_reads_makes_new_inputs() {
        let pod = |name: &str, uid: &str, version: &str, mirror: bool| {
            let mut p = Pod::default();
            p.metadata.name = Some(name.into());
            p.metadata.uid = Some(uid.into());
            p.metadata.resource_version = Some(version.into());
            if mirror {
                p.metadata.annotations =
                    Some([(super::super::mirror::MIRROR.to_string(), "h".to_string())].into());
            }
            (pods::key_of(&p), Arc::new(p))
        };
        let view = |synced: bool, list: Vec<(crate::model::PodKey, Arc<Pod>)>| ApiPods {
            synced,
            pods: list.into_iter().collect(),
        };
        let base = ApiInputs::of(&view(true, vec![pod("a", "u1", "1", false), pod("m", "u2", "2", true)]));
        let cases = [
            (
                "a mirror pod's new version",
                vec![pod("a", "u1", "1", false), pod("m", "u2", "9", true)],
                true,
                true,
            ),
            (
                "a mirror pod more",
                vec![pod("a", "u1", "1", false), pod("m", "u2", "2", true), pod("n", "u3", "3", true)],
                true,
                true,
            ),
            (
                "an API pod's new version",
                vec![pod("a", "u1", "5", false), pod("m", "u2", "2", true)],
                true,
                false,
            ),
            (
                "an API pod of a new UID",
                vec![pod("a", "u9", "1", false), pod("m", "u2", "2", true)],
                true,
                false,
            ),
            (
                "an API pod more",
                vec![pod("a", "u1", "1", false), pod("b", "u4", "1", false), pod("m", "u2", "2", true)],
                true,
                false,
            ),
            (
                "the list not complete",
                vec![pod("a", "u1", "1", false), pod("m", "u2", "2", true)],
                false,
                false,
            ),
        ];
        for (name, list, synced, same) in cases {
            assert_eq!(ApiInputs::of(&view(synced, list)) == base, same, "{name}");
        }
    }

    /// Admission and resizes count from one ledger: a static pod's allocation, entered by its
    /// worker, leaves no room for an API pod; once the worker frees it, the next one fits; and
    /// what admission enters is what a resize of another pod must fit beside.
    /// An API pod asking for 300m of cpu.
    fn api_pod(name: &str, uid: &str) -> (crate::model::PodKey, Arc<Pod>) {
        let yaml = format!(
            "metadata: {{name: {name}, namespace: default, uid: {uid}}}\n\
             spec: {{containers: [{{name: c, image: i, resources: {{requests: {{cpu: 300m, memory: 1Mi}}}}}}]}}"
        );
        let p: Pod = serde_yaml_ng::from_str(&yaml).expect("test pod");
        (pods::key_of(&p), Arc::new(p))
    }

    fn api(list: Vec<(crate::model::PodKey, Arc<Pod>)>) -> ApiPods {
        ApiPods { synced: true, pods: list.into_iter().collect() }
    }

    /// A merger for a node of 1000m with `ledger`, shutting down as `shutting_down` says.
    fn merger(ledger: &Ledger, shutting_down: watch::Receiver<bool>) -> Merger {
        Merger {
            registry: Registry::default(),
            room: NodeRoom {
                name: "n1".into(),
                max_pods: 10,
                cpu_milli: 1000,
                memory: 1 << 30,
                ..Default::default()
            },
            runtime_uids: BTreeSet::new(),
            admitted: BTreeSet::new(),
            ledger: ledger.clone(),
            rejected: BTreeMap::new(),
            collisions: BTreeSet::new(),
            desired: BTreeMap::new(),
            shutting_down,
            pressure: watch::channel(crate::eviction::Pressure::new()).1,
        }
    }

    #[test]
    fn admission_counts_what_the_ledger_holds() {
        let ledger = Ledger::default();
        let mut m = merger(&ledger, watch::channel(false).1);
        // A static pod's worker holds 800m.
        let held = crate::ledger::Held { requests: (800, 0), qos: crate::cgroup::Qos::Burstable };
        ledger.set("static-1", Some(held));
        let files = ManifestSet::default();

        let set = m.merge(&files, &api(vec![api_pod("a", "u-a")]));
        assert!(set.pods.is_empty(), "300m beside the static pod's 800m does not fit in 1000m");
        assert_eq!(m.rejected.get("u-a").map(|(_, r)| r.reason.as_str()), Some("OutOfcpu"));

        ledger.set("static-1", None);
        let set = m.merge(&files, &api(vec![api_pod("a", "u-a"), api_pod("b", "u-b")]));
        assert_eq!(set.pods.len(), 1, "the rejected pod stays rejected; the new one fits");
        assert_eq!(ledger.others("u-z"), (300, 1 << 20), "the admitted pod is in the ledger");
        assert_eq!(ledger.others("u-b"), (0, 0));

        let set = m.merge(&files, &api(vec![]));
        assert!(set.pods.is_empty());
        assert!(ledger.is_empty(), "a pod gone from the API server leaves the ledger");
    }

    /// Graceful node shutdown: a pod that arrives once the node is shutting down is refused
    /// with the kubelet's reason; the pods admitted before keep their place (the shutdown stops
    /// them, not admission).
    #[test]
    fn pods_arriving_while_the_node_shuts_down_are_refused() {
        let ledger = Ledger::default();
        let (shutting_tx, shutting) = watch::channel(false);
        let mut m = merger(&ledger, shutting);
        let files = ManifestSet::default();
        let set = m.merge(&files, &api(vec![api_pod("a", "u-a")]));
        assert_eq!(set.pods.len(), 1, "admitted before the shutdown");

        shutting_tx.send(true).expect("receiver alive");
        let set = m.merge(&files, &api(vec![api_pod("a", "u-a"), api_pod("b", "u-b")]));
        assert_eq!(set.pods.keys().map(|k| k.name.as_str()).collect::<Vec<_>>(), ["a"]);
        let (_, r) = m.rejected.get("u-b").expect("b rejected");
        assert_eq!(r.reason, "NodeShutdown");
        assert_eq!(r.message, "Pod was rejected as the node is shutting down.");

        // A cancelled shutdown admits new pods again.
        shutting_tx.send(false).expect("receiver alive");
        let set = m.merge(&files, &api(vec![api_pod("a", "u-a"), api_pod("b", "u-b"), api_pod("c", "u-c")]));
        assert_eq!(set.pods.keys().map(|k| k.name.as_str()).collect::<Vec<_>>(), ["a", "c"]);
    }
}
