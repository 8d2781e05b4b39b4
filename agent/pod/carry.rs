//! Static pods edited in place keep their UID (beyond upstream, which recreates every edited
//! static pod): a resize (KEP-1287) and a labels/annotations edit (env from metadata, Kruise's
//! semantics). A static pod's UID is a hash of its content, and resources, labels and
//! annotations are part of that content (leaving them out now would change the UID of every
//! running pod that sets them, on the upgrade to this crilet). So an edit that changes only the
//! cpu/memory of app and sidecar containers, labels and annotations (and images, which the UID
//! already leaves out) *carries* the UID of the running pod: the new content UID maps to the
//! running one. The map is rebuilt on start
//! from the spec each sandbox carries, so it survives an agent restart without a file.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::model::DesiredPod;
use crate::model::ManifestSet;
use crate::pod::resize::resizable;

/// Does `new` differ from `running` only in what changes in place: the cpu/memory of resizable
/// containers, labels, annotations and images? Both are pods as the manifest source gives them.
pub fn in_place_edit(running: &Pod, new: &Pod) -> bool {
    crate::model::uid::pod_uid(&blank(running)) == crate::model::uid::pod_uid(&blank(new))
}

fn blank(pod: &Pod) -> Pod {
    let mut p = pod.clone();
    p.metadata.uid = None;
    // Labels and annotations change in place too: a container whose env reads one that changed
    // is restarted in place (`metadata_env`).
    p.metadata.labels = None;
    p.metadata.annotations = None;
    let names: Vec<String> = resizable(&p).map(|c| c.name.clone()).collect();
    let Some(spec) = p.spec.as_mut() else { return p };
    for c in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
        if !names.contains(&c.name) {
            continue;
        }
        let Some(r) = c.resources.as_mut() else { continue };
        for list in [&mut r.requests, &mut r.limits] {
            if let Some(m) = list.as_mut() {
                m.remove("cpu");
                m.remove("memory");
                if m.is_empty() {
                    *list = None;
                }
            }
        }
        if r.requests.is_none() && r.limits.is_none() && r.claims.is_none() {
            c.resources = None;
        }
    }
    p
}

/// Content UIDs that map to the UID of the running pod they resize.
#[derive(Debug, Default)]
pub struct Carried(BTreeMap<String, String>);

impl Carried {
    pub fn insert(&mut self, content_uid: &str, live_uid: &str) {
        self.0.insert(content_uid.to_string(), live_uid.to_string());
    }

    pub fn contains(&self, content_uid: &str) -> bool {
        self.0.contains_key(content_uid)
    }

    /// Forgets the mappings to pods no longer live.
    pub fn retain_live(&mut self, live: impl Fn(&str) -> bool) {
        self.0.retain(|_, l| live(l));
    }

    /// `set` with every carried pod under its running UID.
    pub fn apply(&self, set: &ManifestSet) -> ManifestSet {
        let mut out = set.clone();
        for d in out.pods.values_mut() {
            if let Some(live) = self.0.get(&d.uid) {
                *d = with_uid(d, live);
            }
        }
        out
    }
}

/// `d` under `uid` (the pod's `metadata.uid` too).
pub fn with_uid(d: &DesiredPod, uid: &str) -> DesiredPod {
    let mut pod = (*d.pod).clone();
    pod.metadata.uid = Some(uid.to_string());
    DesiredPod { uid: uid.to_string(), pod: Arc::new(pod), ..d.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_json::from_value(serde_yaml_ng::from_str::<serde_json::Value>(yaml).expect("yaml"))
            .expect("pod")
    }

    const BASE: &str = "
metadata: {name: p, namespace: default}
spec:
  nodeName: n
  initContainers:
  - {name: init, image: busybox, resources: {limits: {cpu: 100m, memory: 32Mi}}}
  - {name: side, image: busybox, restartPolicy: Always, resources: {limits: {cpu: 100m, memory: 32Mi}}}
  containers:
  - {name: app, image: busybox, resources: {requests: {cpu: 100m, memory: 32Mi, ephemeral-storage: 1Gi}, limits: {cpu: 200m}}}
";

    #[test]
    fn only_in_place_edits_carry() {
        let base = pod(BASE);
        let cases = [
            ("same", BASE.to_string(), true),
            ("app cpu", BASE.replace("limits: {cpu: 200m}", "limits: {cpu: 300m}"), true),
            (
                "app memory request",
                BASE.replace("cpu: 100m, memory: 32Mi, ephemeral", "cpu: 100m, memory: 64Mi, ephemeral"),
                true,
            ),
            (
                "app image too",
                BASE.replace("{name: app, image: busybox", "{name: app, image: busybox:2"),
                true,
            ),
            (
                "sidecar memory",
                BASE.replace(
                    "restartPolicy: Always, resources: {limits: {cpu: 100m, memory: 32Mi}}",
                    "restartPolicy: Always, resources: {limits: {cpu: 100m, memory: 64Mi}}",
                ),
                true,
            ),
            (
                "regular init container cpu",
                BASE.replace(
                    "{name: init, image: busybox, resources: {limits: {cpu: 100m",
                    "{name: init, image: busybox, resources: {limits: {cpu: 500m",
                ),
                false,
            ),
            ("ephemeral storage", BASE.replace("ephemeral-storage: 1Gi", "ephemeral-storage: 2Gi"), false),
            (
                "a label",
                BASE.replace(
                    "{name: p, namespace: default}",
                    "{name: p, namespace: default, labels: {a: b}}",
                ),
                true,
            ),
            (
                "an annotation",
                BASE.replace(
                    "{name: p, namespace: default}",
                    "{name: p, namespace: default, annotations: {a: b}}",
                ),
                true,
            ),
            ("the namespace", BASE.replace("namespace: default}", "namespace: other}"), false),
            (
                "an env value",
                BASE.replace(
                    "{name: app, image: busybox,",
                    "{name: app, image: busybox, env: [{name: A, value: b}],",
                ),
                false,
            ),
            (
                "another container",
                BASE.replace("  containers:\n", "  containers:\n  - {name: extra, image: busybox}\n"),
                false,
            ),
        ];
        for (what, yaml, want) in cases {
            assert_eq!(in_place_edit(&base, &pod(&yaml)), want, "{what}");
        }
    }
}
