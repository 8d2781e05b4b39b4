use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::health::healthz;
use super::runtime::{RuntimeCounts, count_runtime, operation_type};
use super::startup::{SliSample, StartSamples, StartupTracker, all_containers_running};
use super::*;
use crate::cri::{Brief, RuntimeBrief, api};
use crate::health::Unhealthy;
use crate::registry::RuntimeHealth;

/// A status in `phase` with one app container per entry, running or waiting.
fn status(phase: &str, running: &[bool]) -> PodStatus {
    let containers = running
        .iter()
        .enumerate()
        .map(|(i, run)| ContainerStatus {
            name: format!("c{i}"),
            state: Some(if *run {
                ContainerState {
                    running: Some(ContainerStateRunning { started_at: Some(Time(jiff::Timestamp::now())) }),
                    ..Default::default()
                }
            } else {
                ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some("ContainerCreating".into()),
                        message: None,
                    }),
                    ..Default::default()
                }
            }),
            ..Default::default()
        })
        .collect();
    PodStatus { phase: Some(phase.into()), container_statuses: Some(containers), ..Default::default() }
}

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn sli(without_pulls: u64, total: u64, first_with_network: bool) -> Option<SliSample> {
    Some(SliSample { without_pulls: s(without_pulls), total: s(total), first_with_network })
}

#[test]
fn start_latency_cases() {
    let t0 = Instant::now();
    let at = |secs| t0 + s(secs);
    // (name, steps, the samples each observation must give). A step is one of: seen (already
    // started?), pulled (from, to), observed (status, host network, at).
    enum Step {
        Seen(bool),
        Pulled(u64, u64),
        Observed(PodStatus, bool, u64, StartSamples),
    }
    use Step::*;
    let start = |secs| Some(s(secs));
    let cases: Vec<(&str, Vec<Step>, usize)> = vec![
        (
            "pulls are excluded from the SLI, not from the start duration",
            vec![
                Seen(false),
                Pulled(1, 3),
                Observed(status("Pending", &[false]), false, 4, StartSamples::default()),
                Observed(
                    status("Running", &[true]),
                    false,
                    5,
                    StartSamples { start: start(5), sli: sli(3, 5, true) },
                ),
                Observed(status("Running", &[true]), false, 9, StartSamples::default()),
            ],
            0,
        ),
        (
            "two pulls: the span from the first start to the last end is excluded",
            vec![
                Seen(false),
                Pulled(1, 2),
                Pulled(4, 6),
                Observed(
                    status("Running", &[true, true]),
                    false,
                    10,
                    StartSamples { start: start(10), sli: sli(5, 10, true) },
                ),
            ],
            0,
        ),
        (
            "Running before every container runs: the start first, the SLI when the last one runs",
            vec![
                Seen(false),
                Observed(
                    status("Running", &[true, false]),
                    false,
                    2,
                    StartSamples { start: start(2), sli: None },
                ),
                Observed(status("Running", &[true, false]), false, 3, StartSamples::default()),
                Observed(
                    status("Running", &[true, true]),
                    false,
                    7,
                    StartSamples { start: None, sli: sli(7, 7, true) },
                ),
            ],
            0,
        ),
        (
            "host network pod: not the first with network",
            vec![
                Seen(false),
                Observed(
                    status("Running", &[true]),
                    true,
                    1,
                    StartSamples { start: start(1), sli: sli(1, 1, false) },
                ),
            ],
            0,
        ),
        (
            "adopted pod (it had started under an earlier agent): nothing measured",
            vec![Seen(true), Observed(status("Running", &[true]), false, 1, StartSamples::default())],
            0,
        ),
        (
            "terminal before running: forgotten without a sample",
            vec![
                Seen(false),
                Observed(status("Failed", &[false]), false, 3, StartSamples::default()),
                Observed(status("Running", &[true]), false, 4, StartSamples::default()),
            ],
            0,
        ),
        (
            "still starting: kept",
            vec![Seen(false), Observed(status("Pending", &[false]), false, 3, StartSamples::default())],
            1,
        ),
        (
            "no container status listed yet: not started",
            vec![Seen(false), Observed(status("Pending", &[]), false, 3, StartSamples::default())],
            1,
        ),
    ];
    for (name, steps, left) in cases {
        let mut t = StartupTracker::default();
        for (i, step) in steps.into_iter().enumerate() {
            match step {
                Seen(started) => t.seen("uid", started, t0),
                Pulled(a, b) => t.pulled("uid", at(a), at(b)),
                Observed(st, host, when, want) => {
                    assert_eq!(t.observe("uid", &st, host, at(when)), want, "{name}: step {i}")
                }
            }
        }
        assert_eq!(t.tracked(), left, "{name}: pods left tracked");
    }
}

