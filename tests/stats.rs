//! The kubelet API's resource statistics on the real containerd and control plane (issue 37,
//! part 1): a static pod with a container holding a known amount of memory and one burning CPU;
//! `/stats/summary` and `/metrics/resource`, fetched through the API server's node proxy (so
//! over the kubelet API's TLS with its authentication and `nodes/stats`, `nodes/metrics`
//! authorization), agree with the pod's and containers' own cgroup files, read here directly;
//! `/pods` lists the pod and `/configz` parses.

mod common;

use common::summary::{num, sample, within};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::cluster::Node;
use common::*;
use serde_json::Value;

/// What the `mem` container holds in its `/dev/shm` (shmem: charged to its cgroup, never
/// reclaimable as inactive file cache, so all of it is working set).
const HELD: u64 = 48 << 20;

fn manifest(namespace: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: stats-load
  namespace: {namespace}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: scratch
    emptyDir: {{}}
  containers:
  - name: mem
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, 'head -c {HELD} /dev/zero > /dev/shm/fill; echo 0123456789 > /scratch/file; echo HELD; trap "exit 0" TERM; while true; do sleep 1; done']
    volumeMounts: [{{name: scratch, mountPath: /scratch}}]
  - name: burn
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, 'trap "exit 0" TERM; while true; do :; done']
"#
    )
}

/// The cgroup directory (below `tree`) whose name holds `needle`, searched from `tree`'s
/// `kubepods` parent, whichever driver named it.
fn find_cgroup(tree: &Path, needle: &str) -> Option<PathBuf> {
    let mut stack: Vec<PathBuf> = std::fs::read_dir(tree)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("kubepods")))
        .collect();
    while let Some(d) = stack.pop() {
        if d.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.contains(needle)) {
            return Some(d);
        }
        if let Ok(entries) = std::fs::read_dir(&d) {
            stack.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
        }
    }
    None
}

/// A cgroup's files, read the way the kubelet's stats define them (v1 or v2).
struct CgroupFiles {
    v2: bool,
    memory: PathBuf,
    cpu: PathBuf,
}

impl CgroupFiles {
    fn of(needle: &str) -> CgroupFiles {
        let root = Path::new("/sys/fs/cgroup");
        let v2 = root.join("cgroup.controllers").exists();
        let (memory_tree, cpu_tree) = if v2 {
            (root.to_path_buf(), root.to_path_buf())
        } else {
            (root.join("memory"), root.join("cpuacct"))
        };
        let memory =
            find_cgroup(&memory_tree, needle).unwrap_or_else(|| panic!("no memory cgroup holding {needle}"));
        let cpu = find_cgroup(&cpu_tree, needle).unwrap_or_else(|| panic!("no cpu cgroup holding {needle}"));
        CgroupFiles { v2, memory, cpu }
    }

    fn read(path: PathBuf) -> String {
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn stat(text: &str, key: &str) -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Usage less the inactive file cache.
    fn working_set(&self) -> u64 {
        let (usage, inactive) = match self.v2 {
            true => ("memory.current", "inactive_file"),
            false => ("memory.usage_in_bytes", "total_inactive_file"),
        };
        let usage: u64 = Self::read(self.memory.join(usage)).trim().parse().expect("usage");
        usage.saturating_sub(Self::stat(&Self::read(self.memory.join("memory.stat")), inactive))
    }

    /// Cumulative CPU time, ns.
    fn cpu_ns(&self) -> u64 {
        match self.v2 {
            true => Self::stat(&Self::read(self.cpu.join("cpu.stat")), "usage_usec") * 1000,
            false => Self::read(self.cpu.join("cpuacct.usage")).trim().parse().expect("cpuacct.usage"),
        }
    }
}

/// What metrics-server's role grants (and `/pods`, `/configz`): a ServiceAccount of the test's
/// namespace bound to it; its token.
fn reader_token(node: &Node) -> String {
    let role = format!("{}-reader", node.name);
    node.cluster.apply(&format!(
        r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{name: stats-reader, namespace: {ns}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {role}}}
rules:
- apiGroups: [""]
  resources: [nodes/stats, nodes/metrics, nodes/pods, nodes/configz, nodes/proxy]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {role}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}}}
subjects: [{{kind: ServiceAccount, name: stats-reader, namespace: {ns}}}]
"#,
        ns = node.namespace
    ));
    node.cluster.kubectl_ok(&["-n", &node.namespace, "create", "token", "stats-reader"]).trim().to_string()
}

