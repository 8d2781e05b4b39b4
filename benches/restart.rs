//! Container restart latency of crilet against a baseline measured in the same run, reported as
//! ratios (absolute times depend on the machine; nothing here asserts a time).
//!
//! 1. Exit → replacement started. Baseline ("raw"): bare CRI calls run a sandbox and a container
//!    that exits 1 after ~1 s, detect the exit as fast as the runtime allows (the CRI event
//!    stream's CONTAINER_STOPPED_EVENT where `GetContainerEvents` exists, else `ContainerStatus`
//!    every 10 ms) and at once create + start attempt 1. crilet: an agent of its own runs pods
//!    with `restartPolicy: Always` and the same container, one pod at a time; the first exit is
//!    restarted without back-off. Per restart: attempt 1's CRI `started_at` − attempt 0's
//!    `finished_at` (both from `ContainerStatus`).
//! 2. The same after a runtime outage (CRILET_BENCH_OUTAGE=1, events mode only): containerd is
//!    stopped for 8 s with `hack/containerd.sh stop|start`; once crilet says it follows the event
//!    stream again, the raw and crilet series are measured again. Without the variable this
//!    benchmark never touches containerd itself.
//! 3. Action → status: a second crilet series where the control socket's `ListPods` is polled
//!    back to back over gRPC while the pod runs; per restart, the first moment (wall clock, when
//!    the response arrived) the container's status shows restartCount 1 with the new
//!    containerID, minus that instance's CRI `started_at`. The polling loads the 2 cores, so this
//!    series' own exit → started times are reported on a row of their own; the crilet ratio is
//!    the one of the unpolled series.
//!
//! The series are interleaved (restart i of raw, crilet and crilet-polled, then restart i+1, ...)
//! so that a change in the machine's load during the run hits them alike. The agent runs all
//! along; the baseline's pods are no business of it (their manifest file is not in its
//! directory), it only sees their events. The crilet series find the new instance by listing the
//! runtime every 100 ms; that only decides when to read the timestamps, it is not the measure.
//!
//! Pods live in namespaces of their own (`bench-restart` for crilet's, `bench-restart-raw` for
//! the baseline's), state in a temp dir under /var/lib/crilet-dev; every pod, sandbox, the
//! agent (by PID) and the temp dir are removed at the end, also after a panic or Ctrl-C.
//!
//! Needs the environment of `hack/setup.sh`. Run: `cargo bench --bench restart`, or
//! `hack/bench-restart.sh [--runtime 2.1|1.6] [--outage]`. Restarts per series: CRILET_BENCH_RESTARTS
//! (default 8); CRILET_BENCH_POLL_GAP_US puts a pause between the ListPods calls of series 3.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crilet::cri::{CriClient, api};
use crilet::model::{ContainerState, DesiredPod, ObservedContainer, PodKey, keys};
use crilet::pod::spec::{Kind, NodeConfig, RuntimeValues, container_config, sandbox_config};
use crilet::proto::{ListPodsRequest, VersionRequest, VersionResponse};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// crilet's pods.
const NS: &str = "bench-restart";
/// The baseline's pods.
const RAW_NS: &str = "bench-restart-raw";
const CMD: &str = "sleep 1; exit 1";
/// Upper bound for any one wait (a pod start, a restart, a removal).
const WAIT: Duration = Duration::from_secs(120);
/// How often the crilet series look at the runtime for the new instance (not the measurement:
/// the timestamps come from the runtime).
const CRI_POLL: Duration = Duration::from_millis(100);
/// The baseline's exit detection where the runtime has no event stream.
const STATUS_POLL: Duration = Duration::from_millis(10);
/// How long the containerd outage lasts.
const OUTAGE: Duration = Duration::from_secs(8);

fn now_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_nanos() as i64
}

fn ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

/// What the cleanup must stop, whatever happened to the benchmark itself (sandboxes are found by
/// namespace).
#[derive(Default)]
struct Leftovers {
    agent: Mutex<Option<Child>>,
}

#[derive(Clone)]
struct Ctx {
    cri: CriClient,
    endpoint: String,
    image: String,
    image_id: String,
    n: usize,
    dir: PathBuf,
    manifests: PathBuf,
    socket: PathBuf,
    repo: PathBuf,
    left: Arc<Leftovers>,
}

