//! Cluster mode on a node as production runs them: crilet.service in `hack/guest.sh`'s guest
//! (systemd as PID 1, cgroup v2, containerd 2.1) joins `hack/cluster.sh`'s control plane through
//! the guest's one way out (slirp's guestfwd to the host's API server), and API pods run, update
//! in place, resize and go under each cgroup driver: the pod's cgroup or slice is checked in the
//! guest, its status in the API. Under each driver too, the kubelet API's `/stats/summary` and
//! `/metrics/resource` agree with the cgroup v2 files read in the guest, and `memory.available`
//! (read from the v2 root) below a hard threshold evicts a BestEffort pod and puts the Node
//! under MemoryPressure.
//!
//! Ignored by a plain `cargo test`: they need `hack/guest.sh up` and `hack/cluster.sh`.
//! hack/test.sh's guest leg runs them with `--ignored --test-threads=1`.

mod common;

use common::summary::{num, sample, within};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::guest::{GUEST_KUBELET_PORT, Guest, NODE, SLOW, condition, runtime_driver_switch, wait_until};
use serde_json::Value;

/// A Guaranteed pod with a native sidecar: the pod's limits are the sum (600m, 80Mi).
fn web(namespace: &str, image: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: web, namespace: {namespace}}}
spec:
  nodeName: {NODE}
  terminationGracePeriodSeconds: 2
  initContainers:
  - name: side
    image: {image}
    restartPolicy: Always
    command: [sleep, "3600"]
    resources: {{limits: {{cpu: 100m, memory: 16Mi}}}}
  containers:
  - name: app
    image: {image}
    command: [sleep, "3600"]
    resources: {{limits: {{cpu: 500m, memory: 64Mi}}}}
"#
    )
}

/// The status of container `name` (init or regular) in an API pod.
fn cstatus(pod: &Value, name: &str) -> Value {
    ["initContainerStatuses", "containerStatuses"]
        .iter()
        .flat_map(|k| pod["status"][*k].as_array().cloned().unwrap_or_default())
        .find(|c| c["name"] == name)
        .unwrap_or(Value::Null)
}

fn id(pod: &Value, name: &str) -> String {
    cstatus(pod, name)["containerID"]
        .as_str()
        .unwrap_or_default()
        .trim_start_matches("containerd://")
        .to_string()
}

/// Waits until the API pod `web` satisfies `ok`; the pod.
fn wait_web(cluster: &Cluster, namespace: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    wait_until(what, SLOW, || cluster.get_json(&["pod", "-n", namespace, "web"]).filter(|p| ok(p)))
}

fn running_and_ready(p: &Value) -> bool {
    p["status"]["phase"] == "Running" && condition(p, "Ready")["status"] == "True"
}

