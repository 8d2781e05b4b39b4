//! containerd failing under a running agent, as the upstream node e2e does it: restarted six
//! times in a row (stopped and started, SIGKILLed and started) with a pod of three containers
//! running, and made slower than the agent's deadlines through the CRI proxy. Each time the agent
//! must say the runtime is unavailable (get pods, describe, events; `crilet preflight` fails),
//! keep retrying, and come back to the same pod: every container ID the same, no restart.
//!
//! In its own test binary, one test at a time: the restarts hit the one shared containerd. Works
//! on both runtimes (`CRILET_RUNTIME` 2.1 or 1.6 in the environment).

mod common;

use std::path::Path;
use std::time::Duration;

use common::cri_proxy::{CriProxy, Fault, METHODS};
use common::*;
use serde_json::Value;

/// A native sidecar and two app containers, with exec probes (a liveness probe that restarts at
/// the first failure: a failed CRI call must not count as one), and a readiness gate the test
/// sets during each outage, which wakes the pod worker into a sync that cannot reach the runtime.
const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: steady, namespace: ${NAMESPACE}}
spec:
  terminationGracePeriodSeconds: 5
  readinessGates: [{conditionType: example.com/gate}]
  initContainers:
  - name: side
    image: ${CRILET_IMAGE_BUSYBOX}
    restartPolicy: Always
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
  containers:
  - name: main
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
    livenessProbe:
      exec: {command: [sh, -c, 'true']}
      periodSeconds: 1
      failureThreshold: 1
  - name: second
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
    readinessProbe:
      exec: {command: [sh, -c, 'true']}
      periodSeconds: 1
"#;

const CONTAINERS: [&str; 3] = ["side", "main", "second"];

/// The tests here restart or slow down the one shared containerd: one at a time.
static RUNTIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn containerd(action: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/hack/containerd.sh");
    let out = std::process::Command::new("bash").args([script, action]).output().expect("containerd.sh");
    assert!(out.status.success(), "containerd {action}: {}", String::from_utf8_lossy(&out.stderr));
}

