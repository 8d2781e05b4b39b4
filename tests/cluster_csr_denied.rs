//! A bootstrap CSR the cluster denies, against the real control plane of `hack/cluster.sh`: the
//! agent stops (a bootstrapping kubelet exits the same way) naming the CSR and the denial's
//! reason and message, and writes no kubeconfig. The node bootstraps with a token of its own
//! whose group may ask for a certificate (`system:node-bootstrapper`) but is not bound to
//! kubeadm's auto-approval, so its CSR stays pending until the test denies it with `kubectl
//! certificate deny`, as an operator does.

mod common;

use std::time::{Duration, Instant};

use common::Agent;
use common::cluster::Cluster;

const NODE: &str = "crilet-csr-denied";
const GROUP: &str = "system:bootstrappers:crilet-dev:manual-approval";

fn token_objects(id: &str, secret: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: bootstrap-token-{id}, namespace: kube-system}}
type: bootstrap.kubernetes.io/token
stringData:
  token-id: "{id}"
  token-secret: "{secret}"
  usage-bootstrap-authentication: "true"
  auth-extra-groups: "{GROUP}"
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: crilet-dev:manual-approval-bootstrap}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:node-bootstrapper"}}
subjects:
- {{apiGroup: rbac.authorization.k8s.io, kind: Group, name: "{GROUP}"}}
"#
    )
}

#[tokio::test]
async fn a_denied_bootstrap_csr_stops_the_agent_with_its_name_and_reason() {
    let cluster = Cluster::load();
    let alphabet: Vec<char> = ('a'..='z').chain('0'..='9').collect();
    let pick = |n: usize| (0..n).map(|_| alphabet[fastrand::usize(..alphabet.len())]).collect::<String>();
    let (id, secret) = (pick(6), pick(16));
    cluster.apply(&token_objects(&id, &secret));
    let _ = cluster.kubectl(&["delete", "node", NODE]);

    // The cluster's bootstrap kubeconfig for this node, with the token swapped for ours.
    let identity = cluster.bootstrap_identity(NODE);
    let standard =
        std::fs::read_to_string(&identity["CRILET_NODE_BOOTSTRAP_KUBECONFIG"]).expect("kubeconfig");
    let ours: String = standard
        .lines()
        .map(|l| match l.trim_start().strip_prefix("token: ") {
            Some(_) => format!("{}token: {id}.{secret}", &l[..l.len() - l.trim_start().len()]),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(ours.contains(&format!("token: {id}.{secret}")), "no token line in {standard}");
    let dir = tempfile::tempdir().expect("tempdir");
    let bootstrap = dir.path().join("bootstrap.conf");
    std::fs::write(&bootstrap, ours).expect("write the bootstrap kubeconfig");
    let kubeconfig = dir.path().join("kubelet.conf");
    let args = [
        "--bootstrap-kubeconfig",
        bootstrap.to_str().unwrap(),
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--node-name",
        NODE,
        "--node-ip",
        "127.0.0.1",
        "--port",
        "10297",
    ];
    let mut agent = Agent::start_with_args("csr_denied", &args, &[]).await;

    // Its CSR, asked as our token's user, stays pending: nothing approves this group's CSRs.
    let requester = format!("system:bootstrap:{id}");
    let started = Instant::now();
    let csr = loop {
        let list = cluster.get_json(&["csr"]).expect("kubectl get csr");
        let mine = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["spec"]["username"] == requester.as_str());
        if let Some(c) = mine {
            break c.clone();
        }
        assert!(agent.exited().is_none(), "the agent exited before its CSR came:\n{}", agent.log());
        assert!(started.elapsed() < Duration::from_secs(60), "no CSR from {requester}:\n{}", agent.log());
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let name = csr["metadata"]["name"].as_str().expect("CSR name").to_string();
    assert!(csr["status"]["conditions"].is_null(), "the CSR was decided by someone else: {csr}");
    cluster.kubectl_ok(&["certificate", "deny", &name]);

    let status = agent.wait_exit(Duration::from_secs(60), "after its CSR was denied").await;
    let log = std::fs::read_to_string(&agent.log_file).unwrap_or_default();
    assert!(!status.success(), "the agent exited {status} after a denial:\n{log}");
    // kubectl's own reason and message for a denial.
    let said = format!("CertificateSigningRequest {name} was denied (KubectlDeny: ");
    assert!(log.contains(&said), "the agent did not say {said:?}:\n{log}");
    assert!(!kubeconfig.exists(), "a kubeconfig was written without a certificate");
    assert!(cluster.get_json(&["node", NODE]).is_none(), "a Node registered without a certificate");

    let _ = cluster.kubectl(&["delete", "csr", &name]);
    let _ = cluster.kubectl(&["delete", "-n", "kube-system", "secret", &format!("bootstrap-token-{id}")]);
    let _ = cluster.kubectl(&["delete", "clusterrolebinding", "crilet-dev:manual-approval-bootstrap"]);
}
