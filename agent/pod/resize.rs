//! In-place pod resize (KEP-1287), the pure part: what was accepted (the allocation), whether a
//! new request can be accepted (`handlePodResourcesResize`), what to do to the running
//! containers (`computePodResizeAction`), the pod cgroup's values (`ResourceConfigForPod`) and
//! the status the kubelet reports (`convertContainerStatusResources`). The worker does the I/O.
//!
//! Containers always run with the **allocated** resources, never straight from the spec: a
//! crash-restart during a deferred resize keeps the old values, as upstream.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};

use crate::cgroup::{MIN_SHARES, milli_cpu_to_shares};
use crate::cri::api;
use crate::model::{ContainerState, ObservedPod};
use crate::podspec::is_sidecar;
use crate::status::qos_class;

pub const PENDING: &str = "PodResizePending";
pub const IN_PROGRESS: &str = "PodResizeInProgress";
pub const REASON_DEFERRED: &str = "Deferred";
pub const REASON_INFEASIBLE: &str = "Infeasible";
pub const REASON_ERROR: &str = "Error";

/// The smallest CFS quota the kubelet writes, as millicores (upstream `cm.MinMilliCPULimit`).
const MIN_MILLI_CPU_LIMIT: i64 = 10;
pub use crate::cgroup::CPU_PERIOD;

/// What was accepted for each container (by name): the resources containers run with.
/// Saved as `allocation.json` in the pod's dir, so a restarted agent and a crash-restarted
/// container use it rather than the spec.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Allocation {
    pub containers: BTreeMap<String, ResourceRequirements>,
}

impl Allocation {
    /// The allocation of a pod admitted as it is: every init and app container's resources.
    pub fn of(pod: &Pod) -> Self {
        let containers = all_containers(pod)
            .map(|c| (c.name.clone(), c.resources.clone().map(cpu_memory).unwrap_or_default()))
            .collect();
        Allocation { containers }
    }

    /// The pod as it runs: `pod` with every allocated container's cpu and memory swapped in.
    pub fn apply(&self, pod: &Pod) -> Pod {
        let mut out = pod.clone();
        let Some(spec) = out.spec.as_mut() else { return out };
        let containers = spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten());
        for c in containers {
            let Some(alloc) = self.containers.get(&c.name) else { continue };
            let mut r = c.resources.clone().unwrap_or_default();
            for (field, from) in [(&mut r.requests, &alloc.requests), (&mut r.limits, &alloc.limits)] {
                let mut list = field.take().unwrap_or_default();
                list.retain(|k, _| k != "cpu" && k != "memory");
                list.extend(from.iter().flatten().map(|(k, v)| (k.clone(), v.clone())));
                *field = (!list.is_empty()).then_some(list);
            }
            c.resources = Some(r);
        }
        out
    }

    /// The container names whose cpu/memory in `pod` differ from the allocation (resizable
    /// containers only: apps and sidecars).
    pub fn changed(&self, pod: &Pod) -> Vec<String> {
        resizable(pod)
            .filter(|c| {
                let want = c.resources.clone().map(cpu_memory).unwrap_or_default();
                self.containers.get(&c.name).is_none_or(|a| Amounts::of(Some(a)) != Amounts::of(Some(&want)))
            })
            .map(|c| c.name.clone())
            .collect()
    }
}

/// Only the cpu and memory entries of `r` (the resources a resize may change).
fn cpu_memory(r: ResourceRequirements) -> ResourceRequirements {
    let keep = |m: Option<BTreeMap<String, Quantity>>| {
        let m: BTreeMap<_, _> =
            m.unwrap_or_default().into_iter().filter(|(k, _)| k == "cpu" || k == "memory").collect();
        (!m.is_empty()).then_some(m)
    };
    ResourceRequirements { requests: keep(r.requests), limits: keep(r.limits), ..Default::default() }
}

fn all_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    let spec = pod.spec.as_ref();
    spec.into_iter().flat_map(|s| s.init_containers.iter().flatten().chain(s.containers.iter()))
}

/// Containers a resize may touch: app containers and sidecars (KEP-1287 §Subresource).
pub fn resizable(pod: &Pod) -> impl Iterator<Item = &Container> {
    all_containers(pod).filter(|c| is_sidecar(c) || !is_init(pod, &c.name))
}

fn is_init(pod: &Pod, name: &str) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|i| i.iter().any(|c| c.name == name))
}

