//! Probe and lifecycle-hook validation cases.

use serde_json::{Value, json};

use super::set;
use super::validate::assert_refused;

fn init(v: &mut Value) {
    set(v, "/spec/initContainers", json!([{"name": "setup", "image": "busybox:1"}]));
}

#[test]
fn probe_and_hook_cases() {
    // probes and lifecycle hooks
    assert_refused(&[
        (
            "probe without handler",
            |v| set(v, "/spec/containers/0/livenessProbe", json!({"periodSeconds": 5})),
            "spec.containers[0].livenessProbe",
            "must specify a handler type",
        ),
        (
            "probe with two handlers",
            |v| {
                set(
                    v,
                    "/spec/containers/0/readinessProbe",
                    json!({"exec": {"command": ["true"]}, "tcpSocket": {"port": 80}}),
                )
            },
            "spec.containers[0].readinessProbe",
            "more than 1 handler type",
        ),
        (
            "liveness successThreshold",
            |v| {
                set(
                    v,
                    "/spec/containers/0/livenessProbe",
                    json!({"tcpSocket": {"port": 80}, "successThreshold": 2}),
                )
            },
            "spec.containers[0].livenessProbe.successThreshold",
            "must be 1",
        ),
        (
            "startup successThreshold",
            |v| {
                set(
                    v,
                    "/spec/containers/0/startupProbe",
                    json!({"tcpSocket": {"port": "http"}, "successThreshold": 3}),
                )
            },
            "spec.containers[0].startupProbe.successThreshold",
            "must be 1",
        ),
        (
            "negative probe period",
            |v| {
                set(
                    v,
                    "/spec/containers/0/readinessProbe",
                    json!({"tcpSocket": {"port": 80}, "periodSeconds": -1}),
                )
            },
            "spec.containers[0].readinessProbe.periodSeconds",
            "greater than or equal to 0",
        ),
        (
            "readiness probe grace",
            |v| {
                set(
                    v,
                    "/spec/containers/0/readinessProbe",
                    json!({"tcpSocket": {"port": 80}, "terminationGracePeriodSeconds": 5}),
                )
            },
            "spec.containers[0].readinessProbe.terminationGracePeriodSeconds",
            "must not be set",
        ),
        (
            "probe on a regular init container",
            |v| {
                init(v);
                set(v, "/spec/initContainers/0/readinessProbe", json!({"exec": {"command": ["true"]}}));
            },
            "spec.initContainers[0].readinessProbe",
            "without restartPolicy: Always",
        ),
        (
            "exec without command",
            |v| set(v, "/spec/containers/0/livenessProbe", json!({"exec": {}})),
            "spec.containers[0].livenessProbe.exec.command",
            "required",
        ),
        (
            "httpGet port 0",
            |v| set(v, "/spec/containers/0/livenessProbe", json!({"httpGet": {"port": 0}})),
            "spec.containers[0].livenessProbe.httpGet.port",
            "between 1 and 65535",
        ),
        (
            "httpGet port name",
            |v| set(v, "/spec/containers/0/livenessProbe", json!({"httpGet": {"port": "Web_Port"}})),
            "spec.containers[0].livenessProbe.httpGet.port",
            "IANA service name",
        ),
        (
            "httpGet scheme",
            |v| set(v, "/spec/containers/0/livenessProbe", json!({"httpGet": {"port": 80, "scheme": "FTP"}})),
            "spec.containers[0].livenessProbe.httpGet.scheme",
            "unsupported value \"FTP\"",
        ),
        (
            "http header name",
            |v| {
                set(
                    v,
                    "/spec/containers/0/livenessProbe",
                    json!({"httpGet": {"port": 80, "httpHeaders": [{"name": "a b", "value": "x"}]}}),
                )
            },
            "spec.containers[0].livenessProbe.httpGet.httpHeaders[0].name",
            "HTTP header name",
        ),
        (
            "grpc port",
            |v| set(v, "/spec/containers/0/livenessProbe", json!({"grpc": {"port": 0}})),
            "spec.containers[0].livenessProbe.grpc.port",
            "between 1 and 65535",
        ),
        (
            "lifecycle on a regular init container",
            |v| {
                init(v);
                set(v, "/spec/initContainers/0/lifecycle", json!({"preStop": {"sleep": {"seconds": 1}}}));
            },
            "spec.initContainers[0].lifecycle",
            "without restartPolicy: Always",
        ),
        (
            "hook without handler",
            |v| set(v, "/spec/containers/0/lifecycle", json!({"postStart": {}})),
            "spec.containers[0].lifecycle.postStart",
            "must specify a handler type",
        ),
        (
            "hook with two handlers",
            |v| {
                set(
                    v,
                    "/spec/containers/0/lifecycle",
                    json!({"preStop": {"exec": {"command": ["x"]}, "sleep": {"seconds": 1}}}),
                )
            },
            "spec.containers[0].lifecycle.preStop",
            "more than 1 handler type",
        ),
        (
            "tcpSocket hook",
            |v| set(v, "/spec/containers/0/lifecycle", json!({"preStop": {"tcpSocket": {"port": 80}}})),
            "spec.containers[0].lifecycle.preStop.tcpSocket",
            "deprecated",
        ),
        (
            "sleep beyond the grace period",
            |v| set(v, "/spec/containers/0/lifecycle", json!({"preStop": {"sleep": {"seconds": 31}}})),
            "spec.containers[0].lifecycle.preStop.sleep.seconds",
            "between 0 and terminationGracePeriodSeconds (30)",
        ),
    ]);
}
