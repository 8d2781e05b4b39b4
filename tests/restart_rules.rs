//! Container restart rules (KEP-5307) against the real runtime: a container's own
//! `restartPolicy` overrides the pod's, and `restartPolicyRules` restart it on the exit codes
//! they name (first match wins), with the usual back-off. Each rule of the spec's table:
//! - pod `Never`, container `Never` + `Restart In [42]`: exits 42 restart it in place (the pod
//!   stays Running, restartCount counts up); the first other exit ends it and the pod fails;
//! - a container `Always` in a `Never` pod restarts after exit 0; a container `Never` in an
//!   `Always` pod does not after exit 1, while its sibling keeps running;
//! - a regular init container `OnFailure` in a `Never` pod is retried until it succeeds; one
//!   with `Never` in an `Always` pod fails the pod at its first failure;
//! - a liveness failure decides by the container's own policy alone (`OnFailure` restarts it
//!   in a `Never` pod).
//!
//! Containers count their runs in a hostPath file, so what ran is read from outside the
//! runtime, and the exit codes come from the status the agent publishes.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// A world-writable directory under the test's own directory for the run counters.
fn out_dir(a: &Agent) -> PathBuf {
    let d = a.dir.join("out");
    std::fs::create_dir_all(&d).expect("mkdir out");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).expect("chmod out");
    d
}

/// How many times the container that counts into `name` has started.
fn runs(out: &std::path::Path, name: &str) -> u32 {
    std::fs::read_to_string(out.join(name)).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
}

/// A shell step that counts this run into /out/NAME and leaves the count in $n.
fn count(name: &str) -> String {
    format!("n=$(cat /out/{name} 2>/dev/null || echo 0); n=$((n+1)); echo $n > /out/{name}")
}

fn terminated_exit(p: &Value, name: &str) -> Option<i64> {
    cstatus(p, name)?["state"]["terminated"]["exitCode"].as_i64()
}

fn init_status<'a>(p: &'a Value, name: &str) -> Option<&'a Value> {
    p["status"]["initContainerStatuses"].as_array()?.iter().find(|c| c["name"] == name)
}

/// Pod `Never`, container `Never` with `Restart In [42]`: runs 1 and 2 exit 42 and are
/// restarted in place; run 3 exits 3, which no rule matches: not restarted, the pod fails.
/// Meanwhile the pod is Running (never Failed before run 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_never_pod_restarts_a_container_on_the_exit_code_its_rule_names() {
    let a = Agent::start("rules_exit_code").await;
    let out = out_dir(&a);
    a.write_manifest(
        "p.yaml",
        &format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: rule42, namespace: t-rules}}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  volumes: [{{name: out, hostPath: {{path: {out}}}}}]
  containers:
  - name: job
    image: ${{CRILET_IMAGE_BUSYBOX}}
    restartPolicy: Never
    restartPolicyRules:
    - action: Restart
      exitCodes: {{operator: In, values: [42]}}
    command: [sh, -c, '{count}; sleep 0.5; if [ $n -lt 3 ]; then exit 42; fi; exit 3']
    volumeMounts: [{{name: out, mountPath: /out}}]
"#,
            out = out.display(),
            count = count("job"),
        ),
    );
    let mut phases = Vec::new();
    let done = wait_for("the third run to end the pod", Duration::from_secs(90), || {
        let p = a.pod("rule42");
        if let Some(p) = &p {
            let ph = phase(p).to_string();
            if phases.last() != Some(&ph) {
                phases.push(ph);
            }
        }
        let done = p.filter(|p| phase(p) == "Failed");
        async move { done }
    })
    .await;
    assert_eq!(runs(&out, "job"), 3, "two exits 42 restarted, the exit 3 not: {phases:?}");
    assert_eq!(restart_count(&done, "job"), Some(2), "{}", done["status"]);
    assert_eq!(terminated_exit(&done, "job"), Some(3), "{}", done["status"]);
    let last = &cstatus(&done, "job").expect("status")["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 42, "the previous run exited 42: {last}");
    assert!(
        phases.iter().take_while(|p| *p != "Failed").any(|p| p == "Running"),
        "the pod stays Running while its container restarts on exit 42: {phases:?}"
    );
    // Nothing restarts after the unmatched exit.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(runs(&out, "job"), 3, "no restart after exit 3");
}

