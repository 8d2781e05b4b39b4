//! Termination accuracy: a pod whose app and native sidecar both ignore SIGTERM (their shell
//! traps it, notes the time and goes on), manifest removed at t0. With one absolute deadline
//! (t0 + terminationGracePeriodSeconds) both must be killed at it: per run, each container's CRI
//! `finished_at` − deadline (negative = early). Case "preStop": the app also has a preStop hook
//! that takes 1 s (inside the same budget). Baseline (the plain case only): the raw runtime's own
//! accuracy, `StopContainer` with timeout = the grace period on both containers at t0.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crilet::cri::CriClient;
use crilet::model::{ContainerState, keys};

use crate::events::now_ns;
use crate::report::{Row, Scenario, max, median, min};
use crate::start::{Observe, keys as want_keys, spawn_wait};
use crate::{Ctx, NS, RAW_NS, agent, deadline, env_num, raw};

/// The shell of both containers: SIGTERM is trapped (its arrival noted in /out/NAME, the
/// container's clock = the host's) and ignored; `wait` lets the trap run at once.
fn cmd(name: &str) -> String {
    format!("trap 'adjtimex | grep tv_ >> /out/{name}' TERM; while true; do sleep 1 & wait $!; done")
}

fn manifest(name: &str, namespace: &str, image: &str, out: &Path, grace: u64, pre_stop: bool) -> String {
    let hook = if pre_stop {
        "    lifecycle: {preStop: {exec: {command: [sh, -c, \"adjtimex | grep tv_ >> /out/prestop; sleep 1\"]}}}\n"
    } else {
        ""
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n  \
         terminationGracePeriodSeconds: {grace}\n  \
         volumes: [{{name: out, hostPath: {{path: {out}, type: DirectoryOrCreate}}}}]\n  initContainers:\n  \
         - name: side\n    image: {image}\n    restartPolicy: Always\n    command: [sh, -c, \"{side}\"]\n    \
         volumeMounts: [{{name: out, mountPath: /out}}]\n  containers:\n  - name: app\n    image: {image}\n    \
         command: [sh, -c, \"{app}\"]\n    volumeMounts: [{{name: out, mountPath: /out}}]\n{hook}",
        out = out.display(),
        side = cmd("side"),
        app = cmd("app"),
    )
}

/// The first time (ns) in an adjtimex stamp file, if any.
fn first_stamp(path: &Path) -> Option<i64> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut sec = None;
    for l in text.lines() {
        let mut f = l.split_whitespace();
        // busybox prints "time.tv_sec: N" and "time.tv_usec: N".
        match (f.next(), f.next().and_then(|v| v.parse::<i64>().ok())) {
            (Some(k), Some(v)) if k.ends_with("tv_sec:") => sec = Some(v),
            (Some(k), Some(v)) if k.ends_with("tv_usec:") => return Some(sec? * 1_000_000_000 + v * 1_000),
            _ => {}
        }
    }
    None
}

/// One crilet run's results, ms relative to the deadline (NaN when not seen).
#[derive(Default)]
struct Run {
    app: f64,
    side: f64,
    sandbox: f64,
    /// When the agent began the termination (the app's SIGTERM or the preStop start) − t0.
    began: f64,
}

fn rel(ns: i64, deadline: i64) -> f64 {
    if ns > 0 { (ns - deadline) as f64 / 1e6 } else { f64::NAN }
}

