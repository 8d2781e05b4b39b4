//! Cluster mode against the real control plane of `hack/cluster.sh` (kube-apiserver,
//! controller-manager and scheduler v1.36, Node,RBAC authorization, NodeRestriction and
//! ServiceAccount admission) and containerd: crilet joins as a node with its own
//! `system:node:<name>` identity; everything is driven and observed through kubectl as the
//! admin, and through CRI.

mod common;

use std::time::Duration;

use common::cluster::{Node, api_condition};
use common::wait_for;
use serde_json::Value;

fn render(node: &Node, yaml: &str) -> String {
    node.agent.env.render(yaml).replace("${NODE}", &node.name)
}

fn phase(p: &Value) -> &str {
    p["status"]["phase"].as_str().unwrap_or("")
}

fn api_cstatus<'a>(p: &'a Value, name: &str) -> Option<&'a Value> {
    ["containerStatuses", "initContainerStatuses"]
        .iter()
        .filter_map(|k| p["status"][k].as_array())
        .flatten()
        .find(|c| c["name"] == name)
}

#[tokio::test]
async fn node_registers_goes_ready_and_renews_its_lease() {
    let node = Node::start("node_ready", 10261, &[]).await;
    let n = node.wait_ready().await;
    let labels = &n["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert!(labels["kubernetes.io/arch"].is_string() && labels["kubernetes.io/hostname"].is_string());
    assert_eq!(labels["crilet.io/test"], node.name.as_str(), "--node-labels");
    let status = &n["status"];
    assert_eq!(status["capacity"]["pods"], "110");
    for k in ["cpu", "memory", "ephemeral-storage"] {
        assert!(status["capacity"][k].is_string() && status["allocatable"][k].is_string(), "{k}: {status}");
    }
    let runtime = status["nodeInfo"]["containerRuntimeVersion"].as_str().unwrap_or("");
    assert!(runtime.starts_with("containerd://2."), "containerRuntimeVersion {runtime}");
    assert_eq!(status["nodeInfo"]["kubeletVersion"], "v1.36.3");
    assert!(!status["nodeInfo"]["bootID"].as_str().unwrap_or("").is_empty());
    let addresses = status["addresses"].as_array().expect("addresses");
    assert!(
        addresses.iter().any(|a| a["type"] == "InternalIP" && a["address"] == "127.0.0.1"),
        "{addresses:?}"
    );
    assert_eq!(status["daemonEndpoints"]["kubeletEndpoint"]["Port"], 10261);
    let types: Vec<&str> =
        status["conditions"].as_array().unwrap().iter().filter_map(|c| c["type"].as_str()).collect();
    for t in ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"] {
        assert!(types.contains(&t), "{t} in {types:?}");
    }
    let ready = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
    assert_eq!(ready["reason"], "KubeletReady");

    // The controller-manager's node lifecycle controller lifts the not-ready taint.
    wait_for("the not-ready taint to be removed", Duration::from_secs(60), || async {
        let n = node.cluster.get_json(&["node", &node.name])?;
        let tainted = n["spec"]["taints"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["key"] == "node.kubernetes.io/not-ready"));
        (!tainted).then_some(())
    })
    .await;

    let lease =
        node.cluster.get_json(&["lease", "-n", "kube-node-lease", &node.name]).expect("the node's Lease");
    assert_eq!(lease["spec"]["holderIdentity"], node.name.as_str());
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
    assert_eq!(lease["metadata"]["ownerReferences"][0]["kind"], "Node");
    assert_eq!(lease["metadata"]["ownerReferences"][0]["uid"], n["metadata"]["uid"]);
    let first = lease["spec"]["renewTime"].as_str().unwrap_or("").to_string();
    wait_for("the Lease to be renewed", Duration::from_secs(25), || async {
        let l = node.cluster.get_json(&["lease", "-n", "kube-node-lease", &node.name])?;
        let t = l["spec"]["renewTime"].as_str()?.to_string();
        (t != first).then_some(())
    })
    .await;
}

const SIMPLE: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: simple
  labels: {app: simple}
spec:
  nodeName: ${NODE}
  terminationGracePeriodSeconds: 5
  containers:
  - name: app
    image: ${CRILET_IMAGE_BUSYBOX}
    command: ["sh", "-c", "trap 'echo stopping; exit 0' TERM; echo started; while true; do sleep 0.2; done"]
    readinessProbe:
      exec: {command: ["true"]}
      periodSeconds: 1
"#;

#[tokio::test]
async fn api_pod_runs_with_status_matching_cri_and_deletes_cleanly() {
    let node = Node::start("api_pod", 10262, &[]).await;
    node.wait_ready().await;
    node.apply(&render(&node, SIMPLE));
    let p = node
        .wait_pod("simple", "Running and Ready", Duration::from_secs(90), |p| {
            phase(p) == "Running" && api_condition(p, "Ready") == Some("True")
        })
        .await;
    let cs = api_cstatus(&p, "app").expect("container status");
    assert_eq!(cs["ready"], true);
    assert_eq!(cs["restartCount"], 0);
    let id = cs["containerID"].as_str().unwrap_or("").trim_start_matches("containerd://").to_string();
    assert_eq!(p["status"]["hostIP"], "127.0.0.1");
    assert_eq!(p["status"]["qosClass"], "BestEffort");
    assert!(p["status"]["startTime"].is_string());
    // The status says which generation of the spec it is about.
    assert_eq!(p["status"]["observedGeneration"], p["metadata"]["generation"], "{}", p["status"]);
    // What CRI shows is what the API shows.
    let cri = node.agent.env.cri();
    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    let observed = cri.observe(&uid).await.expect("observe");
    let c = observed.newest("app").expect("the container in CRI");
    assert_eq!(c.id, id);
    assert_eq!(format!("{:?}", c.state), "Running");
    assert_eq!(observed.pod_ips().first().map(String::as_str), p["status"]["podIP"].as_str());
    // The kubelet's conditions, and the scheduler's PodScheduled kept.
    for t in ["PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "PodScheduled"] {
        assert_eq!(api_condition(&p, t), Some("True"), "{t}: {}", p["status"]);
    }

    // kubectl delete: the container gets SIGTERM, exits, and the object goes.
    let started = std::time::Instant::now();
    let (ok, _, err) = node.kubectl(&["delete", "pod", "simple", "--wait=true", "--timeout=30s"]);
    assert!(ok, "kubectl delete: {err}\n{}", node.agent.log());
    assert!(
        started.elapsed() < Duration::from_secs(5) + Duration::from_secs(3),
        "deleted within its grace: {:?}",
        started.elapsed()
    );
    let left = cri.observe(&uid).await.expect("observe");
    assert!(left.containers.is_empty() && left.sandboxes.is_empty(), "nothing left in CRI: {left:?}");
    let log = std::fs::read_dir(&node.agent.logs).map(|d| d.count()).unwrap_or(0);
    assert_eq!(log, 0, "the pod's log directory is removed");
}

