//! Stopping containers inside one grace budget (DESIGN "Termination", spec §5).
//!
//! One absolute deadline per kill: preStop hooks all start at once (R5.5); app containers get
//! SIGTERM first, sidecars then stop in reverse declaration order, each after everything it
//! must outlive has exited (R5.6); each `StopContainer` gets what is left of the budget, with no
//! per-container floor, so nothing outlives the deadline by more than the runtime's own kill.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};
use tokio::sync::watch;
use tokio::time::Instant;

use super::context::Executor;
use super::hooks::run_handler;
use crate::model::{ContainerState, DesiredPod, ObservedContainer, ObservedPod, PodKey, keys};
use crate::podspec::is_sidecar;
use crate::timeline::{Step, StepKind, budget_used, stopped_detail};

/// R5.6: for each running container, the running containers it must outlive. Empty unless the
/// pod has a sidecar. `running` holds container names.
pub fn stop_prerequisites(pod: &Pod, running: &[String]) -> HashMap<String, Vec<String>> {
    let spec = pod.spec.as_ref();
    let inits: &[Container] = spec.and_then(|s| s.init_containers.as_deref()).unwrap_or(&[]);
    let apps: &[Container] = spec.map(|s| s.containers.as_slice()).unwrap_or(&[]);
    let mut out: HashMap<String, Vec<String>> = running.iter().map(|n| (n.clone(), Vec::new())).collect();
    if !inits.iter().any(is_sidecar) {
        return out;
    }
    let is_running = |n: &str| running.iter().any(|r| r == n);
    let running_apps: Vec<String> =
        apps.iter().filter(|c| is_running(&c.name)).map(|c| c.name.clone()).collect();
    let sidecars: Vec<&Container> = inits.iter().filter(|c| is_sidecar(c)).collect();
    for (i, s) in sidecars.iter().enumerate() {
        if !is_running(&s.name) {
            continue;
        }
        let mut pre = running_apps.clone();
        // The next declared sidecar, only if it runs: a gap breaks the chain.
        if let Some(next) = sidecars.get(i + 1).filter(|n| is_running(&n.name)) {
            pre.push(next.name.clone());
        }
        out.insert(s.name.clone(), pre);
    }
    out
}

fn find_spec<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers.iter().chain(spec.init_containers.iter().flatten()).find(|c| c.name == name)
}

/// The preStop handler of a container: from the spec, or from the annotation the container was
/// created with (a pod whose spec is gone, R1.17).
fn pre_stop(spec: Option<&Container>, observed: &ObservedContainer) -> Option<LifecycleHandler> {
    match spec {
        Some(c) => c.lifecycle.as_ref().and_then(|l| l.pre_stop.clone()),
        None => observed.annotations.get(keys::PRESTOP_HANDLER).and_then(|j| serde_json::from_str(j).ok()),
    }
}

/// `StopContainer` takes whole seconds: what is left of the budget, rounded up. Rounding down
/// would SIGKILL up to a second early (a TGPS of 3 started 10 ms late became 2 s); rounding up
/// lets the runtime's own SIGKILL land up to a second late, so [`stop_by_deadline`] sends a
/// second `StopContainer(0)` [`KILL_LEAD`] before the deadline (every container thus gets its
/// budget less 60 ms, and has exited by the deadline).
fn whole_secs_up(left: Duration) -> Duration {
    let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
    Duration::from_secs(secs)
}

/// How long before the deadline the SIGKILL is sent: containerd records a killed container's
/// exit 15–40 ms after the signal (measured by `hack/bench.sh`'s terminate scenario: a raw
/// `StopContainer` whose timeout runs out ends 14–33 ms late), so a kill sent at the deadline
/// itself would always end just past it.
const KILL_LEAD: Duration = Duration::from_millis(60);

/// When the SIGKILL of a container whose budget ends at `deadline` is sent; preStop hooks and
/// waits for other containers are cut there too.
fn kill_time(deadline: Instant) -> Instant {
    deadline.checked_sub(KILL_LEAD).unwrap_or(deadline)
}

/// A kill's deadline, which a second deletion with a shorter grace period may bring forward
/// (never push back) while the kill runs.
#[derive(Clone)]
pub struct Deadline(watch::Receiver<Instant>);

