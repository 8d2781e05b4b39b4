//! `volumeMounts[].mountPropagation` (issue 36 part 5) on the real containerd: a hostPath that the
//! test makes a shared mount, a HostToContainer container that sees a tmpfs the host mounts
//! there after it started and a None container that does not, a privileged Bidirectional
//! container whose tmpfs the host sees; an emptyDir with HostToContainer (crilet puts its root
//! dir on a shared mount for it, as the kubelet keeps its own); Bidirectional in an
//! unprivileged container refused by validation (static) and by the API server (API pods); and
//! a HostToContainer API pod through the control plane.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::cluster::Node;
use common::*;

/// A directory bind-mounted onto itself and made shared (`mount --make-shared`), unmounted with
/// everything below it when dropped, so a failing test leaves no mount behind.
struct SharedDir(PathBuf);

impl SharedDir {
    fn new(path: &str) -> SharedDir {
        let dir = PathBuf::from(path);
        unmount_below(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir the shared dir");
        let guard = SharedDir(dir);
        run("mount", &["--bind", path, path]);
        run("mount", &["--make-shared", path]);
        guard
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for SharedDir {
    fn drop(&mut self) {
        unmount_below(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Unmounts everything at or below its path when dropped: the agent's root-dir bind and the
/// mounts the test or its pods made in it, even when an assertion fails.
struct UnmountOnDrop(PathBuf);

impl Drop for UnmountOnDrop {
    fn drop(&mut self) {
        unmount_below(&self.0);
    }
}

/// Runs a host command that must succeed.
fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Mounts a tmpfs at `dir` (made first) holding the file `marker`.
fn host_tmpfs(dir: &Path, marker: &str) {
    std::fs::create_dir_all(dir).expect("mkdir the tmpfs mount point");
    run("mount", &["-t", "tmpfs", "-o", "size=1m", "mp-test", dir.to_str().expect("utf-8")]);
    std::fs::write(dir.join(marker), "x").expect("write the marker in the tmpfs");
}

/// Is something mounted exactly at `path` (in this, the host's, mount namespace)?
fn mounted_at(path: &Path) -> bool {
    let table = std::fs::read_to_string(crilet::mountinfo::SELF_MOUNTINFO).expect("mountinfo");
    crilet::mountinfo::parse(&table).iter().any(|m| m.mount_point == path)
}

/// A container that says `started`, waits for `go` in `dir`, then says whether it sees
/// `dir/sub/marker` (SEES or BLIND).
fn watcher(name: &str, volume: &str, propagation: &str) -> String {
    format!(
        "  - name: {name}\n    image: ${{CRILET_IMAGE_BUSYBOX}}\n    volumeMounts: [{{name: {volume}, mountPath: /mnt/s, \
         mountPropagation: {propagation}}}]\n    command: [sh, -c, 'echo started; while ! test -f /mnt/s/go; do sleep 0.1; \
         done; if test -f /mnt/s/sub/marker; then echo SEES; else echo BLIND; fi; exec sleep 3600']\n"
    )
}

fn pod(ns: &str, name: &str, volumes: &str, containers: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  volumes:\n{volumes}  containers:\n{containers}"
    )
}

fn host_volume(name: &str, path: &Path) -> String {
    format!("  - {{name: {name}, hostPath: {{path: {}, type: Directory}}}}\n", path.display())
}

/// `crilet validate FILE`: (exit 0, stdout and stderr).
fn validate(file: &Path) -> (bool, String) {
    let out = Command::new(bin()).arg("validate").arg(file).output().expect("run crilet validate");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Waits for the log of `container` in `pod` to hold the line `want`.
async fn says(a: &Agent, ns: &str, pod: &str, container: &str, want: &str) {
    wait_for(&format!("{pod}/{container} to say {want}"), Duration::from_secs(20), || async {
        let (ok, out, _) = a.cli(&["logs", pod, "-n", ns, "-c", container]);
        (ok && out.lines().any(|l| l == want)).then_some(())
    })
    .await;
}

const NS: &str = "mp-static";

#[tokio::test(flavor = "multi_thread")]
async fn static_pods_get_the_propagation_they_ask_for() {
    let shared = SharedDir::new("/var/lib/crilet-dev/tests/mp-host/shared");
    let mut a = Agent::start("mp-static").await;
    let _mounts = UnmountOnDrop(a.root.clone());
    let vol = host_volume("s", &shared.0);
    let both = format!("{}{}", watcher("h2c", "s", "HostToContainer"), watcher("none", "s", "None"));
    a.write_manifest("watch.yaml", &pod(NS, "mp-watch", &vol, &both));
    let bidi = "  - name: bidi\n    image: ${CRILET_IMAGE_BUSYBOX}\n    securityContext: {privileged: true}\n    \
                volumeMounts: [{name: s, mountPath: /mnt/s, mountPropagation: Bidirectional}]\n    \
                command: [sh, -c, 'mkdir -p /mnt/s/inner && mount -t tmpfs -o size=1m mp-inner /mnt/s/inner && \
                echo made > /mnt/s/inner/made-inside && echo MOUNTED; exec sleep 3600']\n";
    a.write_manifest("bidi.yaml", &pod(NS, "mp-bidi", &vol, bidi));
    for c in ["h2c", "none"] {
        says(&a, NS, "mp-watch", c, "started").await;
    }
    // No pod has asked for propagation on a volume under the root dir yet: no bind of it.
    let root = std::fs::canonicalize(&a.root).expect("root dir");
    assert!(!mounted_at(&root), "the root dir is bound before any pod needs it");
    // (Where the host's mounts are shared already, as under systemd, there is nothing to bind.)
    let table = std::fs::read_to_string(crilet::mountinfo::SELF_MOUNTINFO).expect("mountinfo");
    let root_on_shared =
        crilet::mountinfo::holding(&crilet::mountinfo::parse(&table), &root).is_some_and(|m| m.shared);
    // crilet's own volumes: an emptyDir with HostToContainer makes the root dir a shared mount.
    let empty = "  - {name: scratch, emptyDir: {}}\n";
    a.write_manifest(
        "empty.yaml",
        &pod(NS, "mp-empty", empty, &watcher("h2c", "scratch", "HostToContainer")),
    );
    says(&a, NS, "mp-empty", "h2c", "started").await;
    // After the containers started: a tmpfs under the shared dir on the host, then the go file
    // (in the shared dir itself, which every container sees).
    host_tmpfs(&shared.path("sub"), "marker");
    std::fs::write(shared.path("go"), "").expect("write go");
    says(&a, NS, "mp-watch", "h2c", "SEES").await;
    says(&a, NS, "mp-watch", "none", "BLIND").await;

    // The emptyDir: the same, under the agent's root dir.
    let p = running_pod(&a, "mp-empty").await;
    let uid = p["metadata"]["uid"].as_str().expect("uid");
    let scratch = a.root.join("pods").join(uid).join("volumes/kubernetes.io~empty-dir/scratch");
    host_tmpfs(&scratch.join("sub"), "marker");
    std::fs::write(scratch.join("go"), "").expect("write go in the emptyDir");
    says(&a, NS, "mp-empty", "h2c", "SEES").await;
    if !root_on_shared {
        assert!(mounted_at(&root), "the root dir is a mount of its own");
        assert!(root.join(crilet::mountinfo::BIND_RECORD).exists(), "the bind is recorded for teardown");
    }

    // Bidirectional: the container's tmpfs reaches the host.
    says(&a, NS, "mp-bidi", "bidi", "MOUNTED").await;
    let inner = shared.path("inner");
    assert!(mounted_at(&inner), "the container's tmpfs is mounted on the host at {}", inner.display());
    assert_eq!(std::fs::read_to_string(inner.join("made-inside")).expect("the file made inside"), "made\n");
    run("umount", &[inner.to_str().expect("utf-8")]);

    // Bidirectional on an emptyDir: the container's tmpfs reaches the pod dir on the host, and
    // removing the pod never deletes through it (the pod dir is left, with a warning).
    let bidi_empty = bidi.replace("name: s,", "name: scratch,");
    a.write_manifest("bidi-empty.yaml", &pod(NS, "mp-bidi-empty", empty, &bidi_empty));
    says(&a, NS, "mp-bidi-empty", "bidi", "MOUNTED").await;
    let p = running_pod(&a, "mp-bidi-empty").await;
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let pod_dir = root.join("pods").join(&uid);
    let kept = pod_dir.join("volumes/kubernetes.io~empty-dir/scratch/inner/made-inside");
    assert!(kept.exists(), "the container's tmpfs is seen in the pod dir on the host");
    a.remove_manifest("bidi-empty.yaml");
    wait_for("the pod dir left in place", Duration::from_secs(30), || async {
        (a.log().contains("pod dir left in place") && a.pod("mp-bidi-empty").is_none()).then_some(())
    })
    .await;
    assert!(kept.exists(), "removing the pod deleted a file inside a mount in its emptyDir");
    unmount_below(&pod_dir);

    // Bidirectional in a container that is not privileged: refused up front.
    let refused = pod(NS, "mp-refused", &vol, &watcher("c", "s", "Bidirectional"));
    a.write_manifest("refused.yaml", &refused);
    let (ok, out) = validate(&a.manifests.join("refused.yaml"));
    let want = "spec.containers[0].volumeMounts[0].mountPropagation: \
                Bidirectional mount propagation is available only to privileged containers";
    assert!(!ok && out.contains(want), "crilet validate:\n{out}");
    wait_for("the refusal in the agent's log", Duration::from_secs(10), || async {
        a.log().contains(want).then_some(())
    })
    .await;
    assert!(a.pod("mp-refused").is_none(), "a refused pod is not run");

    // A source on a mount that is not shared: the container is not created, and the error names
    // the volume (where the host's own mounts are private, as on these test machines).
    let plain = a.dir.join("plain");
    std::fs::create_dir_all(&plain).expect("mkdir");
    let table = std::fs::read_to_string(crilet::mountinfo::SELF_MOUNTINFO).expect("mountinfo");
    let mounts = crilet::mountinfo::parse(&table);
    if crilet::mountinfo::propagation_problem(&mounts, &plain, false).is_some() {
        let vol = host_volume("plain", &plain);
        a.write_manifest("plain.yaml", &pod(NS, "mp-plain", &vol, &watcher("c", "plain", "HostToContainer")));
        let p = wait_for("mp-plain's container config error", Duration::from_secs(30), || async {
            let p = a.pod("mp-plain")?;
            let waiting = cstatus(&p, "c")?["state"]["waiting"].clone();
            (waiting["reason"] == "CreateContainerConfigError").then_some(waiting)
        })
        .await;
        let msg = p["message"].as_str().unwrap_or("");
        assert!(
            msg.contains("volume \"plain\" mountPropagation HostToContainer:")
                && msg.contains("not a shared or slave mount"),
            "{msg}"
        );
    } else {
        println!(
            "{} is on a shared mount here: the not-shared case is left to the unit tests",
            plain.display()
        );
    }

    // The agent's pods go, then (the guard) its root-dir bind: teardown's job after a suite.
    a.kill();
    remove_pods_of(&Env::load().cri(), &a.manifests).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn api_pods_get_host_to_container_and_the_api_server_refuses_unprivileged_bidirectional() {
    let shared = SharedDir::new("/var/lib/crilet-dev/tests/mp-host/api");
    let node = Node::start("prop", 10296, &[]).await;
    node.wait_ready().await;
    let api_pod = |name: &str, container: &str| {
        node.agent.env.render(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  nodeName: {}\n  \
             terminationGracePeriodSeconds: 1\n  volumes:\n{}  containers:\n{container}",
            node.name,
            host_volume("s", &shared.0)
        ))
    };
    // The API server refuses Bidirectional in an unprivileged container at validation.
    let (ok, out, err) = node.cluster.kubectl_in(
        &["-n", &node.namespace, "apply", "-f", "-"],
        Some(&api_pod("mp-bidi-refused", &watcher("c", "s", "Bidirectional"))),
    );
    assert!(!ok, "the API server took it: {out}");
    assert!(
        err.contains("Bidirectional mount propagation is available only to privileged containers"),
        "{err}"
    );

    node.apply(&api_pod(
        "mp-api",
        &format!("{}{}", watcher("h2c", "s", "HostToContainer"), watcher("none", "s", "None")),
    ));
    node.wait_pod("mp-api", "Running", Duration::from_secs(60), |p| p["status"]["phase"] == "Running").await;
    for c in ["h2c", "none"] {
        says(&node.agent, &node.namespace, "mp-api", c, "started").await;
    }
    host_tmpfs(&shared.path("sub"), "marker");
    std::fs::write(shared.path("go"), "").expect("write go");
    says(&node.agent, &node.namespace, "mp-api", "h2c", "SEES").await;
    says(&node.agent, &node.namespace, "mp-api", "none", "BLIND").await;
}