#[tokio::test]
async fn deployment_is_scheduled_runs_ready_and_scales_to_zero() {
    let node = Node::start("deployment", 10263, &[]).await;
    node.wait_ready().await;
    let yaml = render(
        &node,
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      nodeSelector: {crilet.io/test: ${NODE}}
      terminationGracePeriodSeconds: 2
      containers:
      - name: web
        image: ${CRILET_IMAGE_BUSYBOX}
        command: ["sh", "-c", "while true; do sleep 1; done"]
        readinessProbe:
          exec: {command: ["true"]}
          periodSeconds: 1
"#,
    );
    node.apply(&yaml);
    let (ok, out, err) = node.kubectl(&["rollout", "status", "deployment/web", "--timeout=120s"]);
    assert!(ok, "rollout: {out}{err}\n{}", node.agent.log());
    let pods = node.cluster.get_json(&["pods", "-n", &node.namespace, "-l", "app=web"]).expect("pods");
    let items = pods["items"].as_array().expect("items");
    assert_eq!(items.len(), 3);
    for p in items {
        assert_eq!(p["spec"]["nodeName"], node.name.as_str(), "placed by kube-scheduler on the crilet node");
        assert_eq!(api_condition(p, "Ready"), Some("True"));
        let vols = p["spec"]["volumes"].as_array().cloned().unwrap_or_default();
        assert!(
            vols.iter().any(|v| v["name"].as_str().unwrap_or("").starts_with("kube-api-access-")),
            "ServiceAccount admission added the projected token volume"
        );
    }
    node.kubectl(&["scale", "deployment/web", "--replicas=0"]);
    wait_for("every web pod to be gone", Duration::from_secs(60), || async {
        let pods = node.cluster.get_json(&["pods", "-n", &node.namespace, "-l", "app=web"])?;
        pods["items"].as_array()?.is_empty().then_some(())
    })
    .await;
    let cri = node.agent.env.cri();
    let (sandboxes, _) = cri.list_all(Some((crilet::model::keys::MANAGED_BY, "crilet"))).await.expect("list");
    let ours = sandboxes
        .iter()
        .filter(|s| {
            s.annotations.get(crilet::model::keys::MANIFEST_FILE).is_some_and(|f| {
                matches!(crilet::model::PodSource::parse(f), crilet::model::PodSource::Api { node: n } if n == node.name)
            })
        })
        .count();
    assert_eq!(ours, 0, "no sandbox of the node is left");
}

#[tokio::test]
async fn job_with_a_native_sidecar_completes_and_the_sidecar_stops_after_the_app() {
    let node = Node::start("sidecar_job", 10264, &[]).await;
    node.wait_ready().await;
    let yaml = render(
        &node,
        r#"
apiVersion: batch/v1
kind: Job
metadata: {name: seed}
spec:
  backoffLimit: 0
  template:
    spec:
      nodeSelector: {crilet.io/test: ${NODE}}
      restartPolicy: Never
      terminationGracePeriodSeconds: 5
      initContainers:
      - name: proxy
        image: ${CRILET_IMAGE_BUSYBOX}
        restartPolicy: Always
        command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.2; done"]
      containers:
      - name: app
        image: ${CRILET_IMAGE_BUSYBOX}
        command: ["sh", "-c", "echo working; sleep 2; echo done"]
"#,
    );
    node.apply(&yaml);
    let (ok, out, err) = node.kubectl(&["wait", "--for=condition=complete", "job/seed", "--timeout=120s"]);
    assert!(ok, "job complete: {out}{err}\n{}", node.agent.log());
    let pods = node.cluster.get_json(&["pods", "-n", &node.namespace, "-l", "job-name=seed"]).expect("pods");
    let p = &pods["items"][0];
    assert_eq!(phase(p), "Succeeded", "{}", p["status"]);
    let app = api_cstatus(p, "app").expect("app status");
    let proxy = api_cstatus(p, "proxy").expect("sidecar status");
    let app_end = app["state"]["terminated"]["finishedAt"].as_str().expect("app terminated").to_string();
    let proxy_end =
        proxy["state"]["terminated"]["finishedAt"].as_str().expect("sidecar terminated").to_string();
    assert_eq!(app["state"]["terminated"]["exitCode"], 0);
    assert!(proxy_end >= app_end, "the sidecar stopped after the app: {proxy_end} vs {app_end}");
}

#[tokio::test]
async fn admission_refuses_what_does_not_fit_with_the_kubelets_reasons() {
    let node = Node::start("admission", 10265, &["--max-pods", "1"]).await;
    node.wait_ready().await;
    let pod = |name: &str, extra: &str| {
        render(
            &node,
            &format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  nodeName: ${{NODE}}\n{extra}  containers:\n  - name: c\n    image: ${{CRILET_IMAGE_BUSYBOX}}\n    command: [sleep, '3600']\n"
            ),
        )
    };
    node.apply(&pod("first", ""));
    node.wait_pod("first", "Running", Duration::from_secs(60), |p| phase(p) == "Running").await;
    node.apply(&pod("second", ""));
    let p = node.wait_pod("second", "Failed", Duration::from_secs(30), |p| phase(p) == "Failed").await;
    assert_eq!(p["status"]["reason"], "OutOfpods", "{}", p["status"]);
    assert!(p["status"]["message"].as_str().unwrap_or("").contains("pods"), "{}", p["status"]);
    node.apply(&pod("elsewhere", "  nodeSelector: {zone: nowhere}\n"));
    let p = node.wait_pod("elsewhere", "Failed", Duration::from_secs(30), |p| phase(p) == "Failed").await;
    assert_eq!(p["status"]["reason"], "NodeAffinity", "{}", p["status"]);
    node.apply(&pod("claims", "  volumes:\n  - name: data\n    persistentVolumeClaim: {claimName: data}\n"));
    let p = node.wait_pod("claims", "Failed", Duration::from_secs(30), |p| phase(p) == "Failed").await;
    assert_eq!(p["status"]["reason"], "UnsupportedPodSpec");
    assert!(
        p["status"]["message"].as_str().unwrap_or("").contains("persistentVolumeClaim"),
        "{}",
        p["status"]
    );
    // The kubelet's OS checks come before everything else it checks.
    node.apply(&pod("windows", "  os: {name: windows}\n"));
    let p = node.wait_pod("windows", "Failed", Duration::from_secs(30), |p| phase(p) == "Failed").await;
    assert_eq!(p["status"]["reason"], "PodOSNotSupported", "{}", p["status"]);
    assert_eq!(p["status"]["message"], "Failed to admit pod as the OS field doesn't match node OS");
    let labelled = pod("labelled", "")
        .replace("name: labelled}", "name: labelled, labels: {kubernetes.io/os: windows}}");
    node.apply(&labelled);
    let p = node.wait_pod("labelled", "Failed", Duration::from_secs(30), |p| phase(p) == "Failed").await;
    assert_eq!(p["status"]["reason"], "PodOSSelectorNodeLabelDoesNotMatch", "{}", p["status"]);
    // The first pod was never disturbed.
    let first = node.api_pod("first").expect("first");
    assert_eq!(phase(&first), "Running");
    assert_eq!(api_cstatus(&first, "c").unwrap()["restartCount"], 0);
}

