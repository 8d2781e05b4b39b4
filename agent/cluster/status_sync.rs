//! The status writer: what the workers publish for API pods goes to `pods/status`, as the
//! kubelet's status manager does it: only on change (or when another writer changed the node's
//! part of it since), the newest status of each pod (bursts coalesce), the conditions the node owns merged by type (a controller's readiness-gate
//! condition is kept), the pod's UID as precondition, and retried until it lands.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::ClusterLink;
use super::merge::{NODE_OWNED, Rejections};
use super::pods::ApiPods;
use crate::model::PodKey;
use crate::registry::{PodRecord, Registry};

/// How soon a failed write is tried again (and at most how long a coalesced burst waits).
const RETRY: Duration = Duration::from_secs(1);
/// How long another writer's change of the node's part of a status stands before the node
/// writes its own again (the kubelet's status manager reconciles every 10 s). Not at once: the
/// change may be news the node has yet to compute with (OpenKruise closes its readiness gate
/// and writes Ready=False in one update, before the node has seen the gate).
const RECONCILE: Duration = Duration::from_secs(10);

/// The strategic-merge patch of a pod's status as the node reports it; `None` fields are left
/// out, conditions the node does not own are not sent (the API server keeps them), except a
/// `DisruptionTarget` of the node's own making (a pod stopped for the node's shutdown: the
/// kubelet's status manager writes the conditions it shares with other writers when it has one).
pub fn status_patch(uid: &str, status: &PodStatus, generation: Option<i64>) -> Value {
    let mut s = status.clone();
    if let Some(conds) = s.conditions.as_mut() {
        use crate::pod::shutdown::{DISRUPTED_BY_NODE, DISRUPTION_TARGET};
        conds.retain(|c| {
            NODE_OWNED.contains(&c.type_.as_str())
                || (c.type_ == DISRUPTION_TARGET && c.reason.as_deref() == Some(DISRUPTED_BY_NODE))
        });
        // The generation of the spec the status is about, as the kubelet reports it (pod
        // observedGeneration tracking, GA in 1.35).
        for c in conds.iter_mut() {
            c.observed_generation = generation;
        }
    }
    s.observed_generation = generation;
    // Not the node's to write (the scheduler's, and the API server's).
    s.nominated_node_name = None;
    s.resize = None;
    let mut v = serde_json::to_value(&s).unwrap_or_default();
    // Conditions merge by type: a field the node no longer sets must be sent as null, or the
    // API server keeps the old one (a Ready=True with the reason of its False).
    if let Some(conds) = v.get_mut("conditions").and_then(Value::as_array_mut) {
        for c in conds.iter_mut().filter_map(Value::as_object_mut) {
            for field in ["reason", "message"] {
                c.entry(field).or_insert(Value::Null);
            }
        }
        // The resize conditions exist only while a resize is pending or under way: one the
        // node no longer reports is deleted (a merge by type would keep it).
        for t in [crate::pod::resize::PENDING, crate::pod::resize::IN_PROGRESS] {
            if !conds.iter().any(|c| c["type"] == t) {
                conds.push(json!({ "type": t, "$patch": "delete" }));
            }
        }
    }
    if let Some(obj) = v.as_object_mut() {
        for field in ["reason", "message"] {
            obj.entry(field).or_insert(Value::Null);
        }
    }
    json!({ "metadata": { "uid": uid }, "status": v })
}

/// Does the API show, against what the node wrote, another phase or another status of a
/// condition the node owns? Another writer changed it: the node lifecycle controller marking
/// pods not ready, OpenKruise writing Ready=False when it closes its readiness gate. The
/// kubelet's status manager puts its own status back then (its reconcile with the API's copy);
/// so does crilet.
pub fn api_contradicts(api: &Pod, status: &PodStatus) -> bool {
    let Some(shown) = api.status.as_ref() else { return true };
    if status.phase.is_some() && shown.phase != status.phase {
        return true;
    }
    let conds = shown.conditions.as_deref().unwrap_or_default();
    status
        .conditions
        .iter()
        .flatten()
        .filter(|c| NODE_OWNED.contains(&c.type_.as_str()))
        .any(|c| conds.iter().find(|a| a.type_ == c.type_).is_none_or(|a| a.status != c.status))
}

