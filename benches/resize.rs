//! In-place pod resize latency (KEP-1287) of crilet against a baseline measured in the same run,
//! reported as a ratio (absolute times depend on the machine; nothing here asserts a time).
//!
//! What is measured, per sample: the time from an action to the first read of the container's
//! cgroup memory-limit file that shows the new value, the file being read every 2 ms (a tokio
//! interval; the resolution is that plus one read). The file is
//! `/sys/fs/cgroup/memory/kubepods/burstable/pod<UID>/<CONTAINER_ID>/memory.limit_in_bytes` on
//! cgroup v1, `/sys/fs/cgroup/kubepods/burstable/pod<UID>/<CONTAINER_ID>/memory.max` on cgroup v2
//! (when `/sys/fs/cgroup/cgroup.controllers` exists). The memory limit alternates between 96Mi
//! and 64Mi (it starts at 64Mi, sample 0 raises it).
//!
//! - raw (the baseline): a sandbox in namespace `bench-resize-raw` with cgroup parent
//!   `/kubepods/burstable/pod<uuid>` and one container `sleep 3600`, both made with bare CRI
//!   calls from the same pod spec as crilet's (so also Burstable). The action is a CRI
//!   `UpdateContainerResources` call (memory limit, cpu shares 102); the clock starts just
//!   before the call and the file is read while the call is in flight. The call's own round
//!   trip is reported below the table.
//! - crilet: an agent of its own runs the static pod `bench-resize/rs` (container `main`,
//!   `sleep 3600`, requests cpu 100m / memory 32Mi, a memory limit, `resizePolicy` memory
//!   NotRequired). The action is the edit of its manifest: the new text is written to a temp
//!   file in the manifest directory (a name the agent ignores) and renamed over the manifest;
//!   the clock starts just before the rename. So this includes the agent's file watch (and its
//!   settle time), parsing, the resize decision and its `UpdateContainerResources` call. The
//!   agent resizes in place: the pod UID and the container ID must stay; a change of either is
//!   counted and reported (the measurement then follows the new container).
//!
//! The series are interleaved (sample i of raw, then sample i of crilet, then i+1, ...) so that a
//! change in the machine's load during the run hits both alike. After every sample the benchmark
//! pauses 1 s and checks that the file still shows the new value (a later revert is counted).
//!
//! Pods live in namespaces of their own (`bench-resize` for crilet's, `bench-resize-raw` for the
//! baseline's), state in a temp dir under /var/lib/crilet-dev; every pod, sandbox, the raw pod's
//! (empty) cgroup directories, the agent (by PID) and the temp dir are removed at the end, also
//! after a panic or Ctrl-C.
//!
//! Needs the environment of `hack/setup.sh`. Run: `cargo bench --profile dev --bench resize`, or
//! `hack/bench-resize.sh`. Resizes per series: CRILET_BENCH_RESIZES (default 10).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crilet::cri::{CriClient, api};
use crilet::model::{DesiredPod, PodKey, keys};
use crilet::pod::spec::{Kind, NodeConfig, RuntimeValues, container_config, sandbox_config};
use crilet::proto::{VersionRequest, VersionResponse};
use k8s_openapi::api::core::v1::Pod;
use tokio::time::MissedTickBehavior;

/// crilet's pod.
const NS: &str = "bench-resize";
/// The baseline's pod.
const RAW_NS: &str = "bench-resize-raw";
/// crilet's pod name (and its manifest file `rs.yaml`).
const NAME: &str = "rs";
const CONTAINER: &str = "main";
/// Upper bound for any one wait (a pod start, a resize, a removal).
const WAIT: Duration = Duration::from_secs(120);
/// How often the cgroup file is read.
const POLL: Duration = Duration::from_millis(2);
/// The pause after every sample, after which the value must still be there.
const SETTLE: Duration = Duration::from_secs(1);
const MI: i64 = 1024 * 1024;
/// The memory limit the pods start with (Mi).
const START_MI: i64 = 64;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The memory limit (Mi) sample `i` sets: 96, 64, 96, ... (the pods start at 64).
fn limit_mi(i: usize) -> i64 {
    if i % 2 == 0 { 96 } else { 64 }
}

fn cgroup_v2() -> bool {
    Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
}

/// The memory-limit file of container `id` of the Burstable pod `uid`.
fn limit_file(uid: &str, id: &str) -> PathBuf {
    if cgroup_v2() {
        PathBuf::from(format!("/sys/fs/cgroup/kubepods/burstable/pod{uid}/{id}/memory.max"))
    } else {
        PathBuf::from(format!("/sys/fs/cgroup/memory/kubepods/burstable/pod{uid}/{id}/memory.limit_in_bytes"))
    }
}