/// A container's cpu (millicores) and memory (bytes), 0 when unset; a request defaults to its
/// limit (API defaulting).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Amounts {
    pub cpu_request: i64,
    pub cpu_limit: i64,
    pub memory_request: i64,
    pub memory_limit: i64,
}

impl Amounts {
    pub fn of(r: Option<&ResourceRequirements>) -> Self {
        let get = |m: Option<&BTreeMap<String, Quantity>>, k: &str| -> Option<i64> {
            let q = crate::quantity::Quantity::parse(&m?.get(k)?.0)?;
            let v = if k == "cpu" { q.milli_value() } else { q.value() };
            v.and_then(|v| i64::try_from(v).ok())
        };
        let limits = r.and_then(|r| r.limits.as_ref());
        let requests = r.and_then(|r| r.requests.as_ref());
        let cpu_limit = get(limits, "cpu");
        let memory_limit = get(limits, "memory");
        Amounts {
            cpu_request: get(requests, "cpu").or(cpu_limit).unwrap_or(0),
            cpu_limit: cpu_limit.unwrap_or(0),
            memory_request: get(requests, "memory").or(memory_limit).unwrap_or(0),
            memory_limit: memory_limit.unwrap_or(0),
        }
    }

    /// What the runtime reports it applied (CRI `ContainerStatus.resources.linux`), as upstream
    /// reads it back (`toKubeContainerResources`): the cpu limit from quota/period, the request
    /// from the shares, the memory limit; the memory request is not a cgroup value.
    pub fn from_runtime(l: &api::LinuxContainerResources) -> Self {
        let cpu_limit =
            if l.cpu_period > 0 && l.cpu_quota > 0 { l.cpu_quota * 1000 / l.cpu_period } else { 0 };
        let cpu_request = crate::cgroup::shares_to_milli_cpu(l.cpu_shares);
        Amounts { cpu_request, cpu_limit, memory_request: 0, memory_limit: l.memory_limit_in_bytes.max(0) }
    }
}

/// milliCPUToQuota: at least 1 ms per period.
pub fn quota(milli: i64) -> i64 {
    (milli * CPU_PERIOD / 1000).max(1000)
}

/// The CRI resources a container runs with.
pub fn linux_resources(a: Amounts) -> api::LinuxContainerResources {
    let mut out = api::LinuxContainerResources {
        cpu_shares: milli_cpu_to_shares(a.cpu_request),
        memory_limit_in_bytes: a.memory_limit,
        ..Default::default()
    };
    if a.cpu_limit > 0 {
        out.cpu_period = CPU_PERIOD;
        out.cpu_quota = quota(a.cpu_limit);
    }
    out
}

/// The feasibility of a resize, as `handlePodResourcesResize` decides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The spec asks for what is allocated already.
    Unchanged,
    Accept,
    /// Does not fit now; tried again when room is made.
    Deferred(String),
    /// Can never fit (or is not allowed); not retried until the spec changes.
    Infeasible(String),
}

/// Node allocatable cpu (millicores) and memory (bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Room {
    pub cpu_milli: i64,
    pub memory: i64,
}

/// Decides a resize of `spec` (the pod as asked for) against `allocated` (the pod as accepted),
/// with `others` the requests of every other pod admitted on the node, at their allocation.
pub fn decide(spec: &Pod, allocated: &Pod, room: Room, others: (i64, i64)) -> Decision {
    let alloc = Allocation::of(allocated);
    if alloc.changed(spec).is_empty() || crate::podspec::is_stand_in(spec) {
        return Decision::Unchanged;
    }
    let (from, to) = (qos_class(allocated), qos_class(spec));
    if from != to {
        return Decision::Infeasible(format!(
            "Pod QoS is immutable: the resize would change the QoS class from {from} to {to}"
        ));
    }
    let (cpu, memory) = crate::podspec::requests(spec);
    for (name, want, cap, used) in
        [("cpu", cpu, room.cpu_milli, others.0), ("memory", memory, room.memory, others.1)]
    {
        if want > cap {
            return Decision::Infeasible(format!(
                "Node didn't have enough capacity: {name}, requested: {want}, capacity: {cap}"
            ));
        }
        if want + used > cap {
            return Decision::Deferred(format!(
                "Node didn't have enough resource: {name}, requested: {want}, used: {used}, capacity: {cap}"
            ));
        }
    }
    Decision::Accept
}

/// One container's update: what it has now and what it must get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerUpdate {
    pub name: String,
    pub id: String,
    pub current: Amounts,
    pub desired: Amounts,
}