/// SIGKILLs the dev containerd (only the pid in its pid file, after checking it is that
/// containerd) and waits until it is gone. Its shims, and so the containers, live on.
fn sigkill_containerd(env: &Env) {
    let pidfile = Path::new(&env.get("CRILET_RUN")).join("containerd.pid");
    let text = std::fs::read_to_string(&pidfile).unwrap_or_else(|e| panic!("{}: {e}", pidfile.display()));
    let pid: i32 = text.trim().parse().unwrap_or_else(|e| panic!("{}: {text:?}: {e}", pidfile.display()));
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let config = env.get("CRILET_CONTAINERD_CONFIG");
    assert!(
        String::from_utf8_lossy(&cmdline).contains(&config),
        "pid {pid} from {} is not the dev containerd",
        pidfile.display()
    );
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL)
        .expect("SIGKILL containerd");
    let start = std::time::Instant::now();
    // Gone, or a zombie nobody has reaped yet: either way it serves nothing.
    while std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
    {
        assert!(start.elapsed() < Duration::from_secs(10), "containerd {pid} survived SIGKILL");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `crilet preflight` with the agent's settings: (exit code, stdout).
fn preflight(a: &Agent) -> (Option<i32>, String) {
    let out = std::process::Command::new(bin())
        .args(["preflight", "--container-runtime-endpoint", &a.env.endpoint()])
        .arg("--pod-manifest-path")
        .arg(&a.manifests)
        .arg("--root-dir")
        .arg(&a.root)
        .arg("--pod-logs-dir")
        .arg(&a.logs)
        .arg("--container-logs-dir")
        .arg(a.dir.join("containers"))
        .arg("--control-socket")
        .arg(a.dir.join("preflight.sock"))
        .output()
        .expect("run crilet preflight");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Sets the pod's readiness gate: the agent wakes the pod's worker, which syncs.
fn poke(a: &Agent, namespace: &str, reason: &str) {
    let (ok, _, err) =
        a.cli(&["set-condition", "steady", "example.com/gate", "True", "-n", namespace, "--reason", reason]);
    assert!(ok, "set-condition: {err}");
}

/// Writes the pod and waits until it runs, ready (its gate set).
async fn start_pod(a: &Agent, namespace: &str) -> Value {
    a.write_manifest("steady.yaml", &POD.replace("${NAMESPACE}", namespace));
    wait_for("the pod known to the agent", Duration::from_secs(60), || async { a.pod("steady") }).await;
    poke(a, namespace, "Start");
    running_pod(a, "steady").await
}

fn uid(p: &Value) -> String {
    p["metadata"]["uid"].as_str().expect("uid").to_string()
}

/// The pod is back: Running and Ready, every container the same instance as `before`, running,
/// and never restarted.
async fn same_pod(a: &Agent, uid: &str, before: &[(String, u32, String, bool)], what: &str) {
    let p = running_pod(a, "steady").await;
    let cri = Env::load().cri();
    let now = wait_for("containerd to show every container running", Duration::from_secs(30), || async {
        instances(&cri, uid).await.filter(|v| v.iter().all(|i| i.3))
    })
    .await;
    assert_eq!(now, before, "{what}: a container was lost, restarted or recreated\n{}", a.log());
    for c in CONTAINERS {
        assert_eq!(restart_count(&p, c), Some(0), "{what}: {c} restarted\n{}", a.log());
    }
}

/// The node e2e's "restart the runtime repeatedly, no container dies": 6 restarts in a row,
/// alternately a clean stop and a SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn six_runtime_restarts_in_a_row_lose_no_container() {
    let _one_at_a_time = RUNTIME.lock().await;
    let a = Agent::start("faults-restarts").await;
    let p = start_pod(&a, "t-faults").await;
    let uid = uid(&p);
    let cri = a.env.cri();
    let before = instances(&cri, &uid).await.expect("observe");
    assert_eq!(before.len(), 3, "{before:?}");
    let sandbox = cri.observe(&uid).await.expect("observe").sandboxes[0].id.clone();

    for round in 1..=6 {
        let how = if round % 2 == 1 { "stopped" } else { "SIGKILLed" };
        if round % 2 == 1 {
            containerd("stop");
        } else {
            sigkill_containerd(&a.env);
        }
        let warning = runtime_reported_unavailable(&a, Duration::from_secs(30)).await;
        poke(&a, "t-faults", &format!("Outage{round}"));
        if round <= 2 {
            let (ok, describe, _) = a.cli(&["describe", "pod", "steady", "-n", "t-faults"]);
            assert!(ok, "describe failed while the runtime is down");
            assert!(
                describe.lines().any(|l| l.starts_with("Runtime:") && l.contains("Unavailable for")),
                "{describe}"
            );
            // Stopped: no socket; SIGKILLed: a socket nobody answers on.
            let (code, out) = preflight(&a);
            assert_eq!(code, Some(1), "preflight passed with containerd {how}\n{out}");
            let endpoint = out.lines().find(|l| l.contains("cri-endpoint")).unwrap_or_default();
            assert!(endpoint.starts_with("FAIL"), "{out}");
            eprintln!("with containerd {how}, preflight says: {endpoint}");
        }
        containerd("start");
        runtime_reported_available(&a, Duration::from_secs(60)).await;
        same_pod(&a, &uid, &before, &format!("round {round} (containerd {how})")).await;
        eprintln!("round {round}: containerd {how}, reported as \"{warning}\"; back with every container");
    }

    let o = cri.observe(&uid).await.expect("observe");
    assert_eq!(
        o.sandboxes.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
        [sandbox.as_str()],
        "sandbox kept"
    );
    let events = a.events_of("t-faults", "steady");
    let count = |reason: &str| events.lines().filter(|l| l.split_whitespace().any(|w| w == reason)).count();
    assert_eq!((count("RuntimeUnavailable"), count("RuntimeAvailable")), (6, 6), "{events}");
    for reason in ["Killing", "BackOff", "SandboxChanged"] {
        assert_eq!(count(reason), 0, "{events}");
    }
}

/// Every CRI call takes 40 s, past the client's 30 s deadline: the agent says the runtime is
/// unavailable (first because its relist does not answer, then with the deadline error), and
/// nothing is restarted when the runtime is quick again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runtime_slower_than_its_deadlines_restarts_nothing() {
    let _one_at_a_time = RUNTIME.lock().await;
    let env = Env::load();
    let proxy = CriProxy::start("faults-slow", &env.endpoint()).await;
    let a = Agent::start_with_endpoint("faults-slow", &proxy.endpoint()).await;
    let p = start_pod(&a, "t-faults-slow").await;
    let uid = uid(&p);
    let before = instances(&env.cri(), &uid).await.expect("observe");

    // The event stream is left alone: a slow runtime's stream is just quiet.
    for m in METHODS.into_iter().filter(|m| *m != "GetContainerEvents") {
        proxy.inject(m, Fault::delay(Duration::from_secs(40)));
    }
    poke(&a, "t-faults-slow", "Slow");
    let slow = runtime_reported_unavailable(&a, Duration::from_secs(30)).await;
    assert!(slow.contains("has not answered"), "{slow}");
    let deadline = wait_for("the deadline to run out", Duration::from_secs(60), || async {
        a.runtime_warning().flatten().filter(|w| w.contains("did not answer within 30s"))
    })
    .await;
    eprintln!("slow runtime reported as \"{slow}\", then \"{deadline}\"");
    let events = a.events_of("t-faults-slow", "steady");
    assert!(events.contains("RuntimeUnavailable"), "{events}");

    proxy.clear_all();
    runtime_reported_available(&a, Duration::from_secs(60)).await;
    same_pod(&a, &uid, &before, "after a slow runtime").await;
}
