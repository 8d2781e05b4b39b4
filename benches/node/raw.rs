//! The baseline: a pod started with the least CRI a pod start takes, `RunPodSandbox` (cgroup
//! parent and log directory set) → `CreateContainer` → `StartContainer` per container, with the
//! configs crilet would send (built by crilet's own `sandbox_config`/`container_config`), and
//! nothing else: no manifest, no status, no `PodSandboxStatus` or `ImageStatus` (the image is
//! resolved once before anything is timed), no waiting for an observation between containers.
//! This is the limit an agent is measured against (issue 17's outside-in baseline).
//! [`Image::Status`] is the variant of the outside method (issue 33): `ImageStatus` for each
//! container, timed, as the agent asks it for an `IfNotPresent` image.
//!
//! Per pod: log and pod directories, `RunPodSandbox`, then per container in start order (native
//! sidecars first, then apps): the container's log directory, its hostPath volumes, /etc/hosts
//! (without the pod IP, which only `PodSandboxStatus` would tell) and termination-message file
//! (the bind mounts crilet gives it), `CreateContainer`, `StartContainer`. crilet starts an app
//! only after it has seen the sidecars before it running; the baseline goes on at once.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crilet::cri::{CriClient, api};
use crilet::model::{DesiredPod, PodKey};
use crilet::node::{pod_dir, pod_log_dir};
use crilet::pod::spec::{Kind, NodeConfig, RuntimeValues, container_config, sandbox_config};
use crilet::pod::start::hosts_file;
use k8s_openapi::api::core::v1::Pod;

pub fn node(dir: &Path) -> NodeConfig {
    NodeConfig {
        root_dir: dir.join("raw/root"),
        pod_logs_dir: dir.join("raw/logs"),
        container_logs_dir: None,
        node_name: "bench-node".into(),
        host_ip: None,
        dns: crilet::dns::DnsSettings::default(),
        cgroup_driver: Default::default(),
        seccomp_default: false,
    }
}

/// The baseline's view of a pod parsed from the same manifest text crilet gets.
pub fn desired(namespace: &str, yaml: &str) -> DesiredPod {
    let mut pod: Pod = serde_yaml_ng::from_str(yaml).expect("the benchmark's own manifest parses");
    pod.metadata.namespace = Some(namespace.into());
    let name = pod.metadata.name.clone().expect("manifest has a name");
    DesiredPod {
        key: PodKey::new(namespace, &name),
        uid: format!("{namespace}-{}", uuid::Uuid::new_v4()),
        pod: Arc::new(pod),
        source: crilet::model::PodSource::File("/nonexistent".into()),
        doc: 0,
        warnings: vec![],
    }
}

fn mkdir(p: &Path) {
    std::fs::create_dir_all(p).unwrap_or_else(|e| panic!("creating {}: {e}", p.display()));
}

/// The two bind mounts crilet gives a container: its /etc/hosts and its termination-message file.
fn mounts(node: &NodeConfig, d: &DesiredPod, name: &str, ips: &[String]) -> (Vec<api::Mount>, PathBuf) {
    let dir = pod_dir(node, &d.uid);
    let hosts = dir.join("etc-hosts");
    std::fs::write(&hosts, hosts_file(&d.pod, ips)).expect("write etc-hosts");
    let tdir = dir.join("containers").join(name);
    mkdir(&tdir);
    let tfile = tdir.join(format!("{:08x}", fastrand::u32(..)));
    std::fs::write(&tfile, b"").expect("write termination file");
    let m = |c: &str, h: &Path| api::Mount {
        container_path: c.into(),
        host_path: h.display().to_string(),
        ..Default::default()
    };
    // hostPath volumes as they are (the benchmark's pods use no other kind).
    let volumes = d.pod.spec.as_ref().and_then(|s| s.volumes.clone()).unwrap_or_default();
    let spec = d.pod.spec.as_ref().expect("pod spec");
    let c = spec.init_containers.iter().flatten().chain(&spec.containers).find(|c| c.name == name);
    let mut out = Vec::new();
    for vm in c.and_then(|c| c.volume_mounts.as_ref()).into_iter().flatten() {
        let v = volumes.iter().find(|v| v.name == vm.name).expect("volume of the mount");
        let hp = v.host_path.as_ref().expect("the baseline supports hostPath volumes only");
        mkdir(Path::new(&hp.path));
        out.push(m(&vm.mount_path, Path::new(&hp.path)));
    }
    out.extend([m("/etc/hosts", &hosts), m("/dev/termination-log", &tfile)]);
    (out, tfile)
}

