//! crilet on a node as production runs them: `hack/guest.sh`'s QEMU guest, with systemd 252 as
//! PID 1, cgroup v2, containerd 2.1 and bookworm's runc. Each test installs the binary under
//! test with `hack/install.sh` (the unit of `systemd/`), starts `crilet.service` through systemd
//! and looks at the guest over ssh: pod cgroups in the unified tree, the service's restart and
//! its watchdog.
//!
//! Ignored by a plain `cargo test`: they need `hack/guest.sh up`. hack/test.sh's guest leg runs
//! them with `--ignored --test-threads=1` (they share the one guest).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use std::io::Write;

use serde_json::Value;
use testkit::env::EnvFile;

const BIN: &str = env!("CARGO_BIN_EXE_crilet");
const GUEST_ENV: &str = "/var/lib/crilet-dev/guest-run/env";
/// TCG runs the guest several times slower than the host: waits are generous.
const SLOW: Duration = Duration::from_secs(180);

struct Guest {
    env: EnvFile,
}

impl Guest {
    /// The running guest, with the binary under test installed as `crilet.service`, no manifest
    /// and no pod left from an earlier test, and the service running.
    fn fresh() -> Guest {
        let g = Guest { env: EnvFile::load(GUEST_ENV, "boot the guest first: hack/guest.sh up") };
        g.install();
        g.ok("rm -f /run/systemd/system/crilet.service.d/*.conf; systemctl daemon-reload");
        g.ok("systemctl is-active --quiet crilet || systemctl start crilet");
        g.ok("rm -f /etc/crilet/manifests/*");
        g.wait(
            "no pod left from an earlier test",
            SLOW,
            "[ \"$(crilet get pods -o json | grep -c '\"uid\"')\" = 0 ]",
        );
        g
    }

    fn share(&self) -> PathBuf {
        PathBuf::from(self.env.get("CRILET_GUEST_SHARE"))
    }

    /// Copies the binary and the repo's install script and unit into the share, then runs
    /// `hack/install.sh` in the guest (it keeps an existing config).
    fn install(&self) {
        let share = self.share();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let dest = share.join("crilet");
        let same = |a: &Path, b: &Path| {
            let (Ok(a), Ok(b)) = (std::fs::metadata(a), std::fs::metadata(b)) else { return false };
            a.len() == b.len() && a.modified().ok() <= b.modified().ok()
        };
        if !same(Path::new(BIN), &dest) {
            std::fs::copy(BIN, &dest).expect("copy crilet into the guest's share");
        }
        std::fs::create_dir_all(share.join("repo/systemd")).expect("share/repo/systemd");
        let status = Command::new("cp")
            .args(["-r", "--no-target-directory"])
            .arg(repo.join("hack"))
            .arg(share.join("repo/hack"))
            .status();
        assert!(status.is_ok_and(|s| s.success()), "copy hack/ into the share");
        for f in ["crilet.service", "config.yaml"] {
            std::fs::copy(repo.join("systemd").join(f), share.join("repo/systemd").join(f))
                .expect("copy the unit");
        }
        let installed = self.sh("cmp -s /mnt/host/crilet /usr/local/bin/crilet && cmp -s /mnt/host/repo/systemd/crilet.service /etc/systemd/system/crilet.service");
        if !installed.status.success() {
            self.ok("systemctl stop crilet 2>/dev/null; CRILET_BIN=/mnt/host/crilet bash /mnt/host/repo/hack/install.sh");
        }
    }

