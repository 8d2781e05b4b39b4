//! Scale: N pods (default 110), each with an app and a native sidecar, an exec readiness probe
//! (period 10 s) on each. Start times against a raw baseline, then what crilet costs while
//! they run: RSS and CPU over a steady window.

use std::time::{Duration, Instant};

use crate::kubelet::{self, Kubelet};
use crate::report::{Row, Scenario, ratio_row};
use crate::start::{LIST_EVERY, Observe, RAW, keys, observed_by, spawn_wait};
use crate::{Ctx, NS, RAW_NS, cpu, env_num, ms, raw};

const CMD: &str = "trap 'exit 0' TERM; while true; do sleep 1; done";
/// How often crilet's status is read for readiness (only while waiting for it).
const READY_POLL: Duration = Duration::from_millis(250);
/// The probes' period.
const PERIOD: Duration = Duration::from_secs(10);

/// Whether the pods have their readiness probes (`CRILET_BENCH_SCALE_PROBES=0`: none, and no
/// ExecSync in the baseline; a diagnostic that separates the probes' load from the agent's).
fn probes() -> bool {
    env_num("CRILET_BENCH_SCALE_PROBES", 1) != 0
}

fn manifest(name: &str, namespace: &str, image: &str) -> String {
    let probe =
        if probes() { "    readinessProbe: {exec: {command: [\"true\"]}, periodSeconds: 10}\n" } else { "" };
    let c = |n: &str, extra: &str| {
        format!("  - name: {n}\n    image: {image}\n{extra}    command: [sh, -c, \"{CMD}\"]\n{probe}")
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n  \
         terminationGracePeriodSeconds: 2\n  initContainers:\n{}  containers:\n{}",
        c("side", "    restartPolicy: Always\n"),
        c("app", "")
    )
}

fn clk_tck() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100.0)
}

/// CPU seconds from t0 to all Ready: the machine's, then by process group (`cpu.rs`).
type Cpu = (f64, Vec<f64>);

/// How the baseline probes.
#[derive(Clone, Copy, PartialEq)]
enum RawProbes {
    /// One `ExecSync` of the probe command per container: its first readiness probe.
    Once,
    /// The same, then one every period until every container has had its first: the calls a
    /// kubelet makes (a probe at once when the container runs, then one per period).
    Schedule,
}

async fn probe(cri: &crilet::cri::CriClient, id: &str) {
    let (code, _) = cri
        .exec_sync(id, vec!["true".into()], Duration::from_secs(1))
        .await
        .expect("ExecSync of the probe command");
    assert_eq!(code, 0, "the probe command failed in the baseline");
}