// ---------------------------------------------------------------------------------------------
// Baseline: bare CRI calls.

/// The baseline's view of the CRI event stream: (container id, event type) of every event.
struct RawEvents {
    rx: mpsc::UnboundedReceiver<(String, i32)>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawEvents {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Opens the runtime's event stream, or None when it has none (Unimplemented). containerd
/// (grpc-go) sends the response headers only with the first event but refuses an unimplemented
/// call at once, so a call still pending after a moment counts as subscribed (as crilet does).
async fn open_events(cri: &CriClient) -> Option<RawEvents> {
    let (tx, rx) = mpsc::unbounded_channel();
    let (etx, erx) = tokio::sync::oneshot::channel();
    let cri = cri.clone();
    let task = tokio::spawn(async move {
        match cri.container_events().await {
            Err(e) => {
                let _ = etx.send(e);
            }
            Ok(mut stream) => {
                while let Ok(Some(ev)) = stream.message().await {
                    if tx.send((ev.container_id, ev.container_event_type)).is_err() {
                        break;
                    }
                }
            }
        }
    });
    match tokio::time::timeout(Duration::from_secs(1), erx).await {
        Ok(Ok(e)) if e.is_unimplemented() => None,
        Ok(Ok(e)) => panic!("GetContainerEvents: {e}"),
        _ => Some(RawEvents { rx, task }),
    }
}

fn raw_node(dir: &Path) -> NodeConfig {
    NodeConfig {
        root_dir: dir.join("raw/root"),
        pod_logs_dir: dir.join("raw/logs"),
        container_logs_dir: None,
        node_name: "bench-restart".into(),
        host_ip: None,
        dns: crilet::dns::DnsSettings::default(),
        cgroup_driver: Default::default(),
        seccomp_default: false,
    }
}

/// One baseline restart; returns attempt 1's started_at − attempt 0's finished_at (ns).
async fn raw_once(ctx: &Ctx, node: &NodeConfig, name: &str, events: &mut Option<RawEvents>) -> i64 {
    let cri = &ctx.cri;
    let c = Container {
        name: "c".into(),
        image: Some(ctx.image.clone()),
        command: Some(vec!["sh".into(), "-c".into(), CMD.into()]),
        ..Default::default()
    };
    let mut pod = Pod::default();
    pod.metadata.name = Some(name.into());
    pod.metadata.namespace = Some(RAW_NS.into());
    pod.spec = Some(PodSpec {
        containers: vec![c.clone()],
        termination_grace_period_seconds: Some(1),
        ..Default::default()
    });
    let d = DesiredPod {
        key: PodKey::new(RAW_NS, name),
        uid: format!("{RAW_NS}-{}", uuid::Uuid::new_v4()),
        pod: Arc::new(pod),
        source: crilet::model::PodSource::File("/nonexistent".into()),
        doc: 0,
        warnings: vec![],
    };
    let sb_cfg = sandbox_config(node, &d, 0, Default::default());
    std::fs::create_dir_all(&sb_cfg.log_directory).expect("log dir");
    let sb = cri.run_sandbox(sb_cfg.clone(), "").await.expect("RunPodSandbox");
    let config = |attempt: u32| {
        let rv =
            RuntimeValues { image_ref: ctx.image_id.clone(), restart_count: attempt, ..Default::default() };
        container_config(node, &d, &c, Kind::App, &rv, vec![]).expect("container config")
    };
    let id0 = cri.create_container(&sb, config(0), sb_cfg.clone()).await.expect("CreateContainer 0");
    cri.start_container(&id0).await.expect("StartContainer 0");
    let deadline = Instant::now() + WAIT;
    match events {
        Some(ev) => loop {
            let got = tokio::time::timeout_at(deadline.into(), ev.rx.recv()).await;
            let (id, kind) =
                got.expect("no CONTAINER_STOPPED_EVENT in time").expect("the CRI event stream ended");
            if id == id0 && kind == api::ContainerEventType::ContainerStoppedEvent as i32 {
                break;
            }
        },
        None => loop {
            let st = cri.container_status(&id0, &sb).await.expect("ContainerStatus");
            if st.state == ContainerState::Exited {
                break;
            }
            assert!(Instant::now() < deadline, "the baseline container did not exit");
            tokio::time::sleep(STATUS_POLL).await;
        },
    }
    let id1 = cri.create_container(&sb, config(1), sb_cfg).await.expect("CreateContainer 1");
    cri.start_container(&id1).await.expect("StartContainer 1");
    let old = cri.container_status(&id0, &sb).await.expect("ContainerStatus 0");
    let new = cri.container_status(&id1, &sb).await.expect("ContainerStatus 1");
    assert!(old.finished_at > 0 && new.started_at > 0, "missing CRI timestamps");
    cri.stop_sandbox(&sb).await.expect("StopPodSandbox");
    cri.remove_sandbox(&sb).await.expect("RemovePodSandbox");
    new.started_at - old.finished_at
}

// ---------------------------------------------------------------------------------------------
// crilet.

fn manifest(name: &str, image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {NS}}}\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  restartPolicy: Always\n  containers:\n  - name: c\n    \
         image: {image}\n    command: [sh, -c, \"{CMD}\"]\n"
    )
}

