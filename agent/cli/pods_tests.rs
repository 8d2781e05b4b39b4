use serde_json::json;

use super::*;
use crate::fixtures::{ago, now, pod, running, terminated, waiting, with_last_exit};

#[test]
fn pod_row_cases() {
    let two_inits = json!([{"name": "i1", "image": "b"}, {"name": "i2", "image": "b"}]);
    let sidecar = json!([{"name": "side", "image": "b", "restartPolicy": "Always"}]);
    let cases = [
        ("healthy: ready, running, no restarts", json!({}), ("1/1", "Running", "0", "5m")),
        (
            "crash loop: waiting reason wins, restarts show the last exit",
            json!({"status": {"containerStatuses": [with_last_exit(waiting("app", "CrashLoopBackOff", 3), 40)]}}),
            ("0/1", "CrashLoopBackOff", "3 (40s ago)", "5m"),
        ),
        (
            "image pull failure",
            json!({"status": {"phase": "Pending", "containerStatuses": [waiting("app", "ErrImagePull", 0)]}}),
            ("0/1", "ErrImagePull", "0", "5m"),
        ),
        (
            "completed",
            json!({"status": {"phase": "Succeeded", "containerStatuses": [terminated("app", Some("Completed"), 0)]}}),
            ("0/1", "Completed", "0", "5m"),
        ),
        (
            "terminated without reason: exit code",
            json!({"status": {"phase": "Failed", "containerStatuses": [terminated("app", None, 2)]}}),
            ("0/1", "ExitCode:2", "0", "5m"),
        ),
        (
            "terminated by a signal without reason",
            json!({"status": {"containerStatuses": [merge_signal(terminated("app", None, 137), 9)]}}),
            ("0/1", "Signal:9", "0", "5m"),
        ),
        (
            "not ready but running: kubectl still prints Running",
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}],
                              "containerStatuses": [running("app", false, 0)]}}),
            ("0/1", "Running", "0", "5m"),
        ),
        (
            "first init container running",
            json!({"spec": {"initContainers": two_inits},
                   "status": {"phase": "Pending", "conditions": [{"type": "Initialized", "status": "False"}],
                              "initContainerStatuses": [running("i1", false, 0), waiting("i2", "PodInitializing", 0)],
                              "containerStatuses": [waiting("app", "PodInitializing", 0)]}}),
            ("0/1", "Init:0/2", "0", "5m"),
        ),
        (
            "init container failed",
            json!({"spec": {"initContainers": two_inits},
                   "status": {"phase": "Pending", "conditions": [{"type": "Initialized", "status": "False"}],
                              "initContainerStatuses": [terminated("i1", Some("Error"), 1)],
                              "containerStatuses": [waiting("app", "PodInitializing", 0)]}}),
            ("0/1", "Init:Error", "0", "5m"),
        ),
        (
            "init container crash-looping, its restarts counted",
            json!({"spec": {"initContainers": two_inits},
                   "status": {"phase": "Pending", "conditions": [{"type": "Initialized", "status": "False"}],
                              "initContainerStatuses": [with_last_exit(waiting("i1", "CrashLoopBackOff", 2), 10)],
                              "containerStatuses": [waiting("app", "PodInitializing", 0)]}}),
            ("0/1", "Init:CrashLoopBackOff", "2 (10s ago)", "5m"),
        ),
        (
            "init done, app not started yet",
            json!({"spec": {"initContainers": two_inits},
                   "status": {"phase": "Pending",
                              "initContainerStatuses": [terminated("i1", Some("Completed"), 0),
                                                        terminated("i2", Some("Completed"), 0)],
                              "containerStatuses": [waiting("app", "PodInitializing", 0)]}}),
            ("0/1", "PodInitializing", "0", "5m"),
        ),
        (
            "sidecar counts in READY and RESTARTS",
            json!({"spec": {"initContainers": sidecar},
                   "status": {"initContainerStatuses": [with_last_exit(running("side", true, 1), 30)],
                              "containerStatuses": [running("app", true, 0)]}}),
            ("2/2", "Running", "1 (30s ago)", "5m"),
        ),
        (
            "one container completed, another still running, pod not ready",
            json!({"spec": {"containers": [{"name": "app", "image": "b"}, {"name": "job", "image": "b"}]},
                   "status": {"conditions": [{"type": "Ready", "status": "False"}],
                              "containerStatuses": [running("app", true, 0), terminated("job", Some("Completed"), 0)]}}),
            ("1/2", "NotReady", "0", "5m"),
        ),
        (
            "being deleted",
            json!({"metadata": {"deletionTimestamp": ago(3)}}),
            ("1/1", "Terminating", "0", "5m"),
        ),
        (
            "no creation time: age from startTime",
            json!({"metadata": {"creationTimestamp": null}, "status": {"startTime": ago(7200)}}),
            ("1/1", "Running", "0", "120m"),
        ),
    ];
    for (name, patch, (ready, status, restarts, age)) in cases {
        let row = pod_row(&pod(patch), now());
        assert_eq!(
            (row.ready.as_str(), row.status.as_str(), row.restarts.as_str(), row.age.as_str()),
            (ready, status, restarts, age),
            "{name}"
        );
    }
}