#[test]
fn only_the_first_network_pod_is_first_with_network() {
    let t0 = Instant::now();
    let mut t = StartupTracker::default();
    for uid in ["host", "a", "b"] {
        t.seen(uid, false, t0);
    }
    let running = status("Running", &[true]);
    let first = |t: &mut StartupTracker, uid, host| {
        t.observe(uid, &running, host, t0 + s(1)).sli.map(|s| s.first_with_network)
    };
    assert_eq!(first(&mut t, "host", true), Some(false));
    assert_eq!(first(&mut t, "a", false), Some(true));
    assert_eq!(first(&mut t, "b", false), Some(false));
}

#[test]
fn all_containers_running_cases() {
    let cases = [
        ("every container running", status("Running", &[true, true]), true),
        ("one waiting", status("Running", &[true, false]), false),
        ("none listed", status("Pending", &[]), false),
        ("no statuses at all", PodStatus::default(), false),
    ];
    for (name, st, want) in cases {
        assert_eq!(all_containers_running(&st), want, "{name}");
    }
}

#[test]
fn operation_types_are_the_kubelets() {
    let cases = [
        ("RunPodSandbox", "run_podsandbox"),
        ("PodSandboxStatus", "podsandbox_status"),
        ("ListPodSandbox", "list_podsandbox"),
        ("CreateContainer", "create_container"),
        ("StartContainer", "start_container"),
        ("ExecSync", "exec_sync"),
        ("GetContainerEvents", "get_container_events"),
        ("PullImage", "pull_image"),
        ("ImageStatus", "image_status"),
        ("ReopenContainerLog", "reopen_container_log"),
        ("SomethingNew", "SomethingNew"),
    ];
    for (op, want) in cases {
        assert_eq!(operation_type(op), want, "{op}");
    }
}

#[test]
fn runtime_counts_from_a_relist() {
    let brief = |uid: Option<&str>, state: i32| Brief { id: String::new(), state, uid: uid.map(Into::into) };
    let sandbox = |uid: &str, ready: bool| {
        let state =
            if ready { api::PodSandboxState::SandboxReady } else { api::PodSandboxState::SandboxNotready };
        brief(Some(uid), state as i32)
    };
    let container = |state: api::ContainerState| brief(Some("u"), state as i32);
    use api::ContainerState::*;
    let runtime = RuntimeBrief {
        sandboxes: vec![
            sandbox("a", true),
            sandbox("a", true), // two ready sandboxes of one pod: still one pod
            sandbox("b", false),
            sandbox("c", true),
            brief(None, api::PodSandboxState::SandboxReady as i32), // not ours
        ],
        containers: vec![
            container(ContainerRunning),
            container(ContainerRunning),
            container(ContainerExited),
            container(ContainerCreated),
            container(ContainerUnknown),
            brief(None, ContainerRunning as i32), // not ours
        ],
    };
    assert_eq!(count_runtime(&runtime), RuntimeCounts { running_pods: 2, containers: [1, 2, 1, 1] });
    assert_eq!(count_runtime(&RuntimeBrief::default()), RuntimeCounts::default());
}