fn write_manifest(dir: &Path, name: &str, text: &str) {
    // Written beside the directory's pattern (.tmp is no manifest), then renamed into place, so
    // the agent never reads half a file.
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).expect("write manifest");
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)).expect("chmod manifest");
    std::fs::rename(&tmp, dir.join(format!("{name}.yaml"))).expect("rename manifest");
}

fn start_agent(ctx: &Ctx) {
    // CRILET_BENCH_BIN: the binary to measure (hack/bench.sh passes the release build).
    let mut cmd =
        testkit::AgentCmd::in_dir(testkit::bench_bin(env!("CARGO_BIN_EXE_crilet")), &ctx.endpoint, &ctx.dir);
    cmd.manifests = ctx.manifests.clone();
    cmd.root = ctx.dir.join("agent/root");
    cmd.pod_logs = ctx.dir.join("agent/logs");
    cmd.socket = ctx.socket.clone();
    cmd.node_name = Some("bench-restart".into());
    *ctx.left.agent.lock().unwrap() = Some(cmd.spawn());
}

async fn agent_version(socket: &Path) -> Option<VersionResponse> {
    let mut client = crilet::api::connect(socket).await.ok()?;
    Some(client.version(VersionRequest {}).await.ok()?.into_inner())
}

/// Waits until the agent answers and its PLEG mode is `want` (any mode when None).
async fn wait_agent(ctx: &Ctx, want: Option<&str>) -> VersionResponse {
    let what = format!("crilet to answer (mode {want:?})");
    testkit::wait_until(&what, WAIT, Duration::from_millis(50), || async {
        if let Some(agent) = ctx.left.agent.lock().unwrap().as_mut() {
            testkit::assert_alive(agent, "crilet", "its log above");
        }
        agent_version(&ctx.socket).await.filter(|v| want.is_none_or(|m| v.pleg_mode == m))
    })
    .await
}

fn mode_line(v: &VersionResponse) -> String {
    format!("Runtime Changes: {} ({} CRI events received)", v.pleg_mode, v.events_received)
}

/// Pause between two ListPods calls: CRILET_BENCH_POLL_GAP_US, default 0 (back to back, as fast
/// as possible; that loads the machine, a gap trades resolution for less load).
fn poll_gap() -> Duration {
    Duration::from_micros(
        std::env::var("CRILET_BENCH_POLL_GAP_US").ok().and_then(|v| v.parse().ok()).unwrap_or(0),
    )
}

/// What the control-socket poller saw: the first wall-clock time (ns) each (restartCount,
/// containerID) pair showed up, and the same for the pair with state running.
#[derive(Default)]
struct Seen {
    first: HashMap<(i64, String), i64>,
    running: HashMap<(i64, String), i64>,
    rtts: Vec<Duration>,
}

