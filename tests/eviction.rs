//! Node-pressure eviction (issue 37 part 4) on the real containerd and control plane, with
//! thresholds set so the node is under pressure at once, never by exhausting this machine:
//! `memory.available<` above the node's whole memory gives MemoryPressure (the Node's condition
//! and the node lifecycle controller's taint, a BestEffort pod refused, running API pods evicted
//! one at a time in the kubelet's order, a static pod kept); `nodefs.available<` above the free
//! space of a small tmpfs under `--root-dir` gives DiskPressure.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::cluster::{Node, api_condition};
use common::*;
use serde_json::Value;

/// `MemTotal` in MiB.
fn mem_total_mib() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").expect("read /proc/meminfo");
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("MemTotal in /proc/meminfo");
    kb / 1024
}

/// The Node's condition `t`: (status, reason).
fn node_condition(node: &Value, t: &str) -> Option<(String, String)> {
    let c = node["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == t)?;
    Some((c["status"].as_str()?.to_string(), c["reason"].as_str()?.to_string()))
}

fn phase_of(node: &Node, name: &str) -> String {
    node.api_pod(name)
        .map(|p| p["status"]["phase"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

/// An API pod on the node, sleeping; `requests` its memory request (none: BestEffort).
fn api_pod(node: &Node, name: &str, requests: Option<&str>) -> String {
    let resources =
        requests.map_or(String::new(), |r| format!("\n    resources: {{requests: {{memory: {r}}}}}"));
    node.agent.env.render(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  nodeName: {}\n  \
         terminationGracePeriodSeconds: 30\n  containers:\n  - name: c\n    image: ${{CRILET_IMAGE_BUSYBOX}}\n    \
         command: [sleep, '3600']{resources}\n",
        node.name
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn memory_pressure_taints_the_node_refuses_besteffort_and_evicts_in_rank_order() {
    // Pods start on a node without thresholds; the agent then restarts with one above the
    // node's whole memory, so it is met from the first cycle on.
    let mut node = Node::start("ev-memory", 10287, &["--eviction-hard", ""]).await;
    node.wait_ready().await;
    let ns = node.namespace.clone();
    node.agent.write_manifest(
        "static.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: ev-static, namespace: {ns}}}\nspec:\n  \
             terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: ${{CRILET_IMAGE_BUSYBOX}}\n    \
             command: [sleep, '3600']\n"
        ),
    );
    node.apply(&api_pod(&node, "ev-besteffort", None));
    node.apply(&api_pod(&node, "ev-burstable", Some("64Mi")));
    for name in ["ev-besteffort", "ev-burstable"] {
        node.wait_pod(name, "Running", Duration::from_secs(60), |p| p["status"]["phase"] == "Running").await;
    }
    running_pod(&node.agent, "ev-static").await;

    let threshold = format!("memory.available<{}Mi", mem_total_mib() + 1024);
    node.agent.kill();
    let i = node.agent.extra_args.iter().position(|a| a == "--eviction-hard").expect("the flag");
    node.agent.extra_args[i + 1] = threshold;
    node.agent.spawn();

    // The Node's condition, and the taint the node lifecycle controller puts on it.
    let n = wait_for("MemoryPressure and its taint on the Node", Duration::from_secs(40), || async {
        let n = node.cluster.get_json(&["node", &node.name])?;
        let tainted = n["spec"]["taints"].as_array().is_some_and(|t| {
            t.iter().any(|t| t["key"] == "node.kubernetes.io/memory-pressure" && t["effect"] == "NoSchedule")
        });
        let pressure = node_condition(&n, "MemoryPressure")?.0 == "True";
        (pressure && tainted).then_some(n)
    })
    .await;
    assert_eq!(
        node_condition(&n, "MemoryPressure"),
        Some(("True".into(), "KubeletHasInsufficientMemory".into()))
    );
    assert_eq!(node_condition(&n, "DiskPressure"), Some(("False".into(), "KubeletHasNoDiskPressure".into())));

    // The BestEffort pod goes first, while the Burstable one (within its request) still runs.
    let stopped = |p: &Value| {
        p["status"]["phase"] == "Failed"
            && p["status"]["containerStatuses"]
                .as_array()
                .is_some_and(|s| s.iter().all(|c| c["state"]["running"].is_null()))
    };
    let p = node.wait_pod("ev-besteffort", "evicted and stopped", Duration::from_secs(40), stopped).await;
    assert_eq!(phase_of(&node, "ev-burstable"), "Running", "one pod per cycle, BestEffort first");
    assert_eq!(p["status"]["reason"], "Evicted", "{}", p["status"]);
    let message = p["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("The node was low on resource: memory. Threshold quantity: ")
            && message.contains(", available: "),
        "{message}"
    );
    assert_eq!(api_condition(&p, "DisruptionTarget"), Some("True"));

    // A BestEffort pod is refused at admission while the pressure lasts.
    node.apply(&api_pod(&node, "ev-refused", None));
    let p = node
        .wait_pod("ev-refused", "refused", Duration::from_secs(30), |p| p["status"]["phase"] == "Failed")
        .await;
    assert_eq!(p["status"]["reason"], "Evicted");
    assert_eq!(p["status"]["message"], "The node had condition: [MemoryPressure]. ");

    // Then the Burstable one; the static pod (critical) stays.
    let p = node
        .wait_pod("ev-burstable", "evicted", Duration::from_secs(50), |p| p["status"]["phase"] == "Failed")
        .await;
    assert_eq!(p["status"]["reason"], "Evicted");
    let events = node
        .kubectl(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=ev-burstable,reason=Evicted",
            "-o",
            "json",
        ])
        .1;
    assert!(events.contains("The node was low on resource: memory."), "the Evicted event: {events}");
    wait_for("the manager to pass over the static pod", Duration::from_secs(30), || async {
        node.agent.whole_log().contains("eviction: cannot evict a critical pod").then_some(())
    })
    .await;
    let p = running_pod(&node.agent, "ev-static").await;
    assert_eq!(phase(&p), "Running");
    // Not restarted: still Failed a while later (its containers stay stopped).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(phase_of(&node, "ev-besteffort"), "Failed");
    // The static pod is the agent's to remove (the node's cleanup removes only API pods).
    node.agent.remove_manifest("static.yaml");
    wait_for("the static pod to be removed", Duration::from_secs(30), || async {
        node.agent.pod("ev-static").is_none().then_some(())
    })
    .await;
}

/// A tmpfs mounted for the test, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: PathBuf, size: &str) -> Tmpfs {
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&at)
            .status()
            .expect("run mount");
        assert!(ok.success(), "mounting a tmpfs at {}", at.display());
        Tmpfs(at)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn nodefs_pressure_on_a_small_root_dir_sets_disk_pressure() {
    // A cluster node, its --root-dir a 16Mi tmpfs and nodefs.available<1Gi: always met.
    let mut node = Node::start("ev-disk", 10290, &["--eviction-hard", ""]).await;
    node.agent.kill();
    let _tmpfs = Tmpfs::mount(node.agent.root.clone(), "16m");
    let i = node.agent.extra_args.iter().position(|a| a == "--eviction-hard").expect("the flag");
    node.agent.extra_args[i + 1] = "nodefs.available<1Gi".into();
    node.agent.spawn();
    let n = wait_for("DiskPressure on the Node", Duration::from_secs(40), || async {
        let n = node.cluster.get_json(&["node", &node.name])?;
        (node_condition(&n, "DiskPressure")?.0 == "True").then_some(n)
    })
    .await;
    assert_eq!(node_condition(&n, "DiskPressure"), Some(("True".into(), "KubeletHasDiskPressure".into())));
    assert_eq!(
        node_condition(&n, "MemoryPressure"),
        Some(("False".into(), "KubeletHasSufficientMemory".into()))
    );
    // Under disk pressure every pod that is not critical is refused, BestEffort or not.
    node.apply(&api_pod(&node, "ev-disk-refused", Some("8Mi")));
    let p = node
        .wait_pod("ev-disk-refused", "refused", Duration::from_secs(30), |p| p["status"]["phase"] == "Failed")
        .await;
    assert_eq!(p["status"]["reason"], "Evicted");
    assert_eq!(p["status"]["message"], "The node had condition: [DiskPressure]. ");
    node.agent.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_eviction_flags_stop_the_agent_naming_the_flag() {
    let mut a =
        Agent::start_with_args("ev-bad-flag", &["--eviction-soft", "memory.available<1Gi"], &[]).await;
    let status = a.wait_exit(Duration::from_secs(10), "with a soft threshold without a grace period").await;
    assert!(!status.success());
    assert!(
        a.whole_log().contains("--eviction-soft: memory.available<1Gi: grace period must be specified"),
        "{}",
        a.log()
    );
}
