//! The QEMU guest of `hack/guest.sh` (systemd as PID 1, cgroup v2, containerd 2.1), driven over
//! ssh: the binary under test installed as `crilet.service` with `hack/install.sh`, static pods
//! written into its manifest directory, and waits on what the guest shows, with deadlines.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use std::io::Write;

use serde_json::Value;
use testkit::env::EnvFile;

use super::cluster::Cluster;

pub const BIN: &str = env!("CARGO_BIN_EXE_crilet");
pub const GUEST_ENV: &str = "/var/lib/crilet-dev/guest-run/env";
/// TCG runs the guest several times slower than the host: waits are generous.
pub const SLOW: Duration = Duration::from_secs(180);
/// Between two looks at the guest: one look is an ssh command on the open connection, a tenth
/// of a second, and each test waits on the guest some twenty times.
const POLL: Duration = Duration::from_millis(300);

/// The Node the guest joins the cluster as ([`Guest::join`]).
pub const NODE: &str = "crilet-guest";
/// The guest's kubelet API port: not forwarded out, and unlike any host node's, so the API
/// server's calls to it (logs, exec) fail plainly instead of reaching another node.
pub const GUEST_KUBELET_PORT: u16 = 10260;

pub struct Guest {
    pub env: EnvFile,
}

impl Guest {
    /// The running guest, with the binary under test installed as `crilet.service`, no manifest
    /// and no pod left from an earlier test, and the service running.
    pub fn fresh() -> Guest {
        let g = Guest::attach();
        g.install();
        g.ok("systemctl is-active --quiet crilet || systemctl start crilet");
        // What a test may have changed: the unit's drop-ins (a cluster node's among them: its
        // API pods are not the next test's), containerd's cgroup driver.
        g.ok("if ls /run/systemd/system/crilet.service.d/*.conf >/dev/null 2>&1; then rm -f /run/systemd/system/crilet.service.d/*.conf; systemctl daemon-reload; systemctl restart crilet; fi");
        g.ok("rm -f /etc/crilet/manifests/*");
        g.wait(
            "no pod left from an earlier test",
            SLOW,
            "[ \"$(crilet get pods -o json | grep -c '\"uid\"')\" = 0 ]",
        );
        g.ok(&format!(
            "if grep -q 'SystemdCgroup = true' /etc/containerd/config.toml; then {}; fi",
            driver_switch(false)
        ));
        g
    }

    /// The running guest as it is.
    pub fn attach() -> Guest {
        Guest { env: EnvFile::load(GUEST_ENV, "boot the guest first: hack/guest.sh up") }
    }

    /// The guest's run directory on the host (its console log, QEMU's pid file).
    pub fn run_dir(&self) -> PathBuf {
        self.share().parent().expect("the share is in the run dir").to_path_buf()
    }

    /// QEMU's PID.
    pub fn qemu_pid(&self) -> u32 {
        let text = std::fs::read_to_string(self.run_dir().join("qemu.pid")).expect("qemu.pid");
        text.trim().parse().expect("a pid in qemu.pid")
    }

    pub fn share(&self) -> PathBuf {
        PathBuf::from(self.env.get("CRILET_GUEST_SHARE"))
    }

    /// Copies the binary and the repo's install script and unit into the share, then runs
    /// `hack/install.sh` in the guest (it keeps an existing config).
    pub fn install(&self) {
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
        for f in ["crilet.service", "config.yaml", "kubeadm.conf"] {
            std::fs::copy(repo.join("systemd").join(f), share.join("repo/systemd").join(f))
                .expect("copy the unit");
        }
        // Whether the installed binary is the share's: by a stamp (size and mtime of the share's
        // copy, written at install), not by comparing the contents, which reads the 200 MB debug
        // binary over 9p again (5 s a test under TCG).
        const STAMP: &str = "/var/lib/crilet-test-installed";
        let installed = self.sh(&format!(
            "[ \"$(stat -c %s.%Y /mnt/host/crilet)\" = \"$(cat {STAMP} 2>/dev/null)\" ] && [ -x /usr/local/bin/crilet ] && [ -f /etc/crilet/config.yaml ] && cmp -s /mnt/host/repo/systemd/crilet.service /etc/systemd/system/crilet.service"
        ));
        if !installed.status.success() {
            self.ok(&format!(
                "systemctl stop crilet 2>/dev/null; CRILET_BIN=/mnt/host/crilet bash /mnt/host/repo/hack/install.sh && stat -c %s.%Y /mnt/host/crilet >{STAMP}"
            ));
        }
    }

