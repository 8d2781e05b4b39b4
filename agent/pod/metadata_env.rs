//! Env from pod metadata, in place (OpenKruise's semantics, served by the node for static pods):
//! a container that reads labels or annotations through `fieldRef` env
//! (`metadata.labels['k']`, `metadata.annotations['k']`) records, when it is created, a hash of
//! what it read. A static pod edit that changes only labels or annotations keeps the pod (its
//! UID is carried, see `carry.rs`), and a running container whose hash no longer matches the
//! pod's metadata counts as changed: it is restarted in place through the in-place update flow
//! (`InPlaceUpdateReady=False` until it runs again, ready), like an image change.
//!
//! The hash is Kruise's `ExtractedEnvFromMetadataHash`: FNV-1a 32 of the JSON of the name-sorted
//! `[{"name","value"}]` list. API pods never carry it: upstream does not restart a container for
//! a metadata change, and Kruise's own daemon does it there. A container created without it
//! (by an older crilet) never counts as changed by it.

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::model::ObservedContainer;

/// The container annotation that holds the hash of the metadata env it was created with.
pub const ANNOTATION: &str = "crilet.io/metadata-env-hash";

/// The env vars of `c` that read a label or an annotation, resolved against `pod`'s metadata,
/// sorted by name.
fn metadata_env(pod: &Pod, c: &Container) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = c
        .env
        .iter()
        .flatten()
        .filter_map(|e| {
            let path = &e.value_from.as_ref()?.field_ref.as_ref()?.field_path;
            let reads_metadata =
                path.starts_with("metadata.labels[") || path.starts_with("metadata.annotations[");
            reads_metadata.then(|| {
                let value = crate::volumes::projection::pod_metadata_field(pod, path).unwrap_or_default();
                (e.name.clone(), value)
            })
        })
        .collect();
    out.sort();
    out
}

/// The hash of what `c` reads from `pod`'s labels and annotations; `None` when it reads none.
pub fn hash(pod: &Pod, c: &Container) -> Option<String> {
    let env = metadata_env(pod, c);
    if env.is_empty() {
        return None;
    }
    let list: Vec<serde_json::Value> =
        env.into_iter().map(|(name, value)| serde_json::json!({"name": name, "value": value})).collect();
    let json = serde_json::Value::Array(list).to_string();
    Some(super::hash::fnv1a32(json.as_bytes()).to_string())
}

/// Was `running` created with other label or annotation values than `pod` has now?
pub fn changed(pod: &Pod, c: &Container, running: &ObservedContainer) -> bool {
    running.annotations.get(ANNOTATION).is_some_and(|had| hash(pod, c).as_deref() != Some(had.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(labels: &str) -> Pod {
        let yaml = format!(
            "metadata: {{name: p, labels: {labels}, annotations: {{note: a}}}}
spec:
  containers:
  - name: reads
    env:
    - {{name: FLAVOUR, valueFrom: {{fieldRef: {{fieldPath: \"metadata.labels['flavour']\"}}}}}}
    - {{name: NOTE, valueFrom: {{fieldRef: {{fieldPath: \"metadata.annotations['note']\"}}}}}}
    - {{name: NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
  - name: blind
    env: [{{name: X, value: y}}]
"
        );
        serde_json::from_value(serde_yaml_ng::from_str::<serde_json::Value>(&yaml).expect("yaml"))
            .expect("pod")
    }

    fn created_with(p: &Pod, c: &Container) -> ObservedContainer {
        let mut o = ObservedContainer::default();
        if let Some(h) = hash(p, c) {
            o.annotations.insert(ANNOTATION.into(), h);
        }
        o
    }

    #[test]
    fn only_a_change_of_what_a_container_reads_changes_it() {
        let before = pod("{flavour: vanilla, team: a}");
        let spec = |p: &Pod, i: usize| p.spec.as_ref().expect("spec").containers[i].clone();
        let reads = created_with(&before, &spec(&before, 0));
        let blind = created_with(&before, &spec(&before, 1));
        assert!(blind.annotations.is_empty(), "a container that reads no metadata carries no hash");
        // (what, labels after, does `reads` change)
        let cases = [
            ("same", "{flavour: vanilla, team: a}", false),
            ("another label", "{flavour: vanilla, team: b}", false),
            ("the label it reads", "{flavour: chocolate, team: a}", true),
            ("the label removed", "{team: a}", true),
        ];
        for (what, labels, want) in cases {
            let after = pod(labels);
            assert_eq!(changed(&after, &spec(&after, 0), &reads), want, "{what}");
            assert!(!changed(&after, &spec(&after, 1), &blind), "{what}: blind never changes");
        }
        // A container created by an older crilet (no hash) never counts as changed.
        let after = pod("{flavour: chocolate}");
        assert!(!changed(&after, &spec(&after, 0), &ObservedContainer::default()));
    }

    #[test]
    fn the_hash_is_kruises_fnv_of_the_sorted_list() {
        let p = pod("{flavour: vanilla}");
        let c = &p.spec.as_ref().expect("spec").containers[0];
        let json = r#"[{"name":"FLAVOUR","value":"vanilla"},{"name":"NOTE","value":"a"}]"#;
        let want = json.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
        assert_eq!(hash(&p, c), Some(want.to_string()));
    }
}
