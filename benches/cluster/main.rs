//! Cluster benchmark: crilet against the upstream kubelet, each the node of the same real
//! control plane (hack/cluster.sh) on the same containerd, measured the same way from outside.
//!
//! Phases alternate kubelet, crilet, kubelet, crilet… (`CRILET_BENCH_CLUSTER_ROUNDS` rounds); each
//! phase starts its agent fresh, waits for its Node to be Ready and untainted, runs every
//! scenario, removes its pods and stops the agent. The two never run at once: the kubelet kills
//! every running pod of the runtime that it does not know (its orphan cleanup).
//!
//! Scenarios (scenarios.rs): API create → Running and → Ready, one pod at a time; exit →
//! replacement running (CRI timestamps); a 110-replica Deployment placed by kube-scheduler:
//! create → all Running, → all Ready, the agent's API requests per pod start (API server audit
//! log), its CPU for the start, then its RSS, CPU and request rate in a steady window, and the
//! same window again with `/metrics/resource` and `/stats/summary` scraped every 10 s.
//!
//! Run through `hack/bench-cluster.sh` (it starts the control plane, builds the kubelet, writes
//! the node identities and this benchmark's environment). Environment (defaults in brackets):
//!   CRILET_BENCH_CLUSTER_ROUNDS   rounds (each: one kubelet phase, one crilet phase) [2]
//!   CRILET_BENCH_CLUSTER_STARTS   pods of the create → Ready scenario, per phase [10]
//!   CRILET_BENCH_CLUSTER_RESTARTS restarts per phase [5]
//!   CRILET_BENCH_CLUSTER_PODS     replicas of the Deployment [110]
//!   CRILET_BENCH_CLUSTER_WINDOW   steady window, seconds [60]
//!   CRILET_BENCH_CLUSTER_ONLY     `kubelet` or `crilet`: run that side only (to try it out) [both]
//!   CRILET_BENCH_MD               where to write the markdown section [stdout only]
//!   CRILET_BENCH_CLUSTER_CHECK    `security`: instead of the timings, the restricted namespace's
//!                                 side-by-side check (security.rs; hack/security-peer.sh);
//!                                 `top`: kubectl top and an HPA with metrics-server on each
//!                                 node (top.rs; hack/top-peer.sh)

// The kubelet's cgroup root and mounts (shared with the node benchmark's kubelet).
mod agents;
#[path = "../node/host.rs"]
mod host;
// The node benchmark's agent helpers (stopping a child by PID).
#[path = "../node/agent.rs"]
#[allow(dead_code)]
mod node_agent;
#[path = "../node/report.rs"]
#[allow(dead_code)]
mod report;
mod scenarios;
mod security;
mod shared;
mod top;
// `kubectl top` rows and cgroup working sets, as tests/top.rs reads them.
#[path = "../../tests/common/kubectl_top.rs"]
mod kubectl_top;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use crilet::cri::CriClient;
use crilet::model::keys;
use k8s_openapi::api::core::v1::Node;
use kube::api::DeleteParams;
use kube::{Api, Client};

use agents::{Agent, Kind};
use report::{Row, Scenario, median, ratio_row};
pub use shared::env_num;
use shared::{admin_client, ensure_namespace, foreign_pods, remove_runtime_leftovers};

const SCRIPT: &str = "hack/bench-cluster.sh";

fn need(vars: &HashMap<String, String>, k: &str) -> String {
    shared::need(vars, k, SCRIPT)
}

/// The benchmark's namespace (pods of both agents, one phase at a time).
pub const NS: &str = "bench-cluster";

pub struct Env {
    pub cri: CriClient,
    pub endpoint: String,
    pub dir: PathBuf,
    pub nodes_dir: PathBuf,
    pub kubelet_bin: PathBuf,
    pub crilet_bin: PathBuf,
    pub audit_log: PathBuf,
    /// The API server's kubelet client certificate and key (the stats scrapes).
    pub scrape_cert: PathBuf,
    pub scrape_key: PathBuf,
}

static IMAGE: OnceLock<String> = OnceLock::new();

pub fn image() -> &'static str {
    IMAGE.get().map(String::as_str).unwrap_or("busybox")
}

#[derive(Default)]
struct Side {
    running: Vec<f64>,
    ready: Vec<f64>,
    restart: Vec<f64>,
    scale_running: Vec<f64>,
    scale_ready: Vec<f64>,
    requests: Vec<f64>,
    start_cpu: Vec<f64>,
    rss: Vec<f64>,
    cpu: Vec<f64>,
    requests_per_min: Vec<f64>,
    scraped_rss: Vec<f64>,
    scraped_cpu: Vec<f64>,
    resource_ms: Vec<f64>,
    summary_ms: Vec<f64>,
}

