//! `lifecycle.stopSignal` (KEP-4960) as the API server validates it, and what a valid one
//! becomes: the allow-list knows the field (no "not supported" warning), `spec.os.name` is
//! required, Linux takes the API's whole list and Windows only SIGTERM/SIGKILL.

use serde_json::json;

use super::validate::assert_refused;
use super::{base, parse_ok, set};
use crate::source::ProblemKind;

#[test]
fn stop_signal_refusals() {
    assert_refused(&[
        (
            "no spec.os.name",
            |v| set(v, "/spec/containers/0/lifecycle", json!({"stopSignal": "SIGUSR1"})),
            "spec.containers[0].lifecycle.stopSignal",
            "may not be set for containers with empty `spec.os.name`",
        ),
        (
            "not a signal of the API's list",
            |v| {
                set(v, "/spec/os", json!({"name": "linux"}));
                set(v, "/spec/containers/0/lifecycle", json!({"stopSignal": "SIGFOO"}));
            },
            "spec.containers[0].lifecycle.stopSignal",
            "unsupported value \"SIGFOO\"",
        ),
        (
            "a number is not a signal name",
            |v| {
                set(v, "/spec/os", json!({"name": "linux"}));
                set(v, "/spec/containers/0/lifecycle", json!({"stopSignal": "10"}));
            },
            "spec.containers[0].lifecycle.stopSignal",
            "unsupported value \"10\"",
        ),
        (
            "SIGRTMIN+16 is past the list",
            |v| {
                set(v, "/spec/os", json!({"name": "linux"}));
                set(v, "/spec/containers/0/lifecycle", json!({"stopSignal": "SIGRTMIN+16"}));
            },
            "spec.containers[0].lifecycle.stopSignal",
            "unsupported value",
        ),
        (
            "windows takes only SIGTERM and SIGKILL",
            |v| {
                set(v, "/spec/os", json!({"name": "windows"}));
                set(v, "/spec/containers/0/lifecycle", json!({"stopSignal": "SIGUSR1"}));
            },
            "spec.containers[0].lifecycle.stopSignal",
            "for a windows pod: supported values are \"SIGTERM\", \"SIGKILL\"",
        ),
        (
            "a sidecar's signal needs the OS too",
            |v| {
                set(
                    v,
                    "/spec/initContainers",
                    json!([{"name": "s", "image": "b:1", "restartPolicy": "Always",
                            "lifecycle": {"stopSignal": "SIGINT"}}]),
                )
            },
            "spec.initContainers[0].lifecycle.stopSignal",
            "empty `spec.os.name`",
        ),
    ]);
}

#[test]
fn valid_stop_signals_are_accepted_without_a_warning() {
    for signal in
        ["SIGTERM", "SIGUSR1", "SIGQUIT", "SIGKILL", "SIGRTMIN", "SIGRTMIN+15", "SIGRTMAX-14", "SIGRTMAX"]
    {
        let mut v = base();
        set(&mut v, "/spec/os", json!({"name": "linux"}));
        set(&mut v, "/spec/containers/0/lifecycle", json!({"stopSignal": signal}));
        let (pods, problems) = super::parse_value(&v);
        assert!(problems.iter().all(|p| p.kind != ProblemKind::Warning), "{signal}: {problems:#?}");
        assert_eq!(pods.len(), 1, "{signal}: {problems:#?}");
        let pod = parse_ok(&v);
        let spec = pod.pod.spec.as_ref().expect("spec");
        let lifecycle = spec.containers[0].lifecycle.as_ref().expect("lifecycle");
        assert_eq!(lifecycle.stop_signal.as_deref(), Some(signal));
    }
}
