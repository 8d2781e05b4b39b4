//! Reading a `/stats/summary` answer in the stats tests (the host's and the guest's).

use serde_json::Value;

/// The pod `namespace/name` in `summary`; panics naming it and showing the summary when absent.
pub fn pod(summary: &Value, namespace: &str, name: &str) -> Value {
    summary["pods"]
        .as_array()
        .expect("pods")
        .iter()
        .find(|p| p["podRef"]["name"] == name && p["podRef"]["namespace"] == namespace)
        .unwrap_or_else(|| panic!("{namespace}/{name} is not in the summary: {summary}"))
        .clone()
}

/// The container `name` of a summary's `pod`; panics when absent.
pub fn container(pod: &Value, name: &str) -> Value {
    pod["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .find(|c| c["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {name} in {pod}"))
}
