//! Image garbage collection (issue 37, part 3) on a real containerd of the test's own
//! (`common::private_containerd`: image garbage collection removes every eligible image of the
//! runtime it talks to, so it must never run against the shared one): images pulled from the
//! local registry into it, crilet run against it with thresholds computed from the tmpfs' real
//! usage.

mod common;

use std::path::Path;
use std::time::Duration;

use common::private_containerd::{PrivateContainerd, images, tags};
use common::*;

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
