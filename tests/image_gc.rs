//! Image garbage collection (issue 37, part 3) on a real containerd of the test's own: image
//! garbage collection removes every eligible image of the runtime it talks to, so it must never
//! run against the shared one the other tests use. The test mounts a small tmpfs, starts the
//! shared environment's containerd binary on it (root, state, socket and runc root inside),
//! pulls images from the local registry into it and runs crilet against it with thresholds
//! computed from the tmpfs' real usage.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use crilet::cri::CriClient;

/// The tmpfs the private containerd keeps everything on.
const TMPFS_SIZE: &str = "96m";

/// A containerd of the test's own on a tmpfs; on drop its pods are removed, it is stopped and
/// the tmpfs unmounted, whatever happened.
struct PrivateContainerd {
    dir: PathBuf,
    fs: PathBuf,
    endpoint: String,
    child: Option<Child>,
}

/// A value of `key = "..."` in the shared containerd's config (which runc, which certs.d).
fn shared_setting(config: &str, key: &str) -> String {
    config
        .lines()
        .map(str::trim)
        .find_map(|l| {
            l.strip_prefix(key)?.trim_start().strip_prefix('=')?.trim().strip_prefix('"')?.strip_suffix('"')
        })
        .unwrap_or_else(|| panic!("{key} not in the shared containerd config"))
        .to_string()
}

impl PrivateContainerd {
    async fn start(env: &Env, dir: &Path) -> PrivateContainerd {
        unmount_below(dir);
        let _ = std::fs::remove_dir_all(dir);
        let fs = dir.join("fs");
        std::fs::create_dir_all(&fs).expect("mkdir");
        let mut this = PrivateContainerd {
            dir: dir.to_path_buf(),
            fs: fs.clone(),
            endpoint: format!("unix://{}", fs.join("containerd.sock").display()),
            child: None,
        };
        nix::mount::mount(
            Some("tmpfs"),
            &fs,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some(format!("size={TMPFS_SIZE},mode=0755").as_str()),
        )
        .expect("mount the tmpfs");
        let shared = std::fs::read_to_string(env.get("CRILET_CONTAINERD_CONFIG")).expect("shared config");
        let runc = shared_setting(&shared, "BinaryName");
        let certs = shared_setting(&shared, "config_path");
        let shared_cni = shared_setting(&shared, "conf_dir");
        // The runtime reports NetworkReady only with a CNI config; hostNetwork pods never use it.
        let cni = fs.join("net.d");
        std::fs::create_dir_all(&cni).expect("mkdir net.d");
        for entry in std::fs::read_dir(&shared_cni).expect("shared CNI dir").flatten() {
            std::fs::copy(entry.path(), cni.join(entry.file_name())).expect("copy CNI config");
        }
        let config = format!(
            r#"version = 3
root = "{fs}/root"
state = "{fs}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.erofs", "io.containerd.nri.v1.nri"]
[grpc]
  address = "{fs}/containerd.sock"
[ttrpc]
  address = ""
[debug]
  address = ""
[metrics]
  address = ""
[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = "{fs}/opt"
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "{pause}"
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = "{certs}"
  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    enable_cdi = false
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "{fs}/runc"
          BinaryName = "{runc}"
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["/usr/lib/cni"]
      conf_dir = "{cni}"
      max_conf_num = 1
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
"#,
            fs = fs.display(),
            pause = env.get("CRILET_IMAGE_PAUSE"),
            cni = cni.display(),
        );
        let config_file = fs.join("config.toml");
        std::fs::write(&config_file, config).expect("write config");
        let log = std::fs::File::create(dir.join("containerd.log")).expect("containerd log");
        let child = Command::new(Path::new(&env.get("CRILET_CONTAINERD_BIN_DIR")).join("containerd"))
            .arg("--config")
            .arg(&config_file)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start the private containerd");
        this.child = Some(child);
        let cri = this.cri();
        wait_for("the private containerd answers and is ready", Duration::from_secs(30), || async {
            cri.check_ready().await.ok()
        })
        .await;
        this
    }

