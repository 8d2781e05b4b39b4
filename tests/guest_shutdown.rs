//! Graceful node shutdown on a real systemd: `systemctl poweroff` in `hack/guest.sh`'s guest,
//! with crilet holding logind's delay lock. The pods' preStop hooks and SIGTERM handlers write
//! to the host's share, so what they did is still there once the guest is gone; the agent's log
//! goes to the guest's console (its serial log on the host) for the same reason.
//!
//! It powers the guest off, so hack/test.sh's guest leg runs it last, on its own.

mod common;

use std::time::{Duration, Instant};

use common::guest::{Guest, SLOW};

/// A pod that logs its preStop hook and its SIGTERM to the share (`/mnt/host/shutdown`).
fn pod(name: &str, priority: Option<i32>) -> String {
    let priority = priority.map(|p| format!("  priority: {p}\n")).unwrap_or_default();
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
{priority}  terminationGracePeriodSeconds: 30
  volumes:
  - name: out
    hostPath: {{path: /mnt/host/shutdown, type: Directory}}
  containers:
  - name: app
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, "trap 'echo {name} term >>/out/log; exit 0' TERM; while true; do sleep 1; done"]
    volumeMounts: [{{name: out, mountPath: /out}}]
    lifecycle:
      preStop:
        exec: {{command: [sh, -c, "echo {name} prestop >>/out/log"]}}
"#
    )
}

#[test]
#[ignore = "powers the guest off: hack/test.sh's guest leg runs it last"]
fn poweroff_stops_regular_pods_then_critical_ones_before_the_node_goes() {
    let g = Guest::fresh();
    let log = g.share().join("shutdown/log");
    std::fs::create_dir_all(log.parent().expect("dir")).expect("the share's shutdown dir");
    let _ = std::fs::remove_file(&log);
    // 20 s in all, 8 of them for critical pods; the agent's log on the console too.
    g.ok("mkdir -p /run/systemd/system/crilet.service.d && printf '[Service]\\nExecStart=\\nExecStart=/usr/local/bin/crilet run --config /etc/crilet/config.yaml --shutdown-grace-period 20s --shutdown-grace-period-critical-pods 8s\\nStandardOutput=journal+console\\n' >/run/systemd/system/crilet.service.d/shutdown.conf && systemctl daemon-reload && systemctl restart crilet");
    g.manifest("regular", &pod("regular", None));
    g.manifest("critical", &pod("critical", Some(2_000_000_000)));
    g.running("regular");
    g.running("critical");

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
    while std::path::Path::new(&format!("/proc/{qemu}")).exists() {
        assert!(start.elapsed() < SLOW, "the guest did not power off within {SLOW:?}");
        std::thread::sleep(Duration::from_millis(500));
    }

    // Regular pods first (hook, then SIGTERM), critical ones after.
    let written = std::fs::read_to_string(&log).unwrap_or_default();
    let lines: Vec<&str> = written.lines().collect();
    assert_eq!(
        lines,
        ["regular prestop", "regular term", "critical prestop", "critical term"],
        "what the pods did as the node shut down"
    );
    let console = std::fs::read_to_string(g.run_dir().join("serial.log")).unwrap_or_default();
    for said in ["the node is shutting down", "node shutdown: every pod stopped", "delay lock released"] {
        assert!(console.contains(said), "the agent's log on the console says {said:?}");
    }
}
