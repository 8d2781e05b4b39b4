//! Pod start: crilet (manifest written → container running) against the raw CRI sequence of
//! `raw.rs` (first call → container running), one pod at a time and 20 at once.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use crate::events::Key;
use crate::report::{Row, Scenario, median, ratio_row};
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

/// Starts waiting (as a task of its own: the fallback polls while the pods start) for `want`.
pub fn spawn_wait(
    ctx: &Ctx,
    namespace: &'static str,
    want: HashSet<Key>,
    deadline: Instant,
) -> tokio::task::JoinHandle<HashMap<Key, Instant>> {
    let (events, cri, mark) = (ctx.events.clone(), ctx.cri.clone(), ctx.events.mark());
    tokio::spawn(async move { events.wait_started(&cri, mark, namespace, want, deadline).await })
}

pub fn keys(names: &[String], containers: &[&str]) -> HashSet<Key> {
    names.iter().flat_map(|n| containers.iter().map(move |c| (n.clone(), c.to_string()))).collect()
}

/// Starts `names` with raw CRI calls, all at once; returns (from the first call: each pod's
/// last container running, all pods running) in ms. Removes the pods afterwards.
async fn raw_pods(ctx: &Ctx, node: &crilet::pod::spec::NodeConfig, names: &[String]) -> (Vec<f64>, f64) {
    let pods: Vec<_> = names.iter().map(|n| raw::desired(RAW_NS, &manifest(n, RAW_NS, &ctx.image))).collect();
    let waiter = spawn_wait(ctx, RAW_NS, keys(names, &["c"]), deadline());
    let t0 = Instant::now();
    let tasks: Vec<_> = pods
        .into_iter()
        .map(|d| {
            let (cri, node) = (ctx.cri.clone(), node.clone());
            tokio::spawn(async move { raw::start_pod(&cri, &node, &d).await.0 })
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

/// Writes the manifests of `names` into the agent's directory, one after another; returns the
/// same as `raw_pods`, from just before the first write. Removes the pods afterwards.
async fn crilet_pods(ctx: &Ctx, agent: &agent::Agent, names: &[String]) -> (Vec<f64>, f64) {
    let texts: Vec<_> = names.iter().map(|n| manifest(n, NS, &ctx.image)).collect();
    let waiter = spawn_wait(ctx, NS, keys(names, &["c"]), deadline());
    let t0 = Instant::now();
    for (n, text) in names.iter().zip(&texts) {
        agent.write(n, text);
    }
    let got = waiter.await.expect("waiting for crilet's pods");
    let per_pod: Vec<f64> = got.values().map(|at| ms(*at - t0)).collect();
    let all = per_pod.iter().copied().fold(0.0, f64::max);
    for n in names {
        agent.remove(n);
    }
    agent::wait_gone(&ctx.cri, NS, crate::WAIT).await;
    (per_pod, all)
}

const WRITE: &str = "crilet's manifests are written as careful tools do: a dotfile in the manifest directory, then \
                     renamed into place (one rename per pod); t0 is taken just before the first write";

pub async fn sequential(ctx: &Ctx) -> Scenario {
    let n: usize = env_num("CRILET_BENCH_SEQ_PODS", 20).max(1);
    let agent = ctx.agent("start-seq").await;
    let node = raw::node(&ctx.dir.join("start-seq"));
    // One untimed pod each first: the first start after a while pays for cold caches.
    raw_pods(ctx, &node, &["seq-warm".into()]).await;
    crilet_pods(ctx, &agent, &["seq-warm".into()]).await;
    let (mut raw, mut cri) = (Vec::new(), Vec::new());
    for i in 0..n {
        let r = raw_pods(ctx, &node, &[format!("seq-{i}")]).await.1;
        let c = crilet_pods(ctx, &agent, &[format!("seq-{i}")]).await.1;
        eprintln!("  pod {i}: raw {r:.1} ms, crilet {c:.1} ms");
        raw.push(r);
        cri.push(c);
    }
    agent.stop(&ctx.cri, NS).await;
    Scenario {
        id: "start-seq".into(),
        title: format!("Pod start, one at a time (pods per side: {n})"),
        how: format!(
            "One pod with one container (busybox shell loop). Baseline: the raw CRI sequence crilet makes \
             for the pod (RunPodSandbox, PodSandboxStatus, ImageStatus, CreateContainer, StartContainer, with \
             configs from crilet's own sandbox_config/container_config and the same bind mounts), timed from \
             its first call. crilet: a fresh agent; {WRITE}. Both end when the container is observed running \
             by {}. Pods alternate raw, crilet, raw, crilet…; each is removed (untimed) before the next; one \
             untimed warm-up pod per side first. Values: median / p90.",
            ctx.events.how()
        ),
        rows: vec![ratio_row("start → container running", &raw, &cri, "ms", Some(1.10))],
        notes: vec![],
        ..Default::default()
    }
}

pub async fn burst(ctx: &Ctx) -> Scenario {
    let pods: usize = env_num("CRILET_BENCH_BURST_PODS", 20).max(1);
    let rounds: usize = env_num("CRILET_BENCH_BURST_ROUNDS", 5).max(1);
    let agent = ctx.agent("start-burst").await;
    let node = raw::node(&ctx.dir.join("start-burst"));
    let (mut raw_all, mut cri_all, mut raw_each, mut cri_each) = (vec![], vec![], vec![], vec![]);
    for r in 0..rounds {
        let names: Vec<String> = (0..pods).map(|i| format!("burst-{r}-{i}")).collect();
        let (re, ra) = raw_pods(ctx, &node, &names).await;
        let (ce, ca) = crilet_pods(ctx, &agent, &names).await;
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
    let each = Row {
        target: String::new(),
        met: None,
        ..ratio_row("t0 → each pod running (all pods of all rounds)", &raw_each, &cri_each, "ms", None)
    };
    Scenario {
        id: "start-burst".into(),
        title: format!("Pod start, {pods} at once (rounds per side: {rounds})"),
        how: format!(
            "The pod of the one-at-a-time scenario, {pods} at once. Baseline: {pods} concurrent raw CRI sequences \
             (one tokio task per pod). crilet: {pods} manifests written at once; {WRITE}. Time from t0 until the \
             last of the {pods} containers is observed running by {}. Rounds alternate raw, crilet; everything is \
             removed (untimed) between rounds. Values: median / p90 over rounds (first row) and over all pods \
             (second row).",
            ctx.events.how()
        ),
        rows: vec![
            ratio_row(&format!("t0 → all {pods} pods running"), &raw_all, &cri_all, "ms", Some(1.10)),
            each,
        ],
        notes: vec![],
        ..Default::default()
    }
}
