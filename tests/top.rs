//! `kubectl top` and a HorizontalPodAutoscaler against a crilet node (issue 37 part 2), with the
//! real metrics-server (built from its Go module, run by `hack/cluster.sh metrics-server` on
//! 127.0.0.1, behind the aggregated APIService v1beta1.metrics.k8s.io). metrics-server scrapes
//! the node's `/metrics/resource` over TLS (verified against the cluster CA).
//!
//! One Deployment does it all: its pod fills 40 MiB of its /dev/shm (memory the cgroup keeps, so
//! the number is stable) and burns CPU (limit 800m) until the test creates `stop` in a hostPath
//! directory. `kubectl top pod` must show > 0.5 core and the pod cgroup's working set within
//! 10 %; `kubectl top node` the node's working set (as cadvisor reads it) within 10 %. An HPA
//! (cpu 50 % of the 100m request, stabilization 0) then scales it to 2 while it burns and back
//! to 1 once the burn stops.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::cluster::Node;
use common::kubectl_top::{top_row, within, working_set};
use serde_json::Value;
use testkit::poll_until;

const PORT: u16 = 10279;
const APISERVICE: &str = "v1beta1.metrics.k8s.io";
const MI: f64 = 1024.0 * 1024.0;

/// `hack/cluster.sh metrics-server`: builds and starts metrics-server (or keeps it) and waits
/// for its APIService to be Available; its `KEY=VALUE` lines.
fn metrics_server() -> std::collections::HashMap<String, String> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("hack/cluster.sh");
    let out = Command::new("bash").arg(script).arg("metrics-server").output().expect("hack/cluster.sh");
    assert!(
        out.status.success(),
        "hack/cluster.sh metrics-server: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// GET `path` of metrics-server with the cluster CA (its health endpoints need no credentials).
fn metrics_server_get(cluster: &common::cluster::Cluster, url: &str, path: &str) -> (bool, String) {
    let out = Command::new("curl")
        .args(["-sS", "--noproxy", "*", "--max-time", "5", "--cacert"])
        .arg(cluster.get("CRILET_CLUSTER_CA"))
        .arg(format!("{url}{path}"))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    (out.status.success(), text)
}

/// The working set of a memory cgroup (`rel` below the hierarchy's root, "" for the root), as
/// the kubelet computes it: usage less the inactive file cache.
fn cgroup_working_set(rel: &str) -> Option<u64> {
    let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let dir =
        if v2 { Path::new("/sys/fs/cgroup").join(rel) } else { Path::new("/sys/fs/cgroup/memory").join(rel) };
    working_set(&dir, v2)
}

/// The node's working set as cadvisor reads it: the root memory cgroup's on v1; on v2 (no
/// memory.current at the root) `/proc/meminfo`'s `MemTotal - MemFree - Inactive(file)`.
fn node_working_set() -> Option<u64> {
    if !Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        return cgroup_working_set("");
    }
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb = |k: &str| -> Option<u64> {
        info.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix(':')?.split_whitespace().next()?.parse().ok())
    };
    Some((kb("MemTotal")? - kb("MemFree")?).saturating_sub(kb("Inactive(file)")?) * 1024)
}

/// The pod cgroup of a Burstable pod (cgroupfs driver, the host's).
fn pod_working_set(uid: &str) -> Option<u64> {
    cgroup_working_set(&format!("kubepods/burstable/pod{uid}"))
}

fn deployment(node: &Node, ctl: &Path) -> String {
    node.agent.env.render(&format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: burn}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: burn}}}}
  template:
    metadata: {{labels: {{app: burn}}}}
    spec:
      nodeSelector: {{crilet.io/test: {node}}}
      terminationGracePeriodSeconds: 1
      containers:
      - name: burn
        image: ${{CRILET_IMAGE_BUSYBOX}}
        command: [sh, -c, 'dd if=/dev/zero of=/dev/shm/fill bs=1M count=40 2>/dev/null; while [ ! -e /ctl/stop ]; do :; done; exec sleep 3600']
        resources:
          requests: {{cpu: 100m, memory: 64Mi}}
          limits: {{cpu: 800m, memory: 128Mi}}
        volumeMounts: [{{name: ctl, mountPath: /ctl}}]
      volumes:
      - name: ctl
        hostPath: {{path: "{ctl}", type: Directory}}
"#,
        node = node.name,
        ctl = ctl.display(),
    ))
}

const HPA: &str = r#"
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: burn}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: burn}
  minReplicas: 1
  maxReplicas: 2
  metrics:
  - type: Resource
    resource:
      name: cpu
      target: {type: Utilization, averageUtilization: 50}
  behavior:
    scaleUp: {stabilizationWindowSeconds: 0}
    scaleDown:
      stabilizationWindowSeconds: 0
      policies: [{type: Percent, value: 100, periodSeconds: 15}]
"#;

/// The Deployment's (spec replicas, ready replicas).
fn replicas(node: &Node) -> Option<(u64, u64)> {
    let d = node.cluster.get_json(&["deployment", "-n", &node.namespace, "burn"])?;
    Some((d["spec"]["replicas"].as_u64()?, d["status"]["readyReplicas"].as_u64().unwrap_or(0)))
}

