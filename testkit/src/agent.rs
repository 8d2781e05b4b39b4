//! One `crilet run` launcher for the tests and the benchmarks, and the handling of the child
//! processes they start (the agent; the benchmarks' upstream kubelet too): spawned with its
//! output in a log file, checked for an early exit, stopped with SIGTERM (SIGKILL after a grace),
//! its log's tail shown when something failed.

use std::ffi::OsString;
use std::future::Future;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// Runs another crilet build in the benchmarks (e.g. the release build, or an older commit's
/// for a before/after).
pub const BENCH_BIN_VAR: &str = "CRILET_BENCH_BIN";

/// The binary a benchmark runs: `CRILET_BENCH_BIN` when set, else `build` (the caller's
/// `env!("CARGO_BIN_EXE_crilet")`).
pub fn bench_bin(build: &str) -> PathBuf {
    std::env::var(BENCH_BIN_VAR).map(PathBuf::from).unwrap_or_else(|_| PathBuf::from(build))
}

/// `crilet run` as the tests and benchmarks start it: the flags each launcher passes, in this
/// order, then the caller's own (`args`).
#[derive(Clone, Debug)]
pub struct AgentCmd {
    pub bin: PathBuf,
    /// `--container-runtime-endpoint`
    pub endpoint: String,
    /// `--pod-manifest-path`
    pub manifests: PathBuf,
    /// `--root-dir`
    pub root: PathBuf,
    /// `--pod-logs-dir`
    pub pod_logs: PathBuf,
    /// `--container-logs-dir` (an empty path: none); the flag is left out when None.
    pub container_logs: Option<PathBuf>,
    /// `--control-socket`
    pub socket: PathBuf,
    /// `--node-name`; left out when None.
    pub node_name: Option<String>,
    /// More flags, after the ones above.
    pub args: Vec<String>,
    /// `RUST_LOG` for the agent; not set when None.
    pub rust_log: Option<String>,
    /// More environment variables (after `RUST_LOG`, so they may replace it).
    pub env: Vec<(String, String)>,
    /// Where [`AgentCmd::spawn`] appends the agent's stderr.
    pub log: PathBuf,
    /// Its stdout goes to the log too (else to /dev/null).
    pub stdout_to_log: bool,
    /// A process group of its own: a Ctrl-C of the benchmark then does not reach the agent
    /// before the benchmark's cleanup has had it remove its pods.
    pub own_process_group: bool,
}

impl AgentCmd {
    /// An agent with everything under `dir`: manifests `dir/manifests`, root `dir/root`, pod
    /// logs `dir/logs`, no container log directory (`--container-logs-dir ""`), control socket
    /// `dir/crilet.sock`, log `dir/crilet.log`, `RUST_LOG=info`, its own process group, no node
    /// name. Change the fields for anything else.
    pub fn in_dir(bin: impl Into<PathBuf>, endpoint: &str, dir: &Path) -> AgentCmd {
        AgentCmd {
            bin: bin.into(),
            endpoint: endpoint.to_string(),
            manifests: dir.join("manifests"),
            root: dir.join("root"),
            pod_logs: dir.join("logs"),
            container_logs: Some(PathBuf::new()),
            socket: dir.join("crilet.sock"),
            node_name: None,
            args: vec![],
            rust_log: Some("info".into()),
            env: vec![],
            log: dir.join("crilet.log"),
            stdout_to_log: false,
            own_process_group: true,
        }
    }

