//! The Node object and its status, as the kubelet reports them (pure: built from [`NodeFacts`],
//! which `facts` reads off the machine).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeFeatures,
    NodeSpec, NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

/// What the Node says about the machine and the agent.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFacts {
    pub name: String,
    pub hostname: String,
    pub node_ip: String,
    pub labels: BTreeMap<String, String>,
    pub cpus: u32,
    pub memory_bytes: u64,
    pub ephemeral_bytes: u64,
    pub max_pods: u32,
    pub port: u16,
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
    pub kernel: String,
    pub os_image: String,
    /// GOARCH spelling (amd64, arm64).
    pub arch: String,
    /// `containerd://2.1.9`.
    pub runtime_version: String,
    pub kubelet_version: String,
    /// The runtime reports KEP-3619 (CRI `RuntimeFeatures.supplemental_groups_policy`): it
    /// applies `supplementalGroupsPolicy: Strict` and reports the process's identity.
    pub supplemental_groups_policy: bool,
}

/// The runtime's health as the Ready condition reports it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RuntimeReadiness {
    /// Empty when the runtime and its network are ready; else why not (the kubelet's wording).
    pub problems: Vec<String>,
}

// The kubelet's default hard eviction thresholds, subtracted from capacity for allocatable
// (memory.available<100Mi, nodefs.available<10%).
use crate::node::EVICTION_MEMORY;

pub fn capacity(f: &NodeFacts) -> BTreeMap<String, Quantity> {
    BTreeMap::from([
        ("cpu".to_string(), Quantity(f.cpus.to_string())),
        ("memory".to_string(), Quantity(format!("{}Ki", f.memory_bytes / 1024))),
        ("ephemeral-storage".to_string(), Quantity(format!("{}Ki", f.ephemeral_bytes / 1024))),
        ("pods".to_string(), Quantity(f.max_pods.to_string())),
    ])
}

pub fn allocatable(f: &NodeFacts) -> BTreeMap<String, Quantity> {
    let memory = f.memory_bytes.saturating_sub(EVICTION_MEMORY);
    let ephemeral = f.ephemeral_bytes - f.ephemeral_bytes / 10;
    BTreeMap::from([
        ("cpu".to_string(), Quantity(f.cpus.to_string())),
        ("memory".to_string(), Quantity(format!("{}Ki", memory / 1024))),
        ("ephemeral-storage".to_string(), Quantity(ephemeral.to_string())),
        ("pods".to_string(), Quantity(f.max_pods.to_string())),
    ])
}

/// The labels the kubelet sets on its Node, then `--node-labels`.
pub fn labels(f: &NodeFacts) -> BTreeMap<String, String> {
    let mut l = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), f.hostname.clone()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), f.arch.clone()),
        ("beta.kubernetes.io/os".to_string(), "linux".to_string()),
        ("beta.kubernetes.io/arch".to_string(), f.arch.clone()),
    ]);
    l.extend(f.labels.clone());
    l
}

/// The Node to create when none exists.
pub fn new_node(f: &NodeFacts) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(f.name.clone()),
            labels: Some(labels(f)),
            annotations: Some(BTreeMap::from([(
                "volumes.kubernetes.io/controller-managed-attach-detach".to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(NodeSpec::default()),
        status: None,
    }
}

/// The four conditions, with the kubelet's reasons and messages (the pressure ones as the
/// eviction manager reports them). `previous` keeps each condition's transition time while its
/// status stays the same.
pub fn conditions(
    ready: &RuntimeReadiness,
    pressure: &crate::eviction::Pressure,
    previous: &[NodeCondition],
    now: jiff::Timestamp,
) -> Vec<NodeCondition> {
    let cond = |type_: &str, status: bool, reason: &str, message: String| {
        let status = if status { "True" } else { "False" }.to_string();
        let transition = previous
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or(Time(now));
        NodeCondition {
            type_: type_.to_string(),
            status,
            reason: Some(reason.to_string()),
            message: Some(message),
            last_heartbeat_time: Some(Time(now)),
            last_transition_time: Some(transition),
        }
    };
    let is_ready = ready.problems.is_empty();
    // The pressure conditions as the eviction manager's setters keep them; it records their
    // transition events (once, in both modes), so none are recorded here.
    let (mut out, _) = crate::eviction::conditions::pressure_conditions(pressure, previous, now);
    out.push(if is_ready {
        cond("Ready", true, "KubeletReady", "kubelet is posting ready status".into())
    } else {
        cond("Ready", false, "KubeletNotReady", ready.problems.join(", "))
    });
    out
}

/// The Node's addresses: `--node-ip` as its InternalIP, and the host name (the serving
/// certificate's SANs come from these, as the kubelet's).
pub fn addresses(node_ip: &str, hostname: &str) -> Vec<NodeAddress> {
    vec![
        NodeAddress { type_: "InternalIP".into(), address: node_ip.to_string() },
        NodeAddress { type_: "Hostname".into(), address: hostname.to_string() },
    ]
}

/// The status the agent writes (conditions from [`conditions`]).
pub fn status(f: &NodeFacts, conditions: Vec<NodeCondition>) -> NodeStatus {
    NodeStatus {
        capacity: Some(capacity(f)),
        allocatable: Some(allocatable(f)),
        addresses: Some(addresses(&f.node_ip, &f.hostname)),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint { port: i32::from(f.port) }),
        }),
        node_info: Some(NodeSystemInfo {
            machine_id: f.machine_id.clone(),
            system_uuid: f.system_uuid.clone(),
            boot_id: f.boot_id.clone(),
            kernel_version: f.kernel.clone(),
            os_image: f.os_image.clone(),
            container_runtime_version: f.runtime_version.clone(),
            kubelet_version: f.kubelet_version.clone(),
            kube_proxy_version: String::new(),
            operating_system: "linux".into(),
            architecture: f.arch.clone(),
            ..Default::default()
        }),
        conditions: Some(conditions),
        features: Some(NodeFeatures { supplemental_groups_policy: Some(f.supplemental_groups_policy) }),
        ..Default::default()
    }
}