/// A container's own policy overrides the pod's, both ways, per container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_policy_overrides_the_pod_policy() {
    let a = Agent::start("rules_override").await;
    let out = out_dir(&a);
    a.write_manifest(
        "p.yaml",
        &format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: always-in-never, namespace: t-rules}}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  volumes: [{{name: out, hostPath: {{path: {out}}}}}]
  containers:
  - name: again
    image: ${{CRILET_IMAGE_BUSYBOX}}
    restartPolicy: Always
    command: [sh, -c, '{again}; if [ $n -lt 3 ]; then exit 0; fi; sleep 3600']
    volumeMounts: [{{name: out, mountPath: /out}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: never-in-always, namespace: t-rules}}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{{name: out, hostPath: {{path: {out}}}}}]
  containers:
  - name: once
    image: ${{CRILET_IMAGE_BUSYBOX}}
    restartPolicy: Never
    command: [sh, -c, '{once}; exit 1']
    volumeMounts: [{{name: out, mountPath: /out}}]
  - name: keeper
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, 'trap "exit 0" TERM; sleep 3600 & wait']
"#,
            out = out.display(),
            again = count("again"),
            once = count("once"),
        ),
    );
    // Exit 0 twice in a Never pod, restarted both times by its own Always. The status can show
    // the third run a moment before its shell has counted it, so wait for the count too.
    let p = wait_for("again's third run, running", Duration::from_secs(90), || async {
        let p = a.pod("always-in-never")?;
        (running(&p, "again") && restart_count(&p, "again") == Some(2) && runs(&out, "again") >= 3)
            .then_some(p)
    })
    .await;
    assert_eq!(phase(&p), "Running");
    assert_eq!(runs(&out, "again"), 3);
    let last = &cstatus(&p, "again").expect("status")["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 0, "restarted after a success: {last}");

    // Exit 1 in an Always pod, never restarted by its own Never; the pod runs on.
    let q = wait_for("once to have exited", Duration::from_secs(60), || async {
        let q = a.pod("never-in-always")?;
        (terminated_exit(&q, "once") == Some(1) && running(&q, "keeper")).then_some(q)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let q2 = a.pod("never-in-always").expect("pod");
    assert_eq!(runs(&out, "once"), 1, "a container Never is not restarted in an Always pod");
    assert_eq!(restart_count(&q2, "once"), Some(0), "{}", q2["status"]);
    assert_eq!(terminated_exit(&q2, "once"), Some(1));
    assert_eq!(phase(&q2), "Running", "its sibling keeps the pod running: {}", q["status"]);
}

/// Regular init containers: `OnFailure` in a `Never` pod is retried until it succeeds, then the
/// app starts; `Never` in an `Always` pod fails the pod at its first failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_container_policies_decide_their_own_retries() {
    let a = Agent::start("rules_init").await;
    let out = out_dir(&a);
    a.write_manifest(
        "p.yaml",
        &format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: retried-init, namespace: t-rules}}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  volumes: [{{name: out, hostPath: {{path: {out}}}}}]
  initContainers:
  - name: setup
    image: ${{CRILET_IMAGE_BUSYBOX}}
    restartPolicy: OnFailure
    command: [sh, -c, '{setup}; if [ $n -lt 2 ]; then exit 7; fi; exit 0']
    volumeMounts: [{{name: out, mountPath: /out}}]
  containers:
  - name: app
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, 'trap "exit 0" TERM; sleep 3600 & wait']
---
apiVersion: v1
kind: Pod
metadata: {{name: final-init, namespace: t-rules}}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{{name: out, hostPath: {{path: {out}}}}}]
  initContainers:
  - name: check
    image: ${{CRILET_IMAGE_BUSYBOX}}
    restartPolicy: Never
    command: [sh, -c, '{check}; exit 9']
    volumeMounts: [{{name: out, mountPath: /out}}]
  containers:
  - name: app
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, 'sleep 3600']
"#,
            out = out.display(),
            setup = count("setup"),
            check = count("check"),
        ),
    );
    let p = wait_for("retried-init running", Duration::from_secs(90), || async {
        let p = a.pod("retried-init")?;
        (phase(&p) == "Running" && running(&p, "app")).then_some(p)
    })
    .await;
    assert_eq!(runs(&out, "setup"), 2, "one failure retried, then success");
    let setup = init_status(&p, "setup").expect("setup status");
    assert_eq!(setup["restartCount"], 1, "{setup}");
    assert_eq!(setup["state"]["terminated"]["exitCode"], 0, "{setup}");

    let q = wait_for("final-init Failed", Duration::from_secs(60), || async {
        let q = a.pod("final-init")?;
        (phase(&q) == "Failed").then_some(q)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(runs(&out, "check"), 1, "an init container Never is not retried in an Always pod");
    let check = init_status(&q, "check").expect("check status");
    assert_eq!(check["state"]["terminated"]["exitCode"], 9, "{check}");
    assert!(
        cstatus(&q, "app").is_none_or(|c| c["state"]["running"].is_null()),
        "the app never ran: {}",
        q["status"]
    );
}

/// A liveness failure has no exit code to match rules against: the container's own policy
/// decides. `OnFailure` in a `Never` pod restarts the container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_liveness_failure_follows_the_container_policy() {
    let a = Agent::start("rules_liveness").await;
    a.write_manifest(
        "p.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: {name: live, namespace: t-rules}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: ${CRILET_IMAGE_BUSYBOX}
    restartPolicy: OnFailure
    command: [sh, -c, 'trap "exit 0" TERM; sleep 3600 & wait']
    livenessProbe:
      exec: {command: ['false']}
      periodSeconds: 1
      failureThreshold: 1
"#,
    );
    let p = wait_for("web restarted after its liveness failure", Duration::from_secs(60), || async {
        let p = a.pod("live")?;
        (restart_count(&p, "web").is_some_and(|n| n >= 1)).then_some(p)
    })
    .await;
    assert_ne!(phase(&p), "Failed", "{}", p["status"]);
    let events = a.events_of("t-rules", "live");
    assert!(events.contains("failed liveness probe, will be restarted"), "{events}");
}