/// The baseline: every pod at once, each pod's sequence in order (raw.rs), then the probes as
/// `how` says. Returns (all running, all "ready": the last first probe returned) in ms from the
/// first call, the CPU spent until then, and how many periodic probes ran.
async fn raw_run(
    ctx: &Ctx,
    names: &[String],
    limit: Duration,
    how: RawProbes,
) -> (f64, f64, Cpu, usize, Phases) {
    let node = raw::node(&ctx.dir.join("scale"));
    let pods: Vec<_> = names.iter().map(|n| raw::desired(RAW_NS, &manifest(n, RAW_NS, &ctx.image))).collect();
    let waiter = spawn_wait(
        ctx,
        RAW_NS,
        keys(names, &["side", "app"]),
        Instant::now() + limit,
        Observe::List(LIST_EVERY),
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let cpu0 = cpu::shot();
    let t0 = Instant::now();
    let tasks: Vec<_> = pods
        .into_iter()
        .map(|d| {
            let (cri, node, image_ref) = (ctx.cri.clone(), node.clone(), ctx.image_ref.clone());
            let stopped = stopped.clone();
            tokio::spawn(async move {
                if how == RawProbes::Once {
                    let (sb, ids) = raw::start_pod(&cri, &node, &d, &image_ref).await;
                    for id in ids.iter().filter(|_| probes()) {
                        probe(&cri, id).await;
                    }
                    return (sb, Instant::now(), vec![]);
                }
                // Each container probed from its start on, in a task of its own: the first
                // probe at once, then one per period until the stop.
                let mut probing = Vec::new();
                let (sb, _) = raw::start_pod_each(&cri, &node, &d, &image_ref, raw::Image::Resolved, |id| {
                    let (cri, id, mut stopped) = (cri.clone(), id.to_string(), stopped.clone());
                    probing.push(tokio::spawn(async move {
                        probe(&cri, &id).await;
                        let first = Instant::now();
                        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + PERIOD, PERIOD);
                        let mut n = 0;
                        loop {
                            tokio::select! {
                                _ = stopped.wait_for(|s| *s) => return (first, n),
                                _ = tick.tick() => {}
                            }
                            probe(&cri, &id).await;
                            n += 1;
                        }
                    }));
                })
                .await;
                (sb, Instant::now(), probing)
            })
        })
        .collect();
    let mut sandboxes = Vec::new();
    let mut probing = Vec::new();
    let mut ready = t0;
    for t in tasks {
        let (sb, at, p) = t.await.expect("raw pod start");
        sandboxes.push(sb);
        probing.extend(p);
        ready = ready.max(at);
    }
    let mut extra = 0;
    if how == RawProbes::Schedule {
        // Ready: every container's first probe returned (each loop reports when, at the stop).
        let mut firsts = Vec::new();
        let _ = stop.send(true);
        for p in probing {
            let (first, n) = p.await.expect("probes");
            firsts.push(first);
            extra += n;
        }
        ready = firsts.into_iter().max().unwrap_or(ready);
    }
    let cpu = cpu::spent(&cpu0, &cpu::shot(), clk_tck());
    let seen = waiter.await.expect("waiting for the raw pods");
    let phases = Phases::of(&seen, names, t0);
    let started = seen.into_values().max().unwrap_or(t0);
    eprintln!(
        "  raw ({}): all running {:.1} s, all probed once {:.1} s, {extra} periodic probes, {:.1} CPU-s {:.1?}; {}",
        if how == RawProbes::Once { "probes once" } else { "probes on schedule" },
        (started - t0).as_secs_f64(),
        (ready - t0).as_secs_f64(),
        cpu.0,
        cpu.1,
        phases.line()
    );
    raw::remove_pods(&ctx.cri, sandboxes).await;
    (ms(started - t0), ms(ready - t0), cpu, extra, phases)
}

/// Each pod's two steps as seen from outside (ms): t0 → its sidecar running, and its sidecar
/// running → its app running (the sidecar gate: for the baseline, the app's create and start
/// calls; for crilet also the observation that the sidecar runs).
#[derive(Default)]
struct Phases {
    side: Vec<f64>,
    gate: Vec<f64>,
}

impl Phases {
    fn of(
        seen: &std::collections::HashMap<crate::events::Key, Instant>,
        names: &[String],
        t0: Instant,
    ) -> Phases {
        let mut p = Phases::default();
        for n in names {
            let at = |c: &str| seen.get(&(n.clone(), c.to_string())).copied();
            if let (Some(side), Some(app)) = (at("side"), at("app")) {
                p.side.push(ms(side - t0));
                p.gate.push(ms(app.saturating_duration_since(side)));
            }
        }
        p
    }

    fn line(&self) -> String {
        use crate::report::{median, p95};
        format!(
            "per pod: sidecar running {:.0} ms (p95 {:.0}), then app {:.0} ms (p95 {:.0})",
            median(&self.side),
            p95(&self.side),
            median(&self.gate),
            p95(&self.gate)
        )
    }

    fn add(&mut self, other: Phases) {
        self.side.extend(other.side);
        self.gate.extend(other.gate);
    }
}