/// GET `path` on the node's kubelet API over HTTPS (the cluster CA verifies its serving
/// certificate) with `token`, if any: (HTTP status, body).
fn get(node: &Node, token: Option<&str>, path: &str) -> (u16, String) {
    let mut cmd = std::process::Command::new("curl");
    cmd.args([
        "-sS",
        "--max-time",
        "30",
        "--cacert",
        &node.identity["CRILET_CLUSTER_CA"],
        "-w",
        "\n%{http_code}",
    ]);
    if let Some(t) = token {
        cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    let out = cmd.arg(format!("https://127.0.0.1:{}{path}", node.port)).output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", ""));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

fn raw(node: &Node, token: &str, path: &str) -> String {
    let (code, body) = get(node, Some(token), path);
    assert_eq!(code, 200, "GET {path}: {body}");
    body
}

fn summary(node: &Node, token: &str) -> Value {
    serde_json::from_str(&raw(node, token, "/stats/summary")).expect("the summary is JSON")
}

#[tokio::test(flavor = "multi_thread")]
async fn stats_agree_with_the_cgroup_files() {
    // emptyDir volumes measured every 2 s (the kubelet's --volume-stats-agg-period).
    let node = Node::start("stats", 10278, &["--volume-stats-agg-period", "2s"]).await;
    node.wait_ready().await;
    let ns = node.namespace.clone();
    node.agent.write_manifest("load.yaml", &manifest(&ns));
    let p = printed_before(&node.agent, &ns, "stats-load", "mem", "HELD").await;
    drop(p);
    let pod = running_pod(&node.agent, "stats-load").await;
    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_string();
    let burn_id = container_id(&pod, "burn").expect("burn's ID");
    let mem_id = container_id(&pod, "mem").expect("mem's ID");
    // The pod cgroup's name holds the UID (cgroupfs) or the UID with `_` (systemd).
    let pod_cg = CgroupFiles::of(&if Path::new("/sys/fs/cgroup/memory/kubepods.slice").exists()
        || Path::new("/sys/fs/cgroup/kubepods.slice").exists()
    {
        uid.replace('-', "_")
    } else {
        uid.clone()
    });
    let burn_cg = CgroupFiles::of(&burn_id);
    let mem_cg = CgroupFiles::of(&mem_id);

    // Two collections a few seconds apart: the second has the rates. The cumulative CPU the
    // summary gives lies between the cgroup's before and after.
    let token = reader_token(&node);
    let (code, _) = get(&node, None, "/stats/summary");
    assert_eq!(code, 401, "no credentials, no stats");
    // The runtime's numbers (writable layers, networks) and the disks are read in the
    // background (every 10 s, the volumes every 2 s): wait until the pod's are in.
    let _first =
        wait_for("stats-load's disks and network in the summary", Duration::from_secs(40), || async {
            let s = summary(&node, &token);
            let p = s["pods"].as_array()?.iter().find(|p| p["podRef"]["uid"] == uid.as_str())?.clone();
            let scratch =
                p["volume"].as_array()?.iter().find(|v| v["name"] == "scratch")?["usedBytes"].as_u64()?;
            let measured =
                p["containers"].as_array()?.iter().all(|c| c["rootfs"].is_object() && c["logs"].is_object());
            (scratch > 0 && measured && p["network"].is_object()).then_some(s)
        })
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (burn_before, pod_before) = (burn_cg.cpu_ns(), pod_cg.cpu_ns());
    let s = summary(&node, &token);
    let (burn_after, pod_after) = (burn_cg.cpu_ns(), pod_cg.cpu_ns());
    let (mem_ws, pod_ws) = (mem_cg.working_set(), pod_cg.working_set());

    assert_eq!(s["node"]["nodeName"], node.name.as_str());
    for field in ["usageNanoCores", "usageCoreNanoSeconds"] {
        assert!(s["node"]["cpu"][field].as_u64().is_some(), "node cpu {field}: {}", s["node"]);
    }
    let nm = &s["node"]["memory"];
    assert!(num(&nm["workingSetBytes"]) > 0 && num(&nm["workingSetBytes"]) <= num(&nm["usageBytes"]), "{nm}");
    assert!(num(&nm["availableBytes"]) > 0, "{nm}");
    assert!(num(&s["node"]["fs"]["capacityBytes"]) > 0, "{}", s["node"]["fs"]);
    assert!(num(&s["node"]["runtime"]["imageFs"]["usedBytes"]) > 0, "{}", s["node"]["runtime"]);
    assert!(num(&s["node"]["rlimit"]["maxpid"]) > 0 && num(&s["node"]["rlimit"]["curproc"]) > 0);
    let pods_sc = s["node"]["systemContainers"].as_array().expect("system containers");
    assert!(
        pods_sc.iter().any(|c| c["name"] == "pods" && c["memory"]["workingSetBytes"].is_u64()),
        "{pods_sc:?}"
    );

    let p = common::summary::pod(&s, ns.as_str(), "stats-load");
    assert_eq!(p["podRef"]["uid"], uid.as_str());
    let c = |name: &str| common::summary::container(&p, name);
    let (burn, mem) = (c("burn"), c("mem"));

    // Memory: the working set of the container and of the pod, as their cgroup files give it.
    let got_mem = num(&mem["memory"]["workingSetBytes"]);
    within(got_mem, mem_ws, "mem's workingSetBytes", "the cgroup");
    assert!(got_mem >= HELD, "mem holds {HELD} bytes, its working set is {got_mem}");
    within(num(&p["memory"]["workingSetBytes"]), pod_ws, "the pod's workingSetBytes", "the cgroup");

    // CPU: cumulative between the cgroup's readings; the burner keeps more than half a core.
    let got_burn = num(&burn["cpu"]["usageCoreNanoSeconds"]);
    assert!(
        (burn_before..=burn_after).contains(&got_burn),
        "burn: {burn_before} <= {got_burn} <= {burn_after}"
    );
    let got_pod = num(&p["cpu"]["usageCoreNanoSeconds"]);
    assert!((pod_before..=pod_after).contains(&got_pod), "pod: {pod_before} <= {got_pod} <= {pod_after}");
    let cores = num(&burn["cpu"]["usageNanoCores"]);
    assert!(cores > 500_000_000, "the burner's usageNanoCores is {cores}");
    assert!(num(&p["cpu"]["usageNanoCores"]) >= cores / 2, "the pod's rate covers its burner: {}", p["cpu"]);

    // Disks: the emptyDir, the logs, the writable layers, and their sum.
    let scratch = p["volume"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "scratch")
        .cloned()
        .expect("scratch");
    assert!(num(&scratch["usedBytes"]) > 0, "{scratch}");
    // Read in the background, each with the time it was read: the disks at the last
    // housekeeping (every 10 s, which walks what is due), the writable layer at the runtime's
    // own sampling (containerd's, every 10 s) before that; times are whole seconds.
    let time = |v: &Value| {
        v.as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok()).unwrap_or_else(|| panic!("a time: {v}"))
    };
    let now = time(&s["node"]["cpu"]["time"]);
    for (what, t, oldest) in [
        ("scratch", &scratch["time"], 12),
        ("mem's logs", &mem["logs"]["time"], 12),
        ("mem's rootfs", &mem["rootfs"]["time"], 22),
    ] {
        let age = now.duration_since(time(t)).as_secs();
        assert!((0..=oldest).contains(&age), "{what} was read {age} s before the summary's {now}: {t}");
    }
    assert!(mem["logs"]["usedBytes"].is_u64() && mem["rootfs"]["usedBytes"].is_u64(), "{mem}");
    assert!(
        num(&p["ephemeral-storage"]["usedBytes"]) >= num(&scratch["usedBytes"]),
        "{}",
        p["ephemeral-storage"]
    );
    assert!(burn["startTime"].as_str().is_some_and(|t| t.ends_with('Z')), "{burn}");
    assert!(p["network"]["time"].as_str().is_some_and(|t| !t.starts_with("1970")), "{}", p["network"]);

    // /metrics/resource: the kubelet's names and labels, the same numbers.
    let before = burn_cg.cpu_ns();
    let text = raw(&node, &token, "/metrics/resource");
    let after = burn_cg.cpu_ns();
    let labels = |c: &str| format!("{{container=\"{c}\",namespace=\"{ns}\",pod=\"stats-load\"}}");
    let burn_s = sample(&text, &format!("container_cpu_usage_seconds_total{}", labels("burn")))
        .unwrap_or_else(|| panic!("no burn cpu in\n{text}"));
    assert!(
        (before as f64 / 1e9 - 1e-6..=after as f64 / 1e9 + 1e-6).contains(&burn_s),
        "burn's cpu seconds {burn_s} not within the cgroup's {before}..{after} ns"
    );
    let mem_b = sample(&text, &format!("container_memory_working_set_bytes{}", labels("mem")))
        .unwrap_or_else(|| panic!("no mem working set in\n{text}"));
    within(mem_b as u64, mem_cg.working_set(), "container_memory_working_set_bytes", "the cgroup");
    let pod_labels = format!("{{namespace=\"{ns}\",pod=\"stats-load\"}}");
    for series in [
        format!("pod_cpu_usage_seconds_total{pod_labels}"),
        format!("pod_memory_working_set_bytes{pod_labels}"),
        format!("container_start_time_seconds{}", labels("burn")),
        "node_cpu_usage_seconds_total".to_string(),
        "node_memory_working_set_bytes".to_string(),
    ] {
        assert!(sample(&text, &series).is_some_and(|v| v > 0.0), "{series} in\n{text}");
    }
    assert_eq!(sample(&text, "resource_scrape_error"), Some(0.0), "{text}");
    assert!(text.contains("# TYPE container_cpu_usage_seconds_total counter"), "{text}");

    // /pods and /configz.
    let pods: Value = serde_json::from_str(&raw(&node, &token, "/pods")).expect("/pods is JSON");
    assert_eq!(pods["kind"], "PodList");
    let listed = pods["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|p| p["metadata"]["name"] == "stats-load")
        .cloned();
    let listed = listed.unwrap_or_else(|| panic!("stats-load not in /pods: {pods}"));
    assert_eq!(listed["status"]["phase"], "Running");
    let configz: Value = serde_json::from_str(&raw(&node, &token, "/configz")).expect("/configz is JSON");
    assert_eq!(configz["kubeletconfig"]["port"], 10278, "{configz}");
    assert_eq!(configz["kubeletconfig"]["enableServer"], true, "{configz}");
    node.agent.remove_manifest("load.yaml");
    let _ =
        node.cluster.kubectl(&["delete", "clusterrole,clusterrolebinding", &format!("{}-reader", node.name)]);
}
