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

#[tokio::test(flavor = "multi_thread")]
async fn containerd_restart_under_a_running_agent() {
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
