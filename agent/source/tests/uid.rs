//! The UID scheme: golden values (a crilet upgrade must never change a UID), image-only edits
//! keep the UID, any other edit changes it.

use std::path::Path;

use serde_json::{Value, json};
use uuid::Uuid;

use super::{NODE, base, edited, parse_ok, set};
use crate::source::{UID_NAMESPACE, parse_manifest, pod_uid};

type Edit = fn(&mut Value);

const GOLDEN_SIMPLE: &str = "\
apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: app
    image: nginx:1.25
";

const GOLDEN_FULL: &str = "\
apiVersion: v1
kind: Pod
metadata:
  name: edge
  namespace: infra
  labels: {app: edge}
spec:
  restartPolicy: OnFailure
  terminationGracePeriodSeconds: 10
  initContainers:
  - name: proxy
    image: localhost:5099/envoy
    restartPolicy: Always
    readinessProbe: {httpGet: {port: 9901}}
  containers:
  - name: app
    image: localhost:5099/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
    env: [{name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]
    ports: [{name: http, containerPort: 8080}]
    volumeMounts: [{name: cache, mountPath: /cache}]
    lifecycle: {preStop: {sleep: {seconds: 5}}}
  volumes:
  - name: cache
";

fn uid_of(text: &str, node: &str) -> String {
    let (pods, problems) = parse_manifest(Path::new("/m/golden.yaml"), text, node);
    assert!(problems.is_empty(), "{problems:#?}");
    pods[0].uid.clone()
}

#[test]
fn golden_uids() {
    assert_eq!(uid_of(GOLDEN_SIMPLE, NODE), "8d22bbfb-1d00-5cca-b7d1-759fe6413ac8");
    assert_eq!(uid_of(GOLDEN_FULL, NODE), "db0cf666-70ea-5242-b679-4650cfdbd596");
}

#[test]
fn namespace_constant_is_what_its_docs_say() {
    assert_eq!(UID_NAMESPACE, Uuid::new_v5(&Uuid::NAMESPACE_URL, b"https://crilet.io/pod-uid/v1"));
}

#[test]
fn uid_follows_everything_but_images() {
    let original = parse_ok(&base()).uid;
    let same: &[(&str, Edit)] = &[
        ("image edit", |v| set(v, "/spec/containers/0/image", json!("nginx:1.27"))),
        ("image to latest (the defaulted pull policy follows)", |v| {
            set(v, "/spec/containers/0/image", json!("nginx"))
        }),
        ("explicit pull policy equal to the default", |v| {
            set(v, "/spec/containers/0/imagePullPolicy", json!("IfNotPresent"))
        }),
        ("grace period", |v| set(v, "/spec/terminationGracePeriodSeconds", json!(5))),
        ("active deadline", |v| set(v, "/spec/activeDeadlineSeconds", json!(100))),
        ("tolerations", |v| set(v, "/spec/tolerations", json!([{"operator": "Exists"}]))),
        ("readiness gates", |v| set(v, "/spec/readinessGates", json!([{"conditionType": "x.io/ok"}]))),
        ("config annotations", |v| {
            set(v, "/metadata/annotations", json!({"kubernetes.io/config.hash": "x"}))
        }),
        ("node name in the manifest", |v| set(v, "/spec/nodeName", json!("other"))),
        ("key order and formatting", |v| {
            *v = serde_json::from_str(&serde_json::to_string_pretty(v).unwrap()).unwrap()
        }),
    ];
    for (name, edit) in same {
        assert_eq!(parse_ok(&edited(*edit)).uid, original, "{name} must keep the UID");
    }
    let different: &[(&str, Edit)] = &[
        ("env", |v| set(v, "/spec/containers/0/env", json!([{"name": "A", "value": "1"}]))),
        ("command", |v| set(v, "/spec/containers/0/command", json!(["nginx", "-g", "daemon off;"]))),
        ("explicit non-default pull policy", |v| {
            set(v, "/spec/containers/0/imagePullPolicy", json!("Always"))
        }),
        ("name", |v| set(v, "/metadata/name", json!("web2"))),
        ("namespace", |v| set(v, "/metadata/namespace", json!("dev"))),
        ("label", |v| set(v, "/metadata/labels/tier", json!("front"))),
        ("other annotation", |v| set(v, "/metadata/annotations", json!({"a": "b"}))),
        ("port", |v| set(v, "/spec/containers/0/ports/0/containerPort", json!(81))),
        ("restart policy", |v| set(v, "/spec/restartPolicy", json!("Never"))),
        ("container added", |v| set(v, "/spec/containers/1", json!({"name": "b", "image": "nginx:1.25"}))),
    ];
    for (name, edit) in different {
        assert_ne!(parse_ok(&edited(*edit)).uid, original, "{name} must change the UID");
    }
    let other_node = parse_manifest(Path::new("/m/pod.yaml"), &base().to_string(), "node-b").0;
    assert_ne!(other_node[0].uid, original, "the node name is part of the UID, as upstream");
    let moved = parse_manifest(Path::new("/m/renamed.yaml"), &base().to_string(), NODE).0;
    assert_eq!(moved[0].uid, original, "renaming the file keeps the pod");
}

#[test]
fn manifest_uid_is_used_verbatim() {
    let pod = parse_ok(&edited(|v| set(v, "/metadata/uid", json!("my-own-uid"))));
    assert_eq!(pod.uid, "my-own-uid");
    assert_eq!(pod_uid(&pod.pod), "my-own-uid");
    let edited_env = parse_ok(&edited(|v| {
        set(v, "/metadata/uid", json!("my-own-uid"));
        set(v, "/spec/containers/0/env", json!([{"name": "A", "value": "1"}]));
    }));
    assert_eq!(edited_env.uid, "my-own-uid");
}

#[test]
fn pod_uid_of_a_finished_pod_is_its_uid() {
    let pod = parse_ok(&base());
    assert_eq!(pod_uid(&pod.pod), pod.uid);
}
