//! What one phase (one agent) measures, all of it observed from outside the agent: pods through
//! a watch of the API (what a controller sees), restarts through the runtime's own CRI
//! timestamps, the agent's API requests through the API server's audit log, its cost through
//! /proc.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::Notify;

use crate::agents::{Agent, Kind};
use crate::{Env, NS};

/// When the watch first showed a pod Running and Ready.
#[derive(Default, Clone, Copy)]
pub struct Seen {
    pub running: Option<Instant>,
    pub ready: Option<Instant>,
}

/// A watch of the benchmark namespace's pods, from the benchmark's start to its end.
pub struct PodWatch {
    seen: Mutex<HashMap<String, Seen>>,
    live: Mutex<HashMap<String, bool>>,
    changed: Notify,
}

impl PodWatch {
    pub fn start(client: Client) -> Arc<PodWatch> {
        let w = Arc::new(PodWatch { seen: Mutex::default(), live: Mutex::default(), changed: Notify::new() });
        let api: Api<Pod> = Api::namespaced(client, NS);
        let me = w.clone();
        tokio::spawn(async move {
            let mut stream = watcher(api, watcher::Config::default()).boxed();
            while let Some(ev) = stream.next().await {
                let now = Instant::now();
                match ev {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => me.note(&p, now),
                    Ok(watcher::Event::Delete(p)) => {
                        let name = p.metadata.name.unwrap_or_default();
                        me.live.lock().unwrap().remove(&name);
                    }
                    Ok(_) => {}
                    Err(e) => eprintln!("  watch: {e}"),
                }
                me.changed.notify_waiters();
            }
        });
        w
    }

    fn note(&self, p: &Pod, now: Instant) {
        let name = p.metadata.name.clone().unwrap_or_default();
        let status = p.status.as_ref();
        let running = status.and_then(|s| s.phase.as_deref()) == Some("Running");
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        self.live.lock().unwrap().insert(name.clone(), true);
        let mut seen = self.seen.lock().unwrap();
        let s = seen.entry(name).or_default();
        if running && s.running.is_none() {
            s.running = Some(now);
        }
        if ready && s.ready.is_none() {
            s.ready = Some(now);
        }
    }

    pub fn get(&self, name: &str) -> Seen {
        self.seen.lock().unwrap().get(name).copied().unwrap_or_default()
    }

    /// Waits until `done` holds for the watch's view, or panics after `limit`.
    pub async fn wait(&self, what: &str, limit: Duration, done: impl Fn(&PodWatch) -> bool) {
        let deadline = Instant::now() + limit;
        loop {
            let notified = self.changed.notified();
            if done(self) {
                return;
            }
            let left = deadline.checked_duration_since(Instant::now()).unwrap_or_else(|| {
                panic!("{what}: not within {limit:?}");
            });
            let _ = tokio::time::timeout(left.min(Duration::from_millis(500)), notified).await;
        }
    }

    /// The API still has pod `name`.
    pub fn is_live(&self, name: &str) -> bool {
        self.live.lock().unwrap().contains_key(name)
    }

    /// Pods whose name starts with `prefix` that the API still has.
    pub fn live_with(&self, prefix: &str) -> usize {
        self.live.lock().unwrap().keys().filter(|k| k.starts_with(prefix)).count()
    }

    pub fn all_with(&self, prefix: &str) -> Vec<Seen> {
        self.seen.lock().unwrap().iter().filter(|(k, _)| k.starts_with(prefix)).map(|(_, v)| *v).collect()
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

const TERM: &str = "trap 'exit 0' TERM; sleep 3600 & wait";

fn pod(name: &str, node: &str, command: &str, probe: bool, restart: &str) -> Pod {
    let mut c = json!({"name": "app", "image": crate::image(), "command": ["sh", "-c", command]});
    if probe {
        c["readinessProbe"] = json!({"exec": {"command": ["true"]}, "periodSeconds": 1});
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"nodeName": node, "restartPolicy": restart, "terminationGracePeriodSeconds": 1,
                 "containers": [c]}
    }))
    .expect("pod json")
}

async fn delete_and_wait(pods: &Api<Pod>, watch: &PodWatch, name: &str) {
    let _ = pods.delete(name, &DeleteParams::default()).await;
    watch.wait(&format!("pod {name} gone"), Duration::from_secs(120), |w| !w.is_live(name)).await;
}

