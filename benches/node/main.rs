//! Node benchmark: crilet against a raw-CRI baseline measured in the same run, reported as
//! ratios of medians (absolute times depend on the machine; nothing here asserts a time).
//! Baseline and crilet samples alternate (A B A B) so a change in the machine's load hits both.
//!
//! Scenarios (each can run alone; see `start.rs`, `scale.rs`, `terminate.rs` for exactly what
//! they measure):
//! - `start-seq`: pods started one after another, manifest renamed in → container running.
//! - `start-burst`: 20 pods renamed in at once → each and all running, several rounds.
//! - `scale`: 110 pods with an app, a native sidecar and an exec readiness probe on each:
//!   time to all running and all Ready, then crilet's RSS and CPU over a steady window.
//! - `terminate`: containers that ignore SIGTERM, manifest removed at t0: when each container's
//!   CRI `finished_at` lands against t0 + terminationGracePeriodSeconds.
//! - `start-seq-outside`, `start-burst-outside` (run only when named): the two start scenarios
//!   measured the way an outside reviewer did (issue 33): both sides seen by `ListContainers`
//!   every 5 ms, the baseline also asking `ImageStatus` for each container (`start.rs`).
//!
//! (Exit → replacement is `cargo bench --bench restart`; hack/bench.sh runs both.)
//!
//! "Running" is observed the same way for the baseline and for crilet, only through CRI, never
//! through the agent: for single starts the arrival of the runtime's CONTAINER_STARTED_EVENT on
//! a CRI event stream of the benchmark's own (on a runtime without events, `ListContainers`
//! every 5 ms); for bursts and the 110 pods `ListContainers` every 50 ms, as an outside observer
//! (the -outside scenarios: every 5 ms for both). The baseline is the least CRI a start takes
//! (`raw.rs`; in the -outside scenarios with `ImageStatus` per container).
//!
//! Pods live in namespaces of their own (`bench-node` for crilet's, `bench-node-raw` for the
//! baseline's, `bench-node-kubelet` for the upstream kubelet's in `scale`); each scenario runs a
//! fresh agent (binary: this build's `crilet`) with its directories in a temp dir under
//! /var/lib/crilet-dev. Every pod, sandbox, the agent and the kubelet (by PID) and the temp dir
//! are removed at the end, also after a panic or Ctrl-C.
//!
//! Needs the environment of `hack/setup.sh`. Run: `cargo bench --bench node [-- SCENARIO...]`
//! or `hack/bench.sh`. Environment (defaults in brackets):
//!   CRILET_BENCH_SCENARIOS   comma-separated scenarios when none is given as an argument [all]
//!   CRILET_BENCH_BIN         the crilet binary the agent runs [this build's]
//!   CRILET_BENCH_SEQ_PODS    pods of start-seq, per side [20]
//!   CRILET_BENCH_BURST_PODS  pods per round of start-burst [20]
//!   CRILET_BENCH_BURST_ROUNDS rounds of start-burst, per side [5]
//!   CRILET_BENCH_OUTSIDE_POLL_MS the -outside scenarios' ListContainers period, ms [5]
//!   CRILET_BENCH_SCALE_PODS  pods of scale [110]
//!   CRILET_BENCH_SCALE_WINDOW steady window of scale, seconds [60]
//!   CRILET_BENCH_SCALE_PROBES 0: scale's pods without probes, a diagnostic [1]
//!   CRILET_BENCH_KUBELET_BIN the upstream kubelet: `scale` runs it too, as the peer [none]
//!   CRILET_BENCH_TERM_RUNS   runs per case of terminate [5]
//!   CRILET_BENCH_TERM_GRACE  terminationGracePeriodSeconds of terminate [3]
//!   CRILET_BENCH_JSON        where to write the JSON summary [none]

mod agent;
mod cpu;
mod events;
mod host;
mod kubelet;
mod raw;
mod report;
mod scale;
mod start;
mod terminate;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crilet::cri::CriClient;
use crilet::model::keys;

use agent::Leftovers;
use events::Events;
use report::{Scenario, Summary};

/// crilet's pods.
pub const NS: &str = "bench-node";
/// The baseline's pods.
pub const RAW_NS: &str = "bench-node-raw";
/// What runs when no scenario is named.
const SCENARIOS: [&str; 4] = ["start-seq", "start-burst", "scale", "terminate"];
/// Run only when named: the start scenarios measured the outside reviewer's way (issue 33).
const OUTSIDE: [&str; 2] = ["start-seq-outside", "start-burst-outside"];

/// What every scenario gets.
#[derive(Clone)]
pub struct Ctx {
    pub cri: CriClient,
    pub endpoint: String,
    pub image: String,
    /// The image's ID, resolved once (the baseline's containers are created from it).
    pub image_ref: String,
    pub dir: PathBuf,
    pub events: Arc<Events>,
    pub left: Arc<Leftovers>,
}

impl Ctx {
    /// A fresh agent for scenario `tag`.
    pub async fn agent(&self, tag: &str) -> agent::Agent {
        agent::Agent::start(&self.endpoint, self.dir.join(tag), self.left.clone(), self.events.live).await
    }
}

pub fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Upper bound for any one wait of a small step (a pod start or removal).
pub const WAIT: Duration = Duration::from_secs(120);

pub fn deadline() -> Instant {
    Instant::now() + WAIT
}

fn selected() -> Vec<String> {
    // `cargo bench` passes `--bench`; anything else that is not a flag names a scenario.
    let mut args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    if args.is_empty() {
        if let Ok(v) = std::env::var("CRILET_BENCH_SCENARIOS") {
            args = v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
        }
    }
    if args.is_empty() {
        return SCENARIOS.iter().map(|s| s.to_string()).collect();
    }
    for a in &args {
        if !SCENARIOS.contains(&a.as_str()) && !OUTSIDE.contains(&a.as_str()) {
            eprintln!("unknown scenario {a:?}; known: {}, {}", SCENARIOS.join(", "), OUTSIDE.join(", "));
            std::process::exit(2);
        }
    }
    args
}