    /// The Debian package of `hack/deb.sh` at `version`, holding the binary under test stripped
    /// (uncompressed: xz of the unoptimized binary is slow, and unpacking it under TCG); built
    /// into the share, its path inside the guest.
    pub fn package(&self, version: &str) -> String {
        let stripped = self.share().join("crilet-stripped");
        let fresh = std::fs::metadata(&stripped)
            .and_then(|s| s.modified())
            .is_ok_and(|t| std::fs::metadata(BIN).and_then(|b| b.modified()).is_ok_and(|b| b <= t));
        if !fresh {
            let status = Command::new("strip").arg("-o").arg(&stripped).arg(BIN).status();
            assert!(status.is_ok_and(|s| s.success()), "strip {BIN}");
        }
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = Command::new("bash")
            .arg(repo.join("hack/deb.sh"))
            .args(["--out"])
            .arg(self.share().join("deb"))
            .args(["--version", version, "--compression", "none"])
            .env("CRILET_BIN", &stripped)
            .output()
            .expect("run hack/deb.sh");
        assert!(out.status.success(), "hack/deb.sh failed:\n{}", String::from_utf8_lossy(&out.stderr));
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let name = Path::new(&path).file_name().expect("a .deb").to_string_lossy().to_string();
        format!("/mnt/host/deb/{name}")
    }

    /// Takes away `hack/install.sh`'s copy of the agent (its unit in /etc would shadow the
    /// package's), as on a node that never had it; [`Self::fresh`] puts it back.
    pub fn uninstall_dev_copy(&self) {
        self.ok("systemctl disable --now crilet; rm -f /etc/systemd/system/crilet.service /usr/local/bin/crilet /etc/crilet/config.yaml; systemctl daemon-reload");
    }

    /// ssh to the guest as root, over the one shared connection.
    fn ssh(&self) -> Command {
        let mut cmd = Command::new("ssh");
        cmd.args(["-i", &self.env.get("CRILET_GUEST_KEY"), "-p", &self.env.get("CRILET_GUEST_SSH_PORT")])
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
            .arg(format!("ControlPath={}", self.env.get("CRILET_GUEST_SSH_CONTROL")));
        cmd
    }