/// Polls `ListPods` back to back until `stop`, recording into `seen` what pod `name` shows.
async fn poll_status(socket: PathBuf, name: String, seen: Arc<Mutex<Seen>>, stop: CancellationToken) {
    let mut client = crilet::api::connect(&socket).await.expect("connect to the control socket");
    let gap = poll_gap();
    while !stop.is_cancelled() {
        if !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
        let t0 = Instant::now();
        let resp = client.list_pods(ListPodsRequest { namespace: NS.into() }).await;
        let at = now_ns();
        let rtt = t0.elapsed();
        let Ok(resp) = resp else {
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        };
        let mut s = seen.lock().unwrap();
        s.rtts.push(rtt);
        for rec in resp.into_inner().pods {
            let Ok(pod) = serde_json::from_str::<serde_json::Value>(&rec.pod_json) else { continue };
            if pod["metadata"]["name"] != name.as_str() {
                continue;
            }
            for cs in pod["status"]["containerStatuses"].as_array().into_iter().flatten() {
                let key = (
                    cs["restartCount"].as_i64().unwrap_or(-1),
                    cs["containerID"].as_str().unwrap_or_default().to_string(),
                );
                if cs["state"]["running"].is_object() {
                    s.running.entry(key.clone()).or_insert(at);
                }
                s.first.entry(key).or_insert(at);
            }
        }
    }
}

/// One crilet restart.
struct Sample {
    /// Attempt 1's started_at − attempt 0's finished_at.
    restart: i64,
    /// First ListPods showing restartCount 1 + the new containerID (and the same with state
    /// running), minus attempt 1's started_at; only when the status was polled.
    status: Option<(i64, i64)>,
}

/// The pod's containers as the runtime lists them.
async fn containers_of(cri: &CriClient, name: &str) -> Vec<api::Container> {
    let (_, cs) = cri.list_all(Some((keys::POD_NAMESPACE, NS))).await.expect("ListContainers");
    cs.into_iter().filter(|c| c.labels.get(keys::POD_NAME).is_some_and(|n| n == name)).collect()
}

async fn instance(cri: &CriClient, cs: &[api::Container], attempt: u32) -> Option<ObservedContainer> {
    let c = cs.iter().find(|c| c.metadata.as_ref().is_some_and(|m| m.attempt == attempt))?;
    cri.container_status(&c.id, &c.pod_sandbox_id).await.ok()
}

