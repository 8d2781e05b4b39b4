//! Cluster mode on a node as production runs them: crilet.service in `hack/guest.sh`'s guest
//! (systemd as PID 1, cgroup v2, containerd 2.1) joins `hack/cluster.sh`'s control plane through
//! the guest's one way out (slirp's guestfwd to the host's API server), and API pods run, update
//! in place, resize and go under each cgroup driver: the pod's cgroup or slice is checked in the
//! guest, its status in the API.
//!
//! Ignored by a plain `cargo test`: they need `hack/guest.sh up` and `hack/cluster.sh`.
//! hack/test.sh's guest leg runs them with `--ignored --test-threads=1`.

mod common;

use common::cluster::Cluster;
use common::guest::{Guest, NODE, SLOW, condition, runtime_driver_switch, wait_until};
use serde_json::Value;

/// A Guaranteed pod with a native sidecar: the pod's limits are the sum (600m, 80Mi).
fn web(namespace: &str, image: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: web, namespace: {namespace}}}
spec:
  nodeName: {NODE}
  terminationGracePeriodSeconds: 2
  initContainers:
  - name: side
    image: {image}
    restartPolicy: Always
    command: [sleep, "3600"]
    resources: {{limits: {{cpu: 100m, memory: 16Mi}}}}
  containers:
  - name: app
    image: {image}
    command: [sleep, "3600"]
    resources: {{limits: {{cpu: 500m, memory: 64Mi}}}}
"#
    )
}

/// The status of container `name` (init or regular) in an API pod.
fn cstatus(pod: &Value, name: &str) -> Value {
    ["initContainerStatuses", "containerStatuses"]
        .iter()
        .flat_map(|k| pod["status"][*k].as_array().cloned().unwrap_or_default())
        .find(|c| c["name"] == name)
        .unwrap_or(Value::Null)
}

fn id(pod: &Value, name: &str) -> String {
    cstatus(pod, name)["containerID"]
        .as_str()
        .unwrap_or_default()
        .trim_start_matches("containerd://")
        .to_string()
}

/// Waits until the API pod `web` satisfies `ok`; the pod.
fn wait_web(cluster: &Cluster, namespace: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    wait_until(what, SLOW, || cluster.get_json(&["pod", "-n", namespace, "web"]).filter(|p| ok(p)))
}

fn running_and_ready(p: &Value) -> bool {
    p["status"]["phase"] == "Running" && condition(p, "Ready")["status"] == "True"
}

