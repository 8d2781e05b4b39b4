//! The restricted profile's security context on the real containerd (issue 36 part 4), read from
//! inside the containers: `NoNewPrivs` from `allowPrivilegeEscalation: false`, the effective
//! capabilities after `drop: [ALL]` (and `add: [NET_BIND_SERVICE]`), the uid, gid and groups
//! (`fsGroup` and `supplementalGroups`, under the Merge and Strict policies), a read-only root
//! with a writable emptyDir, the kubelet's masked and read-only `/proc` paths, `runAsNonRoot`
//! refused for a root image with the kubelet's message; and what crilet cannot enforce
//! (`procMount: Unmasked`, a capability name the runtime would ignore) refused. Static pods in
//! one agent, API pods on the control plane through one node.

mod common;

use std::time::Duration;

use common::cluster::Node;
use common::*;
use serde_json::Value;

const NS: &str = "sec-ns";

/// What each container prints, then `END`: its identity and capabilities, whether `/` and the
/// emptyDir at `/data` are writable, whether `/proc/keys` is masked (this kernel has no `/proc/kcore`) and `/proc/sys` read-only.
const PROBE: &str = r#"
      grep -E '^(Uid|Gid|Groups|NoNewPrivs|CapEff):' /proc/self/status
      if touch /probe 2>/dev/null; then echo ROOT=rw; else echo ROOT=ro; fi
      if touch /data/probe 2>/dev/null; then echo DATA=rw; else echo DATA=ro; fi
      if grep -q ' /proc/keys ' /proc/self/mountinfo; then echo KEYS=masked; else echo KEYS=open; fi
      if grep -q ' /proc/sys ro' /proc/self/mountinfo; then echo PROCSYS=ro; else echo PROCSYS=rw; fi
      echo END
      trap 'exit 0' TERM
      while true; do sleep 1; done"#;

/// A pod running [`PROBE`] with the pod-level and container-level `securityContext` bodies
/// (flow mappings). `head` is the metadata and, for API pods, `nodeName`.
fn pod(head: &str, pod_sc: &str, container_sc: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\n{head}\n  terminationGracePeriodSeconds: 1\n  securityContext: {pod_sc}\n  \
         volumes: [{{name: data, emptyDir: {{}}}}]\n  containers:\n  - name: c\n    image: ${{CRILET_IMAGE_BUSYBOX}}\n    \
         securityContext: {container_sc}\n    volumeMounts: [{{name: data, mountPath: /data}}]\n    \
         command:\n    - sh\n    - -c\n    - |{PROBE}\n"
    )
}

fn static_pod(name: &str, pod_sc: &str, container_sc: &str) -> String {
    pod(&format!("metadata: {{name: {name}, namespace: {NS}}}\nspec:"), pod_sc, container_sc)
}

/// The restricted profile at both levels: uid 1000, gid 3000, fsGroup 4000, group 5000.
const RESTRICTED_POD: &str =
    "{runAsUser: 1000, runAsGroup: 3000, fsGroup: 4000, supplementalGroups: [5000], runAsNonRoot: true}";
const RESTRICTED: &str = "{allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}, readOnlyRootFilesystem: true, procMount: Default, seccompProfile: {type: RuntimeDefault}}";

/// The printed `key: value` / `KEY=value` facts, from a log's lines up to `END`.
fn facts(lines: &[String]) -> Vec<(String, String)> {
    lines
        .iter()
        .filter_map(|l| l.split_once(':').or_else(|| l.split_once('=')))
        .map(|(k, v)| (k.trim().to_string(), v.split_whitespace().collect::<Vec<_>>().join(" ")))
        .collect()
}

fn fact<'a>(f: &'a [(String, String)], key: &str) -> &'a str {
    f.iter().find(|(k, _)| k == key).map_or("", |(_, v)| v.as_str())
}

