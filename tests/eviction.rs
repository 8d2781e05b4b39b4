//! Node-pressure eviction (issue 37 part 4) on the real containerd and control plane, with
//! thresholds set so the node is under pressure at once, never by exhausting this machine:
//! `memory.available<` above the node's whole memory gives MemoryPressure (the Node's condition
//! and the node lifecycle controller's taint, a BestEffort pod refused, running API pods evicted
//! one at a time in the kubelet's order, a static pod kept); `nodefs.available<` above the free
//! space of a small tmpfs under `--root-dir` gives DiskPressure. Disk reclaim runs on a
//! containerd of the test's own (`common::private_containerd`), with `imagefs.available<`
//! computed from its tmpfs' real usage: unused images go first, and pods only when that is not
//! enough. Without an API server, the node's events and conditions show through the control
//! socket (`crilet events`, `crilet describe node`).

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::cluster::{Node, api_condition};
use common::private_containerd::{PrivateContainerd, images, tags};
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

/// A static pod `name` (busybox sleeping) in the node's namespace: never evicted.
fn write_static_pod(node: &Node, name: &str) {
    let ns = &node.namespace;
    node.agent.write_manifest(
        "static.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  \
             terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: ${{CRILET_IMAGE_BUSYBOX}}\n    \
             command: [sleep, '3600']\n"
        ),
    );
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
    write_static_pod(&node, "ev-static");
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

/// An API pod with an `ephemeral-storage` request (none: BestEffort).
fn disk_pod(node: &Node, name: &str, request: Option<&str>) -> String {
    let resources = request
        .map_or(String::new(), |r| format!("\n    resources: {{requests: {{ephemeral-storage: {r}}}}}"));
    node.agent.env.render(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  nodeName: {}\n  \
         terminationGracePeriodSeconds: 30\n  containers:\n  - name: c\n    image: ${{CRILET_IMAGE_BUSYBOX}}\n    \
         command: [sleep, '3600']{resources}\n",
        node.name
    ))
}

/// The line of condition `t` in `crilet describe node`.
fn described_condition(a: &Agent, t: &str) -> Option<String> {
    let (ok, out, _) = a.cli(&["describe", "node"]);
    ok.then(|| out.lines().find(|l| l.trim_start().starts_with(t)).map(str::to_string))?
}

/// Restarts the node's agent with `--eviction-hard threshold`.
fn restart_with_threshold(node: &mut Node, threshold: String) {
    node.agent.kill();
    let i = node.agent.extra_args.iter().position(|a| a == "--eviction-hard").expect("the flag");
    node.agent.extra_args[i + 1] = threshold;
    node.agent.spawn();
}