/// API create → Running and → Ready (as the watch shows them), one pod at a time. Each pod:
/// one container and an exec readiness probe (`true`, period 1 s), `spec.nodeName` set (the
/// scheduler is not part of the measurement). Returns (running ms, ready ms) per pod.
pub async fn start(client: &Client, watch: &PodWatch, kind: Kind, tag: &str, n: usize) -> Vec<(f64, f64)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut out = vec![];
    for i in 0..n {
        let name = format!("start-{tag}-{i}");
        let t0 = Instant::now();
        pods.create(&PostParams::default(), &pod(&name, kind.node(), TERM, true, "Always"))
            .await
            .expect("create pod");
        watch
            .wait(&format!("{name} Ready"), Duration::from_secs(120), |w| w.get(&name).ready.is_some())
            .await;
        let s = watch.get(&name);
        let (running, ready) = (s.running.unwrap_or(t0), s.ready.unwrap_or(t0));
        out.push((ms(running - t0), ms(ready - t0)));
        delete_and_wait(&pods, watch, &name).await;
    }
    out
}

/// Exit → replacement running: a container that exits 1 after 2 s under `restartPolicy:
/// Always` (its first restart, which has no back-off); the new instance's CRI `started_at` −
/// the old one's `finished_at`, both the runtime's own timestamps.
pub async fn restart(
    client: &Client,
    env: &Env,
    watch: &PodWatch,
    kind: Kind,
    tag: &str,
    n: usize,
) -> Vec<f64> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut out = vec![];
    for i in 0..n {
        let name = format!("restart-{tag}-{i}");
        let created = pods
            .create(&PostParams::default(), &pod(&name, kind.node(), "sleep 2; exit 1", false, "Always"))
            .await
            .expect("create pod");
        let uid = created.metadata.uid.expect("uid");
        let deadline = Instant::now() + Duration::from_secs(120);
        let gap = loop {
            if let Ok(obs) = env.cri.observe(&uid).await {
                let first = obs.containers.iter().find(|c| c.attempt == 0 && c.finished_at > 0);
                let second = obs.containers.iter().find(|c| c.attempt == 1 && c.started_at > 0);
                if let (Some(a), Some(b)) = (first, second) {
                    break (b.started_at - a.finished_at) as f64 / 1e6;
                }
            }
            assert!(Instant::now() < deadline, "{name}: no restart within 120 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        out.push(gap);
        delete_and_wait(&pods, watch, &name).await;
    }
    out
}

/// One Deployment run: what it cost and how long it took.
pub struct Scale {
    pub running_s: f64,
    pub ready_s: f64,
    /// The agent's API requests (audit log) from the create to all Ready, per pod.
    pub requests_per_pod: f64,
    /// CPU seconds the agent used from the create to all Ready.
    pub start_cpu_s: f64,
    /// In the steady window: max VmRSS (MiB), CPU (% of one core), API requests per minute.
    pub rss_mib: f64,
    pub cpu_pct: f64,
    pub requests_per_min: f64,
    /// A second window of the same length, scraped as metrics-server scrapes a node.
    pub scraped: Scraped,
}

/// The cost of the stats endpoints: a window in which the agent's `/metrics/resource` (what
/// metrics-server reads) and `/stats/summary` are fetched every [`SCRAPE_PERIOD`].
pub struct Scraped {
    pub rss_mib: f64,
    pub cpu_pct: f64,
    /// Each answered request's time (ms, curl's `time_total`: connect, TLS, response).
    pub resource_ms: Vec<f64>,
    pub summary_ms: Vec<f64>,
    /// Requests that did not answer 200.
    pub failures: usize,
}

/// metrics-server's shortest `--metric-resolution` is 10 s.
const SCRAPE_PERIOD: Duration = Duration::from_secs(10);

/// A Deployment of `n` replicas placed by kube-scheduler (required node affinity on the node's
/// name): create → all pods Running, → all Ready; then a steady window with nothing polling.
pub async fn scale(
    client: &Client,
    env: &Env,
    watch: &PodWatch,
    agent: &Agent,
    tag: &str,
    n: usize,
) -> Scale {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let name = format!("scale-{tag}");
    let dep: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": n,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    // The node by name, as a DaemonSet pins its pods (the hostname label is the
                    // machine's hostname on a crilet node, the override on the kubelet's).
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [agent.kind.node()]}]}]}}},
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "app", "image": crate::image(), "command": ["sh", "-c", TERM],
                                    "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 10}}]
                }
            }
        }
    }))
    .expect("deployment json");
    let cpu0 = agent.cpu_seconds();
    let wall0 = SystemTime::now();
    let t0 = Instant::now();
    deployments.create(&PostParams::default(), &dep).await.expect("create deployment");
    let prefix = format!("{name}-");
    let limit = Duration::from_secs(600);
    watch
        .wait(&format!("{n} pods of {name} Running"), limit, |w| {
            w.all_with(&prefix).iter().filter(|s| s.running.is_some()).count() >= n
        })
        .await;
    watch
        .wait(&format!("{n} pods of {name} Ready"), limit, |w| {
            w.all_with(&prefix).iter().filter(|s| s.ready.is_some()).count() >= n
        })
        .await;
    let seen = watch.all_with(&prefix);
    let last = |f: fn(&Seen) -> Option<Instant>| seen.iter().filter_map(f).max().unwrap_or(t0);
    let running_s = (last(|s| s.running) - t0).as_secs_f64();
    let ready_s = (last(|s| s.ready) - t0).as_secs_f64();
    let wall1 = wall0 + Duration::from_secs_f64(ready_s);
    let start_cpu_s = agent.cpu_seconds() - cpu0;

    // Steady state: 5 s after all Ready, a window with the pods running and nothing polling.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let window = Duration::from_secs(crate::env_num("CRILET_BENCH_CLUSTER_WINDOW", 60));
    let (cpu_a, w_a, t_a) = (agent.cpu_seconds(), SystemTime::now(), Instant::now());
    let mut rss = 0u64;
    while t_a.elapsed() < window {
        rss = rss.max(agent.memory().0);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let secs = t_a.elapsed().as_secs_f64();
    let cpu_pct = (agent.cpu_seconds() - cpu_a) / secs * 100.0;
    let w_b = SystemTime::now();
    // The audit log's writes are synchronous, but give the last ones a moment.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let scraped = scraped_window(env, agent, window).await;
    let user = format!("system:node:{}", agent.kind.node());
    let start_requests = audit_requests(&env.audit_log, &user, wall0, wall1);
    let steady_requests = audit_requests(&env.audit_log, &user, w_a, w_b);

    let _ = deployments.delete(&name, &DeleteParams::background()).await;
    watch
        .wait(&format!("pods of {name} gone"), Duration::from_secs(600), |w| w.live_with(&prefix) == 0)
        .await;
    Scale {
        running_s,
        ready_s,
        requests_per_pod: start_requests as f64 / n as f64,
        start_cpu_s,
        rss_mib: rss as f64 / 1024.0,
        cpu_pct,
        requests_per_min: steady_requests as f64 * 60.0 / secs,
        scraped,
    }
}