impl Deadline {
    /// A deadline that never moves.
    pub fn fixed(at: Instant) -> Self {
        Self(watch::channel(at).1)
    }

    /// A deadline that follows `rx` (each value no later than the one before).
    pub fn follow(rx: watch::Receiver<Instant>) -> Self {
        Self(rx)
    }

    pub fn get(&self) -> Instant {
        *self.0.borrow()
    }

    /// Returns at the kill time of the deadline as it stands then (see [`kill_time`]).
    async fn reached(&mut self) {
        loop {
            let at = kill_time(self.get());
            tokio::select! {
                _ = tokio::time::sleep_until(at) => return,
                r = self.0.changed() => if r.is_err() {
                    // The deadline can no longer move.
                    tokio::time::sleep_until(at).await;
                    return;
                },
            }
        }
    }
}

/// `StopContainer` with the budget left until `deadline`, and SIGKILL (a second
/// `StopContainer` with timeout 0, which containerd takes while the first still waits)
/// [`KILL_LEAD`] before the deadline if the container has not exited by then.
async fn stop_by_deadline(
    exec: &Executor,
    key: &PodKey,
    name: &str,
    id: &str,
    mut deadline: Deadline,
) -> Result<(), crate::cri::CriError> {
    let kill_at = kill_time(deadline.get());
    let left = kill_at.saturating_duration_since(Instant::now());
    let grace = whole_secs_up(left);
    let left_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
    tracing::info!(pod = %key, container = %name, left_ms, timeout_s = grace.as_secs(), "stopping container");
    let stop = exec.cri.stop_container(id, grace);
    tokio::pin!(stop);
    if grace.is_zero() {
        return stop.await;
    }
    tokio::select! {
        r = &mut stop => return r,
        _ = deadline.reached() => {}
    }
    tracing::debug!(container_id = id, "grace budget spent; SIGKILL");
    let killed = exec.cri.stop_container(id, Duration::ZERO).await;
    match (killed, stop.await) {
        (Ok(()), _) | (_, Ok(())) => Ok(()),
        (Err(e), Err(_)) => Err(e),
    }
}

/// Runs preStop (bounded by the deadline), waits for `wait_for` to finish, then stops the
/// container with what is left of the budget.
#[allow(clippy::too_many_arguments)]
async fn kill_with_deadline(
    exec: Executor,
    key: PodKey,
    spec: Option<Container>,
    observed: ObservedContainer,
    mut deadline: Deadline,
    message: String,
    pod_ip: Option<String>,
    mut wait_for: Vec<watch::Receiver<bool>>,
) -> bool {
    let name = observed.name.clone();
    exec.rec.normal(&key, Some(&name), "Killing", message);
    if let Some(hook) = pre_stop(spec.as_ref(), &observed) {
        let fallback = Container { name: name.clone(), ..Default::default() };
        let c = spec.clone().unwrap_or(fallback);
        let run = run_handler(&*exec.cri, &observed.id, &c, &hook, pod_ip.as_deref());
        let began = Instant::now();
        let outcome = match tokio::select! { r = run => Ok(r), _ = deadline.reached() => Err(()) } {
            Ok(Ok(())) => format!("preStop hook finished in {:.1}s", began.elapsed().as_secs_f64()),
            Ok(Err(msg)) => {
                tracing::warn!(pod = %key, container = %name, error = %msg, "preStop hook failed");
                exec.rec.warning(
                    &key,
                    Some(&name),
                    "FailedPreStopHook",
                    format!("PreStopHook failed: {msg}"),
                );
                format!("preStop hook failed: {msg}")
            }
            Err(_) => {
                tracing::info!(pod = %key, container = %name, "preStop hook did not finish within the grace budget");
                "preStop hook did not finish within the grace budget".to_string()
            }
        };
        exec.rec.step(&key, Some(&name), Step::now(StepKind::PreStop, &observed.id, outcome));
    }
    for rx in &mut wait_for {
        tokio::select! {
            _ = rx.wait_for(|done| *done) => {}
            _ = deadline.reached() => {}
        }
    }
    match stop_by_deadline(&exec, &key, &name, &observed.id, deadline).await {
        Ok(()) => true,
        Err(e) if e.is_not_found() => true,
        Err(e) => {
            exec.rec.warning(
                &key,
                Some(&name),
                "FailedKillContainer",
                format!("Failed to stop container {name}: {e}"),
            );
            false
        }
    }
}

