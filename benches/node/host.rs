//! What a kubelet run by a benchmark leaves on the host, and how it goes: its cgroup root in
//! every cgroup v1 hierarchy, the mounts under its root directory, the stopped pods it leaves
//! for its garbage collection, its iptables chains. Shared by the node benchmark's standalone
//! kubelet and the cluster benchmarks' joined one.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crilet::cri::CriClient;
use crilet::model::keys;

/// The kubelet's cgroup root (made in every v1 hierarchy before it starts; removed after).
pub const KUBELET_CGROUP_ROOT: &str = "/crilet-bench-kubelet";

/// The part of a benchmark kubelet's configuration that is the same wherever it runs: cgroupfs
/// on cgroup v1 under [`KUBELET_CGROUP_ROOT`] (its orphaned-pod-cgroup cleanup then never
/// reaches /kubepods), no image GC or eviction (a benchmark must not lose its images to a full
/// disk), pod logs in `logs`.
pub fn kubelet_node_config(endpoint: &str, logs: &Path) -> String {
    format!(
        r#"containerRuntimeEndpoint: {endpoint}
cgroupDriver: cgroupfs
cgroupRoot: {KUBELET_CGROUP_ROOT}
cgroupsPerQOS: true
enforceNodeAllocatable: ["none"]
failCgroupV1: false
failSwapOn: false
podLogsDir: {logs}
resolvConf: /etc/resolv.conf
maxPods: 110
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {{memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}}
protectKernelDefaults: false
"#,
        logs = logs.display(),
    )
}

/// Pods of the runtime outside namespace `ns` that run: the kubelet would kill them.
pub async fn foreign_pods(cri: &CriClient, ns: &str) -> Vec<String> {
    let Ok((sandboxes, _)) = cri.list_all(None).await else { return vec![] };
    sandboxes
        .iter()
        .filter(|s| s.state == crilet::cri::api::PodSandboxState::SandboxReady as i32)
        .filter_map(|s| {
            let pod_ns = s.labels.get(keys::POD_NAMESPACE).map(String::as_str).unwrap_or("");
            (pod_ns != ns).then(|| {
                format!("{pod_ns}/{}", s.labels.get(keys::POD_NAME).map(String::as_str).unwrap_or("?"))
            })
        })
        .collect()
}

/// Removes what the runtime still has of namespace `ns`'s pods (the kubelet leaves stopped
/// sandboxes and containers for its periodic garbage collection).
pub async fn remove_runtime_leftovers(cri: &CriClient, ns: &str) {
    let Ok((sandboxes, containers)) = cri.list_all(Some((keys::POD_NAMESPACE, ns))).await else { return };
    for c in containers {
        let _ = cri.stop_container(&c.id, Duration::ZERO).await;
        let _ = cri.remove_container(&c.id).await;
    }
    for s in sandboxes {
        let _ = cri.stop_sandbox(&s.id).await;
        let _ = cri.remove_sandbox(&s.id).await;
    }
}

/// Makes (or removes, leaves first) the kubelet's cgroup root in every cgroup v1 hierarchy.
pub fn cgroup_root(make: bool) {
    let Ok(rd) = std::fs::read_dir("/sys/fs/cgroup") else { return };
    for h in rd.flatten() {
        let hier = h.path();
        if hier.file_name().is_some_and(|n| n == "unified") || !hier.join("cgroup.procs").exists() {
            continue;
        }
        let dir = hier.join(KUBELET_CGROUP_ROOT.trim_start_matches('/'));
        if make {
            let _ = std::fs::create_dir_all(&dir);
        } else {
            remove_cgroup_tree(&dir);
        }
    }
}

fn remove_cgroup_tree(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Unmounts whatever is mounted under `dir` (the kubelet's token and secret tmpfs volumes, if
/// a pod's were left), deepest first.
pub fn unmount_under(dir: &Path) {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else { return };
    let mut points: Vec<&str> =
        text.lines().filter_map(|l| l.split(' ').nth(4)).filter(|p| Path::new(p).starts_with(dir)).collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        let _ = Command::new("umount").args(["-l", p]).status();
    }
}

/// Removes an agent's directory, its mounts first.
pub fn clean_dir(dir: &Path) {
    unmount_under(dir);
    let _ = std::fs::remove_dir_all(dir);
}

/// The iptables chains named `KUBE-*` in each table the kubelet writes (both address families),
/// as (command, table, chain).
type Chains = BTreeSet<(&'static str, &'static str, String)>;

const IPTABLES: [&str; 2] = ["iptables", "ip6tables"];
const TABLES: [&str; 3] = ["filter", "nat", "mangle"];

/// The `KUBE-*` chains there were before the first kubelet of this run started.
static CHAINS_BEFORE: OnceLock<Chains> = OnceLock::new();

fn rules(cmd: &str, table: &str) -> Vec<String> {
    Command::new(cmd)
        .args(["-w", "-t", table, "-S"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().map(str::to_string).collect())
        .unwrap_or_default()
}

fn kube_chains() -> Chains {
    let mut chains = Chains::new();
    for cmd in IPTABLES {
        for table in TABLES {
            for r in rules(cmd, table) {
                if let Some(chain) = r.strip_prefix("-N ").filter(|c| c.starts_with("KUBE-")) {
                    chains.insert((cmd, table, chain.to_string()));
                }
            }
        }
    }
    chains
}

/// Notes the `KUBE-*` chains there are before a kubelet starts (once per run).
pub fn note_kube_chains() {
    CHAINS_BEFORE.get_or_init(kube_chains);
}

/// Removes the `KUBE-*` chains a kubelet of this run made (its canary chains, KUBE-FIREWALL and
/// the INPUT/OUTPUT rules that jump to it, KUBE-IPTABLES-HINT): the rules that jump to them
/// first, then the chains. Chains that were there before are left alone.
pub fn remove_new_kube_chains() {
    let Some(before) = CHAINS_BEFORE.get() else { return };
    let made: Vec<_> = kube_chains().difference(before).cloned().collect();
    let run = |cmd: &str, table: &str, args: &[&str]| {
        let _ = Command::new(cmd).args(["-w", "-t", table]).args(args).status();
    };
    for (cmd, table, chain) in &made {
        let jump = format!(" -j {chain}");
        for r in rules(cmd, table) {
            let Some(rule) = r.strip_prefix("-A ") else { continue };
            let from = rule.split(' ').next().unwrap_or("");
            if from != chain.as_str() && (rule.ends_with(&jump) || rule.contains(&format!("{jump} "))) {
                // `-S` prints a rule as shell words (a comment is quoted): a shell splits it back.
                let line = format!("{cmd} -w -t {table} -D {rule}");
                let _ = Command::new("sh").args(["-c", &line]).status();
            }
        }
    }
    for (cmd, table, chain) in &made {
        run(cmd, table, &["-F", chain]);
    }
    for (cmd, table, chain) in &made {
        run(cmd, table, &["-X", chain]);
    }
}
