//! Harness for the integration tests: the containerd, registry and images that `hack/setup.sh`
//! prepared, one crilet agent process per test (own manifest dir, root dir, logs dir and control
//! socket; pods in a namespace of the test's own), and waits on observable state with deadlines.
#![allow(dead_code)]

pub mod cluster;
pub mod corpus;
pub mod cri_proxy;
pub mod guest;
pub mod kubectl_top;
pub mod private_containerd;
pub mod summary;
pub mod traffic;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crilet::cri::CriClient;
use crilet::model::keys;
use serde_json::Value;

pub use testkit::{env_file, wait_for};

/// The test environment written by `hack/setup.sh`: the env file of the runtime under test
/// ([`env_file`]: `CRILET_ENV_FILE`, else `/run/crilet-dev/env`), parsed by the test kit.
pub struct Env(testkit::EnvFile);

impl std::ops::Deref for Env {
    type Target = testkit::EnvFile;
    fn deref(&self) -> &testkit::EnvFile {
        &self.0
    }
}

impl std::ops::DerefMut for Env {
    fn deref_mut(&mut self) -> &mut testkit::EnvFile {
        &mut self.0
    }
}

impl Env {
    pub fn load() -> Env {
        Env(testkit::EnvFile::load(
            env_file(),
            "run `hack/setup.sh` first (or the whole suite with `hack/test.sh`)",
        ))
    }

    pub fn cri(&self) -> CriClient {
        let e = self.endpoint();
        CriClient::new(&e, &e).expect("CRI client")
    }
}

/// One agent process and its directories.
pub struct Agent {
    pub name: String,
    pub env: Env,
    pub dir: PathBuf,
    pub manifests: PathBuf,
    pub root: PathBuf,
    pub logs: PathBuf,
    pub socket: PathBuf,
    pub log_file: PathBuf,
    /// More `crilet run` flags, and environment, for every (re)spawn.
    pub extra_args: Vec<String>,
    pub extra_env: Vec<(String, String)>,
    child: Option<Child>,
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_crilet")
}

impl Agent {
    /// A fresh agent for test `name` (directories wiped first, pods of an earlier run removed).
    pub async fn start(name: &str) -> Agent {
        Self::start_with_env(name, Env::load(), &[], &[]).await
    }

    /// [`Agent::start`] with more `crilet run` flags and environment variables.
    pub async fn start_with_args(name: &str, args: &[&str], env: &[(&str, &str)]) -> Agent {
        Self::start_with_env(name, Env::load(), args, env).await
    }

    /// [`Agent::start`] with `env` (which may name another CRI endpoint than containerd's).
    async fn start_with_env(name: &str, env: Env, args: &[&str], vars: &[(&str, &str)]) -> Agent {
        let mut a = Self::prepare(name, env, args, vars).await;
        a.spawn();
        a
    }

    /// An agent whose settings come from the kubelet's `KubeletConfiguration`, which `config`
    /// writes from the agent's directories (`staticPodPath`, `podLogsDir`, the runtime's
    /// endpoint). Only what that file has no field for (the root dir, the control socket, the
    /// node's name) is given as flags, as a kubeadm node gives them. A later
    /// [`Agent::spawn`] starts it with the usual flags instead.
    pub async fn start_with_kubelet_config(name: &str, config: impl FnOnce(&Agent) -> String) -> Agent {
        let mut a = Self::prepare(name, Env::load(), &[], &[]).await;
        let file = a.dir.join("kubelet-config.yaml");
        std::fs::write(&file, config(&a)).expect("write the KubeletConfiguration");
        let mut cmd = std::process::Command::new(bin());
        cmd.arg("run").arg("--config").arg(&file).arg("--root-dir").arg(&a.root);
        cmd.arg("--control-socket").arg(&a.socket).arg("--container-logs-dir").arg(a.dir.join("containers"));
        cmd.args(["--node-name", "crilet-test-node"]);
        // Image garbage collection and eviction off, as testkit::AgentCmd has them (the shared
        // containerd's disk).
        cmd.args(["--image-gc-high-threshold", "100", "--eviction-hard", ""]);
        cmd.env("RUST_LOG", "info,crilet=debug,h2=warn,tower=warn,hyper=warn");
        a.child = Some(testkit::spawn_logged(cmd, &a.log_file, false, false));
        a
    }