async fn crilet_once(ctx: &Ctx, name: &str, poll: bool) -> Sample {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = CancellationToken::new();
    let poller = poll
        .then(|| tokio::spawn(poll_status(ctx.socket.clone(), name.to_string(), seen.clone(), stop.clone())));
    write_manifest(&ctx.manifests, name, &manifest(name, &ctx.image));
    let deadline = Instant::now() + WAIT;
    let (old, new) = loop {
        tokio::time::sleep(CRI_POLL).await;
        assert!(Instant::now() < deadline, "{name}: no restarted instance in time (see the agent log)");
        let cs = containers_of(&ctx.cri, name).await;
        let Some(new) = instance(&ctx.cri, &cs, 1).await.filter(|c| c.started_at > 0) else { continue };
        let Some(old) = instance(&ctx.cri, &cs, 0).await.filter(|c| c.finished_at > 0) else { continue };
        break (old, new);
    };
    let status = if poll {
        let key = (1, format!("containerd://{}", new.id));
        let at = loop {
            let got = {
                let s = seen.lock().unwrap();
                s.first.get(&key).copied().zip(s.running.get(&key).copied())
            };
            if let Some(at) = got {
                break at;
            }
            assert!(Instant::now() < deadline, "{name}: the status never showed the restarted container");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        stop.cancel();
        if let Some(p) = poller {
            let _ = p.await;
        }
        Some((at.0 - new.started_at, at.1 - new.started_at))
    } else {
        None
    };
    // Remove the pod and wait until it is gone, so the next one runs alone.
    std::fs::remove_file(ctx.manifests.join(format!("{name}.yaml"))).expect("remove manifest");
    loop {
        let (sbs, _) = ctx.cri.list_all(Some((keys::POD_NAMESPACE, NS))).await.expect("ListPodSandbox");
        if !sbs.iter().any(|s| s.labels.get(keys::POD_NAME).is_some_and(|n| n == name)) {
            break;
        }
        assert!(Instant::now() < deadline + WAIT, "{name}: the agent did not remove the pod");
        tokio::time::sleep(CRI_POLL).await;
    }
    let rtts = std::mem::take(&mut seen.lock().unwrap().rtts);
    let sample = Sample { restart: new.started_at - old.finished_at, status };
    match sample.status {
        Some((s, r)) => eprintln!(
            "  crilet {name}: {:.1} ms; status +{:.1} ms (running +{:.1} ms, {} ListPods calls)",
            ms(sample.restart),
            ms(s),
            ms(r),
            rtts.len()
        ),
        None => eprintln!("  crilet {name}: {:.1} ms", ms(sample.restart)),
    }
    POLL_RTTS.lock().unwrap().extend(rtts);
    sample
}

/// Round trips of every ListPods call of the polled series (their resolution).
static POLL_RTTS: Mutex<Vec<Duration>> = Mutex::new(Vec::new());

/// One measurement round: the three series, interleaved (restart i of raw, of crilet and of
/// crilet with its status polled, then restart i+1, ...), so that a change in the machine's load
/// during the run hits every series alike.
struct Round {
    raw: Vec<i64>,
    clean: Vec<Sample>,
    polled: Vec<Sample>,
    rtts: Vec<Duration>,
    /// How the baseline detected exits.
    how: &'static str,
}

async fn round(ctx: &Ctx, tag: &str) -> Round {
    let node = raw_node(&ctx.dir);
    let mut events = open_events(&ctx.cri).await;
    let how = if events.is_some() {
        "CRI event stream (CONTAINER_STOPPED_EVENT)"
    } else {
        "ContainerStatus every 10 ms (no GetContainerEvents)"
    };
    let mut r = Round { raw: vec![], clean: vec![], polled: vec![], rtts: vec![], how };
    for i in 0..ctx.n {
        let v = raw_once(ctx, &node, &format!("{tag}raw-{i}"), &mut events).await;
        eprintln!("  raw {tag}raw-{i}: {:.1} ms", ms(v));
        r.raw.push(v);
        r.clean.push(crilet_once(ctx, &format!("{tag}a-{i}"), false).await);
        r.polled.push(crilet_once(ctx, &format!("{tag}b-{i}"), true).await);
    }
    r.rtts = std::mem::take(&mut *POLL_RTTS.lock().unwrap());
    r
}

// ---------------------------------------------------------------------------------------------
// Outage.

async fn containerd_script(repo: &Path, what: &str) {
    // Without CRILET_RUNTIME the script acts on the runtime the environment was set up with.
    let status = tokio::process::Command::new("bash")
        .arg(repo.join("hack/containerd.sh"))
        .arg(what)
        .env_remove("CRILET_RUNTIME")
        .status()
        .await
        .expect("run hack/containerd.sh");
    assert!(status.success(), "hack/containerd.sh {what} failed ({status})");
}

async fn wait_runtime(cri: &CriClient) {
    testkit::wait_until("the runtime to answer", WAIT, Duration::from_millis(100), || async {
        cri.version().await.ok().map(drop)
    })
    .await;
}

/// Stops containerd for OUTAGE and starts it again; returns how long after the start crilet
/// followed the event stream again.
async fn outage(ctx: &Ctx) -> Duration {
    eprintln!("outage: stopping containerd for {} s", OUTAGE.as_secs());
    containerd_script(&ctx.repo, "stop").await;
    tokio::time::sleep(OUTAGE).await;
    let t = Instant::now();
    containerd_script(&ctx.repo, "start").await;
    wait_runtime(&ctx.cri).await;
    wait_agent(ctx, Some("events")).await;
    t.elapsed()
}

// ---------------------------------------------------------------------------------------------
// Report.

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 { f64::NAN } else { (s[(n - 1) / 2] + s[n / 2]) / 2.0 }
}

/// Nearest-rank p90 (with 8 samples: the largest).
fn p90(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() { f64::NAN } else { s[((s.len() as f64 * 0.9).ceil() as usize).max(1) - 1] }
}

fn row(out: &mut String, label: &str, v: &[f64], base: Option<f64>) {
    let ratio = base.map_or("".to_string(), |b| format!("{:.2}x", median(v) / b));
    out.push_str(&format!("{label:<46}{:>10.1}{:>10.1}{:>10}\n", median(v), p90(v), ratio));
}

