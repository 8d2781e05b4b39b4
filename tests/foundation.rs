//! Step 1 against the real containerd: start, labels and logs, the JSON API, removal, bad
//! manifests, agent restarts and containerd restarts.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use crilet::model::{ContainerState, keys};

const TWO: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: two
  namespace: __NS__
  labels: {app: two}
spec:
  terminationGracePeriodSeconds: 5
  volumes: [{name: data, emptyDir: {}}]
  containers:
  - name: main
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sh, -c, 'trap "exit 0" TERM; echo hello from $(POD_NAME) in $POD_NS; while true; do sleep 1; done']
    env:
    - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    - {name: POD_NS, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
    volumeMounts: [{name: data, mountPath: /data}]
  - name: helper
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
"#;

fn two(ns: &str) -> String {
    TWO.replace("__NS__", ns)
}

#[tokio::test(flavor = "multi_thread")]
async fn two_container_pod_runs_with_kubelet_labels_and_logs() {
    let a = Agent::start("basic").await;
    a.write_manifest("two.yaml", &two("t-basic"));
    let p = running_pod(&a, "two").await;
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let cri = a.env.cri();
    let observed = cri.observe(&uid).await.expect("observe");
    assert_eq!(observed.sandboxes.len(), 1, "one sandbox");
    let sb = &observed.sandboxes[0];
    assert_eq!(sb.attempt, 0);
    assert_eq!(sb.labels.get(keys::POD_NAME).map(String::as_str), Some("two"));
    assert_eq!(sb.labels.get(keys::POD_NAMESPACE).map(String::as_str), Some("t-basic"));
    assert_eq!(sb.labels.get(keys::POD_UID), Some(&uid));
    assert_eq!(sb.labels.get("app").map(String::as_str), Some("two"), "pod labels copied to the sandbox");
    assert_eq!(observed.containers.len(), 2);
    for c in &observed.containers {
        assert_eq!(c.state, ContainerState::Running, "{}", c.name);
        let want: HashMap<&str, String> = HashMap::from([
            (keys::POD_NAME, "two".to_string()),
            (keys::POD_NAMESPACE, "t-basic".to_string()),
            (keys::POD_UID, uid.clone()),
            (keys::CONTAINER_NAME, c.name.clone()),
        ]);
        let status = cri.container_status(&c.id, &c.sandbox_id).await.expect("status");
        assert_eq!(status.restart_count, 0);
        assert!(!status.hash.is_empty(), "hash annotation");
        assert_eq!(c.annotations.get(keys::CONTAINER_RESTART_COUNT).map(String::as_str), Some("0"));
        let _ = want;
        let log = a.logs.join(format!("t-basic_two_{uid}")).join(&c.name).join("0.log");
        assert_eq!(c.log_path, log.display().to_string(), "log path in the kubelet layout");
        let link = a.dir.join("containers").join(format!("two_t-basic_{}-{}.log", c.name, c.id));
        assert_eq!(std::fs::read_link(&link).ok(), Some(log), "legacy symlink {}", link.display());
    }
    // Exactly the four kubelet labels on containers (R1.10).
    let (_, list) = cri.list_all(Some((keys::POD_UID, &uid))).await.expect("list");
    for c in list {
        let mut got: Vec<&str> = c.labels.keys().map(String::as_str).collect();
        got.sort();
        assert_eq!(got, vec![keys::CONTAINER_NAME, keys::POD_NAME, keys::POD_NAMESPACE, keys::POD_UID]);
    }
    // The log file carries the container's output, in CRI format, with downward-API env expanded.
    let log = a.logs.join(format!("t-basic_two_{uid}/main/0.log"));
    let text = wait_for("main's log line", Duration::from_secs(20), || async {
        let t = std::fs::read_to_string(&log).ok()?;
        t.contains("hello from two in t-basic").then_some(t)
    })
    .await;
    let first = text.lines().next().expect("a line");
    let parts: Vec<&str> = first.splitn(4, ' ').collect();
    assert_eq!(parts.len(), 4, "CRI log line: {first}");
    assert_eq!(parts[1], "stdout");
    assert_eq!(parts[2], "F");
    // crilet logs reads the same file.
    let (ok, out, err) = a.cli(&["logs", "two", "-n", "t-basic", "-c", "main"]);
    assert!(ok, "crilet logs failed: {err}");
    assert!(out.contains("hello from two in t-basic"), "logs output: {out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn get_pods_json_matches_cri() {
    let a = Agent::start("json").await;
    a.write_manifest("two.yaml", &two("t-json"));
    let p = running_pod(&a, "two").await;
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let observed = a.env.cri().observe(&uid).await.expect("observe");
    let sb = &observed.sandboxes[0];
    assert_eq!(p["status"]["podIP"].as_str(), sb.ips.first().map(String::as_str), "podIP from the sandbox");
    assert!(
        p["status"]["podIP"].as_str().is_some_and(|ip| ip.starts_with("10.88.77.")),
        "pod IP in the CNI range"
    );
    for c in &observed.containers {
        let s = cstatus(&p, &c.name).expect("container status");
        assert_eq!(s["containerID"].as_str(), Some(format!("containerd://{}", c.id).as_str()));
        assert_eq!(s["imageID"].as_str(), Some(c.image_ref.as_str()));
        assert_eq!(s["restartCount"].as_u64(), Some(u64::from(c.restart_count)));
        assert_eq!(s["ready"].as_bool(), Some(true));
        assert_eq!(s["started"].as_bool(), Some(true));
        let started = s["state"]["running"]["startedAt"].as_str().expect("startedAt");
        let t: jiff::Timestamp = started.parse().expect("RFC 3339 time");
        assert_eq!(t.as_second(), c.started_at / 1_000_000_000, "startedAt from CRI");
    }
    for t in ["PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "PodScheduled"] {
        assert_eq!(condition(&p, t), Some("True"), "condition {t}");
    }
    let (ok, list, _) = a.cli(&["get", "pods", "-n", "t-json", "-o", "json"]);
    assert!(ok);
    let list: serde_json::Value = serde_json::from_str(&list).expect("json");
    assert_eq!((list["apiVersion"].as_str(), list["kind"].as_str()), (Some("v1"), Some("PodList")));
    assert_eq!(list["items"][0]["kind"].as_str(), Some("Pod"));
    let (ok, table, _) = a.cli(&["get", "pods", "-n", "t-json"]);
    assert!(ok);
    let header: Vec<&str> = table.lines().next().unwrap_or("").split_whitespace().collect();
    assert_eq!(header, vec!["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
    let row: Vec<&str> = table.lines().nth(1).unwrap_or("").split_whitespace().collect();
    assert_eq!(&row[..4], &["two", "2/2", "Running", "0"], "table: {table}");
}

#[tokio::test(flavor = "multi_thread")]
async fn removing_the_manifest_leaves_nothing_behind() {
    let a = Agent::start("remove").await;
    a.write_manifest("two.yaml", &two("t-remove"));
    let p = running_pod(&a, "two").await;
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let empty_dir = a.root.join("pods").join(&uid);
    assert!(empty_dir.exists(), "pod dir exists while running");
    a.remove_manifest("two.yaml");
    let cri = a.env.cri();
    wait_for("sandbox and containers removed", Duration::from_secs(30), || async {
        let (s, c) = cri.list_all(Some((keys::POD_UID, &uid))).await.ok()?;
        (s.is_empty() && c.is_empty()).then_some(())
    })
    .await;
    // The pod's directory goes after its sandbox: the runtime's lists can show nothing left a
    // moment before the agent has removed it.
    wait_for("emptyDir removed", Duration::from_secs(10), || async { (!empty_dir.exists()).then_some(()) })
        .await;
    let links: Vec<_> =
        std::fs::read_dir(a.dir.join("containers")).map(|d| d.flatten().collect()).unwrap_or_default();
    assert!(links.is_empty(), "legacy log symlinks removed: {links:?}");
    wait_for("pod gone from the API", Duration::from_secs(10), || async {
        a.pods().filter(|p| p.is_empty()).map(|_| ())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_manifest_beside_a_good_one() {
    let a = Agent::start("malformed").await;
    a.write_manifest(
        "bad.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: Bad_Name}\nspec:\n  containers: [{name: c, image: x}]\n",
    );
    a.write_manifest("broken.yaml", "apiVersion: v1\nkind: Pod\nmetadata: [unclosed\n");
    a.write_manifest("two.yaml", &two("t-malformed"));
    let p = running_pod(&a, "two").await;
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let pods = a.pods().expect("pods");
    assert_eq!(pods.len(), 1, "only the good pod runs");
    // The agent says what is wrong, naming file and field.
    // The whole log: the errors are reported once, when the files are first read.
    let whole_log = || std::fs::read_to_string(&a.log_file).unwrap_or_default();
    let log = wait_for("errors reported", Duration::from_secs(10), || async {
        let l = whole_log();
        (l.contains("bad.yaml") && l.contains("broken.yaml")).then_some(l)
    })
    .await;
    assert!(log.contains("metadata.name"), "names the field: {log}");
    // A bad edit of the good file leaves the running pod alone.
    let ids: Vec<String> = ["main", "helper"].iter().filter_map(|c| container_id(&p, c)).collect();
    a.write_manifest(
        "two.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: two, namespace: t-malformed}\nspec: {containers: []}\n",
    );
    wait_for("the bad edit reported", Duration::from_secs(10), || async {
        whole_log().contains("spec.containers").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let p2 = a.pod("two").expect("pod still there");
    assert_eq!(p2["metadata"]["uid"].as_str(), Some(uid.as_str()));
    let ids2: Vec<String> = ["main", "helper"].iter().filter_map(|c| container_id(&p2, c)).collect();
    assert_eq!(ids, ids2, "containers untouched by a bad edit");
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_sigkill_and_restart_keeps_every_container() {
    let mut a = Agent::start("restart").await;
    a.write_manifest("two.yaml", &two("t-restart"));
    let p = running_pod(&a, "two").await;
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let cri = a.env.cri();
    let before = cri.observe(&uid).await.expect("observe");
    a.kill();
    a.spawn();
    let p2 = running_pod(&a, "two").await;
    assert_eq!(p2["metadata"]["uid"].as_str(), Some(uid.as_str()));
    // Give the new agent a few syncs to do anything wrong.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after = cri.observe(&uid).await.expect("observe");
    let ids = |o: &crilet::model::ObservedPod| {
        let mut v: Vec<String> = o.containers.iter().map(|c| c.id.clone()).collect();
        v.sort();
        v
    };
    assert_eq!(ids(&before), ids(&after), "same containers after the agent restart\n{}", a.log());
    assert_eq!(before.sandboxes[0].id, after.sandboxes[0].id, "same sandbox");
    assert!(after.containers.iter().all(|c| c.state == ContainerState::Running));
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_edit_while_the_agent_is_down_keeps_the_pod() {
    let mut a = Agent::start("bad-edit-down").await;
    a.write_manifest("two.yaml", &two("t-bad-down"));
    let p = running_pod(&a, "two").await;
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let cri = a.env.cri();
    let before = cri.observe(&uid).await.expect("observe");
    a.kill();
    a.write_manifest(
        "two.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: two, namespace: t-bad-down}\nspec: {containers: []}\n",
    );
    a.spawn();
    // The agent comes up, reports the bad file and keeps the pod from the spec its sandbox carries.
    let p2 = running_pod(&a, "two").await;
    assert_eq!(p2["metadata"]["uid"].as_str(), Some(uid.as_str()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = cri.observe(&uid).await.expect("observe");
    let ids = |o: &crilet::model::ObservedPod| {
        let mut v: Vec<(String, ContainerState)> =
            o.containers.iter().map(|c| (c.id.clone(), c.state)).collect();
        v.sort_by(|x, y| x.0.cmp(&y.0));
        v
    };
    assert_eq!(ids(&before), ids(&after), "containers untouched\n{}", a.log());
    // Fixing the file with the same content as before adopts the pod, still untouched.
    a.write_manifest("two.yaml", &two("t-bad-down"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let fixed = cri.observe(&uid).await.expect("observe");
    assert_eq!(ids(&before), ids(&fixed), "containers untouched after the fix\n{}", a.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn active_deadline_fails_the_pod() {
    let a = Agent::start("deadline").await;
    a.write_manifest(
        "d.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: {name: deadline, namespace: t-deadline}
spec:
  activeDeadlineSeconds: 4
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
"#,
    );
    running_pod(&a, "deadline").await;
    let p = wait_for("pod failed with DeadlineExceeded", Duration::from_secs(30), || async {
        let p = a.pod("deadline")?;
        (phase(&p) == "Failed").then_some(p)
    })
    .await;
    assert_eq!(p["status"]["reason"].as_str(), Some("DeadlineExceeded"));
    let started: jiff::Timestamp =
        p["status"]["startTime"].as_str().expect("startTime").parse().expect("time");
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let cri = a.env.cri();
    let observed = wait_for("main stopped", Duration::from_secs(10), || async {
        let o = cri.observe(&uid).await.ok()?;
        (o.newest("main")?.state == ContainerState::Exited).then_some(o)
    })
    .await;
    let main = observed.newest("main").expect("main");
    let ran = main.finished_at / 1_000_000_000 - started.as_second();
    assert!((4..=8).contains(&ran), "stopped about 4 s after the start, took {ran} s");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let again = a.env.cri().observe(&uid).await.expect("observe");
    assert_eq!(again.containers.len(), 1, "not restarted");
}

#[tokio::test(flavor = "multi_thread")]
async fn etc_hosts_carries_the_pod_ip_and_host_aliases() {
    let a = Agent::start("hosts").await;
    a.write_manifest(
        "h.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: {name: hosts, namespace: t-hosts}
spec:
  terminationGracePeriodSeconds: 2
  hostAliases: [{ip: 10.1.2.3, hostnames: [db.local, cache.local]}]
  containers:
  - name: main
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sh, -c, 'cat /etc/hosts; trap "exit 0" TERM; while true; do sleep 1; done']
"#,
    );
    let p = running_pod(&a, "hosts").await;
    let ip = p["status"]["podIP"].as_str().expect("pod IP").to_string();
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let log = a.logs.join(format!("t-hosts_hosts_{uid}/main/0.log"));
    let text = wait_for("the container printed /etc/hosts", Duration::from_secs(20), || async {
        let t = std::fs::read_to_string(&log).ok()?;
        t.contains("HostAliases").then_some(t)
    })
    .await;
    assert!(text.contains(&format!("{ip}\thosts")), "pod IP and hostname: {text}");
    assert!(text.contains("10.1.2.3\tdb.local\tcache.local"), "host aliases: {text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn run_as_non_root_refuses_a_root_image() {
    let a = Agent::start("nonroot").await;
    a.write_manifest(
        "n.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: {name: nonroot, namespace: t-nonroot}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: root
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
    securityContext: {runAsNonRoot: true}
  - name: user
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
    securityContext: {runAsNonRoot: true, runAsUser: 1000}
"#,
    );
    let p = wait_for("root refused, user running", Duration::from_secs(60), || async {
        let p = a.pod("nonroot")?;
        let refused = cstatus(&p, "root")?["state"]["waiting"]["reason"] == "CreateContainerConfigError";
        (refused && running(&p, "user")).then_some(p)
    })
    .await;
    let msg = cstatus(&p, "root").expect("status")["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(msg.contains("runAsNonRoot"), "message: {msg}");
}

#[tokio::test(flavor = "multi_thread")]
async fn host_network_pod_runs_once_with_the_host_ip() {
    let a = Agent::start("hostnet").await;
    a.write_manifest(
        "h.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: {name: hostnet, namespace: t-hostnet}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
"#,
    );
    let p = running_pod(&a, "hostnet").await;
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    assert_eq!(p["status"]["podIP"], p["status"]["hostIP"], "a host-network pod has the host's IP");
    // The sandbox must be kept: a wrong reading of its network mode would re-create it forever.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let o = a.env.cri().observe(&uid).await.expect("observe");
    assert_eq!(o.sandboxes.len(), 1, "one sandbox\n{}", a.log());
    assert!(o.sandboxes[0].host_network, "runtime reports the node network namespace");
    assert_eq!(o.containers.len(), 1, "one container instance");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_image_is_pulled_again_after_the_back_off() {
    let a = Agent::start("late-image").await;
    let registry = a.env.get("CRILET_REGISTRY");
    let tag = jiff::Timestamp::now().as_second();
    let image = format!("{registry}/crilet-test-late:{tag}");
    a.write_manifest(
        "late.yaml",
        &format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: late, namespace: t-late}}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: {image}
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
"#
        ),
    );
    wait_for("ErrImagePull / ImagePullBackOff", Duration::from_secs(30), || async {
        let p = a.pod("late")?;
        let reason = cstatus(&p, "main")?["state"]["waiting"]["reason"].as_str()?.to_string();
        (reason == "ErrImagePull" || reason == "ImagePullBackOff").then_some(())
    })
    .await;
    // The image appears in the registry: a later pull attempt (after the back-off) succeeds.
    let src = format!("docker://{}", a.env.get("CRILET_IMAGE_BUSYBOX"));
    let out = std::process::Command::new("skopeo")
        .args([
            "copy",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
            &src,
            &format!("docker://{image}"),
        ])
        .output()
        .expect("skopeo");
    assert!(out.status.success(), "skopeo copy: {}", String::from_utf8_lossy(&out.stderr));
    let p = running_pod(&a, "late").await;
    assert_eq!(cstatus(&p, "main").expect("status")["restartCount"].as_u64(), Some(0));
}