    /// The command line after the binary.
    pub fn argv(&self) -> Vec<OsString> {
        let mut v: Vec<OsString> =
            vec!["run".into(), "--container-runtime-endpoint".into(), (&self.endpoint).into()];
        let mut flag = |f: &str, p: &Path| {
            v.push(f.into());
            v.push(p.into());
        };
        flag("--pod-manifest-path", &self.manifests);
        flag("--root-dir", &self.root);
        flag("--pod-logs-dir", &self.pod_logs);
        if let Some(c) = &self.container_logs {
            flag("--container-logs-dir", c);
        }
        flag("--control-socket", &self.socket);
        if let Some(n) = &self.node_name {
            v.extend(["--node-name".into(), n.into()]);
        }
        // Image garbage collection off unless the caller sets it: the shared containerd's disk
        // is near the kubelet's 85 % default, and every agent collecting there would remove
        // the images the other tests and benchmarks run from.
        if !self.args.iter().any(|a| a.starts_with("--image-gc-high-threshold")) {
            v.extend(["--image-gc-high-threshold".into(), "100".into()]);
        }
        // No eviction thresholds either, for the same disk: the kubelet's defaults
        // (nodefs.available<10%, imagefs.available<15%) would put every test agent under disk
        // pressure once a cold build fills it, refusing and evicting the tests' pods.
        if !self.args.iter().any(|a| a.starts_with("--eviction-hard")) {
            v.extend(["--eviction-hard".into(), "".into()]);
        }
        v.extend(self.args.iter().map(OsString::from));
        v
    }

