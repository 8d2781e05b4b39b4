//! In-place resize of static pods (KEP-1287; upstream recreates every edited static pod, crilet
//! resizes an edit that changes only cpu/memory) against the real runtime. The values are read
//! from the pod's and the containers' cgroup files, never from what the agent says:
//! - per `resizePolicy`: `NotRequired` is updated in place (same instance), `RestartContainer`
//!   is restarted in place (restartCount + 1), the UID, sandbox and IP stay, the pod cgroup
//!   follows;
//! - a memory limit below current usage is not applied (the pod keeps its limit, with
//!   `PodResizeInProgress` reason Error), and is once the usage drops; an agent restart in the
//!   middle carries on without restarting anything;
//! - a resize that does not fit now is Deferred, a crash-restarted container keeps the old
//!   allocation meanwhile, and it is applied once room is made; one that never fits, or would
//!   change the QoS class, is Infeasible.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// The cgroup v1/v2 file of `controller` for `cgroup` (a path like `/kubepods/burstable/pod…`).
fn cgroup_file(controller: &str, cgroup: &str, file: &str) -> PathBuf {
    let root = PathBuf::from("/sys/fs/cgroup");
    let rel = cgroup.trim_start_matches('/');
    if root.join("cgroup.controllers").exists() {
        root.join(rel).join(file)
    } else {
        root.join(controller).join(rel).join(file)
    }
}

fn read_i64(path: &PathBuf) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The pod cgroup of a Burstable pod.
fn pod_cgroup(uid: &str) -> String {
    format!("/kubepods/burstable/pod{uid}")
}

/// (memory limit, cpu quota, cpu shares) of a cgroup (v1 file names; v2 is not this machine's).
fn limits(cgroup: &str) -> Option<(i64, i64, i64)> {
    Some((
        read_i64(&cgroup_file("memory", cgroup, "memory.limit_in_bytes"))?,
        read_i64(&cgroup_file("cpu", cgroup, "cpu.cfs_quota_us"))?,
        read_i64(&cgroup_file("cpu", cgroup, "cpu.shares"))?,
    ))
}

fn container_limits(uid: &str, id: &str) -> Option<(i64, i64, i64)> {
    limits(&format!("{}/{id}", pod_cgroup(uid)))
}

const MI: i64 = 1024 * 1024;

fn uid_of(p: &Value) -> String {
    p["metadata"]["uid"].as_str().unwrap_or_default().to_string()
}

fn pod_ip(p: &Value) -> String {
    p["status"]["podIP"].as_str().unwrap_or_default().to_string()
}

fn condition_of<'a>(p: &'a Value, t: &str) -> Option<&'a Value> {
    p["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == t)
}

/// Two containers with the same resources: `soft` resizes in place, `hard` restarts for memory.
fn two_policies(cpu_limit: &str, memory_limit: &str) -> String {
    let container = |name: &str, policy: &str| {
        format!(
            r#"
  - name: {name}
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sleep, "3600"]
    resizePolicy:
    - {{resourceName: cpu, restartPolicy: NotRequired}}
    - {{resourceName: memory, restartPolicy: {policy}}}
    resources:
      requests: {{cpu: 100m, memory: 32Mi}}
      limits: {{cpu: {cpu_limit}, memory: {memory_limit}}}"#
        )
    };
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: rs, namespace: t-resize}}
spec:
  terminationGracePeriodSeconds: 1
  containers:{}{}