/// The pod of the RestartAllContainers tests: an init container that counts its runs into an
/// emptyDir file, a sidecar with a preStop hook that leaves a mark, and an app that exits 42
/// (its rule: restart all) the first time it finds `/out/NAME-go` (the test creates it), then
/// runs on.
fn restart_all_pod(name: &str, out: &std::path::Path) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: t-rules}}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 30
  volumes:
  - {{name: out, hostPath: {{path: {out}}}}}
  - {{name: scratch, emptyDir: {{}}}}
  initContainers:
  - name: setup
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, '{setup}; echo run$n >> /scratch/setup']
    volumeMounts: [{{name: out, mountPath: /out}}, {{name: scratch, mountPath: /scratch}}]
  - name: side
    image: ${{CRILET_IMAGE_BUSYBOX}}
    restartPolicy: Always
    lifecycle:
      preStop: {{exec: {{command: [sh, -c, 'touch /out/{name}-prestop-ran; sleep 20']}}}}
    command: [sh, -c, '{side}; trap "exit 0" TERM; sleep 100000 & wait']
    volumeMounts: [{{name: out, mountPath: /out}}]
  containers:
  - name: app
    image: ${{CRILET_IMAGE_BUSYBOX}}
    restartPolicy: Never
    restartPolicyRules:
    - action: RestartAllContainers
      exitCodes: {{operator: In, values: [42]}}
    command: [sh, -c, '{app}; cp /scratch/setup /out/{name}-seen-$n; while [ ! -f /out/{name}-go ] || [ -f /out/{name}-done ]; do sleep 0.2; done; touch /out/{name}-done; exit 42']
    volumeMounts: [{{name: out, mountPath: /out}}, {{name: scratch, mountPath: /scratch}}]
"#,
        out = out.display(),
        setup = count(&format!("{name}-setup")),
        side = count(&format!("{name}-side")),
        app = count(&format!("{name}-app")),
    )
}