async fn phase(
    client: &Client,
    env: &Env,
    watch: &scenarios::PodWatch,
    kind: Kind,
    round: usize,
    side: &mut Side,
) {
    let tag = format!("{}{round}", &kind.label()[..1]);
    eprintln!("== round {round}: {}", kind.label());
    let nodes: Api<Node> = Api::all(client.clone());
    let t = Instant::now();
    let mut agent = Agent::start(env, kind);
    agent.wait_ready(&nodes).await;
    eprintln!("  node {} Ready in {:.1} s", kind.node(), t.elapsed().as_secs_f64());

    let n = env_num("CRILET_BENCH_CLUSTER_STARTS", 10);
    for (run, ready) in scenarios::start(client, watch, kind, &tag, n).await {
        side.running.push(run);
        side.ready.push(ready);
    }
    eprintln!("  create → Ready: median {:.0} ms", median(&side.ready));
    let n = env_num("CRILET_BENCH_CLUSTER_RESTARTS", 5);
    side.restart.extend(scenarios::restart(client, env, watch, kind, &tag, n).await);
    eprintln!("  exit → replacement: median {:.0} ms", median(&side.restart));
    let n = env_num("CRILET_BENCH_CLUSTER_PODS", 110);
    let s = scenarios::scale(client, env, watch, &agent, &tag, n).await;
    eprintln!(
        "  {n} pods: Running {:.1} s, Ready {:.1} s, {:.1} requests/pod, RSS {:.1} MiB, CPU {:.2} %",
        s.running_s, s.ready_s, s.requests_per_pod, s.rss_mib, s.cpu_pct
    );
    side.scale_running.push(s.running_s);
    side.scale_ready.push(s.ready_s);
    side.requests.push(s.requests_per_pod);
    side.start_cpu.push(s.start_cpu_s);
    side.rss.push(s.rss_mib);
    side.cpu.push(s.cpu_pct);
    side.requests_per_min.push(s.requests_per_min);
    eprintln!(
        "  scraped every 10 s: RSS {:.1} MiB, CPU {:.2} %, /metrics/resource {:.0} ms, /stats/summary {:.0} ms, {} failed",
        s.scraped.rss_mib,
        s.scraped.cpu_pct,
        median(&s.scraped.resource_ms),
        median(&s.scraped.summary_ms),
        s.scraped.failures
    );
    side.scraped_rss.push(s.scraped.rss_mib);
    side.scraped_cpu.push(s.scraped.cpu_pct);
    side.resource_ms.extend(s.scraped.resource_ms);
    side.summary_ms.extend(s.scraped.summary_ms);

    // Every pod is gone from the API; make sure nothing runs before the agent stops.
    let deadline = Instant::now() + std::time::Duration::from_secs(120);
    while env.cri.list_all(Some((keys::POD_NAMESPACE, NS))).await.is_ok_and(|(s, _)| {
        s.iter().any(|s| s.state == crilet::cri::api::PodSandboxState::SandboxReady as i32)
    }) && Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    agent.stop().await;
    remove_runtime_leftovers(&env.cri, NS).await;
}

