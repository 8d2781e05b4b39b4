//! Custom stop signals (KEP-4960, `lifecycle.stopSignal`) against the real runtime.
//!
//! On a containerd that honours CRI `ContainerConfig.stop_signal` (2.3+; hack/test.sh's 2.3
//! leg runs this file with `CRILET_ENV_FILE=/run/crilet-dev/env-2.3`), deleting the pod makes
//! the runtime send the container's own signal: a shell that traps only SIGUSR1 writes a
//! marker file and exits, while SIGTERM (ignored by a PID 1 without a trap) would leave it to
//! the SIGKILL at the end of the grace period, with no marker. Its status reports SIGUSR1, and
//! a container without the field reports the runtime's default, SIGTERM.
//!
//! On one that ignores the field (2.1, 1.6), the pod gets a `StopSignalIgnored` warning naming
//! the container, the signal and the runtime, the status shows no `stopSignal`, the signal is
//! never sent, and `crilet preflight` has a WARN line for it.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// Grace period of the test pod: long enough that a SIGKILL at its end cannot be mistaken for
/// the signal having worked (the honouring leg must see the marker well before it).
const GRACE_HONOURED: u64 = 30;
/// On a runtime that ignores the signal the container waits for the SIGKILL: keep that short.
const GRACE_IGNORED: u64 = 4;

fn pod(out: &Path, grace: u64) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: stopsig, namespace: t-stopsig}}
spec:
  os: {{name: linux}}
  terminationGracePeriodSeconds: {grace}
  volumes:
  - name: out
    hostPath: {{path: {out}, type: DirectoryOrCreate}}
  containers:
  - name: usr1
    image: ${{CRILET_IMAGE_BUSYBOX}}
    lifecycle: {{stopSignal: SIGUSR1}}
    # Only SIGUSR1 is trapped; SIGTERM is ignored (PID 1 without a handler).
    command: [sh, -c, 'trap "echo USR1 > /out/usr1; exit 42" USR1; while true; do sleep 0.2; done']
    volumeMounts: [{{name: out, mountPath: /out}}]
  - name: plain
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, 'trap "echo TERM > /out/plain; exit 0" TERM; while true; do sleep 0.2; done']
    volumeMounts: [{{name: out, mountPath: /out}}]
"#,
        out = out.display()
    )
}

/// Does the runtime under test honour stop signals? (The env file names it: 2.3 does, the
/// Debian 2.1 and 1.6 do not.)
fn honours(env: &Env) -> bool {
    env.get("CRILET_RUNTIME") == "2.3"
}

fn stop_signal(p: &Value, container: &str) -> Option<String> {
    cstatus(p, container).and_then(|c| c.get("stopSignal")).and_then(Value::as_str).map(str::to_string)
}

/// The `stop-signals` line of `crilet preflight` against the runtime under test (verdict, detail).
fn preflight_line(env: &Env) -> (String, String) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dirs = ["manifests", "root", "logs", "containers"].map(|d| tmp.path().join(d));
    for d in &dirs {
        std::fs::create_dir(d).expect("mkdir");
    }
    let out = Command::new(bin())
        .args(["preflight", "--container-runtime-endpoint", &env.endpoint()])
        .arg("--pod-manifest-path")
        .arg(&dirs[0])
        .arg("--root-dir")
        .arg(&dirs[1])
        .arg("--pod-logs-dir")
        .arg(&dirs[2])
        .arg("--container-logs-dir")
        .arg(&dirs[3])
        .arg("--control-socket")
        .arg(tmp.path().join("c.sock"))
        .output()
        .expect("run crilet preflight");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = stdout
        .lines()
        .find_map(|l| {
            let (verdict, rest) = l.split_once(' ')?;
            let (name, detail) = rest.trim_start().split_once(' ')?;
            (name == "stop-signals").then(|| (verdict.to_string(), detail.trim_start().to_string()))
        })
        .unwrap_or_else(|| panic!("no stop-signals line in:\n{stdout}"));
    eprintln!("preflight: {} stop-signals {}", line.0, line.1);
    line
}

