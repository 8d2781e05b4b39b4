//! What the agent leaves on the machine: orphaned pod cgroups (a sandbox removed behind the
//! agent's back) are swept; cgroups of live pods, young ones and foreign ones are not touched.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: alive, namespace: t-hygiene}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
"#;

/// `rel` in each cgroup tree the host mounts (a v1 controller, v2's `unified`, or the v2 root),
/// whether or not `rel`'s parents exist yet (on a fresh machine no pod has made `kubepods`).
fn cgroup_dirs(rel: &str) -> Vec<PathBuf> {
    ["memory", "cpu,cpuacct", "pids", "unified", ""]
        .iter()
        .map(|h| Path::new("/sys/fs/cgroup").join(h))
        .filter(|tree| tree.join("cgroup.procs").is_file())
        .map(|tree| tree.join(rel))
        .collect()
}

fn make_old(dir: &Path) {
    std::fs::create_dir_all(dir).expect("mkdir cgroup");
    let status =
        std::process::Command::new("touch").args(["-d", "2020-01-01"]).arg(dir).status().expect("touch");
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn orphaned_pod_cgroups_are_swept_and_nothing_else() {
    let uid = uuid::Uuid::new_v4().to_string();
    let orphan = cgroup_dirs(&format!("kubepods/besteffort/pod{uid}"));
    let young_uid = uuid::Uuid::new_v4().to_string();
    let young = cgroup_dirs(&format!("kubepods/burstable/pod{young_uid}"));
    let foreign = cgroup_dirs(&format!("crilet-test-foreign/pod{uid}"));
    for d in &orphan {
        make_old(d);
    }
    for d in &young {
        std::fs::create_dir_all(d).expect("mkdir cgroup");
    }
    for d in &foreign {
        make_old(d);
    }
    assert!(!orphan.is_empty());

    let a = Agent::start("hygiene-cgroups").await;
    a.write_manifest("alive.yaml", POD);
    let p = running_pod(&a, "alive").await;
    let live_uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    // The node allocatable cgroup holds the node's process IDs: the lesser of the kernel's two
    // bounds (the kubelet's `pidlimit`), in the pids tree of a v1 host or in the unified one.
    let kernel = |f: &str| -> i64 {
        std::fs::read_to_string(format!("/proc/sys/kernel/{f}")).expect(f).trim().parse().expect(f)
    };
    let pids = kernel("pid_max").min(kernel("threads-max"));
    let pids_max = ["/sys/fs/cgroup/pids/kubepods/pids.max", "/sys/fs/cgroup/kubepods/pids.max"]
        .iter()
        .find_map(|f| std::fs::read_to_string(f).ok())
        .expect("kubepods has a pids.max");
    assert_eq!(pids_max.trim(), pids.to_string(), "kubepods pids.max");
    wait_for("the orphaned pod cgroups removed", Duration::from_secs(60), || async {
        orphan.iter().all(|d| !d.exists()).then_some(())
    })
    .await;
    // Make the live pod's cgroup look old too: it must survive the next sweep (at an agent start).
    let live = cgroup_dirs(&format!("kubepods/besteffort/pod{live_uid}"));
    let live: Vec<PathBuf> = live.into_iter().filter(|d| d.is_dir()).collect();
    assert!(!live.is_empty(), "the live pod has cgroups");
    for d in &live {
        make_old(d);
    }
    let mut a = a;
    a.kill();
    a.spawn();
    let sentinel_uid = uuid::Uuid::new_v4().to_string();
    let sentinel = cgroup_dirs(&format!("kubepods/besteffort/pod{sentinel_uid}"));
    for d in &sentinel {
        make_old(d);
    }
    wait_for("the restarted agent's sweep", Duration::from_secs(60), || async {
        sentinel.iter().all(|d| !d.exists()).then_some(())
    })
    .await;
    assert!(live.iter().all(|d| d.is_dir()), "a live pod's cgroup was removed");
    assert!(young.iter().all(|d| d.is_dir()), "a young pod cgroup was removed");
    assert!(foreign.iter().all(|d| d.is_dir()), "a cgroup outside kubepods was touched");
    for d in young.iter().chain(&foreign) {
        let _ = std::fs::remove_dir(d);
    }
    for d in &foreign {
        if let Some(parent) = d.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}
