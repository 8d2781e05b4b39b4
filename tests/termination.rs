//! One deadline per termination, also across an agent crash: an agent SIGKILLed halfway through
//! a pod's termination finishes it inside the budget that began before it died.

mod common;

use std::time::Duration;

use common::*;
use crilet::model::ContainerState;

const S: i64 = 1_000_000_000;

/// `stubborn` ignores SIGTERM; `polite` exits on it. Grace 8 s.
const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: ending, namespace: t-term}
spec:
  terminationGracePeriodSeconds: 8
  containers:
  - name: stubborn
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sh, -c, 'trap "" TERM; while true; do sleep 0.2; done']
  - name: polite
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 0.2; done']
"#;

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_killed_mid_termination_keeps_the_deadline() {
    let mut a = Agent::start("term-crash").await;
    a.write_manifest("ending.yaml", POD);
    let p = running_pod(&a, "ending").await;
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let stubborn = container_id(&p, "stubborn").expect("stubborn");
    let cri = a.env.cri();

    let began = Moment::now();
    a.remove_manifest("ending.yaml");
    // SIGKILL the agent once the termination is under way (the polite container has gone).
    wait_for("the termination under way", Duration::from_secs(20), || async {
        let o = cri.observe(&uid).await.ok()?;
        o.containers.iter().any(|c| c.name == "polite" && c.state == ContainerState::Exited).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    a.kill();
    let killed_after = began.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    a.spawn();

    let finished = wait_for("the stubborn container killed", Duration::from_secs(30), || async {
        match cri.container_status(&stubborn, "").await {
            Ok(c) if c.state == ContainerState::Exited => Some(c.finished_at),
            Ok(_) => None,
            Err(e) if e.is_not_found() => Some(now_ns()),
            Err(_) => None,
        }
    })
    .await;
    // The runtime's finished_at is wall-clock time; a jump of the wall clock is taken out
    // (`Moment`), as the agent's own timers run on the monotonic clock.
    let took = began.until(finished);
    eprintln!(
        "termination began, agent killed after {:.1}s, stubborn container dead after {:.1}s (grace 8 s; \
         wall clock ahead of the monotonic one by {:.1}s)",
        killed_after.as_secs_f64(),
        took as f64 / 1e9,
        began.jump() as f64 / 1e9
    );
    assert!(killed_after < Duration::from_secs(8), "the agent was killed inside the budget");
    // One budget: 8 s from the start, plus the runtime's own kill and whole-second rounding.
    assert!(
        took <= 8 * S + 1_500_000_000,
        "killed {:.1}s after the termination began\n{}",
        took as f64 / 1e9,
        a.log()
    );
    wait_for("the pod removed", Duration::from_secs(30), || async {
        let o = cri.observe(&uid).await.ok()?;
        (o.sandboxes.is_empty() && o.containers.is_empty()).then_some(())
    })
    .await;
    let log = std::fs::read_to_string(&a.log_file).expect("agent log");
    assert!(
        log.contains("resuming a pod kill within its earlier deadline"),
        "the kill was resumed\n{}",
        a.log()
    );
}