    /// The agent's directories, fresh (pods of an earlier run removed); no process yet.
    async fn prepare(name: &str, env: Env, args: &[&str], vars: &[(&str, &str)]) -> Agent {
        let dir = PathBuf::from("/var/lib/crilet-dev/tests").join(name);
        let a = Agent {
            name: name.to_string(),
            manifests: dir.join("manifests"),
            root: dir.join("root"),
            logs: dir.join("pod-logs"),
            socket: PathBuf::from("/run/crilet-dev/tests").join(format!("{name}.sock")),
            log_file: dir.join("crilet.log"),
            dir,
            env,
            extra_args: args.iter().map(|a| a.to_string()).collect(),
            extra_env: vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            child: None,
        };
        // Through containerd itself, never through a proxy the test put in between.
        remove_pods_of(&Env::load().cri(), &a.manifests).await;
        // An earlier run's root dir may still be the shared bind crilet makes for mount
        // propagation: the removal below would stop at it.
        unmount_below(&a.dir);
        let _ = std::fs::remove_dir_all(&a.dir);
        for d in [&a.manifests, &a.root, &a.logs] {
            std::fs::create_dir_all(d).expect("mkdir");
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        a
    }

    /// Starts the agent process (again).
    pub fn spawn(&mut self) {
        let has_node_name = self.extra_args.iter().any(|a| a == "--node-name");
        let cmd = testkit::AgentCmd {
            bin: bin().into(),
            endpoint: self.env.endpoint(),
            manifests: self.manifests.clone(),
            root: self.root.clone(),
            pod_logs: self.logs.clone(),
            container_logs: Some(self.dir.join("containers")),
            socket: self.socket.clone(),
            node_name: (!has_node_name).then(|| "crilet-test-node".to_string()),
            args: self.extra_args.clone(),
            rust_log: Some("info,crilet=debug,h2=warn,tower=warn,hyper=warn".into()),
            env: self.extra_env.clone(),
            log: self.log_file.clone(),
            stdout_to_log: false,
            // In the test's process group: a Ctrl-C of `cargo test` stops it too.
            own_process_group: false,
        };
        self.child = Some(cmd.spawn());
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILLs the agent (containers keep running).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            testkit::kill(&mut c);
        }
    }