/// The tables of one measurement round (before or after the outage).
fn table(title: &str, r: &Round) -> String {
    let f = |v: &[i64]| v.iter().map(|&x| ms(x)).collect::<Vec<_>>();
    let raw = f(&r.raw);
    let clean_r = f(&r.clean.iter().map(|s| s.restart).collect::<Vec<_>>());
    let polled_r = f(&r.polled.iter().map(|s| s.restart).collect::<Vec<_>>());
    let st = f(&r.polled.iter().filter_map(|s| s.status.map(|x| x.0)).collect::<Vec<_>>());
    let run = f(&r.polled.iter().filter_map(|s| s.status.map(|x| x.1)).collect::<Vec<_>>());
    let base = median(&raw);
    let mut out = format!("\n{title}\n");
    out.push_str(&format!(
        "{:<46}{:>10}{:>10}{:>10}\n",
        "exit -> replacement started (ms)", "median", "p90", "ratio"
    ));
    row(&mut out, "raw CRI", &raw, Some(base));
    row(&mut out, "crilet", &clean_r, Some(base));
    row(&mut out, "crilet, status polled (series 3)", &polled_r, Some(base));
    out.push_str(&format!(
        "{:<46}{:>10}{:>10}\n",
        "action -> status (ms after CRI started_at)", "median", "p90"
    ));
    row(&mut out, "restartCount 1 + new containerID", &st, None);
    row(&mut out, "  ... and state running", &run, None);
    let rtt: Vec<f64> = r.rtts.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    out.push_str(&format!(
        "status polling: ListPods over gRPC, {}; round trip median {:.2} ms, p90 {:.2} ms, {} calls\n",
        if poll_gap().is_zero() {
            "back to back (resolution = the round trip)".to_string()
        } else {
            format!("{:?} pause between calls (resolution = pause + round trip)", poll_gap())
        },
        median(&rtt),
        p90(&rtt),
        rtt.len()
    ));
    out
}

// ---------------------------------------------------------------------------------------------

async fn run(ctx: Ctx, outage_wanted: bool) -> String {
    let version = ctx.cri.version().await.expect("CRI Version");
    start_agent(&ctx);
    let mut v = wait_agent(&ctx, None).await;
    // crilet counts an event stream as followed once the call has stayed open for 200 ms; give
    // it that (a runtime without events says relist at once and stays there).
    let settle = Instant::now() + Duration::from_secs(3);
    while v.pleg_mode != "events" && Instant::now() < settle {
        tokio::time::sleep(Duration::from_millis(50)).await;
        v = wait_agent(&ctx, None).await;
    }
    eprintln!("crilet: {}", mode_line(&v));
    let first = round(&ctx, "").await;
    let after_v = agent_version(&ctx.socket).await.unwrap_or_else(|| v.clone());

    let mut out = format!(
        "restart benchmark: {} restarts per series\nruntime: {} {} (CRI {})\nbaseline exit detection: {}\n\
         crilet mode (`crilet version`): at its start {}; after the series {}\n",
        ctx.n,
        version.name,
        version.version,
        version.api_version,
        first.how,
        mode_line(&v),
        mode_line(&after_v),
    );
    out.push_str(&table("before any outage", &first));

    if outage_wanted && after_v.pleg_mode != "events" {
        out.push_str(
            "\noutage: skipped (crilet is not in events mode; the outage series is for events mode)\n",
        );
    } else if outage_wanted {
        let back = outage(&ctx).await;
        let v2 = wait_agent(&ctx, Some("events")).await;
        eprintln!("crilet after the outage: {}", mode_line(&v2));
        let second = round(&ctx, "o").await;
        let end_v = agent_version(&ctx.socket).await.unwrap_or(v2);
        out.push_str(&format!(
            "\noutage: containerd stopped for {} s (hack/containerd.sh stop/start); crilet followed the event \
             stream again {:.2} s after the start command; at the end: {}\n",
            OUTAGE.as_secs(),
            back.as_secs_f64(),
            mode_line(&end_v)
        ));
        out.push_str(&table("after the outage", &second));
    }
    out
}

