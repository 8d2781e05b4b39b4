//! A containerd of the test's own on a small tmpfs, for tests that remove images (image garbage
//! collection, eviction's disk reclaim): they remove every eligible image of the runtime they
//! talk to, so they must never run against the shared one the other tests use. The test mounts
//! the tmpfs, starts the shared environment's containerd binary on it (root, state, socket and
//! runc root inside) and pulls what it needs from the local registry into it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crilet::cri::CriClient;

use super::{Env, unmount_below, wait_for};

/// The tmpfs the private containerd keeps everything on.
pub const TMPFS_SIZE: &str = "96m";

/// A containerd of the test's own on a tmpfs; on drop its pods are removed, it is stopped and
/// the tmpfs unmounted, whatever happened.
pub struct PrivateContainerd {
    dir: PathBuf,
    fs: PathBuf,
    pub endpoint: String,
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
    pub async fn start(env: &Env, dir: &Path) -> PrivateContainerd {
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

    pub fn cri(&self) -> CriClient {
        CriClient::new(&self.endpoint, &self.endpoint).expect("CRI client")
    }

    /// Imports an image `reference` of one layer of its own, `mib` MiB of random bytes, by the
    /// shared environment's `ctr` (an OCI layout made here, not pushed anywhere): an unused image
    /// whose removal frees that much, which the registry's images cannot give (they share their
    /// layers with the busybox image that is in use). Waits until CRI lists it.
    pub async fn import_filler(&self, env: &Env, reference: &str, mib: u32) {
        let work = self.dir.join(format!("filler-{mib}"));
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work).expect("mkdir filler");
        let script = r#"set -eu
d=$1; mkdir -p "$d/oci/blobs/sha256" "$d/layer"
head -c "$(($2 * 1048576))" /dev/urandom > "$d/layer/filler"
blob() { h=$(sha256sum "$1" | cut -d' ' -f1); s=$(stat -c %s "$1"); mv "$1" "$d/oci/blobs/sha256/$h"; echo "$h $s"; }
tar -C "$d/layer" -cf "$d/layer.tar" filler
set -- "$3" $(blob "$d/layer.tar")
ref=$1 layer=$2 layer_size=$3
printf '{"architecture":"amd64","os":"linux","config":{},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$layer" > "$d/config.json"
set -- $(blob "$d/config.json")
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' "$1" "$2" "$layer" "$layer_size" > "$d/manifest.json"
set -- $(blob "$d/manifest.json")
printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"%s"}}]}' "$1" "$2" "$ref" > "$d/oci/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' > "$d/oci/oci-layout"
tar -C "$d/oci" -cf "$d/image.tar" oci-layout index.json blobs
"#;
        let ok = Command::new("sh")
            .args(["-c", script, "filler"])
            .arg(&work)
            .arg(mib.to_string())
            .arg(reference)
            .status()
            .expect("run sh");
        assert!(ok.success(), "making the OCI layout of {reference} in {}", work.display());
        let ctr = Path::new(&env.get("CRILET_CONTAINERD_BIN_DIR")).join("ctr");
        let socket = self.fs.join("containerd.sock");
        let out = Command::new(ctr)
            .arg("--address")
            .arg(&socket)
            .args(["--namespace", "k8s.io", "images", "import"])
            .arg(work.join("image.tar"))
            .output()
            .expect("run ctr");
        assert!(
            out.status.success(),
            "ctr images import {reference}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let _ = std::fs::remove_dir_all(&work);
        let cri = self.cri();
        wait_for(&format!("CRI to list {reference}"), Duration::from_secs(20), || async {
            tags(&images(&cri).await).contains(reference).then_some(())
        })
        .await;
    }

    /// The tmpfs' (capacity, available) bytes.
    pub fn space(&self) -> (u64, u64) {
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
pub async fn images(cri: &CriClient) -> Vec<(String, String, u64, bool)> {
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

pub fn tags(list: &[(String, String, u64, bool)]) -> BTreeSet<String> {
    list.iter().map(|i| i.1.clone()).collect()
}
