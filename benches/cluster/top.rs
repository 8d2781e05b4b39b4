//! The peer check of `kubectl top` and a HorizontalPodAutoscaler (issue 37 part 2), run by
//! hack/top-peer.sh: the check of tests/top.rs on one agent's node at a time, with the real
//! metrics-server (`hack/cluster.sh metrics-server`). A Deployment whose pod keeps 40 MiB in its
//! /dev/shm and burns CPU (limit 800m) until a file appears in a hostPath directory; `kubectl top
//! pod` and `kubectl top node` beside the cgroup files; an HPA (cpu 50 % of the 100m request,
//! stabilization 0) from 1 to 2 replicas while it burns and back to 1 after.
//!
//! metrics-server dials the crilet node at its InternalIP (127.0.0.1) and the kubelet's node
//! `localhost` by its Hostname (its InternalIP is this host's primary address, never dialled):
//! `hack/cluster.sh metrics-server` is rerun with `CRILET_METRICS_SERVER_ADDRESS_TYPES` for each.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::Env;
use crate::agents::Kind;
use crate::kubectl_top::{top_row, within, working_set};

/// The check's namespace.
pub const NS: &str = "bench-top";

/// kubectl as the admin.
pub struct Kubectl {
    pub bin: String,
    pub kubeconfig: String,
}

impl Kubectl {
    fn run(&self, args: &[&str], stdin: Option<&str>) -> (bool, String) {
        use std::io::Write;
        let mut c = Command::new(&self.bin);
        c.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        c.stdin(if stdin.is_some() { std::process::Stdio::piped() } else { std::process::Stdio::null() });
        c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
        let mut child = c.spawn().expect("kubectl");
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(text.as_bytes()).expect("kubectl stdin");
        }
        let out = child.wait_with_output().expect("kubectl");
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    }
}

fn metrics_server(kind: Kind) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("hack/cluster.sh");
    let types = if kind == Kind::Kubelet { "Hostname" } else { "InternalIP" };
    let out = Command::new("bash")
        .arg(script)
        .arg("metrics-server")
        .env("CRILET_METRICS_SERVER_ADDRESS_TYPES", types)
        .output()
        .expect("hack/cluster.sh metrics-server");
    assert!(out.status.success(), "hack/cluster.sh metrics-server: {}", String::from_utf8_lossy(&out.stderr));
}

fn workload(node: &str, ctl: &Path) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: burn, namespace: {NS}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: burn}}}}
  template:
    metadata: {{labels: {{app: burn}}}}
    spec:
      affinity: {{nodeAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: {{nodeSelectorTerms: [{{matchFields: [{{key: metadata.name, operator: In, values: [{node}]}}]}}]}}}}}}
      terminationGracePeriodSeconds: 1
      containers:
      - name: burn
        image: {image}
        command: [sh, -c, 'dd if=/dev/zero of=/dev/shm/fill bs=1M count=40 2>/dev/null; while [ ! -e /ctl/stop ]; do :; done; exec sleep 3600']
        resources:
          requests: {{cpu: 100m, memory: 64Mi}}
          limits: {{cpu: 800m, memory: 128Mi}}
        volumeMounts: [{{name: ctl, mountPath: /ctl}}]
      volumes:
      - name: ctl
        hostPath: {{path: "{ctl}", type: Directory}}
"#,
        image = crate::image(),
        ctl = ctl.display(),
    )
}

fn hpa() -> String {
    format!(
        r#"apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {{name: burn, namespace: {NS}}}
spec:
  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: burn}}
  minReplicas: 1
  maxReplicas: 2
  metrics:
  - type: Resource
    resource: {{name: cpu, target: {{type: Utilization, averageUtilization: 50}}}}
  behavior:
    scaleUp: {{stabilizationWindowSeconds: 0}}
    scaleDown:
      stabilizationWindowSeconds: 0
      policies: [{{type: Percent, value: 100, periodSeconds: 15}}]
"#
    )
}

/// The pod cgroup `pod<uid>` wherever the agent's cgroup root puts it (v1 memory hierarchy).
fn pod_cgroup(uid: &str) -> Option<PathBuf> {
    let mut stack = vec![(PathBuf::from("/sys/fs/cgroup/memory"), 0)];
    while let Some((dir, depth)) = stack.pop() {
        for e in std::fs::read_dir(&dir).ok()?.flatten() {
            let p = e.path();
            if !p.is_dir() {
                continue;
            }
            if e.file_name().to_string_lossy() == format!("pod{uid}") {
                return Some(p);
            }
            if depth < 3 {
                stack.push((p, depth + 1));
            }
        }
    }
    None
}

async fn poll<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    testkit::poll_until(limit, Duration::from_secs(1), || std::future::ready(f())).await
}

/// The Deployment's (spec replicas, ready replicas).
fn replicas(k: &Kubectl) -> Option<(u64, u64)> {
    let (ok, out) = k.run(&["-n", NS, "get", "deployment", "burn", "-o", "json"], None);
    let d: serde_json::Value = serde_json::from_str(ok.then_some(out)?.as_str()).ok()?;
    Some((d["spec"]["replicas"].as_u64()?, d["status"]["readyReplicas"].as_u64().unwrap_or(0)))
}