    /// The agent's exit status once it has exited by itself (None while it runs).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// Waits until the agent exits by itself; its exit status. Panics after `limit`, saying that
    /// it still runs `after` (what should have stopped it).
    pub async fn wait_exit(&mut self, limit: Duration, after: &str) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            assert!(start.elapsed() < limit, "the agent still runs {after}:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGTERMs the agent and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            testkit::terminate(&mut c);
        }
    }

    /// Writes a manifest (placeholders rendered), mode 0644.
    pub fn write_manifest(&self, file: &str, yaml: &str) {
        let path = self.manifests.join(file);
        let tmp = self.manifests.join(format!(".{file}.tmp"));
        std::fs::write(&tmp, self.env.render(yaml)).expect("write manifest");
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        std::fs::rename(&tmp, &path).expect("rename manifest");
    }

    pub fn remove_manifest(&self, file: &str) {
        std::fs::remove_file(self.manifests.join(file)).expect("remove manifest");
    }

    /// Runs `crilet ARGS --control-socket SOCK`; returns (status ok, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new(bin())
            .args(args)
            .arg("--control-socket")
            .arg(&self.socket)
            .output()
            .expect("run crilet cli");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    }

    /// `crilet get pods -A -o json` items, or None while the agent does not answer.
    pub fn pods(&self) -> Option<Vec<Value>> {
        let (ok, out, _) = self.cli(&["get", "pods", "-A", "-o", "json"]);
        if !ok {
            return None;
        }
        let v: Value = serde_json::from_str(&out).ok()?;
        v.get("items")?.as_array().cloned()
    }

    /// One pod's JSON by name (any namespace).
    pub fn pod(&self, name: &str) -> Option<Value> {
        self.pods()?.into_iter().find(|p| p["metadata"]["name"] == name)
    }

    /// The agent's log so far (for assertion messages).
    pub fn log(&self) -> String {
        testkit::log_tail(&self.log_file, 6000)
    }

    /// The agent's whole log: for a line that other agents' noise (their pods' cgroups, swept
    /// by every agent) may have pushed out of [`Agent::log`]'s tail.
    pub fn whole_log(&self) -> String {
        std::fs::read_to_string(&self.log_file).unwrap_or_default()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Unmounts (lazily, deepest first) every mount at or below `dir`: the root-dir bind crilet
/// makes for mount propagation, and mounts tests or pods made inside it.
pub fn unmount_below(dir: &Path) {
    // Mounts stacked on one point come off one per round.
    for _ in 0..5 {
        let Ok(table) = std::fs::read_to_string(crilet::mountinfo::SELF_MOUNTINFO) else { return };
        let mut points: Vec<PathBuf> = crilet::mountinfo::parse(&table)
            .into_iter()
            .map(|m| m.mount_point)
            .filter(|p| p.starts_with(dir))
            .collect();
        if points.is_empty() {
            return;
        }
        points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        points.dedup();
        for p in points {
            let _ = nix::mount::umount2(&p, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

/// Stops and removes every sandbox (with its containers) whose manifest lived in `dir`, all at
/// once (one by one, a slow runtime makes this the longest part of a short test).
pub async fn remove_pods_of(cri: &CriClient, dir: &Path) {
    let Ok((sandboxes, _)) = cri.list_all(Some((keys::MANAGED_BY, "crilet"))).await else { return };
    let ours = sandboxes.into_iter().filter(|sb| {
        sb.annotations.get(keys::MANIFEST_FILE).is_some_and(|file| Path::new(file).starts_with(dir))
    });
    futures::future::join_all(ours.map(|sb| async move {
        let _ = cri.stop_sandbox(&sb.id).await;
        let _ = cri.remove_sandbox(&sb.id).await;
    }))
    .await;
}

/// Waits until the pod is Running with `Ready=True`; returns its JSON.
pub async fn running_pod(a: &Agent, name: &str) -> Value {
    wait_for(&format!("pod {name} running and ready"), Duration::from_secs(90), || async {
        let p = a.pod(name)?;
        (phase(&p) == "Running" && condition(&p, "Ready") == Some("True")).then_some(p)
    })
    .await
}

/// What container `container` of the running pod `namespace/name` printed before a line `end`
/// (the content of its first instance's CRI log lines), once it has printed `end`.
pub async fn printed_before(
    a: &Agent,
    namespace: &str,
    name: &str,
    container: &str,
    end: &str,
) -> Vec<String> {
    let p = running_pod(a, name).await;
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let log = a.logs.join(format!("{namespace}_{name}_{uid}")).join(container).join("0.log");
    wait_for(&format!("{name}'s output up to {end} in its log"), Duration::from_secs(20), || async {
        let text = std::fs::read_to_string(&log).ok()?;
        let lines: Vec<String> =
            text.lines().filter_map(|l| l.splitn(4, ' ').nth(3)).map(str::to_string).collect();
        let at = lines.iter().position(|l| l == end)?;
        Some(lines[..at].to_vec())
    })
    .await
}

/// The pod's status.phase.
pub fn phase(p: &Value) -> &str {
    p["status"]["phase"].as_str().unwrap_or("")
}

/// A container status (init or app) by name.
pub fn cstatus<'a>(p: &'a Value, name: &str) -> Option<&'a Value> {
    ["containerStatuses", "initContainerStatuses"]
        .iter()
        .filter_map(|k| p["status"][k].as_array())
        .flatten()
        .find(|c| c["name"] == name)
}

/// The condition's status ("True"/"False") by type.
pub fn condition<'a>(p: &'a Value, t: &str) -> Option<&'a str> {
    p["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == t)?["status"].as_str()
}

/// Is the named container running?
pub fn running(p: &Value, name: &str) -> bool {
    cstatus(p, name).is_some_and(|c| c["state"]["running"].is_object())
}

/// The container ID without the `containerd://` prefix.
pub fn container_id(p: &Value, name: &str) -> Option<String> {
    cstatus(p, name)?["containerID"].as_str().map(|s| s.trim_start_matches("containerd://").to_string())
}

impl Agent {
    /// Like [`Agent::start`], but the agent speaks CRI to `endpoint` (a [`cri_proxy::CriProxy`]).
    /// `env` then names that endpoint too, so [`Agent::spawn`] after a kill uses it again;
    /// [`Env::load`]`().cri()` still reaches containerd directly.
    pub async fn start_with_endpoint(name: &str, endpoint: &str) -> Agent {
        Self::start_with_endpoint_args(name, endpoint, &[], &[]).await
    }

    /// [`Agent::start_with_endpoint`] with more `crilet run` flags and environment variables.
    pub async fn start_with_endpoint_args(
        name: &str,
        endpoint: &str,
        args: &[&str],
        vars: &[(&str, &str)],
    ) -> Agent {
        let mut env = Env::load();
        env.vars.insert("CRILET_CONTAINERD_ENDPOINT".into(), endpoint.to_string());
        Self::start_with_env(name, env, args, vars).await
    }

    /// The `Warning: …` line `crilet get pods` prints on stderr while the agent finds the
    /// runtime unavailable: `Some(None)` while it finds it available, `None` while the agent
    /// does not answer.
    pub fn runtime_warning(&self) -> Option<Option<String>> {
        let (ok, _, err) = self.cli(&["get", "pods", "-A"]);
        ok.then(|| err.lines().find(|l| l.starts_with("Warning:")).map(str::to_string))
    }

    /// `crilet events` for one pod (the table, header included).
    pub fn events_of(&self, namespace: &str, pod: &str) -> String {
        self.cli(&["events", "-n", namespace, "--for", &format!("pod/{pod}")]).1
    }

    /// The PLEG's mode as `crilet version` reports it ("events" or "relist") and the CRI events
    /// the agent has received.
    pub fn pleg(&self) -> Option<(String, u64)> {
        let (ok, out, _) = self.cli(&["version"]);
        let line = out.lines().find(|l| l.starts_with("Runtime Changes:")).filter(|_| ok)?;
        // "Runtime Changes: events (12 CRI events received)"
        let mut words = line.split_whitespace().skip(2);
        let mode = words.next()?.to_string();
        let count = words.next()?.trim_start_matches('(').parse().ok()?;
        Some((mode, count))
    }
}

/// Waits until `a` reports the runtime unavailable; returns the warning.
pub async fn runtime_reported_unavailable(a: &Agent, limit: Duration) -> String {
    wait_for("the runtime reported unavailable", limit, || async { a.runtime_warning().flatten() }).await
}

/// Waits until `a` reports the runtime available again.
pub async fn runtime_reported_available(a: &Agent, limit: Duration) {
    wait_for("the runtime reported available", limit, || async {
        a.runtime_warning().filter(Option::is_none).map(drop)
    })
    .await
}

/// The restartCount of a container status by name.
pub fn restart_count(p: &Value, name: &str) -> Option<u64> {
    cstatus(p, name)?["restartCount"].as_u64()
}

/// Every container instance the runtime has for pod `uid`: (name, attempt, id, running?),
/// sorted; for comparing a pod before and after a fault.
pub async fn instances(cri: &CriClient, uid: &str) -> Option<Vec<(String, u32, String, bool)>> {
    let o = cri.observe(uid).await.ok()?;
    let mut v: Vec<_> = o
        .containers
        .iter()
        .map(|c| (c.name.clone(), c.attempt, c.id.clone(), c.state == crilet::model::ContainerState::Running))
        .collect();
    v.sort();
    Some(v)
}

/// A pod `namespace/name` whose container `main` exits with 3 once the test creates `exit` in
/// the returned signal directory (a hostPath under the agent's test dir); the next instance finds
/// the file, removes it and runs on. Each instance prints which one it is ("first", "second").
pub fn exit_on_signal_pod(a: &Agent, name: &str, namespace: &str) -> (String, PathBuf) {
    let dir = a.dir.join("signal");
    std::fs::create_dir_all(&dir).expect("signal dir");
    let yaml = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  terminationGracePeriodSeconds: 2
  volumes:
  - name: signal
    hostPath: {{path: "{dir}", type: Directory}}
  containers:
  - name: main
    image: ${{CRILET_IMAGE_BUSYBOX}}
    volumeMounts: [{{name: signal, mountPath: /signal}}]
    command: [sh, -c, 'trap "exit 0" TERM; if [ -f /signal/exit ]; then rm -f /signal/exit; echo second; while true; do sleep 1; done; fi; echo first; while [ ! -f /signal/exit ]; do sleep 0.1; done; exit 3']
"#,
        dir = dir.display()
    );
    (yaml, dir)
}

/// A moment of a test on both clocks. The runtime's timestamps, and the marks the pods' shells
/// write with `date`, are wall-clock time. This machine's wall clock has been seen to jump
/// (13 s forward once, during an 8 s test) while the monotonic clock, which the agent's timers
/// run on, did not. Such a jump is nobody's time, and `until` takes it out.
pub struct Moment {
    wall: i64,
    mono: Instant,
}

impl Moment {
    pub fn now() -> Moment {
        Moment { wall: now_ns(), mono: Instant::now() }
    }

    /// Monotonic time since this moment.
    pub fn elapsed(&self) -> Duration {
        self.mono.elapsed()
    }

    /// How far the wall clock has moved since this moment beyond the monotonic clock, in ns.
    pub fn jump(&self) -> i64 {
        let mono = i64::try_from(self.mono.elapsed().as_nanos()).expect("ns");
        now_ns() - self.wall - mono
    }

    /// Nanoseconds from this moment to wall-clock time `t` (ns since the epoch), less the wall
    /// clock's jump since this moment.
    pub fn until(&self, t: i64) -> i64 {
        t - self.wall - self.jump()
    }
}

/// Wall-clock time, in ns since the epoch (the runtime's timestamps are on this clock).
pub fn now_ns() -> i64 {
    let ns = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos();
    i64::try_from(ns).expect("ns")
}
