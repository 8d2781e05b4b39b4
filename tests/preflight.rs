//! `crilet preflight` against the real containerd that `hack/setup.sh` runs: a good node passes,
//! a missing endpoint and a group/other-writable manifest directory fail with lines naming them;
//! kubeadm's `/var/lib/kubelet/config.yaml` as `--config` is read, with what crilet takes from it
//! and what it ignores.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::Env;

/// Directories for one preflight run, all under a fresh temporary directory.
struct Node {
    _tmp: tempfile::TempDir,
    manifests: PathBuf,
    root: PathBuf,
    logs: PathBuf,
    containers: PathBuf,
    socket: PathBuf,
}

impl Node {
    /// Manifest, root and log directories that exist with mode 0755; a free control socket path.
    fn good() -> Node {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        let node = Node {
            manifests: dir.join("manifests"),
            root: dir.join("root"),
            logs: dir.join("pod-logs"),
            containers: dir.join("containers"),
            socket: dir.join("crilet.sock"),
            _tmp: tmp,
        };
        for d in [&node.manifests, &node.root, &node.logs, &node.containers] {
            std::fs::create_dir(d).expect("mkdir");
            chmod(d, 0o755);
        }
        node
    }
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// Runs `crilet preflight` with `endpoint` and `node`'s directories: (exit code, stdout).
fn preflight(endpoint: &str, node: &Node) -> (Option<i32>, String) {
    preflight_with(endpoint, node, &[])
}

/// [`preflight`] with more flags.
fn preflight_with(endpoint: &str, node: &Node, more: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(common::bin())
        .args(["preflight", "--container-runtime-endpoint", endpoint])
        .arg("--pod-manifest-path")
        .arg(&node.manifests)
        .arg("--root-dir")
        .arg(&node.root)
        .arg("--pod-logs-dir")
        .arg(&node.logs)
        .arg("--container-logs-dir")
        .arg(&node.containers)
        .arg("--control-socket")
        .arg(&node.socket)
        .args(more)
        .output()
        .expect("run crilet preflight");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!(
        "--- crilet preflight (exit {:?})\n{stdout}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), stdout)
}

/// The (verdict, detail) of check `name` in the output.
fn check<'a>(stdout: &'a str, name: &str) -> (&'a str, &'a str) {
    stdout
        .lines()
        .find_map(|line| {
            let (verdict, rest) = line.split_once(' ')?;
            let (n, detail) = rest.trim_start().split_once(' ')?;
            (n == name).then_some((verdict, detail.trim_start()))
        })
        .unwrap_or_else(|| panic!("no {name} line in:\n{stdout}"))
}

#[tokio::test]
async fn a_good_node_passes() {
    let env = Env::load();
    // The pause image present, so its line is a deterministic PASS naming it.
    let pause = env.get("CRILET_IMAGE_PAUSE");
    env.cri().pull_image(&pause, None).await.expect("pull the pause image");
    let node = Node::good();
    let (code, out) = preflight(&env.endpoint(), &node);

    assert_eq!(code, Some(0), "{out}");
    let (verdict, detail) = check(&out, "cri-endpoint");
    assert_eq!(verdict, "PASS", "{out}");
    let want = format!("containerd {} (CRI v1) at {}", env.get("CRILET_RUNTIME_VERSION"), env.endpoint());
    assert_eq!(detail, want, "{out}");
    for name in
        ["runtime-ready", "network-ready", "manifest-dir", "root-dir", "pod-logs-dir", "control-socket"]
    {
        assert_eq!(check(&out, name).0, "PASS", "{name}: {out}");
    }
    // containerd 1.6 has no event stream; 1.7 and 2.x have one.
    let (verdict, detail) = check(&out, "cri-events");
    if env.get("CRILET_RUNTIME") == "1.6" {
        assert_eq!((verdict, detail), ("WARN", "no CRI event stream; the agent relists every 1 s"), "{out}");
    } else {
        assert_eq!(verdict, "PASS", "{out}");
        assert!(detail.starts_with("events"), "{out}");
    }
    let (verdict, detail) = check(&out, "pause-image");
    assert_eq!(verdict, "PASS", "{out}");
    assert!(detail.starts_with(&format!("{pause} present")), "{out}");
    assert!(out.lines().last().is_some_and(|l| l.ends_with(" 0 failures")), "{out}");
}

#[test]
fn a_missing_endpoint_fails_and_names_the_socket() {
    let node = Node::good();
    let socket = node.root.join("no-such-containerd.sock");
    let endpoint = format!("unix://{}", socket.display());
    let (code, out) = preflight(&endpoint, &node);

    assert_eq!(code, Some(1), "{out}");
    let (verdict, detail) = check(&out, "cri-endpoint");
    assert_eq!(verdict, "FAIL", "{out}");
    assert!(detail.contains(&socket.display().to_string()), "{out}");
    // The checks that need the runtime are reported, not dropped, and nothing panicked.
    for name in
        ["runtime-ready", "network-ready", "cri-events", "cgroup-driver", "pause-image", "stop-signals"]
    {
        assert_eq!(check(&out, name).0, "SKIP", "{name}: {out}");
    }
    assert_eq!(check(&out, "manifest-dir").0, "PASS", "{out}");
}

#[test]
fn a_manifest_dir_writable_by_others_fails() {
    let env = Env::load();
    let node = Node::good();
    chmod(&node.manifests, 0o777);
    let (code, out) = preflight(&env.endpoint(), &node);

    assert_eq!(code, Some(1), "{out}");
    let (verdict, detail) = check(&out, "manifest-dir");
    assert_eq!(verdict, "FAIL", "{out}");
    assert!(detail.starts_with(&node.manifests.display().to_string()), "{out}");
    assert!(detail.contains("writable by group or others"), "{out}");
    assert_eq!(check(&out, "cri-endpoint").0, "PASS", "only the directory fails: {out}");
}

/// kubeadm's kubelet config file: preflight says what crilet takes (under which flag) and lists
/// each field it ignores. The runtime, the directories and the cgroup driver come from flags
/// (flags win), so the rest of the node's checks run against this machine.
#[test]
fn a_kubeadm_kubelet_config_lists_what_is_taken_and_ignored() {
    let env = Env::load();
    let node = Node::good();
    let kubeadm = concat!(env!("CARGO_MANIFEST_DIR"), "/agent/cli/kubelet_config/kubeadm-v1.36.yaml");
    // The test machine's driver is cgroupfs (PID 1 is not systemd); kubeadm's file says systemd.
    // Nor does it run systemd-resolved, whose file kubeadm's resolvConf names.
    let flags = ["--config", kubeadm, "--cgroup-driver", "cgroupfs", "--resolv-conf", "/etc/resolv.conf"];
    let (code, out) = preflight_with(&env.endpoint(), &node, &flags);

    assert_eq!(check(&out, "config").0, "PASS", "{out}");
    let (verdict, detail) = check(&out, "kubelet-config");
    assert_eq!(verdict, "PASS", "{out}");
    for taken in [
        "staticPodPath (--pod-manifest-path)",
        "cgroupDriver (--cgroup-driver)",
        "clusterDNS (--cluster-dns)",
        "clusterDomain (--cluster-domain)",
        "resolvConf (--resolv-conf)",
        "containerRuntimeEndpoint (--container-runtime-endpoint)",
        "authentication.x509.clientCAFile (--client-ca-file)",
        "healthzPort (--metrics-bind-address)",
        "rotateCertificates (--rotate-certificates)",
    ] {
        assert!(detail.contains(taken), "{taken} not in: {out}");
    }
    assert!(detail.ends_with("0 field(s) ignored"), "{out}");
    let ignored: Vec<&str> =
        out.lines().filter(|l| l.starts_with("WARN") && l.contains(" kubelet-config ")).collect();
    assert_eq!(ignored, Vec::<&str>::new(), "kubeadm's file sets nothing crilet ignores: {out}");
    assert!(!out.lines().any(|l| l.starts_with("FAIL") && l.contains("kubelet-config")), "{out}");
    let (verdict, detail) = check(&out, "pod-dns");
    assert_eq!(verdict, "PASS", "{out}");
    assert!(detail.ends_with("ClusterFirst pods: 10.96.0.10 (domain \"cluster.local\")"), "{out}");
    // Without the flag, kubeadm's resolvConf is a file this machine lacks: every sandbox would fail.
    let (code_without, without) =
        preflight_with(&env.endpoint(), &node, &["--config", kubeadm, "--cgroup-driver", "cgroupfs"]);
    let (verdict, detail) = check(&without, "pod-dns");
    assert_eq!((verdict, code_without), ("FAIL", Some(1)), "{without}");
    assert!(detail.contains("/run/systemd/resolve/resolv.conf"), "{without}");
    // The manifest directory is the flag's, not kubeadm's /etc/kubernetes/manifests.
    assert_eq!(check(&out, "manifest-dir").0, "PASS", "{out}");
    assert_eq!(code, Some(0), "{out}");
}
