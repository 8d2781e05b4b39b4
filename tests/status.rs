//! Status is never older than the agent's own actions, and what it carries forward (restart
//! count, lastState) survives container GC and agent restarts. Runs on every runtime leg.

mod common;

use std::time::Duration;

use common::*;
use crilet::model::ContainerState;
use serde_json::Value;

/// The new instance (attempt 1) of `name` in the pod, once the runtime runs it.
async fn running_attempt(a: &Agent, uid: &str, name: &str, attempt: u32) -> String {
    let cri = a.env.cri();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(o) = cri.observe(uid).await {
            if let Some(c) = o
                .containers
                .iter()
                .find(|c| c.name == name && c.attempt == attempt && c.state == ContainerState::Running)
            {
                return c.id.clone();
            }
        }
        assert!(std::time::Instant::now() < deadline, "attempt {attempt} of {name} never ran\n{}", a.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn status_shows_a_restart_as_soon_as_the_runtime_does() {
    let a = Agent::start("status-fresh").await;
    let (yaml, dir) = exit_on_signal_pod(&a, "fresh", "t-status");
    a.write_manifest("fresh.yaml", &yaml);
    let p = running_pod(&a, "fresh").await;
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let first = container_id(&p, "main").expect("first instance");
    std::fs::write(dir.join("exit"), "").expect("signal");
    let second = running_attempt(&a, &uid, "main", 1).await;
    // The runtime shows the new instance a moment before the agent's StartContainer call has
    // returned and its status is published (one ContainerStatus later). Wait for that moment
    // only, half a relist period: a status that waited for the relist's wake to catch up (up to
    // 1 s later in relist mode) would mostly miss it.
    let deadline = std::time::Instant::now() + Duration::from_millis(500);
    let p = loop {
        let p = a.pod("fresh").expect("pod listed");
        if container_id(&p, "main").as_deref() == Some(second.as_str())
            || std::time::Instant::now() >= deadline
        {
            break p;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let st = cstatus(&p, "main").expect("status of main");
    assert_eq!(st["restartCount"], 1, "restartCount: {st}");
    assert_eq!(container_id(&p, "main").as_deref(), Some(second.as_str()), "the new instance: {st}");
    assert!(st["state"]["running"].is_object(), "running: {st}");
    let last = &st["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 3, "lastState: {st}");
    assert_eq!(
        last["containerID"],
        format!("containerd://{first}"),
        "lastState names the old instance: {st}"
    );
    // And the previous instance's log is there.
    let (ok, out, err) = a.cli(&["logs", "fresh", "-n", "t-status", "-c", "main", "--previous"]);
    assert!(ok, "logs --previous: {err}");
    assert_eq!(out.trim(), "first");
}

/// Fails once (exit 1), then succeeds (exit 0): Succeeded with restartCount 1 and lastState.
const ONCE: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: once, namespace: t-status}
spec:
  restartPolicy: OnFailure
  terminationGracePeriodSeconds: 2
  volumes:
  - name: data
    emptyDir: {}
  containers:
  - name: job
    image: ${CRILET_IMAGE_BUSYBOX}
    volumeMounts: [{name: data, mountPath: /data}]
    command: [sh, -c, 'if [ -f /data/tried ]; then exit 0; fi; touch /data/tried; exit 1']
"#;

fn last_exit(p: &Value, name: &str) -> Option<i64> {
    cstatus(p, name)?["lastState"]["terminated"]["exitCode"].as_i64()
}

#[tokio::test(flavor = "multi_thread")]
async fn last_state_outlives_container_gc_and_agent_restarts() {
    let mut a = Agent::start("status-once").await;
    a.write_manifest("once.yaml", ONCE);
    let p = wait_for("pod once Succeeded", Duration::from_secs(90), || async {
        a.pod("once").filter(|p| phase(p) == "Succeeded")
    })
    .await;
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let st = cstatus(&p, "job").expect("status").clone();
    assert_eq!(st["restartCount"], 1, "{st}");
    assert_eq!(st["state"]["terminated"]["exitCode"], 0, "{st}");
    assert_eq!(last_exit(&p, "job"), Some(1), "lastState after success: {st}");
    // Container GC (the agent's, or the runtime's) removes the failed instance that lastState
    // describes; a restarted agent then has only the runtime (one instance) and what it saved.
    a.kill();
    let cri = a.env.cri();
    let o = cri.observe(&uid).await.expect("observe");
    let failed = o.containers.iter().find(|c| c.exit_code == 1).expect("the failed instance");
    cri.remove_container(&failed.id).await.expect("remove the failed instance");
    assert_eq!(cri.observe(&uid).await.expect("observe").containers.len(), 1);
    a.spawn();
    let p = wait_for("restarted agent lists the pod", Duration::from_secs(60), || async {
        a.pod("once").filter(|p| phase(p) == "Succeeded")
    })
    .await;
    let st = cstatus(&p, "job").expect("status");
    assert_eq!(st["restartCount"], 1, "{st}");
    assert_eq!(last_exit(&p, "job"), Some(1), "lastState after an agent restart: {st}");
}