fn merge_signal(mut status: serde_json::Value, signal: i32) -> serde_json::Value {
    status["state"]["terminated"]["signal"] = json!(signal);
    status
}

#[test]
fn wide_columns() {
    let p =
        pod(json!({"spec": {"readinessGates": [{"conditionType": "example.com/a"}, {"conditionType": "b"}]},
                       "status": {"conditions": [{"type": "example.com/a", "status": "True"}]}}));
    let row = pod_row(&p, now());
    assert_eq!(
        (row.ip.as_str(), row.node.as_str(), row.nominated_node.as_str(), row.readiness_gates.as_str()),
        ("10.88.0.5", "node1", "<none>", "1/2")
    );
    let bare = pod_row(&pod(json!({"status": {"podIPs": null}, "spec": {"nodeName": null}})), now());
    assert_eq!(
        (bare.ip.as_str(), bare.node.as_str(), bare.readiness_gates.as_str()),
        ("<none>", "<none>", "<none>")
    );
}

#[test]
fn table_rendering() {
    let web = pod_row(&pod(json!({})), now());
    let mut db = pod_row(
        &pod(json!({"metadata": {"name": "database", "namespace": "prod"},
                    "status": {"containerStatuses": [with_last_exit(waiting("app", "CrashLoopBackOff", 12), 65)]}})),
        now(),
    );
    db.age = "2d3h".to_string();
    let rows = [web, db];
    assert_eq!(
        render_pod_table(&rows, false, false),
        "NAME       READY   STATUS             RESTARTS       AGE\n\
         web        1/1     Running            0              5m\n\
         database   0/1     CrashLoopBackOff   12 (65s ago)   2d3h\n"
    );
    assert_eq!(
        render_pod_table(&rows[..1], true, true),
        "NAMESPACE   NAME   READY   STATUS    RESTARTS   AGE   IP          NODE    NOMINATED NODE   READINESS GATES\n\
         default     web    1/1     Running   0          5m    10.88.0.5   node1   <none>           <none>\n"
    );
}

#[test]
fn runtime_warning_cases() {
    let health = |available: bool, since: i64, error: &str| RuntimeHealth {
        available,
        since: ago(since),
        last_error: error.into(),
    };
    assert_eq!(runtime_warning(None, now()), None, "an agent that does not say");
    assert_eq!(runtime_warning(Some(&health(true, 30, "")), now()), None, "available");
    let down = health(false, 12, "CRI ListPodSandbox for all pods failed: Unavailable: connection refused");
    assert_eq!(
        runtime_warning(Some(&down), now()).as_deref(),
        Some(
            "Warning: the container runtime has been unavailable for 12s: CRI ListPodSandbox for all pods \
             failed: Unavailable: connection refused; pod statuses are the last ones observed, running \
             containers are left alone and the agent retries"
        )
    );
}

#[test]
fn control_socket_lookup_order() {
    use std::path::PathBuf;

    use crate::cli::{DEFAULT_CONTROL_SOCKET, SocketArg, socket_from_config};
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("crilet.yaml");
    std::fs::write(&config, "pod-manifest-path: /etc/m\ncontrol-socket: /run/x/from-config.sock\n")
        .expect("config");
    let arg = |flag: Option<&str>, config: Option<&std::path::Path>| SocketArg {
        control_socket: flag.map(PathBuf::from),
        config: config.map(std::path::Path::to_path_buf),
    };
    // (name, flag or env, config file, want)
    let cases = [
        ("flag or env wins", arg(Some("/run/a.sock"), Some(&config)), "/run/a.sock"),
        ("then the config file", arg(None, Some(&config)), "/run/x/from-config.sock"),
        ("then the default", arg(None, None), DEFAULT_CONTROL_SOCKET),
    ];
    for (name, a, want) in cases {
        assert_eq!(a.path().expect(name), PathBuf::from(want), "{name}");
    }
    assert_eq!(socket_from_config("root-dir: /x\n"), Ok(None));
    assert!(socket_from_config("control-socket: [1, 2]").is_err());
    assert!(arg(None, Some(&dir.path().join("missing.yaml"))).path().is_err());
}
