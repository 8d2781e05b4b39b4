//! Pure helpers for the runtime-facing metrics: the kubelet's `operation_type` of each CRI
//! method, and the running pods and containers a relist shows.

use std::collections::HashSet;

use crate::cri::{RuntimeBrief, api};

/// The kubelet's `operation_type` label for CRI method `op` (its instrumented runtime service
/// names them in snake case: `RunPodSandbox` is `run_podsandbox`). A method the kubelet does not
/// instrument keeps its CRI name, so it is still told apart.
pub fn operation_type(op: &'static str) -> &'static str {
    match op {
        "Version" => "version",
        "Status" => "status",
        "RuntimeConfig" => "runtime_config",
        "RunPodSandbox" => "run_podsandbox",
        "StopPodSandbox" => "stop_podsandbox",
        "RemovePodSandbox" => "remove_podsandbox",
        "PodSandboxStatus" => "podsandbox_status",
        "ListPodSandbox" => "list_podsandbox",
        "CreateContainer" => "create_container",
        "StartContainer" => "start_container",
        "StopContainer" => "stop_container",
        "RemoveContainer" => "remove_container",
        "ListContainers" => "list_containers",
        "ContainerStatus" => "container_status",
        "UpdateContainerResources" => "update_container",
        "ReopenContainerLog" => "reopen_container_log",
        "ExecSync" => "exec_sync",
        "GetContainerEvents" => "get_container_events",
        "ListPodSandboxStats" => "list_podsandbox_stats",
        "ListContainerStats" => "list_container_stats",
        "ListImages" => "list_images",
        "ImageStatus" => "image_status",
        "PullImage" => "pull_image",
        "RemoveImage" => "remove_image",
        "ImageFsInfo" => "image_fs_info",
        other => other,
    }
}

/// The kubelet's `container_state` label values, in CRI state order.
pub const CONTAINER_STATES: [&str; 4] = ["created", "running", "exited", "unknown"];

/// What one relist shows: pods with a ready sandbox, and containers by state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RuntimeCounts {
    pub running_pods: i64,
    /// Indexed like [`CONTAINER_STATES`].
    pub containers: [i64; 4],
}

/// Counts what a relist returned, as the kubelet's PLEG does after each relist
/// (`updateRunningPodAndContainerMetrics`): a pod runs when one of its sandboxes is ready;
/// containers are counted by their CRI state. Only objects with a pod UID label (made by a
/// kubelet or crilet) count.
pub fn count_runtime(brief: &RuntimeBrief) -> RuntimeCounts {
    let running_pods: HashSet<&str> =
        brief.sandboxes.iter().filter(|s| s.sandbox_ready()).filter_map(|s| s.uid.as_deref()).collect();
    let mut counts = RuntimeCounts { running_pods: running_pods.len() as i64, ..Default::default() };
    for c in brief.containers.iter().filter(|c| c.uid.is_some()) {
        let i = match api::ContainerState::try_from(c.state) {
            Ok(api::ContainerState::ContainerCreated) => 0,
            Ok(api::ContainerState::ContainerRunning) => 1,
            Ok(api::ContainerState::ContainerExited) => 2,
            _ => 3,
        };
        counts.containers[i] += 1;
    }
    counts
}