/// Kills one container (spec change, probe failure, failed postStart) with `grace`.
pub async fn kill_one(
    exec: &Executor,
    d: &DesiredPod,
    spec: &Container,
    id: &str,
    grace: Duration,
    message: &str,
    pod_ip: Option<&str>,
) {
    let observed = ObservedContainer {
        id: id.to_string(),
        name: spec.name.clone(),
        state: ContainerState::Running,
        ..Default::default()
    };
    kill_with_deadline(
        exec.clone(),
        d.key.clone(),
        Some(spec.clone()),
        observed,
        Deadline::fixed(Instant::now() + grace),
        message.to_string(),
        pod_ip.map(str::to_string),
        Vec::new(),
    )
    .await;
}

/// A pod kill's deadline as saved under the pod's dir while the kill runs: an agent killed
/// halfway finishes inside the budget that began before it died, instead of starting a fresh
/// one (DESIGN: one absolute deadline per termination).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SavedKill {
    pub started_ns: i64,
    pub deadline_ns: i64,
}

/// How old a saved kill may be and still be the one being resumed: an agent restart takes
/// seconds; a record this much older than its deadline was left behind by a kill that ended.
const SAVED_KILL_STALE_NS: i64 = 600_000_000_000;

/// The kill to carry out now: the saved one when it is being resumed, else a fresh budget.
pub fn resume_kill(saved: Option<SavedKill>, now_ns: i64, grace: Duration) -> SavedKill {
    let grace_ns = i64::try_from(grace.as_nanos()).unwrap_or(i64::MAX);
    let fresh = SavedKill { started_ns: now_ns, deadline_ns: now_ns.saturating_add(grace_ns) };
    saved
        .filter(|s| s.started_ns <= now_ns && s.deadline_ns <= fresh.deadline_ns)
        .filter(|s| now_ns.saturating_sub(s.deadline_ns) < SAVED_KILL_STALE_NS)
        .unwrap_or(fresh)
}

/// Where a pod's kill in progress is saved.
pub fn saved_kill_path(pod_dir: &std::path::Path) -> std::path::PathBuf {
    pod_dir.join("termination.json")
}

/// Loads the saved kill (if any), decides with `resume_kill`, saves the result; the deadline as
/// an `Instant`.
pub fn begin_kill(pod_dir: &std::path::Path, grace: Duration, now_ns: i64) -> Instant {
    let path = saved_kill_path(pod_dir);
    let saved = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice::<SavedKill>(&b).ok());
    let kill = resume_kill(saved, now_ns, grace);
    if Some(kill) != saved {
        if let Err(e) = crate::checkpoint::write_json(&path, &kill) {
            tracing::debug!(error = %crate::error_chain(&e), "saving the kill deadline failed");
        }
    } else {
        tracing::info!(
            left_ms = (kill.deadline_ns - now_ns) / 1_000_000,
            "resuming a pod kill within its earlier deadline"
        );
    }
    let left = u64::try_from(kill.deadline_ns.saturating_sub(now_ns)).unwrap_or(0);
    Instant::now() + Duration::from_nanos(left)
}

/// Brings a saved kill's deadline forward to `deadline_ns` (a shorter second grace period).
pub fn shorten_kill(pod_dir: &std::path::Path, deadline_ns: i64) {
    let path = saved_kill_path(pod_dir);
    let Some(mut kill) = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice::<SavedKill>(&b).ok())
    else {
        return;
    };
    if deadline_ns >= kill.deadline_ns {
        return;
    }
    kill.deadline_ns = deadline_ns;
    let _ = crate::checkpoint::write_json(&path, &kill);
}

/// The kill is over (or none is under way): forget its deadline.
pub fn end_kill(pod_dir: &std::path::Path) {
    let _ = std::fs::remove_file(saved_kill_path(pod_dir));
}