#[tokio::test]
async fn restarted_agent_adopts_its_api_pods_without_restarting_them() {
    let mut node = Node::start("adoption", 10266, &[]).await;
    node.wait_ready().await;
    node.apply(&render(&node, SIMPLE));
    let before = node
        .wait_pod("simple", "Running and Ready", Duration::from_secs(90), |p| {
            api_condition(p, "Ready") == Some("True")
        })
        .await;
    let id = api_cstatus(&before, "app").unwrap()["containerID"].clone();
    node.agent.kill();
    node.agent.spawn();
    // The new agent's status write lands (its own heartbeat moves) and nothing restarted.
    wait_for("the restarted agent to renew the Lease", Duration::from_secs(30), || async {
        let l = node.cluster.get_json(&["lease", "-n", "kube-node-lease", &node.name])?;
        let renewed = l["spec"]["renewTime"].as_str()? > before["status"]["startTime"].as_str()?;
        renewed.then_some(())
    })
    .await;
    // The restarted agent has adopted and published the pod (its control socket shows it
    // Ready), and its status write has landed: the API shows what it published.
    let published = wait_for("the restarted agent to publish the pod", Duration::from_secs(30), || async {
        let p = node.agent.pod("simple")?;
        (common::condition(&p, "Ready") == Some("True")).then_some(p)
    })
    .await;
    let after = wait_for("the API to show the restarted agent's status", Duration::from_secs(30), || async {
        let p = node.api_pod("simple")?;
        (api_cstatus(&p, "app")?["containerID"] == api_cstatus(&published, "app")?["containerID"])
            .then_some(p)
    })
    .await;
    let cs = api_cstatus(&after, "app").unwrap();
    assert_eq!(cs["containerID"], id, "same container\n{}", node.agent.log());
    assert_eq!(cs["restartCount"], 0);
    assert_eq!(api_condition(&after, "Ready"), Some("True"), "readiness kept across the restart");
    assert_eq!(after["metadata"]["uid"], before["metadata"]["uid"]);
}

/// Runs `cmd` in the pod's container `c` through CRI; its output.
async fn exec(node: &Node, p: &Value, c: &str, cmd: &[&str]) -> (i32, String) {
    let id = api_cstatus(p, c)
        .and_then(|s| s["containerID"].as_str())
        .unwrap_or("")
        .trim_start_matches("containerd://")
        .to_string();
    let cri = node.agent.env.cri();
    let (code, out) = cri
        .exec_sync(&id, cmd.iter().map(|s| s.to_string()).collect(), Duration::from_secs(10))
        .await
        .expect("exec");
    (code, String::from_utf8_lossy(&out).to_string())
}

#[tokio::test]
async fn static_pods_get_mirror_pods_that_come_back_when_deleted() {
    let node = Node::start("mirror", 10267, &[]).await;
    node.wait_ready().await;
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: static-web, namespace: {}}}\nspec:\n  terminationGracePeriodSeconds: 2\n  containers:\n  - name: web\n    image: ${{CRILET_IMAGE_BUSYBOX}}\n    command: [sleep, '3600']\n",
        node.namespace
    );
    node.agent.write_manifest("static.yaml", &manifest);
    let m = node
        .wait_pod("static-web", "mirror pod Running", Duration::from_secs(60), |p| phase(p) == "Running")
        .await;
    let ann = &m["metadata"]["annotations"];
    assert_eq!(ann["kubernetes.io/config.source"], "file");
    assert!(ann["kubernetes.io/config.mirror"].is_string());
    let owner = &m["metadata"]["ownerReferences"][0];
    assert_eq!((owner["kind"].as_str(), owner["name"].as_str()), (Some("Node"), Some(node.name.as_str())));
    assert_eq!(m["spec"]["nodeName"], node.name.as_str());
    let id = api_cstatus(&m, "web").expect("status on the mirror")["containerID"].clone();
    assert!(id.is_string(), "the static pod's status is on its mirror: {}", m["status"]);

    // Deleted by someone: a new mirror pod comes, the static pod runs on.
    let old_uid = m["metadata"]["uid"].clone();
    node.kubectl(&["delete", "pod", "static-web", "--wait=false"]);
    let again = node
        .wait_pod("static-web", "a new mirror pod", Duration::from_secs(60), |p| {
            p["metadata"]["uid"] != old_uid && api_cstatus(p, "web").is_some()
        })
        .await;
    assert_eq!(api_cstatus(&again, "web").unwrap()["containerID"], id, "the static pod was not restarted");
    assert_eq!(api_cstatus(&again, "web").unwrap()["restartCount"], 0);

    // A label edit keeps the static pod (in place): the mirror pod follows the new manifest
    // and still gets the status of the same running container.
    let mirror_uid = again["metadata"]["uid"].clone();
    node.agent.write_manifest(
        "static.yaml",
        &manifest.replace("name: static-web,", "name: static-web, labels: {tier: web},"),
    );
    let relabelled = node
        .wait_pod(
            "static-web",
            "the mirror pod of the relabelled static pod, with its status",
            Duration::from_secs(60),
            |p| {
                p["metadata"]["uid"] != mirror_uid
                    && p["metadata"]["labels"]["tier"] == "web"
                    && api_cstatus(p, "web").is_some()
            },
        )
        .await;
    assert_eq!(
        api_cstatus(&relabelled, "web").unwrap()["containerID"],
        id,
        "the static pod was not restarted"
    );

    // The manifest goes: so does the mirror pod.
    node.agent.remove_manifest("static.yaml");
    wait_for("the mirror pod to be deleted", Duration::from_secs(60), || async {
        node.api_pod("static-web").is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn configmap_secret_and_token_volumes_and_env_are_served_and_updated() {
    let node = Node::start("volumes", 10268, &["--sync-frequency", "2s"]).await;
    node.wait_ready().await;
    node.apply(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app-config}\ndata: {greeting: hello, mode: fast}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: app-secret}\nstringData: {password: s3cret}\n",
    );
    node.apply(&render(
        &node,
        r#"
apiVersion: v1
kind: Pod
metadata: {name: vols, labels: {tier: back}}
spec:
  nodeName: ${NODE}
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sleep, '3600']
    env:
    - name: GREETING
      valueFrom: {configMapKeyRef: {name: app-config, key: greeting}}
    - name: PASSWORD
      valueFrom: {secretKeyRef: {name: app-secret, key: password}}
    envFrom:
    - prefix: CFG_
      configMapRef: {name: app-config}
    volumeMounts:
    - {name: cfg, mountPath: /cfg}
    - {name: sec, mountPath: /sec}
    - {name: info, mountPath: /info}
  volumes:
  - name: cfg
    configMap: {name: app-config, items: [{key: greeting, path: sub/greeting.txt}]}
  - name: sec
    secret: {secretName: app-secret, defaultMode: 0400}
  - name: info
    downwardAPI: {items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}]}