/// What actuating the allocation takes, as `computePodResizeAction` orders it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Actions {
    /// Running containers whose resize policy asks for a restart: (name, instance ID).
    pub restart: Vec<(String, String)>,
    /// `UpdateContainerResources` calls, memory first (decreases before increases), then cpu.
    pub memory: Vec<ContainerUpdate>,
    pub cpu: Vec<ContainerUpdate>,
}

impl Actions {
    pub fn is_empty(&self) -> bool {
        self.restart.is_empty() && self.memory.is_empty() && self.cpu.is_empty()
    }
}

/// Compares each running resizable container of `allocated` (the pod as accepted) with what
/// the runtime applied (`actual`, by instance ID; a container the runtime reports nothing for
/// is left alone, as upstream).
pub fn actions(allocated: &Pod, observed: &ObservedPod, actual: &BTreeMap<String, Amounts>) -> Actions {
    let mut out = Actions::default();
    for c in resizable(allocated) {
        let Some(o) = observed.newest(&c.name).filter(|o| o.state == ContainerState::Running) else {
            continue;
        };
        let Some(current) = actual.get(&o.id).copied() else { continue };
        let mut desired = Amounts::of(c.resources.as_ref());
        let mut current = Amounts { memory_request: desired.memory_request, ..current };
        if desired.cpu_request <= MIN_SHARES && current.cpu_request <= MIN_SHARES {
            desired.cpu_request = current.cpu_request;
        }
        if desired.cpu_limit <= MIN_MILLI_CPU_LIMIT && current.cpu_limit <= MIN_MILLI_CPU_LIMIT {
            desired.cpu_limit = current.cpu_limit;
        }
        if desired == current {
            continue;
        }
        let restarts = |resource: &str| {
            c.resize_policy
                .iter()
                .flatten()
                .find(|p| p.resource_name == resource)
                .is_some_and(|p| p.restart_policy == "RestartContainer")
        };
        let memory = desired.memory_limit != current.memory_limit;
        let cpu_limit = desired.cpu_limit != current.cpu_limit;
        let cpu_request = desired.cpu_request != current.cpu_request;
        if (memory && restarts("memory")) || ((cpu_limit || cpu_request) && restarts("cpu")) {
            out.restart.push((c.name.clone(), o.id.clone()));
            continue;
        }
        current.memory_request = desired.memory_request;
        let update = ContainerUpdate { name: c.name.clone(), id: o.id.clone(), current, desired };
        let push = |list: &mut Vec<ContainerUpdate>, want: i64, have: i64| {
            if want < have {
                list.insert(0, update.clone());
            } else {
                list.push(update.clone());
            }
        };
        if memory {
            push(&mut out.memory, desired.memory_limit, current.memory_limit);
        }
        if cpu_limit {
            push(&mut out.cpu, desired.cpu_limit, current.cpu_limit);
        } else if cpu_request {
            push(&mut out.cpu, desired.cpu_request, current.cpu_request);
        }
    }
    // Decreases first within each resource, across containers: the inserts above keep the
    // decreases at the front in reverse discovery order, which is fine (independent calls).
    out
}

/// The pod cgroup's values (`ResourceConfigForPod`): limits only when every container has one
/// (else the pod is not limited), the shares from the summed requests.
pub use crate::cgroup::CgroupValues as PodCgroup;

