//! Pod start: crilet (manifest renamed into place → container running) against the raw CRI
//! sequence of `raw.rs` (first call → container running), one pod at a time and 20 at once.
//! Both are observed only through CRI, from outside. Each scenario runs one of two ways
//! ([`Method`]): the project's own (ids `start-seq`, `start-burst`), or the way an outside
//! reviewer measured (issue 33; ids `start-seq-outside`, `start-burst-outside`): both sides
//! seen by `ListContainers` every 5 ms, the baseline also asking `ImageStatus`.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::events::Key;
use crate::report::{Scenario, median, p95_row, ratio_row};
use crate::{Ctx, NS, RAW_NS, agent, deadline, env_num, ms, raw};

const CMD: &str = "trap 'exit 0' TERM; while true; do sleep 1; done";

/// One app container that exits on SIGTERM (so removals are quick; they are not measured).
pub fn manifest(name: &str, namespace: &str, image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n  \
         terminationGracePeriodSeconds: 2\n  containers:\n  - name: c\n    image: {image}\n    \
         command: [sh, -c, \"{CMD}\"]\n"
    )
}

/// How "running" is observed.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Observe {
    /// The benchmark's own CRI event stream (single starts: precise to the event).
    Events,
    /// `ListContainers` every so often ([`LIST_EVERY`] as an outside observer of many pods; the
    /// outside method's [`outside_poll`]).
    List(Duration),
}

/// The period of the project's own list observation (bursts, the 110 pods).
pub const LIST_EVERY: Duration = Duration::from_millis(50);

/// The period of the outside method's poll: CRILET_BENCH_OUTSIDE_POLL_MS [5].
pub fn outside_poll() -> Duration {
    Duration::from_millis(env_num("CRILET_BENCH_OUTSIDE_POLL_MS", 5u64).max(1))
}

/// What [`Observe`] means, for the reports.
pub fn observed_by(ctx: &Ctx, how: Observe) -> String {
    match how {
        Observe::Events => ctx.events.how().to_string(),
        Observe::List(every) => format!(
            "ListContainers (state running) every {} ms, the same poll for both sides: the first list showing it running",
            every.as_millis()
        ),
    }
}

/// Which way a start scenario measures (issue 33).
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Method {
    /// The project's own: one pod at a time seen by the event stream, bursts by a 50 ms list;
    /// the baseline's image resolved once, untimed.
    Inside,
    /// An outside reviewer's: every pod seen by `ListContainers` every [`outside_poll`] (5 ms),
    /// for both sides; the baseline also asks `ImageStatus` for each container, timed.
    Outside,
}

impl Method {
    /// The scenario's id: the inside one's ids are the scenarios' plain names.
    pub fn id(self, scenario: &str) -> String {
        match self {
            Method::Inside => scenario.to_string(),
            Method::Outside => format!("{scenario}-outside"),
        }
    }

    /// How this method sees "running" in a scenario whose own way is `inside`.
    fn observe(self, inside: Observe) -> Observe {
        match self {
            Method::Inside => inside,
            Method::Outside => Observe::List(outside_poll()),
        }
    }

    fn image(self) -> raw::Image {
        match self {
            Method::Inside => raw::Image::Resolved,
            Method::Outside => raw::Image::Status,
        }
    }

    /// The baseline, in words.
    fn raw(self) -> &'static str {
        match self {
            Method::Inside => RAW,
            Method::Outside => RAW_OUTSIDE,
        }
    }

    /// The end of a scenario's title.
    fn titled(self) -> &'static str {
        match self {
            Method::Inside => "",
            Method::Outside => ", measured from outside",
        }
    }

    /// What the outside method is, and that its rows carry no target.
    fn note(self) -> Vec<String> {
        match self {
            Method::Inside => vec![],
            Method::Outside => vec![format!(
                "The outside method (issue 33; `hack/bench.sh --start-method both` runs it beside the project's own): \
                 the way an outside reviewer measured, to compare with the same scenario measured the project's way \
                 (the section of the same title without \"measured from outside\"). \
                 The same t0s; the baseline also asks ImageStatus; both sides seen by one ListContainers poll every \
                 {} ms, which ends a start up to one period (plus the list's own latency) after the container \
                 runs, and which loads containerd more than the 50 ms poll or the event stream: a list every \
                 period, all running containers of the node in each answer, while the pods start. The targets \
                 are set on the project's own method; these rows have none.",
                outside_poll().as_millis()
            )],
        }
    }
}