#[test]
fn healthz_cases() {
    let now = jiff::Timestamp::now();
    let up = RuntimeHealth { available: true, since: now, last_error: String::new() };
    let down = RuntimeHealth {
        available: false,
        since: now - jiff::SignedDuration::from_secs(12),
        last_error: "CRI ListPodSandbox failed: Unavailable".into(),
    };
    let cases = [
        ("healthy", Ok(()), up.clone(), 200, "ok\n"),
        (
            "runtime unavailable",
            Ok(()),
            down.clone(),
            500,
            "container runtime: unavailable for 12s: CRI ListPodSandbox failed: Unavailable\n",
        ),
        (
            "sync loop stuck",
            Err(vec![Unhealthy::SyncLoop(Some(s(31)))]),
            up,
            500,
            "sync loop: stuck for 31s\n",
        ),
        (
            "every reason, one line each",
            Err(vec![Unhealthy::SyncLoop(None), Unhealthy::Runtime(Some(s(15)))]),
            down,
            500,
            "sync loop: not started\ncontainer runtime: no relist answered for 15s\n\
             container runtime: unavailable for 12s: CRI ListPodSandbox failed: Unavailable\n",
        ),
    ];
    for (name, liveness, runtime, code, body) in cases {
        assert_eq!(healthz(liveness, &runtime, now), (code, body.to_string()), "{name}");
    }
}

/// Which long-lived loops ended → the `/healthz` answer: each dead loop is named on a line of
/// its own, after the heartbeats' reasons.
#[test]
fn healthz_names_dead_loops() {
    let now = jiff::Timestamp::now();
    let up = RuntimeHealth { available: true, since: now, last_error: String::new() };
    let cases = [
        ("every loop runs", vec![], 200, "ok\n"),
        ("the Lease renewal returned", vec![("node lease", false)], 500, "node lease: loop ended\n"),
        (
            "two loops, in the order they ended",
            vec![("pod status writer", true), ("relist", false)],
            500,
            "pod status writer: loop panicked\nrelist: loop ended\n",
        ),
    ];
    for (name, dead, code, body) in cases {
        let liveness = crate::health::Liveness::default();
        liveness.sync_loop_beat();
        liveness.relist_answered();
        for (task, panicked) in dead {
            liveness.loop_ended(task, panicked);
        }
        assert_eq!(healthz(liveness.check(), &up, now), (code, body.to_string()), "{name}");
    }
}

/// Every sample of `name` whose labels include `want`.
fn samples<'a>(
    scrape: &'a prometheus_parse::Scrape,
    name: &str,
    want: &[(&str, &str)],
) -> Vec<&'a prometheus_parse::Sample> {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name && want.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .collect()
}

fn value(s: &prometheus_parse::Sample) -> f64 {
    match &s.value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => *v,
        other => panic!("not a scalar: {other:?}"),
    }
}

fn parse(text: &str) -> prometheus_parse::Scrape {
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("exposition parses")
}