    /// The command with its arguments and environment; stdio and process group are the
    /// caller's (see [`AgentCmd::spawn`]).
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.args(self.argv());
        if let Some(l) = &self.rust_log {
            cmd.env("RUST_LOG", l);
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// Starts the agent: stdin from /dev/null, output into [`AgentCmd::log`].
    pub fn spawn(&self) -> Child {
        spawn_logged(self.command(), &self.log, self.stdout_to_log, self.own_process_group)
    }
}

/// Starts `cmd` with stdin from /dev/null and its stderr (and its stdout when `stdout_too`,
/// else /dev/null) appended to `log`, in a process group of its own when `own_group`.
pub fn spawn_logged(mut cmd: Command, log: &Path, stdout_too: bool, own_group: bool) -> Child {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap_or_else(|e| panic!("log file {}: {e}", log.display()));
    let stdout = if stdout_too { Stdio::from(out.try_clone().expect("log fd")) } else { Stdio::null() };
    cmd.stdin(Stdio::null()).stdout(stdout).stderr(out);
    if own_group {
        cmd.process_group(0);
    }
    cmd.spawn().unwrap_or_else(|e| panic!("starting {}: {e}", cmd.get_program().to_string_lossy()))
}

/// The child's exit status once it has exited.
pub fn exited(child: &mut Child) -> Option<ExitStatus> {
    child.try_wait().ok().flatten()
}

/// Panics "NAME exited (STATUS); see SEE" when the child has exited: for the waits on a process
/// that should come up or keep running, so that they fail at once rather than at their deadline.
pub fn assert_alive(child: &mut Child, name: &str, see: &str) {
    if let Some(status) = exited(child) {
        panic!("{name} exited ({status}); see {see}");
    }
}

/// SIGKILLs the child and reaps it.
pub fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

fn sigterm(child: &Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
}

/// SIGTERMs the child and waits (blocking) until it has exited.
pub fn terminate(child: &mut Child) {
    sigterm(child);
    let _ = child.wait();
}

/// SIGTERMs the child, SIGKILLs it if it still runs after `grace`, and reaps it.
pub async fn stop(mut child: Child, grace: Duration) {
    sigterm(&child);
    let exited =
        crate::wait::poll_until(grace, Duration::from_millis(50), || std::future::ready(exited(&mut child)))
            .await;
    if exited.is_none() {
        let _ = child.kill();
    }
    let _ = child.wait();
}

/// A benchmark's cleanup: gives the child up to `limit` to get `done` (e.g. the agent has
/// removed its pods; checked every 200 ms, not once it has exited), then [`stop`]s it with a
/// 15 s grace.
pub async fn stop_when_done<F, Fut>(mut child: Child, limit: Duration, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    crate::wait::poll_until(limit, Duration::from_millis(200), || {
        let exited = exited(&mut child).is_some();
        let done = done();
        async move { (exited || done.await).then_some(()) }
    })
    .await;
    stop(child, Duration::from_secs(15)).await;
}

/// The last `bytes` (about: whole characters) of the log file, empty when there is none.
pub fn log_tail(path: &Path, bytes: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let start = text.len().saturating_sub(bytes);
    text[text.char_indices().map(|(i, _)| i).find(|i| *i >= start).unwrap_or(0)..].to_string()
}

/// Prints `--- TITLE ---` and the last `n` lines of the log file (none when there is no file)
/// on stderr.
pub fn print_last_lines(title: &str, path: &Path, n: usize) {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    eprintln!("--- {title} ---");
    let tail: Vec<&str> = log.lines().rev().take(n).collect();
    for l in tail.iter().rev() {
        eprintln!("{l}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(v: Vec<OsString>) -> Vec<String> {
        v.into_iter().map(|s| s.into_string().unwrap()).collect()
    }

    #[test]
    fn bench_layout() {
        let mut a = AgentCmd::in_dir("/bin/crilet", "unix:///c.sock", Path::new("/d"));
        a.node_name = Some("bench-node".into());
        a.args = vec!["--max-pods".into(), "5".into()];
        assert_eq!(
            strs(a.argv()),
            [
                "run",
                "--container-runtime-endpoint",
                "unix:///c.sock",
                "--pod-manifest-path",
                "/d/manifests",
                "--root-dir",
                "/d/root",
                "--pod-logs-dir",
                "/d/logs",
                "--container-logs-dir",
                "",
                "--control-socket",
                "/d/crilet.sock",
                "--node-name",
                "bench-node",
                "--image-gc-high-threshold",
                "100",
                "--eviction-hard",
                "",
                "--max-pods",
                "5"
            ]
        );
        let cmd = a.command();
        assert_eq!(cmd.get_program(), "/bin/crilet");
        let envs: Vec<_> = cmd.get_envs().collect();
        assert_eq!(envs, [(std::ffi::OsStr::new("RUST_LOG"), Some(std::ffi::OsStr::new("info")))]);
    }

    #[test]
    fn optional_flags_left_out() {
        let mut a = AgentCmd::in_dir("crilet", "e", Path::new("/d"));
        a.container_logs = None;
        a.rust_log = None;
        let argv = strs(a.argv());
        assert!(!argv.iter().any(|f| f == "--container-logs-dir" || f == "--node-name"), "{argv:?}");
        assert_eq!(a.command().get_envs().count(), 0);
    }

    #[test]
    fn alive_until_exited() {
        let mut child = Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap();
        let _ = child.wait();
        let died = std::panic::catch_unwind(move || assert_alive(&mut child, "sh", "nothing")).unwrap_err();
        let msg = died.downcast_ref::<String>().unwrap();
        assert_eq!(msg, "sh exited (exit status: 3); see nothing");
        let mut child = Command::new("sleep").arg("10").spawn().unwrap();
        assert_alive(&mut child, "sleep", "nothing");
        kill(&mut child);
    }

    #[tokio::test]
    async fn stop_ends_a_child_that_ignores_sigterm() {
        let dir = std::env::temp_dir().join(format!("testkit-stop-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("log");
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "trap '' TERM; echo out; echo err >&2; while true; do sleep 0.05; done"]);
        let child = spawn_logged(cmd, &log, true, true);
        let t = std::time::Instant::now();
        crate::wait::wait_until("the output", Duration::from_secs(10), Duration::from_millis(10), || {
            std::future::ready(log_tail(&log, 100).contains("err").then_some(()))
        })
        .await;
        stop(child, Duration::from_millis(200)).await;
        assert!(t.elapsed() < Duration::from_secs(5));
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("out\n") && text.contains("err\n"), "{text:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tail_is_whole_characters() {
        let path = std::env::temp_dir().join(format!("testkit-tail-{}", std::process::id()));
        std::fs::write(&path, "aé€b").unwrap();
        assert_eq!(log_tail(&path, 2), "b");
        assert_eq!(log_tail(&path, 4), "€b");
        assert_eq!(log_tail(&path, 100), "aé€b");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(log_tail(&path, 10), "");
    }
}