fn all_ready(pods: &[serde_json::Value], n: usize) -> bool {
    pods.len() == n
        && pods.iter().all(|p| {
            p["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
        })
}

struct Cost {
    rss_max_kib: u64,
    hwm_kib: u64,
    cpu_pct: f64,
    restarts: i64,
    not_ready: usize,
}

/// The agent under test on a side of its own: crilet, or the upstream kubelet (its peer).
#[derive(Clone, Copy, PartialEq)]
enum AgentKind {
    Crilet,
    Kubelet,
}

enum Running {
    Crilet(crate::agent::Agent),
    Kubelet(Kubelet),
}

impl Running {
    async fn list_pods(&self, namespace: &str) -> Vec<serde_json::Value> {
        match self {
            Running::Crilet(a) => a.list_pods(namespace).await,
            Running::Kubelet(k) => k.list_pods(namespace).await,
        }
    }
}

/// An agent: N manifests renamed in at once; all running (a CRI list, the same for every
/// side), all Ready (the agent's own pod list every 250 ms: crilet's control socket, the
/// kubelet's read-only port), then the steady window (skipped, no cost, for `window` None).
async fn agent_run(
    ctx: &Ctx,
    kind: AgentKind,
    names: &[String],
    limit: Duration,
    window: Option<Duration>,
) -> (f64, f64, Cpu, Option<Cost>, Phases) {
    let (agent, ns, pods, manifests, pid) = match kind {
        AgentKind::Crilet => {
            let a = ctx.agent("scale").await;
            let (m, pid) = (a.manifests.clone(), a.pid);
            (Running::Crilet(a), NS, names.to_vec(), m, pid)
        }
        AgentKind::Kubelet => {
            let bin = kubelet::bin().expect("CRILET_BENCH_KUBELET_BIN");
            let dir = ctx.dir.join("scale-kubelet");
            let k = Kubelet::start(&bin, &ctx.cri, &ctx.endpoint, dir, ctx.left.clone()).await;
            let (m, pid) = (k.manifests.clone(), k.pid);
            // A static pod is named after its manifest and the node.
            let pods = names.iter().map(|n| format!("{n}-{}", kubelet::NODE)).collect();
            (Running::Kubelet(k), kubelet::KUBELET_NS, pods, m, pid)
        }
    };
    let label = if kind == AgentKind::Crilet { "crilet" } else { "kubelet" };
    // Pods added to a node that has been running: within its first probe period a (re)started
    // agent, like the kubelet, delays each probe's first run by a random part of the period so
    // that probes do not all fire at once; that start-up spread is not what is measured here.
    tokio::time::sleep(PERIOD + Duration::from_secs(1)).await;
    let waiter =
        spawn_wait(ctx, ns, keys(&pods, &["side", "app"]), Instant::now() + limit, Observe::List(LIST_EVERY));
    let cpu0 = cpu::shot();
    let t0 =
        crate::agent::write_all(&manifests, names.iter().map(|n| (n.as_str(), manifest(n, ns, &ctx.image))));
    let seen = waiter.await.unwrap_or_else(|e| panic!("waiting for the {label}'s pods: {e}"));
    let phases = Phases::of(&seen, &pods, t0);
    let started = seen.into_values().max().unwrap_or(t0);
    let deadline = t0 + limit;
    let ready = loop {
        let listed = agent.list_pods(ns).await;
        let at = Instant::now();
        if all_ready(&listed, names.len()) {
            break at;
        }
        assert!(at < deadline, "the {label}'s pods not all Ready in {limit:?}");
        tokio::time::sleep(READY_POLL).await;
    };
    let cpu = cpu::spent(&cpu0, &cpu::shot(), clk_tck());
    eprintln!(
        "  {label}: all running {:.1} s, all Ready {:.1} s, {:.1} CPU-s {:.1?}; {}",
        (started - t0).as_secs_f64(),
        (ready - t0).as_secs_f64(),
        cpu.0,
        cpu.1,
        phases.line()
    );
    let cost = match window {
        Some(window) => Some(steady(&agent, pid, ns, names.len(), window).await),
        None => None,
    };
    match agent {
        Running::Crilet(a) => a.stop(&ctx.cri, NS).await,
        Running::Kubelet(k) => k.stop(&ctx.cri).await,
    }
    (ms(started - t0), ms(ready - t0), cpu, cost, phases)
}

/// What the agent (process `pid`) costs with its `n` pods running and nothing polling it.
async fn steady(agent: &Running, pid: u32, ns: &str, n: usize, window: Duration) -> Cost {
    // Let the start's tail (status writes, first probe round) pass first.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (c0, w0) = (crate::agent::cpu_ticks(pid), Instant::now());
    let mut rss_max = 0;
    while w0.elapsed() < window {
        rss_max = rss_max.max(crate::agent::memory(pid).0);
        tokio::time::sleep(Duration::from_secs(1).min(window.saturating_sub(w0.elapsed()))).await;
    }
    let (c1, secs) = (crate::agent::cpu_ticks(pid), w0.elapsed().as_secs_f64());
    let (rss, hwm) = crate::agent::memory(pid);
    let pods = agent.list_pods(ns).await;
    let restarts = pods
        .iter()
        .flat_map(|p| {
            let s = &p["status"];
            s["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .chain(s["initContainerStatuses"].as_array().into_iter().flatten())
        })
        .filter_map(|c| c["restartCount"].as_i64())
        .sum();
    let not_ready = n - pods.iter().filter(|p| all_ready(std::slice::from_ref(p), 1)).count();
    Cost {
        rss_max_kib: rss_max.max(rss),
        hwm_kib: hwm,
        cpu_pct: (c1 - c0) as f64 / clk_tck() / secs * 100.0,
        restarts,
        not_ready,
    }
}

pub async fn run(ctx: &Ctx) -> Scenario {
    let n: usize = env_num("CRILET_BENCH_SCALE_PODS", 110).max(1);
    let window = Duration::from_secs(env_num("CRILET_BENCH_SCALE_WINDOW", 60).max(1));
    let limit = Duration::from_secs(120 + 3 * n as u64);
    let rounds: usize = env_num("CRILET_BENCH_SCALE_ROUNDS", 3).max(1);
    let names: Vec<String> = (0..n).map(|i| format!("scale-{i}")).collect();
    let (mut raw_run_ms, mut raw_ready_ms, mut cri_run_ms, mut cri_ready_ms) =
        (vec![], vec![], vec![], vec![]);
    let (mut sched_run_ms, mut sched_ready_ms, mut sched_probes) = (vec![], vec![], vec![]);
    let mut cost = None;
    let (mut raw_phases, mut cri_phases) = (Phases::default(), Phases::default());
    // [machine, each group of cpu::GROUPS], per round.
    let groups = || vec![vec![]; cpu::STEAL + 2];
    let (mut raw_cpu, mut sched_cpu, mut cri_cpu, mut kub_cpu) = (groups(), groups(), groups(), groups());
    let (mut kub_run_ms, mut kub_ready_ms, mut kub_cost) = (vec![], vec![], None);
    let push = |to: &mut Vec<Vec<f64>>, c: Cpu| {
        for (i, v) in std::iter::once(c.0).chain(c.1).enumerate() {
            to[i].push(v);
        }
    };
    // Each round runs every side once; the order turns by one each round, so that no side is
    // always the first after the previous scenario or always after the same other side.
    #[derive(Clone, Copy)]
    enum Side {
        Raw,
        Scheduled,
        Crilet,
        Kubelet,
    }
    let mut sides = vec![Side::Raw, Side::Crilet];
    if probes() {
        sides.insert(1, Side::Scheduled);
    }
    let peer = kubelet::bin().is_some();
    if peer {
        sides.push(Side::Kubelet);
    }
    for r in 0..rounds {
        let last = r + 1 == rounds;
        for side in sides.iter().cycle().skip(r % sides.len()).take(sides.len()) {
            match side {
                Side::Raw => {
                    let (a, b, c, _, p) = raw_run(ctx, &names, limit, RawProbes::Once).await;
                    push(&mut raw_cpu, c);
                    raw_phases.add(p);
                    raw_run_ms.push(a);
                    raw_ready_ms.push(b);
                }
                Side::Scheduled => {
                    let (a, b, c, n, _) = raw_run(ctx, &names, limit, RawProbes::Schedule).await;
                    push(&mut sched_cpu, c);
                    sched_run_ms.push(a);
                    sched_ready_ms.push(b);
                    sched_probes.push(n as f64);
                }
                Side::Crilet => {
                    let (a, b, c, k, p) =
                        agent_run(ctx, AgentKind::Crilet, &names, limit, last.then_some(window)).await;
                    push(&mut cri_cpu, c);
                    cri_phases.add(p);
                    cri_run_ms.push(a);
                    cri_ready_ms.push(b);
                    cost = cost.or(k);
                }
                Side::Kubelet => {
                    let (a, b, c, k, _) =
                        agent_run(ctx, AgentKind::Kubelet, &names, limit, last.then_some(window)).await;
                    push(&mut kub_cpu, c);
                    kub_run_ms.push(a);
                    kub_ready_ms.push(b);
                    kub_cost = kub_cost.or(k);
                }
            }
        }
        let against_kubelet = match (kub_run_ms.get(r), kub_ready_ms.get(r)) {
            (Some(run), Some(ready)) => {
                format!("; against the kubelet {:.2}×, {:.2}×", cri_run_ms[r] / run, cri_ready_ms[r] / ready)
            }
            _ => String::new(),
        };
        eprintln!(
            "  round {r}: all running {:.2}×, all Ready {:.2}×{against_kubelet}",
            cri_run_ms[r] / raw_run_ms[r],
            cri_ready_ms[r] / raw_ready_ms[r]
        );
    }
    let cost = cost.expect("the last round measures the window");
    let mib = |k: u64| k as f64 / 1024.0;
    let one = |metric: &str, value: String, target: &str, met: Option<bool>, sample: f64| Row {
        metric: metric.into(),
        crilet: value,
        target: target.into(),
        met,
        crilet_samples: vec![sample],
        ..Default::default()
    };
    let mut scenario = Scenario {
        id: "scale".into(),
        title: if probes() {
            format!("{n} pods, {} containers, {} exec readiness probes", 2 * n, 2 * n)
        } else {
            format!("{n} pods, {} containers, no probes (diagnostic: CRILET_BENCH_SCALE_PROBES=0)", 2 * n)
        },
        how: format!(
            "Each pod: a native sidecar (init container, restartPolicy Always) and an app, both busybox shell \
             loops with an exec readiness probe (`true`, period 10 s). Baseline: all {n} raw CRI sequences at once \
             (one task per pod, sidecar then app, as crilet does: all pods in parallel, each pod in order), then \
             one ExecSync of the probe command per container (its first readiness probe); {RAW}. crilet: {n} \
             manifests staged as dotfiles, then renamed at once into the directory of an agent that has been up for \
             more than one probe period (in its first period an agent spreads the first probe runs over the \
             period, as the kubelet does after a restart). \"Running\": the last of the {} containers observed \
             running by {}. \"Ready\": baseline, the last ExecSync returned; crilet, the first ListPods (control \
             socket, every 250 ms) showing every pod Ready. {rounds} round(s) (CRILET_BENCH_SCALE_ROUNDS), each \
             side once in each, in an order that turns by one each round (raw, crilet; then crilet, raw…), \
             a fresh agent each; median / p95 of the rounds (one round is a noisy single \
             sample). Then, in the last round, 5 s after all Ready, a {} s window with the pods running and nothing polling crilet: \
             its VmRSS (max of 1 s samples), VmHWM (peak of the whole run, start included) and CPU \
             (utime+stime over the window, % of one core).",
            2 * n,
            observed_by(ctx, Observe::List(LIST_EVERY)),
            window.as_secs()
        ),
        rows: vec![
            ratio_row(
                &format!("t0 → all {} containers running", 2 * n),
                &raw_run_ms,
                &cri_run_ms,
                "ms",
                Some(1.05),
            ),
            ratio_row(&format!("t0 → all {n} pods Ready"), &raw_ready_ms, &cri_ready_ms, "ms", Some(1.10)),
            ratio_row("machine CPU, t0 → all Ready", &raw_cpu[0], &cri_cpu[0], "CPU-s", None),
            ratio_row("per pod: t0 → its sidecar running", &raw_phases.side, &cri_phases.side, "ms", None),
            ratio_row(
                "per pod: its sidecar running → its app running",
                &raw_phases.gate,
                &cri_phases.gate,
                "ms",
                None,
            ),
            one(
                "crilet RSS in the window (VmRSS, max)",
                format!("{:.1} MiB", mib(cost.rss_max_kib)),
                "≤ 32 MiB",
                Some(mib(cost.rss_max_kib) <= 32.0),
                mib(cost.rss_max_kib),
            ),
            one(
                "crilet peak RSS of the run (VmHWM)",
                format!("{:.1} MiB", mib(cost.hwm_kib)),
                "",
                None,
                mib(cost.hwm_kib),
            ),
            one(
                "crilet CPU in the window (% of one core)",
                format!("{:.2} %", cost.cpu_pct),
                "≤ 1.5 %",
                Some(cost.cpu_pct <= 1.5),
                cost.cpu_pct,
            ),
        ],
        notes: vec![
            cpu_note("", &raw_cpu, &cri_cpu),
            format!(
                "After the window: {} container restarts (expected 0), {} pods not Ready (expected 0).",
                cost.restarts, cost.not_ready
            ),
            steal_note(&[
                ("baseline", &raw_cpu),
                ("baseline also probing every period", &sched_cpu),
                ("crilet", &cri_cpu),
                ("upstream kubelet", &kub_cpu),
            ]),
        ],
        ..Default::default()
    };
    if probes() {
        // The same calls as a kubelet's: what the agent adds beside the probes the pods ask for.
        let also = "baseline also probing every period";
        scenario.rows.extend([
            ratio_row(
                &format!("t0 → all {} containers running, {also}", 2 * n),
                &sched_run_ms,
                &cri_run_ms,
                "ms",
                None,
            ),
            ratio_row(
                &format!("t0 → all {n} pods Ready, {also}"),
                &sched_ready_ms,
                &cri_ready_ms,
                "ms",
                None,
            ),
            ratio_row(
                &format!("machine CPU, t0 → all Ready, {also}"),
                &sched_cpu[0],
                &cri_cpu[0],
                "CPU-s",
                None,
            ),
        ]);
        scenario.notes.insert(
            1,
            format!(
                "The rows \"{also}\" compare with a second baseline run in each round (in the turning order): the \
                 same raw sequences and first probes, and from each container's first probe one ExecSync per \
                 period until every container has had its first, as a kubelet probes (at once when the \
                 container runs, then every period). It ran {:.0} periodic probes (median of the rounds). {}",
                crate::report::median(&sched_probes),
                cpu_note(" (that baseline)", &sched_cpu, &cri_cpu)
            ),
        );
    }
    if let Some(k) = kub_cost.as_ref().filter(|_| peer) {
        // The peer: the baseline column is the upstream kubelet's, run standalone on the same
        // containerd with the same manifests in its static pod directory.
        let vs = "against the upstream kubelet";
        scenario.rows.extend([
            ratio_row(
                &format!("t0 → all {} containers running, {vs}", 2 * n),
                &kub_run_ms,
                &cri_run_ms,
                "ms",
                None,
            ),
            ratio_row(&format!("t0 → all {n} pods Ready, {vs}"), &kub_ready_ms, &cri_ready_ms, "ms", None),
            ratio_row(&format!("machine CPU, t0 → all Ready, {vs}"), &kub_cpu[0], &cri_cpu[0], "CPU-s", None),
            ratio_row(
                &format!("agent RSS in the window (VmRSS, max), {vs}"),
                &[mib(k.rss_max_kib)],
                &[mib(cost.rss_max_kib)],
                "MiB",
                None,
            ),
            ratio_row(
                &format!("agent CPU in the window (% of one core), {vs}"),
                &[k.cpu_pct],
                &[cost.cpu_pct],
                "%",
                None,
            ),
        ]);
        scenario.notes.push(format!(
            "The rows \"{vs}\" compare with the node agent users run instead of crilet, in each round (in the \
             turning order): the upstream kubelet ({}), standalone (no API server; anonymous access to its own API on \
             127.0.0.1 only, cgroupfs under a cgroup root of its own, no image GC or eviction thresholds), on the \
             same containerd, the same {n} manifests renamed at once into its static pod directory, an agent up for \
             more than one probe period; running observed the same way, Ready through its read-only /pods \
             (127.0.0.1, every 250 ms), its steady window measured as crilet's. After its window: {} container \
             restarts, {} pods not Ready. {}",
            kubelet::bin().map(|b| b.display().to_string()).unwrap_or_default(),
            k.restarts,
            k.not_ready,
            cpu_note(" (the upstream kubelet)", &kub_cpu, &cri_cpu)
        ));
    }
    scenario
}

/// The hypervisor's steal time of each side's rounds, from t0 to all Ready (rounds in order).
fn steal_note(sides: &[(&str, &Vec<Vec<f64>>)]) -> String {
    let parts: Vec<String> = sides
        .iter()
        .filter(|(_, c)| !c[cpu::STEAL + 1].is_empty())
        .map(|(side, c)| {
            let rounds: Vec<String> = c[cpu::STEAL + 1].iter().map(|v| format!("{v:.1}")).collect();
            format!("{side} {}", rounds.join(", "))
        })
        .collect();
    format!(
        "Steal time, CPU-s from t0 to all Ready in each round (/proc/stat: this virtual machine's CPUs \
         waiting for the host, a round slowed from outside): {}.",
        parts.join("; ")
    )
}

/// The machine's CPU from t0 to all Ready, by process group (medians of the rounds).
fn cpu_note(which: &str, raw: &[Vec<f64>], crilet: &[Vec<f64>]) -> String {
    use crate::report::median;
    let parts: Vec<String> = cpu::GROUPS
        .iter()
        .enumerate()
        .map(|(i, g)| format!("{g} {:.1} / {:.1}", median(&raw[i + 1]), median(&crilet[i + 1])))
        .collect();
    format!(
        "Where the machine's CPU went from t0 to all Ready, CPU-s, baseline{which} / crilet (utime+stime of each \
         process and of the children it reaped, from /proc): {}; the rest of the machine's busy time is the \
         pods' own processes, the kernel and the rest of the system.",
        parts.join("; ")
    )
}
