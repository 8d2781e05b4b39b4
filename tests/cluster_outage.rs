//! The API server goes away for 60 s under a crilet node (its own test binary: the other
//! cluster tests must not see the outage). Pods keep running and nothing restarts; the agent
//! says so on /healthz; afterwards the Lease is renewed and pod status catches up with what
//! happened meanwhile.

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::cluster::{Node, api_condition};
use common::wait_for;
use serde_json::Value;

fn cstatus<'a>(p: &'a Value, name: &str) -> Option<&'a Value> {
    p["status"]["containerStatuses"].as_array()?.iter().find(|c| c["name"] == name)
}

fn healthz(port: u16) -> String {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return String::new() };
    let _ = s.write_all(b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

fn apiserver_pid() -> i32 {
    let text =
        std::fs::read_to_string("/run/crilet-dev/cluster/kube-apiserver.pid").expect("apiserver pid file");
    text.trim().parse().expect("pid")
}

fn cluster_up() {
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("hack/cluster.sh");
    let out = std::process::Command::new("bash").arg(script).output().expect("hack/cluster.sh");
    assert!(out.status.success(), "hack/cluster.sh: {}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test]
async fn pods_outlive_a_60s_api_server_outage_and_status_catches_up() {
    let node = Node::start("outage", 10270, &["--metrics-bind-address", "127.0.0.1:10271"]).await;
    node.wait_ready().await;
    let yaml = node
        .agent
        .env
        .render(
            r#"
apiVersion: v1
kind: Pod
metadata: {name: steady}
spec:
  nodeName: ${NODE}
  terminationGracePeriodSeconds: 1
  containers:
  - name: long
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sleep, '3600']
    readinessProbe:
      exec: {command: ["true"]}
      periodSeconds: 1
  - name: short
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sh, -c, 'sleep 25; exit 3']
"#,
        )
        .replace("${NODE}", &node.name);
    node.apply(&yaml);
    let before = node
        .wait_pod("steady", "Running and Ready", Duration::from_secs(60), |p| {
            api_condition(p, "Ready") == Some("True")
        })
        .await;
    let long_id = cstatus(&before, "long").unwrap()["containerID"].clone();
    let uid = before["metadata"]["uid"].as_str().unwrap().to_string();

    // The API server goes away (we started it: stopped by its pid).
    let pid = apiserver_pid();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM)
        .expect("stop apiserver");
    let stopped = Instant::now();
    wait_for("/healthz to report the API server unreachable", Duration::from_secs(40), || async {
        healthz(10271).contains("api server: unreachable").then_some(())
    })
    .await;
    let body = healthz(10271);
    assert!(body.starts_with("HTTP/1.1 200") || body.starts_with("HTTP/1.0 200"), "still healthy: {body}");
    // 60 s without the API server; the short container exits and restarts meanwhile.
    let cri = node.agent.env.cri();
    tokio::time::sleep(Duration::from_secs(60).saturating_sub(stopped.elapsed())).await;
    let observed = cri.observe(&uid).await.expect("observe");
    let long = observed.newest("long").expect("long");
    assert_eq!(
        Some(format!("containerd://{}", long.id)).as_deref(),
        long_id.as_str(),
        "long never restarted"
    );
    assert_eq!(format!("{:?}", long.state), "Running");
    let short = observed.newest("short").expect("short");
    assert!(short.restart_count >= 1, "short restarted during the outage: {short:?}");
    assert!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(node.agent.pid().unwrap() as i32), None).is_ok(),
        "agent alive"
    );

    cluster_up();
    let back = jiff::Timestamp::now();
    wait_for("the Lease to be renewed after the outage", Duration::from_secs(40), || async {
        let l = node.cluster.get_json(&["lease", "-n", "kube-node-lease", &node.name])?;
        let t: jiff::Timestamp = l["spec"]["renewTime"].as_str()?.parse().ok()?;
        (t > back).then_some(())
    })
    .await;
    let after = node
        .wait_pod("steady", "status to show the restart", Duration::from_secs(40), |p| {
            cstatus(p, "short").is_some_and(|c| c["restartCount"].as_i64() >= Some(1))
        })
        .await;
    assert_eq!(cstatus(&after, "long").unwrap()["containerID"], long_id);
    assert_eq!(cstatus(&after, "long").unwrap()["restartCount"], 0);
    node.wait_ready().await;
    wait_for("/healthz to stop reporting the outage", Duration::from_secs(30), || async {
        (!healthz(10271).contains("unreachable")).then_some(())
    })
    .await;
}
