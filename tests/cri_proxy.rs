//! crilet against a misbehaving runtime, made to misbehave deterministically by the
//! fault-injecting CRI proxy (`common::cri_proxy`) between the agent and the real containerd:
//! failed lists, lost, duplicated, stale and reordered events, a broken event stream, and one
//! pod's calls hanging past their deadline.
//!
//! What must hold throughout: a failed call is never news about a container (nothing running is
//! restarted or recreated because of it), the runtime's unavailability is reported and its
//! return noticed, the relist catches whatever the event stream missed, and one pod's hung call
//! delays neither another pod's sync nor the relist.

mod common;

use std::path::Path;
use std::time::Duration;

use common::cri_proxy::{CriProxy, EventMode, Fault};
use common::*;
use serde_json::Value;
use tonic::Code;

/// A container that runs until the test creates `/signal/<name>`, then removes it and exits 3;
/// its next instance waits again.
fn exits_on_signal(name: &str) -> String {
    format!(
        r#"  - name: {name}
    image: ${{CRILET_IMAGE_BUSYBOX}}
    volumeMounts: [{{name: signal, mountPath: /signal}}]
    command: [sh, -c, 'trap "exit 0" TERM; while [ ! -f /signal/{name} ]; do sleep 0.2; done; rm -f /signal/{name}; exit 3']
"#
    )
}

fn runs(name: &str) -> String {
    format!(
        r#"  - name: {name}
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
"#
    )
}

/// A pod whose containers share the host directory `signal` at /signal.
fn pod(namespace: &str, name: &str, signal: &Path, containers: &[String]) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  terminationGracePeriodSeconds: 2
  volumes:
  - name: signal
    hostPath: {{path: "{}", type: Directory}}
  containers:
{}"#,
        signal.display(),
        containers.concat()
    )
}

fn signal_dir(a: &Agent) -> std::path::PathBuf {
    let dir = a.dir.join("signal");
    std::fs::create_dir_all(&dir).expect("signal dir");
    dir
}

/// Makes the current instance of container `name` exit.
fn signal(dir: &Path, name: &str) {
    std::fs::write(dir.join(name), "").expect("signal file");
}

fn uid(p: &Value) -> String {
    p["metadata"]["uid"].as_str().expect("uid").to_string()
}

/// Waits until container `container` of pod `pod` has restarted `n` times and runs again.
async fn restarted(a: &Agent, pod: &str, container: &str, n: u64, limit: Duration) -> Value {
    wait_for(&format!("{pod}/{container} restarted {n} time(s) and running"), limit, || async {
        let p = a.pod(pod)?;
        (restart_count(&p, container) == Some(n) && running(&p, container)).then_some(p)
    })
    .await
}

/// Waits for `n` more relists through the proxy: a settle period counted in the agent's own
/// work, after which anything the agent was going to do about what it saw has been done.
async fn relists(proxy: &CriProxy, n: usize) {
    let want = proxy.count_unfiltered("ListContainers") + n;
    wait_for(&format!("{n} more relists"), Duration::from_secs(30), || async {
        (proxy.count_unfiltered("ListContainers") >= want).then_some(())
    })
    .await
}

fn evented(env: &Env) -> bool {
    env.get("CRILET_RUNTIME") != "1.6"
}

async fn pleg_mode(a: &Agent, mode: &str) {
    wait_for(&format!("PLEG in {mode} mode"), Duration::from_secs(30), || async {
        a.pleg().filter(|(m, _)| m == mode).map(drop)
    })
    .await
}

const LISTS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: steady, namespace: t-proxy-lists}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
    readinessProbe:
      exec: {command: [sh, -c, 'true']}
      periodSeconds: 1
  - name: second
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
"#;

