//! Defaulting: what the API server fills in, and the kubelet's static-pod fields.

use serde_json::{Value, json};

use super::{NODE, base, edited, parse_ok, pod_json, set};
use crate::model::uid::default_pull_policy;

#[test]
fn image_pull_policy_cases() {
    let cases = [
        ("busybox", "Always"),
        ("busybox:latest", "Always"),
        ("localhost:5099/busybox", "Always"),
        ("localhost:5099/busybox:latest", "Always"),
        ("localhost:5099/busybox:1.36", "IfNotPresent"),
        ("x:1.2", "IfNotPresent"),
        ("docker.io/library/nginx:1.25", "IfNotPresent"),
        ("busybox@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "IfNotPresent"),
        (
            "localhost:5099/busybox@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "IfNotPresent",
        ),
        (
            "busybox:1.36@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "IfNotPresent",
        ),
        // Upstream parses the tag even with a digest, and `latest` means Always.
        ("busybox:latest@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "Always"),
    ];
    for (image, want) in cases {
        assert_eq!(default_pull_policy(image), want, "{image}");
        let pod = parse_ok(&edited(|v| set(v, "/spec/containers/0/image", json!(image))));
        assert_eq!(
            pod_json(&pod)["spec"]["containers"][0]["imagePullPolicy"],
            json!(want),
            "{image} in a pod"
        );
    }
    let explicit = parse_ok(&edited(|v| set(v, "/spec/containers/0/imagePullPolicy", json!("Never"))));
    assert_eq!(pod_json(&explicit)["spec"]["containers"][0]["imagePullPolicy"], json!("Never"));
}

#[test]
fn pod_defaults() {
    let mut v = base();
    v["metadata"].as_object_mut().map(|m| m.remove("namespace"));
    set(
        &mut v,
        "/spec/initContainers",
        json!([{"name": "setup", "image": "busybox:1", "ports": [{"containerPort": 53, "protocol": "UDP"}]}]),
    );
    set(&mut v, "/spec/volumes/1", json!({"name": "scratch"}));
    let pod = parse_ok(&v);
    let j = pod_json(&pod);
    let cases: &[(&str, Value)] = &[
        ("/metadata/namespace", json!("default")),
        ("/spec/restartPolicy", json!("Always")),
        ("/spec/terminationGracePeriodSeconds", json!(30)),
        ("/spec/dnsPolicy", json!("ClusterFirst")),
        ("/spec/containers/0/terminationMessagePath", json!("/dev/termination-log")),
        ("/spec/containers/0/terminationMessagePolicy", json!("File")),
        ("/spec/containers/0/ports/0/protocol", json!("TCP")),
        ("/spec/initContainers/0/imagePullPolicy", json!("IfNotPresent")),
        ("/spec/initContainers/0/terminationMessagePolicy", json!("File")),
        ("/spec/initContainers/0/ports/0/protocol", json!("UDP")),
        ("/spec/volumes/0/emptyDir", json!({})),
        ("/spec/volumes/1/emptyDir", json!({})),
    ];
    for (pointer, want) in cases {
        assert_eq!(j.pointer(pointer), Some(want), "{pointer}");
    }
    assert_eq!(pod.key.namespace, "default");
    assert_eq!(pod.key.name, "web");
}

#[test]
fn container_part_defaults() {
    let pod = parse_ok(&edited(|v| {
        set(v, "/spec/containers/0/livenessProbe", json!({"httpGet": {"port": 80}}));
        set(
            v,
            "/spec/containers/0/readinessProbe",
            json!({"exec": {"command": ["true"]}, "periodSeconds": 0}),
        );
        set(v, "/spec/containers/0/lifecycle", json!({"preStop": {"httpGet": {"port": 80}}}));
        set(
            v,
            "/spec/containers/0/env",
            json!([{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]),
        );
        set(
            v,
            "/spec/containers/0/resources",
            json!({"limits": {"cpu": "1", "memory": "64Mi"}, "requests": {"cpu": "100m"}}),
        );
    }));
    let c = &pod_json(&pod)["spec"]["containers"][0];
    let probe = json!({
        "httpGet": {"port": 80, "path": "/", "scheme": "HTTP"},
        "initialDelaySeconds": 0, "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3
    });
    assert_eq!(c["livenessProbe"], probe);
    assert_eq!(c["readinessProbe"]["periodSeconds"], json!(10), "0 means unset, as in Go");
    assert_eq!(c["lifecycle"]["preStop"]["httpGet"], json!({"port": 80, "path": "/", "scheme": "HTTP"}));
    assert_eq!(c["env"][0]["valueFrom"]["fieldRef"]["apiVersion"], json!("v1"));
    assert_eq!(
        c["resources"]["requests"],
        json!({"cpu": "100m", "memory": "64Mi"}),
        "requests default to limits"
    );
}

#[test]
fn host_network_ports_default_to_host_ports() {
    let pod = parse_ok(&edited(|v| set(v, "/spec/hostNetwork", json!(true))));
    assert_eq!(pod_json(&pod)["spec"]["containers"][0]["ports"][0]["hostPort"], json!(80));
}

#[test]
fn kubelet_fields() {
    let mut v = base();
    set(&mut v, "/spec/nodeName", json!("elsewhere"));
    set(&mut v, "/status", json!({"phase": "Running"}));
    let pod = parse_ok(&v);
    let j = pod_json(&pod);
    assert_eq!(j["spec"]["nodeName"], json!(NODE), "the node name is always this node's");
    assert_eq!(j["metadata"]["uid"], json!(pod.uid));
    assert_eq!(j["metadata"]["annotations"]["kubernetes.io/config.hash"], json!(pod.uid));
    assert_eq!(j["metadata"]["annotations"]["kubernetes.io/config.source"], json!("file"));
    assert_eq!(j.get("status"), None, "a manifest's status is dropped");
    assert_eq!(pod.uid.len(), 36, "a hyphenated UUID: {}", pod.uid);
}