    /// Runs `script` with bash in the guest.
    fn sh(&self, script: &str) -> Output {
        let mut child = Command::new("ssh")
            .args(["-i", &self.env.get("CRILET_GUEST_KEY"), "-p", &self.env.get("CRILET_GUEST_SSH_PORT")])
            .args([
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
                "-o",
                "LogLevel=ERROR",
            ])
            .args(["-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5"])
            // One connection for all (a new one costs a key exchange, slow on TCG).
            .args(["-o", "ControlMaster=auto", "-o", "ControlPersist=60"])
            .arg("-o")
            .arg(format!("ControlPath={}", self.env.get("CRILET_GUEST_SSH_CONTROL")))
            .args(["root@127.0.0.1", "bash", "-s"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run ssh");
        child.stdin.take().expect("stdin").write_all(script.as_bytes()).expect("send the script");
        child.wait_with_output().expect("wait for ssh")
    }

    /// [`Self::sh`], panicking with its output unless it succeeds; its stdout, trimmed.
    fn ok(&self, script: &str) -> String {
        let out = self.sh(script);
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            out.status.success(),
            "in the guest: {script}\nexit {:?}\nstdout: {text}\nstderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }

    /// Runs `script` until it succeeds; its stdout. Panics at the deadline with the last output.
    fn wait(&self, what: &str, limit: Duration, script: &str) -> String {
        let start = Instant::now();
        loop {
            let out = self.sh(script);
            if out.status.success() {
                return String::from_utf8_lossy(&out.stdout).trim().to_string();
            }
            if start.elapsed() > limit {
                panic!(
                    "timed out after {limit:?} waiting for {what}\nlast stdout: {}\nlast stderr: {}\nagent: {}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr),
                    self.ok("journalctl -u crilet --no-pager -n 30 || true")
                );
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// Writes a static pod's manifest (busybox image placeholders filled in).
    fn manifest(&self, name: &str, yaml: &str) {
        let text = self.env.render(yaml);
        let staged = self.share().join(format!("{name}.yaml"));
        std::fs::write(&staged, text).expect("stage the manifest");
        self.ok(&format!("install -m 0644 /mnt/host/{name}.yaml /etc/crilet/manifests/{name}.yaml"));
    }

    /// The agent's pod list (`crilet get pods -o json`).
    fn pods(&self) -> Vec<Value> {
        let json: Value = serde_json::from_str(&self.ok("crilet get pods -o json")).expect("pod list JSON");
        json["items"].as_array().cloned().unwrap_or_default()
    }

    fn pod(&self, name: &str) -> Value {
        self.pods()
            .into_iter()
            .find(|p| p["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no pod {name} in the agent's list"))
    }

    /// Waits until pod `name` is Running with every container ready; the pod.
    fn running(&self, name: &str) -> Value {
        let check = format!(
            "crilet get pods | awk '$1 == \"{name}\" && $3 == \"Running\" {{ split($2, r, \"/\"); if (r[1] == r[2]) ok = 1 }} END {{ exit !ok }}'"
        );
        self.wait(&format!("pod {name} Running and ready"), SLOW, &check);
        self.pod(name)
    }

    /// The first line of a cgroup file under /sys/fs/cgroup.
    fn cgroup_file(&self, cgroup: &str, file: &str) -> String {
        self.ok(&format!("cat /sys/fs/cgroup{cgroup}/{file}"))
    }
}

/// (container name, container ID, restart count) of every container of `pod`.
fn instances(pod: &Value) -> Vec<(String, String, i64)> {
    let status = &pod["status"];
    let mut out: Vec<(String, String, i64)> = ["initContainerStatuses", "containerStatuses"]
        .iter()
        .flat_map(|k| status[*k].as_array().cloned().unwrap_or_default())
        .map(|c| {
            let id = c["containerID"].as_str().unwrap_or_default().to_string();
            (c["name"].as_str().unwrap_or_default().to_string(), id, c["restartCount"].as_i64().unwrap_or(-1))
        })
        .collect();
    out.sort();
    out
}

fn container_id(pod: &Value, name: &str) -> String {
    let (_, id, _) = instances(pod).into_iter().find(|(n, _, _)| n == name).expect("container status");
    id.trim_start_matches("containerd://").to_string()
}

const GUARANTEED: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: guaranteed, namespace: default}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sleep, "3600"]
    resources:
      limits: {cpu: 500m, memory: 64Mi}
"#;

const BURSTABLE: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: burstable, namespace: default}
spec:
  terminationGracePeriodSeconds: 2
  initContainers:
  - name: side
    image: ${CRILET_IMAGE_BUSYBOX}
    restartPolicy: Always
    command: [sleep, "3600"]
  containers:
  - name: app
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sleep, "3600"]
    resources:
      requests: {cpu: 100m, memory: 32Mi}
      limits: {cpu: 250m, memory: 48Mi}
"#;

#[test]
#[ignore = "needs hack/guest.sh up (hack/test.sh's guest leg)"]
fn pods_get_their_cgroups_in_the_unified_tree() {
    let g = Guest::fresh();
    assert_eq!(g.ok("stat -fc %T /sys/fs/cgroup"), "cgroup2fs", "the guest must run cgroup v2");
    g.manifest("guaranteed", GUARANTEED);
    g.manifest("burstable", BURSTABLE);
    let guaranteed = g.running("guaranteed");
    let burstable = g.running("burstable");

    // A Guaranteed pod sits right under kubepods, limited as a whole (the kubelet's pod
    // container manager: every container has limits, so the pod has their sum).
    let uid = guaranteed["metadata"]["uid"].as_str().expect("uid").to_string();
    let pod = format!("/kubepods/pod{uid}");
    assert_eq!(g.cgroup_file(&pod, "cpu.max"), "50000 100000", "{pod}: 500m a 100 ms period");
    assert_eq!(g.cgroup_file(&pod, "memory.max"), (64 << 20).to_string(), "{pod}: 64Mi");
    let app = format!("{pod}/{}", container_id(&guaranteed, "app"));
    assert_eq!(g.cgroup_file(&app, "memory.max"), (64 << 20).to_string(), "{app}");
    assert_eq!(g.cgroup_file(&app, "cpu.max"), "50000 100000", "{app}");

    // A Burstable pod whose sidecar has no limits: no pod-level limit (one container unlimited
    // leaves the pod unlimited), while the app's own cgroup has its limits.
    let uid = burstable["metadata"]["uid"].as_str().expect("uid").to_string();
    let pod = format!("/kubepods/burstable/pod{uid}");
    assert_eq!(g.cgroup_file(&pod, "cpu.max"), "max 100000", "{pod}");
    assert_eq!(g.cgroup_file(&pod, "memory.max"), "max", "{pod}");
    let app = format!("{pod}/{}", container_id(&burstable, "app"));
    assert_eq!(g.cgroup_file(&app, "memory.max"), (48 << 20).to_string(), "{app}");
    assert_eq!(g.cgroup_file(&app, "cpu.max"), "25000 100000", "{app}");

    // Removing the manifests removes the pods and their cgroups.
    g.ok("rm -f /etc/crilet/manifests/guaranteed.yaml /etc/crilet/manifests/burstable.yaml");
    g.wait(
        "the pods' cgroups to be removed",
        SLOW,
        &format!(
            "! ls -d /sys/fs/cgroup/kubepods/pod{} {pod} 2>/dev/null",
            guaranteed["metadata"]["uid"].as_str().unwrap_or("")
        ),
    );
}

#[test]
#[ignore = "needs hack/guest.sh up (hack/test.sh's guest leg)"]
fn restarting_the_service_keeps_every_container() {
    let g = Guest::fresh();
    g.manifest("burstable", BURSTABLE);
    let before = instances(&g.running("burstable"));
    let main_pid = g.ok("systemctl show -p MainPID --value crilet");
    // `systemctl restart` returns once the new agent sent READY=1 (Type=notify).
    g.ok("systemctl restart crilet");
    assert_ne!(g.ok("systemctl show -p MainPID --value crilet"), main_pid, "a new agent runs");
    assert_eq!(g.ok("systemctl is-active crilet"), "active");
    let after = instances(&g.running("burstable"));
    assert_eq!(after, before, "the same instances with the same restart counts after the restart");
    g.ok("rm -f /etc/crilet/manifests/burstable.yaml");
}

#[test]
#[ignore = "needs hack/guest.sh up (hack/test.sh's guest leg)"]
fn a_hung_agent_is_restarted_by_the_watchdog_and_no_container_with_it() {
    let g = Guest::fresh();
    g.manifest("burstable", BURSTABLE);
    // The unit's 60 s watchdog, shortened for the test (the agent pings at half of whatever
    // WATCHDOG_USEC systemd gives it); the abort's wait too.
    g.ok("mkdir -p /run/systemd/system/crilet.service.d && printf '[Service]\\nWatchdogSec=10s\\nTimeoutAbortSec=5s\\n' >/run/systemd/system/crilet.service.d/watchdog.conf && systemctl daemon-reload && systemctl restart crilet");
    let before = instances(&g.running("burstable"));
    let restarts: u32 = g.ok("systemctl show -p NRestarts --value crilet").parse().expect("NRestarts");
    let pid = g.ok("systemctl show -p MainPID --value crilet");
    // Hung: its threads stop, pings stop; the watchdog fires 10 s after the last one.
    g.ok(&format!("kill -STOP {pid}"));
    g.wait(
        "systemd to restart the hung agent",
        SLOW,
        &format!(
            "[ \"$(systemctl show -p NRestarts --value crilet)\" -gt {restarts} ] && [ \"$(systemctl show -p MainPID --value crilet)\" != {pid} ] && systemctl is-active --quiet crilet"
        ),
    );
    let journal = g.ok("journalctl -u crilet --no-pager -n 200");
    assert!(journal.contains("Watchdog timeout"), "systemd's reason is the watchdog:\n{journal}");
    let after = instances(&g.running("burstable"));
    assert_eq!(after, before, "no container restarted with the agent");
    g.ok("rm -f /run/systemd/system/crilet.service.d/watchdog.conf /etc/crilet/manifests/burstable.yaml; systemctl daemon-reload");
}
