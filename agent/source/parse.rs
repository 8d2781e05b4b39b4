//! One manifest file's text → defaulted, validated pods, without touching the filesystem.
//!
//! Per document: YAML (or JSON) → `serde_json::Value` → `apiVersion`/`kind` check → the field
//! allow-list on the raw value → the typed `Pod` (type errors carry their field path) → API
//! defaults → validation → the kubelet's own fields (node name, UID, `kubernetes.io/config.*`).
//! A bad document is reported and skipped; the others are unaffected.

use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;
use serde_json::Value;

use super::{Findings, ManifestProblem, ProblemKind, allow, defaults, pod_uid, validate};
use crate::model::{DesiredPod, PodKey, keys};

/// Parses one file's bytes into defaulted, validated pods (pure; unit-testable without a
/// filesystem). `file` names the pods' origin and picks the syntax (`.json` → JSON, else YAML).
/// Returns the valid pods and every problem found (errors, and warnings which the pods also
/// carry in [`DesiredPod::warnings`]).
pub fn parse_manifest(
    file: &Path,
    content: &str,
    node_name: &str,
) -> (Vec<DesiredPod>, Vec<ManifestProblem>) {
    let mut pods = Vec::new();
    let mut problems = Vec::new();
    for (doc, value) in documents(file, content) {
        let value = match value {
            Ok(value) => value,
            Err(reason) => {
                problems.push(ManifestProblem::doc(ProblemKind::Error, file, doc, None, reason));
                continue;
            }
        };
        if value.is_null() {
            continue; // an empty document (`---` with nothing after it)
        }
        let (pod, findings) = parse_document(&value, node_name);
        let at = |field: &str| (!field.is_empty()).then(|| field.to_string());
        for e in &findings.errors {
            problems.push(ManifestProblem::doc(
                ProblemKind::Error,
                file,
                doc,
                at(&e.field),
                e.reason.clone(),
            ));
        }
        for w in &findings.warnings {
            problems.push(ManifestProblem::doc(
                ProblemKind::Warning,
                file,
                doc,
                at(&w.field),
                w.reason.clone(),
            ));
        }
        let Some(pod) = pod else { continue };
        let key = PodKey::new(
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone().unwrap_or_default(),
        );
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let warnings = findings.warnings.iter().map(|w| w.line()).collect();
        pods.push(DesiredPod { key, uid, pod: Arc::new(pod), file: file.to_path_buf(), doc, warnings });
    }
    (pods, problems)
}

/// The documents of a file, numbered from 0 in stream order (empty ones included, as `Null`).
/// A syntax error ends the file: nothing after it can be read reliably.
fn documents(file: &Path, content: &str) -> Vec<(usize, Result<Value, String>)> {
    let is_json = file.extension().is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let mut docs = Vec::new();
    if is_json {
        for (i, value) in serde_json::Deserializer::from_str(content).into_iter::<Value>().enumerate() {
            match value {
                Ok(value) => docs.push((i, Ok(value))),
                Err(e) => {
                    docs.push((i, Err(format!("invalid JSON: {e}; the rest of the file is not read"))));
                    break;
                }
            }
        }
        return docs;
    }
    let mut last_error: Option<String> = None;
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(content).enumerate() {
        match Value::deserialize(doc) {
            Ok(value) => {
                last_error = None;
                docs.push((i, Ok(value)));
            }
            Err(e) => {
                let text = e.to_string();
                // After a syntax error the YAML stream repeats the same error for every further
                // document: stop there, and say so on the one already reported.
                if last_error.as_deref() == Some(text.as_str()) {
                    if let Some((_, Err(reason))) = docs.last_mut() {
                        reason.push_str("; the rest of the file is not read");
                    }
                    break;
                }
                docs.push((i, Err(format!("invalid YAML: {text}"))));
                last_error = Some(text);
            }
        }
    }
    docs
}

/// One non-empty document → the finished pod (when valid) and what was found.
fn parse_document(value: &Value, node_name: &str) -> (Option<Pod>, Findings) {
    let mut f = Findings::default();
    let Value::Object(map) = value else {
        f.error("", "a manifest document must be a mapping holding one Pod (apiVersion: v1, kind: Pod)");
        return (None, f);
    };
    let api_version = map.get("apiVersion");
    let kind = map.get("kind");
    if api_version.and_then(Value::as_str) != Some("v1") || kind.and_then(Value::as_str) != Some("Pod") {
        type_meta_errors(api_version, kind, &mut f);
        return (None, f);
    }
    allow::check_document(value, &mut f);
    let mut pod: Pod = match serde_path_to_error::deserialize(value) {
        Ok(pod) => pod,
        Err(e) => {
            let (field, reason) = type_error(&e);
            f.error(field, reason);
            return (None, f);
        }
    };
    defaults::apply(&mut pod);
    validate::validate_pod(&pod, &mut f);
    if !f.errors.is_empty() {
        return (None, f);
    }
    apply_kubelet_fields(&mut pod, node_name);
    (Some(pod), f)
}

fn type_meta_errors(api_version: Option<&Value>, kind: Option<&Value>, f: &mut Findings) {
    const WANT: &str = "each document must be one Pod (apiVersion: v1, kind: Pod)";
    match kind {
        None | Some(Value::Null) => f.error("kind", format!("required: {WANT}")),
        Some(Value::String(k)) if k == "Pod" => {}
        Some(Value::String(k)) if k.ends_with("List") => f.error(
            "kind",
            format!(
                "kind {k:?} is not supported: {WANT}; put each pod in its own document, separated by ---"
            ),
        ),
        Some(Value::String(k)) => f.error("kind", format!("kind {k:?} is not supported: {WANT}")),
        Some(other) => f.error("kind", format!("must be a string, not {other}: {WANT}")),
    }
    match api_version {
        None | Some(Value::Null) => f.error("apiVersion", format!("required: {WANT}")),
        Some(Value::String(v)) if v == "v1" => {}
        Some(Value::String(v)) => f.error("apiVersion", format!("apiVersion {v:?} is not supported: {WANT}")),
        Some(other) => f.error("apiVersion", format!("must be a string, not {other}: {WANT}")),
    }
}

/// A typed-decode error as (field path, reason). A missing required field is reported at the
/// field itself rather than at the object that lacks it.
fn type_error(e: &serde_path_to_error::Error<serde_json::Error>) -> (String, String) {
    let path = e.path().to_string();
    let path = if path == "." { String::new() } else { path };
    let message = e.inner().to_string();
    if let Some(field) = message.strip_prefix("missing field `").and_then(|m| m.strip_suffix('`')) {
        let field = if path.is_empty() { field.to_string() } else { format!("{path}.{field}") };
        return (field, "required".to_string());
    }
    (path, message)
}

/// What the kubelet adds to a static pod (R3.3): node name, UID, config annotations. The status
/// is the agent's to report, never the manifest's.
fn apply_kubelet_fields(pod: &mut Pod, node_name: &str) {
    pod.status = None;
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some(node_name.to_string());
    }
    let uid = pod_uid(pod);
    pod.metadata.uid = Some(uid.clone());
    let annotations = pod.metadata.annotations.get_or_insert_with(Default::default);
    annotations.insert(keys::CONFIG_HASH.to_string(), uid);
    annotations.insert(keys::CONFIG_SOURCE.to_string(), "file".to_string());
}