/// `crilet validate FILE`: (exit 0, stdout and stderr).
fn validate(file: &std::path::Path) -> (bool, String) {
    let out = std::process::Command::new(bin())
        .args(["validate", "--node-name", "n"])
        .arg(file)
        .output()
        .expect("run crilet validate");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// The checks shared by the static and the API variant of the restricted pod.
fn assert_restricted(f: &[(String, String)], who: &str) {
    assert_eq!(fact(f, "NoNewPrivs"), "1", "{who}: {f:?}");
    assert_eq!(fact(f, "CapEff"), "0000000000000000", "{who}: {f:?}");
    assert_eq!(fact(f, "Uid"), "1000 1000 1000 1000", "{who}: {f:?}");
    assert_eq!(fact(f, "Gid"), "3000 3000 3000 3000", "{who}: {f:?}");
    let groups: Vec<&str> = fact(f, "Groups").split(' ').collect();
    assert!(
        groups.contains(&"4000") && groups.contains(&"5000"),
        "{who}: fsGroup and supplementalGroups: {f:?}"
    );
    assert_eq!(fact(f, "ROOT"), "ro", "{who}: readOnlyRootFilesystem: {f:?}");
    assert_eq!(fact(f, "DATA"), "rw", "{who}: the emptyDir: {f:?}");
    assert_eq!(fact(f, "KEYS"), "masked", "{who}: procMount Default: {f:?}");
    assert_eq!(fact(f, "PROCSYS"), "ro", "{who}: procMount Default: {f:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn static_pods_get_the_security_context_they_ask_for() {
    let a = Agent::start("sec-static").await;
    a.write_manifest("restricted.yaml", &static_pod("sec-restricted", RESTRICTED_POD, RESTRICTED));
    a.write_manifest(
        "netbind.yaml",
        &static_pod("sec-netbind", "{}", "{capabilities: {drop: [ALL], add: [NET_BIND_SERVICE]}}"),
    );
    // busybox's /etc/group makes root a member of group 0: Merge keeps it, Strict leaves only
    // the listed groups.
    a.write_manifest("merge.yaml", &static_pod("sec-merge", "{supplementalGroups: [5000]}", "{}"));
    a.write_manifest(
        "strict.yaml",
        &static_pod("sec-strict", "{supplementalGroups: [5000], supplementalGroupsPolicy: Strict}", "{}"),
    );
    a.write_manifest("privileged.yaml", &static_pod("sec-privileged", "{}", "{privileged: true}"));
    a.write_manifest("nonroot.yaml", &static_pod("sec-nonroot", "{runAsNonRoot: true}", "{}"));
    let unmasked = static_pod(
        "sec-unmasked",
        "{}",
        "{procMount: Unmasked, capabilities: {drop: [CAP_SYS_ADMIN]}, windowsOptions: {runAsUserName: x}}",
    );
    a.write_manifest("unmasked.yaml", &unmasked);

    let restricted = facts(&printed_before(&a, NS, "sec-restricted", "c", "END").await);
    assert_restricted(&restricted, "sec-restricted");

    let netbind = facts(&printed_before(&a, NS, "sec-netbind", "c", "END").await);
    assert_eq!(fact(&netbind, "CapEff"), "0000000000000400", "drop ALL + add NET_BIND_SERVICE: {netbind:?}");
    assert_eq!(fact(&netbind, "NoNewPrivs"), "0", "allowPrivilegeEscalation unset: {netbind:?}");
    assert_eq!(fact(&netbind, "ROOT"), "rw", "{netbind:?}");

    // The runtime masks nothing for a privileged container (so the check above can fail).
    let privileged = facts(&printed_before(&a, NS, "sec-privileged", "c", "END").await);
    assert_eq!((fact(&privileged, "KEYS"), fact(&privileged, "PROCSYS")), ("open", "rw"), "{privileged:?}");

    let merge = facts(&printed_before(&a, NS, "sec-merge", "c", "END").await);
    let strict = facts(&printed_before(&a, NS, "sec-strict", "c", "END").await);
    let groups =
        |f: &[(String, String)]| fact(f, "Groups").split(' ').map(str::to_string).collect::<Vec<_>>();
    assert!(groups(&merge).contains(&"0".to_string()), "Merge keeps the image's groups: {merge:?}");
    assert!(groups(&merge).contains(&"5000".to_string()), "{merge:?}");
    assert!(!groups(&strict).contains(&"0".to_string()), "Strict drops the image's groups: {strict:?}");
    assert!(groups(&strict).contains(&"5000".to_string()), "{strict:?}");

    // busybox runs as root: runAsNonRoot stops the container with the kubelet's reason and text.
    let (reason, message) =
        wait_for("sec-nonroot waiting with a reason", Duration::from_secs(30), || async {
            let p = a.pod("sec-nonroot")?;
            let waiting = &cstatus(&p, "c")?["state"]["waiting"];
            let uid = p["metadata"]["uid"].as_str()?.to_string();
            Some((waiting["reason"].as_str()?.to_string(), (waiting["message"].as_str()?.to_string(), uid)))
        })
        .await;
    let (message, uid) = message;
    assert_eq!(reason, "CreateContainerConfigError", "{message}");
    assert_eq!(
        message,
        format!(
            "container has runAsNonRoot and image will run as root (pod: \"sec-nonroot_{NS}({uid})\", container: c)"
        )
    );

    // What crilet cannot enforce is refused: by `crilet validate` and by the agent, naming the
    // fields; windowsOptions (ignored on Linux, as by the kubelet) is only a warning.
    let (ok, out) = validate(&a.manifests.join("unmasked.yaml"));
    assert!(!ok, "validate must refuse:\n{out}");
    for field in [
        "spec.containers[0].securityContext.procMount",
        "spec.containers[0].securityContext.capabilities.drop[0]",
        "spec.containers[0].securityContext.windowsOptions",
    ] {
        assert!(out.contains(field), "{field} not named:\n{out}");
    }
    wait_for("the agent's refusal of sec-unmasked", Duration::from_secs(10), || async {
        let log = std::fs::read_to_string(&a.log_file).ok()?;
        log.contains("spec.containers[0].securityContext.procMount: Unmasked is not supported by crilet")
            .then_some(())
    })
    .await;
    assert!(a.pod("sec-unmasked").is_none(), "a refused pod is not run");
    stop(a).await;
}

async fn stop(mut a: Agent) {
    a.stop();
    remove_pods_of(&a.env.cri(), &a.manifests).await;
}

/// The API pod's output up to `END`, from its log file under the agent's log directory.
async fn api_printed(node: &Node, name: &str) -> (Value, Vec<String>) {
    let p =
        node.wait_pod(name, "Running", Duration::from_secs(60), |p| p["status"]["phase"] == "Running").await;
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let log = node.agent.logs.join(format!("{}_{name}_{uid}", node.namespace)).join("c/0.log");
    let lines = wait_for(&format!("{name}'s output up to END"), Duration::from_secs(20), || async {
        let text = std::fs::read_to_string(&log).ok()?;
        let lines: Vec<String> =
            text.lines().filter_map(|l| l.splitn(4, ' ').nth(3)).map(str::to_string).collect();
        let at = lines.iter().position(|l| l == "END")?;
        Some(lines[..at].to_vec())
    })
    .await;
    (p, lines)
}

#[tokio::test]
async fn api_pods_get_the_security_context_and_the_kubelets_refusals() {
    let node = Node::start("sec", 10299, &[]).await;
    let ready = node.wait_ready().await;
    assert_eq!(
        ready["status"]["features"]["supplementalGroupsPolicy"], true,
        "containerd 2.1 reports KEP-3619: {}",
        ready["status"]
    );
    let head = |name: &str| format!("metadata: {{name: {name}}}\nspec:\n  nodeName: {}", node.name);
    let render = |yaml: String| node.agent.env.render(&yaml);
    node.apply(&render(pod(&head("sec-restricted"), RESTRICTED_POD, RESTRICTED)));
    node.apply(&render(pod(&head("sec-nonroot"), "{runAsNonRoot: true}", "{}")));
    node.apply(&render(pod(&head("sec-caps"), "{}", "{capabilities: {drop: [CAP_SYS_ADMIN]}}")));

    let (p, lines) = api_printed(&node, "sec-restricted").await;
    assert_restricted(&facts(&lines), "API sec-restricted");
    // KEP-3619: the identity the runtime reports, in the container's status.
    let user = wait_for("sec-restricted's containerStatuses[].user", Duration::from_secs(20), || async {
        let p = node.api_pod("sec-restricted")?;
        let user = p["status"]["containerStatuses"][0]["user"]["linux"].clone();
        (!user.is_null()).then_some(user)
    })
    .await;
    assert_eq!(
        (user["uid"].as_i64(), user["gid"].as_i64()),
        (Some(1000), Some(3000)),
        "{user}\n{}",
        p["status"]
    );
    let groups: Vec<i64> =
        user["supplementalGroups"].as_array().expect("groups").iter().filter_map(Value::as_i64).collect();
    assert!(groups.contains(&4000) && groups.contains(&5000), "{user}");

    let p = node
        .wait_pod("sec-nonroot", "CreateContainerConfigError", Duration::from_secs(60), |p| {
            p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "CreateContainerConfigError"
        })
        .await;
    let uid = p["metadata"]["uid"].as_str().expect("uid");
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["waiting"]["message"],
        format!(
            "container has runAsNonRoot and image will run as root (pod: \"sec-nonroot_{}({uid})\", container: c)",
            node.namespace
        )
    );

    let p = node
        .wait_pod("sec-caps", "Failed", Duration::from_secs(30), |p| p["status"]["phase"] == "Failed")
        .await;
    assert_eq!(p["status"]["reason"], "UnsupportedPodSpec", "{}", p["status"]);
    let message = p["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("spec.containers[0].securityContext.capabilities.drop[0]"), "{message}");
}