/// The proxy forwards a whole pod's life; then `ListContainers` fails (Unavailable) for a while:
/// the agent says the runtime is unavailable (get pods, describe, events), keeps retrying,
/// restarts and recreates nothing, and says when it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failing_lists_are_reported_and_restart_nothing() {
    let env = Env::load();
    let proxy = CriProxy::start("proxy-lists", &env.endpoint()).await;
    let a = Agent::start_with_endpoint("proxy-lists", &proxy.endpoint()).await;
    a.write_manifest("steady.yaml", LISTS);
    let p = running_pod(&a, "steady").await;
    for m in ["Version", "Status", "RunPodSandbox", "CreateContainer", "StartContainer", "ListContainers"] {
        assert!(proxy.count(m) > 0, "no {m} call went through the proxy");
    }
    for m in ["PodSandboxStatus", "ContainerStatus", "ExecSync", "ImageStatus"] {
        assert!(proxy.count(m) > 0, "no {m} call went through the proxy");
    }
    let uid = uid(&p);
    let cri = env.cri();
    let before = instances(&cri, &uid).await.expect("observe");
    assert_eq!(before.len(), 2, "{before:?}");
    assert_eq!(a.runtime_warning(), Some(None), "a healthy runtime gets no warning");

    let lists = proxy.count("ListContainers");
    proxy.inject("ListContainers", Fault::error(Code::Unavailable));
    let warning = runtime_reported_unavailable(&a, Duration::from_secs(30)).await;
    assert!(warning.contains("unavailable") && warning.contains("Unavailable"), "{warning}");
    let (ok, describe, _) = a.cli(&["describe", "pod", "steady", "-n", "t-proxy-lists"]);
    assert!(ok, "describe failed");
    let line = describe.lines().find(|l| l.starts_with("Runtime:")).unwrap_or_else(|| panic!("{describe}"));
    assert!(line.contains("Unavailable for") && line.contains("ListContainers"), "{line}");
    let events = a.events_of("t-proxy-lists", "steady");
    assert!(events.lines().any(|l| l.contains("Warning") && l.contains("RuntimeUnavailable")), "{events}");

    // The agent keeps asking; the outage lasts ten more failed lists.
    wait_for("ten more failed lists", Duration::from_secs(60), || async {
        (proxy.count("ListContainers") >= lists + 10).then_some(())
    })
    .await;
    assert!(a.runtime_warning().flatten().is_some(), "still unavailable while the lists fail");
    proxy.clear("ListContainers");
    runtime_reported_available(&a, Duration::from_secs(30)).await;
    let events = a.events_of("t-proxy-lists", "steady");
    assert!(events.lines().any(|l| l.contains("Normal") && l.contains("RuntimeAvailable")), "{events}");
    let (_, describe, _) = a.cli(&["describe", "pod", "steady", "-n", "t-proxy-lists"]);
    assert!(!describe.lines().any(|l| l.starts_with("Runtime:")), "{describe}");

    let p = running_pod(&a, "steady").await;
    assert_eq!(
        instances(&cri, &uid).await,
        Some(before),
        "a container was restarted or recreated\n{}",
        a.log()
    );
    for c in ["main", "second"] {
        assert_eq!(restart_count(&p, c), Some(0), "{c} restarted\n{}", a.log());
    }
}

/// Events that never arrive: dropped on an open stream, then a stream that breaks and cannot be
/// reopened. Either way the relist sees the exit and the container is restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn relist_restarts_what_lost_events_did_not_announce() {
    let env = Env::load();
    let proxy = CriProxy::start("proxy-lost", &env.endpoint()).await;
    let a = Agent::start_with_endpoint("proxy-lost", &proxy.endpoint()).await;
    let dir = signal_dir(&a);
    let containers = [exits_on_signal("dropped"), exits_on_signal("broken")];
    a.write_manifest("lost.yaml", &pod("t-proxy-lost", "lost", &dir, &containers));
    running_pod(&a, "lost").await;
    let evented = evented(&env);
    pleg_mode(&a, if evented { "events" } else { "relist" }).await;

    // 1. The stream stays open but says nothing. The wait is shorter than the pod worker's
    //    one-minute resync, so only the relist can have woken it.
    proxy.set_event_mode(EventMode::Drop);
    signal(&dir, "dropped");
    restarted(&a, "lost", "dropped", 1, Duration::from_secs(30)).await;
    if evented {
        assert!(proxy.event_counts().1 > 0, "containerd sent no event to drop");
        assert_eq!(a.pleg().map(|(m, _)| m).as_deref(), Some("events"), "the stream stayed open");
    }
    proxy.set_event_mode(EventMode::Forward);

    // 2. The stream breaks and every reopen is refused: relist mode.
    proxy.inject("GetContainerEvents", Fault::error(Code::Unavailable));
    proxy.break_event_streams(Code::Unavailable);
    pleg_mode(&a, "relist").await;
    signal(&dir, "broken");
    let p = restarted(&a, "lost", "broken", 1, Duration::from_secs(30)).await;
    assert_eq!(restart_count(&p, "dropped"), Some(1), "{}", a.log());
    proxy.clear("GetContainerEvents");
    if evented {
        pleg_mode(&a, "events").await;
        let log = std::fs::read_to_string(&a.log_file).expect("agent log");
        assert!(log.contains("the CRI event stream broke"), "the break was not noticed\n{}", a.log());
    }
    assert_eq!(a.runtime_warning(), Some(None), "a broken event stream is not an unavailable runtime");
}

