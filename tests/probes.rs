//! Probes against the real containerd (spec §6, R9.5): every handler passing and failing,
//! thresholds, liveness restarts, readiness flips, startup gating, exec timeouts, readiness
//! gates, and readiness kept across an agent restart (DESIGN difference 3).

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// A test container that keeps running and exits at once on SIGTERM.
const IDLE: &str = r#"trap "exit 0" TERM; while true; do sleep 1; done"#;

fn manifest(name: &str, ns: &str, body: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n{body}")
}

/// `crilet events -n NS` (the table as printed).
fn events(a: &Agent, ns: &str) -> String {
    let (ok, out, err) = a.cli(&["events", "-n", ns]);
    assert!(ok, "crilet events failed: {err}");
    out
}

/// Event lines of `ns` with this reason whose message contains `text`.
fn event_lines(a: &Agent, ns: &str, reason: &str, text: &str) -> Vec<String> {
    events(a, ns)
        .lines()
        .filter(|l| l.split_whitespace().any(|w| w == reason) && l.contains(text))
        .map(str::to_string)
        .collect()
}

/// Runs `sh -c CMD` in a container through CRI; returns (exit code, output).
async fn sh(a: &Agent, id: &str, cmd: &str) -> (i32, String) {
    let (code, out) = a
        .env
        .cri()
        .exec_sync(id, vec!["sh".into(), "-c".into(), cmd.into()], Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("exec {cmd:?} in {id}: {e}"));
    (code, String::from_utf8_lossy(&out).trim().to_string())
}

fn ready(p: &Value, c: &str) -> Option<bool> {
    cstatus(p, c)?["ready"].as_bool()
}

fn started(p: &Value, c: &str) -> Option<bool> {
    cstatus(p, c)?["started"].as_bool()
}

fn restarts(p: &Value, c: &str) -> Option<u64> {
    cstatus(p, c)?["restartCount"].as_u64()
}

/// Ends a passing test: stops the agent and removes its pods through CRI (a failing test leaves
/// them for a look; the next run's `Agent::start` removes them).
async fn finish(mut a: Agent) {
    a.stop();
    remove_pods_of(&a.env.cri(), &a.manifests).await;
}

/// Waits until every named container runs; returns the pod.
async fn all_running(a: &Agent, pod: &str, containers: &[&str]) -> Value {
    wait_for(&format!("pod {pod}: {containers:?} running"), Duration::from_secs(60), || async {
        let p = a.pod(pod)?;
        containers.iter().all(|c| running(&p, c)).then_some(p)
    })
    .await
}

/// Waits until the pod's condition `t` has status `want`.
async fn wait_condition(a: &Agent, pod: &str, t: &str, want: &str, limit: Duration) -> Value {
    wait_for(&format!("pod {pod} condition {t}={want}"), limit, || async {
        let p = a.pod(pod)?;
        (condition(&p, t) == Some(want)).then_some(p)
    })
    .await
}

/// The newest sandbox's ID of a pod, from CRI.
async fn sandbox_of(a: &Agent, p: &Value) -> String {
    let uid = p["metadata"]["uid"].as_str().expect("uid");
    let observed = a.env.cri().observe(uid).await.expect("observe");
    observed.sandbox().expect("a sandbox").id.clone()
}

/// The images hold no gRPC server, so the passing gRPC case is busybox `nc` replaying a canned
/// HTTP/2 exchange (after a short pause, so the request is in first) that a gRPC client takes as
/// `grpc.health.v1.Health/Check` → SERVING on stream 1 (each probe uses a new connection):
/// SETTINGS, SETTINGS ack, HEADERS (:status 200, content-type application/grpc), DATA (a
/// HealthCheckResponse{status: SERVING}), trailers (grpc-status 0).
const GRPC_SERVING: &str = concat!(
    r"\x00\x00\x00\x04\x00\x00\x00\x00\x00",
    r"\x00\x00\x00\x04\x01\x00\x00\x00\x00",
    r"\x00\x00\x14\x01\x04\x00\x00\x00\x01\x88\x0f\x10\x10application/grpc",
    r"\x00\x00\x07\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x02\x08\x01",
    r"\x00\x00\x0f\x01\x05\x00\x00\x00\x01\x00\x0bgrpc-status\x010",
);