/// Is the resourceVersion the API shows (`seen`) newer than the one the node's write made
/// (`ours`)? Only then is a contradiction someone else's write, not a watch that has not caught
/// up with ours yet. (etcd's revisions are numbers; anything else counts when it differs.)
pub fn newer(seen: Option<&str>, ours: Option<&str>) -> bool {
    match (seen, ours) {
        (Some(s), Some(o)) => match (s.parse::<u64>(), o.parse::<u64>()) {
            (Ok(s), Ok(o)) => s > o,
            _ => s != o,
        },
        _ => false,
    }
}

/// The patch that fails a pod refused at admission.
pub fn rejection_patch(uid: &str, reason: &str, message: &str) -> Value {
    json!({ "metadata": { "uid": uid }, "status": { "phase": "Failed", "reason": reason, "message": message } })
}

/// What the status writer wants for one pod, derived from its record and its API copy.
struct Want {
    /// The UID of the API pod the status goes to.
    target: String,
    generation: Option<i64>,
    patch: Arc<Value>,
    /// The resourceVersion the API shows when it contradicts the status.
    contradicted: Option<String>,
}

/// A pod's `Want` (none: nothing to write) and what it was derived from.
struct Derived {
    revision: u64,
    in_api: Arc<Pod>,
    want: Option<Want>,
}

/// An API pod's status goes to itself; a static pod's to its current mirror pod. `before`: what
/// the same record gave with an older API copy; its patch is reused when the copy still makes
/// the same one (a watch event of the node's own write changes only the copy's version).
fn derive(record: &PodRecord, in_api: &Pod, before: Option<&Want>) -> Option<Want> {
    let status = record.pod.status.as_ref()?;
    let uid = record.pod.metadata.uid.clone().unwrap_or_default();
    let api_pod = crate::model::PodSource::parse(&record.manifest_file).is_api();
    let target = if api_pod {
        (in_api.metadata.uid.as_deref() == Some(uid.as_str())).then(|| uid.clone())
    } else {
        let hash = in_api.metadata.annotations.as_ref().and_then(|a| a.get(super::mirror::MIRROR));
        // The mirror carries the manifest's content UID; a static pod resized or relabelled in
        // place runs on under the UID it had (`pod::carry`), and keeps the content UID as its
        // config hash.
        let config_hash =
            record.pod.metadata.annotations.as_ref().and_then(|a| a.get(crate::model::keys::CONFIG_HASH));
        (hash == Some(&uid) || (hash.is_some() && hash == config_hash))
            .then(|| in_api.metadata.uid.clone())
            .flatten()
    }?;
    // An API pod's status is about the spec crilet runs; a mirror pod's, itself.
    let generation = if api_pod { record.pod.metadata.generation } else { in_api.metadata.generation };
    let patch = match before.filter(|b| b.target == target && b.generation == generation) {
        Some(b) => b.patch.clone(),
        None => Arc::new(status_patch(&target, status, generation)),
    };
    let contradicted =
        api_contradicts(in_api, status).then(|| in_api.metadata.resource_version.clone()).flatten();
    Some(Want { target, generation, patch, contradicted })
}

/// One pod status to write in a pass.
struct Write {
    /// The pod's namespace and name.
    pod: PodKey,
    /// Derived from the pod's record (else: a rejection, not in the registry).
    from_record: bool,
    patch: Arc<Value>,
    /// The resourceVersion the API shows when it contradicts the status.
    contradicted: Option<String>,
}

impl Write {
    /// What to write when its turn comes: a pass writes one pod after another, each awaiting
    /// the API server and its client's rate limit, so a pod's record may have moved on since
    /// the pass began. Its newest status goes then (`derived` is updated with it), not the
    /// one the next pass would send right after: a burst of starts costs one write per pod
    /// and turn, not one per change. `None`: nothing to write any more.
    fn newest(
        self,
        uid: &str,
        registry: &Registry,
        derived: &mut BTreeMap<PodKey, Derived>,
    ) -> Option<Write> {
        let key = &self.pod;
        let Some(d) = derived.get_mut(key).filter(|_| self.from_record) else { return Some(self) };
        if registry.pod_revision(key) == Some(d.revision) {
            return Some(self);
        }
        // Removed meanwhile: the next pass drops it.
        let (revision, record) = registry.pod_at_revision(key)?;
        let want = derive(&record, &d.in_api, None);
        *d = Derived { revision, in_api: d.in_api.clone(), want };
        let w = d.want.as_ref().filter(|w| w.target == uid)?;
        Some(Write { patch: w.patch.clone(), contradicted: w.contradicted.clone(), ..self })
    }
}