fn read_limit(path: &Path) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Reads `path` every POLL until it shows `want`; returns the time since `t0` of that read, None
/// after WAIT.
async fn poll_until(path: &Path, want: i64, t0: Instant) -> Option<Duration> {
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if read_limit(path) == Some(want) {
            return Some(t0.elapsed());
        }
        if t0.elapsed() > WAIT {
            return None;
        }
    }
}

/// What the cleanup must stop or remove, whatever happened to the benchmark itself (sandboxes
/// are found by namespace).
#[derive(Default)]
struct Leftovers {
    agent: Mutex<Option<Child>>,
    /// The raw pod's UID: its pod cgroup directories are removed at the end.
    raw_uid: Mutex<Option<String>>,
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
    left: Arc<Leftovers>,
}

/// The pod both series run (crilet's from its manifest, the baseline's parsed from the same text).
fn manifest(image: &str, ns: &str, memory_mi: i64) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {NAME}, namespace: {ns}}}\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  restartPolicy: Always\n  containers:\n  - name: {CONTAINER}\n    \
         image: {image}\n    command: [sleep, \"3600\"]\n    \
         resizePolicy: [{{resourceName: memory, restartPolicy: NotRequired}}]\n    \
         resources:\n      requests: {{cpu: 100m, memory: 32Mi}}\n      limits: {{memory: {memory_mi}Mi}}\n"
    )
}

/// Writes `text` beside the manifest (.tmp is no manifest) and returns that temp file; renaming
/// it to `manifest_path` is the edit.
fn stage_manifest(dir: &Path, text: &str) -> PathBuf {
    let tmp = dir.join(format!(".{NAME}.tmp"));
    std::fs::write(&tmp, text).expect("write manifest");
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)).expect("chmod manifest");
    tmp
}

fn manifest_path(dir: &Path) -> PathBuf {
    dir.join(format!("{NAME}.yaml"))
}

// ---------------------------------------------------------------------------------------------
// Baseline: bare CRI calls.

struct Raw {
    uid: String,
    id: String,
}

fn raw_node(dir: &Path) -> NodeConfig {
    NodeConfig {
        root_dir: dir.join("raw/root"),
        pod_logs_dir: dir.join("raw/logs"),
        container_logs_dir: None,
        node_name: "bench-resize".into(),
        host_ip: None,
        dns: crilet::dns::DnsSettings::default(),
        cgroup_driver: Default::default(),
        seccomp_default: false,
    }
}

/// Runs the baseline's sandbox and container and waits until its cgroup shows the start limit.
async fn raw_setup(ctx: &Ctx) -> Raw {
    let cri = &ctx.cri;
    let node = raw_node(&ctx.dir);
    let pod: Pod = serde_yaml_ng::from_str(&manifest(&ctx.image, RAW_NS, START_MI)).expect("raw pod spec");
    let c = pod.spec.as_ref().expect("spec").containers[0].clone();
    let uid = uuid::Uuid::new_v4().to_string();
    *ctx.left.raw_uid.lock().unwrap() = Some(uid.clone());
    let d = DesiredPod {
        key: PodKey::new(RAW_NS, NAME),
        uid: uid.clone(),
        pod: Arc::new(pod),
        source: crilet::model::PodSource::File("/nonexistent".into()),
        doc: 0,
        warnings: vec![],
    };
    let sb_cfg = sandbox_config(&node, &d, 0, Default::default());
    let parent = sb_cfg.linux.as_ref().map(|l| l.cgroup_parent.clone()).unwrap_or_default();
    assert_eq!(parent, format!("/kubepods/burstable/pod{uid}"), "the raw pod is not Burstable");
    std::fs::create_dir_all(&sb_cfg.log_directory).expect("log dir");
    let sb = cri.run_sandbox(sb_cfg.clone(), "").await.expect("RunPodSandbox");
    let rv = RuntimeValues { image_ref: ctx.image_id.clone(), ..Default::default() };
    let config = container_config(&node, &d, &c, Kind::App, &rv, vec![]).expect("container config");
    let id = cri.create_container(&sb, config, sb_cfg).await.expect("CreateContainer");
    cri.start_container(&id).await.expect("StartContainer");
    let path = limit_file(&uid, &id);
    poll_until(&path, START_MI * MI, Instant::now())
        .await
        .unwrap_or_else(|| panic!("raw: {} never showed {START_MI}Mi", path.display()));
    Raw { uid, id }
}