async fn start_and_settle(ctx: &Ctx, namespace: &'static str, name: &str) {
    spawn_wait(ctx, namespace, want_keys(&[name.to_string()], &["side", "app"]), deadline(), Observe::Events)
        .await
        .expect("waiting for the pod to run");
    // The shells set their traps first thing; give them a moment.
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// Finished times (ns) of the pod's containers and the sandbox's NotReady/gone time, by polling
/// every 5 ms (the runtime has no event stream).
async fn poll_stopped(cri: &CriClient, name: &str, limit: Instant) -> HashMap<String, i64> {
    let mut got: HashMap<String, i64> = HashMap::new();
    while Instant::now() < limit && got.len() < 3 {
        tokio::time::sleep(crate::events::LIST_POLL).await;
        let Ok((sbs, cs)) = cri.list_all(Some((keys::POD_NAMESPACE, NS))).await else { continue };
        let at = now_ns();
        let sb = sbs.iter().find(|s| s.labels.get(keys::POD_NAME).is_some_and(|n| n == name));
        if sb.is_none_or(|s| s.state != crilet::cri::api::PodSandboxState::SandboxReady as i32) {
            got.entry(String::new()).or_insert(at);
        }
        for c in cs.iter().filter(|c| c.labels.get(keys::POD_NAME).is_some_and(|n| n == name)) {
            let cname = c.labels.get(keys::CONTAINER_NAME).cloned().unwrap_or_default();
            if got.contains_key(&cname) {
                continue;
            }
            if let Ok(st) = cri.container_status(&c.id, &c.pod_sandbox_id).await {
                if st.state == ContainerState::Exited && st.finished_at > 0 {
                    got.insert(cname, st.finished_at);
                }
            }
        }
        if sb.is_none() {
            // Removed: what was not seen exited in time is missed (reported as not seen).
            break;
        }
    }
    got
}

async fn crilet_once(ctx: &Ctx, agent: &agent::Agent, name: &str, grace: u64, pre_stop: bool) -> Run {
    let out = agent.dir.join("out").join(name);
    agent.write(name, &manifest(name, NS, &ctx.image, &out, grace, pre_stop));
    start_and_settle(ctx, NS, name).await;
    let mark = ctx.events.mark();
    let t0 = now_ns();
    agent.remove(name);
    let dl = t0 + grace as i64 * 1_000_000_000;
    let limit = Instant::now() + Duration::from_secs(grace + 30);
    let ends: HashMap<String, i64> = if ctx.events.live {
        let got = ctx.events.wait_stopped(mark, NS, name, &["app", "side"], limit).await;
        got.into_iter()
            .map(|(k, s)| {
                let at = if k.is_empty() {
                    if s.created_at > 0 { s.created_at } else { s.wall }
                } else {
                    s.finished_at
                };
                (k, at)
            })
            .collect()
    } else {
        poll_stopped(&ctx.cri, name, limit).await
    };
    agent::wait_gone(&ctx.cri, NS, crate::WAIT).await;
    let stamp = |f: &str| first_stamp(&out.join(f));
    let began = [stamp("prestop"), stamp("app")].into_iter().flatten().min().unwrap_or(0);
    let get = |k: &str| rel(ends.get(k).copied().unwrap_or(0), dl);
    let run = Run {
        app: get("app"),
        side: get("side"),
        sandbox: get(""),
        began: if began > 0 { (began - t0) as f64 / 1e6 } else { f64::NAN },
    };
    eprintln!(
        "  crilet {name}: app {:+.1} ms, sidecar {:+.1} ms, sandbox {:+.1} ms vs the deadline; termination began t0 {:+.1} ms",
        run.app, run.side, run.sandbox, run.began
    );
    run
}

/// The runtime's own accuracy: StopContainer(timeout = grace) on both containers at t0.
async fn raw_once(ctx: &Ctx, node: &crilet::pod::spec::NodeConfig, name: &str, grace: u64) -> (f64, f64) {
    let out = node.root_dir.join("out").join(name);
    let d = raw::desired(RAW_NS, &manifest(name, RAW_NS, &ctx.image, &out, grace, false));
    let waiter = spawn_wait(
        ctx,
        RAW_NS,
        want_keys(&[name.to_string()], &["side", "app"]),
        deadline(),
        Observe::Events,
    );
    let (sb, ids) = raw::start_pod(&ctx.cri, node, &d, &ctx.image_ref).await;
    waiter.await.expect("waiting for the raw pod");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = now_ns();
    let stops: Vec<_> = ids
        .iter()
        .map(|id| {
            let (cri, id) = (ctx.cri.clone(), id.clone());
            tokio::spawn(async move {
                cri.stop_container(&id, Duration::from_secs(grace)).await.expect("StopContainer")
            })
        })
        .collect();
    for s in stops {
        s.await.expect("StopContainer task");
    }
    let dl = t0 + grace as i64 * 1_000_000_000;
    // ids are in start order: the sidecar, then the app.
    let fin = |i: usize| {
        let (cri, id, sb) = (ctx.cri.clone(), ids[i].clone(), sb.clone());
        async move { cri.container_status(&id, &sb).await.map_or(0, |s| s.finished_at) }
    };
    let (side, app) = (rel(fin(0).await, dl), rel(fin(1).await, dl));
    raw::remove_pod(&ctx.cri, &sb).await;
    eprintln!("  raw {name}: app {app:+.1} ms, sidecar {side:+.1} ms vs the deadline");
    (app, side)
}

fn within(v: &[f64]) -> bool {
    !v.is_empty() && v.iter().all(|x| (-100.0..=0.0).contains(x))
}

fn spread(v: &[f64]) -> String {
    format!("{:+.1} / {:+.1} / {:+.1} ms", min(v), median(v), max(v))
}

fn row(metric: &str, raw: Option<&[f64]>, v: &[f64], target: bool) -> Row {
    Row {
        metric: metric.into(),
        baseline: raw.map_or(String::new(), spread),
        crilet: spread(v),
        ratio: None,
        target: if target { "every run in −100 … 0 ms".into() } else { String::new() },
        met: target.then(|| within(v)),
        baseline_samples: raw.unwrap_or_default().to_vec(),
        crilet_samples: v.to_vec(),
    }
}

pub async fn run(ctx: &Ctx) -> Scenario {
    let runs: usize = env_num("CRILET_BENCH_TERM_RUNS", 5).max(1);
    let grace: u64 = env_num("CRILET_BENCH_TERM_GRACE", 3).max(1);
    let agent = ctx.agent("terminate").await;
    let node = raw::node(&ctx.dir.join("terminate"));
    let (mut raw_app, mut raw_side) = (vec![], vec![]);
    let (mut plain, mut hooked) = (vec![], vec![]);
    for i in 0..runs {
        let (a, s) = raw_once(ctx, &node, &format!("term-raw-{i}"), grace).await;
        raw_app.push(a);
        raw_side.push(s);
        plain.push(crilet_once(ctx, &agent, &format!("term-plain-{i}"), grace, false).await);
        hooked.push(crilet_once(ctx, &agent, &format!("term-prestop-{i}"), grace, true).await);
    }
    agent.stop(&ctx.cri, NS).await;
    let col = |v: &[Run], f: fn(&Run) -> f64| v.iter().map(f).collect::<Vec<f64>>();
    let mut rows = Vec::new();
    for (case, v, base) in [("plain", &plain, true), ("preStop 1 s", &hooked, false)] {
        let b = |x: &[f64]| -> Option<Vec<f64>> { base.then(|| x.to_vec()) };
        rows.push(row(
            &format!("{case}: app finished_at − deadline"),
            b(&raw_app).as_deref(),
            &col(v, |r| r.app),
            true,
        ));
        rows.push(row(
            &format!("{case}: sidecar finished_at − deadline"),
            b(&raw_side).as_deref(),
            &col(v, |r| r.side),
            true,
        ));
        rows.push(row(&format!("{case}: sandbox NotReady − deadline"), None, &col(v, |r| r.sandbox), false));
        rows.push(row(&format!("{case}: termination began − t0"), None, &col(v, |r| r.began), false));
    }
    Scenario {
        id: "terminate".into(),
        title: format!("Termination accuracy (grace {grace} s, runs per case: {runs})"),
        how: format!(
            "A pod with an app and a native sidecar whose shells trap SIGTERM (noting when it came) and go on \
             running, terminationGracePeriodSeconds {grace}; case \"preStop 1 s\" adds an exec preStop hook to the \
             app that takes 1 s. t0 = the wall clock right before the manifest is removed; deadline = t0 + {grace} \
             s. Per container: its CRI finished_at (from the runtime's CONTAINER_STOPPED_EVENT status, or \
             ContainerStatus polled every 5 ms without events) − deadline; negative = early. Sandbox: the \
             runtime's timestamp of the sandbox's stop event (or the first 5 ms poll showing it NotReady/gone). \
             \"Termination began\": the first of the app's SIGTERM and the preStop start, as the container noted \
             them (its clock is the host's), − t0: how long crilet took to notice the removal. Baseline (plain \
             case): a raw pod of the same containers, StopContainer(timeout {grace} s) on both at t0 — the \
             runtime's own accuracy. Runs alternate raw, plain, preStop. Values: min / median / max over runs."
        ),
        rows,
        notes: vec![
            "The baseline shows what the runtime itself adds: StopContainer(timeout) sends SIGKILL when the \
             timeout runs out, and finished_at (the shim's reaping of the process) follows it by that much. \
             An agent that leaves the kill to StopContainer's timeout cannot end before the deadline; one that \
             lands inside −100 … 0 ms must send the kill itself a little before it."
                .into(),
        ],
        ..Default::default()
    }
}
