//! The peer check of a `restricted` namespace (issue 36, part 7), run by hack/security-peer.sh:
//! the Deployment of tests/restricted.rs, admitted under `pod-security.kubernetes.io/enforce:
//! restricted`, placed on one agent's node; its container reports from `/proc` what it got
//! (seccomp mode, no_new_privs, capability sets, ids, root mount), read back from the pod's log
//! file on disk (the API server does not proxy to a loopback node). Not a timing: the two sides
//! must read the same.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::Env;
use crate::agents::Kind;

/// The check's namespace, enforcing the `restricted` level.
pub const NS: &str = "bench-restricted";

/// Makes the namespace (labelled `restricted`) if needed.
pub async fn ensure_namespace(client: &Client) {
    crate::shared::ensure_namespace(client, NS).await;
    let labels = json!({"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }}});
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.patch(NS, &PatchParams::default(), &Patch::Merge(&labels)).await.expect("label the namespace");
}

fn deployment(node: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "locked"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "locked"}},
            "template": {
                "metadata": {"labels": {"app": "locked"}},
                "spec": {
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}},
                    "terminationGracePeriodSeconds": 1,
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "runAsGroup": 3000,
                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "volumes": [{"name": "scratch", "emptyDir": {}}],
                    "containers": [{
                        "name": "c",
                        "image": crate::image(),
                        "command": ["sh", "-c", testkit::report::SECURITY_REPORT],
                        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                        "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                            "capabilities": {"drop": ["ALL"]}},
                    }],
                },
            },
        },
    }))
    .expect("the Deployment")
}

/// Runs the Deployment on `kind`'s node and returns what its container reported, then removes
/// it and waits until its pod is gone.
pub async fn check(client: &Client, env: &Env, kind: Kind) -> Vec<(String, String)> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    deployments
        .create(&PostParams::default(), &deployment(kind.node()))
        .await
        .expect("create the Deployment");
    let what = format!("the restricted Deployment's pod Running on {}", kind.node());
    let pod = testkit::wait_for(&what, Duration::from_secs(120), || async {
        let list = pods.list(&ListParams::default().labels("app=locked")).await.ok()?;
        list.items.into_iter().find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    })
    .await;
    let (name, uid) =
        (pod.metadata.name.clone().unwrap_or_default(), pod.metadata.uid.clone().unwrap_or_default());
    let log =
        env.dir.join(kind.label()).join("logs").join(format!("{NS}_{name}_{uid}")).join("c").join("0.log");
    let report =
        testkit::wait_for(&format!("{}'s report", log.display()), Duration::from_secs(30), || async {
            read_report(&log)
        })
        .await;
    deployments.delete("locked", &DeleteParams::default()).await.expect("delete the Deployment");
    testkit::wait_for("the restricted pod to be gone", Duration::from_secs(120), || async {
        pods.list(&ListParams::default()).await.ok().filter(|l| l.items.is_empty()).map(|_| ())
    })
    .await;
    report
}

/// The report in a CRI log file (`TIME STREAM TAG CONTENT` lines).
fn read_report(log: &Path) -> Option<Vec<(String, String)>> {
    let text = std::fs::read_to_string(log).ok()?;
    testkit::report::key_values(text.lines().filter_map(|l| l.splitn(4, ' ').nth(3)))
}

/// The side-by-side table: one row per key, the kubelet's value, crilet's, and whether they match.
pub fn markdown(kubelet: &[(String, String)], crilet: &[(String, String)]) -> String {
    let get = |side: &[(String, String)], k: &str| {
        side.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone()).unwrap_or_else(|| "(none)".into())
    };
    let mut keys: Vec<&str> = kubelet.iter().chain(crilet).map(|(k, _)| k.as_str()).collect();
    keys.dedup();
    let mut seen = std::collections::BTreeSet::new();
    keys.retain(|k| seen.insert(*k));
    let mut md =
        String::from("| read inside the container | upstream kubelet | crilet | same |\n|---|---|---|---|\n");
    let mut differ = 0;
    for k in keys {
        let (a, b) = (get(kubelet, k), get(crilet, k));
        differ += usize::from(a != b);
        let same = if a == b { "yes" } else { "**no**" };
        md.push_str(&format!("| `{k}` | `{a}` | `{b}` | {same} |\n"));
    }
    md.push_str(&format!("\n{differ} of the rows differ.\n"));
    md
}
