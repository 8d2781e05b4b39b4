//! Pod start and stop latency of crilet against a baseline measured in the same run: the same
//! pods created and removed with bare CRI calls, one pod after another (no agent, no status, no
//! probes; crilet works on pods in parallel, so a ratio below 1 is possible). Reported as
//! ratios, since absolute times depend on the machine.
//!
//! Needs the environment of `hack/setup.sh`. Run: `cargo bench --bench pod_start` (N pods,
//! default 10, override with CRILET_BENCH_PODS).

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crilet::cri::CriClient;
use crilet::model::{DesiredPod, PodKey, keys};
use crilet::pod::spec::{HostDns, Kind, NodeConfig, RuntimeValues, container_config, sandbox_config};
use k8s_openapi::api::core::v1::{Container, Pod};

fn env() -> std::collections::HashMap<String, String> {
    let text = std::fs::read_to_string("/run/crilet-dev/env").expect("run hack/setup.sh first");
    text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

const CMD: &str = "trap 'exit 0' TERM; while true; do sleep 1; done";

fn manifest(i: usize, image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}, namespace: bench}}\nspec:\n  terminationGracePeriodSeconds: 5\n  containers:\n  - name: c\n    image: {image}\n    command: [sh, -c, \"{CMD}\"]\n"
    )
}

async fn baseline(cri: &CriClient, image: &str, n: usize, dir: &std::path::Path) -> (Duration, Duration) {
    let node = NodeConfig {
        root_dir: dir.join("root"),
        pod_logs_dir: dir.join("logs"),
        container_logs_dir: None,
        node_name: "bench".into(),
        host_ip: None,
        host_dns: HostDns::default(),
    };
    let image_id = cri.image_id(image).await.expect("image status").expect("image present").id;
    let start = Instant::now();
    let mut sandboxes = Vec::new();
    for i in 0..n {
        let mut pod = Pod::default();
        pod.metadata.name = Some(format!("b{i}"));
        let c = Container {
            name: "c".into(),
            image: Some(image.into()),
            command: Some(vec!["sh".into(), "-c".into(), CMD.into()]),
            ..Default::default()
        };
        pod.spec =
            Some(k8s_openapi::api::core::v1::PodSpec { containers: vec![c.clone()], ..Default::default() });
        let d = DesiredPod {
            key: PodKey::new("bench-baseline", format!("b{i}")),
            uid: format!("bench-baseline-{i}"),
            pod: Arc::new(pod),
            file: PathBuf::from("/nonexistent"),
            doc: 0,
            warnings: vec![],
        };
        let sb_cfg = sandbox_config(&node, &d, 0);
        std::fs::create_dir_all(&sb_cfg.log_directory).expect("log dir");
        let sb = cri.run_sandbox(sb_cfg.clone(), "").await.expect("run sandbox");
        let rv = RuntimeValues { image_ref: image_id.clone(), ..Default::default() };
        let cfg = container_config(&node, &d, &c, Kind::App, &rv, vec![]).expect("config");
        let id = cri.create_container(&sb, cfg, sb_cfg).await.expect("create");
        cri.start_container(&id).await.expect("start");
        sandboxes.push((sb, id));
    }
    let started = start.elapsed();
    let stop = Instant::now();
    for (sb, id) in &sandboxes {
        cri.stop_container(id, Duration::from_secs(5)).await.expect("stop");
        cri.stop_sandbox(sb).await.expect("stop sandbox");
        cri.remove_sandbox(sb).await.expect("remove sandbox");
    }
    (started, stop.elapsed())
}

fn pods_running(bin: &str, socket: &std::path::Path, n: usize) -> bool {
    let out = Command::new(bin)
        .args(["get", "pods", "-n", "bench", "-o", "json", "--control-socket"])
        .arg(socket)
        .output();
    let Ok(out) = out else { return false };
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else { return false };
    let items = v["items"].as_array().cloned().unwrap_or_default();
    items.len() == n
        && items.iter().all(|p| {
            p["status"]["phase"] == "Running"
                && p["status"]["conditions"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
        })
}

async fn with_crilet(
    cri: &CriClient,
    endpoint: &str,
    image: &str,
    n: usize,
    dir: &std::path::Path,
) -> (Duration, Duration) {
    let bin = env!("CARGO_BIN_EXE_crilet");
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).expect("mkdir");
    std::fs::set_permissions(&manifests, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let socket = dir.join("crilet.sock");
    let mut child = Command::new(bin)
        .args(["run", "--container-runtime-endpoint", endpoint, "--pod-manifest-path"])
        .arg(&manifests)
        .arg("--root-dir")
        .arg(dir.join("root"))
        .args(["--container-logs-dir", ""])
        .arg("--pod-logs-dir")
        .arg(dir.join("logs"))
        .arg("--control-socket")
        .arg(&socket)
        .env("RUST_LOG", "warn")
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn crilet");
    while !pods_running(bin, &socket, 0) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let start = Instant::now();
    for i in 0..n {
        let path = manifests.join(format!("p{i}.yaml"));
        std::fs::write(&path, manifest(i, image)).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    while !pods_running(bin, &socket, n) {
        assert!(start.elapsed() < Duration::from_secs(300), "pods did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let started = start.elapsed();
    let stop = Instant::now();
    for i in 0..n {
        std::fs::remove_file(manifests.join(format!("p{i}.yaml"))).expect("remove");
    }
    loop {
        let (s, _) = cri.list_all(Some((keys::POD_NAMESPACE, "bench"))).await.expect("list");
        if s.is_empty() {
            break;
        }
        assert!(stop.elapsed() < Duration::from_secs(300), "pods were not removed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stopped = stop.elapsed();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
    (started, stopped)
}

#[tokio::main]
async fn main() {
    let env = env();
    let endpoint = env["CRILET_CONTAINERD_ENDPOINT"].clone();
    let image = env["CRILET_IMAGE_BUSYBOX"].clone();
    let n: usize = std::env::var("CRILET_BENCH_PODS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let cri = CriClient::new(&endpoint, &endpoint).expect("client");
    let dir = PathBuf::from("/var/lib/crilet-dev/bench");
    let _ = std::fs::remove_dir_all(&dir);
    let (b_start, b_stop) = baseline(&cri, &image, n, &dir.join("baseline")).await;
    let (c_start, c_stop) = with_crilet(&cri, &endpoint, &image, n, &dir.join("crilet")).await;
    let _ = std::fs::remove_dir_all(&dir);
    println!("pods: {n}");
    println!("{:<28}{:>12}{:>12}{:>10}", "", "baseline", "crilet", "ratio");
    println!(
        "{:<28}{:>11.2}s{:>11.2}s{:>10.2}",
        "start (to Running+Ready)",
        b_start.as_secs_f64(),
        c_start.as_secs_f64(),
        c_start.as_secs_f64() / b_start.as_secs_f64()
    );
    println!(
        "{:<28}{:>11.2}s{:>11.2}s{:>10.2}",
        "stop and remove",
        b_stop.as_secs_f64(),
        c_stop.as_secs_f64(),
        c_stop.as_secs_f64() / b_stop.as_secs_f64()
    );
}