/// One round on the driver in force: run, update the app's image, resize, delete; the pod's
/// cgroup (`pod_cgroup` of its UID) followed in the guest.
fn round(g: &Guest, cluster: &Cluster, namespace: &str, systemd: bool) {
    let busybox = g.env.get("CRILET_IMAGE_BUSYBOX");
    let web_v1 = busybox.replace("busybox:1.36", "web:v1");
    cluster.create(&web(namespace, &busybox));
    let before = wait_web(cluster, namespace, "the API pod Running and Ready", running_and_ready);
    let uid = before["metadata"]["uid"].as_str().expect("uid").to_string();
    let (pod, slice) = if systemd {
        let slice = format!("kubepods-pod{}.slice", uid.replace('-', "_"));
        (format!("/kubepods.slice/{slice}"), Some(slice))
    } else {
        (format!("/kubepods/pod{uid}"), None)
    };
    assert_eq!(g.cgroup_file(&pod, "cpu.max"), "60000 100000", "{pod}: the pod's cpu limit");
    assert_eq!(g.cgroup_file(&pod, "memory.max"), (80 << 20).to_string(), "{pod}: the pod's memory limit");
    if let Some(slice) = &slice {
        assert_eq!(g.ok(&format!("systemctl is-active {slice}")), "active");
    }
    let (side, app) = (id(&before, "side"), id(&before, "app"));
    let app_cgroup =
        |id: &str| if systemd { format!("{pod}/cri-containerd-{id}.scope") } else { format!("{pod}/{id}") };
    assert_eq!(g.cgroup_file(&app_cgroup(&app), "memory.max"), (64 << 20).to_string(), "the app's limit");

    // A new image for the app: it alone restarts, in the same pod (sandbox, cgroup).
    let patch = format!(r#"{{"spec":{{"containers":[{{"name":"app","image":"{web_v1}"}}]}}}}"#);
    cluster.kubectl_ok(&["patch", "pod", "-n", namespace, "web", "-p", &patch]);
    let updated = wait_web(cluster, namespace, "the app restarted on its new image", |p| {
        let s = cstatus(p, "app");
        s["image"].as_str().is_some_and(|i| i.ends_with("web:v1"))
            && s["ready"] == true
            && running_and_ready(p)
    });
    assert_ne!(id(&updated, "app"), app, "a new instance of the app");
    assert_eq!(cstatus(&updated, "app")["restartCount"], 1, "the app restarted once");
    assert_eq!(id(&updated, "side"), side, "the sidecar kept running");
    assert_eq!(cstatus(&updated, "side")["restartCount"], 0);
    let app = id(&updated, "app");
    assert_eq!(
        g.cgroup_file(&app_cgroup(&app), "memory.max"),
        (64 << 20).to_string(),
        "in the same pod cgroup"
    );

    // Resized through the subresource: the same instance, the new limits in the files.
    let resize = r#"{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"300m","memory":"96Mi"},"limits":{"cpu":"300m","memory":"96Mi"}}}]}}"#;
    cluster.kubectl_ok(&["patch", "pod", "-n", namespace, "web", "--subresource", "resize", "-p", resize]);
    let resized = wait_web(cluster, namespace, "the resize applied and reported", |p| {
        let pending = p["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter().any(|c| c["type"] == "PodResizeInProgress" || c["type"] == "PodResizePending")
        });
        cstatus(p, "app")["resources"]["limits"]["memory"] == "96Mi" && !pending
    });
    assert_eq!(id(&resized, "app"), app, "resized without a restart");
    assert_eq!(g.cgroup_file(&app_cgroup(&app), "memory.max"), (96 << 20).to_string(), "the app's new limit");
    assert_eq!(g.cgroup_file(&pod, "memory.max"), (112 << 20).to_string(), "the pod's new memory limit");
    assert_eq!(g.cgroup_file(&pod, "cpu.max"), "40000 100000", "the pod's new cpu limit");
    if let Some(slice) = &slice {
        assert_eq!(g.ok(&format!("systemctl show -p MemoryMax --value {slice}")), (112 << 20).to_string());
    }

    // Deleted: gone from the API once the node confirms, its cgroup (and slice) with it.
    cluster.kubectl_ok(&["delete", "pod", "-n", namespace, "web", "--wait=false"]);
    wait_until("the API pod deleted", SLOW, || {
        cluster.get_json(&["pod", "-n", namespace, "web"]).is_none().then_some(())
    });
    let gone = match &slice {
        Some(slice) => format!("! systemctl is-active --quiet {slice} && ! test -d /sys/fs/cgroup{pod}"),
        None => format!("! test -d /sys/fs/cgroup{pod}"),
    };
    g.wait("the pod's cgroup removed", SLOW, &gone);
}

/// What the `mem` container of [`load`] writes into its `/dev/shm` (the sandbox's tmpfs: shmem,
/// charged to its cgroup and never inactive file cache, so all of it working set; crilet's
/// `medium: Memory` emptyDir is a directory on disk, whose pages would be inactive file cache).
const HELD_MIB: u64 = 48;

/// A BestEffort pod holding [`HELD_MIB`] in its `/dev/shm` and burning a CPU.
fn load(namespace: &str, image: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: load, namespace: {namespace}}}
spec:
  nodeName: {NODE}
  terminationGracePeriodSeconds: 1
  containers:
  - name: mem
    image: {image}
    command: [sh, -c, 'dd if=/dev/zero of=/dev/shm/fill bs=1M count={HELD_MIB} 2>/dev/null; trap "exit 0" TERM; while true; do sleep 1; done']
  - name: burn
    image: {image}
    command: [sh, -c, 'trap "exit 0" TERM; while true; do :; done']