    fn cri(&self) -> CriClient {
        CriClient::new(&self.endpoint, &self.endpoint).expect("CRI client")
    }

    /// The tmpfs' (capacity, available) bytes.
    fn space(&self) -> (u64, u64) {
        let s = nix::sys::statvfs::statvfs(&self.fs).expect("statvfs");
        (s.blocks() * s.fragment_size(), s.blocks_available() * s.fragment_size())
    }
}

impl Drop for PrivateContainerd {
    fn drop(&mut self) {
        // Every pod on it goes first (its containers would outlive containerd), from a thread of
        // its own: drop may run inside the test's runtime.
        let endpoint = self.endpoint.clone();
        let removal = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async {
                let cri = CriClient::new(&endpoint, &endpoint).expect("CRI client");
                let mut uids = Vec::new();
                if let Ok((sandboxes, _)) = cri.list_all(None).await {
                    for sb in sandboxes {
                        uids.extend(sb.labels.get(crilet::model::keys::POD_UID).cloned());
                        let _ = cri.stop_sandbox(&sb.id).await;
                        let _ = cri.remove_sandbox(&sb.id).await;
                    }
                }
                uids
            })
        });
        let uids = removal.join().unwrap_or_default();
        // The pods' cgroups crilet made (it was stopped before it could sweep them): empty now.
        remove_pod_cgroups(&uids);
        if let Some(mut child) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let started = Instant::now();
            while child.try_wait().ok().flatten().is_none() {
                if started.elapsed() > Duration::from_secs(10) {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        unmount_below(&self.dir);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Removes the (empty) cgroups of pods `uids` in every hierarchy, under any QoS class.
fn remove_pod_cgroups(uids: &[String]) {
    let Ok(roots) = std::fs::read_dir("/sys/fs/cgroup") else { return };
    let mut roots: Vec<PathBuf> = roots.flatten().map(|e| e.path()).collect();
    roots.push("/sys/fs/cgroup".into());
    for root in roots {
        for parent in ["kubepods", "kubepods/burstable", "kubepods/besteffort"] {
            for uid in uids {
                let dir = root.join(parent).join(format!("pod{uid}"));
                if let Ok(children) = std::fs::read_dir(&dir) {
                    for child in children.flatten().filter(|c| c.path().is_dir()) {
                        let _ = std::fs::remove_dir(child.path());
                    }
                    let _ = std::fs::remove_dir(&dir);
                }
            }
        }
    }
}

/// The images the runtime holds: ID to (first tag, size, pinned).
async fn images(cri: &CriClient) -> Vec<(String, String, u64, bool)> {
    let mut out: Vec<_> = cri
        .images()
        .await
        .expect("ListImages")
        .into_iter()
        .map(|i| (i.id.clone(), i.repo_tags.first().cloned().unwrap_or_default(), i.size, i.pinned))
        .collect();
    out.sort();
    out
}

fn tags(list: &[(String, String, u64, bool)]) -> BTreeSet<String> {
    list.iter().map(|i| i.1.clone()).collect()
}

const POD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: gc-user
  namespace: image-gc
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 0
  containers:
  - name: app
    image: ${CRILET_IMAGE_BUSYBOX}
    command: ["sleep", "3600"]
"#;

#[tokio::test]
async fn unused_images_go_down_to_the_low_threshold_in_use_and_pinned_stay() {
    let env = Env::load();
    let containerd =
        PrivateContainerd::start(&env, Path::new("/var/lib/crilet-dev/tests/image-gc-containerd")).await;
    let cri = containerd.cri();
    let (busybox, pause) = (env.get("CRILET_IMAGE_BUSYBOX"), env.get("CRILET_IMAGE_PAUSE"));
    let unused = [env.get("CRILET_IMAGE_WEB_V1"), env.get("CRILET_IMAGE_WEB_V2")];
    for image in [&pause, &busybox].into_iter().chain(&unused) {
        cri.pull_image(image, None).await.unwrap_or_else(|e| panic!("pull {image}: {e}"));
    }
    let before = images(&cri).await;
    assert!(before.iter().any(|i| i.1 == pause && i.3), "the runtime pins its sandbox image: {before:?}");
    // The kubelet's usage arithmetic on the tmpfs as it is now: the high threshold at the usage
    // itself, the low one a percent under it, so one image or two free enough.
    let (capacity, available) = containerd.space();
    let usage = 100 - available * 100 / capacity;
    assert!(usage >= 2, "the images fill too little of the tmpfs to test with ({usage} %)");
    let (high, low) = (usage.to_string(), (usage - 1).to_string());
    let mut a = Agent::start_with_endpoint_args(
        "image-gc",
        &containerd.endpoint,
        &[
            "--image-gc-high-threshold",
            &high,
            "--image-gc-low-threshold",
            &low,
            "--minimum-image-ttl-duration",
            "0s",
        ],
        &[],
    )
    .await;
    a.write_manifest("gc-user.yaml", POD);
    running_pod(&a, "gc-user").await;
    // Removal order among never-used images first detected together: by ID (least recently
    // used first needs two detections, 5 min apart: the policy's table tests show it).
    let mut order: Vec<&(String, String, u64, bool)> =
        before.iter().filter(|i| unused.contains(&i.1)).collect();
    order.sort_by(|x, y| x.0.cmp(&y.0));
    let first = order[0].1.clone();
    let after = wait_for("the first unused image removed", Duration::from_secs(40), || async {
        let now = images(&cri).await;
        (!tags(&now).contains(&first)).then_some(now)
    })
    .await;
    let kept = tags(&after);
    assert!(kept.contains(&busybox), "the image in use is kept: {kept:?}\n{}", a.log());
    assert!(kept.contains(&pause), "the pinned sandbox image is kept: {kept:?}");
    assert!(
        order[0].2 < (capacity / 100) || kept.contains(&order[1].1),
        "removal stopped at the low threshold: {} kept (the first freed {} of at most {} wanted)\n{}",
        order[1].1,
        order[0].2,
        capacity / 100,
        a.whole_log()
    );
    assert!(!a.whole_log().contains("FreeDiskSpaceFailed"), "enough was freed\n{}", a.whole_log());

    // Again with a low threshold no removal can reach: every unused image goes, and the node
    // records FreeDiskSpaceFailed.
    a.stop();
    a.extra_args = [
        "--image-gc-high-threshold",
        "1",
        "--image-gc-low-threshold",
        "0",
        "--minimum-image-ttl-duration",
        "0s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.spawn();
    wait_for("FreeDiskSpaceFailed recorded", Duration::from_secs(40), || async {
        a.whole_log().contains("FreeDiskSpaceFailed").then_some(())
    })
    .await;
    let kept = tags(&images(&cri).await);
    assert!(unused.iter().all(|u| !kept.contains(u)), "every unused image removed: {kept:?}");
    assert!(kept.contains(&busybox) && kept.contains(&pause), "in use and pinned kept: {kept:?}");
    a.stop();
    drop(containerd);
}

/// Cluster mode: the Node lists the runtime's images as the kubelet does, largest first, at
/// most 50, each named by its digests and tags (image garbage collection stays off: the shared
/// containerd).
#[tokio::test]
async fn node_status_lists_the_runtimes_images_largest_first() {
    let node = common::cluster::Node::start("image_gc_node", 10280, &[]).await;
    node.wait_ready().await;
    let runtime = Env::load().cri().images().await.expect("ListImages");
    // Named by digest first: the busybox image carries more than five names here (other tests
    // tag it), so its tag may be past the kubelet's cut.
    let busybox = format!(
        "{}/busybox@{}",
        node.agent.env.get("CRILET_REGISTRY"),
        node.agent.env.get("CRILET_IMAGE_BUSYBOX_DIGEST")
    );
    let listed = wait_for("the Node's images", Duration::from_secs(40), || async {
        let n = node.cluster.get_json(&["node", &node.name])?;
        let images = n["status"]["images"].as_array()?.clone();
        (!images.is_empty()).then_some(images)
    })
    .await;
    assert_eq!(listed.len(), runtime.len().min(50), "one entry per image, 50 at most");
    let sizes: Vec<i64> = listed.iter().map(|i| i["sizeBytes"].as_i64().unwrap_or(-1)).collect();
    assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "largest first: {sizes:?}");
    let largest = runtime.iter().map(|i| i.size as i64).max().unwrap_or(0);
    assert_eq!(sizes[0], largest, "the runtime's largest image first");
    let names: Vec<&str> = listed
        .iter()
        .flat_map(|i| i["names"].as_array().into_iter().flatten())
        .filter_map(|n| n.as_str())
        .collect();
    assert!(names.contains(&busybox.as_str()), "{busybox} among the names: {names:?}");
    assert!(
        listed.iter().all(|i| i["names"].as_array().is_some_and(|n| n.len() <= 5)),
        "five names at most per image: {listed:?}"
    );
}

/// Deletes a test's Node and the events about it, whatever happened.
struct NodeObject {
    cluster: common::cluster::Cluster,
    name: String,
}

impl Drop for NodeObject {
    fn drop(&mut self) {
        let selector = format!("involvedObject.kind=Node,involvedObject.name={}", self.name);
        let _ = self.cluster.kubectl(&["delete", "events", "-n", "default", "--field-selector", &selector]);
        let _ = self.cluster.kubectl(&["delete", "node", &self.name, "--wait=false"]);
    }
}

/// Cluster mode: FreeDiskSpaceFailed is an Event on the Node, as the kubelet records it (a
/// node on the test's own containerd, whose low threshold no removal can reach).
#[tokio::test]
async fn free_disk_space_failed_is_an_event_on_the_node() {
    let env = Env::load();
    let containerd =
        PrivateContainerd::start(&env, Path::new("/var/lib/crilet-dev/tests/image-gc-event-containerd"))
            .await;
    let cri = containerd.cri();
    let unused = env.get("CRILET_IMAGE_WEB_V1");
    cri.pull_image(&unused, None).await.expect("pull");
    let cluster = common::cluster::Cluster::load();
    let name = "crilet-image-gc-event".to_string();
    let _ = cluster.kubectl(&["delete", "node", &name, "--wait=true"]);
    let node = NodeObject { cluster: common::cluster::Cluster::load(), name: name.clone() };
    let id = cluster.node_identity(&name);
    let mut a = Agent::start_with_endpoint_args(
        "image-gc-event",
        &containerd.endpoint,
        &[
            "--kubeconfig",
            &id["CRILET_NODE_KUBECONFIG"],
            "--tls-cert-file",
            &id["CRILET_NODE_TLS_CERT"],
            "--tls-private-key-file",
            &id["CRILET_NODE_TLS_KEY"],
            "--client-ca-file",
            &id["CRILET_CLUSTER_CA"],
            "--node-ip",
            "127.0.0.1",
            "--port",
            "10290",
            "--node-name",
            &name,
            "--image-gc-high-threshold",
            "1",
            "--image-gc-low-threshold",
            "0",
            "--minimum-image-ttl-duration",
            "0s",
        ],
        &[],
    )
    .await;
    let selector = format!("involvedObject.kind=Node,involvedObject.name={name},reason=FreeDiskSpaceFailed");
    let event = wait_for("a FreeDiskSpaceFailed Event on the Node", Duration::from_secs(60), || async {
        let list = cluster.get_json(&["events", "-n", "default", "--field-selector", &selector])?;
        list["items"].as_array()?.first().cloned()
    })
    .await;
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["source"]["component"], "kubelet");
    let message = event["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with("Failed to garbage collect required amount of images. Attempted to free "),
        "the kubelet's message: {message}\n{}",
        a.log()
    );
    assert!(!tags(&images(&cri).await).contains(&unused), "the unused image was removed");
    a.stop();
    drop(node);
    drop(containerd);
}