/// One baseline resize: (call → file shows it, the call's round trip).
async fn raw_once(ctx: &Ctx, raw: &Raw, i: usize) -> (Duration, Duration) {
    let want = limit_mi(i) * MI;
    let path = limit_file(&raw.uid, &raw.id);
    let linux =
        api::LinuxContainerResources { memory_limit_in_bytes: want, cpu_shares: 102, ..Default::default() };
    let t0 = Instant::now();
    let call = async {
        let r = ctx.cri.update_container_resources(&raw.id, linux).await;
        (r, t0.elapsed())
    };
    let ((r, rtt), seen) = tokio::join!(call, poll_until(&path, want, t0));
    r.expect("UpdateContainerResources");
    let seen = seen.unwrap_or_else(|| panic!("raw sample {i}: {} never showed {want}", path.display()));
    (seen, rtt)
}

// ---------------------------------------------------------------------------------------------
// crilet.

fn start_agent(ctx: &Ctx) {
    let mut cmd = testkit::AgentCmd::in_dir(env!("CARGO_BIN_EXE_crilet"), &ctx.endpoint, &ctx.dir);
    cmd.manifests = ctx.manifests.clone();
    cmd.root = ctx.dir.join("agent/root");
    cmd.pod_logs = ctx.dir.join("agent/logs");
    cmd.socket = ctx.socket.clone();
    cmd.node_name = Some("bench-resize".into());
    *ctx.left.agent.lock().unwrap() = Some(cmd.spawn());
}

async fn agent_version(socket: &Path) -> Option<VersionResponse> {
    let mut client = crilet::api::connect(socket).await.ok()?;
    Some(client.version(VersionRequest {}).await.ok()?.into_inner())
}

fn check_agent_alive(ctx: &Ctx) {
    if let Some(agent) = ctx.left.agent.lock().unwrap().as_mut() {
        testkit::assert_alive(agent, "crilet", "its log below");
    }
}

/// Waits until the agent answers on its control socket.
async fn wait_agent(ctx: &Ctx) -> VersionResponse {
    testkit::wait_until("crilet to answer", WAIT, Duration::from_millis(50), || async {
        check_agent_alive(ctx);
        agent_version(&ctx.socket).await
    })
    .await
}

/// crilet's running container `main`: (pod UID, container ID), if there is one.
async fn crilet_container(cri: &CriClient) -> Option<(String, String)> {
    let (_, cs) = cri.list_all(Some((keys::POD_NAMESPACE, NS))).await.ok()?;
    let c = cs.into_iter().find(|c| {
        c.state == api::ContainerState::ContainerRunning as i32
            && c.metadata.as_ref().is_some_and(|m| m.name == CONTAINER)
    })?;
    Some((c.labels.get(keys::POD_UID)?.clone(), c.id))
}

/// Runs crilet's pod and waits until its container runs with the start limit.
async fn crilet_setup(ctx: &Ctx) -> (String, String) {
    let tmp = stage_manifest(&ctx.manifests, &manifest(&ctx.image, NS, START_MI));
    std::fs::rename(&tmp, manifest_path(&ctx.manifests)).expect("rename manifest");
    let deadline = Instant::now() + WAIT;
    let (uid, id) = loop {
        check_agent_alive(ctx);
        if let Some(found) = crilet_container(&ctx.cri).await {
            break found;
        }
        assert!(Instant::now() < deadline, "crilet's pod did not run in time (see the agent log)");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let path = limit_file(&uid, &id);
    poll_until(&path, START_MI * MI, Instant::now())
        .await
        .unwrap_or_else(|| panic!("crilet: {} never showed {START_MI}Mi", path.display()));
    (uid, id)
}

/// The crilet pod's current (pod UID, container ID), and how often each changed.
struct Target {
    uid: String,
    id: String,
    uid_changes: usize,
    id_changes: usize,
}

impl Target {
    /// Takes what the runtime runs now; counts a change.
    fn follow(&mut self, (uid, id): (String, String)) -> bool {
        let changed = id != self.id || uid != self.uid;
        if uid != self.uid {
            eprintln!("  crilet: the pod UID changed: {} -> {uid}", self.uid);
            self.uid_changes += 1;
            self.uid = uid;
        }
        if id != self.id {
            eprintln!("  crilet: the container ID changed: {} -> {id}", self.id);
            self.id_changes += 1;
            self.id = id;
        }
        changed
    }
}

/// One crilet resize: manifest rename → file shows it.
async fn crilet_once(ctx: &Ctx, t: &mut Target, i: usize) -> Duration {
    let want = limit_mi(i) * MI;
    let tmp = stage_manifest(&ctx.manifests, &manifest(&ctx.image, NS, limit_mi(i)));
    let t0 = Instant::now();
    std::fs::rename(&tmp, manifest_path(&ctx.manifests)).expect("rename manifest");
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut misses = 0u32;
    let seen = loop {
        tick.tick().await;
        match read_limit(&limit_file(&t.uid, &t.id)) {
            Some(v) if v == want => break t0.elapsed(),
            Some(_) => {}
            // The container's cgroup is gone (it should not be: the resize is in place). Look for
            // what runs now, every 25th read, and follow it.
            None => {
                misses += 1;
                if misses % 25 == 0 {
                    if let Some(now) = crilet_container(&ctx.cri).await {
                        t.follow(now);
                    }
                }
            }
        }
        if t0.elapsed() > WAIT {
            check_agent_alive(ctx);
            panic!("crilet sample {i}: the container's memory limit never became {want} (see the agent log)");
        }
    };
    // The check the measurement is about: still the same pod and container.
    match crilet_container(&ctx.cri).await {
        Some(now) => {
            t.follow(now);
        }
        None => eprintln!("  crilet sample {i}: no running container right after the resize"),
    }
    seen
}

// ---------------------------------------------------------------------------------------------
// Report.

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 { f64::NAN } else { (s[(n - 1) / 2] + s[n / 2]) / 2.0 }
}