/// Removes everything the benchmark made: the agent's pods (through the agent, then directly),
/// the baseline's sandboxes, the agent process (by PID).
async fn cleanup(ctx: &Ctx) {
    if let Ok(rd) = std::fs::read_dir(&ctx.manifests) {
        for e in rd.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
    let child = ctx.left.agent.lock().unwrap().take();
    if let Some(child) = child {
        // Give the agent the chance to terminate its pods itself.
        testkit::stop_when_done(child, Duration::from_secs(60), || async {
            matches!(ctx.cri.list_all(Some((keys::POD_NAMESPACE, NS))).await, Ok((s, _)) if s.is_empty())
        })
        .await;
    }
    force_remove(&ctx.cri).await;
    // Say so when something is left (the runtime may be down right now, e.g. restarted by
    // someone else); the next run removes it first.
    let mut left = 0;
    for ns in [NS, RAW_NS] {
        match ctx.cri.list_all(Some((keys::POD_NAMESPACE, ns))).await {
            Ok((s, _)) => left += s.len(),
            Err(e) => {
                eprintln!("cleanup: cannot check for sandboxes left in {ns}: {e}");
                left += 1;
            }
        }
    }
    if left > 0 {
        eprintln!("cleanup: sandboxes may be left in namespaces {NS}/{RAW_NS}; the next run removes them");
    }
}

/// Stops and removes every sandbox in the benchmark's namespaces (left by an earlier run, or
/// by this one when the agent could not).
async fn force_remove(cri: &CriClient) -> usize {
    let mut n = 0;
    for ns in [NS, RAW_NS] {
        let Ok((sbs, _)) = cri.list_all(Some((keys::POD_NAMESPACE, ns))).await else { continue };
        for sb in sbs {
            let _ = cri.stop_sandbox(&sb.id).await;
            if cri.remove_sandbox(&sb.id).await.is_ok() {
                n += 1;
            }
        }
    }
    n
}

#[tokio::main]
async fn main() {
    let env = testkit::EnvFile::load(testkit::MAIN_ENV_FILE, "run hack/setup.sh first");
    let endpoint = env.endpoint();
    let image = env.get("CRILET_IMAGE_BUSYBOX");
    let n: usize =
        std::env::var("CRILET_BENCH_RESTARTS").ok().and_then(|v| v.parse().ok()).unwrap_or(8).max(1);
    let outage_wanted = std::env::var("CRILET_BENCH_OUTAGE").is_ok_and(|v| v == "1");
    let cri = CriClient::new(&endpoint, &endpoint).expect("CRI client");
    wait_runtime(&cri).await;
    let stale = force_remove(&cri).await;
    if stale > 0 {
        eprintln!("removed {stale} sandbox(es) left in {NS}/{RAW_NS} by an earlier run");
    }
    let image_id = cri
        .image_id(&image)
        .await
        .expect("ImageStatus")
        .unwrap_or_else(|| panic!("{image} is not pulled: run hack/setup.sh"))
        .id;

    let tmp = tempfile::Builder::new()
        .prefix("bench-restart.")
        .tempdir_in("/var/lib/crilet-dev")
        .expect("temp dir");
    let dir = tmp.path().to_path_buf();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).expect("mkdir manifests");
    std::fs::set_permissions(&manifests, std::fs::Permissions::from_mode(0o755)).expect("chmod manifests");
    let ctx = Ctx {
        cri,
        endpoint,
        image,
        image_id,
        n,
        socket: dir.join("crilet.sock"),
        dir,
        manifests,
        repo: PathBuf::from(env!("CARGO_MANIFEST_DIR")),
        left: Arc::new(Leftovers::default()),
    };

    // The body runs as a task of its own so that a panic in it still reaches the cleanup below.
    let body = tokio::spawn(run(ctx.clone(), outage_wanted));
    let abort = body.abort_handle();
    let result = tokio::select! {
        r = body => r.map_err(|e| e.to_string()),
        _ = tokio::signal::ctrl_c() => {
            abort.abort();
            Err("interrupted".to_string())
        }
    };
    if result.is_err() {
        testkit::print_last_lines("last lines of the agent's log", &ctx.dir.join("crilet.log"), 30);
    }
    eprintln!("cleaning up");
    cleanup(&ctx).await;
    drop(tmp);
    match result {
        Ok(report) => print!("{report}"),
        Err(e) => {
            eprintln!("restart benchmark failed: {e}");
            std::process::exit(1);
        }
    }
}