/// The steady window again, with the agent's stats endpoints scraped every [`SCRAPE_PERIOD`]
/// with the API server's kubelet client certificate (as the API server's proxy or
/// metrics-server would reach it). The kubelet collects stats all the time (cAdvisor), crilet
/// when asked: this window is where the two costs compare.
async fn scraped_window(env: &Env, agent: &Agent, window: Duration) -> Scraped {
    let port = agent.kind.port();
    let (cpu_a, t_a) = (agent.cpu_seconds(), Instant::now());
    let mut out =
        Scraped { rss_mib: 0.0, cpu_pct: 0.0, resource_ms: vec![], summary_ms: vec![], failures: 0 };
    let mut rss = 0u64;
    let mut next = t_a;
    while t_a.elapsed() < window {
        if Instant::now() >= next {
            next += SCRAPE_PERIOD;
            for (path, into) in
                [("metrics/resource", &mut out.resource_ms), ("stats/summary", &mut out.summary_ms)]
            {
                match fetch(env, port, path).await {
                    Ok(ms) => into.push(ms),
                    Err(e) => {
                        eprintln!("  {} /{path}: {e}", agent.kind.label());
                        out.failures += 1;
                    }
                }
            }
        }
        rss = rss.max(agent.memory().0);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    out.cpu_pct = (agent.cpu_seconds() - cpu_a) / t_a.elapsed().as_secs_f64() * 100.0;
    out.rss_mib = rss as f64 / 1024.0;
    out
}

/// GETs https://127.0.0.1:PORT/PATH with the kubelet client certificate; curl's own timing.
async fn fetch(env: &Env, port: u16, path: &str) -> Result<f64, String> {
    let out = tokio::process::Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-w", "%{http_code} %{time_total}", "--max-time", "20"])
        .arg("--cert")
        .arg(&env.scrape_cert)
        .arg("--key")
        .arg(&env.scrape_key)
        .arg(format!("https://127.0.0.1:{port}/{path}"))
        .output()
        .await
        .map_err(|e| format!("curl: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    match text.split_once(' ') {
        Some(("200", secs)) => {
            secs.trim().parse::<f64>().map(|s| s * 1000.0).map_err(|e| format!("{text}: {e}"))
        }
        _ => Err(format!("answered {text:?}")),
    }
}

/// Requests of `user` the API server received in [from, to], from its audit log (one event per
/// request and stage; counted once per auditID).
fn audit_requests(path: &std::path::Path, user: &str, from: SystemTime, to: SystemTime) -> usize {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("audit log {}: {e}", path.display()));
    let (from, to) =
        (jiff::Timestamp::try_from(from).expect("time"), jiff::Timestamp::try_from(to).expect("time"));
    let mut ids = std::collections::HashSet::new();
    for line in text.lines() {
        let Ok(ev) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if ev["user"]["username"] != user {
            continue;
        }
        let Some(at) =
            ev["requestReceivedTimestamp"].as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok())
        else {
            continue;
        };
        if at >= from && at <= to {
            if let Some(id) = ev["auditID"].as_str() {
                ids.insert(id.to_string());
            }
        }
    }
    ids.len()
}