"#,
        container("soft", "NotRequired"),
        container("hard", "RestartContainer"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_and_memory_edit_resizes_the_pod_in_place_by_each_containers_policy() {
    let a = Agent::start("resize_policies").await;
    a.write_manifest("rs.yaml", &two_policies("200m", "64Mi"));
    let before = running_pod(&a, "rs").await;
    let uid = uid_of(&before);
    let soft = container_id(&before, "soft").expect("soft id");
    let hard = container_id(&before, "hard").expect("hard id");
    assert_eq!(container_limits(&uid, &soft), Some((64 * MI, 20_000, 102)), "soft before");
    assert_eq!(container_limits(&uid, &hard), Some((64 * MI, 20_000, 102)), "hard before");
    // The pod cgroup: the containers' limits summed, the shares of the summed requests.
    assert_eq!(limits(&pod_cgroup(&uid)), Some((128 * MI, 40_000, 204)), "pod cgroup before");
    let sandbox_before = a.env.cri().observe(&uid).await.expect("observe").sandboxes[0].id.clone();

    a.write_manifest("rs.yaml", &two_policies("300m", "96Mi"));
    let after = wait_for("both containers resized", Duration::from_secs(60), || async {
        let p = a.pod("rs")?;
        let hard_now = container_id(&p, "hard")?;
        let done = hard_now != hard
            && running(&p, "hard")
            && container_limits(&uid, &soft) == Some((96 * MI, 30_000, 102))
            && container_limits(&uid, &hard_now) == Some((96 * MI, 30_000, 102))
            && condition_of(&p, "PodResizeInProgress").is_none();
        done.then_some(p)
    })
    .await;
    assert_eq!(uid_of(&after), uid, "same pod UID");
    assert_eq!(pod_ip(&after), pod_ip(&before), "same pod IP");
    let observed = a.env.cri().observe(&uid).await.expect("observe");
    assert_eq!(observed.sandboxes.len(), 1, "one sandbox");
    assert_eq!(observed.sandboxes[0].id, sandbox_before, "same sandbox");
    assert_eq!(container_id(&after, "soft").as_deref(), Some(soft.as_str()), "NotRequired: same instance");
    assert_eq!(restart_count(&after, "soft"), Some(0), "NotRequired: not restarted");
    assert_eq!(restart_count(&after, "hard"), Some(1), "RestartContainer: restarted once");
    assert_eq!(limits(&pod_cgroup(&uid)), Some((192 * MI, 60_000, 204)), "pod cgroup after");
    // The status says what the runtime has and what was allocated.
    let soft_status = cstatus(&after, "soft").expect("soft status");
    assert_eq!(soft_status["resources"]["limits"]["memory"], "96Mi", "{soft_status}");
    assert_eq!(soft_status["resources"]["limits"]["cpu"], "300m", "{soft_status}");
    assert_eq!(soft_status["resources"]["requests"]["cpu"], "100m", "{soft_status}");
    assert_eq!(soft_status["allocatedResources"]["memory"], "32Mi", "{soft_status}");
    let events = a.events_of("t-resize", "rs");
    for reason in ["ResizeStarted", "ResizeCompleted"] {
        assert!(events.contains(reason), "{reason} in:\n{events}");
    }
    assert!(events.contains("resize requires restart"), "the restart's Killing event:\n{events}");
}

/// A container that holds 48 MiB of tmpfs memory until the test creates `release` in its
/// hostPath directory.
fn holder(dir: &std::path::Path, memory_limit: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: hold, namespace: t-resize}}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{{name: ctl, hostPath: {{path: {dir}}}}}]
  containers:
  - name: main
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, 'head -c 50331648 /dev/zero > /dev/shm/hold; until [ -e /ctl/release ]; do sleep 0.2; done; rm /dev/shm/hold; sleep 3600']
    volumeMounts: [{{name: ctl, mountPath: /ctl}}]
    resources:
      requests: {{cpu: 50m, memory: 16Mi}}
      limits: {{memory: {memory_limit}}}
"#,
        dir = dir.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_limit_below_usage_waits_for_the_usage_to_drop_across_an_agent_restart() {
    let mut a = Agent::start("resize_below_usage").await;
    let dir = a.dir.join("ctl");
    std::fs::create_dir_all(&dir).expect("ctl dir");
    a.write_manifest("hold.yaml", &holder(&dir, "128Mi"));
    let before = running_pod(&a, "hold").await;
    let uid = uid_of(&before);
    let id = container_id(&before, "main").expect("id");
    wait_for("the container holds its memory", Duration::from_secs(30), || async {
        let usage =
            read_i64(&cgroup_file("memory", &format!("{}/{id}", pod_cgroup(&uid)), "memory.usage_in_bytes"))?;
        (usage >= 48 * MI).then_some(())
    })
    .await;

    a.write_manifest("hold.yaml", &holder(&dir, "32Mi"));
    let refused = wait_for("the resize refused with reason Error", Duration::from_secs(30), || async {
        let p = a.pod("hold")?;
        let c = condition_of(&p, "PodResizeInProgress")?;
        (c["reason"] == "Error").then(|| c["message"].as_str().unwrap_or_default().to_string())
    })
    .await;
    assert!(refused.starts_with("cannot decrease memory limits: "), "{refused}");
    assert!(refused.contains("below current usage"), "{refused}");
    assert_eq!(container_limits(&uid, &id).map(|l| l.0), Some(128 * MI), "the old limit stays");
    assert!(a.events_of("t-resize", "hold").contains("ResizeError"), "a ResizeError event");

    // The agent restarts in the middle: the pod, its container and the pending limit carry on.
    a.kill();
    a.spawn();
    let p = wait_for(
        "the restarted agent reports the resize still in progress",
        Duration::from_secs(30),
        || async {
            let p = a.pod("hold")?;
            (condition_of(&p, "PodResizeInProgress")?["reason"] == "Error").then_some(p)
        },
    )
    .await;
    assert_eq!(uid_of(&p), uid, "same UID after the agent restart");
    assert_eq!(container_id(&p, "main").as_deref(), Some(id.as_str()), "not restarted");
    assert_eq!(container_limits(&uid, &id).map(|l| l.0), Some(128 * MI), "still the old limit");

    std::fs::write(dir.join("release"), "").expect("release");
    let p = wait_for("the lower limit applied once the usage dropped", Duration::from_secs(60), || async {
        let p = a.pod("hold")?;
        let applied = container_limits(&uid, &id).map(|l| l.0) == Some(32 * MI)
            && limits(&pod_cgroup(&uid)).map(|l| l.0) == Some(32 * MI);
        (applied && condition_of(&p, "PodResizeInProgress").is_none()).then_some(p)
    })
    .await;
    assert_eq!(restart_count(&p, "main"), Some(0), "never restarted");
    assert_eq!(container_id(&p, "main").as_deref(), Some(id.as_str()), "the same instance");
}

