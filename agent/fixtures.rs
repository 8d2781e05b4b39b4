//! Test fixtures of served pods (the CLI printers, `crilet logs` and the kubelet API): a healthy
//! base pod built from JSON (the shape the agent serves), plus container-status builders, so each
//! table case shows only how it differs.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

/// The fixed "now" of every printer test.
pub(crate) fn now() -> Timestamp {
    "2024-05-06T12:00:00Z".parse().expect("valid fixture time")
}

/// RFC 3339 time `secs` seconds before [`now`].
pub(crate) fn ago(secs: i64) -> String {
    (now() - SignedDuration::from_secs(secs)).to_string()
}

/// A running, ready single-container pod `web` in `default`, created 5 minutes ago.
pub(crate) fn base() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "uid": "u-1", "creationTimestamp": ago(300)},
        "spec": {"containers": [{"name": "app", "image": "busybox"}], "nodeName": "node1"},
        "status": {
            "phase": "Running",
            "podIP": "10.88.0.5",
            "podIPs": [{"ip": "10.88.0.5"}],
            "startTime": ago(300),
            "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "Ready", "status": "True"},
            ],
            "containerStatuses": [running("app", true, 0)],
        }
    })
}

/// Applies `patch` to `base` like a JSON merge patch (objects merge, everything else replaces).
pub(crate) fn merge(mut base: Value, patch: Value) -> Value {
    fn go(dst: &mut Value, patch: Value) {
        match (dst, patch) {
            (Value::Object(d), Value::Object(p)) => {
                for (k, v) in p {
                    if v.is_null() {
                        d.remove(&k);
                    } else {
                        go(d.entry(k).or_insert(Value::Null), v);
                    }
                }
            }
            (d, p) => *d = p,
        }
    }
    go(&mut base, patch);
    base
}

/// The base pod with `patch` merged in, as the typed Pod.
pub(crate) fn pod(patch: Value) -> Pod {
    serde_json::from_value(merge(base(), patch)).expect("fixture is a valid Pod")
}

pub(crate) fn running(name: &str, ready: bool, restarts: i32) -> Value {
    json!({
        "name": name, "ready": ready, "restartCount": restarts, "started": true,
        "image": "docker.io/library/busybox:latest", "imageID": "docker.io/library/busybox@sha256:abc",
        "containerID": format!("containerd://{name}-id"),
        "state": {"running": {"startedAt": ago(120)}},
    })
}

pub(crate) fn waiting(name: &str, reason: &str, restarts: i32) -> Value {
    json!({
        "name": name, "ready": false, "restartCount": restarts, "started": false,
        "image": "busybox", "imageID": "",
        "state": {"waiting": {"reason": reason}},
    })
}

pub(crate) fn terminated(name: &str, reason: Option<&str>, exit_code: i32) -> Value {
    let mut t = json!({"exitCode": exit_code, "startedAt": ago(100), "finishedAt": ago(60)});
    if let Some(r) = reason {
        t["reason"] = json!(r);
    }
    json!({
        "name": name, "ready": false, "restartCount": 0, "started": false,
        "image": "busybox", "imageID": "", "containerID": format!("containerd://{name}-id"),
        "state": {"terminated": t},
    })
}

/// `status` with a last termination that finished `secs` ago.
pub(crate) fn with_last_exit(mut status: Value, secs: i64) -> Value {
    status["lastState"] = json!({"terminated": {"exitCode": 1, "reason": "Error", "startedAt": ago(secs + 5), "finishedAt": ago(secs)}});
    status
}
