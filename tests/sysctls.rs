//! Sysctls as the kubelet allows them (issue 36 part 3), against the real containerd: a safe
//! sysctl reaches the pod's namespace, an unsafe one is refused with `SysctlForbidden` until
//! `--allowed-unsafe-sysctls` allows it; and on the real control plane an API pod setting an
//! unsafe sysctl goes Failed with that reason.

mod common;

use std::time::Duration;

use common::cluster::Node;
use common::*;

const NS: &str = "sy-sysctl";

/// A pod that prints the sysctls it names from inside its container, then sleeps.
fn pod(name: &str, sysctls: &[(&str, &str)], show: &[&str]) -> String {
    let list: String = sysctls.iter().map(|(n, v)| format!("    - {{name: {n}, value: '{v}'}}\n")).collect();
    let cat: Vec<String> = show.iter().map(|p| format!("echo {p}=$(cat /proc/sys/{p})")).collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {NS}}}\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  securityContext:\n    sysctls:\n{list}  containers:\n  \
         - name: c\n    image: ${{CRILET_IMAGE_BUSYBOX}}\n    command: [sh, -c, '{}; exec sleep 3600']\n",
        cat.join("; ")
    )
}

/// `crilet validate ARGS`: (exit 0, stdout and stderr).
fn validate(args: &[&str]) -> (bool, String) {
    let out =
        std::process::Command::new(bin()).arg("validate").args(args).output().expect("run crilet validate");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Waits for the container log of `name` to hold `want`.
async fn log_shows(a: &Agent, name: &str, want: &str) {
    wait_for(&format!("{name}'s log to show {want}"), Duration::from_secs(30), || async {
        let (ok, out, _) = a.cli(&["logs", name, "-n", NS]);
        (ok && out.contains(want)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn static_pods_get_safe_sysctls_and_unsafe_ones_only_when_allowed() {
    let mut a = Agent::start("sy-static").await;
    // `/` for `.` (the kubelet's form too) and a net sysctl, both in the safe set.
    a.write_manifest(
        "safe.yaml",
        &pod(
            "sy-safe",
            &[("kernel/shm_rmid_forced", "1"), ("net.ipv4.ip_local_port_range", "20000 30000")],
            &["kernel/shm_rmid_forced", "net/ipv4/ip_local_port_range"],
        ),
    );
    let unsafe_pod = pod("sy-unsafe", &[("kernel.msgmax", "16384")], &["kernel/msgmax"]);
    a.write_manifest("unsafe.yaml", &unsafe_pod);
    running_pod(&a, "sy-safe").await;
    log_shows(&a, "sy-safe", "kernel/shm_rmid_forced=1").await;
    log_shows(&a, "sy-safe", "net/ipv4/ip_local_port_range=20000 30000").await;

    let refusal = r#"spec.securityContext.sysctls[0].name: SysctlForbidden: forbidden sysctl: "kernel.msgmax" not allowlisted"#;
    wait_for("the unsafe sysctl's refusal in the agent's log", Duration::from_secs(10), || async {
        a.whole_log().contains(refusal).then_some(())
    })
    .await;
    assert!(a.pod("sy-unsafe").is_none(), "a refused pod is not run");
    // `crilet validate` says the same, and nothing with the flag the agent will get.
    let file = a.manifests.join("unsafe.yaml");
    let file = file.to_str().expect("utf-8 path");
    let (ok, out) = validate(&["--node-name", "n", file]);
    assert!(!ok && out.contains(refusal), "validate without the flag:\n{out}");
    let (ok, out) = validate(&["--node-name", "n", "--allowed-unsafe-sysctls", "kernel.msg*", file]);
    assert!(ok, "validate with kernel.msg* allowed:\n{out}");

    // The same manifest runs once the operator allows kernel.msg*.
    a.kill();
    a.extra_args.extend(["--allowed-unsafe-sysctls".to_string(), "kernel.msg*".to_string()]);
    a.spawn();
    running_pod(&a, "sy-unsafe").await;
    log_shows(&a, "sy-unsafe", "kernel/msgmax=16384").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_level_pattern_stops_the_agent_as_it_stops_the_kubelet() {
    let mut a = Agent::start_with_args("sy-node-level", &["--allowed-unsafe-sysctls", "vm.*"], &[]).await;
    let status = a.wait_exit(Duration::from_secs(10), "with a node-level pattern").await;
    assert!(!status.success());
    assert!(a.whole_log().contains(r#""vm.*" is not known to be namespaced"#), "{}", a.log());
}

#[tokio::test]
async fn api_pods_with_forbidden_sysctls_fail_with_the_kubelets_reason() {
    let node = Node::start("sy-sysctl", 10298, &["--allowed-unsafe-sysctls", "net.core.somaxconn"]).await;
    node.wait_ready().await;
    // (The API server itself refuses net.* with hostNetwork and the IPC ones with hostIPC, so
    // the host-namespace refusals are only reachable through static pods and the unit tables.)
    let pod = |name: &str, sysctl: &str| {
        node.agent.env.render(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  nodeName: {}\n  \
             terminationGracePeriodSeconds: 1\n  securityContext: {{sysctls: [{{name: {sysctl}, value: '1024'}}]}}\n  \
             containers:\n  - name: c\n    image: ${{CRILET_IMAGE_BUSYBOX}}\n    command: [sleep, '3600']\n",
            node.name
        ))
    };
    node.apply(&pod("sy-unsafe", "kernel.msgmax"));
    node.apply(&pod("sy-allowed", "net.core.somaxconn"));
    let p = node
        .wait_pod("sy-unsafe", "Failed", Duration::from_secs(30), |p| p["status"]["phase"] == "Failed")
        .await;
    assert_eq!(p["status"]["reason"], "SysctlForbidden", "{}", p["status"]);
    assert_eq!(p["status"]["message"], r#"forbidden sysctl: "kernel.msgmax" not allowlisted"#);
    node.wait_pod("sy-allowed", "Running", Duration::from_secs(60), |p| p["status"]["phase"] == "Running")
        .await;
}