/// Nearest-rank p90 (with 10 samples: the 9th smallest).
fn p90(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() { f64::NAN } else { s[((s.len() as f64 * 0.9).ceil() as usize).max(1) - 1] }
}

async fn run(ctx: Ctx) -> String {
    let version = ctx.cri.version().await.expect("CRI Version");
    start_agent(&ctx);
    let mut v = wait_agent(&ctx).await;
    // crilet counts an event stream as followed once the call has stayed open for 200 ms; give
    // it that (a runtime without events says relist at once and stays there).
    let settle = Instant::now() + Duration::from_secs(3);
    while v.pleg_mode != "events" && Instant::now() < settle {
        tokio::time::sleep(Duration::from_millis(50)).await;
        v = wait_agent(&ctx).await;
    }
    eprintln!("crilet {} answers (Runtime Changes: {})", v.crilet_version, v.pleg_mode);
    let raw = raw_setup(&ctx).await;
    eprintln!("raw: pod {} container {} runs with {START_MI}Mi", raw.uid, raw.id);
    let (uid, id) = crilet_setup(&ctx).await;
    eprintln!("crilet: pod {uid} container {id} runs with {START_MI}Mi");
    let mut target = Target { uid, id, uid_changes: 0, id_changes: 0 };
    // Let the agent finish what follows a pod start (status, allocation) before the first edit.
    tokio::time::sleep(SETTLE).await;

    let (mut raw_ms, mut rtt_ms, mut crilet_ms) = (vec![], vec![], vec![]);
    let (mut raw_reverted, mut crilet_reverted) = (0, 0);
    for i in 0..ctx.n {
        let want = limit_mi(i) * MI;
        let (seen, rtt) = raw_once(&ctx, &raw, i).await;
        tokio::time::sleep(SETTLE).await;
        if read_limit(&limit_file(&raw.uid, &raw.id)) != Some(want) {
            eprintln!("  raw sample {i}: the limit did not stay at {}Mi", limit_mi(i));
            raw_reverted += 1;
        }
        eprintln!(
            "  raw    {i}: -> {}Mi {:.1} ms (call returned after {:.1} ms)",
            limit_mi(i),
            ms(seen),
            ms(rtt)
        );
        raw_ms.push(ms(seen));
        rtt_ms.push(ms(rtt));

        let seen = crilet_once(&ctx, &mut target, i).await;
        tokio::time::sleep(SETTLE).await;
        check_agent_alive(&ctx);
        if read_limit(&limit_file(&target.uid, &target.id)) != Some(want) {
            eprintln!("  crilet sample {i}: the limit did not stay at {}Mi", limit_mi(i));
            crilet_reverted += 1;
        }
        eprintln!("  crilet {i}: -> {}Mi {:.1} ms", limit_mi(i), ms(seen));
        crilet_ms.push(ms(seen));
    }

    let end_mode = agent_version(&ctx.socket).await.map_or_else(|| "?".to_string(), |e| e.pleg_mode);
    let base = median(&raw_ms);
    let row = |label: &str, v: &[f64]| {
        format!("| {label} | {:.1} | {:.1} | {:.2}x |\n", median(v), p90(v), median(v) / base)
    };
    let mut out = format!(
        "resize benchmark: {} resizes per series (memory limit 64Mi <-> 96Mi), cgroup {}\n\
         runtime: {} {} (CRI {}); crilet {} (Runtime Changes: {}; after the series: {end_mode})\n\
         measured: action -> first read (every {} ms) of the container's cgroup memory limit showing the new value\n\n",
        ctx.n,
        if cgroup_v2() { "v2 (memory.max)" } else { "v1 (memory.limit_in_bytes)" },
        version.name,
        version.version,
        version.api_version,
        v.crilet_version,
        v.pleg_mode,
        POLL.as_millis(),
    );
    out.push_str("| series | median ms | p90 ms | ratio to raw |\n|---|---:|---:|---:|\n");
    out.push_str(&row("raw CRI UpdateContainerResources", &raw_ms));
    out.push_str(&row("crilet (static pod manifest edit)", &crilet_ms));
    out.push_str(&format!(
        "\nraw: the UpdateContainerResources call returned after median {:.1} ms, p90 {:.1} ms\n",
        median(&rtt_ms),
        p90(&rtt_ms)
    ));
    out.push_str(&format!(
        "crilet: container ID changed {} time(s), pod UID changed {} time(s) in {} resizes (in place: 0 expected)\n",
        target.id_changes, target.uid_changes, ctx.n
    ));
    out.push_str(&format!(
        "limit not kept {} s after the sample: raw {raw_reverted}, crilet {crilet_reverted}\n",
        SETTLE.as_secs()
    ));
    out
}