/// RestartAllContainers (KEP-5532): the app's exit 42 stops the sidecar at once (no preStop, no
/// grace), removes every container and runs the pod again in the same sandbox: the init
/// container (which finds its emptyDir file from the first run), the sidecar, the app, each
/// restartCount 1; the IP and sandbox are kept; the pod was never Failed though its policy is
/// Never; AllContainersRestarting is False once it is done. A second restart would need a
/// second trigger: there is none (the app now runs on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_all_containers_runs_the_pod_again_in_its_sandbox() {
    let a = Agent::start("rules_restart_all").await;
    let out = out_dir(&a);
    a.write_manifest("p.yaml", &restart_all_pod("again", &out));
    let first = wait_for("the pod running", Duration::from_secs(90), || async {
        let p = a.pod("again")?;
        (phase(&p) == "Running" && running(&p, "app") && running(&p, "side")).then_some(p)
    })
    .await;
    assert_eq!(condition(&first, "AllContainersRestarting"), Some("False"), "{}", first["status"]);
    let uid = first["metadata"]["uid"].as_str().expect("uid").to_string();
    let cri = a.env.cri();
    let sandbox = |o: crilet::model::ObservedPod| o.sandbox().map(|s| (s.id.clone(), s.ips.clone()));
    let before = sandbox(cri.observe(&uid).await.expect("observe"));
    let t0 = std::time::Instant::now();
    std::fs::write(out.join("again-go"), "").expect("go");
    let mut phases = Vec::new();
    let after = wait_for("every container run again", Duration::from_secs(90), || {
        let p = a.pod("again");
        if let Some(p) = &p {
            let ph = phase(p).to_string();
            if phases.last() != Some(&ph) {
                phases.push(ph);
            }
        }
        // The app past its first steps (the count and the copy of what the init container wrote):
        // the status can show a container running a moment before its shell has done anything.
        let seen = std::fs::read_to_string(out.join("again-seen-2")).unwrap_or_default();
        let ran = seen.lines().count() >= 2 && runs(&out, "again-side") >= 2;
        let done = p.filter(|p| {
            ran && running(p, "app")
                && restart_count(p, "app") == Some(1)
                && running(p, "side")
                && phase(p) == "Running"
        });
        async move { done }
    })
    .await;
    println!(
        "RestartAllContainers: exit → app running again in {:.1} s; phases {phases:?}",
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(sandbox(cri.observe(&uid).await.expect("observe")), before, "the same sandbox and IP");
    assert_eq!(after["metadata"]["uid"], first["metadata"]["uid"]);
    assert_eq!(after["status"]["podIP"], first["status"]["podIP"]);
    assert!(!phases.iter().any(|p| p == "Failed" || p == "Succeeded"), "{phases:?}");
    assert_eq!(runs(&out, "again-setup"), 2, "the init container ran again");
    assert_eq!(runs(&out, "again-side"), 2, "the sidecar ran again");
    assert_eq!(runs(&out, "again-app"), 2);
    // The emptyDir was kept: the second app run saw both init runs' lines.
    let seen = std::fs::read_to_string(out.join("again-seen-2")).expect("seen-2");
    assert_eq!(seen.lines().collect::<Vec<_>>(), ["run1", "run2"], "emptyDir kept across the restart");
    assert!(!out.join("again-prestop-ran").exists(), "no preStop on a RestartAllContainers");
    let init = &after["status"]["initContainerStatuses"];
    for name in ["setup", "side"] {
        let s = init.as_array().and_then(|a| a.iter().find(|c| c["name"] == name)).expect("init status");
        assert_eq!(s["restartCount"], 1, "{name}: {s}");
    }
    assert_eq!(restart_count(&after, "app"), Some(1));
    assert_eq!(condition(&after, "AllContainersRestarting"), Some("False"), "{}", after["status"]);
    let events = a.events_of("t-rules", "again");
    assert!(events.contains("RestartAllContainers"), "{events}");
}

/// An exit that asks for RestartAllContainers while the agent is down is acted on when it
/// comes back: everything runs again once, in the same sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_all_containers_survives_an_agent_restart() {
    let mut a = Agent::start("rules_restart_all_agent").await;
    let out = out_dir(&a);
    a.write_manifest("p.yaml", &restart_all_pod("later", &out));
    let first = wait_for("the pod running", Duration::from_secs(90), || async {
        let p = a.pod("later")?;
        (phase(&p) == "Running" && running(&p, "app") && running(&p, "side")).then_some(p)
    })
    .await;
    let uid = first["metadata"]["uid"].as_str().expect("uid").to_string();
    let cri = a.env.cri();
    let before = cri.observe(&uid).await.expect("observe").sandbox().map(|s| s.id.clone());
    a.kill();
    std::fs::write(out.join("later-go"), "").expect("go");
    // The app exits 42 with no agent to see it.
    wait_for("the app to exit while the agent is down", Duration::from_secs(30), || async {
        let o = cri.observe(&uid).await.ok()?;
        let app = o.newest("app")?;
        (app.state == crilet::model::ContainerState::Exited && app.exit_code == 42).then_some(())
    })
    .await;
    a.spawn();
    // Running as the status shows it, and past the first step of its command (the count).
    let after = wait_for("every container run again", Duration::from_secs(90), || async {
        let p = a.pod("later")?;
        let ran = runs(&out, "later-app") >= 2 && runs(&out, "later-side") >= 2;
        (ran && running(&p, "app") && restart_count(&p, "app") == Some(1) && running(&p, "side")).then_some(p)
    })
    .await;
    assert_eq!(cri.observe(&uid).await.expect("observe").sandbox().map(|s| s.id.clone()), before);
    assert_eq!(runs(&out, "later-setup"), 2);
    assert_eq!(runs(&out, "later-side"), 2);
    assert_eq!(runs(&out, "later-app"), 2);
    assert_eq!(after["status"]["podIP"], first["status"]["podIP"]);
}
