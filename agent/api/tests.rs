//! The control API over a real Unix socket, plus the pure request rules.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::service::{check_condition, in_backlog};
use super::*;
use crate::model::PodKey;
use crate::proto::{
    self, GetPodRequest, ListEventsRequest, ListPodsRequest, PodRef, SetConditionRequest, VersionRequest,
};
use crate::registry::{Event, PodRecord};

fn gated_pod() -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "uid": "u-1"},
        "spec": {"containers": [{"name": "app", "image": "busybox"}],
                 "readinessGates": [{"conditionType": "example.com/lb-ready"}]},
    }))
    .expect("valid pod")
}

fn registry_with_pod() -> (Registry, PodKey) {
    let registry = Registry::default();
    let key = PodKey::new("default", "web");
    let record = PodRecord {
        pod: gated_pod(),
        manifest_file: "/etc/crilet/manifests/web.yaml".into(),
        warnings: vec!["w1".into()],
    };
    registry.put_pod(key.clone(), record);
    registry.record("Normal", &key, Some("app"), "Started", "Started container app".into());
    (registry, key)
}

fn web() -> Option<PodRef> {
    Some(PodRef { namespace: String::new(), name: "web".into() })
}

fn set(condition: &str, status: &str) -> SetConditionRequest {
    SetConditionRequest { pod: web(), r#type: condition.into(), status: status.into(), ..Default::default() }
}

#[tokio::test]
async fn serves_over_a_private_socket() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("run/crilet.sock");
    let (registry, key) = registry_with_pod();
    let cancel = CancellationToken::new();
    let runtime = RuntimeInfo {
        name: "containerd".into(),
        version: "1.6.20".into(),
        api_version: "v1".into(),
        pleg: Default::default(),
        node_name: "n1".into(),
    };
    let server = tokio::spawn(serve(path.clone(), registry.clone(), runtime, cancel.clone()));

    let mut client = loop {
        match connect(&path).await {
            Ok(c) => break c,
            Err(_) if !server.is_finished() => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(e) => panic!("server did not come up: {e}"),
        }
    };
    let mode = std::fs::metadata(&path).expect("socket exists").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "socket mode");

    let pods =
        client.list_pods(ListPodsRequest { namespace: String::new() }).await.expect("list").into_inner().pods;
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0].manifest_file, "/etc/crilet/manifests/web.yaml");
    assert_eq!(pods[0].warnings, ["w1"]);
    let pod: Pod = serde_json::from_str(&pods[0].pod_json).expect("pod JSON");
    assert_eq!(pod.metadata.name.as_deref(), Some("web"));
    let other = client.list_pods(ListPodsRequest { namespace: "kube-system".into() }).await.expect("list");
    assert!(other.into_inner().pods.is_empty());

    let got = client.get_pod(GetPodRequest { pod: web() }).await.expect("get").into_inner();
    assert_eq!(got.events.len(), 1);
    assert_eq!(
        (got.events[0].object.as_str(), got.events[0].reason.as_str()),
        ("default/web/app", "Started")
    );
    let missing = client
        .get_pod(GetPodRequest { pod: Some(PodRef { namespace: "default".into(), name: "nope".into() }) })
        .await
        .expect_err("no such pod");
    assert_eq!((missing.code(), missing.message()), (tonic::Code::NotFound, "pods \"nope\" not found"));

    client.set_condition(set("example.com/lb-ready", "True")).await.expect("gate condition accepted");
    let stored = registry.external_conditions(&key);
    assert_eq!(stored.len(), 1);
    assert_eq!((stored[0].type_.as_str(), stored[0].status.as_str()), ("example.com/lb-ready", "True"));
    assert!(stored[0].last_transition_time.is_some());
    let refused = client.set_condition(set("Ready", "True")).await.expect_err("agent-owned");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    let refused = client.set_condition(set("example.com/other", "True")).await.expect_err("not a gate");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    client.set_condition(set("example.com/lb-ready", "")).await.expect("removal accepted");
    assert!(registry.external_conditions(&key).is_empty());

    // The runtime's health travels with every pod listing and pod.
    let health = |r: Option<proto::RuntimeHealth>| r.map(|h| (h.available, h.last_error));
    let listed = client.list_pods(ListPodsRequest::default()).await.expect("list").into_inner();
    assert_eq!(health(listed.runtime), Some((true, String::new())));
    registry.runtime_unavailable("connection refused");
    let got = client.get_pod(GetPodRequest { pod: web() }).await.expect("get").into_inner();
    assert_eq!(health(got.runtime.clone()), Some((false, "connection refused".to_string())));
    assert!(got.runtime.is_some_and(|h| h.since.parse::<jiff::Timestamp>().is_ok()), "since is RFC 3339");
    assert_eq!(got.events.last().map(|e| e.reason.as_str()), Some("RuntimeUnavailable"));
    registry.runtime_available();
    let listed = client.list_pods(ListPodsRequest::default()).await.expect("list").into_inner();
    assert_eq!(health(listed.runtime), Some((true, String::new())));

    let version = client.version(VersionRequest {}).await.expect("version").into_inner();
    assert_eq!(
        (version.crilet_version.as_str(), version.runtime_name.as_str()),
        (env!("CARGO_PKG_VERSION"), "containerd")
    );

    // A watch sends the backlog, then new events; cancelling the server ends it.
    let mut watch = client
        .list_events(ListEventsRequest { pod: web(), watch: true, node: false })
        .await
        .expect("watch")
        .into_inner();
    let mut backlog = Vec::new();
    for _ in 0..3 {
        backlog.push(watch.message().await.expect("stream ok").expect("backlog event").reason);
    }
    assert_eq!(backlog, ["Started", "RuntimeUnavailable", "RuntimeAvailable"]);
    registry.record("Warning", &key, Some("app"), "Unhealthy", "Readiness probe failed".into());
    let next = watch.message().await.expect("stream ok").expect("live event");
    assert_eq!((next.r#type.as_str(), next.reason.as_str()), ("Warning", "Unhealthy"));

    // The node's events and conditions: only when asked, about Node/n1.
    registry.record_node("Warning", "EvictionThresholdMet", "Attempting to reclaim memory".into());
    let (conditions, _) = crate::eviction::conditions::pressure_conditions(
        &[crate::eviction::Condition::MemoryPressure].into_iter().collect(),
        &[],
        jiff::Timestamp::now(),
    );
    registry.set_node_conditions(conditions);
    let mut all = client
        .list_events(ListEventsRequest { pod: None, watch: true, node: true })
        .await
        .expect("list")
        .into_inner();
    let first = all.message().await.expect("stream ok").expect("the node event first");
    let got = (first.object_kind.as_str(), first.object.as_str(), first.reason.as_str(), first.count);
    assert_eq!(got, ("Node", "n1", "EvictionThresholdMet", 1));
    let mut pods_only = client
        .list_events(ListEventsRequest { pod: None, watch: false, node: false })
        .await
        .expect("list")
        .into_inner();
    while let Some(e) = pods_only.message().await.expect("stream ok") {
        assert_eq!(e.object_kind, "", "no node event unless asked: {e:?}");
    }
    registry.record_node("Warning", "EvictionThresholdMet", "Attempting to reclaim memory".into());
    let repeat = loop {
        let e = all.message().await.expect("stream ok").expect("event");
        if e.object_kind == "Node" {
            break e;
        }
    };
    assert_eq!((repeat.reason.as_str(), repeat.count), ("EvictionThresholdMet", 2), "a repeat comes live");
    let node = client.get_node(proto::GetNodeRequest {}).await.expect("get node").into_inner();
    assert_eq!(node.name, "n1");
    let conditions: Vec<(&str, &str, &str)> =
        node.conditions.iter().map(|c| (c.r#type.as_str(), c.status.as_str(), c.reason.as_str())).collect();
    assert_eq!(
        conditions,
        [
            ("MemoryPressure", "True", "KubeletHasInsufficientMemory"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID")
        ]
    );
    assert!(node.conditions.iter().all(|c| c.last_transition_time.parse::<jiff::Timestamp>().is_ok()));
    assert_eq!(
        node.events.iter().map(|e| (e.reason.as_str(), e.count)).collect::<Vec<_>>(),
        [("EvictionThresholdMet", 2)]
    );

    cancel.cancel();
    let ended =
        tokio::time::timeout(Duration::from_secs(5), watch.message()).await.expect("watch ends on shutdown");
    assert!(matches!(ended, Ok(None) | Err(_)), "{ended:?}");
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("server stops")
        .expect("server task")
        .expect("clean shutdown");
    assert!(!path.exists(), "socket removed on exit");
}

#[tokio::test]
async fn refuses_a_live_socket_and_replaces_a_stale_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("crilet.sock");
    let stale = std::os::unix::net::UnixListener::bind(&path).expect("bind");
    drop(stale); // the file stays, nobody listens: stale
    let live = tokio::net::UnixListener::bind(dir.path().join("live.sock")).expect("bind");
    let err = serve(
        dir.path().join("live.sock"),
        Registry::default(),
        RuntimeInfo::default(),
        CancellationToken::new(),
    )
    .await
    .expect_err("live socket kept");
    assert!(matches!(err, ApiError::InUse { .. }), "{err}");
    drop(live);

    let cancel = CancellationToken::new();
    cancel.cancel();
    serve(path.clone(), Registry::default(), RuntimeInfo::default(), cancel)
        .await
        .expect("stale socket replaced");
    assert!(!path.exists());
}

#[tokio::test]
async fn connect_error_names_the_socket() {
    let err = connect(std::path::Path::new("/nonexistent/crilet.sock")).await.expect_err("no agent");
    let text = err.to_string();
    assert!(text.contains("/nonexistent/crilet.sock") && text.contains("crilet run"), "{text}");
}

#[test]
fn condition_rules() {
    let key = PodKey::new("default", "web");
    let pod = gated_pod();
    let cases = [
        ("a readiness gate", Some(&pod), "example.com/lb-ready", "True", None),
        ("removal", Some(&pod), "example.com/lb-ready", "", None),
        ("agent-owned", Some(&pod), "ContainersReady", "True", Some(tonic::Code::InvalidArgument)),
        ("bad status", Some(&pod), "example.com/lb-ready", "yes", Some(tonic::Code::InvalidArgument)),
        ("empty type", Some(&pod), "", "True", Some(tonic::Code::InvalidArgument)),
        ("no such pod", None, "example.com/lb-ready", "True", Some(tonic::Code::NotFound)),
        ("not a gate", Some(&pod), "example.com/x", "True", Some(tonic::Code::FailedPrecondition)),
    ];
    for (name, pod, condition, status, want) in cases {
        let got = check_condition(&key, pod, condition, status).map_err(|e| tonic::Status::from(e).code());
        assert_eq!(got.err(), want, "{name}");
    }
    let err = check_condition(&key, Some(&pod), "example.com/x", "True").expect_err("not a gate");
    assert_eq!(
        err.to_string(),
        "pod default/web has no readiness gate for condition \"example.com/x\" (spec.readinessGates: [example.com/lb-ready])"
    );
}

#[test]
fn backlog_overlap() {
    let key = PodKey::new("default", "web");
    let at = |s: i64| jiff::Timestamp::from_second(1_700_000_000 + s).expect("valid time");
    let ev = |t, count| Event {
        time: at(t),
        first_time: at(t),
        kind: "Warning",
        reason: "BackOff".into(),
        pod: key.clone(),
        container: Some("app".into()),
        message: "Back-off restarting failed container".into(),
        count,
    };
    let backlog = [ev(10, 3)];
    assert!(in_backlog(&backlog, &ev(10, 3)), "the same event");
    assert!(in_backlog(&backlog, &ev(5, 2)), "an earlier copy of a repeat the backlog already counts");
    assert!(!in_backlog(&backlog, &ev(11, 4)), "a newer repeat");
}