/// Runs the check on `kind`'s node (its agent running and Ready); its rows (key, value).
pub async fn check(k: &Kubectl, env: &Env, kind: Kind) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    let mut row = |key: &str, v: String| rows.push((key.to_string(), v));
    metrics_server(kind);
    let ctl = env.dir.join("top-ctl");
    let _ = std::fs::remove_dir_all(&ctl);
    std::fs::create_dir_all(&ctl).expect("control directory");
    let _ = k.run(&["create", "namespace", NS], None);
    let (ok, out) = k.run(&["apply", "-f", "-"], Some(&workload(kind.node(), &ctl)));
    assert!(ok, "apply: {out}");
    let (ok, out) = k.run(&["-n", NS, "rollout", "status", "deployment/burn", "--timeout=120s"], None);
    assert!(ok, "rollout: {out}");
    let (_, out) = k.run(&["-n", NS, "get", "pods", "-l", "app=burn", "-o", "json"], None);
    let pods: serde_json::Value = serde_json::from_str(&out).expect("pods");
    let name = pods["items"][0]["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let uid = pods["items"][0]["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    let cgroup = pod_cgroup(&uid);

    // The HPA comes after top has been read.
    let pod = poll(Duration::from_secs(120), || {
        let (ok, out) = k.run(&["-n", NS, "top", "pod", "--no-headers"], None);
        let (cpu, mem) = ok.then(|| top_row(&out, &name)).flatten()?;
        (cpu > 0.5).then_some((cpu, mem, cgroup.as_deref().and_then(|d| working_set(d, false))?))
    })
    .await;
    match pod {
        Some((cpu, mem, ws)) => {
            row("top pod: cpu > 0.5 core", "yes".into());
            row(
                "top pod: memory within 10 % of the pod cgroup's working set",
                within(mem, ws as f64, 0.10).to_string(),
            );
            eprintln!("  top pod {name}: {cpu} cores, {mem} B; pod cgroup working set {ws} B");
        }
        None => row("top pod: cpu > 0.5 core", "no (no metrics in 120 s)".into()),
    }
    let node = poll(Duration::from_secs(30), || {
        let (ok, out) = k.run(&["top", "node", kind.node(), "--no-headers"], None);
        ok.then(|| top_row(&out, kind.node())).flatten()
    })
    .await;
    let root = working_set(Path::new("/sys/fs/cgroup/memory"), false);
    match (node, root) {
        (Some((cpu, mem)), Some(ws)) => {
            row("top node: cpu > 0.5 core", (cpu > 0.5).to_string());
            row(
                "top node: memory within 10 % of the root cgroup's working set",
                within(mem, ws as f64, 0.10).to_string(),
            );
        }
        _ => row("top node", format!("no answer ({node:?}, root working set {root:?})")),
    }

    let (ok, out) = k.run(&["apply", "-f", "-"], Some(&hpa()));
    assert!(ok, "apply the HPA: {out}");
    let t = Instant::now();
    let up = poll(Duration::from_secs(120), || (replicas(k) == Some((2, 2))).then(|| t.elapsed())).await;
    row("HPA: 1 → 2 ready replicas while it burns", up.map_or("no (120 s)".into(), |_| "yes".into()));
    eprintln!("  scaled up after {up:?}");
    std::fs::write(ctl.join("stop"), b"").expect("stop the burn");
    let t = Instant::now();
    let down = poll(Duration::from_secs(180), || (replicas(k) == Some((1, 1))).then(|| t.elapsed())).await;
    row("HPA: back to 1 after the burn stops", down.map_or("no (180 s)".into(), |_| "yes".into()));
    eprintln!("  scaled down after {down:?}");

    let _ = k.run(&["-n", NS, "delete", "hpa,deployment", "burn", "--wait=true"], None);
    let _ = poll(Duration::from_secs(120), || {
        let (ok, out) = k.run(&["-n", NS, "get", "pods", "--no-headers"], None);
        (ok && out.trim().is_empty() || out.contains("No resources")).then_some(())
    })
    .await;
    let _ = std::fs::remove_dir_all(&ctl);
    rows
}

/// The side-by-side table.
pub fn markdown(
    kubelet: &[(String, String)],
    crilet: &[(String, String)],
    env: &HashMap<String, String>,
) -> String {
    let get = |side: &[(String, String)], key: &str| {
        side.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()).unwrap_or_else(|| "(none)".into())
    };
    let mut keys: Vec<&str> = Vec::new();
    for (k, _) in kubelet.iter().chain(crilet) {
        if !keys.contains(&k.as_str()) {
            keys.push(k);
        }
    }
    let mut md = format!(
        "metrics-server {}, resolution 10 s.\n\n| check | upstream kubelet | crilet | same |\n|---|---|---|---|\n",
        env.get("METRICS_SERVER_VERSION").map_or("v0.8.0", String::as_str)
    );
    for k in keys {
        let (a, b) = (get(kubelet, k), get(crilet, k));
        md.push_str(&format!("| {k} | {a} | {b} | {} |\n", if a == b { "yes" } else { "**no**" }));
    }
    md
}