/// The Events on the Node with `reason`.
fn node_events(node: &Node, reason: &str) -> Vec<Value> {
    let selector = format!("involvedObject.kind=Node,involvedObject.name={},reason={reason}", node.name);
    node.cluster
        .get_json(&["events", "-n", "default", "--field-selector", &selector])
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn imagefs_pressure_removes_unused_images_first_and_evicts_only_when_that_is_not_enough() {
    let env = Env::load();
    let containerd =
        PrivateContainerd::start(&env, Path::new("/var/lib/crilet-dev/tests/ev-reclaim-containerd")).await;
    let cri = containerd.cri();
    let unused = [
        env.get("CRILET_IMAGE_WEB_V1"),
        env.get("CRILET_IMAGE_WEB_V2"),
        "localhost/crilet-reclaim-filler:8m".into(),
    ];
    for image in [env.get("CRILET_IMAGE_PAUSE"), env.get("CRILET_IMAGE_BUSYBOX")].iter().chain(&unused[..2]) {
        cri.pull_image(image, None).await.unwrap_or_else(|e| panic!("pull {image}: {e}"));
    }
    // The web images share all but a few bytes with busybox (in use): an unused image with
    // 8 MiB of its own is what gives removal something to free.
    containerd.import_filler(&env, &unused[2], 8).await;
    // A cluster node on it, eviction off while its pods start (under pressure they would be
    // refused). Its --root-dir is not on the tmpfs: the image filesystem is a dedicated one, so
    // imagefs (not nodefs) pressure is what removing images relieves, as the kubelet decides.
    let mut node = Node::start_on(
        "ev-reclaim",
        10303,
        Some(&containerd.endpoint),
        &["--eviction-hard", "", "--minimum-image-ttl-duration", "0s"],
    )
    .await;
    node.wait_ready().await;
    // An earlier run's Events on this Node (counted below).
    let selector = format!("involvedObject.kind=Node,involvedObject.name={}", node.name);
    let _ = node.cluster.kubectl(&["delete", "events", "-n", "default", "--field-selector", &selector]);
    write_static_pod(&node, "ev-reclaim-static");
    node.apply(&disk_pod(&node, "ev-reclaim-besteffort", None));
    node.apply(&disk_pod(&node, "ev-reclaim-requests", Some("100Mi")));
    for name in ["ev-reclaim-besteffort", "ev-reclaim-requests"] {
        node.wait_pod(name, "Running", Duration::from_secs(60), |p| p["status"]["phase"] == "Running").await;
    }
    running_pod(&node.agent, "ev-reclaim-static").await;

    // (a) A threshold halfway into what the unused images hold: met now, not once they are gone.
    let held: u64 = images(&cri).await.iter().filter(|i| unused.contains(&i.1)).map(|i| i.2).sum();
    let (_, available) = containerd.space();
    assert!(held >= 8 << 20, "the unused images hold too little to test with: {held} bytes");
    let threshold_kib = (available + held / 2) / 1024;
    restart_with_threshold(&mut node, format!("imagefs.available<{threshold_kib}Ki"));
    wait_for("the unused images removed", Duration::from_secs(60), || async {
        let kept = tags(&images(&cri).await);
        unused.iter().all(|u| !kept.contains(u)).then_some(())
    })
    .await;
    wait_for("the manager to find the pressure relieved", Duration::from_secs(30), || async {
        node.agent
            .whole_log()
            .contains("eviction: able to reduce pressure without evicting pods")
            .then_some(())
    })
    .await;
    let kept = tags(&images(&cri).await);
    assert!(kept.contains(&env.get("CRILET_IMAGE_BUSYBOX")), "the image in use is kept: {kept:?}");
    assert!(kept.contains(&env.get("CRILET_IMAGE_PAUSE")), "the pinned sandbox image is kept: {kept:?}");
    // Two more cycles (the conditions' heartbeat is the manager's cycle) and still no eviction.
    let mut beat = described_condition(&node.agent, "DiskPressure");
    for cycle in 0..2 {
        beat = Some(
            wait_for(
                &format!("eviction cycle {cycle} after the reclaim"),
                Duration::from_secs(30),
                || async {
                    described_condition(&node.agent, "DiskPressure").filter(|l| Some(l) != beat.as_ref())
                },
            )
            .await,
        );
    }
    let line = beat.unwrap_or_default();
    assert!(line.contains("True") && line.contains("KubeletHasDiskPressure"), "DiskPressure: {line}");
    for name in ["ev-reclaim-besteffort", "ev-reclaim-requests"] {
        assert_eq!(
            phase_of(&node, name),
            "Running",
            "{name}: reclaimed without evicting\n{}",
            node.agent.log()
        );
    }
    assert!(!node.agent.whole_log().contains("eviction: evicting pod"), "{}", node.agent.log());
    // Cluster mode: the manager's node events are Events on the Node, each once (repeats count).
    let met = wait_for("EvictionThresholdMet on the Node", Duration::from_secs(30), || async {
        let e = node_events(&node, "EvictionThresholdMet");
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(met.len(), 1, "one Event, its repeats counted: {met:?}");
    assert_eq!(met[0]["message"], "Attempting to reclaim ephemeral-storage");
    assert_eq!(met[0]["type"], "Warning");
    let pressure = wait_for("NodeHasDiskPressure on the Node", Duration::from_secs(30), || async {
        let e = node_events(&node, "NodeHasDiskPressure");
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(pressure.len(), 1, "{pressure:?}");
    assert_eq!(pressure[0]["message"], format!("Node {} status is now: NodeHasDiskPressure", node.name));

    // (b) A threshold no removal can reach (above the tmpfs' size): the API pods are evicted,
    // the BestEffort one (over its request of nothing) first; the static pod never.
    let (capacity, _) = containerd.space();
    restart_with_threshold(&mut node, format!("imagefs.available<{}Ki", capacity / 1024 + 1024));
    let stopped = |p: &Value| {
        p["status"]["phase"] == "Failed"
            && p["status"]["containerStatuses"]
                .as_array()
                .is_some_and(|s| s.iter().all(|c| c["state"]["running"].is_null()))
    };
    let p =
        node.wait_pod("ev-reclaim-besteffort", "evicted and stopped", Duration::from_secs(60), stopped).await;
    assert_eq!(phase_of(&node, "ev-reclaim-requests"), "Running", "one pod per cycle, BestEffort first");
    assert_eq!(p["status"]["reason"], "Evicted", "{}", p["status"]);
    let message = p["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("The node was low on resource: ephemeral-storage. Threshold quantity: ")
            && message.contains(", available: "),
        "{message}"
    );
    assert!(
        node.agent.whole_log().contains("eviction: must evict pod(s) to reclaim"),
        "{}",
        node.agent.log()
    );
    let p = node
        .wait_pod("ev-reclaim-requests", "evicted", Duration::from_secs(60), |p| {
            p["status"]["phase"] == "Failed"
        })
        .await;
    assert_eq!(p["status"]["reason"], "Evicted");
    wait_for("the manager to pass over the static pod", Duration::from_secs(30), || async {
        node.agent.whole_log().contains("eviction: cannot evict a critical pod").then_some(())
    })
    .await;
    assert_eq!(phase(&running_pod(&node.agent, "ev-reclaim-static").await), "Running");
    node.agent.remove_manifest("static.yaml");
    wait_for("the static pod to be removed", Duration::from_secs(30), || async {
        node.agent.pod("ev-reclaim-static").is_none().then_some(())
    })
    .await;
    drop(node);
    drop(containerd);
}

#[tokio::test(flavor = "multi_thread")]
async fn static_mode_shows_the_nodes_events_and_pressure_conditions() {
    let threshold = format!("memory.available<{}Mi", mem_total_mib() + 1024);
    let a = Agent::start_with_args("ev-static-node", &["--eviction-hard", &threshold], &[]).await;
    // The condition, through the control socket as `crilet describe node` prints it.
    let line = wait_for("MemoryPressure in crilet describe node", Duration::from_secs(40), || async {
        described_condition(&a, "MemoryPressure").filter(|l| l.contains("True"))
    })
    .await;
    assert!(line.contains("KubeletHasInsufficientMemory"), "{line}\n{}", a.log());
    assert!(line.contains("kubelet has insufficient memory available"), "{line}");
    let disk = described_condition(&a, "DiskPressure").unwrap_or_default();
    assert!(disk.contains("False") && disk.contains("KubeletHasNoDiskPressure"), "{disk}");
    let (_, described, _) = a.cli(&["describe", "node"]);
    let name = described
        .lines()
        .find_map(|l| l.strip_prefix("Name:"))
        .map(|n| n.trim().to_string())
        .expect("the node's name");
    let object = format!("Node/{name}");
    // The node's events in `crilet events` (namespace default, as kubectl shows the kubelet's).
    let (ok, out, err) = a.cli(&["events"]);
    assert!(ok, "{err}");
    let row = |reason: &str, message: &str| {
        out.lines().any(|l| l.contains(reason) && l.contains(&object) && l.contains(message))
    };
    assert!(row("EvictionThresholdMet", "Attempting to reclaim memory"), "{out}");
    assert!(
        row("NodeHasInsufficientMemory", &format!("Node {name} status is now: NodeHasInsufficientMemory")),
        "{out}"
    );
    assert!(row("NodeHasNoDiskPressure", "status is now: NodeHasNoDiskPressure"), "{out}");
    assert!(described.contains("EvictionThresholdMet"), "describe node lists the events:\n{described}");
    let (ok, _, err) = a.cli(&["describe", "node", "some-other-node"]);
    assert!(!ok && err.contains("nodes \"some-other-node\" not found"), "{err}");
    // Another namespace has none of them; `--for pod/...` neither.
    let (_, other, _) = a.cli(&["events", "-n", "kube-system"]);
    assert!(!other.contains(&object), "{other}");

    // `crilet events --watch`: the repeat of EvictionThresholdMet (every cycle) comes live,
    // counted.
    let mut watch = Command::new(env!("CARGO_BIN_EXE_crilet"))
        .args(["events", "--watch", "--control-socket"])
        .arg(&a.socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("crilet events --watch");
    let stdout = watch.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    let mut seen = Vec::new();
    let repeated = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains("EvictionThresholdMet") && l.contains(" (x") => break Some(l),
            Ok(l) => seen.push(l),
            Err(_) => break None,
        }
    };
    let _ = watch.kill();
    let _ = watch.wait();
    let repeated = repeated.unwrap_or_else(|| panic!("no counted repeat watched:\n{}", seen.join("\n")));
    assert!(repeated.contains(&object), "{repeated}");
}
