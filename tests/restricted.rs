//! A real `restricted` namespace on the real control plane (issue 36, part 7): Pod Security
//! Admission only checks that the fields are set; this shows the node enforces them. A Deployment
//! the API server admits under `pod-security.kubernetes.io/enforce: restricted` runs on a crilet
//! node, and its container reads from `/proc` what it got: a seccomp filter, no_new_privs, no
//! capability at all, a non-root uid, and the read-only root it asked for. The same reading on
//! the upstream kubelet, for the side-by-side table in docs/security.md: `hack/security-peer.sh`.

mod common;

use std::time::Duration;

use common::cluster::Node;
use common::*;

/// The Deployment, placed by kube-scheduler on `node` (through its `crilet.io/test` label).
fn deployment(node: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: locked}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: locked}}}}
  template:
    metadata: {{labels: {{app: locked}}}}
    spec:
      nodeSelector: {{crilet.io/test: {node}}}
      terminationGracePeriodSeconds: 1
      securityContext:
        runAsNonRoot: true
        runAsUser: 1000
        runAsGroup: 3000
        seccompProfile: {{type: RuntimeDefault}}
      volumes: [{{name: scratch, emptyDir: {{}}}}]
      containers:
      - name: c
        image: ${{CRILET_IMAGE_BUSYBOX}}
        command: [sh, -c, {report:?}]
        volumeMounts: [{{name: scratch, mountPath: /scratch}}]
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {{drop: [ALL]}}
"#,
        report = testkit::report::SECURITY_REPORT
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restricted_deployment_runs_with_every_restriction_in_force() {
    let node = Node::start("restricted", 10294, &[]).await;
    node.wait_ready().await;
    let ns = node.namespace.clone();
    node.cluster.kubectl_ok(&[
        "label",
        "namespace",
        &ns,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    ]);

    // The namespace enforces: a pod without the restricted fields never reaches the node.
    let loose = node.agent.env.render(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: loose}}\nspec:\n  nodeName: {}\n  containers:\n  \
         - name: c\n    image: ${{CRILET_IMAGE_BUSYBOX}}\n    command: [sleep, '3600']\n",
        node.name
    ));
    let (ok, _, err) = node.cluster.kubectl_in(&["-n", &ns, "apply", "-f", "-"], Some(&loose));
    assert!(!ok && err.contains("violates PodSecurity \"restricted:latest\""), "{err}");

    node.apply(&node.agent.env.render(&deployment(&node.name)));
    let pod = wait_for("the Deployment's pod to run on the node", Duration::from_secs(90), || async {
        let list = node.cluster.get_json(&["pods", "-n", &ns, "-l", "app=locked"])?;
        let p = list["items"].as_array()?.first()?.clone();
        (p["status"]["phase"] == "Running").then_some(p)
    })
    .await;
    assert_eq!(pod["spec"]["nodeName"], node.name.as_str());
    let name = pod["metadata"]["name"].as_str().expect("pod name").to_string();
    let seen = wait_for("the container's report", Duration::from_secs(30), || async {
        let (ok, out, _) = node.agent.cli(&["logs", &name, "-n", &ns]);
        if ok { testkit::report::key_values(out.lines()) } else { None }
    })
    .await;
    let get = |k: &str| {
        seen.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("{k}: {seen:?}"))
    };
    assert_eq!(get("Seccomp"), "2", "the runtime's default filter");
    assert_eq!(get("NoNewPrivs"), "1", "allowPrivilegeEscalation: false");
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(get(set), "0000000000000000", "{set}: capabilities drop [ALL]");
    }
    assert_eq!(get("Uid"), "1000 1000 1000 1000", "runAsUser");
    assert_eq!(get("Gid"), "3000 3000 3000 3000", "runAsGroup");
    assert_eq!(get("Root"), "ro", "readOnlyRootFilesystem");
    assert_eq!(get("Scratch"), "rw", "the emptyDir stays writable");
}