#[tokio::test(flavor = "multi_thread")]
async fn each_handler_passes_and_fails() {
    let ns = "t-probe-handlers";
    let a = Agent::start("probe-handlers").await;
    // One pod, one web server (the containers share the pod IP); the other containers probe it.
    let body = format!(
        r#"  terminationGracePeriodSeconds: 2
  containers:
  - name: web
    image: ${{CRILET_IMAGE_WEB_V1}}
    ports: [{{name: http, containerPort: 8080}}]
    readinessProbe: {{httpGet: {{path: /healthz, port: http}}, periodSeconds: 1}}
  - name: exec-ok
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, 'touch /tmp/ok; {IDLE}']
    readinessProbe: {{exec: {{command: [sh, -c, 'test -f /tmp/ok']}}, periodSeconds: 1}}
  - name: exec-bad
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, '{IDLE}']
    readinessProbe: {{exec: {{command: [sh, -c, 'echo no-such-file; test -f /tmp/ok']}}, periodSeconds: 1}}
  - name: http-bad
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, '{IDLE}']
    readinessProbe: {{httpGet: {{path: /missing, port: 8080}}, periodSeconds: 1}}
  - name: tcp-ok
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, '{IDLE}']
    readinessProbe: {{tcpSocket: {{port: 8080}}, periodSeconds: 1}}
  - name: tcp-bad
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, '{IDLE}']
    readinessProbe: {{tcpSocket: {{port: 8081}}, periodSeconds: 1}}
  - name: grpc-ok
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command:
    - sh
    - -c
    - |
      printf '{GRPC_SERVING}' > /tmp/resp
      printf '#!/bin/sh\nsleep 0.3\ncat /tmp/resp\nsleep 2\n' > /tmp/srv
      chmod +x /tmp/srv
      nc -ll -p 9090 -e /tmp/srv &
      {IDLE}
    readinessProbe: {{grpc: {{port: 9090}}, periodSeconds: 1, timeoutSeconds: 2}}
  - name: grpc-bad
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, '{IDLE}']
    readinessProbe: {{grpc: {{port: 8082}}, periodSeconds: 1}}