#[test]
fn exposition_parses_with_the_kubelets_names() {
    let m = Metrics::new();
    let pod = PodKey::new("ns", "web");
    m.runtime_operation("RunPodSandbox", Duration::from_millis(30), false);
    m.runtime_operation("ListContainers", Duration::from_millis(2), true);
    m.runtime_operation("ListContainers", Duration::from_millis(2), false);
    let series = ProbeSeries::new("Readiness", "app", &pod, "uid-1");
    m.probe(&series, true, Duration::from_millis(20));
    m.probe(&series, true, Duration::from_millis(20));
    m.probe(&series, false, Duration::from_millis(20));
    m.container_started(&pod, "app", 0);
    m.container_started(&pod, "app", 1);
    m.container_started(&pod, "app", 2);
    m.cri_event("CONTAINER_STOPPED_EVENT", 1);
    m.evented_connected();
    m.evented_connection_error();
    m.evented_connection_error();
    let t = m.relist_started();
    m.relisted(t, &RuntimeBrief::default());
    m.relist_failed(m.relist_started());
    m.pod_seen("uid-1", None);
    let mut p = Pod::default();
    p.status = Some(status("Running", &[true]));
    m.pod_published("uid-1", &p);

    let text = m.encode();
    let scrape = parse(&text);
    let one = |name: &str, labels: &[(&str, &str)]| -> f64 {
        let found = samples(&scrape, name, labels);
        assert_eq!(found.len(), 1, "{name} {labels:?} in\n{text}");
        value(found[0])
    };
    let rps = [("operation_type", "run_podsandbox")];
    assert_eq!(one("kubelet_runtime_operations_total", &rps), 1.0);
    assert_eq!(one("kubelet_runtime_operations_duration_seconds_count", &rps), 1.0);
    assert_eq!(one("kubelet_runtime_operations_errors_total", &[("operation_type", "list_containers")]), 1.0);
    assert_eq!(one("kubelet_runtime_operations_total", &[("operation_type", "list_containers")]), 2.0);
    let probe = [
        ("probe_type", "Readiness"),
        ("container", "app"),
        ("pod", "web"),
        ("namespace", "ns"),
        ("pod_uid", "uid-1"),
    ];
    assert_eq!(one("prober_probe_total", &[&probe[..], &[("result", "successful")]].concat()), 2.0);
    assert_eq!(one("prober_probe_total", &[&probe[..], &[("result", "failed")]].concat()), 1.0);
    assert_eq!(one("prober_probe_duration_seconds_count", &probe[..4]), 2.0, "successful probes only");
    assert_eq!(one("crilet_container_restarts_total", &[("container", "app")]), 2.0);
    assert_eq!(one("crilet_cri_events_total", &[("type", "CONTAINER_STOPPED_EVENT")]), 1.0);
    assert_eq!(one(EVENTED_SUCCESS, &[]), 1.0);
    assert_eq!(one(EVENTED_ERROR, &[]), 2.0);
    assert_eq!(one("kubelet_evented_pleg_connection_latency_seconds_count", &[]), 1.0);
    assert_eq!(one("kubelet_pleg_relist_duration_seconds_count", &[]), 2.0, "failed relists count too");
    assert_eq!(one("kubelet_pleg_relist_interval_seconds_count", &[]), 1.0, "from the relist that answered");
    assert_eq!(one("kubelet_running_pods", &[]), 0.0);
    assert_eq!(one("kubelet_running_containers", &[("container_state", "running")]), 0.0);
    assert_eq!(one("kubelet_pod_start_duration_seconds_count", &[]), 1.0);
    assert_eq!(one("kubelet_pod_start_sli_duration_seconds_count", &[("first_with_network", "true")]), 1.0);
    let sli = samples(&scrape, "kubelet_pod_start_sli_duration_seconds", &[]);
    match &sli.first().expect("SLI histogram").value {
        prometheus_parse::Value::Histogram(buckets) => {
            let bounds: Vec<f64> = buckets.iter().map(|b| b.less_than).filter(|b| b.is_finite()).collect();
            assert_eq!(bounds, POD_START_BUCKETS, "the kubelet's buckets");
        }
        other => panic!("not a histogram: {other:?}"),
    }
    assert_eq!(m.pods_tracked(), 0);

    m.forget_pod(&pod, "uid-1", &["app".to_string()]);
    let scrape = parse(&m.encode());
    assert!(
        samples(&scrape, "prober_probe_total", &[("pod", "web")]).is_empty(),
        "probe series of a gone pod"
    );
    assert!(samples(&scrape, "crilet_container_restarts_total", &[("pod", "web")]).is_empty());
    assert!(samples(&scrape, "prober_probe_duration_seconds_count", &[("pod", "web")]).is_empty());
}