    /// A unix socket on the host forwarded to `127.0.0.1:port` inside the guest (the shared
    /// connection's `-O forward`; asking again for a forward it has is a no-op, so each use
    /// asks, and a master started anew since gets it too). Nothing of the guest's but its sshd
    /// is reachable from the host otherwise.
    pub fn forward(&self, port: u16) -> PathBuf {
        let sock = self.run_dir().join(format!("guest-{port}.sock"));
        self.ok("true"); // the shared connection up
        let ask = || {
            self.ssh()
                .args(["-O", "forward", "-L"])
                .arg(format!("{}:127.0.0.1:{port}", sock.display()))
                .arg("root@127.0.0.1")
                .output()
                .expect("run ssh -O forward")
        };
        let mut out = ask();
        if !out.status.success() {
            // A socket file left by a master that is gone: the new one cannot bind over it.
            let _ = std::fs::remove_file(&sock);
            out = ask();
        }
        assert!(
            out.status.success(),
            "forwarding {} to the guest's port {port}: {}",
            sock.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        sock
    }

    /// Runs `script` with bash in the guest.
    pub fn sh(&self, script: &str) -> Output {
        let mut child = self
            .ssh()
            .args(["root@127.0.0.1", "bash", "-s"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run ssh");
        child.stdin.take().expect("stdin").write_all(script.as_bytes()).expect("send the script");
        let started = std::time::Instant::now();
        let out = child.wait_with_output().expect("wait for ssh");
        // CRILET_GUEST_TRACE=1: where a guest test spends its time (TCG makes every step slow).
        if std::env::var_os("CRILET_GUEST_TRACE").is_some() {
            let first = script.lines().next().unwrap_or("").chars().take(100).collect::<String>();
            eprintln!("guest: {:>6.1}s {first}", started.elapsed().as_secs_f64());
        }
        out
    }

    /// [`Self::sh`], panicking with its output unless it succeeds; its stdout, trimmed.
    pub fn ok(&self, script: &str) -> String {
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
    pub fn wait(&self, what: &str, limit: Duration, script: &str) -> String {
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
            std::thread::sleep(POLL);
        }
    }

    /// Writes a static pod's manifest (busybox image placeholders filled in).
    pub fn manifest(&self, name: &str, yaml: &str) {
        let text = self.env.render(yaml);
        let staged = self.share().join(format!("{name}.yaml"));
        std::fs::write(&staged, text).expect("stage the manifest");
        // Renamed into place: `install` alone unlinks the old file first, and a pod whose
        // manifest is gone, even for a moment, is removed.
        self.ok(&format!(
            "install -m 0644 /mnt/host/{name}.yaml /etc/crilet/manifests/.{name}.tmp && mv -f /etc/crilet/manifests/.{name}.tmp /etc/crilet/manifests/{name}.yaml"
        ));
    }

    /// The agent's pod list (`crilet get pods -o json`).
    pub fn pods(&self) -> Vec<Value> {
        let json: Value = serde_json::from_str(&self.ok("crilet get pods -o json")).expect("pod list JSON");
        json["items"].as_array().cloned().unwrap_or_default()
    }

    pub fn pod(&self, name: &str) -> Value {
        self.pods()
            .into_iter()
            .find(|p| p["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no pod {name} in the agent's list"))
    }

    /// Waits until pod `name`, as the agent lists it, satisfies `ok`; the pod.
    pub fn wait_pod(&self, name: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let pod = self.pods().into_iter().find(|p| p["metadata"]["name"] == name);
            match pod {
                Some(p) if ok(&p) => return p,
                last if start.elapsed() > SLOW => {
                    panic!("timed out after {SLOW:?} waiting for {what}; last: {last:?}")
                }
                _ => std::thread::sleep(POLL),
            }
        }
    }

    /// Waits until pod `name` is Running with every container ready; the pod.
    pub fn running(&self, name: &str) -> Value {
        let check = format!(
            "crilet get pods | awk '$1 == \"{name}\" && $3 == \"Running\" {{ split($2, r, \"/\"); if (r[1] == r[2]) ok = 1 }} END {{ exit !ok }}'"
        );
        self.wait(&format!("pod {name} Running and ready"), SLOW, &check);
        self.pod(name)
    }

    /// Joins the guest's crilet to `hack/cluster.sh`'s control plane as [`NODE`], with `extra`
    /// flags: the node's identity from `hack/cluster.sh node`, its kubeconfig pointed at the
    /// guest's way to the host's API server (slirp's guestfwd), and the cluster flags in a
    /// drop-in of crilet.service (ExecStart, so no other test's drop-in may set it meanwhile).
    /// An earlier run's Node and pods are deleted first. The cluster and a new namespace.
    pub fn join(&self, extra: &str) -> (Cluster, String) {
        let cluster = Cluster::load();
        let _ = cluster.kubectl(&[
            "delete",
            "pods",
            "-A",
            "--field-selector",
            &format!("spec.nodeName={NODE}"),
            "--force",
            "--grace-period=0",
        ]);
        let _ = cluster.kubectl(&["delete", "node", NODE, "--wait=true"]);
        let namespace = format!("{NODE}-{:04x}", fastrand::u16(..));
        cluster.kubectl_ok(&["create", "namespace", &namespace]);
        let id = cluster.node_identity(NODE);
        let dir = self.share().join("node");
        std::fs::create_dir_all(&dir).expect("the share's node dir");
        let kubeconfig =
            std::fs::read_to_string(&id["CRILET_NODE_KUBECONFIG"]).expect("the node's kubeconfig");
        let server = id["CRILET_CLUSTER_SERVER"].as_str();
        assert!(kubeconfig.contains(server), "the kubeconfig names {server}");
        let guest_server = self.env.get("CRILET_GUEST_API_SERVER");
        std::fs::write(dir.join("kubeconfig"), kubeconfig.replace(server, &guest_server))
            .expect("kubeconfig");
        for (from, to) in [
            ("CRILET_NODE_TLS_CERT", "kubelet.crt"),
            ("CRILET_NODE_TLS_KEY", "kubelet.key"),
            ("CRILET_CLUSTER_CA", "ca.crt"),
        ] {
            std::fs::copy(&id[from], dir.join(to)).expect("the node's identity");
        }
        let flags = format!(
            "--kubeconfig /etc/crilet/node/kubeconfig --node-name {NODE} --node-ip 127.0.0.1 --port {GUEST_KUBELET_PORT} --tls-cert-file /etc/crilet/node/kubelet.crt --tls-private-key-file /etc/crilet/node/kubelet.key --client-ca-file /etc/crilet/node/ca.crt --node-labels crilet.io/test={NODE} {extra}"
        );
        self.ok(&format!(
            "install -d -m 0700 /etc/crilet/node && install -m 0600 /mnt/host/node/* /etc/crilet/node/ && mkdir -p /run/systemd/system/crilet.service.d && printf '[Service]\\nExecStart=\\nExecStart=/usr/local/bin/crilet run --config /etc/crilet/config.yaml {flags}\\nStandardOutput=journal+console\\n' >/run/systemd/system/crilet.service.d/cluster.conf && systemctl daemon-reload && systemctl restart crilet"
        ));
        let start = Instant::now();
        loop {
            let node = cluster.get_json(&["node", NODE]);
            let ready = node.as_ref().is_some_and(|n| condition(n, "Ready")["status"] == "True");
            let tainted = node.as_ref().is_some_and(|n| {
                n["spec"]["taints"]
                    .as_array()
                    .is_some_and(|t| t.iter().any(|t| t["key"] == "node.kubernetes.io/not-ready"))
            });
            if ready && !tainted {
                break;
            }
            assert!(
                start.elapsed() < SLOW,
                "the guest's Node {NODE} was not Ready within {SLOW:?}: {node:?}\nagent: {}",
                self.ok("journalctl -u crilet --no-pager -n 40 || true")
            );
            std::thread::sleep(POLL);
        }
        (cluster, namespace)
    }

    /// The first line of a cgroup file under /sys/fs/cgroup.
    pub fn cgroup_file(&self, cgroup: &str, file: &str) -> String {
        self.ok(&format!("cat /sys/fs/cgroup{cgroup}/{file}"))
    }
}

/// The condition of type `t` of an API object's status (Null when it has none).
pub fn condition(obj: &Value, t: &str) -> Value {
    obj["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == t).cloned())
        .unwrap_or(Value::Null)
}

/// Polls `f` until it gives something; panics with `what` at the deadline.
pub fn wait_until<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out after {limit:?} waiting for {what}");
        std::thread::sleep(POLL);
    }
}

/// (container name, container ID, restart count) of every container of `pod`.
pub fn instances(pod: &Value) -> Vec<(String, String, i64)> {
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

pub fn container_id(pod: &Value, name: &str) -> String {
    let (_, id, _) = instances(pod).into_iter().find(|(n, _, _)| n == name).expect("container status");
    id.trim_start_matches("containerd://").to_string()
}

/// The guest's shell commands that put containerd and crilet on the systemd cgroup driver (or,
/// with `false`, back on cgroupfs; the agent's flag then comes from the unit alone). No pod may
/// run meanwhile: the two drivers do not share pods.
pub fn driver_switch(systemd: bool) -> String {
    let flag = if systemd {
        "mkdir -p /run/systemd/system/crilet.service.d && printf '[Service]\\nExecStart=\\nExecStart=/usr/local/bin/crilet run --config /etc/crilet/config.yaml --cgroup-driver systemd\\n' >/run/systemd/system/crilet.service.d/driver.conf"
    } else {
        "rm -f /run/systemd/system/crilet.service.d/driver.conf"
    };
    runtime_driver_switch(systemd, flag)
}

/// The guest's shell commands that put containerd on the systemd cgroup driver (or back on
/// cgroupfs), running `then` while crilet is stopped; crilet follows the driver containerd
/// reports (CRI RuntimeConfig) unless a flag says otherwise. No pod may run meanwhile.
pub fn runtime_driver_switch(systemd: bool, then: &str) -> String {
    let (from, to) = if systemd { ("false", "true") } else { ("true", "false") };
    format!(
        "systemctl stop crilet && sed -i 's/SystemdCgroup = {from}/SystemdCgroup = {to}/' /etc/containerd/config.toml && systemctl restart containerd && {then} && systemctl daemon-reload && systemctl start crilet"
    )
}