"#
    );
    a.write_manifest("handlers.yaml", &manifest("handlers", ns, &body));
    let passing = ["web", "exec-ok", "tcp-ok", "grpc-ok"];
    let failing = ["exec-bad", "http-bad", "tcp-bad", "grpc-bad"];
    let p = wait_for("the passing probes make their containers ready", Duration::from_secs(60), || async {
        let p = a.pod("handlers")?;
        passing.iter().all(|c| ready(&p, c) == Some(true)).then_some(p)
    })
    .await;
    let ip = p["status"]["podIP"].as_str().expect("podIP").to_string();
    // Each failing handler reports its own failure text.
    let want = [
        ("exec-bad", "Readiness probe failed: no-such-file"),
        ("http-bad", "Readiness probe failed: HTTP probe failed with statuscode: 404"),
        ("tcp-bad", &format!("Readiness probe failed: dial tcp {ip}:8081")),
        ("grpc-bad", "Readiness probe failed"),
    ];
    for (c, text) in want {
        let text = if c == "grpc-bad" {
            format!("{text}: failed to connect service http://{ip}:8082")
        } else {
            text.to_string()
        };
        wait_for(&format!("Unhealthy event of {c}: {text}"), Duration::from_secs(20), || async {
            (!event_lines(&a, ns, "Unhealthy", &text).is_empty()).then_some(())
        })
        .await;
    }
    let p = a.pod("handlers").expect("pod");
    for c in failing {
        assert!(running(&p, c), "{c} runs (readiness never kills)");
        assert_eq!(ready(&p, c), Some(false), "{c} not ready");
        assert_eq!(restarts(&p, c), Some(0), "{c} not restarted");
    }
    for c in passing {
        assert_eq!(ready(&p, c), Some(true), "{c} stays ready");
    }
    assert_eq!(condition(&p, "ContainersReady"), Some("False"));
    assert_eq!(condition(&p, "Ready"), Some("False"));
    let msg = p["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "ContainersReady"))
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string();
    for c in failing {
        assert!(msg.contains(c), "ContainersReady message lists {c}: {msg}");
    }
    for c in passing {
        assert!(!msg.contains(&format!(" {c}")) && !msg.contains(&format!("[{c}")), "{c} not listed: {msg}");
    }
    // (Failure events of the passing containers are not checked: right after the sandbox
    // starts, the host may still hold a stale neighbour entry for a reused pod IP, so the first
    // network probes can time out for a few seconds. Being ready, and staying so, is the check.)
    finish(a).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn liveness_failures_below_threshold_never_restart() {
    let ns = "t-probe-threshold";
    let a = Agent::start("probe-threshold").await;
    let body = format!(
        r#"  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, '{IDLE}']
    livenessProbe:
      exec:
        command: [sh, -c, 'n=$(cat /tmp/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /tmp/n; [ $n -gt 2 ]']
      periodSeconds: 1
      failureThreshold: 3
"#
    );
    a.write_manifest("threshold.yaml", &manifest("threshold", ns, &body));
    let p = all_running(&a, "threshold", &["main"]).await;
    let id = container_id(&p, "main").expect("container id");
    // Two failures, then passes: the probe has run at least 7 times once /tmp/n reaches 7.
    wait_for("the liveness probe ran 7 times", Duration::from_secs(30), || async {
        let (_, n) = sh(&a, &id, "cat /tmp/n 2>/dev/null || echo 0").await;
        (n.parse::<u32>().unwrap_or(0) >= 7).then_some(())
    })
    .await;
    let p = a.pod("threshold").expect("pod");
    assert_eq!(restarts(&p, "main"), Some(0), "never restarted\n{}", events(&a, ns));
    assert_eq!(container_id(&p, "main").as_deref(), Some(id.as_str()), "same instance");
    assert!(running(&p, "main"));
    assert_eq!(event_lines(&a, ns, "Unhealthy", "Liveness probe failed").len(), 1, "{}", events(&a, ns));
    let ev = events(&a, ns);
    assert!(
        ev.contains("(x2 over") || ev.contains("(x2)"),
        "two failures counted as one event seen twice:\n{ev}"
    );
    assert!(event_lines(&a, ns, "Killing", "").is_empty(), "no kill:\n{ev}");
    finish(a).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn liveness_failure_restarts_only_that_container() {
    let ns = "t-probe-liveness";
    let a = Agent::start("probe-liveness").await;
    let body = format!(
        r#"  terminationGracePeriodSeconds: 30
  containers:
  - name: main
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, 'touch /tmp/alive; {IDLE}']
    livenessProbe:
      exec: {{command: [sh, -c, 'test -f /tmp/alive']}}
      periodSeconds: 1
      failureThreshold: 2
      terminationGracePeriodSeconds: 2
  - name: other
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, '{IDLE}']
"#
    );
    a.write_manifest("liveness.yaml", &manifest("liveness", ns, &body));
    let p = all_running(&a, "liveness", &["main", "other"]).await;
    let sandbox = sandbox_of(&a, &p).await;
    let main = container_id(&p, "main").expect("main id");
    let other = container_id(&p, "other").expect("other id");
    assert_eq!(restarts(&p, "main"), Some(0));
    // Healthy for a few periods first.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let p = a.pod("liveness").expect("pod");
    assert_eq!(container_id(&p, "main").as_deref(), Some(main.as_str()), "healthy container kept");
    let t0 = Instant::now();
    sh(&a, &main, "rm /tmp/alive").await;
    let p = wait_for("main restarted once", Duration::from_secs(30), || async {
        let p = a.pod("liveness")?;
        (restarts(&p, "main") == Some(1) && running(&p, "main")).then_some(p)
    })
    .await;
    assert!(t0.elapsed() < Duration::from_secs(15), "restart within a few periods: {:?}", t0.elapsed());
    let new_main = container_id(&p, "main").expect("new main id");
    assert_ne!(new_main, main, "a new instance");
    assert_eq!(container_id(&p, "other").as_deref(), Some(other.as_str()), "the other container kept");
    assert_eq!(restarts(&p, "other"), Some(0));
    assert_eq!(sandbox_of(&a, &p).await, sandbox, "same sandbox");
    let last = &cstatus(&p, "main").expect("status")["lastState"]["terminated"];
    assert_eq!(
        last["containerID"].as_str(),
        Some(format!("containerd://{main}").as_str()),
        "lastState: {last}"
    );
    let ev = events(&a, ns);
    assert!(!event_lines(&a, ns, "Unhealthy", "Liveness probe failed").is_empty(), "Unhealthy event:\n{ev}");
    assert!(
        !event_lines(&a, ns, "Killing", "Container main failed liveness probe, will be restarted").is_empty(),
        "Killing event:\n{ev}"
    );
    let (ok, describe, err) = a.cli(&["describe", "pod", "liveness", "-n", ns]);
    assert!(ok, "describe: {err}");
    assert!(describe.contains("Unhealthy") && describe.contains("Liveness probe failed"), "{describe}");
    // The new instance is healthy (its /tmp/alive is fresh): no second restart.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let p = a.pod("liveness").expect("pod");
    assert_eq!(restarts(&p, "main"), Some(1), "restarted once only\n{}", events(&a, ns));
    assert_eq!(container_id(&p, "main").as_deref(), Some(new_main.as_str()));
    finish(a).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn readiness_failure_flips_ready_without_restart() {
    let ns = "t-probe-readiness";
    let a = Agent::start("probe-readiness").await;
    let body = format!(
        r#"  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, 'touch /tmp/ready; {IDLE}']
    readinessProbe:
      exec: {{command: [sh, -c, 'test -f /tmp/ready']}}
      periodSeconds: 1
      failureThreshold: 2
"#
    );
    a.write_manifest("readiness.yaml", &manifest("readiness", ns, &body));
    let p = wait_condition(&a, "readiness", "Ready", "True", Duration::from_secs(60)).await;
    let id = container_id(&p, "main").expect("id");
    for round in 0..2 {
        sh(&a, &id, "rm -f /tmp/ready").await;
        let p = wait_condition(&a, "readiness", "Ready", "False", Duration::from_secs(15)).await;
        assert_eq!(ready(&p, "main"), Some(false), "round {round}");
        assert_eq!(condition(&p, "ContainersReady"), Some("False"));
        assert!(running(&p, "main"));
        sh(&a, &id, "touch /tmp/ready").await;
        let p = wait_condition(&a, "readiness", "Ready", "True", Duration::from_secs(15)).await;
        assert_eq!(ready(&p, "main"), Some(true));
        assert_eq!(restarts(&p, "main"), Some(0), "readiness never restarts");
        assert_eq!(container_id(&p, "main").as_deref(), Some(id.as_str()), "same instance");
    }
    assert!(!event_lines(&a, ns, "Unhealthy", "Readiness probe failed").is_empty());
    assert!(event_lines(&a, ns, "Killing", "").is_empty(), "nothing killed:\n{}", events(&a, ns));
    finish(a).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn startup_probe_holds_off_liveness() {
    let ns = "t-probe-startup";
    let a = Agent::start("probe-startup").await;
    // Started after ~8 s; liveness (same check, threshold 1) would kill it on its first failure.
    let body = format!(
        r#"  terminationGracePeriodSeconds: 2
  containers:
  - name: slow
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, 'sleep 8; touch /tmp/started; {IDLE}']
    startupProbe:
      exec: {{command: [sh, -c, 'test -f /tmp/started']}}
      periodSeconds: 1
      failureThreshold: 30
    livenessProbe:
      exec: {{command: [sh, -c, 'test -f /tmp/started']}}
      periodSeconds: 1
      failureThreshold: 1
    readinessProbe:
      exec: {{command: [sh, -c, 'test -f /tmp/started']}}
      periodSeconds: 1
"#
    );
    a.write_manifest("startup.yaml", &manifest("startup", ns, &body));
    let p = all_running(&a, "startup", &["slow"]).await;
    let id = container_id(&p, "slow").expect("id");
    let t0 = Instant::now();
    // While starting: not started, not ready, not killed.
    let mut seen_not_started = false;
    let p = loop {
        let p = a.pod("startup").expect("pod");
        assert_eq!(
            container_id(&p, "slow").as_deref(),
            Some(id.as_str()),
            "never killed\n{}",
            events(&a, ns)
        );
        if started(&p, "slow") == Some(true) {
            break p;
        }
        seen_not_started = true;
        assert_eq!(ready(&p, "slow"), Some(false), "not ready before started");
        assert!(t0.elapsed() < Duration::from_secs(25), "startup probe passes within ~8 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(seen_not_started, "started is false while the startup probe has not passed");
    let _ = p;
    wait_condition(&a, "startup", "Ready", "True", Duration::from_secs(10)).await;
    // Liveness now runs and passes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let p = a.pod("startup").expect("pod");
    assert_eq!(restarts(&p, "slow"), Some(0), "{}", events(&a, ns));
    assert_eq!(container_id(&p, "slow").as_deref(), Some(id.as_str()));
    assert!(event_lines(&a, ns, "Unhealthy", "Liveness probe").is_empty(), "{}", events(&a, ns));
    assert!(!event_lines(&a, ns, "Unhealthy", "Startup probe failed").is_empty(), "{}", events(&a, ns));
    assert!(event_lines(&a, ns, "Killing", "").is_empty(), "{}", events(&a, ns));
    finish(a).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_probe_timeout_is_a_failure() {
    let ns = "t-probe-timeout";
    let a = Agent::start("probe-timeout").await;
    let body = format!(
        r#"  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, '{IDLE}']
    readinessProbe:
      exec: {{command: [sh, -c, 'sleep 5']}}
      periodSeconds: 2
      timeoutSeconds: 1
"#
    );
    a.write_manifest("timeout.yaml", &manifest("timeout", ns, &body));
    all_running(&a, "timeout", &["main"]).await;
    let t0 = Instant::now();
    wait_for("two Unhealthy events for the timed-out probe", Duration::from_secs(30), || async {
        let ev = events(&a, ns);
        let lines = event_lines(&a, ns, "Unhealthy", "Readiness probe failed");
        (!lines.is_empty() && (ev.contains("(x2") || ev.contains("(x3"))).then_some(())
    })
    .await;
    // A timed-out attempt ends in about its timeout (not the command's 5 s).
    assert!(t0.elapsed() < Duration::from_secs(12), "two attempts took {:?}", t0.elapsed());
    let end = Instant::now() + Duration::from_secs(4);
    while Instant::now() < end {
        let p = a.pod("timeout").expect("pod");
        assert_eq!(ready(&p, "main"), Some(false), "never ready");
        assert_eq!(condition(&p, "Ready"), Some("False"));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let lines = event_lines(&a, ns, "Unhealthy", "Readiness probe failed");
    assert!(lines.iter().any(|l| l.contains("timed out")), "says it timed out: {lines:?}");
    finish(a).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn readiness_gate_holds_ready_until_set() {
    let ns = "t-probe-gate";
    let a = Agent::start("probe-gate").await;
    let body = format!(
        r#"  terminationGracePeriodSeconds: 2
  readinessGates: [{{conditionType: example.com/feature}}]
  containers:
  - name: main
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, '{IDLE}']
"#
    );
    a.write_manifest("gate.yaml", &manifest("gate", ns, &body));
    let p = wait_condition(&a, "gate", "ContainersReady", "True", Duration::from_secs(60)).await;
    assert_eq!(condition(&p, "Ready"), Some("False"), "the gate holds Ready");
    let reason = |p: &Value| {
        p["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
            .and_then(|c| c["reason"].as_str())
            .map(str::to_string)
    };
    assert_eq!(reason(&p).as_deref(), Some("ReadinessGatesNotReady"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(condition(&a.pod("gate").expect("pod"), "Ready"), Some("False"), "still held");
    let set = |status: &str| {
        let (ok, out, err) = a.cli(&["set-condition", "gate", "example.com/feature", status, "-n", ns]);
        assert!(ok, "set-condition {status}: {out} {err}");
    };
    set("True");
    let p = wait_condition(&a, "gate", "Ready", "True", Duration::from_secs(10)).await;
    assert_eq!(condition(&p, "example.com/feature"), Some("True"), "the gate's condition is listed");
    set("False");
    let p = wait_condition(&a, "gate", "Ready", "False", Duration::from_secs(10)).await;
    assert_eq!(reason(&p).as_deref(), Some("ReadinessGatesNotReady"));
    assert_eq!(condition(&p, "ContainersReady"), Some("True"));
    set("True");
    wait_condition(&a, "gate", "Ready", "True", Duration::from_secs(10)).await;
    finish(a).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_restart_keeps_readiness() {
    let ns = "t-probe-keepready";
    let mut a = Agent::start("probe-keepready").await;
    // Period 30 s: after the restart no fresh result arrives for a while.
    let body = format!(
        r#"  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, 'touch /tmp/ready; {IDLE}']
    readinessProbe:
      exec: {{command: [sh, -c, 'test -f /tmp/ready']}}
      periodSeconds: 30
"#
    );
    a.write_manifest("keepready.yaml", &manifest("keepready", ns, &body));
    // A freshly started agent spreads its first probes over one period (R6.2).
    let p = wait_condition(&a, "keepready", "Ready", "True", Duration::from_secs(60)).await;
    let id = container_id(&p, "main").expect("id");
    a.kill();
    a.spawn();
    let start = Instant::now();
    let p =
        wait_for("the new agent reports the pod", Duration::from_secs(30), || async { a.pod("keepready") })
            .await;
    assert_eq!(condition(&p, "Ready"), Some("True"), "Ready from the first answer on: {p}\n{}", a.log());
    assert_eq!(ready(&p, "main"), Some(true));
    // ... and it stays so.
    while start.elapsed() < Duration::from_secs(8) {
        let p = a.pod("keepready").expect("pod");
        assert_eq!(condition(&p, "Ready"), Some("True"), "no Ready flap after the restart");
        assert_eq!(container_id(&p, "main").as_deref(), Some(id.as_str()), "same container");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    finish(a).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pod_added_to_a_running_agent_is_probed_at_once() {
    // R6.2: the first probes wait a random part of the period only while the *agent* started
    // less than one period ago; a pod added later is probed as soon as its containers run.
    let ns = "t-probe-nojitter";
    let a = Agent::start("probe-nojitter").await;
    let period = 20;
    let mut body = String::from("  terminationGracePeriodSeconds: 2\n  containers:\n");
    let names = ["c1", "c2", "c3", "c4"];
    // The probe passes from the start: one that ran before the container's shell made a file
    // would fail once and wait a period, which is the kubelet's behaviour, not a delay.
    for c in names {
        body.push_str(&format!(
            r#"  - name: {c}
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, '{IDLE}']
    readinessProbe:
      exec: {{command: ['true']}}
      periodSeconds: {period}
"#
        ));
    }
    // Let the agent be older than one period.
    wait_for("the agent answers", Duration::from_secs(10), || async { a.pods() }).await;
    tokio::time::sleep(Duration::from_secs(period + 1)).await;
    a.write_manifest("nojitter.yaml", &manifest("nojitter", ns, &body));
    all_running(&a, "nojitter", &names).await;
    let t0 = Instant::now();
    // With a random delay per probe of up to 20 s, four probes all within 5 s would be luck.
    wait_condition(&a, "nojitter", "Ready", "True", Duration::from_secs(30)).await;
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "Ready {:?} after the containers ran (period {period} s): the first probes were delayed\n{}",
        t0.elapsed(),
        a.log()
    );
    finish(a).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_restart_keeps_readiness_gate_conditions() {
    // A condition set for a readiness gate lives in the agent (there is no API server): a
    // restarted agent must still have it, or Ready flaps to False (DESIGN: no readiness flap).
    let ns = "t-probe-keepgate";
    let mut a = Agent::start("probe-keepgate").await;
    let body = format!(
        r#"  terminationGracePeriodSeconds: 2
  readinessGates: [{{conditionType: example.com/lb}}]
  containers:
  - name: main
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, '{IDLE}']
"#
    );
    a.write_manifest("keepgate.yaml", &manifest("keepgate", ns, &body));
    wait_condition(&a, "keepgate", "ContainersReady", "True", Duration::from_secs(60)).await;
    let (ok, out, err) = a.cli(&["set-condition", "keepgate", "example.com/lb", "True", "-n", ns]);
    assert!(ok, "set-condition: {out} {err}");
    let p = wait_condition(&a, "keepgate", "Ready", "True", Duration::from_secs(10)).await;
    let id = container_id(&p, "main").expect("id");
    a.kill();
    a.spawn();
    let start = Instant::now();
    let p =
        wait_for("the new agent reports the pod", Duration::from_secs(30), || async { a.pod("keepgate") })
            .await;
    assert_eq!(condition(&p, "example.com/lb"), Some("True"), "the gate's condition survives: {p}");
    assert_eq!(condition(&p, "Ready"), Some("True"), "Ready from the first answer on: {p}");
    while start.elapsed() < Duration::from_secs(5) {
        let p = a.pod("keepgate").expect("pod");
        assert_eq!(condition(&p, "Ready"), Some("True"), "no Ready flap after the restart");
        assert_eq!(container_id(&p, "main").as_deref(), Some(id.as_str()), "same container");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The restored condition is still the outside controller's to change.
    let (ok, out, err) = a.cli(&["set-condition", "keepgate", "example.com/lb", "False", "-n", ns]);
    assert!(ok, "set-condition: {out} {err}");
    wait_condition(&a, "keepgate", "Ready", "False", Duration::from_secs(10)).await;
    finish(a).await;
}