/// Whether two statuses differ in more than heartbeat times (a change is written at once; an
/// unchanged status only every report period).
pub fn changed(a: &NodeStatus, b: &NodeStatus) -> bool {
    let strip = |s: &NodeStatus| {
        let mut s = s.clone();
        for c in s.conditions.iter_mut().flatten() {
            c.last_heartbeat_time = None;
        }
        s
    };
    strip(a) != strip(b)
}

/// Whether the Node's status in the API differs from what the agent would write in a field
/// the agent owns (conditions' status, reason and message; capacity, allocatable, addresses,
/// nodeInfo, daemonEndpoints).
pub fn differs_from_live(live: &NodeStatus, ours: &NodeStatus) -> bool {
    type Cond = (String, String, Option<String>, Option<String>);
    let conds = |s: &NodeStatus| {
        let mut c: Vec<Cond> = s
            .conditions
            .iter()
            .flatten()
            .filter(|c| {
                ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"].contains(&c.type_.as_str())
            })
            .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone(), c.message.clone()))
            .collect();
        c.sort();
        c
    };
    let info = |s: &NodeStatus| {
        s.node_info
            .as_ref()
            .map(|i| (i.boot_id.clone(), i.container_runtime_version.clone(), i.kubelet_version.clone()))
    };
    conds(live) != conds(ours)
        || live.capacity != ours.capacity
        || live.allocatable != ours.allocatable
        || live.addresses != ours.addresses
        || live.daemon_endpoints != ours.daemon_endpoints
        || info(live) != info(ours)
}

/// The kubelet's nodeStatusMaxImages: the Node lists this many images at most.
pub const MAX_IMAGES: usize = 50;
/// The kubelet's MaxNamesPerImageInNodeStatus.
const MAX_NAMES_PER_IMAGE: usize = 5;

/// The Node's `images`, as the kubelet's setter makes them: largest first (ties by ID,
/// descending), at most [`MAX_IMAGES`], each named by its digests then its tags (at most five
/// names).
pub fn images(list: &[crate::cri::api::Image]) -> Vec<ContainerImage> {
    let mut sorted: Vec<&crate::cri::api::Image> = list.iter().collect();
    sorted.sort_by(|a, b| b.size.cmp(&a.size).then_with(|| b.id.cmp(&a.id)));
    sorted
        .into_iter()
        .take(MAX_IMAGES)
        .map(|i| {
            let names: Vec<String> =
                i.repo_digests.iter().chain(&i.repo_tags).take(MAX_NAMES_PER_IMAGE).cloned().collect();
            ContainerImage { names: Some(names), size_bytes: i64::try_from(i.size).ok() }
        })
        .collect()
}