/// One round on the driver in force: run, update the app's image, resize, delete; the pod's
/// cgroup (`pod_cgroup` of its UID) followed in the guest.
fn round(g: &Guest, cluster: &Cluster, namespace: &str, systemd: bool) {
    let busybox = g.env.get("CRILET_IMAGE_BUSYBOX");
    let web_v1 = busybox.replace("busybox:1.36", "web:v1");
    cluster.create(&web(namespace, &busybox));
    let before = wait_web(cluster, namespace, "the API pod Running and Ready", running_and_ready);
    let uid = before["metadata"]["uid"].as_str().expect("uid").to_string();
    let (pod, slice) = if systemd {
        let slice = format!("kubepods-pod{}.slice", uid.replace('-', "_"));
        (format!("/kubepods.slice/{slice}"), Some(slice))
    } else {
        (format!("/kubepods/pod{uid}"), None)
    };
    assert_eq!(g.cgroup_file(&pod, "cpu.max"), "60000 100000", "{pod}: the pod's cpu limit");
    assert_eq!(g.cgroup_file(&pod, "memory.max"), (80 << 20).to_string(), "{pod}: the pod's memory limit");
    if let Some(slice) = &slice {
        assert_eq!(g.ok(&format!("systemctl is-active {slice}")), "active");
    }
    let (side, app) = (id(&before, "side"), id(&before, "app"));
    let app_cgroup =
        |id: &str| if systemd { format!("{pod}/cri-containerd-{id}.scope") } else { format!("{pod}/{id}") };
    assert_eq!(g.cgroup_file(&app_cgroup(&app), "memory.max"), (64 << 20).to_string(), "the app's limit");

    // A new image for the app: it alone restarts, in the same pod (sandbox, cgroup).
    let patch = format!(r#"{{"spec":{{"containers":[{{"name":"app","image":"{web_v1}"}}]}}}}"#);
    cluster.kubectl_ok(&["patch", "pod", "-n", namespace, "web", "-p", &patch]);
    let updated = wait_web(cluster, namespace, "the app restarted on its new image", |p| {
        let s = cstatus(p, "app");
        s["image"].as_str().is_some_and(|i| i.ends_with("web:v1"))
            && s["ready"] == true
            && running_and_ready(p)
    });
    assert_ne!(id(&updated, "app"), app, "a new instance of the app");
    assert_eq!(cstatus(&updated, "app")["restartCount"], 1, "the app restarted once");
    assert_eq!(id(&updated, "side"), side, "the sidecar kept running");
    assert_eq!(cstatus(&updated, "side")["restartCount"], 0);
    let app = id(&updated, "app");
    assert_eq!(
        g.cgroup_file(&app_cgroup(&app), "memory.max"),
        (64 << 20).to_string(),
        "in the same pod cgroup"
    );

    // Resized through the subresource: the same instance, the new limits in the files.
    let resize = r#"{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"300m","memory":"96Mi"},"limits":{"cpu":"300m","memory":"96Mi"}}}]}}"#;
    cluster.kubectl_ok(&["patch", "pod", "-n", namespace, "web", "--subresource", "resize", "-p", resize]);
    let resized = wait_web(cluster, namespace, "the resize applied and reported", |p| {
        let pending = p["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter().any(|c| c["type"] == "PodResizeInProgress" || c["type"] == "PodResizePending")
        });
        cstatus(p, "app")["resources"]["limits"]["memory"] == "96Mi" && !pending
    });
    assert_eq!(id(&resized, "app"), app, "resized without a restart");
    assert_eq!(g.cgroup_file(&app_cgroup(&app), "memory.max"), (96 << 20).to_string(), "the app's new limit");
    assert_eq!(g.cgroup_file(&pod, "memory.max"), (112 << 20).to_string(), "the pod's new memory limit");
    assert_eq!(g.cgroup_file(&pod, "cpu.max"), "40000 100000", "the pod's new cpu limit");
    if let Some(slice) = &slice {
        assert_eq!(g.ok(&format!("systemctl show -p MemoryMax --value {slice}")), (112 << 20).to_string());
    }

    // Deleted: gone from the API once the node confirms, its cgroup (and slice) with it.
    cluster.kubectl_ok(&["delete", "pod", "-n", namespace, "web", "--wait=false"]);
    wait_until("the API pod deleted", SLOW, || {
        cluster.get_json(&["pod", "-n", namespace, "web"]).is_none().then_some(())
    });
    let gone = match &slice {
        Some(slice) => format!("! systemctl is-active --quiet {slice} && ! test -d /sys/fs/cgroup{pod}"),
        None => format!("! test -d /sys/fs/cgroup{pod}"),
    };
    g.wait("the pod's cgroup removed", SLOW, &gone);
}

#[test]
#[ignore = "needs hack/guest.sh up and hack/cluster.sh (hack/test.sh's guest leg)"]
fn api_pods_run_update_resize_and_go_under_both_cgroup_drivers() {
    let g = Guest::fresh();
    let (cluster, namespace) = g.join("");
    let node = cluster.get_json(&["node", NODE]).expect("the guest's Node");
    assert_eq!(
        node["status"]["nodeInfo"]["containerRuntimeVersion"]
            .as_str()
            .map(|v| v.starts_with("containerd://2.1")),
        Some(true)
    );
    round(&g, &cluster, &namespace, false);

    // containerd on the systemd driver; crilet follows what it reports (CRI RuntimeConfig).
    g.ok(&runtime_driver_switch(true, "true"));
    wait_until("the Node Ready again", SLOW, || {
        cluster.get_json(&["node", NODE]).filter(|n| condition(n, "Ready")["status"] == "True")
    });
    round(&g, &cluster, &namespace, true);
    cluster.kubectl_ok(&["delete", "namespace", &namespace, "--wait=false"]);
}
