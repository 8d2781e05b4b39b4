//! What the cluster benchmarks (benches/cluster, benches/kruise) share: their environment (the
//! env files of hack/setup.sh and hack/cluster.sh), the admin client and the namespace, and the
//! runtime checks around the upstream kubelet (it kills every running pod it does not know).

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::Client;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

pub fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `k` from the process environment, else from the env files; panics naming the script to use.
pub fn need(vars: &HashMap<String, String>, k: &str, script: &str) -> String {
    std::env::var(k).ok().or_else(|| vars.get(k).cloned()).unwrap_or_else(|| {
        panic!("{k} is not set: run this benchmark through {script}");
    })
}

/// The variables of hack/setup.sh's and hack/cluster.sh's env files.
pub fn env_files(script: &str) -> HashMap<String, String> {
    let mut vars = HashMap::new();
    for f in [testkit::MAIN_ENV_FILE, testkit::CLUSTER_ENV_FILE] {
        vars.extend(testkit::EnvFile::load(f, &format!("run {script}")).vars);
    }
    vars
}

pub use crate::host::{foreign_pods, remove_runtime_leftovers};

/// The admin client of hack/cluster.sh's kubeconfig.
pub async fn admin_client(kubeconfig: &str) -> Client {
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(kubeconfig).expect("admin kubeconfig"),
        &KubeConfigOptions::default(),
    )
    .await
    .expect("admin kubeconfig");
    Client::try_from(config).expect("API client")
}

/// Makes namespace `ns` if needed and waits for its default ServiceAccount (pods need it; the
/// controller-manager makes it).
pub async fn ensure_namespace(client: &Client, ns: &str) -> Api<Namespace> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(ns).await.expect("get namespace").is_none() {
        let obj: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).expect("ns");
        namespaces.create(&PostParams::default(), &obj).await.expect("create namespace");
    }
    let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let what = format!("the default ServiceAccount of {ns}");
    testkit::wait_for(&what, Duration::from_secs(60), || async {
        sa.get_opt("default").await.ok().flatten()
    })
    .await;
    namespaces
}