"#,
    ));
    let p = node
        .wait_pod("vols", "Running", Duration::from_secs(60), |p| {
            api_cstatus(p, "app").is_some_and(|c| c["state"]["running"].is_object())
        })
        .await;
    let cat = |path: &'static str| {
        let p = p.clone();
        let node = &node;
        async move { exec(node, &p, "app", &["cat", path]).await }
    };
    assert_eq!(cat("/cfg/sub/greeting.txt").await, (0, "hello".to_string()));
    assert_eq!(cat("/sec/password").await, (0, "s3cret".to_string()));
    assert_eq!(cat("/info/labels").await, (0, "tier=\"back\"".to_string()));
    let (_, env) = exec(&node, &p, "app", &["env"]).await;
    for want in ["GREETING=hello", "PASSWORD=s3cret", "CFG_greeting=hello", "CFG_mode=fast"] {
        assert!(env.lines().any(|l| l == want), "{want} in env:\n{env}");
    }
    let (_, ls) = exec(&node, &p, "app", &["ls", "-la", "/sec/"]).await;
    assert!(ls.contains("..data"), "the atomic writer's ..data link: {ls}");

    // The ServiceAccount admission plugin's projected volume: token, CA, namespace.
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    let (code, ns) = exec(&node, &p, "app", &["cat", &format!("{sa}/namespace")]).await;
    assert_eq!((code, ns.as_str()), (0, node.namespace.as_str()));
    let (code, ca) = exec(&node, &p, "app", &["cat", &format!("{sa}/ca.crt")]).await;
    assert_eq!(code, 0);
    let cluster_ca = std::fs::read_to_string(node.cluster.get("CRILET_CLUSTER_CA")).expect("CA");
    assert_eq!(ca.trim(), cluster_ca.trim(), "kube-root-ca.crt is the cluster CA");
    let (code, token) = exec(&node, &p, "app", &["cat", &format!("{sa}/token")]).await;
    assert_eq!(code, 0);
    // The token authenticates to the API server as the pod's service account.
    let review = format!(
        r#"{{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{{"token":"{}"}}}}"#,
        token.trim()
    );
    let (ok, out, err) = node.cluster.kubectl_in(&["create", "-o", "json", "-f", "-"], Some(&review));
    assert!(ok, "TokenReview: {err}");
    let r: Value = serde_json::from_str(&out).expect("TokenReview JSON");
    assert_eq!(r["status"]["authenticated"], true, "{out}");
    assert_eq!(
        r["status"]["user"]["username"],
        format!("system:serviceaccount:{}:default", node.namespace).as_str()
    );

    // Updates reach the running pod, in place.
    node.kubectl(&["patch", "configmap", "app-config", "-p", r#"{"data":{"greeting":"bonjour"}}"#]);
    wait_for("the ConfigMap update in the volume", Duration::from_secs(60), || async {
        (exec(&node, &p, "app", &["cat", "/cfg/sub/greeting.txt"]).await.1 == "bonjour").then_some(())
    })
    .await;
    node.kubectl(&["label", "pod", "vols", "tier=front", "--overwrite"]);
    wait_for("the label update in the downward API volume", Duration::from_secs(60), || async {
        (exec(&node, &p, "app", &["cat", "/info/labels"]).await.1 == "tier=\"front\"").then_some(())
    })
    .await;
    let now = node.api_pod("vols").expect("pod");
    assert_eq!(api_cstatus(&now, "app").unwrap()["restartCount"], 0, "updated without a restart");
}

#[tokio::test]
async fn kubectl_logs_reaches_the_kubelet_api_plain_follow_and_previous() {
    let node = Node::start("logs", 10269, &[]).await;
    node.wait_ready().await;
    node.apply(&render(
        &node,
        r#"
apiVersion: v1
kind: Pod
metadata: {name: talker}
spec:
  nodeName: ${NODE}
  terminationGracePeriodSeconds: 1
  containers:
  - name: ticker
    image: ${CRILET_IMAGE_BUSYBOX}
    command: ["sh", "-c", "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.3; done"]
  - name: crasher
    image: ${CRILET_IMAGE_BUSYBOX}
    command: ["sh", "-c", "echo run-$(cat /proc/sys/kernel/random/uuid); sleep 4; exit 1"]
"#,
    ));
    node.wait_pod("talker", "ticker running", Duration::from_secs(60), |p| {
        api_cstatus(p, "ticker").is_some_and(|c| c["state"]["running"].is_object())
    })
    .await;
    let logs = wait_for("kubectl logs to show ticks", Duration::from_secs(30), || async {
        let (ok, out, err) = node.kubectl(&["logs", "talker", "-c", "ticker", "--tail=3"]);
        if !ok {
            eprintln!("kubectl logs: {err}");
        }
        (ok && out.lines().count() == 3).then_some(out)
    })
    .await;
    assert!(logs.lines().all(|l| l.starts_with("tick ")), "{logs}");
    let (ok, out, _) = node.kubectl(&["logs", "talker", "-c", "ticker", "--timestamps", "--tail=1"]);
    assert!(
        ok && out.split_whitespace().next().is_some_and(|t| t.contains('T') && t.ends_with('Z')),
        "{out}"
    );

    // -f streams lines written after it started.
    let kubectl = node.cluster.get("CRILET_KUBECTL");
    let out = std::process::Command::new("timeout")
        .args(["3", &kubectl, "--kubeconfig", &node.cluster.get("CRILET_CLUSTER_KUBECONFIG")])
        .args(["--cache-dir", &node.cluster.get("CRILET_KUBECTL_CACHE_DIR")])
        .args(["-n", &node.namespace, "logs", "-f", "--tail=1", "talker", "-c", "ticker"])
        .output()
        .expect("kubectl logs -f");
    let followed = String::from_utf8_lossy(&out.stdout);
    assert!(followed.lines().count() >= 4, "follow streamed new lines:\n{followed}");

    // --previous: the instance before the running one.
    node.wait_pod("talker", "crasher restarted and running", Duration::from_secs(60), |p| {
        api_cstatus(p, "crasher")
            .is_some_and(|c| c["restartCount"].as_i64() >= Some(1) && c["state"]["running"].is_object())
    })
    .await;
    let (ok, prev, err) = node.kubectl(&["logs", "talker", "-c", "crasher", "--previous"]);
    assert!(ok, "logs --previous: {err}");
    let (ok, cur, _) = node.kubectl(&["logs", "talker", "-c", "crasher"]);
    assert!(ok);
    assert!(prev.starts_with("run-") && cur.starts_with("run-"), "{prev} / {cur}");
    assert_ne!(prev, cur, "--previous shows the earlier instance");
    let (ok, _, err) = node.kubectl(&["logs", "talker", "-c", "nope"]);
    assert!(!ok && !err.is_empty(), "an unknown container is an error");
}

#[tokio::test]
async fn a_second_delete_with_a_shorter_grace_brings_the_deadline_forward() {
    let node = Node::start("regrace", 10272, &[]).await;
    node.wait_ready().await;
    node.apply(&render(
        &node,
        r#"
apiVersion: v1
kind: Pod
metadata: {name: stubborn}
spec:
  nodeName: ${NODE}
  terminationGracePeriodSeconds: 60
  containers:
  - name: app
    image: ${CRILET_IMAGE_BUSYBOX}
    command: ["sh", "-c", "trap '' TERM; while true; do sleep 0.2; done"]
"#,
    ));
    let p = node.wait_pod("stubborn", "Running", Duration::from_secs(60), |p| phase(p) == "Running").await;
    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    let (ok, _, err) = node.kubectl(&["delete", "pod", "stubborn", "--wait=false"]);
    assert!(ok, "{err}");
    // The first deletion's budget (60 s) is under way: the container ignores SIGTERM.
    node.wait_pod("stubborn", "deletion seen", Duration::from_secs(10), |p| {
        p["metadata"]["deletionTimestamp"].is_string()
    })
    .await;
    let cri = node.agent.env.cri();
    wait_for("the container to get its SIGTERM", Duration::from_secs(10), || async {
        node.agent.log().contains("stopping container").then_some(())
    })
    .await;
    let again = std::time::Instant::now();
    let (ok, _, err) = node.kubectl(&["delete", "pod", "stubborn", "--grace-period=2", "--wait=false"]);
    assert!(ok, "{err}");
    wait_for("the pod to be gone after the shorter grace", Duration::from_secs(20), || async {
        node.api_pod("stubborn").is_none().then_some(())
    })
    .await;
    let took = again.elapsed();
    assert!(
        took < Duration::from_secs(8),
        "stopped by the second, shorter deadline: {took:?}\n{}",
        node.agent.log()
    );
    let left = cri.observe(&uid).await.expect("observe");
    assert!(left.containers.is_empty(), "{left:?}");
}

/// A docker-registry with basic auth on `CRILET_AUTH_REGISTRY` (its hosts.toml is setup's),
/// stopped when dropped.
struct AuthRegistry {
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Drop for AuthRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn auth_registry(addr: &str, user: &str, password: &str) -> AuthRegistry {
    let dir = tempfile::tempdir().expect("temp dir");
    let hash = bcrypt::hash(password, 6).expect("bcrypt");
    std::fs::write(dir.path().join("htpasswd"), format!("{user}:{hash}\n")).expect("htpasswd");
    let port = addr.rsplit(':').next().unwrap_or("5098");
    let config = format!(
        "version: 0.1\nlog: {{level: warn}}\nstorage: {{filesystem: {{rootdirectory: {}}}}}\nhttp: {{addr: 127.0.0.1:{port}}}\nauth:\n  htpasswd: {{realm: crilet-test, path: {}}}\n",
        dir.path().join("data").display(),
        dir.path().join("htpasswd").display()
    );
    std::fs::write(dir.path().join("config.yml"), config).expect("registry config");
    let child = std::process::Command::new("docker-registry")
        .arg("serve")
        .arg(dir.path().join("config.yml"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("docker-registry");
    AuthRegistry { child, _dir: dir }
}

#[tokio::test]
async fn image_pull_secrets_authenticate_to_a_registry_with_basic_auth() {
    let node = Node::start("pull_secrets", 10273, &[]).await;
    let env = &node.agent.env;
    let registry = env.get("CRILET_AUTH_REGISTRY");
    let _reg = auth_registry(&registry, "puller", "s3cret-pw");
    // The image, pushed with the credentials (copied from the open registry).
    let image = format!("{registry}/private/busybox:{}", node.namespace);
    wait_for("the auth registry to take the push", Duration::from_secs(30), || async {
        let out = std::process::Command::new("skopeo")
            .args([
                "copy",
                "--src-tls-verify=false",
                "--dest-tls-verify=false",
                "--dest-creds",
                "puller:s3cret-pw",
            ])
            .arg(format!("docker://{}", env.get("CRILET_IMAGE_BUSYBOX")))
            .arg(format!("docker://{image}"))
            .output()
            .ok()?;
        out.status.success().then_some(())
    })
    .await;
    node.wait_ready().await;
    let auth = base64_std(b"puller:s3cret-pw");
    let config = format!(r#"{{"auths":{{"{registry}":{{"auth":"{auth}"}}}}}}"#);
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: regcred}}\ntype: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: {}\n",
        base64_std(config.as_bytes())
    );
    node.apply(&secret);
    let pod = |name: &str, secrets: &str| {
        render(
            &node,
            &format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  nodeName: ${{NODE}}\n  terminationGracePeriodSeconds: 1\n{secrets}  containers:\n  - name: c\n    image: {image}\n    imagePullPolicy: Always\n    command: [sleep, '3600']\n"
            ),
        )
    };
    // Without the secret the registry refuses the pull.
    node.apply(&pod("anonymous", ""));
    let p = node
        .wait_pod("anonymous", "ErrImagePull", Duration::from_secs(60), |p| {
            api_cstatus(p, "c")
                .and_then(|c| c["state"]["waiting"]["reason"].as_str())
                .is_some_and(|r| r == "ErrImagePull" || r == "ImagePullBackOff")
        })
        .await;
    let _ = p;
    node.apply(&pod("with-secret", "  imagePullSecrets: [{name: regcred}]\n"));
    node.wait_pod("with-secret", "Running with the private image", Duration::from_secs(60), |p| {
        api_cstatus(p, "c").is_some_and(|c| c["state"]["running"].is_object())
    })
    .await;
}

fn base64_std(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(b)
}

#[tokio::test]
async fn kubectl_exec_attach_and_port_forward_go_through_the_kubelet_api_and_pods_see_services() {
    let node = Node::start("streaming", 10274, &[]).await;
    node.wait_ready().await;
    node.apply(&render(
        &node,
        r#"
apiVersion: v1
kind: Service
metadata: {name: my-db}
spec:
  ports: [{port: 5432, name: pg}]
"#,
    ));
    node.apply(&render(
        &node,
        r#"
apiVersion: v1
kind: Pod
metadata: {name: streams}
spec:
  nodeName: ${NODE}
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: ${CRILET_IMAGE_WEB_V1}
    env:
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    volumeMounts:
    - {name: scratch, mountPath: /sub, subPathExpr: "logs/$(POD_NAME)"}
    - {name: scratch, mountPath: /vol}
  - name: reader
    image: ${CRILET_IMAGE_BUSYBOX}
    stdin: true
    command: ["sh", "-c", "while read line; do echo got-$line; done"]
  volumes:
  - {name: scratch, emptyDir: {}}
"#,
    ));
    node.wait_pod("streams", "both containers running", Duration::from_secs(60), |p| {
        ["web", "reader"].iter().all(|c| api_cstatus(p, c).is_some_and(|s| s["state"]["running"].is_object()))
    })
    .await;

    // exec: the command runs in the container (its own hostname and files), with stdin,
    // stdout, stderr and the exit code carried through.
    let (ok, out, err) = node.kubectl(&["exec", "streams", "-c", "web", "--", "cat", "/www/index.html"]);
    assert!(ok, "kubectl exec: {err}");
    assert_eq!(out.trim(), "v1");
    let (ok, out, err) = node.cluster.kubectl_in(
        &[
            "-n",
            &node.namespace,
            "exec",
            "-i",
            "streams",
            "-c",
            "web",
            "--",
            "sh",
            "-c",
            "tr a-z A-Z; echo oops >&2; exit 3",
        ],
        Some("hello\n"),
    );
    assert!(!ok, "exit 3 is a failure");
    assert_eq!(out.trim(), "HELLO");
    assert!(err.contains("oops") && err.contains("exit code 3"), "{err}");
    let (ok, _, err) = node.kubectl(&["exec", "streams", "-c", "nope", "--", "true"]);
    assert!(!ok && err.contains("nope"), "an unknown container is an error: {err}");

    // subPathExpr: the mount is the volume's `logs/<pod name>`, made on first use.
    let (ok, _, err) = node.kubectl(&["exec", "streams", "-c", "web", "--", "touch", "/sub/mark"]);
    assert!(ok, "{err}");
    let (ok, out, err) = node.kubectl(&["exec", "streams", "-c", "web", "--", "ls", "/vol/logs/streams"]);
    assert!(ok && out.trim() == "mark", "subPathExpr mount: {out} / {err}");

    // Service variables: the namespace's service (created before the pod) and the master one.
    let ip = node.kubectl(&["get", "service", "my-db", "-o", "jsonpath={.spec.clusterIP}"]).1;
    let (ok, env, err) = node.kubectl(&["exec", "streams", "-c", "web", "--", "env"]);
    assert!(ok, "{err}");
    for want in [
        format!("MY_DB_SERVICE_HOST={ip}"),
        "MY_DB_SERVICE_PORT=5432".to_string(),
        "MY_DB_SERVICE_PORT_PG=5432".to_string(),
        format!("MY_DB_PORT=tcp://{ip}:5432"),
        "KUBERNETES_SERVICE_HOST=10.0.0.1".to_string(),
        "KUBERNETES_SERVICE_PORT=443".to_string(),
    ] {
        assert!(env.lines().any(|l| l == want), "{want} in:\n{env}");
    }

    // attach: what the client writes reaches the container's stdin, and its stdout comes back.
    // The container's stdin stays open (no stdinOnce), so the session lasts until kubectl is
    // stopped. A line written before the stream is up may be consumed by nobody yet, so a line
    // goes every 500 ms until one comes back (or 60 s pass).
    let kubectl = node.cluster.get("CRILET_KUBECTL");
    let mut attach = std::process::Command::new(&kubectl)
        .args(["--kubeconfig", &node.cluster.get("CRILET_CLUSTER_KUBECONFIG")])
        .args(["--cache-dir", &node.cluster.get("CRILET_KUBECTL_CACHE_DIR")])
        .args(["-n", &node.namespace, "attach", "-i", "streams", "-c", "reader"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kubectl attach");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stdout = attach.stdout.take().expect("attach stdout");
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut stdin = attach.stdin.take().expect("attach stdin");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    let answered = loop {
        use std::io::Write;
        let _ = stdin.write_all(b"ping\n");
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(500)) {
            if line == "got-ping" {
                break true;
            }
            seen.push(line);
        }
        if std::time::Instant::now() > deadline {
            break false;
        }
    };
    let _ = attach.kill();
    let _ = attach.wait();
    assert!(answered, "attach: no answer to a line on stdin; saw {seen:?}");

    // port-forward: a local port of kubectl reaches the pod's port 8080.
    let mut pf = std::process::Command::new(&kubectl)
        .args(["--kubeconfig", &node.cluster.get("CRILET_CLUSTER_KUBECONFIG")])
        .args(["--cache-dir", &node.cluster.get("CRILET_KUBECTL_CACHE_DIR")])
        .args(["-n", &node.namespace, "port-forward", "--address", "127.0.0.1", "pod/streams", "18274:8080"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kubectl port-forward");
    let body = wait_for("a page through port-forward", Duration::from_secs(30), || async {
        let out = std::process::Command::new("curl")
            .args(["-fsS", "--noproxy", "*", "--max-time", "3", "http://127.0.0.1:18274/index.html"])
            .output()
            .ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).to_string())
    })
    .await;
    let _ = pf.kill();
    let _ = pf.wait();
    assert_eq!(body.trim(), "v1");
}

/// Ephemeral containers (`kubectl debug`): added through the pod's `ephemeralcontainers`
/// subresource, crilet starts each once in the running pod's sandbox (joining the target
/// container's processes with `--target`), reports it in `ephemeralContainerStatuses`, serves
/// exec and logs for it, and never restarts it; the pod's other containers are untouched.
#[tokio::test]
async fn ephemeral_containers_start_once_in_the_running_pod() {
    let node = Node::start("ephemeral", 10275, &[]).await;
    node.wait_ready().await;
    node.apply(&render(
        &node,
        r#"
apiVersion: v1
kind: Pod
metadata: {name: target}
spec:
  nodeName: ${NODE}
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sh, -c, 'trap "exit 0" TERM; sleep 100000 & wait']
"#,
    ));
    let before = node
        .wait_pod("target", "app running", Duration::from_secs(60), |p| {
            api_cstatus(p, "app").is_some_and(|s| s["state"]["running"].is_object())
        })
        .await;
    let image = node.agent.env.get("CRILET_IMAGE_BUSYBOX");
    let (ok, out, err) = node.kubectl(&[
        "debug",
        "target",
        "--image",
        &image,
        "--container",
        "debugger",
        "--target",
        "app",
        "--",
        "sh",
        "-c",
        "while true; do echo polo; sleep 1; done",
    ]);
    assert!(ok, "kubectl debug: {err}{out}");
    let ephemeral = |p: &Value, name: &str| {
        p["status"]["ephemeralContainerStatuses"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["name"] == name))
            .cloned()
    };
    let p = node
        .wait_pod("target", "the ephemeral container running", Duration::from_secs(60), |p| {
            ephemeral(p, "debugger").is_some_and(|s| s["state"]["running"].is_object())
        })
        .await;
    let st = ephemeral(&p, "debugger").expect("status");
    assert_eq!(st["ready"], false, "{st}");
    assert_eq!(st["restartCount"], 0, "{st}");
    assert_eq!(p["metadata"]["generation"], 2, "the subresource update bumps the generation");
    assert_eq!(
        api_cstatus(&p, "app").map(|s| s["containerID"].clone()),
        api_cstatus(&before, "app").map(|s| s["containerID"].clone())
    );
    // exec and logs reach it; with --target it sees the app's processes.
    let (ok, out, err) = node.kubectl(&["exec", "target", "-c", "debugger", "--", "echo", "marco"]);
    assert!(ok && out.contains("marco"), "exec: {out}{err}");
    let (ok, out, err) = node.kubectl(&["exec", "target", "-c", "debugger", "--", "ps"]);
    assert!(ok && out.contains("sleep 100000"), "the target's processes: {out}{err}");
    wait_for("the ephemeral container's log", Duration::from_secs(30), || async {
        let (ok, out, _) = node.kubectl(&["logs", "target", "-c", "debugger"]);
        (ok && out.contains("polo")).then_some(())
    })
    .await;
    // One that exits is not restarted.
    let (ok, out, err) = node.kubectl(&[
        "debug",
        "target",
        "--image",
        &image,
        "--container",
        "once",
        "--",
        "sh",
        "-c",
        "echo bye; exit 3",
    ]);
    assert!(ok, "kubectl debug: {err}{out}");
    let p = node
        .wait_pod("target", "the second one exited", Duration::from_secs(60), |p| {
            ephemeral(p, "once").is_some_and(|s| s["state"]["terminated"]["exitCode"] == 3)
        })
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let q = node.api_pod("target").expect("pod");
    let once = ephemeral(&q, "once").expect("status");
    assert_eq!(once["restartCount"], 0, "never restarted: {once}");
    assert_eq!(once["state"]["terminated"]["exitCode"], 3, "{once}");
    assert_eq!(q["status"]["phase"], "Running", "{}", p["status"]);
}

