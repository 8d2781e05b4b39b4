//! crilet under test: a fresh agent per scenario (own manifest, root and log directories and
//! control socket under the benchmark's temp dir), its manifests, its control socket, and what
//! it costs (/proc/PID/status and /proc/PID/stat).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crilet::cri::CriClient;
use crilet::model::keys;
use crilet::proto::{ListPodsRequest, VersionRequest, VersionResponse};

/// The agent that runs now, whatever happens to the benchmark (the cleanup stops it).
#[derive(Default)]
pub struct Leftovers {
    pub agent: Mutex<Option<(Child, PathBuf)>>,
    /// The upstream kubelet of `scale` (`kubelet.rs`), with its directory.
    pub kubelet: Mutex<Option<(Child, PathBuf)>>,
}

pub struct Agent {
    pub pid: u32,
    pub dir: PathBuf,
    pub manifests: PathBuf,
    pub socket: PathBuf,
    left: Arc<Leftovers>,
}

impl Agent {
    /// Starts an agent in `dir` (made fresh) and waits until it answers and, if the runtime has
    /// events, follows them.
    pub async fn start(endpoint: &str, dir: PathBuf, left: Arc<Leftovers>, events: bool) -> Agent {
        let _ = std::fs::remove_dir_all(&dir);
        let manifests = dir.join("manifests");
        std::fs::create_dir_all(&manifests).expect("mkdir manifests");
        for d in [&dir, &manifests] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        // CRILET_BENCH_BIN runs another build (e.g. an older commit's, for a before/after).
        let mut cmd =
            testkit::AgentCmd::in_dir(testkit::bench_bin(env!("CARGO_BIN_EXE_crilet")), endpoint, &dir);
        cmd.node_name = Some("bench-node".into());
        // CRILET_BENCH_AGENT_ARGS: more flags, split on whitespace (e.g. to join a cluster as
        // node bench-node: --kubeconfig and the rest that cluster mode takes).
        cmd.args = std::env::var("CRILET_BENCH_AGENT_ARGS")
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let child = cmd.spawn();
        let pid = child.id();
        *left.agent.lock().unwrap() = Some((child, manifests.clone()));
        let agent = Agent { pid, dir, manifests, socket: cmd.socket, left };
        // crilet counts an event stream as followed once the call has stayed open a moment.
        let v = testkit::wait_until(
            &format!("crilet to come up (see {}/crilet.log)", agent.dir.display()),
            Duration::from_secs(60),
            Duration::from_millis(20),
            || async {
                agent.check_alive();
                agent.version().await.filter(|v| !events || v.pleg_mode == "events")
            },
        )
        .await;
        eprintln!("  agent pid {pid} up, runtime changes: {}", v.pleg_mode);
        agent
    }

    fn check_alive(&self) {
        if let Some((child, _)) = self.left.agent.lock().unwrap().as_mut() {
            testkit::assert_alive(child, "crilet", &format!("{}/crilet.log", self.dir.display()));
        }
    }

    pub async fn version(&self) -> Option<VersionResponse> {
        let mut client = crilet::api::connect(&self.socket).await.ok()?;
        Some(client.version(VersionRequest {}).await.ok()?.into_inner())
    }

    /// Writes a manifest the way careful tools do: a dotfile (not a manifest) in the same
    /// directory, then renamed into place, so the agent never reads half a file.
    pub fn write(&self, name: &str, text: &str) {
        stage(&self.manifests, name, text);
        place(&self.manifests, name);
    }

    /// See [`write_all`].
    pub fn write_all<'a>(&self, pods: impl IntoIterator<Item = (&'a str, String)>) -> Instant {
        write_all(&self.manifests, pods)
    }

    pub fn remove(&self, name: &str) {
        std::fs::remove_file(self.manifests.join(format!("{name}.yaml"))).expect("remove manifest");
    }

    /// Every pod of `namespace` as `ListPods` returns it (v1.Pod JSON).
    pub async fn list_pods(&self, namespace: &str) -> Vec<serde_json::Value> {
        let mut client = crilet::api::connect(&self.socket).await.expect("connect to the control socket");
        let resp = client
            .list_pods(ListPodsRequest { namespace: namespace.into() })
            .await
            .expect("ListPods")
            .into_inner();
        resp.pods.iter().filter_map(|p| serde_json::from_str(&p.pod_json).ok()).collect()
    }

    /// Removes every manifest and waits until the agent has removed its pods; then stops it.
    pub async fn stop(self, cri: &CriClient, namespace: &str) {
        remove_manifests(&self.manifests);
        wait_gone(cri, namespace, Duration::from_secs(300)).await;
        let taken = self.left.agent.lock().unwrap().take();
        if let Some((child, _)) = taken {
            stop_child(child).await;
        }
    }
}

/// A manifest staged in `dir` as a dotfile (which an agent, crilet or the kubelet, ignores).
pub fn stage(dir: &Path, name: &str, text: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).expect("write manifest");
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)).expect("chmod manifest");
}

/// The staged dotfile renamed into place.
pub fn place(dir: &Path, name: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::rename(&tmp, dir.join(format!("{name}.yaml"))).expect("rename manifest");
}

/// Stages every manifest first, then renames them all into place at once (as a deployment
/// tool swapping a directory's contents does); returns the time just before the first rename.
pub fn write_all<'a>(dir: &Path, pods: impl IntoIterator<Item = (&'a str, String)>) -> Instant {
    let names: Vec<&str> = pods
        .into_iter()
        .map(|(n, text)| {
            stage(dir, n, &text);
            n
        })
        .collect();
    let t0 = Instant::now();
    for n in names {
        place(dir, n);
    }
    t0
}

/// (VmRSS, VmHWM) of process `pid` in KiB (zeros once it is gone).
pub fn memory(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// utime + stime of process `pid` in clock ticks.
pub fn cpu_ticks(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // Fields after the command (which may hold spaces) start at the state, field 3.
    let rest = &text[text.rfind(')').expect("stat format") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0)
}

pub fn remove_manifests(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// SIGTERM by PID, SIGKILL after 15 s.
pub async fn stop_child(child: Child) {
    testkit::stop(child, Duration::from_secs(15)).await;
}

/// Sandboxes the runtime has in `namespace`.
pub async fn sandboxes(cri: &CriClient, namespace: &str) -> usize {
    cri.list_all(Some((keys::POD_NAMESPACE, namespace))).await.map_or(usize::MAX, |(s, _)| s.len())
}

/// Waits until no sandbox is left in `namespace`.
pub async fn wait_gone(cri: &CriClient, namespace: &str, limit: Duration) {
    let what = format!("the pods of {namespace} to be removed");
    testkit::wait_until(&what, limit, Duration::from_millis(50), || async {
        (sandboxes(cri, namespace).await == 0).then_some(())
    })
    .await;
}
