//! AppArmor on a host whose kernel has none (this one; the guest's enforcing path is
//! tests/guest_apparmor.rs): a pod asking for a profile other than Unconfined is refused as the
//! kubelet refuses it, never run unconfined. A static pod's document gets the kubelet's reason
//! and message (`crilet validate` says the same), while one asking for Unconfined runs; on the
//! real control plane an API pod goes Failed with reason `AppArmor`.

mod common;

use std::time::Duration;

use common::cluster::Node;
use common::*;

const NS: &str = "aa-ns";
const REFUSAL: &str = "Cannot enforce AppArmor: AppArmor is not enabled on the host";

fn pod(name: &str, security: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {NS}}}\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  securityContext: {security}\n  containers:\n  \
         - name: c\n    image: ${{CRILET_IMAGE_BUSYBOX}}\n    command: [sleep, '3600']\n"
    )
}

/// Whether this host's kernel has AppArmor (as the agent reads it): these tests need it off.
fn host_has_apparmor() -> bool {
    std::fs::read_to_string("/sys/module/apparmor/parameters/enabled").is_ok_and(|s| s.starts_with('Y'))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_static_pod_asking_for_apparmor_is_refused_on_a_host_without_it() {
    assert!(!host_has_apparmor(), "this test expects a host without AppArmor (see tests/guest_apparmor.rs)");
    let a = Agent::start("aa-static").await;
    a.write_manifest("confined.yaml", &pod("aa-confined", "{appArmorProfile: {type: RuntimeDefault}}"));
    a.write_manifest("unconfined.yaml", &pod("aa-unconfined", "{appArmorProfile: {type: Unconfined}}"));
    running_pod(&a, "aa-unconfined").await;
    let refusal = format!("spec.securityContext.appArmorProfile: AppArmor: {REFUSAL}");
    wait_for("the AppArmor refusal in the agent's log", Duration::from_secs(10), || async {
        // The whole log: the pod that runs logs enough to push the line out of `log()`'s tail.
        std::fs::read_to_string(&a.log_file).ok().filter(|l| l.contains(&refusal)).map(|_| ())
    })
    .await;
    assert!(a.pod("aa-confined").is_none(), "a refused pod is not run");

    let file = a.manifests.join("confined.yaml");
    let out = std::process::Command::new(bin())
        .args(["validate", "--node-name", "n"])
        .arg(&file)
        .output()
        .expect("run crilet validate");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success() && text.contains(&refusal), "crilet validate says the same:\n{text}");
}

#[tokio::test]
async fn an_api_pod_asking_for_apparmor_fails_with_the_kubelets_reason() {
    assert!(!host_has_apparmor(), "this test expects a host without AppArmor");
    let node = Node::start("aa", 10295, &[]).await;
    node.wait_ready().await;
    let yaml = node.agent.env.render(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: aa-api}}\nspec:\n  nodeName: {}\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: ${{CRILET_IMAGE_BUSYBOX}}\n    \
         command: [sleep, '3600']\n    securityContext: {{appArmorProfile: {{type: Localhost, localhostProfile: k8s-x}}}}\n",
        node.name
    ));
    node.apply(&yaml);
    let p = node
        .wait_pod("aa-api", "Failed", Duration::from_secs(30), |p| p["status"]["phase"] == "Failed")
        .await;
    assert_eq!(p["status"]["reason"], "AppArmor", "{}", p["status"]);
    assert_eq!(p["status"]["message"], REFUSAL);
}