/// Starts waiting (as a task of its own: a poll runs while the pods start) for `want`.
pub fn spawn_wait(
    ctx: &Ctx,
    namespace: &'static str,
    want: HashSet<Key>,
    deadline: Instant,
    how: Observe,
) -> tokio::task::JoinHandle<HashMap<Key, Instant>> {
    let (events, cri, mark) = (ctx.events.clone(), ctx.cri.clone(), ctx.events.mark());
    tokio::spawn(async move {
        match how {
            Observe::Events => events.wait_started(&cri, mark, namespace, want, deadline).await,
            Observe::List(every) => crate::events::poll_started(&cri, namespace, want, deadline, every).await,
        }
    })
}

pub fn keys(names: &[String], containers: &[&str]) -> HashSet<Key> {
    names.iter().flat_map(|n| containers.iter().map(move |c| (n.clone(), c.to_string()))).collect()
}

/// Starts `names` with raw CRI calls, all at once; returns (from the first call: each pod's
/// last container running, all pods running) in ms. Removes the pods afterwards.
async fn raw_pods(
    ctx: &Ctx,
    node: &crilet::pod::spec::NodeConfig,
    names: &[String],
    how: Observe,
    image: raw::Image,
) -> (Vec<f64>, f64) {
    let pods: Vec<_> = names.iter().map(|n| raw::desired(RAW_NS, &manifest(n, RAW_NS, &ctx.image))).collect();
    let waiter = spawn_wait(ctx, RAW_NS, keys(names, &["c"]), deadline(), how);
    let t0 = Instant::now();
    let tasks: Vec<_> = pods
        .into_iter()
        .map(|d| {
            let (cri, node, image_ref) = (ctx.cri.clone(), node.clone(), ctx.image_ref.clone());
            tokio::spawn(
                async move { raw::start_pod_each(&cri, &node, &d, &image_ref, image, |_| {}).await.0 },
            )
        })
        .collect();
    let mut sandboxes = Vec::new();
    for t in tasks {
        sandboxes.push(t.await.expect("raw pod start"));
    }
    let got = waiter.await.expect("waiting for the raw pods");
    let per_pod: Vec<f64> = got.values().map(|at| ms(*at - t0)).collect();
    let all = per_pod.iter().copied().fold(0.0, f64::max);
    raw::remove_pods(&ctx.cri, sandboxes).await;
    (per_pod, all)
}

/// Renames the manifests of `names` into the agent's directory at once; returns the same as
/// `raw_pods`, from just before the first rename. Removes the pods afterwards.
async fn crilet_pods(ctx: &Ctx, agent: &agent::Agent, names: &[String], how: Observe) -> (Vec<f64>, f64) {
    let waiter = spawn_wait(ctx, NS, keys(names, &["c"]), deadline(), how);
    let t0 = agent.write_all(names.iter().map(|n| (n.as_str(), manifest(n, NS, &ctx.image))));
    let got = waiter.await.expect("waiting for crilet's pods");
    let per_pod: Vec<f64> = got.values().map(|at| ms(*at - t0)).collect();
    let all = per_pod.iter().copied().fold(0.0, f64::max);
    for n in names {
        agent.remove(n);
    }
    agent::wait_gone(&ctx.cri, NS, crate::WAIT).await;
    (per_pod, all)
}

/// The baseline, in words.
pub const RAW: &str = "RunPodSandbox (cgroup parent and log directory set) → CreateContainer → StartContainer \
                       with the configs crilet would send and nothing else (the image resolved once, untimed)";

/// The outside method's baseline, in words.
const RAW_OUTSIDE: &str = "RunPodSandbox (cgroup parent and log directory set, the directory made first) → ImageStatus \
                           (as crilet asks it for an IfNotPresent image; crilet asks beside RunPodSandbox, the \
                           baseline after it) → CreateContainer from the ID it answered → StartContainer, with the \
                           configs crilet would send and nothing else";

const WRITE: &str = "crilet's manifests are written as careful tools do, a dotfile in the manifest directory for each \
                     pod, then all renamed into place at once; t0 is taken just before the first rename";