// ---------------------------------------------------------------------------------------------
// Cleanup.

/// Removes everything the benchmark made: the agent's pod (through the agent, then directly), the
/// baseline's sandbox and its pod cgroup, the agent process (by PID).
async fn cleanup(ctx: &Ctx) {
    if let Ok(rd) = std::fs::read_dir(&ctx.manifests) {
        for e in rd.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
    let child = ctx.left.agent.lock().unwrap().take();
    if let Some(child) = child {
        // Give the agent the chance to terminate its pod itself.
        testkit::stop_when_done(child, Duration::from_secs(60), || async {
            matches!(ctx.cri.list_all(Some((keys::POD_NAMESPACE, NS))).await, Ok((s, _)) if s.is_empty())
        })
        .await;
    }
    force_remove(&ctx.cri).await;
    let raw_uid = ctx.left.raw_uid.lock().unwrap().take();
    if let Some(uid) = raw_uid {
        remove_pod_cgroup(&uid);
    }
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

/// Removes the raw pod's cgroup directories (the kubelet removes a pod's cgroup itself, the
/// runtime does not); rmdir only, which works on empty cgroups only.
fn remove_pod_cgroup(uid: &str) {
    let rel = format!("kubepods/burstable/pod{uid}");
    let root = Path::new("/sys/fs/cgroup");
    if cgroup_v2() {
        let _ = std::fs::remove_dir(root.join(&rel));
        return;
    }
    if let Ok(rd) = std::fs::read_dir(root) {
        for e in rd.flatten() {
            let _ = std::fs::remove_dir(e.path().join(&rel));
        }
    }
}

/// Stops and removes every sandbox in the benchmark's namespaces (left by an earlier run, or by
/// this one when the agent could not).
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

async fn wait_runtime(cri: &CriClient) {
    testkit::wait_until("the runtime to answer", WAIT, Duration::from_millis(100), || async {
        cri.version().await.ok().map(drop)
    })
    .await;
}

#[tokio::main]
async fn main() {
    let env = testkit::EnvFile::load(testkit::MAIN_ENV_FILE, "run hack/setup.sh first");
    let endpoint = env.endpoint();
    let image = env.get("CRILET_IMAGE_BUSYBOX");
    let n: usize =
        std::env::var("CRILET_BENCH_RESIZES").ok().and_then(|v| v.parse().ok()).unwrap_or(10).max(1);
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

    let tmp =
        tempfile::Builder::new().prefix("bench-resize.").tempdir_in("/var/lib/crilet-dev").expect("temp dir");
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
        left: Arc::new(Leftovers::default()),
    };

    // The body runs as a task of its own so that a panic in it still reaches the cleanup below.
    let body = tokio::spawn(run(ctx.clone()));
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
            eprintln!("resize benchmark failed: {e}");
            std::process::exit(1);
        }
    }
}
