//! Seccomp on the real containerd (issue 36, part 1): static pods get the profile the kubelet
//! would give them, read from inside the container (`Seccomp:` in `/proc/self/status`, and a
//! syscall a Localhost profile blocks failing): RuntimeDefault at pod level, Unconfined at
//! container level over it, nothing set, a Localhost profile under `<root-dir>/seccomp`, a missing
//! Localhost profile (`CreateContainerError` naming the file; at pod level, the sandbox's too),
//! and `--seccomp-default`.

mod common;

use std::time::Duration;

use common::*;

const NS: &str = "sc-ns";

/// A profile that allows everything but creating directories.
const NO_MKDIR: &str = r#"{"defaultAction": "SCMP_ACT_ALLOW",
 "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]}"#;

/// A pod whose container prints its seccomp mode and whether `mkdir` works, then waits.
/// `pod_sc` and `container_sc` are the `securityContext` bodies (flow mappings) or "".
fn pod(name: &str, pod_sc: &str, container_sc: &str) -> String {
    let pod_sc = if pod_sc.is_empty() { String::new() } else { format!("securityContext: {pod_sc}") };
    let container_sc =
        if container_sc.is_empty() { String::new() } else { format!("securityContext: {container_sc}") };
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {NS}
spec:
  terminationGracePeriodSeconds: 1
  {pod_sc}
  containers:
  - name: main
    image: ${{CRILET_IMAGE_BUSYBOX}}
    {container_sc}
    command: [sh, -c, 'grep Seccomp: /proc/self/status; if mkdir /tmp/x; then echo MKDIR-OK; else echo MKDIR-FAILED; fi; echo END; trap "exit 0" TERM; while true; do sleep 1; done']
"#
    )
}

/// The seccomp mode (`0` none, `2` filter) and whether `mkdir` worked, as the container saw them.
async fn seen(a: &Agent, name: &str) -> (String, bool) {
    let lines = printed_before(a, NS, name, "main", "END").await;
    let mode = lines
        .iter()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .unwrap_or_else(|| panic!("{name}: no Seccomp line in {lines:?}"))
        .trim()
        .to_string();
    let mkdir = lines.iter().any(|l| l == "MKDIR-OK");
    assert!(mkdir || lines.iter().any(|l| l == "MKDIR-FAILED"), "{name}: no mkdir outcome in {lines:?}");
    (mode, mkdir)
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_run_with_the_profile_they_ask_for() {
    let a = Agent::start("sc-seccomp").await;
    let profiles = a.root.join("seccomp/profiles");
    std::fs::create_dir_all(&profiles).expect("mkdir <root-dir>/seccomp/profiles");
    std::fs::write(profiles.join("no-mkdir.json"), NO_MKDIR).expect("write the Localhost profile");

    let runtime_default = "{seccompProfile: {type: RuntimeDefault}}";
    a.write_manifest("runtime-default.yaml", &pod("sc-runtime-default", runtime_default, ""));
    a.write_manifest(
        "unconfined.yaml",
        &pod("sc-unconfined", runtime_default, "{seccompProfile: {type: Unconfined}}"),
    );
    a.write_manifest("unset.yaml", &pod("sc-unset", "", ""));
    a.write_manifest(
        "localhost.yaml",
        &pod(
            "sc-localhost",
            "",
            "{seccompProfile: {type: Localhost, localhostProfile: profiles/no-mkdir.json}}",
        ),
    );
    a.write_manifest(
        "privileged.yaml",
        &pod("sc-privileged", "", "{privileged: true, seccompProfile: {type: RuntimeDefault}}"),
    );
    a.write_manifest(
        "missing.yaml",
        &pod(
            "sc-missing",
            "",
            "{seccompProfile: {type: Localhost, localhostProfile: profiles/missing.json}}",
        ),
    );
    a.write_manifest(
        "missing-pod-level.yaml",
        &pod(
            "sc-missing-pod",
            "{seccompProfile: {type: Localhost, localhostProfile: profiles/missing-pod.json}}",
            "",
        ),
    );

    // (pod, Seccomp mode, mkdir works)
    let cases = [
        ("sc-runtime-default", "2", true),
        ("sc-unconfined", "0", true),
        ("sc-unset", "0", true),
        ("sc-localhost", "2", false),
        // The runtime applies no filter to a privileged container (validation warns).
        ("sc-privileged", "0", true),
    ];
    for (name, mode, mkdir) in cases {
        let got = seen(&a, name).await;
        assert_eq!(got, (mode.to_string(), mkdir), "{name}: (Seccomp mode, mkdir works)\n{}", a.log());
    }

    let missing = profiles.join("missing.json").display().to_string();
    let (reason, message) = wait_for("sc-missing waiting with a reason", Duration::from_secs(30), || async {
        let p = a.pod("sc-missing")?;
        let waiting = &cstatus(&p, "main")?["state"]["waiting"];
        Some((waiting["reason"].as_str()?.to_string(), waiting["message"].as_str()?.to_string()))
    })
    .await;
    assert_eq!(reason, "CreateContainerError", "{message}");
    assert!(message.contains(&format!("cannot load seccomp profile {missing:?}")), "{message}");
    let events = a.events_of(NS, "sc-missing");
    assert!(events.contains(&missing), "the Failed event names the file:\n{events}");
    // A pod-level profile is the sandbox's too: whichever of the sandbox and the container the
    // runtime refuses first, the pod's events name the file and nothing of it runs.
    let missing_pod = profiles.join("missing-pod.json").display().to_string();
    let events = wait_for("sc-missing-pod's events naming its profile", Duration::from_secs(30), || async {
        let events = a.events_of(NS, "sc-missing-pod");
        events.contains(&missing_pod).then_some(events)
    })
    .await;
    let p = a.pod("sc-missing-pod").expect("sc-missing-pod listed");
    assert!(!running(&p, "main"), "sc-missing-pod must not run:\n{p:#}\n{events}");
    stop(a).await;
}

/// Stops the agent and removes its pods (they would otherwise run on until the next run).
async fn stop(mut a: Agent) {
    a.stop();
    remove_pods_of(&a.env.cri(), &a.manifests).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn seccomp_default_confines_pods_that_name_no_profile() {
    let a = Agent::start_with_args("sc-seccomp-default", &["--seccomp-default"], &[]).await;
    a.write_manifest("unset.yaml", &pod("sc-default", "", ""));
    a.write_manifest(
        "opt-out.yaml",
        &pod("sc-default-unconfined", "{seccompProfile: {type: Unconfined}}", ""),
    );
    assert_eq!(seen(&a, "sc-default").await.0, "2", "no profile under --seccomp-default\n{}", a.log());
    assert_eq!(seen(&a, "sc-default-unconfined").await.0, "0", "an explicit Unconfined wins\n{}", a.log());
    stop(a).await;
}