/// Every event twice, every old event again, and a stop event delivered after its replacement's
/// create: each costs the agent an observation, never a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn duplicated_stale_and_reordered_events_restart_nothing_more() {
    let env = Env::load();
    if !evented(&env) {
        eprintln!("containerd 1.6 has no CRI event stream: no events to duplicate or reorder (relist only)");
        return;
    }
    let proxy = CriProxy::start("proxy-echo", &env.endpoint()).await;
    let a = Agent::start_with_endpoint("proxy-echo", &proxy.endpoint()).await;
    let dir = signal_dir(&a);
    let containers = [exits_on_signal("dup"), exits_on_signal("rev"), runs("calm")];
    a.write_manifest("echo.yaml", &pod("t-proxy-echo", "echo", &dir, &containers));
    let p = running_pod(&a, "echo").await;
    let uid = uid(&p);
    let cri = env.cri();
    pleg_mode(&a, "events").await;

    // The agent has handled every event the proxy sent it, then relisted a few times.
    let caught_up = || async {
        wait_for("the agent to receive every event sent", Duration::from_secs(30), || async {
            let (_, received) = a.pleg()?;
            (received >= proxy.event_counts().0).then_some(())
        })
        .await;
        relists(&proxy, 3).await;
    };

    // Duplicates while `dup` exits and is restarted.
    proxy.set_event_mode(EventMode::Duplicate);
    signal(&dir, "dup");
    restarted(&a, "echo", "dup", 1, Duration::from_secs(30)).await;
    proxy.set_event_mode(EventMode::Forward);
    caught_up().await;
    let after_dup = instances(&cri, &uid).await.expect("observe");

    // Stale news: everything containerd said so far, twice more.
    let seen = proxy.events_seen();
    assert!(!seen.is_empty(), "containerd sent no events");
    proxy.replay_events(seen.clone());
    proxy.replay_events(seen);
    caught_up().await;
    let p = a.pod("echo").expect("pod");
    assert_eq!(
        (restart_count(&p, "dup"), restart_count(&p, "rev"), restart_count(&p, "calm")),
        (Some(1), Some(0), Some(0)),
        "{}",
        a.log()
    );
    assert_eq!(instances(&cri, &uid).await.as_ref(), Some(&after_dup), "stale events changed the pod");

    // Out of order: events come in pairs, newest first, so `rev`'s stop event arrives after the
    // create of its replacement.
    proxy.set_event_mode(EventMode::Reverse(2));
    signal(&dir, "rev");
    restarted(&a, "echo", "rev", 1, Duration::from_secs(30)).await;
    proxy.set_event_mode(EventMode::Forward);
    caught_up().await;
    let p = a.pod("echo").expect("pod");
    assert_eq!(
        (restart_count(&p, "dup"), restart_count(&p, "rev"), restart_count(&p, "calm")),
        (Some(1), Some(1), Some(0)),
        "{}",
        a.log()
    );
    let now = instances(&cri, &uid).await.expect("observe");
    let running: Vec<(&str, u32)> =
        now.iter().filter(|i| i.3).map(|(name, attempt, _, _)| (name.as_str(), *attempt)).collect();
    assert_eq!(running, [("calm", 0), ("dup", 1), ("rev", 1)], "{now:?}");
    assert!(now.iter().all(|(_, attempt, _, _)| *attempt <= 1), "an extra instance: {now:?}");
}