fn report(k: &Side, c: &Side, rounds: usize, pods: usize, window: u64) -> Scenario {
    let at_most = Some(1.0);
    let rows: Vec<Row> = vec![
        ratio_row("API create → Running", &k.running, &c.running, "ms", at_most),
        ratio_row("API create → Ready", &k.ready, &c.ready, "ms", at_most),
        ratio_row("exit → replacement running", &k.restart, &c.restart, "ms", at_most),
        ratio_row(
            &format!("{pods}-replica Deployment: create → all Running"),
            &k.scale_running,
            &c.scale_running,
            "s",
            at_most,
        ),
        ratio_row(
            &format!("{pods}-replica Deployment: create → all Ready"),
            &k.scale_ready,
            &c.scale_ready,
            "s",
            at_most,
        ),
        ratio_row("API requests per pod start (create → all Ready)", &k.requests, &c.requests, "", at_most),
        ratio_row(
            "agent CPU for the Deployment's start (create → all Ready)",
            &k.start_cpu,
            &c.start_cpu,
            "s",
            at_most,
        ),
        ratio_row(
            &format!("agent RSS at {pods} pods (VmRSS, max over the window)"),
            &k.rss,
            &c.rss,
            "MiB",
            at_most,
        ),
        ratio_row(
            &format!("agent CPU at {pods} pods (% of one core over the window)"),
            &k.cpu,
            &c.cpu,
            "%",
            at_most,
        ),
        ratio_row(
            &format!("agent API requests per minute at {pods} pods"),
            &k.requests_per_min,
            &c.requests_per_min,
            "",
            at_most,
        ),
        ratio_row(
            &format!("agent RSS at {pods} pods, stats scraped every 10 s"),
            &k.scraped_rss,
            &c.scraped_rss,
            "MiB",
            at_most,
        ),
        ratio_row(
            &format!("agent CPU at {pods} pods, stats scraped every 10 s (% of one core)"),
            &k.scraped_cpu,
            &c.scraped_cpu,
            "%",
            at_most,
        ),
        ratio_row(
            &format!("GET /metrics/resource at {pods} pods"),
            &k.resource_ms,
            &c.resource_ms,
            "ms",
            at_most,
        ),
        ratio_row(&format!("GET /stats/summary at {pods} pods"), &k.summary_ms, &c.summary_ms, "ms", at_most),
    ];
    Scenario {
        id: "cluster".into(),
        title: format!(
            "crilet against the upstream kubelet, as nodes of one control plane (rounds: {rounds})"
        ),
        how: format!(
            "Each agent is the node of the same kube-apiserver/controller-manager/scheduler (hack/cluster.sh) on \
             the same containerd, started fresh for its phase; phases alternate kubelet, crilet, kubelet, crilet… \
             (never both at once: the kubelet kills running pods it does not know). The kubelet is node \
             `localhost` (cgroupfs, its own cgroup root, no image GC or eviction thresholds); crilet is node \
             `crilet-bench`. Everything is observed from outside the agent. \"API create → Running / Ready\": \
             one pod at a time with `spec.nodeName` set (busybox, exec readiness probe `true`, period 1 s), from \
             right before the POST to the first event of a pod watch showing phase Running / condition Ready. \
             \"exit → replacement running\": a container exiting 1 after 2 s under restartPolicy Always, its \
             first restart (no back-off): the new instance's CRI started_at − the old one's finished_at. \
             Deployment: {pods} replicas placed by kube-scheduler (required node affinity on the node's name), \
             exec readiness probe period 10 s; from the create to the last pod the watch shows Running / Ready. \
             API requests: the agent's own requests (user system:node:NAME) in the API server's audit log from \
             the create to all Ready, divided by {pods}. CPU: utime+stime of the agent process. Then 5 s later \
             a {window} s window with the pods running and nothing polling: max VmRSS, CPU (% of one core) and \
             requests per minute. Then a second window of the same length in which the agent's \
             `/metrics/resource` (what metrics-server reads) and `/stats/summary` are fetched every 10 s with the API \
             server's kubelet client certificate (curl; its time_total per request): the cost of the stats \
             endpoints, which the kubelet's cAdvisor collects all the time and crilet when asked. Values: median / p95 of all samples (per-pod rows) or of one sample per \
             round (Deployment rows)."
        ),
        rows,
        notes: vec![],
        baseline_label: "upstream kubelet".into(),
    }
}

