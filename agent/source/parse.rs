//! One manifest file's text → defaulted, validated pods, without touching the filesystem.
//!
//! First the whole text is checked against the bounds (`scan`: control characters, nesting
//! depth, token count) before any parser sees it. Then per document: YAML (or JSON) →
//! `serde_json::Value` within the file's budget (`value`: depth, values and bytes after alias
//! expansion, duplicate keys) → `apiVersion`/`kind` check → the field allow-list on the raw value
//! → the typed `Pod` (type errors carry their field path) → API defaults → validation → the
//! kubelet's own fields (node name, UID, `kubernetes.io/config.*`). A bad document is reported
//! and skipped; the others are unaffected. A file reports at most
//! [`MAX_PROBLEMS_PER_FILE`] problems, plus one line counting the rest.

use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde::de::IgnoredAny;
use serde_json::Value;

use super::limits::{MAX_PROBLEMS_PER_FILE, MAX_QUOTED, MAX_REASON, cut, quoted};
use super::value::{Budget, Failure};
use super::{Findings, ManifestProblem, ProblemKind, allow, defaults, pod_uid, scan, validate};
use crate::model::{DesiredPod, PodKey, PodSource, keys};

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
            Err(DocError { field, reason }) => {
                problems.push(ManifestProblem::doc(ProblemKind::Error, file, doc, field, reason));
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
        pods.push(DesiredPod {
            key,
            uid,
            pod: Arc::new(pod),
            source: PodSource::File(file.to_path_buf()),
            doc,
            warnings,
        });
    }
    (pods, capped(file, problems))
}

/// At most [`MAX_PROBLEMS_PER_FILE`] problems of at most [`MAX_REASON`] characters, then one
/// line saying how many more there are (an error if any of those is one), so a file cannot flood
/// the log.
fn capped(file: &Path, mut problems: Vec<ManifestProblem>) -> Vec<ManifestProblem> {
    for p in &mut problems {
        if p.reason.len() > MAX_REASON {
            p.reason = cut(&p.reason, MAX_REASON);
        }
        if let Some(field) = p.field.as_mut().filter(|f| f.len() > MAX_REASON) {
            *field = cut(field, MAX_REASON);
        }
    }
    if problems.len() <= MAX_PROBLEMS_PER_FILE {
        return problems;
    }
    let rest = problems.split_off(MAX_PROBLEMS_PER_FILE);
    let kind = rest.iter().map(|p| p.kind).min().unwrap_or(ProblemKind::Error);
    let reason = format!("{} more problems in this file are not shown; fix the ones above first", rest.len());
    problems.push(ManifestProblem::file(kind, file, reason));
    problems
}

/// Why a document has no value: the field (when known) and the reason.
struct DocError {
    field: Option<String>,
    reason: String,
}

impl DocError {
    fn syntax(reason: String) -> Self {
        Self { field: None, reason }
    }
}

/// The documents of a file, numbered from 0 in stream order (empty ones included, as `Null`).
/// A syntax error ends the file: nothing after it can be read reliably. A text that crosses
/// the bounds (see `scan`) is read up to the document where it does, which is refused with the
/// line and column.
fn documents(file: &Path, content: &str) -> Vec<(usize, Result<Value, DocError>)> {
    let is_json = file.extension().is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let checked = if is_json { scan::check_json(content) } else { scan::check_yaml(content) };
    let Err(refusal) = checked else { return parse_documents(is_json, content) };
    let prefix = content.get(..refusal.doc_start).unwrap_or("");
    let mut docs = if prefix.trim().is_empty() { Vec::new() } else { parse_documents(is_json, prefix) };
    let stopped = docs.last().is_some_and(|(_, d)| {
        d.as_ref().is_err_and(|e| e.reason.ends_with("the rest of the file is not read"))
    });
    if !stopped {
        // The prefix ends where the refused document begins; YAML may count one more, empty,
        // document there.
        docs.retain(|(i, d)| *i < refusal.doc || d.as_ref().is_err());
        let reason = format!("{refusal}; refusing it, and the rest of the file is not read");
        docs.push((refusal.doc, Err(DocError::syntax(reason))));
    }
    docs
}