/// How the baseline gets the image each container is created from.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Image {
    /// `image_ref`, resolved once before anything is timed: no image call in the sequence.
    Resolved,
    /// `ImageStatus` of the container's image right before its `CreateContainer`, timed, its
    /// answer's ID the image the container is created from (as the agent does for an image
    /// with `imagePullPolicy: IfNotPresent` that is present; the agent asks beside
    /// `RunPodSandbox`, this sequence after it).
    Status,
}

/// Runs the pod as described in the module doc, every container from `image_ref` (the
/// benchmarks' pods use one image); returns (sandbox id, container ids).
pub async fn start_pod(
    cri: &CriClient,
    node: &NodeConfig,
    d: &DesiredPod,
    image_ref: &str,
) -> (String, Vec<String>) {
    start_pod_each(cri, node, d, image_ref, Image::Resolved, |_| {}).await
}

/// [`start_pod`] with the image taken as `image` says, calling `started` with each container's
/// id as soon as it has started.
pub async fn start_pod_each(
    cri: &CriClient,
    node: &NodeConfig,
    d: &DesiredPod,
    image_ref: &str,
    image: Image,
    mut started: impl FnMut(&str),
) -> (String, Vec<String>) {
    let spec = d.pod.spec.as_ref().expect("pod spec");
    mkdir(&pod_log_dir(node, d));
    mkdir(&pod_dir(node, &d.uid));
    let sb_cfg = sandbox_config(node, d, 0, Default::default());
    let sb = cri.run_sandbox(sb_cfg.clone(), "").await.expect("RunPodSandbox");
    // The pod cgroup's values, written as the agent (like the kubelet's pod container manager)
    // writes them before any container starts: not a CRI call, but it sets how much CPU the
    // pod's processes get when the machine is busy (a BestEffort pod's cpu.shares is 2), and
    // a probe's exec runs in that cgroup.
    let pod = &d.pod;
    let parent = crilet::pod::spec::cgroup_parent(node, pod, &d.uid);
    crilet::cgroup::files::Hierarchy::host()
        .write_values(&parent, &crilet::pod::resize::pod_cgroup(pod))
        .expect("pod cgroup");
    let ips: Vec<String> = Vec::new();
    let sidecars = spec.init_containers.iter().flatten().map(|c| (c, Kind::Sidecar));
    let mut ids = Vec::new();
    for (c, kind) in sidecars.chain(spec.containers.iter().map(|c| (c, Kind::App))) {
        let image_ref = match image {
            Image::Resolved => image_ref.to_string(),
            Image::Status => {
                let name = c.image.as_deref().expect("the benchmark's containers name their image");
                let found = cri.image_id(name).await.expect("ImageStatus");
                found.unwrap_or_else(|| panic!("{name} not present: hack/setup.sh pulls it")).id
            }
        };
        mkdir(&pod_log_dir(node, d).join(&c.name));
        let (mounts, tfile) = mounts(node, d, &c.name, &ips);
        let rv = RuntimeValues {
            pod_ips: ips.clone(),
            image_ref,
            restart_count: 0,
            termination_file: Some(tfile),
            ..Default::default()
        };
        let cfg = container_config(node, d, c, kind, &rv, mounts).expect("container config");
        let id = cri.create_container(&sb, cfg, sb_cfg.clone()).await.expect("CreateContainer");
        cri.start_container(&id).await.expect("StartContainer");
        started(&id);
        ids.push(id);
    }
    (sb, ids)
}

/// Stops and removes a baseline pod (not measured).
pub async fn remove_pod(cri: &CriClient, sandbox: &str) {
    cri.stop_sandbox(sandbox).await.expect("StopPodSandbox");
    cri.remove_sandbox(sandbox).await.expect("RemovePodSandbox");
}

/// [`remove_pod`] for every sandbox, all at once.
pub async fn remove_pods(cri: &CriClient, sandboxes: Vec<String>) {
    let removals: Vec<_> = sandboxes
        .into_iter()
        .map(|sb| {
            let cri = cri.clone();
            tokio::spawn(async move { remove_pod(&cri, &sb).await })
        })
        .collect();
    for r in removals {
        r.await.expect("raw pod removal");
    }
}
