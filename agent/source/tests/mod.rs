//! Tests of the manifest source, by concern. Fixtures: a healthy base pod as JSON, edited per
//! case with `set`/`remove` (JSON pointers), and helpers to parse it and look at the outcome.

use std::path::Path;

use serde_json::{Value, json};

use super::{ManifestProblem, ProblemKind, parse_manifest};
use crate::model::DesiredPod;

mod allow;
mod defaults;
mod dir;
mod parse;
mod pool;
mod read;
mod scan;
mod stop_signal;
mod uid;
mod validate;
mod validate_container;
mod validate_probe;
mod value;
mod watch;

pub(super) const NODE: &str = "node-a";

/// A healthy pod that uses a little of everything common: a port, a mount, an emptyDir.
pub(super) fn base() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "prod", "labels": {"app": "web"}},
        "spec": {
            "containers": [{
                "name": "app",
                "image": "nginx:1.25",
                "ports": [{"name": "http", "containerPort": 80}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]
            }],
            "volumes": [{"name": "data", "emptyDir": {}}]
        }
    })
}

/// Sets the value at a JSON pointer, creating the last key (or appending at index `len`).
pub(super) fn set(v: &mut Value, pointer: &str, new: Value) {
    let (parent, last) = pointer.rsplit_once('/').expect("pointer with a parent");
    match v.pointer_mut(parent).unwrap_or_else(|| panic!("no {parent}")) {
        Value::Object(map) => {
            map.insert(last.to_string(), new);
        }
        Value::Array(items) => {
            let i: usize = last.parse().expect("array index");
            if i == items.len() { items.push(new) } else { items[i] = new }
        }
        other => panic!("cannot set {last} in {other}"),
    }
}

/// Removes the value at a JSON pointer.
pub(super) fn remove(v: &mut Value, pointer: &str) {
    let (parent, last) = pointer.rsplit_once('/').expect("pointer with a parent");
    match v.pointer_mut(parent).unwrap_or_else(|| panic!("no {parent}")) {
        Value::Object(map) => {
            map.remove(last);
        }
        Value::Array(items) => {
            items.remove(last.parse::<usize>().expect("array index"));
        }
        other => panic!("cannot remove {last} from {other}"),
    }
}

/// The base pod with one edit.
pub(super) fn edited(edit: impl FnOnce(&mut Value)) -> Value {
    let mut v = base();
    edit(&mut v);
    v
}

/// Parses one pod given as JSON through the YAML path (JSON is YAML).
pub(super) fn parse_value(v: &Value) -> (Vec<DesiredPod>, Vec<ManifestProblem>) {
    parse_manifest(Path::new("/m/pod.yaml"), &v.to_string(), NODE)
}

/// Parses a pod that must be valid, and returns it.
pub(super) fn parse_ok(v: &Value) -> DesiredPod {
    let (mut pods, problems) = parse_value(v);
    let errors: Vec<String> =
        problems.iter().filter(|p| p.kind == ProblemKind::Error).map(|p| p.to_string()).collect();
    assert!(errors.is_empty(), "unexpected errors: {errors:#?}");
    assert_eq!(pods.len(), 1, "one pod expected");
    pods.remove(0)
}

/// The pod's spec as JSON, for asserting defaulted fields by pointer.
pub(super) fn pod_json(pod: &DesiredPod) -> Value {
    serde_json::to_value(&*pod.pod).expect("pod serializes")
}

/// `field: reason` of every problem of one kind.
pub(super) fn lines(problems: &[ManifestProblem], kind: ProblemKind) -> Vec<String> {
    problems
        .iter()
        .filter(|p| p.kind == kind)
        .map(|p| format!("{}: {}", p.field.as_deref().unwrap_or(""), p.reason))
        .collect()
}