/// KEP-1287 for API pods: `kubectl patch --subresource resize` resizes the running container in
/// place (the cgroup read from its file, the same instance, restartCount 0), the node reports
/// the new `resources`/`allocatedResources`, and the resize conditions come and go; one that
/// never fits the node is Infeasible and changes nothing.
#[tokio::test]
async fn kubectl_resize_subresource_resizes_the_running_pod_in_place() {
    let node = Node::start("resize", 10276, &[]).await;
    node.wait_ready().await;
    node.apply(&render(
        &node,
        r#"
apiVersion: v1
kind: Pod
metadata: {name: rs}
spec:
  nodeName: ${NODE}
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sleep, "3600"]
    resources:
      requests: {cpu: 100m, memory: 32Mi}
      limits: {cpu: 200m, memory: 64Mi}
"#,
    ));
    let before = node
        .wait_pod("rs", "app running with its resources reported", Duration::from_secs(60), |p| {
            api_cstatus(p, "app")
                .is_some_and(|s| s["state"]["running"].is_object() && s["resources"].is_object())
        })
        .await;
    let uid = before["metadata"]["uid"].as_str().expect("uid").to_string();
    let id = api_cstatus(&before, "app").and_then(|s| s["containerID"].as_str()).expect("id").to_string();
    let cid = id.trim_start_matches("containerd://").to_string();
    let memory_file =
        format!("/sys/fs/cgroup/memory/kubepods/burstable/pod{uid}/{cid}/memory.limit_in_bytes");
    let quota_file = format!("/sys/fs/cgroup/cpu/kubepods/burstable/pod{uid}/{cid}/cpu.cfs_quota_us");
    let read = |f: &str| std::fs::read_to_string(f).ok().and_then(|s| s.trim().parse::<i64>().ok());
    assert_eq!(read(&memory_file), Some(64 << 20), "memory limit before");
    assert_eq!(read(&quota_file), Some(20_000), "cpu quota before");

    let patch = r#"{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"150m","memory":"32Mi"},"limits":{"cpu":"300m","memory":"96Mi"}}}]}}"#;
    let (ok, out, err) = node.kubectl(&["patch", "pod", "rs", "--subresource", "resize", "-p", patch]);
    assert!(ok, "kubectl patch --subresource resize: {out}{err}");
    let p = node
        .wait_pod("rs", "the resize applied and reported", Duration::from_secs(60), |p| {
            let s = api_cstatus(p, "app");
            let reported = s.is_some_and(|s| {
                s["resources"]["limits"]["memory"] == "96Mi"
                    && s["resources"]["limits"]["cpu"] == "300m"
                    && s["allocatedResources"]["cpu"] == "150m"
            });
            let conditions = p["status"]["conditions"].as_array().cloned().unwrap_or_default();
            reported
                && !conditions
                    .iter()
                    .any(|c| c["type"] == "PodResizeInProgress" || c["type"] == "PodResizePending")
        })
        .await;
    assert_eq!(read(&memory_file), Some(96 << 20), "memory limit after");
    assert_eq!(read(&quota_file), Some(30_000), "cpu quota after");
    let app = api_cstatus(&p, "app").expect("app");
    assert_eq!(app["containerID"], id.as_str(), "the same instance");
    assert_eq!(app["restartCount"], 0, "not restarted");
    let (_, events, _) =
        node.kubectl(&["get", "events", "--field-selector", "involvedObject.name=rs", "-o", "json"]);
    assert!(events.contains("ResizeStarted") && events.contains("ResizeCompleted"), "{events}");

    // A resize that does not fit beside another pod is Deferred (the API server only checks
    // the node's allocatable), and applied once that pod is gone.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    node.apply(&render(
        &node,
        &format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: big}}
