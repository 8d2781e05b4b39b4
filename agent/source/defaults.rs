//! API-server defaulting (`pkg/apis/core/v1/defaults.go`) for the fields crilet relies on, so
//! every later stage sees the pod as `kubectl get -o yaml` would show it. An empty string or a
//! zero counts as unset, as with Go's zero values. Kubelet-applied fields (node name, UID,
//! `kubernetes.io/config.*`) are set later, in `parse`, once the pod is valid.

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, HTTPGetAction, LifecycleHandler, Pod, PodSpec, Probe, Volume,
};

use crate::model::uid::default_pull_policy;

/// The namespace of a pod whose manifest names none.
pub(super) const DEFAULT_NAMESPACE: &str = "default";
/// `terminationGracePeriodSeconds` when unset (R12.9).
pub(super) const DEFAULT_GRACE_SECONDS: i64 = 30;

/// Applies the defaults in place.
pub(super) fn apply(pod: &mut Pod) {
    set_if_empty(&mut pod.metadata.namespace, DEFAULT_NAMESPACE);
    let Some(spec) = pod.spec.as_mut() else { return };
    spec_defaults(spec);
}

fn spec_defaults(spec: &mut PodSpec) {
    set_if_empty(&mut spec.restart_policy, "Always");
    set_if_empty(&mut spec.dns_policy, "ClusterFirst");
    if spec.termination_grace_period_seconds.is_none() {
        spec.termination_grace_period_seconds = Some(DEFAULT_GRACE_SECONDS);
    }
    let host_network = spec.host_network == Some(true);
    let init = spec.init_containers.iter_mut().flatten();
    for container in spec.containers.iter_mut().chain(init) {
        container_defaults(container, host_network);
    }
    for volume in spec.volumes.iter_mut().flatten() {
        volume_defaults(volume);
    }
}

fn container_defaults(c: &mut Container, host_network: bool) {
    if c.image_pull_policy.as_deref().unwrap_or("").is_empty() {
        c.image_pull_policy = Some(default_pull_policy(c.image.as_deref().unwrap_or("")).to_string());
    }
    set_if_empty(&mut c.termination_message_path, "/dev/termination-log");
    set_if_empty(&mut c.termination_message_policy, "File");
    for port in c.ports.iter_mut().flatten() {
        set_if_empty(&mut port.protocol, "TCP");
        // SetDefaults_PodSpec: a host-network pod's ports are host ports.
        if host_network && port.host_port.unwrap_or(0) == 0 {
            port.host_port = Some(port.container_port);
        }
    }
    for env in c.env.iter_mut().flatten() {
        if let Some(field_ref) = env.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
            set_if_empty(&mut field_ref.api_version, "v1");
        }
    }
    for probe in [&mut c.liveness_probe, &mut c.readiness_probe, &mut c.startup_probe].into_iter().flatten() {
        probe_defaults(probe);
    }
    if let Some(lifecycle) = c.lifecycle.as_mut() {
        for handler in [&mut lifecycle.post_start, &mut lifecycle.pre_stop].into_iter().flatten() {
            handler_defaults(handler);
        }
    }
    // SetDefaults_Pod: a limit without a request makes the request equal to the limit.
    if let Some(resources) = c.resources.as_mut() {
        if let Some(limits) = resources.limits.as_ref().filter(|l| !l.is_empty()) {
            let requests = resources.requests.get_or_insert_with(Default::default);
            for (name, limit) in limits {
                requests.entry(name.clone()).or_insert_with(|| limit.clone());
            }
        }
    }
}

fn probe_defaults(p: &mut Probe) {
    zero_to(&mut p.period_seconds, 10);
    zero_to(&mut p.timeout_seconds, 1);
    zero_to(&mut p.success_threshold, 1);
    zero_to(&mut p.failure_threshold, 3);
    if p.initial_delay_seconds.is_none() {
        p.initial_delay_seconds = Some(0);
    }
    if let Some(http) = p.http_get.as_mut() {
        http_defaults(http);
    }
}

fn handler_defaults(h: &mut LifecycleHandler) {
    if let Some(http) = h.http_get.as_mut() {
        http_defaults(http);
    }
}

fn http_defaults(http: &mut HTTPGetAction) {
    set_if_empty(&mut http.path, "/");
    set_if_empty(&mut http.scheme, "HTTP");
}

/// A volume that names no source is an emptyDir, as the API server makes it.
fn volume_defaults(v: &mut Volume) {
    let named_only = match serde_json::to_value(&*v) {
        Ok(serde_json::Value::Object(map)) => map.keys().all(|k| k == "name"),
        _ => false,
    };
    if named_only {
        v.empty_dir = Some(EmptyDirVolumeSource::default());
    }
}

fn set_if_empty(field: &mut Option<String>, value: &str) {
    if field.as_deref().unwrap_or("").is_empty() {
        *field = Some(value.to_string());
    }
}

fn zero_to(field: &mut Option<i32>, value: i32) {
    if field.unwrap_or(0) == 0 {
        *field = Some(value);
    }
}