async fn run(ctx: Ctx, which: Vec<String>, summary: Arc<Mutex<Summary>>) {
    for s in which {
        eprintln!("== {s}");
        let t = Instant::now();
        let result: Scenario = match s.as_str() {
            "start-seq" => start::sequential(&ctx, start::Method::Inside).await,
            "start-burst" => start::burst(&ctx, start::Method::Inside).await,
            "start-seq-outside" => start::sequential(&ctx, start::Method::Outside).await,
            "start-burst-outside" => start::burst(&ctx, start::Method::Outside).await,
            "scale" => scale::run(&ctx).await,
            "terminate" => terminate::run(&ctx).await,
            _ => unreachable!("checked by selected()"),
        };
        eprintln!("== {s} done in {:.0} s", t.elapsed().as_secs_f64());
        print!("{}", result.markdown());
        summary.lock().unwrap().scenarios.push(result);
    }
}

/// Stops and removes every sandbox in the benchmark's namespaces (left by an earlier run, or
/// by this one when the agent could not).
async fn force_remove(cri: &CriClient) -> usize {
    let mut n = 0;
    for ns in [NS, RAW_NS, kubelet::KUBELET_NS] {
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

/// Removes what a failed or interrupted run left: the kubelet (by PID) and what it leaves, the
/// agent's pods (through the agent, then directly), the baseline's sandboxes, the agent process
/// (by PID).
async fn cleanup(ctx: &Ctx) {
    kubelet::stop(&ctx.cri, &ctx.left).await;
    let taken = ctx.left.agent.lock().unwrap().take();
    if let Some((child, manifests)) = taken {
        agent::remove_manifests(&manifests);
        // Give the agent the chance to terminate its pods itself.
        testkit::stop_when_done(child, Duration::from_secs(120), || async {
            agent::sandboxes(&ctx.cri, NS).await == 0
        })
        .await;
    }
    force_remove(&ctx.cri).await;
    for ns in [NS, RAW_NS] {
        let left = agent::sandboxes(&ctx.cri, ns).await;
        if left != 0 {
            eprintln!("cleanup: sandboxes may be left in namespace {ns}; the next run removes them");
        }
    }
}

#[tokio::main]
async fn main() {
    let which = selected();
    let env = testkit::EnvFile::load(testkit::MAIN_ENV_FILE, "run hack/setup.sh first");
    let endpoint = env.endpoint();
    let image = env.get("CRILET_IMAGE_BUSYBOX");
    let cri = CriClient::new(&endpoint, &endpoint).expect("CRI client");
    let version = cri.version().await.expect("CRI Version: is the runtime up? (hack/setup.sh)");
    let stale = force_remove(&cri).await;
    if stale > 0 {
        eprintln!("removed {stale} sandbox(es) left in {NS}/{RAW_NS} by an earlier run");
    }
    let image_ref = cri
        .image_id(&image)
        .await
        .expect("ImageStatus")
        .unwrap_or_else(|| panic!("{image} not pulled: hack/setup.sh"))
        .id;
    let events = Events::open(&cri).await;

    let tmp =
        tempfile::Builder::new().prefix("bench-node.").tempdir_in("/var/lib/crilet-dev").expect("temp dir");
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let ctx =
        Ctx { cri, endpoint, image, image_ref, dir: tmp.path().to_path_buf(), events, left: Arc::default() };
    let summary = Arc::new(Mutex::new(Summary {
        runtime: version.name.clone(),
        runtime_version: version.version.clone(),
        cri_api: version.api_version.clone(),
        observed_by: format!(
            "single starts: {}; bursts and the 110 pods: {}{}",
            start::observed_by(&ctx, start::Observe::Events),
            start::observed_by(&ctx, start::Observe::List(start::LIST_EVERY)),
            if which.iter().any(|s| OUTSIDE.contains(&s.as_str())) {
                format!(
                    "; the start scenarios measured from outside (-outside): {}",
                    start::observed_by(&ctx, start::Observe::List(start::outside_poll()))
                )
            } else {
                String::new()
            }
        ),
        scenarios: vec![],
    }));
    eprintln!("runtime {} {}; running observed by {}", version.name, version.version, ctx.events.how());

    // The body runs as a task of its own so that a panic in it still reaches the cleanup below.
    let body = tokio::spawn(run(ctx.clone(), which, summary.clone()));
    let abort = body.abort_handle();
    let result = tokio::select! {
        r = body => r.map_err(|e| e.to_string()),
        _ = tokio::signal::ctrl_c() => {
            abort.abort();
            Err("interrupted".to_string())
        }
    };
    if result.is_err() {
        print_agent_logs(&ctx.dir);
    }
    cleanup(&ctx).await;
    if let Ok(path) = std::env::var("CRILET_BENCH_JSON") {
        let json = serde_json::to_string_pretty(&*summary.lock().unwrap()).expect("summary JSON");
        std::fs::write(&path, json).unwrap_or_else(|e| panic!("writing {path}: {e}"));
    }
    drop(tmp);
    if let Err(e) = result {
        eprintln!("node benchmark failed: {e}");
        std::process::exit(1);
    }
}

/// The last lines of each scenario agent's log (the temp dir goes with the cleanup).
fn print_agent_logs(dir: &std::path::Path) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let log = e.path().join("crilet.log");
        if log.is_file() {
            let title = format!("last lines of the agent log of {}", e.file_name().to_string_lossy());
            testkit::print_last_lines(&title, &log, 30);
        }
    }
}