spec:
  nodeName: ${{NODE}}
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sleep, "3600"]
    resources: {{requests: {{cpu: {}m}}}}
"#,
            cores * 1000 - 500
        ),
    ));
    node.wait_pod("big", "big running", Duration::from_secs(60), |p| phase(p) == "Running").await;
    let patch = r#"{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"1"},"limits":{"cpu":"1"}}}]}}"#;
    let (ok, out, err) = node.kubectl(&["patch", "pod", "rs", "--subresource", "resize", "-p", patch]);
    assert!(ok, "kubectl patch --subresource resize: {out}{err}");
    let p = node
        .wait_pod("rs", "PodResizePending Deferred", Duration::from_secs(60), |p| {
            p["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter().any(|c| c["type"] == "PodResizePending" && c["reason"] == "Deferred")
            })
        })
        .await;
    assert_eq!(read(&quota_file), Some(30_000), "cpu quota unchanged while deferred");
    assert_eq!(api_cstatus(&p, "app").map(|s| s["containerID"].clone()), Some(Value::from(id.as_str())));
    let (ok, out, err) = node.kubectl(&["delete", "pod", "big", "--wait=false"]);
    assert!(ok, "delete big: {out}{err}");
    node.wait_pod("rs", "the deferred resize applied", Duration::from_secs(60), |p| {
        let conditions = p["status"]["conditions"].as_array().cloned().unwrap_or_default();
        api_cstatus(p, "app").is_some_and(|s| s["resources"]["limits"]["cpu"] == "1")
            && !conditions
                .iter()
                .any(|c| c["type"] == "PodResizePending" || c["type"] == "PodResizeInProgress")
    })
    .await;
    assert_eq!(read(&quota_file), Some(100_000), "cpu quota after");
}