"#
    )
}

/// The guest's kubelet API, from the host: a unix socket forwarded to its port in the guest
/// (nothing else reaches it), its serving certificate verified with the cluster CA (it names
/// 127.0.0.1), as a ServiceAccount bound to `system:kubelet-api-admin` (the node has the API
/// server review the token and authorize each request, as for metrics-server).
struct KubeletApi {
    sock: PathBuf,
    ca: String,
    token: String,
    binding: String,
}

impl KubeletApi {
    fn new(g: &Guest, cluster: &Cluster, namespace: &str) -> KubeletApi {
        let binding = format!("{namespace}-kubelet-api");
        cluster.apply(&format!(
            r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{name: kubelet-reader, namespace: {namespace}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {binding}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:kubelet-api-admin"}}
subjects: [{{kind: ServiceAccount, name: kubelet-reader, namespace: {namespace}}}]
"#
        ));
        let token =
            cluster.kubectl_ok(&["-n", namespace, "create", "token", "kubelet-reader"]).trim().to_string();
        KubeletApi {
            sock: g.forward(GUEST_KUBELET_PORT),
            ca: cluster.get("CRILET_CLUSTER_CA"),
            token,
            binding,
        }
    }

    /// GET `path`: its body (200 required).
    fn get(&self, g: &Guest, path: &str) -> String {
        // The forward asked again: a no-op, unless the shared connection was made anew.
        assert_eq!(g.forward(GUEST_KUBELET_PORT), self.sock);
        let out = std::process::Command::new("curl")
            .args(["-sS", "--max-time", "60", "--unix-socket"])
            .arg(&self.sock)
            .args(["--cacert", &self.ca, "-H", &format!("Authorization: Bearer {}", self.token)])
            .args(["-w", "\n%{http_code}"])
            .arg(format!("https://127.0.0.1:{GUEST_KUBELET_PORT}{path}"))
            .output()
            .expect("run curl");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", ""));
        assert_eq!(
            code,
            "200",
            "GET {path} on the guest's kubelet API: {body}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        body.to_string()
    }

    fn summary(&self, g: &Guest) -> Value {
        serde_json::from_str(&self.get(g, "/stats/summary")).expect("the summary is JSON")
    }
}

/// A cgroup's files as the kubelet's stats read them on v2.
#[derive(Debug, Clone, Copy)]
struct CgroupUsage {
    current: u64,
    inactive_file: u64,
    /// `cpu.stat` `usage_usec`, in ns.
    cpu_ns: u64,
}

impl CgroupUsage {
    fn working_set(&self) -> u64 {
        self.current.saturating_sub(self.inactive_file)
    }
}

/// One look at the guest: the cgroups asked for, the root's `cpu.stat` (v2's root has no
/// `memory.current`) and `/proc/meminfo` (MemTotal, MemFree, Inactive(file), in bytes). Each
/// value is printed as the file has it (awk would print large numbers in floating point).
#[derive(Debug)]
struct Reading {
    cgroups: Vec<CgroupUsage>,
    root_cpu_ns: u64,
    meminfo: [u64; 3],
}

impl Reading {
    /// The node's working set as cadvisor reads the v2 root: used memory less inactive file.
    fn node_working_set(&self) -> u64 {
        let [total, free, inactive] = self.meminfo;
        (total - free).saturating_sub(inactive)
    }
}

fn read(g: &Guest, cgroups: &[&str]) -> Reading {
    let mut script = String::from(
        "r() { d=/sys/fs/cgroup$1; echo $(cat $d/memory.current) $(awk '$1 == \"inactive_file\" {print $2}' $d/memory.stat) $(awk '$1 == \"usage_usec\" {print $2}' $d/cpu.stat); }\n",
    );
    for cg in cgroups {
        script.push_str(&format!("r {cg}\n"));
    }
    script.push_str("awk '$1 == \"usage_usec\" {print $2}' /sys/fs/cgroup/cpu.stat\n");
    script.push_str("awk '$1 == \"MemTotal:\" || $1 == \"MemFree:\" || $1 == \"Inactive(file):\" {printf \"%s \", $2} END {print \"\"}' /proc/meminfo\n");
    let text = g.ok(&script);
    let lines: Vec<Vec<u64>> =
        text.lines().map(|l| l.split_whitespace().map(|w| w.parse().expect("a number")).collect()).collect();
    assert_eq!(lines.len(), cgroups.len() + 2, "one line per cgroup, the root, meminfo:\n{text}");
    let usage = |l: &[u64]| match l {
        [current, inactive_file, usec] => {
            CgroupUsage { current: *current, inactive_file: *inactive_file, cpu_ns: usec * 1000 }
        }
        _ => panic!("memory.current, inactive_file and usage_usec of each cgroup:\n{text}"),
    };
    let n = cgroups.len();
    let meminfo = match lines[n + 1][..] {
        [total, free, inactive] => [total << 10, free << 10, inactive << 10],
        _ => panic!("MemTotal, MemFree and Inactive(file) in /proc/meminfo:\n{text}"),
    };
    Reading {
        cgroups: lines[..n].iter().map(|l| usage(l)).collect(),
        root_cpu_ns: lines[n][0] * 1000,
        meminfo,
    }
}

/// `/stats/summary` and `/metrics/resource` against the cgroup v2 files of the [`load`] pod,
/// its containers, `kubepods` and the root, read in the guest just before and just after each
/// request: cumulative CPU between the two readings, working sets within 10 %. The pod stays,
/// for [`evict`].
fn stats(g: &Guest, cluster: &Cluster, namespace: &str, api: &KubeletApi, systemd: bool) {
    cluster.create(&load(namespace, &g.env.get("CRILET_IMAGE_BUSYBOX")));
    let pod = wait_until("the load pod Running and Ready", SLOW, || {
        cluster.get_json(&["pod", "-n", namespace, "load"]).filter(running_and_ready)
    });
    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_string();
    let (kubepods, pod_cg) = if systemd {
        let u = uid.replace('-', "_");
        (
            "/kubepods.slice",
            format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice"),
        )
    } else {
        ("/kubepods", format!("/kubepods/besteffort/pod{uid}"))
    };
    let container = |id: &str| {
        if systemd { format!("{pod_cg}/cri-containerd-{id}.scope") } else { format!("{pod_cg}/{id}") }
    };
    let (mem_cg, burn_cg) = (container(&id(&pod, "mem")), container(&id(&pod, "burn")));
    g.wait(
        "the mem container holding its /dev/shm",
        SLOW,
        &format!("[ \"$(cat /sys/fs/cgroup{mem_cg}/memory.current)\" -ge {} ]", HELD_MIB << 20),
    );
    let cgroups = [pod_cg.as_str(), mem_cg.as_str(), burn_cg.as_str(), kubepods];

    // The first collection gives no rates; the second, 2 s later, does.
    api.summary(g);
    std::thread::sleep(Duration::from_secs(2));
    let before = read(g, &cgroups);
    let s = api.summary(g);
    let after = read(g, &cgroups);
    let [pod_b, _, burn_b, _] = before.cgroups[..] else { unreachable!() };
    let [pod_a, mem_a, burn_a, kubepods_a] = after.cgroups[..] else { unreachable!() };

    assert_eq!(s["node"]["nodeName"], NODE);
    let node_cpu = num(&s["node"]["cpu"]["usageCoreNanoSeconds"]);
    assert!(
        (before.root_cpu_ns..=after.root_cpu_ns).contains(&node_cpu),
        "the node's cpu: {} <= {node_cpu} <= {} (the root's cpu.stat)",
        before.root_cpu_ns,
        after.root_cpu_ns
    );
    let nm = &s["node"]["memory"];
    within(num(&nm["workingSetBytes"]), after.node_working_set(), "the node's workingSetBytes", "the guest");
    within(
        num(&nm["availableBytes"]),
        after.meminfo[0] - after.node_working_set(),
        "the node's availableBytes",
        "the guest",
    );
    let system = s["node"]["systemContainers"].as_array().expect("system containers");
    let pods_sc = system.iter().find(|c| c["name"] == "pods").expect("the pods system container");
    within(
        num(&pods_sc["memory"]["workingSetBytes"]),
        kubepods_a.working_set(),
        "the pods' (kubepods) workingSetBytes",
        "the guest",
    );

    let p = common::summary::pod(&s, &namespace, "load");
    assert_eq!(p["podRef"]["uid"], uid.as_str());
    let c = |name: &str| common::summary::container(&p, name);
    let (mem, burn) = (c("mem"), c("burn"));
    let got = num(&mem["memory"]["workingSetBytes"]);
    within(got, mem_a.working_set(), "mem's workingSetBytes", "the guest");
    assert!(got >= HELD_MIB << 20, "mem holds {HELD_MIB} MiB, its working set is {got}");
    within(
        num(&p["memory"]["workingSetBytes"]),
        pod_a.working_set(),
        "the pod's workingSetBytes",
        "the guest",
    );
    let got = num(&burn["cpu"]["usageCoreNanoSeconds"]);
    assert!(
        (burn_b.cpu_ns..=burn_a.cpu_ns).contains(&got),
        "burn: {} <= {got} <= {}",
        burn_b.cpu_ns,
        burn_a.cpu_ns
    );
    let got = num(&p["cpu"]["usageCoreNanoSeconds"]);
    assert!(
        (pod_b.cpu_ns..=pod_a.cpu_ns).contains(&got),
        "the pod: {} <= {got} <= {}",
        pod_b.cpu_ns,
        pod_a.cpu_ns
    );
    // The burner's rate: loose, TCG shares the host's two cores with everything else.
    let cores = num(&burn["cpu"]["usageNanoCores"]);
    assert!(cores > 200_000_000, "the burner's usageNanoCores is {cores}");

    // /metrics/resource: the same numbers under the kubelet's names.
    let before = read(g, &cgroups);
    let text = api.get(g, "/metrics/resource");
    let after = read(g, &cgroups);
    let labels = |c: &str| format!("{{container=\"{c}\",namespace=\"{namespace}\",pod=\"load\"}}");
    let secs = sample(&text, &format!("container_cpu_usage_seconds_total{}", labels("burn")))
        .unwrap_or_else(|| panic!("no burn cpu in\n{text}"));
    let (b, a) = (before.cgroups[2].cpu_ns as f64 / 1e9, after.cgroups[2].cpu_ns as f64 / 1e9);
    assert!(
        (b - 1e-6..=a + 1e-6).contains(&secs),
        "burn's cpu seconds {secs} not within the cgroup's {b}..{a}"
    );
    let ws = sample(&text, &format!("container_memory_working_set_bytes{}", labels("mem")))
        .unwrap_or_else(|| panic!("no mem working set in\n{text}"));
    within(
        ws as u64,
        after.cgroups[1].working_set(),
        "container_memory_working_set_bytes of mem",
        "the guest",
    );
    let pod_labels = format!("{{namespace=\"{namespace}\",pod=\"load\"}}");
    let ws = sample(&text, &format!("pod_memory_working_set_bytes{pod_labels}"))
        .unwrap_or_else(|| panic!("no pod working set in\n{text}"));
    within(ws as u64, after.cgroups[0].working_set(), "pod_memory_working_set_bytes", "the guest");
    let ws = sample(&text, "node_memory_working_set_bytes")
        .unwrap_or_else(|| panic!("no node working set in\n{text}"));
    within(ws as u64, after.node_working_set(), "node_memory_working_set_bytes", "the guest");
    let secs =
        sample(&text, "node_cpu_usage_seconds_total").unwrap_or_else(|| panic!("no node cpu in\n{text}"));
    let (b, a) = (before.root_cpu_ns as f64 / 1e9, after.root_cpu_ns as f64 / 1e9);
    assert!((b - 1e-6..=a + 1e-6).contains(&secs), "node cpu seconds {secs} not within the root's {b}..{a}");
    assert_eq!(sample(&text, "resource_scrape_error"), Some(0.0), "{text}");
}

/// crilet restarted with `memory.available<` above what the guest has available (MemTotal less
/// the working set, from /proc/meminfo read just before; below MemTotal while the node's
/// working set is over 128 MiB, so only a working set read from the v2 root meets it): the
/// BestEffort [`load`] pod is evicted as the kubelet does and the Node is under MemoryPressure,
/// tainted. The pod is then deleted; the threshold stays until the flags change again.
fn evict(g: &Guest, cluster: &Cluster, namespace: &str) {
    let now = read(g, &[]);
    let available_mib = (now.meminfo[0] - now.node_working_set()) >> 20;
    let threshold = format!("memory.available<{}Mi", available_mib + 128);
    g.ok(&format!(
        "sed -i '/^ExecStart=\\/usr/ s|$| --eviction-hard {threshold}|' /run/systemd/system/crilet.service.d/cluster.conf && systemctl daemon-reload && systemctl restart crilet"
    ));
    let evicted = wait_until("the load pod evicted", SLOW, || {
        cluster.get_json(&["pod", "-n", namespace, "load"]).filter(|p| p["status"]["phase"] == "Failed")
    });
    assert_eq!(evicted["status"]["reason"], "Evicted", "{}", evicted["status"]);
    let message = evicted["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("The node was low on resource: memory. Threshold quantity: "),
        "the kubelet's message: {message}"
    );
    assert_eq!(condition(&evicted, "DisruptionTarget")["status"], "True", "{}", evicted["status"]);
    wait_until("MemoryPressure and its taint on the Node", SLOW, || {
        let n = cluster.get_json(&["node", NODE])?;
        let tainted = n["spec"]["taints"].as_array().is_some_and(|t| {
            t.iter().any(|t| t["key"] == "node.kubernetes.io/memory-pressure" && t["effect"] == "NoSchedule")
        });
        (condition(&n, "MemoryPressure")["status"] == "True" && tainted).then_some(())
    });
    cluster.kubectl_ok(&["delete", "pod", "-n", namespace, "load", "--wait=false"]);
    wait_until("the evicted pod deleted", SLOW, || {
        cluster.get_json(&["pod", "-n", namespace, "load"]).is_none().then_some(())
    });
}

/// The drop-in's ExecStart without [`evict`]'s threshold (the agent's start follows).
const NO_THRESHOLD: &str = "sed -i 's| --eviction-hard memory.available<[0-9]*Mi||' /run/systemd/system/crilet.service.d/cluster.conf";

#[test]
#[ignore = "needs hack/guest.sh up and hack/cluster.sh (hack/test.sh's guest leg)"]
fn api_pods_run_update_resize_and_go_under_both_cgroup_drivers() {
    let g = Guest::fresh();
    let (cluster, namespace) = g.join("");
    let node = cluster.get_json(&["node", NODE]).expect("the guest's Node");
    assert_eq!(
        node["status"]["nodeInfo"]["containerRuntimeVersion"]
            .as_str()
            .map(|v| v.starts_with("containerd://2.1")),
        Some(true)
    );
    let api = KubeletApi::new(&g, &cluster, &namespace);
    round(&g, &cluster, &namespace, false);
    let t = Instant::now();
    stats(&g, &cluster, &namespace, &api, false);
    let stats_s = t.elapsed().as_secs_f64();
    evict(&g, &cluster, &namespace);
    eprintln!("cgroupfs: stats {stats_s:.1} s, eviction {:.1} s", t.elapsed().as_secs_f64() - stats_s);

    // containerd on the systemd driver; crilet follows what it reports (CRI RuntimeConfig),
    // started without the threshold: no pressure, which a new agent reports at once.
    g.ok(&runtime_driver_switch(true, NO_THRESHOLD));
    wait_until("the Node Ready again, without MemoryPressure", SLOW, || {
        cluster.get_json(&["node", NODE]).filter(|n| {
            condition(n, "Ready")["status"] == "True" && condition(n, "MemoryPressure")["status"] == "False"
        })
    });
    round(&g, &cluster, &namespace, true);
    let t = Instant::now();
    stats(&g, &cluster, &namespace, &api, true);
    let stats_s = t.elapsed().as_secs_f64();
    evict(&g, &cluster, &namespace);
    eprintln!("systemd: stats {stats_s:.1} s, eviction {:.1} s", t.elapsed().as_secs_f64() - stats_s);
    // The next test's Guest::fresh takes the drop-in (and the threshold) away.
    cluster.kubectl_ok(&["delete", "clusterrolebinding", &api.binding]);
    cluster.kubectl_ok(&["delete", "namespace", &namespace, "--wait=false"]);
}
