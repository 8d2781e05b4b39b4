//! Reading `/stats/summary` and `/metrics/resource` answers in the stats tests (the host's and the guest's).

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

/// Asserts `got` is within 10 % of `want`, which `source` gave (the cgroup files, the guest's).
pub fn within(got: u64, want: u64, what: &str, source: &str) {
    let diff = got.abs_diff(want) as f64;
    assert!(diff <= want as f64 * 0.10, "{what}: {got} is not within 10 % of {source}'s {want}");
}

/// A summary field that must be a number.
pub fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// A Prometheus sample's value in `/metrics/resource`: the line starting with `series` (name
/// and labels).
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.split(' ').next()?.parse().ok())
}