/// The pod cgroup of the pod as it runs (its allocation applied): apps and sidecars summed,
/// against the largest regular init container with the sidecars started before it.
pub fn pod_cgroup(pod: &Pod) -> PodCgroup {
    let Some(spec) = pod.spec.as_ref() else {
        return PodCgroup { cpu_shares: MIN_SHARES, ..Default::default() };
    };
    let mut limited = (true, true);
    let (mut cpu_req, mut cpu_lim, mut mem_lim) = (0i64, 0i64, 0i64);
    let (mut side_req, mut side_cpu, mut side_mem) = (0i64, 0i64, 0i64);
    let (mut init_req, mut init_cpu, mut init_mem) = (0i64, 0i64, 0i64);
    let mut note = |a: &Amounts| {
        if a.memory_limit == 0 {
            limited.1 = false;
        }
        if a.cpu_limit == 0 {
            limited.0 = false;
        }
    };
    for c in spec.init_containers.iter().flatten() {
        let a = Amounts::of(c.resources.as_ref());
        note(&a);
        if is_sidecar(c) {
            side_req += a.cpu_request;
            side_cpu += a.cpu_limit;
            side_mem += a.memory_limit;
        } else {
            init_req = init_req.max(side_req + a.cpu_request);
            init_cpu = init_cpu.max(side_cpu + a.cpu_limit);
            init_mem = init_mem.max(side_mem + a.memory_limit);
        }
    }
    for c in &spec.containers {
        let a = Amounts::of(c.resources.as_ref());
        note(&a);
        cpu_req += a.cpu_request;
        cpu_lim += a.cpu_limit;
        mem_lim += a.memory_limit;
    }
    let overhead = |k: &str| {
        spec.overhead.as_ref().and_then(|o| o.get(k)).map_or(0, |q| {
            let a = Amounts::of(Some(&ResourceRequirements {
                limits: Some(BTreeMap::from([(k.to_string(), q.clone())])),
                ..Default::default()
            }));
            if k == "cpu" { a.cpu_limit } else { a.memory_limit }
        })
    };
    let cpu_req = (cpu_req + side_req).max(init_req) + overhead("cpu");
    let cpu_lim = (cpu_lim + side_cpu).max(init_cpu) + overhead("cpu");
    let mem_lim = (mem_lim + side_mem).max(init_mem) + overhead("memory");
    PodCgroup {
        memory_limit: limited.1.then_some(mem_lim),
        cpu_quota: limited.0.then(|| quota(cpu_lim)),
        cpu_shares: if qos_class(pod) == "BestEffort" { MIN_SHARES } else { milli_cpu_to_shares(cpu_req) },
    }
}

/// A cpu amount as the kubelet prints it (`NewMilliQuantity(m, DecimalSI)`).
pub fn cpu_quantity(milli: i64) -> Quantity {
    Quantity(if milli % 1000 == 0 { (milli / 1000).to_string() } else { format!("{milli}m") })
}

/// A byte amount as the kubelet prints it (`NewQuantity(b, BinarySI)`): the largest binary
/// suffix that divides it.
pub fn memory_quantity(bytes: i64) -> Quantity {
    if bytes == 0 {
        return Quantity("0".into());
    }
    let mut v = bytes;
    let mut suffix = "";
    for s in ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"] {
        if v % 1024 != 0 {
            break;
        }
        v /= 1024;
        suffix = s;
    }
    Quantity(format!("{v}{suffix}"))
}

/// `containerStatuses[].resources` of a running container (`convertContainerStatusResources`):
/// its allocated resources, with the cpu limit, cpu request and memory limit the runtime
/// reports in their place; a cpu value both sides have at or below the kernel's floor keeps the
/// allocated spelling (so `2m` stays `2m`, not the `10m` of the minimum quota).
pub fn status_resources(allocated: &ResourceRequirements, actual: Option<Amounts>) -> ResourceRequirements {
    let mut r = allocated.clone();
    let Some(a) = actual else { return r };
    let want = Amounts::of(Some(allocated));
    if let Some(l) = r.limits.as_mut() {
        if a.cpu_limit > 0 && (a.cpu_limit > MIN_MILLI_CPU_LIMIT || want.cpu_limit > MIN_MILLI_CPU_LIMIT) {
            l.insert("cpu".into(), cpu_quantity(a.cpu_limit));
        }
        if a.memory_limit > 0 {
            l.insert("memory".into(), memory_quantity(a.memory_limit));
        }
    }
    if let Some(q) = r.requests.as_mut() {
        if a.cpu_request > 0 && (a.cpu_request > MIN_SHARES || want.cpu_request > MIN_SHARES) {
            q.insert("cpu".into(), cpu_quantity(a.cpu_request));
        }
    }
    r
}

/// The event text upstream writes (`Pod resize started: {…}`): the resized containers'
/// resources and the generation, and the error if there is one.
pub fn event_text(what: &str, pod: &Pod, error: Option<&str>) -> String {
    let containers: Vec<serde_json::Value> = resizable(pod)
        .map(|c| {
            serde_json::json!({
                "name": c.name,
                "resources": c.resources.clone().map(cpu_memory).unwrap_or_default(),
            })
        })
        .collect();
    let mut v = serde_json::json!({ "containers": containers });
    if let Some(g) = pod.metadata.generation {
        v["generation"] = g.into();
    }
    if let Some(e) = error {
        v["error"] = e.into();
    }
    format!("Pod resize {what}: {v}")
}

#[cfg(test)]
mod tests;