/// When the API server received each request of `user` from `since` on, from its audit log
/// (and its one backup): (time, resource, verb), in order, once per request.
fn audit_of(node: &Node, user: &str, since: jiff::Timestamp) -> Vec<(jiff::Timestamp, String, String)> {
    let log = std::path::PathBuf::from(node.cluster.get("CRILET_CLUSTER_AUDIT_LOG"));
    // The backup is the log's name with a timestamp before the extension.
    let stem = log.file_stem().expect("the audit log's name").to_string_lossy().into_owned();
    let files = std::fs::read_dir(log.parent().expect("the audit log's directory"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect::<Vec<_>>())
        .unwrap_or_default();
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for file in files.iter().filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&stem)))
    {
        for line in std::fs::read_to_string(file).unwrap_or_default().lines() {
            let Ok(ev) = serde_json::from_str::<Value>(line) else { continue };
            let at = ev["requestReceivedTimestamp"].as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok());
            let (Some(at), Some(id)) = (at, ev["auditID"].as_str()) else { continue };
            if ev["user"]["username"] != user || at < since || !seen.insert(id.to_string()) {
                continue;
            }
            let resource = ev["objectRef"]["resource"].as_str().unwrap_or("").to_string();
            out.push((at, resource, ev["verb"].as_str().unwrap_or("").to_string()));
        }
    }
    out.sort();
    out
}