fn cpu_pod(name: &str, cpu: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: t-resize}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sleep, "3600"]
    resources:
      requests: {{cpu: {cpu}, memory: 16Mi}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resize_that_does_not_fit_is_deferred_until_room_is_made_and_one_that_never_fits_is_infeasible() {
    let a = Agent::start("resize_deferred").await;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as i64;
    let big = format!("{}m", cores * 1000 - 500);
    a.write_manifest("big.yaml", &cpu_pod("big", &big));
    a.write_manifest("small.yaml", &cpu_pod("small", "100m"));
    running_pod(&a, "big").await;
    let small = running_pod(&a, "small").await;
    let uid = uid_of(&small);
    let id = container_id(&small, "main").expect("id");
    assert_eq!(container_limits(&uid, &id).map(|l| l.2), Some(102), "100m is 102 shares");

    // 1000m beside the big pod's requests does not fit now.
    a.write_manifest("small.yaml", &cpu_pod("small", "1000m"));
    let pending = wait_for("PodResizePending Deferred", Duration::from_secs(30), || async {
        let p = a.pod("small")?;
        let c = condition_of(&p, "PodResizePending")?.clone();
        (c["reason"] == "Deferred").then_some(c)
    })
    .await;
    assert!(pending["message"].as_str().unwrap_or_default().contains("cpu"), "{pending}");
    assert!(a.events_of("t-resize", "small").contains("ResizeDeferred"), "a ResizeDeferred event");
    // A crash-restart meanwhile runs with the allocation, not the spec.
    a.env.cri().stop_container(&id, Duration::from_secs(0)).await.expect("stop");
    let restarted = wait_for("the container restarted", Duration::from_secs(30), || async {
        let p = a.pod("small")?;
        let now = container_id(&p, "main")?;
        (now != id && running(&p, "main")).then_some(now)
    })
    .await;
    assert_eq!(container_limits(&uid, &restarted).map(|l| l.2), Some(102), "restarted at the allocation");

    // Room is made: the deferred resize is accepted and applied.
    a.remove_manifest("big.yaml");
    wait_for("the deferred resize applied", Duration::from_secs(60), || async {
        let p = a.pod("small")?;
        let applied = container_limits(&uid, &restarted).map(|l| l.2) == Some(1024);
        (applied
            && condition_of(&p, "PodResizePending").is_none()
            && condition_of(&p, "PodResizeInProgress").is_none())
        .then_some(())
    })
    .await;

    // More than the node has is Infeasible, and nothing changes.
    a.write_manifest("small.yaml", &cpu_pod("small", &format!("{}m", cores * 1000 + 1000)));
    let c = wait_for("PodResizePending Infeasible", Duration::from_secs(30), || async {
        let p = a.pod("small")?;
        let c = condition_of(&p, "PodResizePending")?.clone();
        (c["reason"] == "Infeasible").then_some(c)
    })
    .await;
    assert!(
        c["message"].as_str().unwrap_or_default().contains("Node didn't have enough capacity: cpu"),
        "{c}"
    );
    assert_eq!(container_limits(&uid, &restarted).map(|l| l.2), Some(1024), "the allocation stays");

    // A resize that would make the pod Guaranteed is refused: QoS never changes.
    a.write_manifest(
        "small.yaml",
        &cpu_pod("small", "1000m").replace(
            "requests: {cpu: 1000m, memory: 16Mi}",
            "requests: {cpu: 1000m, memory: 16Mi}\n      limits: {cpu: 1000m, memory: 16Mi}",
        ),
    );
    let c = wait_for("PodResizePending Infeasible for QoS", Duration::from_secs(30), || async {
        let p = a.pod("small")?;
        let c = condition_of(&p, "PodResizePending")?.clone();
        c["message"].as_str().unwrap_or_default().contains("QoS").then_some(c)
    })
    .await;
    assert_eq!(c["reason"], "Infeasible", "{c}");
    let p = a.pod("small").expect("pod");
    assert_eq!(uid_of(&p), uid, "same pod");
    assert_eq!(container_id(&p, "main").as_deref(), Some(restarted.as_str()), "still running, untouched");
    assert!(a.events_of("t-resize", "small").contains("ResizeInfeasible"), "a ResizeInfeasible event");
}