#[tokio::test(flavor = "multi_thread")]
async fn a_custom_stop_signal_is_sent_or_reported_as_ignored() {
    let env = Env::load();
    let honoured = honours(&env);
    let a = Agent::start("stop-signal").await;
    let out = a.dir.join("out");
    let grace = if honoured { GRACE_HONOURED } else { GRACE_IGNORED };
    a.write_manifest("stopsig.yaml", &pod(&out, grace));
    let p = running_pod(&a, "stopsig").await;
    eprintln!("containerd {} (honours stop signals: {honoured})", env.get("CRILET_RUNTIME_VERSION"));

    let warning = |events: &str| events.lines().find(|l| l.contains("StopSignalIgnored")).map(str::to_string);
    if honoured {
        assert_eq!(stop_signal(&p, "usr1").as_deref(), Some("SIGUSR1"), "{p:#}");
        // The effective default, as the runtime reports it (no image STOPSIGNAL here).
        assert_eq!(stop_signal(&p, "plain").as_deref(), Some("SIGTERM"), "{p:#}");
        let events = a.events_of("t-stopsig", "stopsig");
        assert_eq!(warning(&events), None, "{events}");
        let (verdict, detail) = preflight_line(&env);
        assert_eq!(verdict, "PASS", "{detail}");
    } else {
        let line = wait_for("the StopSignalIgnored warning", Duration::from_secs(20), || async {
            warning(&a.events_of("t-stopsig", "stopsig"))
        })
        .await;
        eprintln!("event: {line}");
        for word in ["Warning", "usr1", "SIGUSR1", &env.get("CRILET_RUNTIME_VERSION")] {
            assert!(line.contains(word), "{word:?} missing from: {line}");
        }
        let events = a.events_of("t-stopsig", "stopsig");
        assert_eq!(events.matches("StopSignalIgnored").count(), 1, "only usr1 asked for a signal:\n{events}");
        // Never claim the signal was used: the status shows what the runtime reports, nothing.
        assert_eq!(stop_signal(&p, "usr1"), None, "{p:#}");
        assert_eq!(stop_signal(&p, "plain"), None, "{p:#}");
        let (verdict, detail) = preflight_line(&env);
        assert_eq!(verdict, "WARN", "{detail}");
        assert!(detail.contains("ignores lifecycle.stopSignal"), "{detail}");
    }

    let deleted = Instant::now();
    a.remove_manifest("stopsig.yaml");
    wait_for("the pod gone", Duration::from_secs(grace + 30), || async {
        a.pods().filter(|ps| !ps.iter().any(|p| p["metadata"]["name"] == "stopsig")).map(|_| ())
    })
    .await;
    let took = deleted.elapsed();
    let usr1 = std::fs::read_to_string(out.join("usr1")).ok();
    let plain = std::fs::read_to_string(out.join("plain")).ok();
    eprintln!("pod deleted in {took:.1?} (grace {grace}s); usr1 marker {usr1:?}, plain marker {plain:?}");
    assert_eq!(plain.as_deref(), Some("TERM\n"), "the default signal reached the plain container");
    if honoured {
        assert_eq!(usr1.as_deref(), Some("USR1\n"), "the runtime sent SIGUSR1\n{}", a.log());
        // It exited on SIGUSR1 at once, not on the SIGKILL at the end of the grace period.
        assert!(took < Duration::from_secs(GRACE_HONOURED / 2), "took {took:?}\n{}", a.log());
    } else {
        assert_eq!(usr1, None, "SIGUSR1 was sent by a runtime said to ignore it");
        assert!(
            took >= Duration::from_secs(GRACE_IGNORED - 1),
            "SIGTERM was ignored, so the SIGKILL ended it"
        );
    }
}