/// Runs until cancelled.
pub async fn run(
    link: Arc<ClusterLink>,
    registry: Registry,
    mut api: watch::Receiver<ApiPods>,
    mut rejections: watch::Receiver<Rejections>,
    cancel: CancellationToken,
) {
    let mut changes = registry.pod_changes();
    // The last patch that landed, by pod UID, with the resourceVersion it made.
    let mut sent: BTreeMap<String, (Arc<Value>, Option<String>)> = BTreeMap::new();
    // Since when the API has contradicted the node's last write, by pod UID.
    let mut contradicted_since: BTreeMap<String, tokio::time::Instant> = BTreeMap::new();
    // What each pod's record and API copy gave at the last pass.
    let mut derived_before: BTreeMap<PodKey, Derived> = BTreeMap::new();
    let mut retry;
    let mut reconcile_at: Option<tokio::time::Instant>;
    loop {
        let current = api.borrow_and_update().clone();
        // By target UID.
        let mut wanted: BTreeMap<String, Write> = BTreeMap::new();
        let mut derived = BTreeMap::new();
        for (key, revision) in registry.pod_revisions() {
            let Some(in_api) = current.pods.get(&key) else { continue };
            // Derived again only when the pod's record or its API copy changed: a burst of
            // starts changes a few pods at a time, not all of them.
            let d = match derived_before.remove(&key) {
                Some(d) if d.revision == revision && Arc::ptr_eq(&d.in_api, in_api) => d,
                before => {
                    let Some((revision, record)) = registry.pod_at_revision(&key) else { continue };
                    let same_record =
                        before.as_ref().filter(|b| b.revision == revision).and_then(|b| b.want.as_ref());
                    Derived { revision, in_api: in_api.clone(), want: derive(&record, in_api, same_record) }
                }
            };
            if let Some(w) = d.want.as_ref() {
                wanted.insert(
                    w.target.clone(),
                    Write {
                        pod: key.clone(),
                        from_record: true,
                        patch: w.patch.clone(),
                        contradicted: w.contradicted.clone(),
                    },
                );
            }
            derived.insert(key, d);
        }
        derived_before = derived;
        for (uid, (key, r)) in rejections.borrow_and_update().iter() {
            wanted.insert(
                uid.clone(),
                Write {
                    pod: key.clone(),
                    from_record: false,
                    patch: Arc::new(rejection_patch(uid, &r.reason, &r.message)),
                    contradicted: None,
                },
            );
        }
        sent.retain(|uid, _| wanted.contains_key(uid));
        contradicted_since.retain(|uid, _| wanted.contains_key(uid));
        retry = false;
        reconcile_at = None;
        for (uid, write) in wanted {
            let Some(Write { pod, patch, contradicted, .. }) =
                write.newest(&uid, &registry, &mut derived_before)
            else {
                continue;
            };
            let (ns, name) = (&pod.namespace, &pod.name);
            if let Some((_, ours)) =
                sent.get(&uid).filter(|(last, _)| Arc::ptr_eq(last, &patch) || last == &patch)
            {
                if !newer(contradicted.as_deref(), ours.as_deref()) {
                    contradicted_since.remove(&uid);
                    continue;
                }
                let since = *contradicted_since.entry(uid.clone()).or_insert_with(tokio::time::Instant::now);
                if since.elapsed() < RECONCILE {
                    let at = since + RECONCILE;
                    reconcile_at = Some(reconcile_at.map_or(at, |r| r.min(at)));
                    continue;
                }
                debug!(pod = %format!("{ns}/{name}"), "another writer changed the node's part of the pod status; writing it again");
            }
            contradicted_since.remove(&uid);
            let pods: Api<Pod> = Api::namespaced(link.client.clone(), ns);
            match pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(&*patch)).await {
                Ok(written) => {
                    debug!(pod = %format!("{ns}/{name}"), "pod status written");
                    link.api_ok();
                    sent.insert(uid, (patch, written.metadata.resource_version));
                }
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                    // Gone, or another pod of that name now: nothing to write any more.
                    debug!(pod = %format!("{ns}/{name}"), code = s.code, "pod status not written: the pod is gone");
                    sent.insert(uid, (patch, None));
                }
                Err(e) => {
                    warn!(pod = %format!("{ns}/{name}"), error = %e, "writing pod status failed; retrying");
                    link.api_failed(&e.to_string());
                    retry = true;
                    break;
                }
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = changes.changed() => if r.is_err() { return },
            r = rejections.changed() => if r.is_err() { return },
            // A pod (or a new mirror pod) the API did not have before may need its status.
            r = api.changed() => if r.is_err() { return },
            _ = tokio::time::sleep(RETRY), if retry => {}
            _ = tokio::time::sleep_until(reconcile_at.unwrap_or_else(tokio::time::Instant::now)), if reconcile_at.is_some() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition};

    use super::*;

    fn cond(t: &str, s: &str) -> PodCondition {
        PodCondition { type_: t.into(), status: s.into(), ..Default::default() }
    }

    fn status(phase: &str, conds: &[(&str, &str)]) -> PodStatus {
        PodStatus {
            phase: Some(phase.into()),
            conditions: Some(conds.iter().map(|(t, s)| cond(t, s)).collect()),
            ..Default::default()
        }
    }

    #[test]
    fn contradictions() {
        let ours = status("Running", &[("Ready", "True"), ("ContainersReady", "True")]);
        let api = |s: PodStatus| Pod { status: Some(s), ..Default::default() };
        let cases = [
            ("the same", api(ours.clone()), false),
            (
                "a controller's condition besides: not the node's business",
                api(status(
                    "Running",
                    &[("Ready", "True"), ("ContainersReady", "True"), ("InPlaceUpdateReady", "False")],
                )),
                false,
            ),
            (
                "Ready=False written by another (OpenKruise, the node lifecycle controller)",
                api(status("Running", &[("Ready", "False"), ("ContainersReady", "True")])),
                true,
            ),
            ("a condition of the node's missing", api(status("Running", &[("Ready", "True")])), true),
            (
                "another phase",
                api(status("Pending", &[("Ready", "True"), ("ContainersReady", "True")])),
                true,
            ),
            ("no status at all", Pod::default(), true),
        ];
        for (name, pod, want) in cases {
            assert_eq!(api_contradicts(&pod, &ours), want, "{name}");
        }
    }

    /// The patch sends the conditions the node owns, and a DisruptionTarget only when the node
    /// made it (its shutdown); a controller's condition or an eviction's stays the API's.
    #[test]
    fn the_patch_sends_the_nodes_conditions_only() {
        let with = |extra: PodCondition| {
            let mut s = status("Failed", &[("Ready", "False")]);
            s.conditions.as_mut().expect("conditions").push(extra);
            s
        };
        let disruption =
            |reason: &str| PodCondition { reason: Some(reason.into()), ..cond("DisruptionTarget", "True") };
        let cases = [
            (
                "the node's shutdown",
                with(disruption("TerminationByKubelet")),
                vec!["Ready", "DisruptionTarget"],
            ),
            ("an eviction's", with(disruption("EvictionByEvictionAPI")), vec!["Ready"]),
            ("a readiness gate's", with(cond("InPlaceUpdateReady", "False")), vec!["Ready"]),
        ];
        for (name, s, want) in cases {
            let patch = status_patch("u", &s, None);
            let sent: Vec<&str> = patch["status"]["conditions"]
                .as_array()
                .expect("conditions")
                .iter()
                .filter(|c| c["$patch"].is_null())
                .filter_map(|c| c["type"].as_str())
                .collect();
            assert_eq!(sent, want, "{name}");
        }
    }

    /// The status goes to the mirror pod that stands for this version of the static pod, or to
    /// the API pod of the same UID; a new API copy of the same record keeps the same patch
    /// (no new JSON, no deep comparison with what was sent) unless the mirror's generation moved.
    #[test]
    fn derived_targets_and_reused_patches() {
        let record = |uid: &str, file: &str| {
            let mut pod = Pod::default();
            pod.metadata.uid = Some(uid.into());
            pod.status = Some(status("Running", &[("Ready", "True")]));
            PodRecord { pod, manifest_file: file.into(), warnings: Vec::new() }
        };
        let in_api = |uid: &str, mirror_of: Option<&str>, version: &str, generation: i64| {
            let mut pod = Pod::default();
            pod.metadata.uid = Some(uid.into());
            pod.metadata.resource_version = Some(version.into());
            pod.metadata.generation = Some(generation);
            pod.metadata.annotations =
                mirror_of.map(|h| [(crate::cluster::mirror::MIRROR.to_string(), h.to_string())].into());
            pod.status = Some(status("Running", &[("Ready", "True")]));
            pod
        };
        let static_pod = record("content-1", "/etc/kubernetes/manifests/web.yaml");
        let api_pod = record("api-1", &format!("{}n1/default/web", crate::model::PodSource::API_PREFIX));

        let first = derive(&static_pod, &in_api("mirror-1", Some("content-1"), "10", 1), None).unwrap();
        assert_eq!(first.target, "mirror-1");
        assert_eq!(first.patch["metadata"]["uid"], "mirror-1");
        assert_eq!(first.contradicted, None, "the API shows what the node wrote");

        let echo =
            derive(&static_pod, &in_api("mirror-1", Some("content-1"), "11", 1), Some(&first)).unwrap();
        assert!(Arc::ptr_eq(&echo.patch, &first.patch), "a new version of the same mirror: the same patch");

        let regenerated =
            derive(&static_pod, &in_api("mirror-1", Some("content-1"), "12", 2), Some(&first)).unwrap();
        assert!(!Arc::ptr_eq(&regenerated.patch, &first.patch));
        assert_eq!(regenerated.patch["status"]["observedGeneration"], 2);

        let replaced =
            derive(&static_pod, &in_api("mirror-2", Some("content-1"), "13", 1), Some(&first)).unwrap();
        assert_eq!(replaced.patch["metadata"]["uid"], "mirror-2", "a new mirror pod gets its own patch");

        assert!(
            derive(&static_pod, &in_api("mirror-3", Some("content-0"), "14", 1), None).is_none(),
            "a mirror of another version of the static pod"
        );
        assert_eq!(derive(&api_pod, &in_api("api-1", None, "20", 3), None).unwrap().target, "api-1");
        assert!(
            derive(&api_pod, &in_api("api-2", None, "21", 1), None).is_none(),
            "another pod of that name"
        );

        let mut not_ready = in_api("mirror-1", Some("content-1"), "30", 1);
        not_ready.status = Some(status("Running", &[("Ready", "False")]));
        let contradicted = derive(&static_pod, &not_ready, Some(&first)).unwrap();
        assert_eq!(contradicted.contradicted.as_deref(), Some("30"), "another writer's Ready=False");
    }

    #[test]
    fn newer_versions() {
        assert!(newer(Some("120"), Some("100")), "a write after ours");
        assert!(!newer(Some("90"), Some("100")), "a watch behind our write");
        assert!(!newer(Some("100"), Some("100")), "our own write");
        assert!(!newer(None, Some("100")), "no contradiction");
        assert!(!newer(Some("120"), None), "a pod that was gone when we wrote");
        assert!(newer(Some("b"), Some("a")), "not numbers: any other version");
    }

    /// KEP-4960: the effective stop signal goes to the API server with the container status
    /// (it keeps it only when its ContainerStopSignals gate is on, alpha in 1.36); a container
    /// whose runtime reports none sends none.
    #[test]
    fn the_status_patch_carries_the_stop_signal() {
        let status = PodStatus {
            container_statuses: Some(vec![
                ContainerStatus {
                    name: "a".into(),
                    stop_signal: Some("SIGUSR1".into()),
                    ..Default::default()
                },
                ContainerStatus { name: "b".into(), ..Default::default() },
            ]),
            ..Default::default()
        };
        let patch = status_patch("u1", &status, Some(3));
        assert_eq!(patch["status"]["observedGeneration"], 3, "{patch:#}");
        let cs = &patch["status"]["containerStatuses"];
        assert_eq!(cs[0]["stopSignal"], "SIGUSR1", "{patch:#}");
        assert!(cs[1].get("stopSignal").is_none(), "{patch:#}");
    }
}
