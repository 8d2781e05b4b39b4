//! Graceful node shutdown on a real systemd: `systemctl poweroff` in `hack/guest.sh`'s guest,
//! with crilet holding logind's delay lock and joined to `hack/cluster.sh`'s control plane. The
//! pods' preStop hooks and SIGTERM handlers write to the host's share, so what they did is still
//! there once the guest is gone; the agent's log goes to the guest's console (its serial log on
//! the host) for the same reason; the API keeps what the node reported last.
//!
//! It powers the guest off, so hack/test.sh's guest leg runs it last, on its own.

mod common;

use std::time::{Duration, Instant};

use common::guest::{Guest, NODE, SLOW, condition, wait_until};
use serde_json::Value;

/// A pod that logs its preStop hook and its SIGTERM to file `log` of the share's
/// `/mnt/host/shutdown`; its hook then takes `hook_s` seconds more.
fn pod(name: &str, namespace: &str, critical: bool, hook_s: u32, log: &str) -> String {
    // As kubeadm's static pods have it (the class, for the mirror pod's admission).
    let priority =
        if critical { "  priorityClassName: system-node-critical\n  priority: 2000001000\n" } else { "" };
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  nodeName: {NODE}
{priority}  terminationGracePeriodSeconds: 30
  volumes:
  - name: out
    hostPath: {{path: /mnt/host/shutdown, type: Directory}}
  containers:
  - name: app
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, "trap 'echo {name} term >>/out/{log}; exit 0' TERM; while true; do sleep 1; done"]
    volumeMounts: [{{name: out, mountPath: /out}}]
    lifecycle:
      preStop:
        exec: {{command: [sh, -c, "echo {name} prestop >>/out/{log}; sleep {hook_s}"]}}
"#
    )
}

#[test]
#[ignore = "powers the guest off: hack/test.sh's guest leg runs it last"]
fn poweroff_stops_regular_pods_then_critical_ones_before_the_node_goes() {
    let g = Guest::fresh();
    // 20 s in all, 8 of them for critical pods; the agent's log on the console too.
    let (cluster, ns) = g.join("--shutdown-grace-period 20s --shutdown-grace-period-critical-pods 8s");
    // This run's own log (an earlier run's pods may still be stopping).
    let name = format!("{ns}.log");
    let log = g.share().join("shutdown").join(&name);
    std::fs::create_dir_all(log.parent().expect("dir")).expect("the share's shutdown dir");
    // Static pods, and a regular API pod whose hook holds its group for a few seconds.
    g.manifest("regular", &pod("regular", "default", false, 0, &name));
    g.manifest("critical", &pod("critical", "default", true, 0, &name));
    cluster.create(&g.env.render(&pod("api", &ns, false, 5, &name)));
    g.running("regular");
    g.running("critical");
    wait_until("the API pod Running and Ready", SLOW, || {
        cluster.get_json(&["pod", "-n", &ns, "api"]).filter(|p| condition(p, "Ready")["status"] == "True")
    });

    // logind's 5 s default was raised to the period, and the agent holds a delay lock.
    let delay = g.ok("busctl get-property org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager InhibitDelayMaxUSec");
    assert_eq!(delay, "t 20000000", "logind's InhibitDelayMaxUSec");
    assert!(g.ok("cat /etc/systemd/logind.conf.d/99-crilet.conf").contains("InhibitDelayMaxSec=20"));
    let locks = g.ok("systemd-inhibit --list --no-legend --no-pager");
    assert!(
        locks.lines().any(|l| l.contains("crilet") && l.contains("shutdown") && l.contains("delay")),
        "crilet's delay lock on shutdown:\n{locks}"
    );

    let qemu = g.qemu_pid();
    let _ = g.sh("systemctl poweroff");
    let start = Instant::now();
    let mut late = false;
    while std::path::Path::new(&format!("/proc/{qemu}")).exists() {
        assert!(start.elapsed() < SLOW, "the guest did not power off within {SLOW:?}");
        // While the regular pods stop, a new API pod arrives: the node refuses it.
        if !late && std::fs::read_to_string(&log).is_ok_and(|l| l.contains("api prestop")) {
            cluster.create(&g.env.render(&pod("late", &ns, false, 0, &name)));
            late = true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(late, "the API pod's hook ran before the guest went");

    // Regular pods first (each its hook, then SIGTERM), critical ones after.
    let written = std::fs::read_to_string(&log).unwrap_or_default();
    let lines: Vec<&str> = written.lines().collect();
    assert_eq!(lines.len(), 6, "what the pods did as the node shut down: {lines:?}");
    let at = |l: &str| lines.iter().position(|x| *x == l).unwrap_or_else(|| panic!("{l:?} in {lines:?}"));
    for p in ["regular", "api"] {
        assert!(
            at(&format!("{p} prestop")) < at(&format!("{p} term")),
            "{p}'s hook before its SIGTERM: {lines:?}"
        );
        assert!(at(&format!("{p} term")) < at("critical prestop"), "{p} before the critical pod: {lines:?}");
    }
    assert_eq!(lines[4..], ["critical prestop", "critical term"], "{lines:?}");

    // What the API keeps of the node and its pods once the guest is gone.
    let api =
        |name: &str| cluster.get_json(&["pod", "-n", &ns, name]).unwrap_or_else(|| panic!("API pod {name}"));
    let stopped = api("api");
    assert_eq!(stopped["status"]["phase"], "Failed", "{stopped}");
    assert_eq!(stopped["status"]["reason"], "Terminated");
    assert_eq!(stopped["status"]["message"], "Pod was terminated in response to imminent node shutdown.");
    let disruption = condition(&stopped, "DisruptionTarget");
    assert_eq!(
        (&disruption["status"], &disruption["reason"]),
        (&Value::from("True"), &Value::from("TerminationByKubelet"))
    );
    let refused = api("late");
    assert_eq!(refused["status"]["phase"], "Failed", "{refused}");
    assert_eq!(refused["status"]["reason"], "NodeShutdown");
    assert_eq!(refused["status"]["message"], "Pod was rejected as the node is shutting down.");
    let mirror = cluster.get_json(&["pod", "-n", "default", "regular"]).expect("regular's mirror pod");
    assert_eq!(mirror["status"]["phase"], "Failed", "the static pod's mirror: {mirror}");
    let node = cluster.get_json(&["node", NODE]).expect("the guest's Node");
    let ready = condition(&node, "Ready");
    assert_eq!(ready["status"], "False", "{ready}");
    assert!(ready["message"].as_str().is_some_and(|m| m.contains("node is shutting down")), "{ready}");
    let console = std::fs::read_to_string(g.run_dir().join("serial.log")).unwrap_or_default();
    for said in ["the node is shutting down", "node shutdown: every pod stopped", "delay lock released"] {
        assert!(console.contains(said), "the agent's log on the console says {said:?}");
    }
}