fn parse_documents(is_json: bool, content: &str) -> Vec<(usize, Result<Value, DocError>)> {
    let mut budget = Budget::default();
    let mut docs = Vec::new();
    if is_json {
        // Syntax first, over the whole text (so errors carry the file's line and column), then
        // each value again from its own slice, within the budget.
        let mut stream = serde_json::Deserializer::from_str(content).into_iter::<IgnoredAny>();
        let mut start = 0;
        for i in 0.. {
            match stream.next() {
                None => break,
                Some(Err(e)) => {
                    let reason = format!("invalid JSON: {e}; the rest of the file is not read");
                    docs.push((i, Err(DocError::syntax(reason))));
                    break;
                }
                Some(Ok(_)) => {
                    let end = stream.byte_offset();
                    let slice = content.get(start..end).unwrap_or("");
                    start = end;
                    match budget.value(&mut serde_json::Deserializer::from_str(slice)) {
                        Ok(value) => docs.push((i, Ok(value))),
                        Err(Failure::Refused(r)) => {
                            let fatal = r.exhausted;
                            docs.push((i, Err(refused(r, fatal))));
                            if fatal {
                                break;
                            }
                        }
                        Err(Failure::Syntax(e)) => {
                            docs.push((i, Err(DocError::syntax(format!("invalid JSON: {e}")))))
                        }
                    }
                }
            }
        }
        return docs;
    }
    let mut last_error: Option<String> = None;
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(content).enumerate() {
        match budget.value(doc) {
            Ok(value) => {
                last_error = None;
                docs.push((i, Ok(value)));
            }
            Err(Failure::Refused(r)) => {
                let fatal = r.exhausted;
                docs.push((i, Err(refused(r, fatal))));
                if fatal {
                    break; // every further document would be refused for the same reason
                }
                last_error = None;
            }
            Err(Failure::Syntax(e)) => {
                let text = e.to_string();
                // After a syntax error the YAML stream repeats the same error for every further
                // document: stop there, and say so on the one already reported.
                if last_error.as_deref() == Some(text.as_str()) {
                    if let Some((_, Err(error))) = docs.last_mut() {
                        error.reason.push_str("; the rest of the file is not read");
                    }
                    break;
                }
                docs.push((i, Err(DocError::syntax(yaml_error(&text)))));
                last_error = Some(text);
            }
        }
    }
    docs
}

/// A YAML error as a reason. serde_yaml_ng has no public error kinds, so its alias-repetition
/// guard is recognized by its text, only to explain it.
fn yaml_error(text: &str) -> String {
    if text.starts_with("repetition limit exceeded") {
        return format!(
            "invalid YAML: {text}: its aliases expand to far more than the document holds (an alias \
             bomb?); refusing it"
        );
    }
    format!("invalid YAML: {text}")
}

/// A bound crossed while building a value, as a document error.
fn refused(r: super::value::Refused, last: bool) -> DocError {
    let reason = if last { format!("{}; the rest of the file is not read", r.reason) } else { r.reason };
    DocError { field: (!r.field.is_empty()).then_some(r.field), reason }
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
                "kind {} is not supported: {WANT}; put each pod in its own document, separated by ---",
                quoted(k)
            ),
        ),
        Some(Value::String(k)) => f.error("kind", format!("kind {} is not supported: {WANT}", quoted(k))),
        Some(other) => {
            f.error("kind", format!("must be a string, not {}: {WANT}", cut(&other.to_string(), MAX_QUOTED)))
        }
    }
    match api_version {
        None | Some(Value::Null) => f.error("apiVersion", format!("required: {WANT}")),
        Some(Value::String(v)) if v == "v1" => {}
        Some(Value::String(v)) => {
            f.error("apiVersion", format!("apiVersion {} is not supported: {WANT}", quoted(v)))
        }
        Some(other) => f.error(
            "apiVersion",
            format!("must be a string, not {}: {WANT}", cut(&other.to_string(), MAX_QUOTED)),
        ),
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