/// Two pods in one namespace: `stuck` (its `held` container's calls hang; `trigger` exits on
/// signal) and `other` (`crash` exits on signal).
fn two_pods(a: &Agent, namespace: &str) -> std::path::PathBuf {
    let dir = signal_dir(a);
    let stuck = pod(namespace, "stuck", &dir, &[runs("held"), exits_on_signal("trigger")]);
    let other = pod(namespace, "other", &dir, &[exits_on_signal("crash")]);
    a.write_manifest("stuck.yaml", &stuck);
    a.write_manifest("other.yaml", &other);
    dir
}

/// The other pod restarts its container, and the relist goes on, while `hung` still hangs.
async fn other_pod_proceeds_while(a: &Agent, proxy: &CriProxy, dir: &Path, hung: &common::cri_proxy::Call) {
    signal(dir, "crash");
    restarted(a, "other", "crash", 1, Duration::from_secs(40)).await;
    let after = hung.at.elapsed();
    assert!(
        proxy.is_running(hung.seq),
        "the other pod's restart came only after the hung {} call ended ({after:?} after it began)\n{}",
        hung.method,
        a.log()
    );
    relists(proxy, 3).await;
    let relisted = hung.at.elapsed();
    assert!(
        proxy.is_running(hung.seq),
        "3 relists took until the hung {} call ended ({relisted:?} after it began)\n{}",
        hung.method,
        a.log()
    );
    eprintln!(
        "while one {} call hung: the other pod's container restarted {after:?} after it began, 3 relists done \
         by {relisted:?}",
        hung.method
    );
    let p = a.pod("stuck").expect("pod");
    assert_eq!(restart_count(&p, "trigger"), Some(0), "the stuck pod's sync was not stuck");
}

/// `ContainerStatus` of one container hangs past the client's deadline: its pod's sync waits,
/// nothing else does, and the pod catches up once the runtime answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hung_status_call_of_one_pod_delays_no_other_pod() {
    let env = Env::load();
    let proxy = CriProxy::start("proxy-hang-status", &env.endpoint()).await;
    let a = Agent::start_with_endpoint("proxy-hang-status", &proxy.endpoint()).await;
    let dir = two_pods(&a, "t-proxy-hang-status");
    let stuck = running_pod(&a, "stuck").await;
    running_pod(&a, "other").await;
    let held = container_id(&stuck, "held").expect("held's ID");

    proxy.inject("ContainerStatus", Fault::delay(Duration::from_secs(40)).only_for(&held));
    // The exit wakes `stuck`'s worker, whose observation of its pod hangs on `held`.
    signal(&dir, "trigger");
    let hung = wait_for("a hung ContainerStatus call", Duration::from_secs(30), || async {
        proxy.running("ContainerStatus", &held).into_iter().next()
    })
    .await;
    other_pod_proceeds_while(&a, &proxy, &dir, &hung).await;

    proxy.clear("ContainerStatus");
    let p = restarted(&a, "stuck", "trigger", 1, Duration::from_secs(90)).await;
    assert_eq!(container_id(&p, "held").as_deref(), Some(held.as_str()), "held was recreated\n{}", a.log());
    assert_eq!(restart_count(&p, "held"), Some(0), "{}", a.log());
}

/// `CreateContainer` for one pod hangs past the client's deadline: the other pod's restart and
/// the relist go on meanwhile; the stuck pod's start is retried once the call gives up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hung_create_of_one_pod_delays_no_other_pod() {
    let env = Env::load();
    let proxy = CriProxy::start("proxy-hang-create", &env.endpoint()).await;
    let a = Agent::start_with_endpoint("proxy-hang-create", &proxy.endpoint()).await;
    let dir = two_pods(&a, "t-proxy-hang-create");
    let stuck = running_pod(&a, "stuck").await;
    running_pod(&a, "other").await;
    let stuck_uid = uid(&stuck);
    let held = container_id(&stuck, "held").expect("held's ID");

    proxy.inject("CreateContainer", Fault::delay(Duration::from_secs(40)).only_for(&stuck_uid));
    signal(&dir, "trigger");
    let hung = wait_for("a hung CreateContainer call", Duration::from_secs(30), || async {
        proxy.running("CreateContainer", &stuck_uid).into_iter().next()
    })
    .await;
    other_pod_proceeds_while(&a, &proxy, &dir, &hung).await;

    proxy.clear("CreateContainer");
    let p = restarted(&a, "stuck", "trigger", 1, Duration::from_secs(120)).await;
    assert_eq!(container_id(&p, "held").as_deref(), Some(held.as_str()), "held was recreated\n{}", a.log());
    assert_eq!(restart_count(&p, "held"), Some(0), "{}", a.log());
}