/// Kills every running container of the pod in order by `deadline` (the pod's grace budget,
/// `grace` long), then stops every sandbox of the pod, ready or not (upstream's
/// `killPodWithSyncResult`: a sandbox that died by itself keeps its network until
/// `StopPodSandbox` tears it down; on one already stopped the call is a no-op). Reports an overrun of the
/// budget as an event. Returns whether every stop succeeded (a failed one is retried by the
/// caller within the same deadline).
#[allow(clippy::too_many_arguments)]
pub async fn kill_pod(
    exec: &Executor,
    key: &PodKey,
    pod: &Arc<Pod>,
    observed: &ObservedPod,
    grace: Duration,
    deadline: Instant,
    reason: &str,
) -> bool {
    kill_pod_by(exec, key, pod, observed, grace, Deadline::fixed(deadline), reason).await
}

/// [`kill_pod`] with a deadline that may be brought forward while the kill runs (a second
/// deletion with a shorter grace period, as upstream): hooks, waits and SIGKILLs follow it.
#[allow(clippy::too_many_arguments)]
pub async fn kill_pod_by(
    exec: &Executor,
    key: &PodKey,
    pod: &Arc<Pod>,
    observed: &ObservedPod,
    grace: Duration,
    deadline: Deadline,
    reason: &str,
) -> bool {
    let running: Vec<&ObservedContainer> = observed
        .containers
        .iter()
        .filter(|c| matches!(c.state, ContainerState::Running | ContainerState::Unknown))
        .collect();
    let names: Vec<String> = running.iter().map(|c| c.name.clone()).collect();
    if !names.is_empty() {
        let detail = format!("{reason}; grace period {}s", grace.as_secs());
        exec.rec.step(key, None, Step::now(StepKind::PodKilling, "", detail));
    }
    let prereqs = stop_prerequisites(pod, &names);
    let mut done_tx: HashMap<String, watch::Sender<bool>> = HashMap::new();
    for n in &names {
        done_tx.insert(n.clone(), watch::channel(false).0);
    }
    let pod_ip = observed.pod_ips().first().cloned();
    let mut tasks = tokio::task::JoinSet::new();
    for c in running {
        let waits: Vec<watch::Receiver<bool>> = prereqs
            .get(&c.name)
            .into_iter()
            .flatten()
            .filter_map(|p| done_tx.get(p).map(watch::Sender::subscribe))
            .collect();
        let Some(tx) = done_tx.get(&c.name).cloned() else { continue };
        exec.rec.step(key, Some(&c.name), Step::now(StepKind::Killing, &c.id, reason));
        let fut = kill_with_deadline(
            exec.clone(),
            key.clone(),
            find_spec(pod, &c.name).cloned(),
            c.clone(),
            deadline.clone(),
            format!("Stopping container {}", c.name),
            pod_ip.clone(),
            waits,
        );
        tasks.spawn(async move {
            let stopped = fut.await;
            let _ = tx.send(true);
            stopped
        });
    }
    let mut all_stopped = true;
    while let Some(done) = tasks.join_next().await {
        all_stopped &= done.unwrap_or(false);
    }
    for sb in &observed.sandboxes {
        match exec.cri.stop_sandbox(&sb.id).await {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                all_stopped = false;
                exec.rec.warning(
                    key,
                    None,
                    "FailedKillPod",
                    format!("Failed to stop sandbox {}: {e}", sb.id),
                );
            }
        }
    }
    // The runtime's own SIGKILL takes a moment; anything beyond that is an overrun worth telling.
    let deadline = deadline.get();
    let now = Instant::now();
    let over = now.saturating_duration_since(deadline);
    let used = budget_used(grace, deadline.saturating_duration_since(now), over);
    if !names.is_empty() && all_stopped {
        let detail = stopped_detail(reason, used, grace);
        exec.rec.step(key, None, Step::now(StepKind::PodStopped, "", detail.clone()));
        if over <= Duration::from_secs(1) {
            exec.rec.normal(key, None, "PodStopped", detail);
        }
    }
    if over > Duration::from_secs(1) {
        exec.rec.warning(
            key,
            None,
            "GracePeriodOverrun",
            format!(
                "Stopping the pod ({reason}) ended {:.1}s past the deadline of its {}s grace period",
                over.as_secs_f64(),
                grace.as_secs()
            ),
        );
    }
    all_stopped
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodSpec;

    use super::*;

    fn c(name: &str, sidecar: bool) -> Container {
        Container {
            name: name.into(),
            restart_policy: sidecar.then(|| "Always".to_string()),
            ..Default::default()
        }
    }

    fn pod(inits: Vec<Container>, apps: Vec<Container>) -> Pod {
        Pod {
            spec: Some(PodSpec { init_containers: Some(inits), containers: apps, ..Default::default() }),
            ..Default::default()
        }
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn budget_left_rounds_up_so_the_runtime_never_kills_early() {
        let ms = Duration::from_millis;
        let s = Duration::from_secs;
        for (left, want) in [
            (ms(29_999), s(30)),
            (s(30), s(30)),
            (ms(2_990), s(3)),
            (ms(2_010), s(3)),
            (ms(800), s(1)),
            (ms(1), s(1)),
            (Duration::ZERO, Duration::ZERO),
        ] {
            assert_eq!(whole_secs_up(left), want, "{left:?} left");
        }
    }

    #[test]
    fn prerequisites_cases() {
        let p = pod(vec![c("s1", true), c("s2", true), c("s3", true)], vec![c("m1", false), c("m2", false)]);
        let cases: Vec<(&str, Vec<&str>, Vec<(&str, Vec<&str>)>)> = vec![
            (
                "all running: apps free, sidecars chain in reverse",
                vec!["s1", "s2", "s3", "m1", "m2"],
                vec![
                    ("m1", vec![]),
                    ("m2", vec![]),
                    ("s3", vec!["m1", "m2"]),
                    ("s2", vec!["m1", "m2", "s3"]),
                    ("s1", vec!["m1", "m2", "s2"]),
                ],
            ),
            (
                "a gap breaks the chain: s1 does not wait for s3",
                vec!["s1", "s3", "m1"],
                vec![("m1", vec![]), ("s3", vec!["m1"]), ("s1", vec!["m1"])],
            ),
            (
                "apps already gone: sidecars only wait for each other",
                vec!["s1", "s2"],
                vec![("s2", vec![]), ("s1", vec!["s2"])],
            ),
        ];
        for (name, running, want) in cases {
            let got = stop_prerequisites(&p, &names(&running));
            assert_eq!(got.len(), want.len(), "{name}");
            for (n, pre) in want {
                assert_eq!(got.get(n), Some(&names(&pre)), "{name}: {n}");
            }
        }
        // Without sidecars there is no ordering at all.
        let p = pod(vec![c("i", false)], vec![c("m1", false), c("m2", false)]);
        let got = stop_prerequisites(&p, &names(&["m1", "m2"]));
        assert!(got.values().all(Vec::is_empty));
    }

    #[test]
    fn a_kill_resumed_after_an_agent_restart_keeps_its_deadline() {
        let s = 1_000_000_000_i64;
        let grace = Duration::from_secs(8);
        let fresh = |now: i64| SavedKill { started_ns: now, deadline_ns: now + 8 * s };
        let saved =
            |started: i64, deadline: i64| Some(SavedKill { started_ns: started, deadline_ns: deadline });
        // (name, saved record, now, want)
        let cases = [
            ("nothing saved: a fresh budget", None, 100 * s, fresh(100 * s)),
            (
                "killed 1.5 s in, back 1 s later: the old deadline",
                saved(100 * s, 108 * s),
                102 * s,
                saved(100 * s, 108 * s).unwrap(),
            ),
            (
                "back after the deadline: nothing left (kill now)",
                saved(100 * s, 108 * s),
                110 * s,
                saved(100 * s, 108 * s).unwrap(),
            ),
            (
                "a record from long ago is stale: a fresh budget",
                saved(100 * s, 108 * s),
                100_000 * s,
                fresh(100_000 * s),
            ),
            (
                "a deadline later than a fresh one is not believed",
                saved(100 * s, 500 * s),
                101 * s,
                fresh(101 * s),
            ),
            (
                "a record from the future (clock moved back) is not believed",
                saved(200 * s, 208 * s),
                101 * s,
                fresh(101 * s),
            ),
        ];
        for (name, saved, now, want) in cases {
            assert_eq!(resume_kill(saved, now, grace), want, "{name}");
        }
    }
}
