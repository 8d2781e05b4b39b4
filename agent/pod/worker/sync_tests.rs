//! Whole syncs of the real worker against the in-memory runtime (`cri::fake`): the planner's
//! answer as the executor carries it out, seen in the calls the runtime got and in the status the
//! worker published. The node's dirs are in a temporary directory; the pod's cgroup is under a
//! UID no cgroup on the machine has, so the write of its values fails harmlessly.

use std::time::Duration;

use k8s_openapi::api::core::v1::ContainerStatus;
use serde_json::{Value, json};

use super::*;
use crate::context::WorkerContext;
use crate::cri::Runtime;
use crate::cri::fake::FakeRuntime;
use crate::ledger::Ledger;
use crate::metrics::Metrics;
use crate::model::{PodKey, PodSource};
use crate::node::NodeConfig;
use crate::registry::Registry;

const UID: &str = "crilet-unit-test-fake-runtime";

/// Pod `default/web` with `spec`.
fn desired(spec: Value) -> DesiredPod {
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "uid": UID},
        "spec": spec,
    });
    DesiredPod {
        key: PodKey::new("default", "web"),
        uid: UID.into(),
        pod: Arc::new(serde_json::from_value(pod).expect("a valid pod")),
        source: PodSource::File("/etc/kubernetes/manifests/web.yaml".into()),
        doc: 0,
        warnings: Vec::new(),
    }
}

fn container(name: &str, image: &str) -> Value {
    json!({"name": name, "image": image})
}

fn sidecar(name: &str, image: &str) -> Value {
    json!({"name": name, "image": image, "restartPolicy": "Always"})
}

/// One pod's worker on the fake runtime, with the node's dirs in a temporary directory.
struct Node {
    fake: Arc<FakeRuntime>,
    worker: Worker,
    cancel: CancellationToken,
    _dir: tempfile::TempDir,
}

async fn node(fake: FakeRuntime, pod: DesiredPod) -> Node {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = NodeConfig {
        root_dir: dir.path().join("root"),
        pod_logs_dir: dir.path().join("logs"),
        container_logs_dir: None,
        node_name: "node1".into(),
        host_ip: None,
        // No host resolver file: the syncs read nothing of the machine's.
        dns: crate::dns::DnsSettings { resolv_conf: None, ..Default::default() },
        cgroup_driver: crate::cgroup::CgroupDriver::Cgroupfs,
        seccomp_default: false,
    };
    let fake = Arc::new(fake);
    let runtime: Arc<dyn Runtime> = fake.clone();
    let ctx = WorkerContext::new(
        runtime,
        config,
        Registry::default(),
        Ledger::default(),
        Arc::new(Metrics::new()),
        None,
    );
    let cancel = CancellationToken::new();
    let worker = Worker::new(ctx, pod, Arc::new(Notify::new()), &cancel).await;
    Node { fake, worker, cancel, _dir: dir }
}

impl Node {
    /// One sync; the calls that changed something in it.
    async fn sync(&mut self) -> Vec<String> {
        self.worker.sync().await.expect("the sync runs");
        self.fake.take_actions()
    }

    /// The published status, one line per container: `name: state restarts`.
    fn statuses(&self) -> Vec<String> {
        let record = self.worker.ctx.registry.pod(&self.worker.desired.key).expect("a published record");
        let status = record.pod.status.expect("a status");
        let line = |c: &ContainerStatus| {
            let state = c.state.clone().unwrap_or_default();
            let now = match (state.running, state.waiting, state.terminated) {
                (Some(_), _, _) => "running".to_string(),
                (_, Some(w), _) => format!("waiting {}", w.reason.unwrap_or_default()),
                (_, _, Some(t)) => format!("terminated {}", t.exit_code),
                _ => "?".to_string(),
            };
            format!("{}: {now}, restarts {}", c.name, c.restart_count)
        };
        let inits = status.init_container_statuses.iter().flatten();
        inits.chain(status.container_statuses.iter().flatten()).map(line).collect()
    }

    fn phase(&self) -> String {
        let record = self.worker.ctx.registry.pod(&self.worker.desired.key).expect("a published record");
        record.pod.status.and_then(|s| s.phase).unwrap_or_default()
    }

    fn condition(&self, type_: &str) -> Option<String> {
        let record = self.worker.ctx.registry.pod(&self.worker.desired.key)?;
        let conditions = record.pod.status?.conditions?;
        conditions.into_iter().find(|c| c.type_ == type_).map(|c| c.status)
    }

