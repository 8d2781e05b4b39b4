//! containerd restarted under a running agent. In its own test binary: restarting the shared
//! containerd must not race the other tests (cargo runs test binaries one after another).

mod common;

use std::time::Duration;

use common::*;
use crilet::model::ContainerState;

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: steady, namespace: t-ctrd}
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: main
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
  - name: second
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
"#;

/// The tests here restart the one shared containerd: one at a time.
static RUNTIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread")]
async fn containerd_restart_under_a_running_agent() {
    let _one_at_a_time = RUNTIME.lock().await;
    let a = Agent::start("ctrd-restart").await;
    a.write_manifest("steady.yaml", POD);
    let p = running_pod(&a, "steady").await;
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let cri = a.env.cri();
    let before = cri.observe(&uid).await.expect("observe");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/hack/containerd.sh");
    let out = std::process::Command::new("bash").args([script, "restart"]).output().expect("containerd.sh");
    assert!(out.status.success(), "containerd restart: {}", String::from_utf8_lossy(&out.stderr));
    let after = wait_for("containerd back with the pod", Duration::from_secs(60), || async {
        cri.observe(&uid).await.ok().filter(|o| !o.containers.is_empty())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after2 = cri.observe(&uid).await.expect("observe");
    assert_eq!(before.sandboxes[0].id, after2.sandboxes[0].id, "sandbox kept");
    let mut b: Vec<String> = before.containers.iter().map(|c| c.id.clone()).collect();
    let mut c: Vec<String> = after2.containers.iter().map(|c| c.id.clone()).collect();
    b.sort();
    c.sort();
    assert_eq!(b, c, "no container recreated\n{}", a.log());
    assert!(after.containers.iter().all(|c| c.state == ContainerState::Running));
    running_pod(&a, "steady").await;
}

/// "events" or "relist", as `crilet version` reports the agent's mode.
fn pleg_mode(a: &Agent) -> Option<String> {
    let (ok, out, _) = a.cli(&["version"]);
    let line = out.lines().find(|l| l.starts_with("Runtime Changes:")).filter(|_| ok)?;
    line.split_whitespace().nth(2).map(str::to_string)
}

fn containerd(action: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/hack/containerd.sh");
    let out = std::process::Command::new("bash").args([script, action]).output().expect("containerd.sh");
    assert!(out.status.success(), "containerd {action}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The kubelet's evented PLEG gives the stream up after 5 failed attempts (about 5 s); crilet
/// must follow it again after any outage. On a runtime without a stream (1.6) the agent says
/// so once and relists.
#[tokio::test(flavor = "multi_thread")]
async fn event_stream_is_followed_again_after_a_long_runtime_outage() {
    let _one_at_a_time = RUNTIME.lock().await;
    let a = Agent::start("events-outage").await;
    let (yaml, dir) = exit_on_signal_pod(&a, "evented", "t-ctrd");
    a.write_manifest("evented.yaml", &yaml);
    let p = running_pod(&a, "evented").await;
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let first = container_id(&p, "main").expect("first instance");
    let evented = a.env.get("CRILET_RUNTIME") != "1.6";
    let want_mode = if evented { "events" } else { "relist" };
    wait_for(&format!("{want_mode} mode"), Duration::from_secs(30), || async {
        (pleg_mode(&a).as_deref() == Some(want_mode)).then_some(())
    })
    .await;

    // An outage longer than the kubelet's give-up time.
    containerd("stop");
    tokio::time::sleep(Duration::from_secs(8)).await;
    containerd("start");
    wait_for(&format!("{want_mode} mode after the outage"), Duration::from_secs(30), || async {
        (pleg_mode(&a).as_deref() == Some(want_mode)).then_some(())
    })
    .await;

    std::fs::write(dir.join("exit"), "").expect("signal");
    let cri = a.env.cri();
    let (old, new) = wait_for("the replacement instance running", Duration::from_secs(30), || async {
        let o = cri.observe(&uid).await.ok()?;
        let new = o.containers.iter().find(|c| c.attempt == 1 && c.state == ContainerState::Running)?;
        let old = o.containers.iter().find(|c| c.id == first)?;
        Some((old.clone(), new.clone()))
    })
    .await;
    let gap_ms = (new.started_at - old.finished_at) / 1_000_000;
    eprintln!("exit -> replacement started after the outage: {gap_ms} ms ({want_mode} mode)");
    let log = std::fs::read_to_string(&a.log_file).expect("agent log");
    if evented {
        assert!(log.contains("the CRI event stream broke"), "the break was not logged\n{}", a.log());
        let seen = log
            .lines()
            .any(|l| l.contains("CRI event") && l.contains(&first) && l.contains("CONTAINER_STOPPED_EVENT"));
        assert!(seen, "the exit of {first} did not come through the event stream\n{}", a.log());
    } else {
        assert_eq!(log.matches("the runtime has no CRI event stream").count(), 1, "said once\n{}", a.log());
    }
}
