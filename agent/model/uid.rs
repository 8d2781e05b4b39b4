//! The pod UID scheme. A pod's UID is a UUID v5, under the fixed namespace [`UID_NAMESPACE`], of
//! the canonical JSON of the defaulted pod with the fields an in-place update may change blanked
//! out. So an image-only edit keeps the UID (and the pod), any other edit makes a new one, and the
//! same manifest gives the same UID after a crilet restart or upgrade. Golden tests pin the
//! values: changing anything here changes every running pod's UID, which must never happen in
//! an upgrade.
//!
//! Because the hash covers the *defaulted* pod, adding or changing a default in `defaults.rs`
//! changes UIDs too (the golden tests will say so): apply such a default after the UID is
//! computed, or blank it here.
//!
//! Compared with the upstream kubelet (R3.4): it also hashes the decoded pod, including the node
//! name (`spec.nodeName` is set before hashing, like upstream's `host:` suffix) but not the
//! manifest's path, so renaming a manifest file keeps its pod.

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;
use uuid::Uuid;

use super::keys;

/// The UUID v5 namespace of crilet pod UIDs: `Uuid::new_v5(&Uuid::NAMESPACE_URL,
/// b"https://crilet.io/pod-uid/v1")`, written out so that it can never drift.
pub const UID_NAMESPACE: Uuid = Uuid::from_u128(0xc0ed5359_1a9d_5b74_a59c_006fab80d832);

/// The pod's UID: `metadata.uid` verbatim when the manifest sets it (as upstream), else the
/// content UID described in the module docs. Takes the defaulted pod.
pub fn pod_uid(pod: &Pod) -> String {
    if let Some(uid) = pod.metadata.uid.as_deref().filter(|uid| !uid.is_empty()) {
        return uid.to_string();
    }
    let mut pod = pod.clone();
    blank_mutable_fields(&mut pod);
    let value = serde_json::to_value(&pod)
        .expect("a k8s-openapi Pod always serializes to JSON: string map keys, infallible Serialize impls");
    let mut text = String::new();
    write_canonical(&value, &mut text);
    Uuid::new_v5(&UID_NAMESPACE, text.as_bytes()).to_string()
}

/// Clears what an in-place update may change, and what the agent itself adds.
fn blank_mutable_fields(pod: &mut Pod) {
    pod.metadata.uid = None;
    if let Some(annotations) = pod.metadata.annotations.as_mut() {
        for key in [keys::CONFIG_HASH, keys::CONFIG_SOURCE, keys::CONFIG_SEEN] {
            annotations.remove(key);
        }
        if annotations.is_empty() {
            pod.metadata.annotations = None;
        }
    }
    pod.status = None;
    let Some(spec) = pod.spec.as_mut() else { return };
    spec.active_deadline_seconds = None;
    spec.termination_grace_period_seconds = None;
    spec.tolerations = None;
    spec.readiness_gates = None;
    for c in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
        // A pull policy the image's tag implies is a default, not a choice: it follows the image
        // (`:1.2` → IfNotPresent, `:latest` → Always), so it must not pin the UID either.
        let image = c.image.take().unwrap_or_default();
        if c.image_pull_policy.as_deref() == Some(default_pull_policy(&image)) {
            c.image_pull_policy = None;
        }
    }
}

/// JSON with object keys sorted at every level and no whitespace: the same bytes whatever
/// serde_json features other crates enable.
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// The API server's default `imagePullPolicy` for `image`: `Always` for `:latest` or no tag
/// (and no digest), else `IfNotPresent`. Part of the UID scheme (a defaulted policy is blanked).
pub fn default_pull_policy(image: &str) -> &'static str {
    let (name, digest) = match image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (image, None),
    };
    // A tag follows the last ':' after the last '/', so a registry port is not a tag.
    let last_part = name.rsplit('/').next().unwrap_or(name);
    let tag = last_part.split_once(':').map(|(_, tag)| tag);
    match (tag, digest) {
        (Some("latest"), _) | (None, None) => "Always",
        _ => "IfNotPresent",
    }
}
