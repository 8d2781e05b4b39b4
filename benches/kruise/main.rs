//! OpenKruise's CloneSet in-place rollout on a crilet node and on an upstream kubelet node, side
//! by side: the same control plane (hack/cluster.sh), the same kruise-manager (hack/kruise.sh),
//! a kruise-daemon for the node under test, the same containerd. Phases alternate kubelet,
//! crilet, kubelet, crilet… (never both at once: the kubelet kills running pods it does not
//! know); each starts its agent fresh and stops it after.
//!
//! Each phase: a Service and a CloneSet of 3 replicas of the project's web image (HTTP on 8080,
//! readiness probe period 1 s), `InPlaceIfPossible`, `maxUnavailable: 1`,
//! `inPlaceUpdateStrategy.gracePeriodSeconds: 5`, placed on the node by a required node affinity on its name.
//! Two rollouts, each measured the same way from outside the agent:
//! 1. web:v1 → web:v2, the image already on the node (Step 9 §2's rollout);
//! 2. web:v2 → the same v1 content under a name the node does not have, served by a registry
//!    that answers every request only after a delay (`slow_registry`): the agent must pull.
//!    crilet pulls before it stops the old container; the kubelet stops it, then pulls.
//!
//! Measured: patch → CloneSet `updatedReadyReplicas` = 3 (a watch-free poll every 100 ms);
//! per container, the time it did not serve: pollers GET each pod IP every 20 ms from before the
//! patch to the end, and a gap runs from the last answer before failures to the first answer
//! after them; failed requests of a client that follows the Service's EndpointSlices as
//! kube-proxy would (tests/common/traffic.rs).
//!
//! Run through `hack/bench-kruise.sh`. Environment (defaults in brackets):
//!   CRILET_BENCH_KRUISE_ROUNDS   rounds (each: one kubelet phase, one crilet phase) [2]
//!   CRILET_BENCH_KRUISE_DELAY_MS the slow registry's delay per request [3000]
//!   CRILET_BENCH_CLUSTER_ONLY    `kubelet` or `crilet`: that side only [both]
//!   CRILET_BENCH_MD              where to write the markdown section [stdout only]

// The kubelet's cgroup root and mounts (shared with the node benchmark's kubelet).
#[path = "../cluster/agents.rs"]
#[allow(dead_code)]
mod agents;
#[path = "../node/host.rs"]
mod host;
#[path = "../node/agent.rs"]
#[allow(dead_code)]
mod node_agent;
#[path = "../node/report.rs"]
#[allow(dead_code)]
mod report;
#[path = "../cluster/shared.rs"]
mod shared;
mod slow_registry;
#[path = "../../tests/common/traffic.rs"]
#[allow(dead_code)]
mod traffic;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crilet::cri::CriClient;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use agents::{Agent, Kind};
use report::{Row, Scenario, ratio_row};

/// The benchmark's namespace.
pub const NS: &str = "bench-kruise";
const REPLICAS: usize = 3;

/// What agents.rs needs of the environment.
pub struct Env {
    pub cri: CriClient,
    pub endpoint: String,
    pub dir: PathBuf,
    pub nodes_dir: PathBuf,
    pub kubelet_bin: PathBuf,
    pub crilet_bin: PathBuf,
}

const SCRIPT: &str = "hack/bench-kruise.sh";

fn need(vars: &HashMap<String, String>, k: &str) -> String {
    shared::need(vars, k, SCRIPT)
}

fn kruise_sh(args: &[&str]) {
    let out = kruise_sh_output(args);
    assert!(
        out.status.success(),
        "hack/kruise.sh {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn kruise_sh_output(args: &[&str]) -> std::process::Output {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("hack/kruise.sh");
    Command::new("bash").arg(&script).args(args).output().expect("hack/kruise.sh")
}

/// What an interrupted run may have left: its CloneSet and pods (force-deleted: their node's
/// agent is gone), their containers in the runtime, the daemons of both nodes.
async fn clean_leftovers(client: &Client, cri: &CriClient) {
    let _ = cloneset_api(client).delete("web", &DeleteParams::default()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let force = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
    let _ = pods.delete_collection(&force, &ListParams::default()).await;
    shared::remove_runtime_leftovers(cri, NS).await;
    for kind in [Kind::Kubelet, Kind::Crilet] {
        let _ = kruise_sh_output(&["daemon-stop", kind.node()]);
    }
}

fn cloneset_api(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("apps.kruise.io", "v1alpha1", "CloneSet");
    Api::namespaced_with(client.clone(), NS, &ApiResource::from_gvk(&gvk))
}

fn cloneset(node: &str, image: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    // By the Node's name (its hostname label is the machine's for crilet).
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [node]}
                        ]}]
                    }}},
                    "terminationGracePeriodSeconds": 10,
                    "containers": [{
                        "name": "web", "image": image, "imagePullPolicy": "IfNotPresent",
                        "ports": [{"containerPort": 8080}],
                        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1}
                    }]
                }
            },
            "updateStrategy": {"type": "InPlaceIfPossible", "maxUnavailable": 1,
                               "inPlaceUpdateStrategy": {"gracePeriodSeconds": 5}}
        }
    }))
    .expect("cloneset json")
}