#[tokio::main]
async fn main() {
    let vars = shared::env_files(SCRIPT);
    let _ = IMAGE.set(need(&vars, "CRILET_IMAGE_BUSYBOX"));
    let endpoint = need(&vars, "CRILET_CONTAINERD_ENDPOINT");
    let cri = CriClient::new(&endpoint, &endpoint).expect("CRI client");
    let pki = PathBuf::from(need(&vars, "CRILET_CLUSTER_DIR")).join("pki");
    let env = Env {
        cri,
        endpoint,
        dir: PathBuf::from(need(&vars, "CRILET_DEV")).join("bench-cluster"),
        nodes_dir: PathBuf::from(need(&vars, "CRILET_CLUSTER_NODES_DIR")),
        kubelet_bin: PathBuf::from(need(&vars, "CRILET_BENCH_KUBELET_BIN")),
        crilet_bin: std::env::var("CRILET_BENCH_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from(env!("CARGO_BIN_EXE_crilet"))),
        audit_log: PathBuf::from(need(&vars, "CRILET_CLUSTER_AUDIT_LOG")),
        scrape_cert: pki.join("apiserver-kubelet-client.crt"),
        scrape_key: pki.join("apiserver-kubelet-client.key"),
    };
    // One side only (to try the benchmark out; the report then has no ratios).
    let only = std::env::var("CRILET_BENCH_CLUSTER_ONLY").unwrap_or_default();
    let kinds: Vec<Kind> =
        [Kind::Kubelet, Kind::Crilet].into_iter().filter(|k| only.is_empty() || only == k.label()).collect();
    let foreign = foreign_pods(&env.cri, NS).await;
    if kinds.contains(&Kind::Kubelet) && !foreign.is_empty() {
        eprintln!(
            "the runtime runs pods that are not the benchmark's ({}): the kubelet would kill them. Run this on a quiet machine.",
            foreign.join(", ")
        );
        std::process::exit(1);
    }
    let client = admin_client(&need(&vars, "CRILET_CLUSTER_KUBECONFIG")).await;
    let namespaces = ensure_namespace(&client, NS).await;
    if std::env::var("CRILET_BENCH_CLUSTER_CHECK").as_deref() == Ok("security") {
        let md = security_check(&client, &env, &kinds).await;
        let _ = namespaces.delete(security::NS, &DeleteParams::default()).await;
        finish(&client, &env, &md).await;
        return;
    }
    if std::env::var("CRILET_BENCH_CLUSTER_CHECK").as_deref() == Ok("top") {
        let md = top_check(&env, &kinds, &vars).await;
        let _ = namespaces.delete(top::NS, &DeleteParams::default()).await;
        finish(&client, &env, &md).await;
        return;
    }
    let watch = scenarios::PodWatch::start(client.clone());

    let rounds = env_num("CRILET_BENCH_CLUSTER_ROUNDS", 2);
    let (mut k, mut c) = (Side::default(), Side::default());
    for round in 1..=rounds {
        for &kind in &kinds {
            let side = if kind == Kind::Kubelet { &mut k } else { &mut c };
            phase(&client, &env, &watch, kind, round, side).await;
        }
    }
    let _ = namespaces.delete(NS, &DeleteParams::default()).await;
    let pods = env_num("CRILET_BENCH_CLUSTER_PODS", 110);
    let scenario = report(&k, &c, rounds, pods, env_num("CRILET_BENCH_CLUSTER_WINDOW", 60));
    finish(&client, &env, &scenario.markdown()).await;
}

/// Removes the agents' Nodes and state, prints the report and writes it to `CRILET_BENCH_MD`.
async fn finish(client: &Client, env: &Env, md: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    for kind in [Kind::Kubelet, Kind::Crilet] {
        let _ = nodes.delete(kind.node(), &DeleteParams::default()).await;
    }
    agents::clean_dir(&env.dir);
    print!("{md}");
    if let Ok(path) = std::env::var("CRILET_BENCH_MD") {
        std::fs::write(&path, md).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
}

/// The kubectl top / HPA check on each agent in turn (never both at once), as a table.
async fn top_check(env: &Env, kinds: &[Kind], vars: &HashMap<String, String>) -> String {
    let k = top::Kubectl {
        bin: need(vars, "CRILET_KUBECTL"),
        kubeconfig: need(vars, "CRILET_CLUSTER_KUBECONFIG"),
    };
    let client = admin_client(&k.kubeconfig).await;
    let nodes: Api<Node> = Api::all(client);
    let (mut kubelet, mut crilet) = (Vec::new(), Vec::new());
    for &kind in kinds {
        eprintln!("== top check: {}", kind.label());
        let mut agent = Agent::start(env, kind);
        agent.wait_ready(&nodes).await;
        let rows = top::check(&k, env, kind).await;
        eprintln!("  {rows:?}");
        agent.stop().await;
        remove_runtime_leftovers(&env.cri, top::NS).await;
        *(if kind == Kind::Kubelet { &mut kubelet } else { &mut crilet }) = rows;
    }
    top::markdown(&kubelet, &crilet, vars)
}

/// The restricted namespace's check on each agent in turn (never both at once), as a table.
async fn security_check(client: &Client, env: &Env, kinds: &[Kind]) -> String {
    security::ensure_namespace(client).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let (mut kubelet, mut crilet) = (Vec::new(), Vec::new());
    for &kind in kinds {
        eprintln!("== security check: {}", kind.label());
        let mut agent = Agent::start(env, kind);
        agent.wait_ready(&nodes).await;
        let report = security::check(client, env, kind).await;
        eprintln!("  {report:?}");
        agent.stop().await;
        remove_runtime_leftovers(&env.cri, security::NS).await;
        *(if kind == Kind::Kubelet { &mut kubelet } else { &mut crilet }) = report;
    }
    security::markdown(&kubelet, &crilet)
}