/// Errors on one pod's reads, each while its worker syncs (woken by `trigger` exiting): the
/// sync fails and is retried; nothing running is restarted or recreated.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn injected_errors_on_reads_restart_nothing() {
    let cases = [
        ("ContainerStatus", Code::Internal, Target::Held),
        ("ContainerStatus", Code::DeadlineExceeded, Target::Held),
        ("ListContainers", Code::DeadlineExceeded, Target::Uid),
        ("ListPodSandbox", Code::Internal, Target::Uid),
        ("PodSandboxStatus", Code::Unavailable, Target::Sandbox),
    ];
    read_faults("proxy-errors", &cases).await;
}

/// NotFound from a status call about a container or sandbox the list just showed running: the
/// agent must not take it as gone (and start a second copy, or a new sandbox).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn not_found_for_a_running_container_or_sandbox_restarts_nothing() {
    let cases = [
        ("ContainerStatus", Code::NotFound, Target::Held),
        ("PodSandboxStatus", Code::NotFound, Target::Sandbox),
    ];
    read_faults("proxy-not-found", &cases).await;
}

/// What a fault of [`read_faults`] names.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// The `held` container's ID.
    Held,
    /// The pod UID (in list filters).
    Uid,
    /// The sandbox ID.
    Sandbox,
}

/// For each case: three calls of `method` naming the target fail with `code` while the worker
/// of pod `stuck` syncs after container `trigger<case>` exited; then that container is
/// restarted, and `held` and the sandbox are the very same instances, with no second copy.
/// (One trigger per case: each restarts without a crash back-off.)
async fn read_faults(name: &str, cases: &[(&str, Code, Target)]) {
    let env = Env::load();
    let proxy = CriProxy::start(name, &env.endpoint()).await;
    let a = Agent::start_with_endpoint(name, &proxy.endpoint()).await;
    let dir = signal_dir(&a);
    let mut containers = vec![runs("held")];
    containers.extend((0..cases.len()).map(|i| exits_on_signal(&format!("trigger{i}"))));
    a.write_manifest("stuck.yaml", &pod(&format!("t-{name}"), "stuck", &dir, &containers));
    let stuck = running_pod(&a, "stuck").await;
    let stuck_uid = uid(&stuck);
    let held = container_id(&stuck, "held").expect("held's ID");
    let cri = env.cri();
    let sandboxes =
        |o: &crilet::model::ObservedPod| o.sandboxes.iter().map(|s| s.id.clone()).collect::<Vec<_>>();
    let sandbox = sandboxes(&cri.observe(&stuck_uid).await.expect("observe"));
    assert_eq!(sandbox.len(), 1, "{sandbox:?}");
    for (round, (method, code, target)) in cases.iter().enumerate() {
        let id = match target {
            Target::Held => held.clone(),
            Target::Uid => stuck_uid.clone(),
            Target::Sandbox => sandbox[0].clone(),
        };
        let calls = proxy.count(method);
        proxy.inject(method, Fault::error(*code).times(3).only_for(&id));
        let trigger = format!("trigger{round}");
        signal(&dir, &trigger);
        let p = restarted(&a, "stuck", &trigger, 1, Duration::from_secs(60)).await;
        proxy.clear(method);
        assert!(proxy.count(method) >= calls + 3, "{method}: the fault was not hit");
        let what = format!("{method} {code:?} for {target:?}");
        let o = cri.observe(&stuck_uid).await.expect("observe");
        let helds: Vec<_> = o.containers.iter().filter(|c| c.name == "held").map(|c| &c.id).collect();
        assert_eq!(helds, [&held], "{what}: held recreated or doubled\n{}", a.log());
        assert_eq!(sandboxes(&o), sandbox, "{what}: sandbox recreated\n{}", a.log());
        assert_eq!(container_id(&p, "held").as_deref(), Some(held.as_str()), "{what}\n{}", a.log());
        assert_eq!(restart_count(&p, "held"), Some(0), "{what}\n{}", a.log());
    }
}