/// The pods of the CloneSet that are Running and Ready, by name → IP.
async fn ready_pods(pods: &Api<Pod>) -> BTreeMap<String, String> {
    let list = pods.list(&ListParams::default().labels("app=web")).await.map(|l| l.items).unwrap_or_default();
    list.into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            let s = p.status.as_ref()?;
            let ready = s.conditions.as_ref()?.iter().any(|c| c.type_ == "Ready" && c.status == "True");
            if !ready || s.phase.as_deref() != Some("Running") {
                return None;
            }
            Some((p.metadata.name.clone()?, s.pod_ip.clone()?))
        })
        .collect()
}

/// When each direct GET to one pod IP failed and answered again: the summed length of its gaps.
fn poll_pod(ip: String, stop: CancellationToken) -> tokio::task::JoinHandle<f64> {
    tokio::spawn(async move {
        let addr = format!("{ip}:8080");
        let mut last_ok: Option<Instant> = None;
        let mut failing = false;
        let mut gaps = 0.0;
        while !stop.is_cancelled() {
            let ok = tokio::time::timeout(Duration::from_millis(500), traffic::http_get(&addr, "/"))
                .await
                .is_ok_and(|r| r.is_ok());
            let now = Instant::now();
            if ok {
                if failing {
                    gaps += last_ok.map_or(0.0, |t| now.duration_since(t).as_secs_f64() * 1e3);
                    failing = false;
                }
                last_ok = Some(now);
            } else {
                failing = true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        gaps
    })
}

#[derive(Default)]
struct Rollout {
    /// patch → updatedReadyReplicas = replicas, ms.
    update_ms: Vec<f64>,
    /// Per container: the time it did not serve, ms.
    gap_ms: Vec<f64>,
    /// Failed requests of the Service client, per rollout.
    failed: Vec<f64>,
}

async fn rollout(client: &Client, image: &str, into: &mut Rollout) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let sets = cloneset_api(client);
    let before = ready_pods(&pods).await;
    assert_eq!(before.len(), REPLICAS, "ready pods before the rollout: {before:?}");
    let stop = CancellationToken::new();
    let pollers: Vec<_> = before.values().map(|ip| poll_pod(ip.clone(), stop.clone())).collect();
    let traffic = traffic::start_client(client.clone(), NS, "web", 8080, stop.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let t0 = Instant::now();
    // The image only (a merge patch would replace the whole containers list, and Kruise would
    // recreate the pods for the probe and port it lost).
    let mut cs = sets.get("web").await.expect("get cloneset");
    cs.data["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image);
    sets.replace("web", &PostParams::default(), &cs).await.expect("update cloneset image");
    let deadline = t0 + Duration::from_secs(300);
    loop {
        let cs = sets.get("web").await.expect("get cloneset");
        let s = &cs.data["status"];
        let done = s["observedGeneration"] == cs.metadata.generation.map_or(json!(null), |g| json!(g))
            && s["updatedReplicas"] == REPLICAS
            && s["updatedReadyReplicas"] == REPLICAS
            && s["readyReplicas"] == REPLICAS;
        if done {
            break;
        }
        assert!(Instant::now() < deadline, "rollout to {image}: not done in 300 s: {s}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    into.update_ms.push(t0.elapsed().as_secs_f64() * 1e3);
    // Every pod serves again (the pollers close their last gap).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = ready_pods(&pods).await;
    assert_eq!(after, before, "in place: the same pods with the same IPs");
    stop.cancel();
    for p in pollers {
        into.gap_ms.push(p.await.expect("poller"));
    }
    let t = traffic.await.expect("client");
    into.failed.push(t.failed.len() as f64);
    eprintln!(
        "    {image}: {:.1} s, gaps {:?} ms, {} ok, {} failed",
        t0.elapsed().as_secs_f64(),
        into.gap_ms.iter().rev().take(REPLICAS).map(|g| g.round()).collect::<Vec<_>>(),
        t.ok,
        t.failed.len()
    );
}

#[derive(Default)]
struct Side {
    present: Rollout,
    slow: Rollout,
}

struct Images {
    v1: String,
    v2: String,
    slow_v1: String,
    ctr: PathBuf,
    socket: String,
}

impl Images {
    /// Forgets the slow registry's name for the v1 content (content kept): the next rollout to
    /// it must pull, that is, ask the slow registry.
    fn forget_slow(&self) {
        let _ = Command::new(&self.ctr)
            .args(["--address", &self.socket, "-n", "k8s.io", "images", "rm", &self.slow_v1])
            .output();
    }
}

async fn phase(client: &Client, env: &Env, images: &Images, kind: Kind, round: usize, side: &mut Side) {
    eprintln!("== round {round}: {}", kind.label());
    let nodes: Api<Node> = Api::all(client.clone());
    let mut agent = Agent::start(env, kind);
    agent.wait_ready(&nodes).await;
    kruise_sh(&["daemon", kind.node()]);
    images.forget_slow();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let sets = cloneset_api(client);
    sets.create(&PostParams::default(), &cloneset(kind.node(), &images.v1)).await.expect("create cloneset");
    let deadline = Instant::now() + Duration::from_secs(180);
    while ready_pods(&pods).await.len() != REPLICAS {
        assert!(Instant::now() < deadline, "{} ready pods not within 180 s", REPLICAS);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("  rollout 1: image on the node");
    rollout(client, &images.v2, &mut side.present).await;
    eprintln!("  rollout 2: image to pull from the slow registry");
    rollout(client, &images.slow_v1, &mut side.slow).await;

    let _ = sets.delete("web", &DeleteParams::default()).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while pods.list(&ListParams::default().labels("app=web")).await.is_ok_and(|l| !l.items.is_empty()) {
        assert!(Instant::now() < deadline, "pods not gone within 120 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    kruise_sh(&["daemon-stop", kind.node()]);
    agent.stop().await;
    shared::remove_runtime_leftovers(&env.cri, NS).await;
    images.forget_slow();
}

fn report(k: &Side, c: &Side, rounds: usize, delay_ms: u64) -> Scenario {
    let at_most = Some(1.0);
    let mut rows: Vec<Row> = Vec::new();
    for (label, kr, cr) in [
        ("image on the node", &k.present, &c.present),
        (&*format!("image from a registry answering after {delay_ms} ms"), &k.slow, &c.slow),
    ] {
        rows.push(ratio_row(
            &format!("{label}: patch → updatedReadyReplicas = {REPLICAS}"),
            &kr.update_ms,
            &cr.update_ms,
            "ms",
            at_most,
        ));
        rows.push(ratio_row(
            &format!("{label}: time a container did not serve"),
            &kr.gap_ms,
            &cr.gap_ms,
            "ms",
            at_most,
        ));
        // The worst container: a pull after the stop shows in one container, not the median.
        rows.push(ratio_row(
            &format!("{label}: longest time a container did not serve"),
            &[report::max(&kr.gap_ms)],
            &[report::max(&cr.gap_ms)],
            "ms",
            at_most,
        ));
        let mut failed = ratio_row(
            &format!("{label}: failed requests (Service client)"),
            &kr.failed,
            &cr.failed,
            "",
            None,
        );
        // A count whose target is none at all: no ratio (0/0), met when crilet failed none.
        failed.ratio = None;
        failed.target = "0".into();
        failed.met = Some(cr.failed.iter().all(|f| *f == 0.0));
        rows.push(failed);
    }
    Scenario {
        id: "kruise".into(),
        title: format!(
            "OpenKruise CloneSet in-place rollout: crilet against the upstream kubelet (rounds: {rounds})"
        ),
        how: format!(
            "kruise-manager v1.8.2 and a kruise-daemon for the node under test (hack/kruise.sh), on the control plane of \
             hack/cluster.sh; the kubelet is node `localhost`, crilet node `crilet-bench`, on the same containerd, in \
             alternating phases. A CloneSet of {REPLICAS} replicas of the web image (readiness probe period 1 s), \
             InPlaceIfPossible, maxUnavailable 1, inPlaceUpdateStrategy.gracePeriodSeconds 5, behind a Service. \
             Rollout 1 patches web:v1 → web:v2 (already on the node); rollout 2 patches v2 → the v1 content under a \
             name the node does not have, served by a registry that answers every request after {delay_ms} ms, so the \
             agent must pull. \"patch → updatedReadyReplicas\": from the patch to Kruise's status showing every \
             replica updated and ready. \"time a container did not serve\": per container, direct GETs to its pod IP \
             every 20 ms; a gap runs from the last answer before failures to the first answer after. \"failed \
             requests\": a client that follows the Service's EndpointSlices (ready endpoints only, round-robin, about \
             50 requests/s) counts the requests that failed during the rollout. Values: median / p95 of all samples."
        ),
        rows,
        notes: vec![],
        baseline_label: "upstream kubelet".into(),
    }
}

#[tokio::main]
async fn main() {
    let vars = shared::env_files(SCRIPT);
    let endpoint = need(&vars, "CRILET_CONTAINERD_ENDPOINT");
    let cri = CriClient::new(&endpoint, &endpoint).expect("CRI client");
    let env = Env {
        cri,
        endpoint: endpoint.clone(),
        dir: PathBuf::from(need(&vars, "CRILET_DEV")).join("bench-kruise"),
        nodes_dir: PathBuf::from(need(&vars, "CRILET_CLUSTER_NODES_DIR")),
        kubelet_bin: PathBuf::from(need(&vars, "CRILET_BENCH_KUBELET_BIN")),
        crilet_bin: std::env::var("CRILET_BENCH_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from(env!("CARGO_BIN_EXE_crilet"))),
    };
    let v1 = need(&vars, "CRILET_IMAGE_WEB_V1");
    let registry = need(&vars, "CRILET_REGISTRY");
    // The slow registry's name (hack/setup.sh writes containerd's hosts.toml for it).
    let slow_host = need(&vars, "CRILET_SLOW_REGISTRY");
    let images = Images {
        slow_v1: v1.replacen(&registry, &slow_host, 1),
        v2: need(&vars, "CRILET_IMAGE_WEB_V2"),
        v1,
        ctr: PathBuf::from(need(&vars, "CRILET_CONTAINERD_BIN_DIR")).join("ctr"),
        socket: need(&vars, "CRILET_CONTAINERD_SOCKET"),
    };
    let delay_ms = shared::env_num("CRILET_BENCH_KRUISE_DELAY_MS", 3000u64);
    let upstream = registry.replacen("localhost", "127.0.0.1", 1);
    let listen = slow_host.replacen("localhost", "127.0.0.1", 1);
    let slow = slow_registry::start(&listen, &upstream, Duration::from_millis(delay_ms)).await;

    let only = std::env::var("CRILET_BENCH_CLUSTER_ONLY").unwrap_or_default();
    let kinds: Vec<Kind> =
        [Kind::Kubelet, Kind::Crilet].into_iter().filter(|k| only.is_empty() || only == k.label()).collect();
    let foreign = shared::foreign_pods(&env.cri, NS).await;
    if kinds.contains(&Kind::Kubelet) && !foreign.is_empty() {
        eprintln!(
            "the runtime runs pods that are not the benchmark's ({}): the kubelet would kill them. Run this on a quiet machine.",
            foreign.join(", ")
        );
        std::process::exit(1);
    }
    let client = shared::admin_client(&need(&vars, "CRILET_CLUSTER_KUBECONFIG")).await;
    let namespaces = shared::ensure_namespace(&client, NS).await;
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), NS);
    let svc = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}
    }))
    .expect("service json");
    match services.create(&PostParams::default(), &svc).await {
        Ok(_) => {}
        // Left by an interrupted run: the same Service.
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create service: {e}"),
    }

    clean_leftovers(&client, &env.cri).await;
    let rounds = shared::env_num("CRILET_BENCH_KRUISE_ROUNDS", 2);
    let (mut k, mut c) = (Side::default(), Side::default());
    for round in 1..=rounds {
        for &kind in &kinds {
            let side = if kind == Kind::Kubelet { &mut k } else { &mut c };
            phase(&client, &env, &images, kind, round, side).await;
        }
    }
    slow.cancel();
    let _ = namespaces.delete(NS, &DeleteParams::default()).await;
    let nodes: Api<Node> = Api::all(client.clone());
    for kind in [Kind::Kubelet, Kind::Crilet] {
        let _ = nodes.delete(kind.node(), &DeleteParams::default()).await;
    }
    agents::clean_dir(&env.dir);

    let scenario = report(&k, &c, rounds, delay_ms);
    let md = scenario.markdown();
    print!("{md}");
    if let Ok(path) = std::env::var("CRILET_BENCH_MD") {
        std::fs::write(&path, &md).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
}
