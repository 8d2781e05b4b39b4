//! A node driven by the kubelet's own config file: `crilet run --config` with a
//! `KubeletConfiguration` (staticPodPath, podLogsDir, containerRuntimeEndpoint from the file)
//! runs a static pod on the real containerd, and logs the fields it ignores.

mod common;

use common::*;

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: from-kubelet-config
  namespace: t-kcfg
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sh, -c, 'trap "exit 0" TERM; echo started by a KubeletConfiguration; while true; do sleep 1; done']
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_kubelet_configuration_runs_a_static_pod() {
    let mut a = Agent::start_with_kubelet_config("kubelet-config", |a| {
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             staticPodPath: {}\npodLogsDir: {}\ncontainerRuntimeEndpoint: {}\n\
             healthzPort: 0\nsyncFrequency: 0s\nproviderID: test://dns\nnodeStatusMaxImages: 10\n\
             authentication:\n  anonymous:\n    enabled: false\n  webhook:\n    enabled: true\n",
            a.manifests.display(),
            a.logs.display(),
            a.env.endpoint(),
        )
    })
    .await;
    a.write_manifest("pod.yaml", POD);
    let p = running_pod(&a, "from-kubelet-config").await;
    let uid = p["metadata"]["uid"].as_str().expect("uid");

    // podLogsDir: the container's log is where the file says.
    let log = a.logs.join(format!("t-kcfg_from-kubelet-config_{uid}")).join("main").join("0.log");
    wait_for("the container's log under podLogsDir", std::time::Duration::from_secs(20), || async {
        std::fs::read_to_string(&log).ok().filter(|t| t.contains("started by a KubeletConfiguration"))
    })
    .await;

    // What was ignored is in the log, by field; what crilet does anyway is not.
    // The whole log: the start's lines are far above what `a.log()`'s tail keeps once the
    // shared runtime's events of other tests' pods have been logged.
    let agent_log = std::fs::read_to_string(&a.log_file).expect("the agent's log");
    for field in ["providerID", "nodeStatusMaxImages"] {
        assert!(
            agent_log.lines().any(|l| l.contains("KubeletConfiguration: field ignored") && l.contains(field)),
            "{field} not reported as ignored:\n{agent_log}"
        );
    }
    assert!(!agent_log.contains("field=authentication"), "webhook authn is what crilet does:\n{agent_log}");
    a.remove_manifest("pod.yaml");
    a.stop();
}