#[tokio::test]
async fn kubectl_top_and_an_hpa_work_on_a_crilet_node() {
    let ms = metrics_server();
    let url = ms["METRICS_SERVER_URL"].clone();
    let node = Node::start("top", PORT, &[]).await;
    let cluster = &node.cluster;
    let available = cluster.get_json(&["apiservice", APISERVICE]).expect("the APIService");
    assert_eq!(
        available["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Available"))
            .map(|c| c["status"].clone()),
        Some(Value::from("True")),
        "APIService {APISERVICE}: {available}"
    );
    assert_eq!(metrics_server_get(cluster, &url, "/livez"), (true, "ok".to_string()));
    node.wait_ready().await;

    let ctl = std::env::temp_dir().join(format!("crilet-top-{}", node.namespace));
    std::fs::create_dir_all(&ctl).expect("control directory");
    let _ = std::fs::remove_file(ctl.join("stop"));
    node.apply(&deployment(&node, &ctl));
    let (ok, out, err) = node.kubectl(&["rollout", "status", "deployment/burn", "--timeout=90s"]);
    assert!(ok, "rollout: {out}{err}\n{}", node.agent.log());
    let pods = cluster.get_json(&["pods", "-n", &node.namespace, "-l", "app=burn"]).expect("pods");
    let pod = &pods["items"][0];
    let (pod_name, uid) =
        (pod["metadata"]["name"].as_str().unwrap(), pod["metadata"]["uid"].as_str().unwrap());

    // kubectl top pod: the burner's cpu, and its memory beside its cgroup's working set, read
    // at the same moment (metrics-server's number is at most one resolution old).
    let mut last = String::new();
    let seen = poll_until(Duration::from_secs(90), Duration::from_secs(2), || {
        let (ok, out, err) = node.kubectl(&["top", "pod", "--no-headers"]);
        last = format!("{out}{err}");
        let row = ok.then(|| top_row(&out, pod_name)).flatten();
        let ws = pod_working_set(uid);
        std::future::ready(match (row, ws) {
            (Some((cpu, mem)), Some(ws)) if cpu > 0.5 && within(mem, ws as f64, 0.10) => Some((cpu, mem, ws)),
            (row, ws) => {
                last += &format!(" | top {row:?}, cgroup working set {ws:?}");
                None
            }
        })
    })
    .await;
    let Some((cpu, mem, ws)) = seen else {
        panic!(
            "kubectl top pod never showed {pod_name} burning > 0.5 core with its memory within 10 % of its \
             cgroup's working set; last: {last}\nmetrics-server log: {}\nagent log:\n{}",
            ms["METRICS_SERVER_LOG"],
            node.agent.log()
        )
    };
    eprintln!(
        "kubectl top pod {pod_name}: {cpu} cores, {:.1} MiB (cgroup working set {:.1} MiB)",
        mem / MI,
        ws as f64 / MI
    );

    // kubectl top node: the node's memory beside its working set, and the burn in its cpu.
    let seen = poll_until(Duration::from_secs(30), Duration::from_secs(2), || {
        let (ok, out, err) = cluster.kubectl(&["top", "node", &node.name, "--no-headers"]);
        last = format!("{out}{err}");
        let row = ok.then(|| top_row(&out, &node.name)).flatten();
        let ws = node_working_set();
        std::future::ready(match (row, ws) {
            (Some((cpu, mem)), Some(ws)) if cpu > 0.5 && within(mem, ws as f64, 0.10) => Some((cpu, mem, ws)),
            (row, ws) => {
                last += &format!(" | top {row:?}, node working set {ws:?}");
                None
            }
        })
    })
    .await;
    let Some((cpu, mem, ws)) = seen else {
        panic!("kubectl top node {} never agreed with the node's working set; last: {last}", node.name)
    };
    eprintln!("kubectl top node: {cpu} cores, {:.0} MiB (working set {:.0} MiB)", mem / MI, ws as f64 / MI);
    // It has scraped the node twice: metrics-server says it is ready.
    assert_eq!(metrics_server_get(cluster, &url, "/readyz"), (true, "ok".to_string()));

    // The HPA: up to 2 while the pod burns (~800 % of its request), back to 1 once it stops.
    node.apply(HPA);
    let t = std::time::Instant::now();
    let describe = || node.kubectl(&["describe", "hpa", "burn"]).1;
    if poll_until(Duration::from_secs(90), Duration::from_secs(1), || {
        std::future::ready((replicas(&node) == Some((2, 2))).then_some(()))
    })
    .await
    .is_none()
    {
        panic!("the HPA did not scale burn to 2 ready replicas: {:?}\n{}", replicas(&node), describe());
    }
    eprintln!("HPA: 2 ready replicas {:.0} s after it was created", t.elapsed().as_secs_f64());
    std::fs::write(ctl.join("stop"), b"").expect("stop the burn");
    let t = std::time::Instant::now();
    if poll_until(Duration::from_secs(120), Duration::from_secs(1), || {
        std::future::ready((replicas(&node) == Some((1, 1))).then_some(()))
    })
    .await
    .is_none()
    {
        panic!(
            "the HPA did not scale burn back to 1 after the burn stopped: {:?}\n{}",
            replicas(&node),
            describe()
        );
    }
    eprintln!("HPA: back to 1 replica {:.0} s after the burn stopped", t.elapsed().as_secs_f64());
    let _ = std::fs::remove_dir_all(&ctl);
}