/// GOARCH's name for this machine.
pub fn go_arch() -> String {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> NodeFacts {
        NodeFacts {
            name: "n1".into(),
            hostname: "host1".into(),
            node_ip: "127.0.0.1".into(),
            labels: BTreeMap::from([("role".to_string(), "edge".to_string())]),
            cpus: 2,
            memory_bytes: 4 * 1024 * 1024 * 1024,
            ephemeral_bytes: 100 * 1024 * 1024 * 1024,
            max_pods: 110,
            port: 10250,
            machine_id: "m".into(),
            system_uuid: "u".into(),
            boot_id: "b".into(),
            kernel: "6.1".into(),
            os_image: "Debian GNU/Linux 12 (bookworm)".into(),
            arch: "amd64".into(),
            runtime_version: "containerd://2.1.9".into(),
            kubelet_version: "v1.36.3".into(),
            supplemental_groups_policy: true,
        }
    }

    #[test]
    fn capacity_and_allocatable_follow_the_kubelet_defaults() {
        let f = facts();
        let cap = capacity(&f);
        let alloc = allocatable(&f);
        let q = |m: &BTreeMap<String, Quantity>, k: &str| m[k].0.clone();
        let cases = [
            ("cpu", "2", "2"),
            ("memory", "4194304Ki", "4091904Ki"),
            ("ephemeral-storage", "104857600Ki", "96636764160"),
            ("pods", "110", "110"),
        ];
        for (k, c, a) in cases {
            assert_eq!(q(&cap, k), c, "capacity {k}");
            assert_eq!(q(&alloc, k), a, "allocatable {k}");
        }
    }

    #[test]
    fn images_are_largest_first_capped_and_named_by_digests_then_tags() {
        use crate::cri::api::Image;
        let image = |id: &str, size: u64, tags: &[&str], digests: &[&str]| Image {
            id: id.into(),
            size,
            repo_tags: tags.iter().map(|s| s.to_string()).collect(),
            repo_digests: digests.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        let list = vec![
            image("sha256:a", 10, &["a:1"], &["a@sha256:1"]),
            image("sha256:b", 30, &["b:1", "b:2", "b:3", "b:4", "b:5"], &["b@sha256:2"]),
            image("sha256:c", 10, &[], &[]),
        ];
        let got: Vec<(Vec<String>, Option<i64>)> =
            images(&list).into_iter().map(|i| (i.names.unwrap_or_default(), i.size_bytes)).collect();
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            got,
            vec![
                (names(&["b@sha256:2", "b:1", "b:2", "b:3", "b:4"]), Some(30)),
                (names(&[]), Some(10)),
                (names(&["a@sha256:1", "a:1"]), Some(10)),
            ],
            "largest first, ties by ID descending, five names at most"
        );
        let many: Vec<Image> = (0..60).map(|n| image(&format!("sha256:{n:02}"), n, &[], &[])).collect();
        let capped = images(&many);
        assert_eq!(capped.len(), MAX_IMAGES);
        assert_eq!(capped[0].size_bytes, Some(59));
    }

    #[test]
    fn labels_carry_the_well_known_ones_and_node_labels() {
        let l = labels(&facts());
        assert_eq!(l["kubernetes.io/hostname"], "host1");
        assert_eq!(l["kubernetes.io/os"], "linux");
        assert_eq!(l["kubernetes.io/arch"], "amd64");
        assert_eq!(l["role"], "edge");
    }

    #[test]
    fn ready_condition_follows_the_runtime_and_keeps_transition_times() {
        let t0: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: jiff::Timestamp = "2026-01-01T00:00:10Z".parse().unwrap();
        let not_ready = RuntimeReadiness { problems: vec!["container runtime network not ready".into()] };
        let none = crate::eviction::Pressure::new();
        let first = conditions(&not_ready, &none, &[], t0);
        let ready = first.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_deref()), ("False", Some("KubeletNotReady")));
        assert_eq!(ready.message.as_deref(), Some("container runtime network not ready"));

        let second = conditions(&RuntimeReadiness::default(), &none, &first, t1);
        let ready = second.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(ready.last_transition_time, Some(Time(t1)), "status changed: new transition");
        let mem = second.iter().find(|c| c.type_ == "MemoryPressure").unwrap();
        assert_eq!(mem.last_transition_time, Some(Time(t0)), "status kept: transition kept");
        assert_eq!(mem.last_heartbeat_time, Some(Time(t1)));

        let a = status(&facts(), first.clone());
        let b = status(&facts(), conditions(&not_ready, &none, &first, t1));
        assert!(!changed(&a, &b), "only heartbeats moved");
        assert!(changed(&a, &status(&facts(), second.clone())), "Ready flipped");

        // The node lifecycle controller marked the node Unknown while the agent was away.
        let mut live = status(&facts(), second.clone());
        assert!(!differs_from_live(&live, &status(&facts(), second.clone())));
        for c in live.conditions.iter_mut().flatten() {
            c.status = "Unknown".into();
            c.reason = Some("NodeStatusUnknown".into());
        }
        assert!(differs_from_live(&live, &status(&facts(), second)), "written again at once");
    }

    #[test]
    fn pressure_conditions_follow_the_eviction_manager() {
        use crate::eviction::Condition::*;
        let t0: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let ready = RuntimeReadiness::default();
        // (pressure, the three conditions' (status, reason, message))
        let cases = [
            (
                vec![],
                [
                    ("False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                    ("False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                    ("False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                ],
            ),
            (
                vec![MemoryPressure, DiskPressure, PidPressure],
                [
                    ("True", "KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
                    ("True", "KubeletHasDiskPressure", "kubelet has disk pressure"),
                    ("True", "KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
                ],
            ),
        ];
        for (pressure, want) in cases {
            let pressure: crate::eviction::Pressure = pressure.into_iter().collect();
            let got = conditions(&ready, &pressure, &[], t0);
            for (type_, (status, reason, message)) in
                ["MemoryPressure", "DiskPressure", "PIDPressure"].iter().zip(want)
            {
                let c = got.iter().find(|c| c.type_ == *type_).unwrap();
                assert_eq!(
                    (c.status.as_str(), c.reason.as_deref(), c.message.as_deref()),
                    (status, Some(reason), Some(message)),
                    "{type_} under {pressure:?}"
                );
            }
        }
    }
}