/// The most requests that went in any stretch of `times` beyond what `qps` a second after a
/// bucket of `burst` allows (positive: the limit was broken).
fn most_over_limit(times: &[jiff::Timestamp], qps: f64, burst: f64) -> f64 {
    let mut worst = f64::MIN;
    for (i, a) in times.iter().enumerate() {
        for (j, b) in times.iter().enumerate().skip(i) {
            let secs = b.duration_since(*a).as_secs_f64();
            worst = worst.max((j - i + 1) as f64 - (burst + qps * secs));
        }
    }
    worst
}

#[tokio::test]
async fn api_requests_and_events_keep_to_their_rate_limits() {
    // 2 requests a second one at a time for pods, statuses and mirror pods; 1 Event a second.
    let node = Node::start(
        "throttle",
        10277,
        &["--kube-api-qps", "2", "--kube-api-burst", "1", "--event-qps", "1", "--event-burst", "1"],
    )
    .await;
    node.wait_ready().await;
    let since = jiff::Timestamp::now();
    // Four static pods at once: four mirror pods, their statuses and a dozen Events, which
    // without the limits reach the API server within a few milliseconds of each other.
    for i in 0..4 {
        node.agent.write_manifest(
            &format!("static-{i}.yaml"),
            &format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: static-{i}, namespace: {}}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: ${{CRILET_IMAGE_BUSYBOX}}\n    command: [sleep, '3600']\n",
                node.namespace
            ),
        );
    }
    for i in 0..4 {
        node.wait_pod(&format!("static-{i}"), "mirror pod Running", Duration::from_secs(90), |p| {
            phase(p) == "Running"
        })
        .await;
    }
    let events = |n: &Node| n.kubectl(&["get", "events", "-o", "name"]).1.lines().count();
    wait_for("the 12 Events (Pulled, Created, Started per pod)", Duration::from_secs(60), || async {
        (events(&node) >= 12).then_some(())
    })
    .await;

    let user = format!("system:node:{}", node.name);
    let requests = audit_of(&node, &user, since);
    let at = |pick: &dyn Fn(&str) -> bool| -> Vec<jiff::Timestamp> {
        requests.iter().filter(|(_, r, _)| pick(r)).map(|(t, _, _)| *t).collect()
    };
    // The Node's own requests are left out: its status and Lease (the heartbeat) are unlimited.
    let api = at(&|r| r != "events" && r != "nodes" && r != "leases");
    let sent_events = at(&|r| r == "events");
    assert!(api.len() >= 8, "mirror creates and status patches of 4 pods: only {} requests", api.len());
    assert!(sent_events.len() >= 12, "12 Events: the audit log shows {}", sent_events.len());
    // One request of slack: a request sent on time may reach the API server late, the next not.
    let over = most_over_limit(&api, 2.0, 1.0);
    assert!(over <= 1.0, "pod requests beyond 2/s (burst 1) by {over}: {requests:#?}");
    let over = most_over_limit(&sent_events, 1.0, 1.0);
    assert!(over <= 1.0, "Events beyond 1/s (burst 1) by {over}: {requests:#?}");
}

const IMAGE_PATCHED: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: patched
  labels: {test-pod-static: "true"}
spec:
  nodeName: ${NODE}
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: ${CRILET_IMAGE_WEB_V1}
"#;

/// Upstream's "Pods should run through the lifecycle of Pods and PodStatus" patches a running
/// pod's image and label, then reads its status at once expecting Ready and ContainersReady
/// both True. A pod without readiness gates gets the kubelet's readiness: Ready is
/// ContainersReady, the old container counting as ready until it stops, through the whole
/// in-place restart (crilet once wrote Ready=False beside ContainersReady=True at once, its own
/// `InPlaceUpdateReady` condition holding it, which no kubelet does for such a pod).
#[tokio::test]
async fn an_api_pods_image_patch_keeps_the_kubelets_readiness() {
    use std::io::BufRead;
    let node = Node::start("image_patch", 10300, &[]).await;
    node.wait_ready().await;
    node.apply(&render(&node, IMAGE_PATCHED));
    node.wait_pod("patched", "Running and Ready", Duration::from_secs(90), |p| {
        phase(p) == "Running" && api_condition(p, "Ready") == Some("True")
    })
    .await;

    // Every status the API holds from here on, one line each: Ready, ContainersReady, whether an
    // InPlaceUpdateReady condition is there, the container's image ID.
    let template = r#"{.metadata.resourceVersion} {.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="ContainersReady")].status} [{.status.conditions[?(@.type=="InPlaceUpdateReady")].status}] {.status.containerStatuses[0].imageID}{"\n"}"#;
    let mut watch = std::process::Command::new(node.cluster.get("CRILET_KUBECTL"))
        .arg("--kubeconfig")
        .arg(node.cluster.get("CRILET_CLUSTER_KUBECONFIG"))
        .args(["-n", &node.namespace, "get", "pod", "patched", "--watch", "-o"])
        .arg(format!("jsonpath={template}"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kubectl get --watch");
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let out = watch.stdout.take().expect("watch stdout");
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    wait_for("the watch's first line", Duration::from_secs(30), || async {
        (!lines.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    let v1_id = lines.lock().unwrap()[0].rsplit(' ').next().unwrap_or_default().to_string();

    let patch = serde_json::json!({
        "metadata": {"labels": {"test-pod": "patched"}},
        "spec": {"containers": [{"name": "app", "image": node.agent.env.get("CRILET_IMAGE_WEB_V2")}]},
    })
    .to_string();
    let (ok, _, err) = node.kubectl(&["patch", "pod", "patched", "--type", "strategic", "-p", &patch]);
    assert!(ok, "kubectl patch: {err}");
    let settled = wait_for("the new image running and Ready", Duration::from_secs(60), || async {
        let seen = lines.lock().unwrap().clone();
        seen.iter()
            .any(|l| l.contains(" True True ") && !l.ends_with(' ') && !l.ends_with(&v1_id))
            .then_some(seen)
    })
    .await;
    let _ = watch.kill();
    let _ = watch.wait();
    for line in &settled {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.get(1), f.get(2), "Ready differs from ContainersReady in {line:?}: {settled:#?}");
        assert_eq!(
            f.get(3),
            Some(&"[]"),
            "an InPlaceUpdateReady condition on a pod without the gate: {settled:#?}"
        );
    }
    let restarts =
        node.api_pod("patched").and_then(|p| api_cstatus(&p, "app").map(|c| c["restartCount"].clone()));
    assert_eq!(restarts, Some(Value::from(1)), "restarted once, in place");
}
