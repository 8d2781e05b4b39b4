//! User namespaces (`hostUsers: false`, KEP-127; issue 36 part 8) against the real containerd.
//! With a runtime handler that reports user namespace support (containerd 2.x with runc >= 1.2),
//! the pod's container is root inside its own user namespace and an unprivileged block of host
//! IDs outside, its emptyDir is idmapped (root's file inside is root's on the host), and the
//! block survives an agent restart. With a handler that does not report it (runc 1.1), the
//! sandbox is refused with the kubelet's message. Which of the two the environment's runtime is
//! decides which is checked; the runtime's own Status answer says which it is.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use common::*;

const NS: &str = "un-userns";
/// The container's sleep, an argument no other test's container uses: its process is found by it.
const MARK: &str = "3619";

fn pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {NS}}}\nspec:\n  hostUsers: false\n  \
         terminationGracePeriodSeconds: 1\n  volumes: [{{name: data, emptyDir: {{}}}}]\n  containers:\n  \
         - name: c\n    image: ${{CRILET_IMAGE_BUSYBOX}}\n    volumeMounts: [{{name: data, mountPath: /data}}]\n    \
         command: [sh, -c, 'cat /proc/self/uid_map; id -u; touch /data/by-root; echo done; exec sleep {MARK}']\n"
    )
}

/// The host PIDs of processes running `sleep MARK`.
fn marked_pids() -> Vec<u32> {
    let want = format!("sleep\0{MARK}\0");
    std::fs::read_dir("/proc")
        .expect("read /proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want.as_bytes()))
        .collect()
}

/// The (real) UID of host process `pid`.
fn host_uid(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    let line = status.lines().find(|l| l.starts_with("Uid:")).expect("Uid line");
    line.split_whitespace().nth(1).expect("real uid").parse().expect("numeric uid")
}

/// The block of host IDs the agent recorded for the pod (its `userns` file, the kubelet's form).
fn recorded_block(root: &Path, uid: &str) -> u64 {
    let text = std::fs::read_to_string(root.join("pods").join(uid).join("userns")).expect("read userns file");
    let v: serde_json::Value = serde_json::from_str(&text).expect("userns file is JSON");
    assert_eq!(v["uidMappings"], v["gidMappings"], "one block for UIDs and GIDs: {text}");
    assert_eq!(v["uidMappings"][0]["containerId"], 0, "{text}");
    assert_eq!(v["uidMappings"][0]["length"], 65536, "{text}");
    v["uidMappings"][0]["hostId"].as_u64().expect("hostId")
}

/// Whether the environment's default runtime handler reports user namespace support.
async fn runtime_supports_user_namespaces() -> bool {
    let handlers = Env::load().cri().runtime_handlers().await.expect("CRI Status");
    handlers.iter().any(|h| h.name.is_empty() && h.features.is_some_and(|f| f.user_namespaces))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_without_host_users_gets_its_own_user_namespace_or_the_kubelets_refusal() {
    let mut a = Agent::start("un-static").await;
    a.write_manifest("userns.yaml", &pod("un-pod"));

    if !runtime_supports_user_namespaces().await {
        eprintln!("the runtime does not report user namespaces: checking the refusal");
        let refusal = "can't set `spec.hostUsers: false`, runtime does not support user namespaces";
        wait_for("the refusal in the agent's log", Duration::from_secs(30), || async {
            a.log().contains(refusal).then_some(())
        })
        .await;
        let p = a.pod("un-pod").expect("the refused pod is listed");
        assert_ne!(phase(&p), "Running", "{}", p["status"]);
        assert!(p["status"]["containerStatuses"][0]["state"]["running"].is_null(), "{}", p["status"]);
        return;
    }

    eprintln!("the runtime reports user namespaces: checking the pod's");
    let printed = printed_before(&a, NS, "un-pod", "c", "done").await;
    let p = running_pod(&a, "un-pod").await;
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let block = recorded_block(&a.root, &uid);
    assert!(block >= 65536 && block.is_multiple_of(65536), "the block is past the host's own IDs: {block}");
    // Inside: root, with 65536 IDs mapped from the block (not the identity map 0 0 4294967295).
    let map: Vec<&str> = printed[0].split_whitespace().collect();
    assert_eq!(map, ["0", &block.to_string(), "65536"], "uid_map: {printed:?}");
    assert_eq!(printed[1], "0", "root inside: {printed:?}");
    // Outside: the same process is the block's first ID, not root.
    let pids = marked_pids();
    assert_eq!(pids.len(), 1, "one container sleeping {MARK}: {pids:?}");
    assert_eq!(u64::from(host_uid(pids[0])), block, "the container's process on the host");
    // The emptyDir is idmapped: the file root made inside is root's on the host.
    let file = a.root.join("pods").join(&uid).join("volumes/kubernetes.io~empty-dir/data/by-root");
    let meta = std::fs::metadata(&file).expect("the file the container made");
    assert_eq!((meta.uid(), meta.gid()), (0, 0), "{} on the host", file.display());

    // Across an agent restart the pod keeps its block: the container's next instance (after its
    // process is killed) gets the same mapping.
    a.kill();
    a.spawn();
    let _ = running_pod(&a, "un-pod").await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pids[0]).expect("pid")),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the container's process");
    let old = pids[0];
    let again = wait_for("the container's second instance", Duration::from_secs(60), || async {
        let p = a.pod("un-pod")?;
        let c = &p["status"]["containerStatuses"][0];
        if c["restartCount"] != 1 || c["state"]["running"].is_null() {
            return None;
        }
        let pids = marked_pids();
        (pids.len() == 1 && pids[0] != old).then_some(pids)
    })
    .await;
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(u64::from(host_uid(again[0])), block, "the second instance runs in the same block");
    assert_eq!(recorded_block(&a.root, &uid), block);
    eprintln!("block {block}: process {old} then {} on the host, uid_map {:?} inside", again[0], printed[0]);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_api_pod_without_host_users_is_admitted_and_gets_its_own_user_namespace() {
    let node = common::cluster::Node::start("userns", 10291, &[]).await;
    node.wait_ready().await;
    node.apply(&node.agent.env.render(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: un-api}}\nspec:\n  nodeName: {}\n  hostUsers: false\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: ${{CRILET_IMAGE_BUSYBOX}}\n    \
         command: [sh, -c, 'cat /proc/self/uid_map; exec sleep 3600']\n",
        node.name
    )));
    if !runtime_supports_user_namespaces().await {
        let refusal = "can't set `spec.hostUsers: false`, runtime does not support user namespaces";
        wait_for("the refusal in the agent's log", Duration::from_secs(30), || async {
            node.agent.log().contains(refusal).then_some(())
        })
        .await;
        let p = node.api_pod("un-api").expect("the pod");
        assert_eq!(p["status"]["phase"], "Pending", "admitted, its sandbox refused: {}", p["status"]);
        return;
    }
    let p = node
        .wait_pod("un-api", "Running", Duration::from_secs(60), |p| p["status"]["phase"] == "Running")
        .await;
    let uid = p["metadata"]["uid"].as_str().expect("uid");
    let block = recorded_block(&node.agent.root, uid);
    let want = format!("0 {block} 65536");
    wait_for("the pod's uid_map in its log", Duration::from_secs(20), || async {
        let (ok, out, _) = node.kubectl(&["logs", "un-api"]);
        (ok && out.lines().any(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") == want)).then_some(())
    })
    .await;
}