    async fn observe(&self) -> ObservedPod {
        self.fake.observe(UID).await.expect("observe")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.cancel.cancel();
        if std::thread::panicking() {
            return;
        }
        // Nothing of the pod reached the machine's cgroups (their parent does not exist).
        let ctx = &self.worker.ctx;
        let parent = crate::pod::spec::cgroup_parent(&ctx.node, &self.worker.desired.pod, UID);
        assert!(ctx.cgroups.read_values_now(&parent).is_err(), "the test pod has a real cgroup");
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// What the world does, then the calls of the next sync and the statuses it published.
type Step = (&'static str, fn(&FakeRuntime), Vec<&'static str>, Vec<&'static str>);

/// A new pod: the sandbox first, the init container alone, then (after it exits 0) the sidecar,
/// and only once it runs the app.
#[tokio::test]
async fn a_new_pod_runs_its_init_then_its_sidecar_then_its_app() {
    let spec = json!({
        "initContainers": [container("init", "busybox:1"), sidecar("side", "envoy:1")],
        "containers": [container("app", "nginx:1")],
    });
    let fake = FakeRuntime::new().with_images(&["busybox:1", "envoy:1"]).pullable(&["nginx:1"]);
    let mut n = node(fake, desired(spec)).await;

    let steps: [Step; 3] = [
        (
            "first sync: the sandbox, then the init container alone",
            |_| {},
            vec!["RunPodSandbox web/0", "CreateContainer init/0", "StartContainer init/0"],
            vec![
                "init: running, restarts 0",
                "side: waiting PodInitializing, restarts 0",
                "app: waiting PodInitializing, restarts 0",
            ],
        ),
        (
            "the init container still runs: nothing starts",
            |_| {},
            vec![],
            vec![
                "init: running, restarts 0",
                "side: waiting PodInitializing, restarts 0",
                "app: waiting PodInitializing, restarts 0",
            ],
        ),
        (
            "the init container exited 0: the sidecar, then (in the same sync, once it runs) the app",
            |f| f.exit("init", 0),
            vec![
                "CreateContainer side/0",
                "StartContainer side/0",
                "PullImage nginx:1",
                "CreateContainer app/0",
                "StartContainer app/0",
            ],
            vec!["init: terminated 0, restarts 0", "side: running, restarts 0", "app: running, restarts 0"],
        ),
    ];
    for (what, world, calls, statuses) in steps {
        world(&n.fake);
        assert_eq!(n.sync().await, strings(&calls), "{what}: calls");
        assert_eq!(n.statuses(), strings(&statuses), "{what}: published statuses");
    }
    assert_eq!(n.phase(), "Running");
    assert_eq!(n.sync().await, Vec::<String>::new(), "steady state: nothing to do");
}

/// An app container that fails under restartPolicy Always: restarted at once the first time,
/// then only after its crash back-off (10 s from its exit), its restart count in the status.
#[tokio::test]
async fn a_failing_app_restarts_after_its_crash_back_off() {
    let spec = json!({"containers": [container("app", "busybox:1")]});
    let mut n = node(FakeRuntime::new().with_images(&["busybox:1"]), desired(spec)).await;
    assert_eq!(
        n.sync().await,
        strings(&["RunPodSandbox web/0", "CreateContainer app/0", "StartContainer app/0"])
    );

    n.fake.exit("app", 1);
    let first = n.sync().await;
    assert_eq!(first, strings(&["CreateContainer app/1", "StartContainer app/1"]), "first exit: at once");
    assert_eq!(n.statuses(), strings(&["app: running, restarts 1"]));

    n.fake.exit("app", 1);
    let requeue = n.worker.sync().await.expect("the sync runs");
    assert_eq!(n.fake.take_actions(), Vec::<String>::new(), "second exit: back-off, no start");
    assert_eq!(n.statuses(), strings(&["app: waiting CrashLoopBackOff, restarts 1"]));
    let exited = n.observe().await.containers.into_iter().find(|c| c.attempt == 1).expect("app/1");
    assert_eq!(requeue, Some(exited.finished_at + 10_000_000_000), "back when the back-off ends");

    n.fake.rewind(Duration::from_secs(9));
    assert_eq!(n.sync().await, Vec::<String>::new(), "9 s after the exit: still backing off");
    n.fake.rewind(Duration::from_secs(2));
    assert_eq!(n.sync().await, strings(&["CreateContainer app/2", "StartContainer app/2"]), "11 s after");
    assert_eq!(n.statuses(), strings(&["app: running, restarts 2"]));
}

/// Terminating a pod with a sidecar: the app gets SIGTERM first, the sidecar only once the app
/// has exited, and every stop fits in what is left of the one grace budget; a sidecar that
/// ignores SIGTERM is SIGKILLed just before the budget ends.
#[tokio::test(start_paused = true)]
async fn termination_stops_the_app_before_its_sidecar_within_one_grace_budget() {
    let spec = json!({
        "terminationGracePeriodSeconds": 30,
        "initContainers": [sidecar("side", "envoy:1")],
        "containers": [container("app", "nginx:1")],
    });
    let mut n = node(FakeRuntime::new().with_images(&["envoy:1", "nginx:1"]), desired(spec)).await;
    n.sync().await;
    assert_eq!(n.statuses(), strings(&["side: running, restarts 0", "app: running, restarts 0"]));
    // The app drains for 5 s; the sidecar ignores SIGTERM.
    n.fake.on_sigterm("app", Duration::from_secs(5), 0);
    n.fake.on_sigterm("side", Duration::from_secs(3600), 0);

    let began = tokio::time::Instant::now();
    let (_tx, mut desire) =
        watch::channel(Desire::Terminate { remove: false, grace: None, node_shutdown: false });
    let cancel = n.cancel.clone();
    assert!(n.worker.terminate(false, None, &mut desire, &cancel).await, "the pod stopped");

    let stops: Vec<(String, Duration, Duration)> = n
        .fake
        .calls()
        .into_iter()
        .filter(|c| c.op == "StopContainer" || c.op == "StopPodSandbox")
        .map(|c| (c.text(), c.timeout.unwrap_or_default(), c.at - began))
        .collect();
    let s = Duration::from_secs;
    let texts: Vec<&str> = stops.iter().map(|(t, _, _)| t.as_str()).collect();
    assert_eq!(
        texts,
        ["StopContainer app/0", "StopContainer side/0", "StopContainer side/0", "StopPodSandbox web/0"],
        "the app, then the sidecar (SIGTERM, then SIGKILL), then the sandbox"
    );
    let (app, side, kill) = (&stops[0], &stops[1], &stops[2]);
    assert_eq!((app.1, app.2), (s(30), s(0)), "the app: the whole budget, at once");
    assert_eq!((side.1, side.2), (s(25), s(5)), "the sidecar: when the app exited, with what is left");
    assert_eq!(kill.1, s(0), "then SIGKILL");
    assert!(kill.2 < s(30) && kill.2 >= s(29), "just before the budget ends: {:?}", kill.2);
    for (what, timeout, at) in &stops {
        assert!(*at + *timeout <= s(30), "{what} at {at:?} with {timeout:?} outlives the budget");
    }
    assert_eq!(n.statuses(), strings(&["side: terminated 137, restarts 0", "app: terminated 0, restarts 0"]));
}

/// A sandbox that dies takes the pod with it: a new sandbox (the next attempt), the old init
/// instance removed and the init container run again before the app restarts.
#[tokio::test]
async fn a_lost_sandbox_is_recreated_and_the_init_sequence_runs_again() {
    let spec = json!({
        "initContainers": [container("init", "busybox:1")],
        "containers": [container("app", "nginx:1")],
    });
    let mut n = node(FakeRuntime::new().with_images(&["busybox:1", "nginx:1"]), desired(spec)).await;
    n.sync().await;
    n.fake.exit("init", 0);
    n.sync().await;
    assert_eq!(n.statuses(), strings(&["init: terminated 0, restarts 0", "app: running, restarts 0"]));

    n.fake.lose_sandbox(UID);
    assert_eq!(
        n.sync().await,
        strings(&[
            "StopPodSandbox web/0",
            "RemoveContainer init/0",
            "RunPodSandbox web/1",
            "CreateContainer init/1",
            "StartContainer init/1"
        ]),
        "nothing runs any more, but the dead sandbox is stopped (its network released) before \
         it is replaced; the init instance goes, a new sandbox, the init again"
    );
    assert_eq!(n.fake.unstopped_sandboxes(UID), strings(&["web/1"]), "only the new sandbox is up");
    assert_eq!(n.statuses(), strings(&["init: running, restarts 1", "app: terminated 137, restarts 0"]));
    assert_eq!(n.sync().await, Vec::<String>::new(), "the app waits for the init container");

    // The init container runs a while: the app's SIGKILL is older than the settle hold (within
    // 300 ms of it, its restart would wait to see whether the sandbox goes too).
    n.fake.exit("init", 0);
    n.fake.rewind(Duration::from_secs(1));
    assert_eq!(n.sync().await, strings(&["CreateContainer app/1", "StartContainer app/1"]));
    let observed = n.observe().await;
    let app = observed.newest("app").expect("app");
    assert_eq!(app.sandbox_id, observed.sandboxes[0].id, "the app runs in the new sandbox");
    assert_eq!(observed.sandboxes[0].attempt, 1);
    assert_eq!(n.statuses(), strings(&["init: terminated 0, restarts 1", "app: running, restarts 1"]));
}

/// An image-only edit of a running pod updates it in place: the new image is pulled first, then
/// only that container is stopped and started again, in the same sandbox; the sidecar is left
/// alone, and `InPlaceUpdateReady` comes back once it runs the new image.
#[tokio::test]
async fn an_image_edit_restarts_only_that_container_in_place() {
    let spec = |image: &str| {
        json!({
            "initContainers": [sidecar("side", "envoy:1")],
            "containers": [container("app", image), container("other", "busybox:1")],
        })
    };
    let fake = FakeRuntime::new().with_images(&["envoy:1", "nginx:1", "busybox:1"]).pullable(&["nginx:2"]);
    let mut n = node(fake, desired(spec("nginx:1"))).await;
    n.sync().await;
    let before = n.observe().await;

    n.worker.desired = desired(spec("nginx:2"));
    assert_eq!(
        n.sync().await,
        strings(&[
            "PullImage nginx:2",
            "StopContainer app/0",
            "CreateContainer app/1",
            "StartContainer app/1"
        ]),
        "the image pulled before the old container stops; nothing else touched"
    );
    let after = n.observe().await;
    assert_eq!(after.sandboxes, before.sandboxes, "same sandbox, same IP");
    for name in ["side", "other"] {
        assert_eq!(after.newest(name), before.newest(name), "{name} untouched");
    }
    let app = after.newest("app").expect("app");
    assert_eq!((app.image.as_str(), app.state), ("nginx:2", ContainerState::Running));
    assert_eq!(
        n.statuses(),
        strings(&["side: running, restarts 0", "app: running, restarts 1", "other: running, restarts 0"])
    );
    assert_eq!(n.sync().await, Vec::<String>::new(), "done: nothing more to do");
    assert_eq!(n.condition("InPlaceUpdateReady").as_deref(), Some("True"));
}

/// A restartPolicy Never pod whose sandbox dies after its container ran is not started again,
/// but the dead sandbox is stopped (upstream's `killPodWithSyncResult` stops every sandbox of the
/// pod, ready or not: only `StopPodSandbox` releases a dead sandbox's network), once.
#[tokio::test]
async fn a_lost_sandbox_of_a_pod_that_does_not_restart_is_stopped_once() {
    let spec = json!({"restartPolicy": "Never", "containers": [container("app", "busybox:1")]});
    let mut n = node(FakeRuntime::new().with_images(&["busybox:1"]), desired(spec)).await;
    n.sync().await;
    assert_eq!(n.fake.unstopped_sandboxes(UID), strings(&["web/0"]));

    n.fake.lose_sandbox(UID);
    assert_eq!(n.sync().await, strings(&["StopPodSandbox web/0"]), "the dead sandbox is stopped");
    assert_eq!(n.fake.unstopped_sandboxes(UID), Vec::<String>::new());
    assert_eq!(n.statuses(), strings(&["app: terminated 137, restarts 0"]));
    assert_eq!(n.phase(), "Failed");
    assert_eq!(n.sync().await, Vec::<String>::new(), "stopped already: not again, and no new sandbox");
}

/// A StartContainer that fails: the status shows why (RunContainerError), the sync asks to come
/// back after the kubelet's sync back-off (10 s), and the retry starts a new instance, which runs.
#[tokio::test]
async fn a_failed_start_is_retried_after_the_sync_back_off() {
    let spec = json!({"containers": [container("app", "busybox:1")]});
    let mut n = node(FakeRuntime::new().with_images(&["busybox:1"]), desired(spec)).await;
    n.fake.fail_next("StartContainer", 1);
    let before = now_ns();
    let requeue = n.worker.sync().await.expect("the sync runs");
    let after = now_ns();
    assert_eq!(
        n.fake.take_actions(),
        strings(&["RunPodSandbox web/0", "CreateContainer app/0", "StartContainer app/0"])
    );
    assert_eq!(n.statuses(), strings(&["app: waiting RunContainerError, restarts 0"]));
    assert_eq!(n.phase(), "Pending");
    let back = requeue.expect("a time to come back");
    let s10 = 10_000_000_000;
    assert!((before + s10..=after + s10).contains(&back), "back after 10 s: {}", back - before);

    assert_eq!(n.sync().await, strings(&["CreateContainer app/1", "StartContainer app/1"]), "the retry");
    // As upstream: the new instance counts the one that never started.
    assert_eq!(n.statuses(), strings(&["app: running, restarts 1"]));
    assert_eq!(n.phase(), "Running");
    assert_eq!(n.sync().await, Vec::<String>::new(), "steady state");
    // The instance that never started stays, as upstream's GC keeps one dead instance per
    // container.
    let left: Vec<(u32, ContainerState)> =
        n.observe().await.containers.iter().map(|c| (c.attempt, c.state)).collect();
    assert_eq!(left, [(1, ContainerState::Running), (0, ContainerState::Created)]);
}

/// Starts that keep failing leave instances that were created and never started: once the pod
/// runs, the GC removes all but the newest of them (R12.5: one dead instance per container),
/// never the running one, and the log of the one removed.
#[tokio::test]
async fn instances_that_never_started_are_collected() {
    let spec = json!({"containers": [container("app", "busybox:1")]});
    let mut n = node(FakeRuntime::new().with_images(&["busybox:1"]), desired(spec)).await;
    n.fake.fail_next("StartContainer", 2);
    let first = strings(&["RunPodSandbox web/0", "CreateContainer app/0", "StartContainer app/0"]);
    assert_eq!(n.sync().await, first);
    assert_eq!(n.sync().await, strings(&["CreateContainer app/1", "StartContainer app/1"]));
    assert_eq!(n.sync().await, strings(&["CreateContainer app/2", "StartContainer app/2"]));
    assert_eq!(n.statuses(), strings(&["app: running, restarts 2"]));
    let oldest =
        n.observe().await.containers.iter().find(|c| c.attempt == 0).expect("app/0").log_path.clone();
    std::fs::write(&oldest, "").expect("a log of the instance that never started");
    assert_eq!(n.sync().await, strings(&["RemoveContainer app/0"]), "the oldest dead instance goes");
    assert!(!std::path::Path::new(&oldest).exists(), "with its log");
    assert_eq!(n.sync().await, Vec::<String>::new(), "steady state");
    let left: Vec<(u32, ContainerState)> =
        n.observe().await.containers.iter().map(|c| (c.attempt, c.state)).collect();
    assert_eq!(left, [(2, ContainerState::Running), (1, ContainerState::Created)]);
}

/// A RunPodSandbox that fails: nothing else is tried, the sync comes back after the kubelet's
/// sync back-off (10 s), and the retry makes the sandbox (the same attempt) and starts the pod.
#[tokio::test]
async fn a_failed_sandbox_is_retried_and_the_pod_starts() {
    let spec = json!({"containers": [container("app", "busybox:1")]});
    let mut n = node(FakeRuntime::new().with_images(&["busybox:1"]), desired(spec)).await;
    n.fake.fail_next("RunPodSandbox", 1);
    let before = now_ns();
    let requeue = n.worker.sync().await.expect("the sync runs");
    let after = now_ns();
    assert_eq!(n.fake.take_actions(), strings(&["RunPodSandbox web/0"]));
    assert_eq!(n.fake.unstopped_sandboxes(UID), Vec::<String>::new(), "no sandbox was made");
    assert_eq!(n.statuses(), strings(&["app: waiting ContainerCreating, restarts 0"]));
    assert_eq!(n.phase(), "Pending");
    let back = requeue.expect("a time to come back");
    let s10 = 10_000_000_000;
    assert!((before + s10..=after + s10).contains(&back), "back after 10 s: {}", back - before);

    assert_eq!(
        n.sync().await,
        strings(&["RunPodSandbox web/0", "CreateContainer app/0", "StartContainer app/0"]),
        "the retry: the same attempt, then the app"
    );
    assert_eq!(n.statuses(), strings(&["app: running, restarts 0"]));
    assert_eq!(n.phase(), "Running");
}

/// A StopContainer that fails while the pod is deleted: the sandbox is still stopped (which
/// kills what runs in it, as upstream's kill goes on to `StopPodSandbox`), the kill reports the
/// failure and the caller retries it within the same deadline; the retry finds nothing running
/// and the pod ends well within its grace period.
#[tokio::test(start_paused = true)]
async fn a_failed_stop_during_termination_still_ends_the_pod_within_its_grace() {
    let spec = json!({"terminationGracePeriodSeconds": 30, "containers": [container("app", "nginx:1")]});
    let mut n = node(FakeRuntime::new().with_images(&["nginx:1"]), desired(spec)).await;
    n.sync().await;
    n.fake.fail_next("StopContainer", 1);
    n.fake.on_sigterm("app", Duration::from_secs(5), 0);

    let began = tokio::time::Instant::now();
    let (_tx, mut desire) =
        watch::channel(Desire::Terminate { remove: false, grace: None, node_shutdown: false });
    let cancel = n.cancel.clone();
    assert!(!n.worker.terminate(false, None, &mut desire, &cancel).await, "the failed stop is reported");
    assert_eq!(n.fake.take_actions(), strings(&["StopContainer app/0", "StopPodSandbox web/0"]));
    let warned = n.worker.ctx.registry.events(Some(&n.worker.desired.key));
    assert!(warned.iter().any(|e| e.reason == "FailedKillContainer"), "{warned:?}");

    assert!(n.worker.terminate(false, None, &mut desire, &cancel).await, "the retry ends the pod");
    assert_eq!(n.fake.take_actions(), strings(&["StopPodSandbox web/0"]), "nothing runs: the sandbox again");
    assert!(began.elapsed() < Duration::from_secs(30), "within the grace: {:?}", began.elapsed());
    assert_eq!(n.statuses(), strings(&["app: terminated 137, restarts 0"]));
    assert_eq!(n.fake.unstopped_sandboxes(UID), Vec::<String>::new());
}

/// Node-pressure eviction: the running pod is stopped within the eviction's grace, published
/// Failed/Evicted with the message and a DisruptionTarget condition, and never started again;
/// a worker made again from what it saved (an agent restart) keeps it stopped.
#[tokio::test]
async fn an_evicted_pod_stops_fails_and_stays_stopped() {
    let spec = json!({"containers": [container("app", "busybox:1")]});
    let mut n = node(FakeRuntime::new().with_images(&["busybox:1"]), desired(spec.clone())).await;
    n.sync().await;
    assert_eq!(n.statuses(), strings(&["app: running, restarts 0"]));

    let message = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 10Mi. ";
    n.worker.evicted(&Eviction { grace: Duration::from_secs(1), message: message.into() });
    let calls = n.sync().await;
    assert!(calls.iter().any(|c| c.starts_with("StopContainer")), "the app is stopped: {calls:?}");
    n.worker.observe_and_publish(false).await;
    assert_eq!(n.phase(), "Failed");
    let record = n.worker.ctx.registry.pod(&n.worker.desired.key).expect("a record");
    let status = record.pod.status.expect("a status");
    assert_eq!((status.reason.as_deref(), status.message.as_deref()), (Some("Evicted"), Some(message)));
    assert_eq!(n.condition("DisruptionTarget").as_deref(), Some("True"));
    let again = n.sync().await;
    assert!(
        !again.iter().any(|c| c.starts_with("StartContainer") || c.starts_with("RunPodSandbox")),
        "{again:?}"
    );

    // The agent restarts: a new worker for the same pod reads the saved Evicted status.
    let ctx = n.worker.ctx.clone();
    let cancel = CancellationToken::new();
    let mut fresh = Worker::new(ctx, desired(spec), Arc::new(Notify::new()), &cancel).await;
    fresh.sync().await.expect("the sync runs");
    let calls = n.fake.take_actions();
    assert!(
        !calls.iter().any(|c| c.starts_with("StartContainer") || c.starts_with("RunPodSandbox")),
        "{calls:?}"
    );
    cancel.cancel();
}