pub async fn sequential(ctx: &Ctx, method: Method) -> Scenario {
    let n: usize = env_num("CRILET_BENCH_SEQ_PODS", 20).max(1);
    let id = method.id("start-seq");
    let (how, image) = (method.observe(Observe::Events), method.image());
    let agent = ctx.agent(&id).await;
    let node = raw::node(&ctx.dir.join(&id));
    // One untimed pod each first: the first start after a while pays for cold caches.
    raw_pods(ctx, &node, &["seq-warm".into()], how, image).await;
    crilet_pods(ctx, &agent, &["seq-warm".into()], how).await;
    let (mut raw, mut cri) = (Vec::new(), Vec::new());
    for i in 0..n {
        let r = raw_pods(ctx, &node, &[format!("seq-{i}")], how, image).await.1;
        let c = crilet_pods(ctx, &agent, &[format!("seq-{i}")], how).await.1;
        eprintln!("  pod {i}: raw {r:.1} ms, crilet {c:.1} ms");
        raw.push(r);
        cri.push(c);
    }
    agent.stop(&ctx.cri, NS).await;
    let inside = method == Method::Inside;
    Scenario {
        title: format!("Pod start, one at a time{} (pods per side: {n})", method.titled()),
        id,
        how: format!(
            "One pod with one container (busybox shell loop). Baseline: {}, timed from its first call. \
             crilet: a fresh agent; {WRITE}. Both end when the container is observed running by {}. Pods \
             alternate raw, crilet, raw, crilet…; each is removed (untimed) before the next; one untimed \
             warm-up pod per side first. Values: median / p95.",
            method.raw(),
            observed_by(ctx, how)
        ),
        rows: vec![
            ratio_row("start → container running (median)", &raw, &cri, "ms", inside.then_some(1.05)),
            p95_row("start → container running (p95)", &raw, &cri, "ms", None),
        ],
        notes: method.note(),
        ..Default::default()
    }
}

pub async fn burst(ctx: &Ctx, method: Method) -> Scenario {
    let pods: usize = env_num("CRILET_BENCH_BURST_PODS", 20).max(1);
    let rounds: usize = env_num("CRILET_BENCH_BURST_ROUNDS", 5).max(1);
    let id = method.id("start-burst");
    let (how, image) = (method.observe(Observe::List(LIST_EVERY)), method.image());
    let agent = ctx.agent(&id).await;
    let node = raw::node(&ctx.dir.join(&id));
    let (mut raw_all, mut cri_all, mut raw_each, mut cri_each) = (vec![], vec![], vec![], vec![]);
    for r in 0..rounds {
        let names: Vec<String> = (0..pods).map(|i| format!("burst-{r}-{i}")).collect();
        let (re, ra) = raw_pods(ctx, &node, &names, how, image).await;
        let (ce, ca) = crilet_pods(ctx, &agent, &names, how).await;
        eprintln!(
            "  round {r}: all {pods} running: raw {ra:.0} ms, crilet {ca:.0} ms (per pod median {:.0} / {:.0} ms)",
            median(&re),
            median(&ce)
        );
        raw_all.push(ra);
        cri_all.push(ca);
        raw_each.extend(re);
        cri_each.extend(ce);
    }
    agent.stop(&ctx.cri, NS).await;
    let inside = method == Method::Inside;
    Scenario {
        title: format!("Pod start, {pods} at once{} (rounds per side: {rounds})", method.titled()),
        id,
        how: format!(
            "The pod of the one-at-a-time scenario, {pods} at once. Baseline: {pods} concurrent raw sequences \
             ({}; one tokio task per pod). crilet: {WRITE}. Time from t0 until each container, and the last \
             of the {pods}, is observed running by {}. Rounds alternate raw, crilet; everything is removed \
             (untimed) between rounds. Values: median / p95 over rounds (the all-running row) and over all pods \
             of all rounds (the per-pod rows).",
            method.raw(),
            observed_by(ctx, how)
        ),
        rows: vec![
            ratio_row("t0 → each pod running (median)", &raw_each, &cri_each, "ms", None),
            p95_row("t0 → each pod running (p95)", &raw_each, &cri_each, "ms", inside.then_some(1.10)),
            ratio_row(&format!("t0 → all {pods} pods running"), &raw_all, &cri_all, "ms", None),
        ],
        notes: method.note(),
        ..Default::default()
    }
}
