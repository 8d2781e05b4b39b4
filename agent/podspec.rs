//! Accessors of a Pod's spec that every layer reads the same way: the defaulted `restartPolicy`,
//! the containers by role, and what role a container plays. Pure vocabulary: nothing here
//! decides a restart or a status (that is `crate::status`), it only says what the spec holds.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The container's role in the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `spec.initContainers[i]` without `restartPolicy`: runs once to completion, in order.
    Init,
    /// `spec.initContainers[i]` with `restartPolicy: Always` (upstream "restartable init container").
    Sidecar,
    /// `spec.containers[i]`.
    App,
    /// `spec.ephemeralContainers[i]` (cluster pods): started once, never restarted.
    Ephemeral,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Init => "init",
            Kind::Sidecar => "sidecar",
            Kind::App => "app",
            Kind::Ephemeral => "ephemeral",
        }
    }

    /// The kind of `spec.initContainers[i]`.
    pub fn of_init(c: &Container) -> Kind {
        if is_sidecar(c) { Kind::Sidecar } else { Kind::Init }
    }
}

/// The pod's spec, or an empty one.
pub fn spec(pod: &Pod) -> &PodSpec {
    static EMPTY: std::sync::OnceLock<PodSpec> = std::sync::OnceLock::new();
    pod.spec.as_ref().unwrap_or_else(|| EMPTY.get_or_init(PodSpec::default))
}

/// The pod's `restartPolicy`, defaulted as the API server does.
pub fn restart_policy(pod: &Pod) -> &str {
    pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()).unwrap_or("Always")
}

/// A sidecar is an init container whose own `restartPolicy` is `Always`.
pub fn is_sidecar(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

/// The pod's init containers (regular and sidecars) in spec order.
pub fn init_containers(pod: &Pod) -> &[Container] {
    pod.spec.as_ref().and_then(|s| s.init_containers.as_deref()).unwrap_or_default()
}

/// The pod's regular containers in spec order.
pub fn app_containers(pod: &Pod) -> &[Container] {
    pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default()
}

/// Which spec containers exist, with their kind, in spec order (init containers first; no
/// ephemeral containers).
pub fn container_kinds(pod: &Pod) -> Vec<(String, Kind)> {
    let init = init_containers(pod).iter().map(|c| (c.name.clone(), Kind::of_init(c)));
    let apps = app_containers(pod).iter().map(|c| (c.name.clone(), Kind::App));
    init.chain(apps).collect()
}

/// The pod's ephemeral containers as containers (the fields they share; the API server allows
/// no others), with the container each one targets (`targetContainerName`), if any.
pub fn ephemeral_containers(pod: &Pod) -> Vec<(Container, Option<String>)> {
    spec(pod)
        .ephemeral_containers
        .iter()
        .flatten()
        .filter_map(|ec| {
            let mut v = serde_json::to_value(ec).ok()?;
            let target = v.as_object_mut()?.remove("targetContainerName");
            let c: Container = serde_json::from_value(v).ok()?;
            Some((c, target.and_then(|t| t.as_str().map(str::to_owned))))
        })
        .collect()
}

/// Does the agent run `pod` as a stand-in ([`crate::model::keys::STAND_IN`]: the spec its
/// sandbox carries, its manifest broken or not read yet)? That spec can be older than what runs
/// (an in-place update since, a resize), so nothing is changed to match it: no restart for a
/// changed definition, no in-place update, no resize, until the manifest is good again.
pub fn is_stand_in(pod: &Pod) -> bool {
    pod.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(crate::model::keys::STAND_IN))
}

/// The pod's effective requests, as the scheduler and the kubelet count them: the larger of the
/// app containers plus sidecars and the largest regular init container (plus the sidecars
/// started before it), plus the pod overhead.
pub fn requests(pod: &Pod) -> (i64, i64) {
    let Some(spec) = pod.spec.as_ref() else { return (0, 0) };
    let req = |c: &Container, key: &str| -> i64 {
        let q = c.resources.as_ref().and_then(|r| r.requests.as_ref()).and_then(|m| m.get(key));
        q.map_or(0, |q| amount(key, q))
    };
    let mut cpu: i64 = spec.containers.iter().map(|c| req(c, "cpu")).sum();
    let mut mem: i64 = spec.containers.iter().map(|c| req(c, "memory")).sum();
    let (mut side_cpu, mut side_mem, mut init_cpu, mut init_mem) = (0, 0, 0, 0);
    for c in spec.init_containers.iter().flatten() {
        if c.restart_policy.as_deref() == Some("Always") {
            side_cpu += req(c, "cpu");
            side_mem += req(c, "memory");
        } else {
            init_cpu = init_cpu.max(side_cpu + req(c, "cpu"));
            init_mem = init_mem.max(side_mem + req(c, "memory"));
        }
    }
    cpu = (cpu + side_cpu).max(init_cpu);
    mem = (mem + side_mem).max(init_mem);
    if let Some(o) = spec.overhead.as_ref() {
        cpu += o.get("cpu").map_or(0, |q| amount("cpu", q));
        mem += o.get("memory").map_or(0, |q| amount("memory", q));
    }
    (cpu, mem)
}

/// cpu in millicores, anything else in whole units (bytes).
fn amount(key: &str, q: &Quantity) -> i64 {
    let Some(v) = crate::quantity::Quantity::parse(&q.0) else { return 0 };
    let n = if key == "cpu" { v.milli_value() } else { v.value() };
    n.and_then(|n| i64::try_from(n).ok()).unwrap_or(i64::MAX)
}

/// Every init and app container of `spec` with its field path (`spec.initContainers[0]`,
/// `spec.containers[1]`), for checks whose findings name the field.
pub fn containers_at(spec: &PodSpec) -> impl Iterator<Item = (String, &Container)> {
    let init = spec.init_containers.iter().flatten().enumerate();
    let init = init.map(|(i, c)| (format!("spec.initContainers[{i}]"), c));
    let apps = spec.containers.iter().enumerate().map(|(i, c)| (format!("spec.containers[{i}]"), c));
    init.chain(apps)
}

/// The OS this node runs pods of (the kubelet's `runtime.GOOS`).
pub const NODE_OS: &str = "linux";

/// The kubelet's two OS refusals (lifecycle/predicate.go), in its order, as (reason, message):
/// the pod's `kubernetes.io/os` label (its label, not its node selector, which is NodeAffinity's)
/// naming another OS, then `spec.os.name` naming another OS. Static pods get them too: the
/// kubelet admits them through the same handler.
pub fn os_mismatch(pod: &Pod) -> Option<(&'static str, &'static str)> {
    let label = pod.metadata.labels.as_ref().and_then(|l| l.get("kubernetes.io/os"));
    if label.is_some_and(|os| os != NODE_OS) {
        return Some((
            "PodOSSelectorNodeLabelDoesNotMatch",
            "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label",
        ));
    }
    let field = pod.spec.as_ref().and_then(|s| s.os.as_ref());
    if field.is_some_and(|os| os.name != NODE_OS) {
        return Some(("PodOSNotSupported", "Failed to admit pod as the OS field doesn't match node OS"));
    }
    None
}
