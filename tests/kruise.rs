//! OpenKruise v1.8.2 on a crilet node: the real kruise-manager and kruise-daemon of
//! `hack/kruise.sh` on the real control plane of `hack/cluster.sh`, and a crilet node on
//! containerd. Each test joins a node of its own and starts a kruise-daemon for it
//! (`hack/kruise.sh daemon NODE`); Kruise's controllers decide, crilet runs what they decide.
//! Everything is observed through the API (watches, kubectl as the admin), CRI and HTTP to pod
//! IPs; every wait has a deadline.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::cluster::{Node, api_condition};
use common::traffic::{http_get, start_client};
use common::wait_for;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;
use serde_json::{Value, json};

const STATE: &str = "apps.kruise.io/inplace-update-state";
const GRACE: &str = "apps.kruise.io/inplace-update-grace";

fn kruise_sh() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("hack/kruise.sh")
}

/// A crilet node with a kruise-daemon of its own (stopped on drop, before the node goes).
struct KruiseNode {
    node: Node,
    client: kube::Client,
}

impl KruiseNode {
    async fn start(test: &str, port: u16) -> KruiseNode {
        let status =
            Command::new("bash").arg(kruise_sh()).arg("status").output().expect("hack/kruise.sh status");
        assert!(
            status.status.success(),
            "kruise-manager does not run: run `hack/kruise.sh` after `hack/cluster.sh` (or the suite with hack/test.sh)\n{}",
            String::from_utf8_lossy(&status.stdout)
        );
        let node = Node::start(test, port, &[]).await;
        let out = Command::new("bash")
            .arg(kruise_sh())
            .args(["daemon", &node.name])
            .output()
            .expect("hack/kruise.sh daemon");
        assert!(
            out.status.success(),
            "hack/kruise.sh daemon {}: {}",
            node.name,
            String::from_utf8_lossy(&out.stderr)
        );
        node.wait_ready().await;
        let kubeconfig = node.cluster.get("CRILET_CLUSTER_KUBECONFIG");
        let client =
            crilet::cluster::connect::client(std::path::Path::new(&kubeconfig)).await.expect("client");
        KruiseNode { node, client }
    }

    fn render(&self, yaml: &str) -> String {
        self.node
            .agent
            .env
            .render(yaml)
            .replace("${NODE}", &self.node.name)
            .replace("${NS}", &self.node.namespace)
    }

    fn apply(&self, yaml: &str) {
        self.node.apply(&self.render(yaml));
    }

    fn kubectl_ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.node.kubectl(args);
        assert!(ok, "kubectl {args:?}: {err}{out}\nagent log:\n{}", tail(&self.node.agent.log(), 60));
        out
    }

    fn get(&self, args: &[&str]) -> Option<Value> {
        let mut a = vec!["-n", self.node.namespace.as_str()];
        a.extend_from_slice(args);
        self.node.cluster.get_json(&a)
    }

    /// The pods of the test's namespace with label `selector`, by name.
    fn pods(&self, selector: &str) -> BTreeMap<String, Value> {
        let list = self.get(&["pods", "-l", selector]).unwrap_or_default();
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| (p["metadata"]["name"].as_str().unwrap_or("").to_string(), p.clone()))
            .collect()
    }

    /// Waits until exactly `n` pods with `selector` exist, none terminating, all Running and Ready.
    async fn ready_pods(&self, selector: &str, n: usize, limit: Duration) -> BTreeMap<String, Value> {
        wait_for(&format!("{n} ready pods {selector}"), limit, || async {
            let pods = self.pods(selector);
            let ok = pods.len() == n
                && pods.values().all(|p| {
                    p["metadata"]["deletionTimestamp"].is_null()
                        && p["status"]["phase"] == "Running"
                        && api_condition(p, "Ready") == Some("True")
                });
            ok.then_some(pods)
        })
        .await
    }

    /// The sandbox ID crilet runs pod `uid` in.
    async fn sandbox_of(&self, uid: &str) -> String {
        let observed = self.node.agent.env.cri().observe(uid).await.expect("observe");
        observed.sandbox().map(|s| s.id.clone()).expect("a sandbox")
    }
}

impl Drop for KruiseNode {
    fn drop(&mut self) {
        let _ = Command::new("bash").arg(kruise_sh()).args(["daemon-stop", &self.node.name]).output();
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn cstatus<'a>(p: &'a Value, name: &str) -> &'a Value {
    p["status"]["containerStatuses"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

fn restarts(p: &Value, name: &str) -> i64 {
    cstatus(p, name)["restartCount"].as_i64().unwrap_or(-1)
}

fn cid(p: &Value, name: &str) -> String {
    cstatus(p, name)["containerID"].as_str().unwrap_or("").to_string()
}

fn uid(p: &Value) -> String {
    p["metadata"]["uid"].as_str().unwrap_or("").to_string()
}

fn ip(p: &Value) -> String {
    p["status"]["podIP"].as_str().unwrap_or("").to_string()
}

fn spec_image(p: &Value, name: &str) -> String {
    p["spec"]["containers"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .and_then(|c| c["image"].as_str())
        .unwrap_or("")
        .to_string()
}

/// Every version of the pods with `selector` that the API showed, in order (a watch misses no
/// resourceVersion that it delivers; what it delivers is every write while it runs).
fn record_pods(
    client: kube::Client,
    namespace: &str,
    selector: &str,
    stop: tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<Vec<(Instant, Pod)>> {
    let pods: Api<Pod> = Api::namespaced(client, namespace);
    let cfg = watcher::Config::default().labels(selector);
    tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut stream = watcher::watcher(pods, cfg).boxed();
        loop {
            let ev = tokio::select! {
                _ = stop.cancelled() => return seen,
                ev = stream.next() => ev,
            };
            match ev {
                Some(Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p))) => {
                    seen.push((Instant::now(), p));
                }
                Some(Ok(watcher::Event::Delete(mut p))) => {
                    // Marked so the replay drops it.
                    p.metadata
                        .labels
                        .get_or_insert_with(Default::default)
                        .insert("x-deleted".into(), "1".into());
                    seen.push((Instant::now(), p));
                }
                Some(_) => {}
                None => return seen,
            }
        }
    })
}

fn pod_condition<'a>(p: &'a Pod, t: &str) -> Option<&'a str> {
    p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == t).map(|c| c.status.as_str())
}

/// Replays recorded pod versions: the fewest pods that were Ready (and not being deleted) at
/// any moment after `from` pods had been ready at once.
fn min_ready(history: &[Pod], from: usize) -> usize {
    let mut state: BTreeMap<String, bool> = BTreeMap::new();
    let mut armed = false;
    let mut min = usize::MAX;
    for p in history {
        let name = p.metadata.name.clone().unwrap_or_default();
        let deleted = p.metadata.labels.as_ref().is_some_and(|l| l.contains_key("x-deleted"));
        if deleted {
            state.remove(&name);
        } else {
            let ready = p.metadata.deletion_timestamp.is_none() && pod_condition(p, "Ready") == Some("True");
            state.insert(name, ready);
        }
        let n = state.values().filter(|r| **r).count();
        if n >= from {
            armed = true;
        }
        if armed {
            min = min.min(n);
        }
    }
    min
}

fn cloneset(name: &str, replicas: u32, extra_strategy: &str) -> String {
    format!(
        r#"
apiVersion: apps.kruise.io/v1alpha1
kind: CloneSet
metadata:
  name: {name}
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      nodeSelector: {{crilet.io/test: ${{NODE}}}}
      terminationGracePeriodSeconds: 10
      containers:
      - name: web
        image: ${{CRILET_IMAGE_WEB_V1}}
        ports: [{{containerPort: 8080}}]
        readinessProbe:
          httpGet: {{path: /healthz, port: 8080}}
          periodSeconds: 1
        volumeMounts: [{{name: data, mountPath: /www/data}}]
      - name: keeper
        image: ${{CRILET_IMAGE_BUSYBOX}}
        command: [sh, -c, "[ -f /data/marker ] || cat /proc/sys/kernel/random/uuid > /data/marker; trap 'exit 0' TERM; sleep 100000 & wait"]
        volumeMounts: [{{name: data, mountPath: /data}}]
      volumes: [{{name: data, emptyDir: {{}}}}]
  updateStrategy:
    type: InPlaceIfPossible
{extra_strategy}"#
    )
}

const SERVICE: &str = r#"
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
"#;

/// §2: a CloneSet of 3 moves from web:v1 to web:v2 in place. Every pod keeps its UID, IP,
/// sandbox and emptyDir; only the web container restarts (once); Kruise's InPlaceUpdateReady
/// False holds the pod out of the endpoints while crilet updates it (crilet's status writes
/// keep it); Kruise's completion check passes; a client following the EndpointSlice sees no
/// failed request.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cloneset_in_place_rollout_keeps_pods_and_fails_no_request() {
    let k = KruiseNode::start("kruise_rollout", 10281).await;
    let env = &k.node.agent.env;
    let (v1_digest, v2_digest) =
        (env.get("CRILET_IMAGE_WEB_V1_DIGEST"), env.get("CRILET_IMAGE_WEB_V2_DIGEST"));
    k.apply(SERVICE);
    k.apply(&cloneset(
        "web",
        3,
        "    maxUnavailable: 1\n    inPlaceUpdateStrategy: {gracePeriodSeconds: 5}\n",
    ));
    let before = k.ready_pods("app=web", 3, Duration::from_secs(120)).await;
    // Kruise's webhook gave the pods its readiness gates.
    for p in before.values() {
        let gates: Vec<&str> = p["spec"]["readinessGates"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|g| g["conditionType"].as_str())
            .collect();
        assert!(gates.contains(&"InPlaceUpdateReady"), "readiness gates: {gates:?}");
    }
    let mut facts = BTreeMap::new();
    for (name, p) in &before {
        assert!(
            cstatus(p, "web")["imageID"].as_str().unwrap_or("").ends_with(&v1_digest),
            "{}",
            cstatus(p, "web")
        );
        let addr = format!("{}:8080", ip(p));
        let marker = http_get(&addr, "/data/marker").await.expect("the emptyDir marker");
        assert_eq!(http_get(&addr, "/").await.as_deref(), Ok("v1"));
        facts.insert(name.clone(), (uid(p), ip(p), k.sandbox_of(&uid(p)).await, marker, cid(p, "keeper")));
    }
    // Every endpoint must be ready before the client counts anything.
    wait_for("3 ready endpoints", Duration::from_secs(60), || async {
        let s = k.get(&["endpointslices", "-l", "kubernetes.io/service-name=web"])?;
        let n = s["items"]
            .as_array()?
            .iter()
            .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
            .filter(|e| e["conditions"]["ready"] == true)
            .count();
        (n == 3).then_some(())
    })
    .await;

    let stop = tokio_util::sync::CancellationToken::new();
    let recorder = record_pods(k.client.clone(), &k.node.namespace, "app=web", stop.clone());
    let traffic = start_client(k.client.clone(), &k.node.namespace, "web", 8080, stop.clone());
    // Some traffic before the patch, so the client demonstrably runs.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // v1 -> v2, then back to v1: the second update starts from a pod that has finished one
    // (crilet's record of its own finished update must not hide Kruise's next False).
    let rollouts = [
        (env.get("CRILET_IMAGE_WEB_V2"), v2_digest.clone(), "v2", 1),
        (env.get("CRILET_IMAGE_WEB_V1"), v1_digest.clone(), "v1", 2),
    ];
    let mut times = Vec::new();
    for (image, digest, body, restart_count) in &rollouts {
        let t0 = Instant::now();
        let patch =
            json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": image}]);
        k.kubectl_ok(&["patch", "cloneset", "web", "--type", "json", "-p", &patch.to_string()]);
        let cs =
            wait_for(&format!("updatedReadyReplicas = 3 on {body}"), Duration::from_secs(180), || async {
                let cs = k.get(&["cloneset", "web"])?;
                let s = &cs["status"];
                (s["observedGeneration"] == cs["metadata"]["generation"]
                    && s["updatedReplicas"] == 3
                    && s["updatedReadyReplicas"] == 3
                    && s["readyReplicas"] == 3)
                    .then_some(cs)
            })
            .await;
        times.push((*body, t0, t0.elapsed()));
        let after = k.ready_pods("app=web", 3, Duration::from_secs(30)).await;
        assert_eq!(after.keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>(), "the same pods");
        let revision = cs["status"]["updateRevision"].as_str().unwrap_or("").to_string();
        for (name, p) in &after {
            let (u, addr, sandbox, marker, keeper) = &facts[name];
            assert_eq!(&uid(p), u, "{name}: UID kept");
            assert_eq!(&ip(p), addr, "{name}: pod IP kept");
            assert_eq!(&k.sandbox_of(u).await, sandbox, "{name}: sandbox kept");
            assert_eq!(&spec_image(p, "web"), image);
            assert!(
                cstatus(p, "web")["imageID"].as_str().unwrap_or("").ends_with(digest.as_str()),
                "{}",
                cstatus(p, "web")
            );
            assert_eq!(restarts(p, "web"), *restart_count, "{name}: web restarted in place, once per update");
            assert_eq!(restarts(p, "keeper"), 0, "{name}: keeper untouched");
            assert_eq!(&cid(p, "keeper"), keeper, "{name}: keeper is the same container");
            let http = format!("{addr}:8080");
            assert_eq!(http_get(&http, "/").await.as_deref(), Ok(*body), "{name} serves {body}");
            assert_eq!(
                http_get(&http, "/data/marker").await.as_ref(),
                Ok(marker),
                "{name}: emptyDir content kept"
            );
            // Kruise's state annotation: this revision, no batch left; the grace annotation gone.
            let annotations = &p["metadata"]["annotations"];
            let state: Value =
                serde_json::from_str(annotations[STATE].as_str().unwrap_or("null")).unwrap_or_default();
            assert_eq!(state["revision"].as_str(), Some(revision.as_str()), "{name}: {state}");
            assert!(state["nextContainerImages"].as_object().is_none_or(|m| m.is_empty()), "{name}: {state}");
            assert!(annotations[GRACE].is_null(), "{name}: grace annotation left: {annotations}");
            assert_eq!(api_condition(p, "InPlaceUpdateReady"), Some("True"), "{name}");
        }
    }
    // A template label only: Kruise updates the pods' metadata in place (InPlaceUpdateReady
    // False, then True once its check passes; no container restarts). The pods had finished an
    // image update of crilet's: that record must not keep Ready at True under Kruise's False
    // (Kruise writes Ready=False itself then, and only the node may set it back to True).
    let t0 = Instant::now();
    let patch = json!({"spec": {"template": {"metadata": {"labels": {"tier": "front"}}}}});
    k.kubectl_ok(&["patch", "cloneset", "web", "--type", "merge", "-p", &patch.to_string()]);
    wait_for("updatedReadyReplicas = 3 after a label edit", Duration::from_secs(120), || async {
        let cs = k.get(&["cloneset", "web"])?;
        let s = &cs["status"];
        (s["observedGeneration"] == cs["metadata"]["generation"]
            && s["updatedReplicas"] == 3
            && s["updatedReadyReplicas"] == 3
            && s["readyReplicas"] == 3)
            .then_some(())
    })
    .await;
    times.push(("label", t0, t0.elapsed()));
    let after = k.ready_pods("app=web", 3, Duration::from_secs(30)).await;
    for (name, p) in &after {
        assert_eq!(uid(p), facts[name].0, "{name}: UID kept");
        assert_eq!(p["metadata"]["labels"]["tier"], "front", "{name}");
        assert_eq!(
            (restarts(p, "web"), restarts(p, "keeper")),
            (2, 0),
            "{name}: a label edit restarts nothing"
        );
    }
    // The client keeps going a moment past the rollout (the last pod back in the endpoints).
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.cancel();
    let traffic = traffic.await.expect("client");
    let history = recorder.await.expect("recorder");
    let total = traffic.ok + traffic.failed.len() as u64;
    for (body, _, took) in &times {
        println!(
            "rollout to {body} of 3 pods: {:.1} s from the patch to updatedReadyReplicas=3",
            took.as_secs_f64()
        );
    }
    println!("requests {total}, failed {}, bodies {:?}", traffic.failed.len(), traffic.bodies);

    // crilet kept Kruise's InPlaceUpdateReady=False while it wrote the new status: in each
    // rollout, for every pod, the API showed a version with the new image running (crilet's
    // write) with the condition still False and the pod not Ready.
    for ((_, digest, body, _), (_, t0, _)) in rollouts.iter().zip(&times[..2]) {
        for (name, (u, ..)) in &facts {
            let held = history.iter().filter(|(t, _)| t >= t0).any(|(_, p)| {
                p.metadata.uid.as_deref() == Some(u.as_str())
                    && pod_condition(p, "InPlaceUpdateReady") == Some("False")
                    && pod_condition(p, "Ready") == Some("False")
                    && p.status.as_ref().and_then(|s| s.container_statuses.as_ref()).is_some_and(|cs| {
                        cs.iter().any(|c| {
                            c.name == "web"
                                && c.image_id.ends_with(digest.as_str())
                                && c.state.as_ref().is_some_and(|s| s.running.is_some())
                        })
                    })
            });
            assert!(held, "{name}: no API version with web {body} running under InPlaceUpdateReady=False");
        }
    }
    // And once Kruise set it False, no version showed the pod Ready before Kruise's True.
    for (name, (u, ..)) in &facts {
        let mut gate_false = false;
        for (_, p) in history.iter().filter(|(_, p)| p.metadata.uid.as_deref() == Some(u.as_str())) {
            match pod_condition(p, "InPlaceUpdateReady") {
                Some("False") => gate_false = true,
                Some("True") => gate_false = false,
                _ => {}
            }
            assert!(
                !(gate_false && pod_condition(p, "Ready") == Some("True")),
                "{name}: Ready=True while InPlaceUpdateReady=False (resourceVersion {:?})",
                p.metadata.resource_version
            );
        }
    }
    let pods: Vec<Pod> = history.iter().map(|(_, p)| p.clone()).collect();
    assert!(min_ready(&pods, 3) >= 2, "maxUnavailable 1: at least 2 of 3 pods ready throughout");
    assert!(traffic.ok > 100, "the client ran: {} requests answered", traffic.ok);
    assert!(traffic.bodies.contains_key("v1") && traffic.bodies.contains_key("v2"), "{:?}", traffic.bodies);
    assert!(
        traffic.failed.is_empty(),
        "{} of {total} requests failed: {:?}",
        traffic.failed.len(),
        &traffic.failed[..traffic.failed.len().min(10)]
    );
}

/// `partition` keeps that many pods at the old revision; `maxUnavailable` bounds how many are
/// out of service at once; an edit Kruise cannot do in place (env) recreates the pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cloneset_partition_max_unavailable_and_recreate() {
    let k = KruiseNode::start("kruise_partition", 10282).await;
    let env = &k.node.agent.env;
    k.apply(&cloneset(
        "web",
        4,
        "    partition: 2\n    maxUnavailable: 1\n    inPlaceUpdateStrategy: {gracePeriodSeconds: 1}\n",
    ));
    let before = k.ready_pods("app=web", 4, Duration::from_secs(150)).await;
    let uids: BTreeSet<String> = before.values().map(uid).collect();
    let stop = tokio_util::sync::CancellationToken::new();
    let recorder = record_pods(k.client.clone(), &k.node.namespace, "app=web", stop.clone());

    let patch = json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": env.get("CRILET_IMAGE_WEB_V2")}]);
    k.kubectl_ok(&["patch", "cloneset", "web", "--type", "json", "-p", &patch.to_string()]);
    wait_for("2 updated ready replicas (partition 2)", Duration::from_secs(150), || async {
        let cs = k.get(&["cloneset", "web"])?;
        let s = &cs["status"];
        (s["observedGeneration"] == cs["metadata"]["generation"]
            && s["updatedReplicas"] == 2
            && s["updatedReadyReplicas"] == 2
            && s["readyReplicas"] == 4)
            .then_some(())
    })
    .await;
    let mid = k.ready_pods("app=web", 4, Duration::from_secs(30)).await;
    let v2: Vec<&Value> =
        mid.values().filter(|p| spec_image(p, "web") == env.get("CRILET_IMAGE_WEB_V2")).collect();
    assert_eq!(v2.len(), 2, "partition 2: two of four pods updated");
    assert_eq!(mid.values().map(uid).collect::<BTreeSet<_>>(), uids, "in place: the same pods");
    for p in &v2 {
        assert_eq!(restarts(p, "web"), 1);
        assert_eq!(http_get(&format!("{}:8080", ip(p)), "/").await.as_deref(), Ok("v2"));
    }

    // env is not in place: Kruise recreates every pod (partition 0 now), one at a time.
    let patch = json!([
        {"op": "add", "path": "/spec/template/spec/containers/0/env", "value": [{"name": "FLAVOUR", "value": "recreated"}]},
        {"op": "replace", "path": "/spec/updateStrategy/partition", "value": 0},
    ]);
    k.kubectl_ok(&["patch", "cloneset", "web", "--type", "json", "-p", &patch.to_string()]);
    wait_for("4 updated ready replicas after the env edit", Duration::from_secs(240), || async {
        let cs = k.get(&["cloneset", "web"])?;
        let s = &cs["status"];
        (s["observedGeneration"] == cs["metadata"]["generation"]
            && s["updatedReplicas"] == 4
            && s["updatedReadyReplicas"] == 4
            && s["replicas"] == 4)
            .then_some(())
    })
    .await;
    let after = k.ready_pods("app=web", 4, Duration::from_secs(60)).await;
    stop.cancel();
    let history = recorder.await.expect("recorder");
    for (name, p) in &after {
        assert!(!uids.contains(&uid(p)), "{name}: an env edit recreates the pod (new UID)");
        let envs = &p["spec"]["containers"][0]["env"];
        assert!(
            envs.as_array().is_some_and(|e| e.iter().any(|v| v["value"] == "recreated")),
            "{name}: {envs}"
        );
        assert_eq!(restarts(p, "web"), 0, "{name}: a new pod");
    }
    let pods: Vec<Pod> = history.into_iter().map(|(_, p)| p).collect();
    let least = min_ready(&pods, 4);
    println!("fewest ready pods during both rollouts: {least} of 4");
    assert!(least >= 3, "maxUnavailable 1: at least 3 of 4 pods ready throughout, saw {least}");
}

/// A ContainerRecreateRequest: kruise-daemon stops the named container; crilet restarts it as
/// a normal exit (restartCount +1, exit 0, no back-off), in the same sandbox, the other
/// container untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn container_recreate_request_restarts_the_container() {
    let k = KruiseNode::start("kruise_crr", 10283).await;
    k.apply(&cloneset("web", 1, ""));
    let before = k.ready_pods("app=web", 1, Duration::from_secs(120)).await;
    let (name, p) = before.iter().next().map(|(n, p)| (n.clone(), p.clone())).unwrap();
    let sandbox = k.sandbox_of(&uid(&p)).await;
    // Kruise's webhook fills the CRR's statusContext (the container to recreate) from its cache
    // of the pod, and kruise-daemon takes a container ID other than that one as "already
    // recreated" and completes the CRR without touching anything. So the CRR goes in only once
    // Kruise has seen the running web container: kruise-daemon has reported it on the pod.
    let old_web = cid(&p, "web");
    wait_for("kruise-daemon to report the running web container", Duration::from_secs(60), || async {
        let pods = k.pods("app=web");
        let meta = pods.get(&name)?["metadata"]["annotations"]["apps.kruise.io/runtime-containers-meta"]
            .as_str()
            .map(str::to_string)?;
        meta.contains(&old_web).then_some(())
    })
    .await;
    k.apply(&format!(
        r#"
apiVersion: apps.kruise.io/v1alpha1
kind: ContainerRecreateRequest
metadata:
  name: recreate-web
spec:
  podName: {name}
  containers: [{{name: web}}]
  strategy: {{failurePolicy: Fail, minStartedSeconds: 1}}
  ttlSecondsAfterFinished: 300
"#
    ));
    let t0 = Instant::now();
    let crr = wait_for("the CRR to complete", Duration::from_secs(90), || async {
        let c = k.get(&["containerrecreaterequest", "recreate-web"])?;
        matches!(c["status"]["phase"].as_str(), Some("Completed" | "Failed")).then_some(c)
    })
    .await;
    assert_eq!(crr["status"]["phase"], "Completed", "{}", crr["status"]);
    assert_eq!(crr["status"]["containerRecreateStates"][0]["phase"], "Succeeded", "{}", crr["status"]);
    println!("CRR completed in {:.1} s", t0.elapsed().as_secs_f64());
    // The CRR completes on what kruise-daemon reads from CRI; the pod's status in the API
    // follows on crilet's next write, so wait for it to show the new container.
    let recreated = async {
        loop {
            let pods = k.pods("app=web");
            if let Some(q) = pods.get(&name) {
                if cid(q, "web") != old_web && api_condition(q, "Ready") == Some("True") {
                    return q.clone();
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let Ok(q) = tokio::time::timeout(Duration::from_secs(30), recreated).await else {
        panic!(
            "timed out after 30s waiting for the pod's status to show web recreated and Ready \
             (was {old_web})\nCRR: {}\npod status: {}",
            crr["spec"],
            k.pods("app=web").get(&name).map(|q| q["status"].to_string()).unwrap_or_default()
        );
    };
    let q = &q;
    assert_eq!(uid(q), uid(&p));
    assert_eq!(k.sandbox_of(&uid(q)).await, sandbox, "same sandbox");
    assert_ne!(cid(q, "web"), cid(&p, "web"), "web recreated");
    assert_eq!(restarts(q, "web"), 1, "{}", cstatus(q, "web"));
    let last = &cstatus(q, "web")["lastState"]["terminated"];
    assert_eq!(
        (last["exitCode"].as_i64(), last["reason"].as_str()),
        (Some(0), Some("Completed")),
        "a normal exit: {last}"
    );
    assert_eq!(cid(q, "keeper"), cid(&p, "keeper"), "keeper untouched");
    assert_eq!(restarts(q, "keeper"), 0);
    // Restarted at once, as after any first exit (no crash back-off in between).
    let finished = last["finishedAt"].as_str().unwrap_or("");
    let started = cstatus(q, "web")["state"]["running"]["startedAt"].as_str().unwrap_or("");
    let gap = started
        .parse::<jiff::Timestamp>()
        .unwrap()
        .duration_since(finished.parse::<jiff::Timestamp>().unwrap());
    assert!(gap.as_secs_f64() < 3.0, "restarted {gap:?} after the exit");

    // Another writer sets the node's Ready condition False (as Kruise does when it closes its
    // gate, or the node lifecycle controller for an unreachable node): the node puts its own
    // status back, as the kubelet's status manager does on its next reconcile (10 s).
    let patch =
        json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "SomeoneElse"}]}});
    let t0 = Instant::now();
    k.kubectl_ok(&[
        "patch",
        "pod",
        &name,
        "--subresource",
        "status",
        "--type",
        "strategic",
        "-p",
        &patch.to_string(),
    ]);
    k.node
        .wait_pod(&name, "Ready=True again", Duration::from_secs(30), |p| {
            api_condition(p, "Ready") == Some("True")
        })
        .await;
    println!("a foreign Ready=False was put back after {:.1} s", t0.elapsed().as_secs_f64());
}

/// An ImagePullJob makes kruise-daemon pull an image onto the crilet node (over CRI, the
/// node's containerd), and reports it in the node's NodeImage.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn image_pull_job_prepulls_on_the_node() {
    let k = KruiseNode::start("kruise_pull", 10284).await;
    let env = &k.node.agent.env;
    // An image nobody has pulled: a copy of busybox under a name of this test's own.
    let image = format!("{}/kruise-prepull:crilet", env.get("CRILET_REGISTRY"));
    let out = Command::new("skopeo")
        .args(["copy", "--src-tls-verify=false", "--dest-tls-verify=false"])
        .arg(format!("docker://{}", env.get("CRILET_IMAGE_BUSYBOX")))
        .arg(format!("docker://{image}"))
        .output()
        .expect("skopeo");
    assert!(out.status.success(), "skopeo copy: {}", String::from_utf8_lossy(&out.stderr));
    let ctr = |args: &[&str]| {
        Command::new(format!("{}/ctr", env.get("CRILET_CONTAINERD_BIN_DIR")))
            .args(["--address", &env.get("CRILET_CONTAINERD_SOCKET"), "-n", "k8s.io"])
            .args(args)
            .output()
            .expect("ctr")
    };
    let _ = ctr(&["images", "rm", &image]);
    let cri = env.cri();
    assert!(cri.image_id(&image).await.expect("ImageStatus").is_none(), "{image} must be absent first");
    // kruise-manager keeps one NodeImage per Node, labelled as the Node: the job selects nodes
    // through it, so it must be there first (or the job would find no node and finish at once).
    wait_for("the node's NodeImage with the node's labels", Duration::from_secs(60), || async {
        let ni = k.node.cluster.get_json(&["nodeimage", &k.node.name])?;
        (ni["metadata"]["labels"]["crilet.io/test"] == k.node.name.as_str()).then_some(())
    })
    .await;
    k.apply(&format!(
        r#"
apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata:
  name: prepull
spec:
  image: {image}
  selector:
    matchLabels: {{crilet.io/test: ${{NODE}}}}
  parallelism: 1
  pullPolicy: {{backoffLimit: 2, timeoutSeconds: 60}}
  completionPolicy: {{type: Always, activeDeadlineSeconds: 180}}
"#
    ));
    let job = wait_for("the ImagePullJob to finish", Duration::from_secs(150), || async {
        let j = k.get(&["imagepulljob", "prepull"])?;
        j["status"]["completionTime"].is_string().then_some(j)
    })
    .await;
    assert_eq!(
        (job["status"]["desired"].as_i64(), job["status"]["succeeded"].as_i64()),
        (Some(1), Some(1)),
        "{}",
        job["status"]
    );
    let pulled = cri.image_id(&image).await.expect("ImageStatus");
    assert!(pulled.is_some(), "{image} is in the node's containerd");
    let ni = k.node.cluster.get_json(&["nodeimage", &k.node.name]).expect("the node's NodeImage");
    let tags = &ni["status"]["imageStatuses"]["localhost:5099/kruise-prepull"]["tags"];
    assert!(
        tags.as_array().is_some_and(|t| t.iter().any(|t| t["tag"] == "crilet" && t["phase"] == "Succeeded")),
        "NodeImage status: {}",
        ni["status"]
    );
    let _ = ctr(&["images", "rm", &image]);
}

/// A SidecarSet injects its sidecar into new pods; a change of the sidecar's image is upgraded
/// in place: the sidecar restarts with the new image, the app container keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sidecarset_injects_and_upgrades_in_place() {
    let k = KruiseNode::start("kruise_sidecar", 10285).await;
    let env = &k.node.agent.env;
    let set = format!("crilet-{}", k.node.namespace);
    let sidecarset = |image: &str| {
        format!(
            r#"
apiVersion: apps.kruise.io/v1alpha1
kind: SidecarSet
metadata:
  name: {set}
spec:
  namespace: ${{NS}}
  selector:
    matchLabels: {{app: web}}
  containers:
  - name: sidecar
    image: {image}
    command: [sh, -c, "trap 'exit 0' TERM; httpd -f -p 8081 -h /www & wait"]
    readinessProbe:
      httpGet: {{path: /healthz, port: 8081}}
      periodSeconds: 1
  updateStrategy:
    type: RollingUpdate
    maxUnavailable: 1
"#
        )
    };
    let cleanup = Guard(
        set.clone(),
        k.node.cluster.get("CRILET_KUBECTL"),
        k.node.cluster.get("CRILET_CLUSTER_KUBECONFIG"),
    );
    k.node.cluster.apply(&k.render(&sidecarset(&env.get("CRILET_IMAGE_WEB_V1"))));
    k.apply(&cloneset("web", 2, ""));
    let before = k.ready_pods("app=web", 2, Duration::from_secs(120)).await;
    for (name, p) in &before {
        assert_eq!(
            spec_image(p, "sidecar"),
            env.get("CRILET_IMAGE_WEB_V1"),
            "{name}: the sidecar was injected"
        );
        assert_eq!(
            http_get(&format!("{}:8081", ip(p)), "/").await.as_deref(),
            Ok("v1"),
            "{name}: sidecar serves"
        );
    }
    k.node.cluster.apply(&k.render(&sidecarset(&env.get("CRILET_IMAGE_WEB_V2"))));
    wait_for("the SidecarSet to update both pods", Duration::from_secs(150), || async {
        let s = k.node.cluster.get_json(&["sidecarset", &set])?;
        let st = &s["status"];
        (st["observedGeneration"] == s["metadata"]["generation"]
            && st["updatedPods"] == 2
            && st["updatedReadyPods"] == 2
            && st["readyPods"] == 2)
            .then_some(())
    })
    .await;
    let after = k.ready_pods("app=web", 2, Duration::from_secs(60)).await;
    for (name, p) in &after {
        let b = &before[name];
        assert_eq!(uid(p), uid(b), "{name}: same pod");
        assert_eq!(spec_image(p, "sidecar"), env.get("CRILET_IMAGE_WEB_V2"));
        assert_eq!(restarts(p, "sidecar"), 1, "{name}: the sidecar restarted once, in place");
        assert_eq!(cid(p, "web"), cid(b, "web"), "{name}: the app container kept running");
        assert_eq!(restarts(p, "web"), 0, "{name}");
        assert_eq!(
            http_get(&format!("{}:8081", ip(p)), "/").await.as_deref(),
            Ok("v2"),
            "{name}: sidecar v2"
        );
        assert_eq!(
            http_get(&format!("{}:8080", ip(p)), "/").await.as_deref(),
            Ok("v1"),
            "{name}: app still v1"
        );
    }
    drop(cleanup);
}

/// Deletes the (cluster-scoped) SidecarSet however the test ends.
struct Guard(String, String, String);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = Command::new(&self.1)
            .args([
                "--kubeconfig",
                &self.2,
                "delete",
                "sidecarset",
                &self.0,
                "--ignore-not-found",
                "--wait=false",
            ])
            .output();
    }
}

/// §2 env from metadata: a CloneSet whose container reads a label through `fieldRef` env gets
/// that label changed. Kruise updates the pods in place (metadata only) and closes their
/// InPlaceUpdateReady gate; kruise-daemon reads the container's env over CRI ExecSync, finds it
/// stale and stops the container; crilet restarts it as a normal exit with the env resolved from
/// the pod's new labels. Same UID, sandbox and keeper container; web's restartCount + 1; the
/// new value is in the running container; kruise-daemon's `runtime-containers-meta` report and
/// Kruise's completion check agree, and `updatedReadyReplicas` reaches the replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn env_from_metadata_is_updated_in_place() {
    let k = KruiseNode::start("kruise_envmeta", 10286).await;
    let env = &k.node.agent.env;
    k.apply(
        r#"
apiVersion: apps.kruise.io/v1alpha1
kind: CloneSet
metadata:
  name: meta
spec:
  replicas: 2
  selector:
    matchLabels: {app: meta}
  template:
    metadata:
      labels: {app: meta, flavour: plain}
    spec:
      nodeSelector: {crilet.io/test: ${NODE}}
      terminationGracePeriodSeconds: 5
      containers:
      - name: web
        image: ${CRILET_IMAGE_BUSYBOX}
        env:
        - name: FLAVOUR
          valueFrom: {fieldRef: {fieldPath: "metadata.labels['flavour']"}}
        command: [sh, -c, "trap 'exit 0' TERM; sleep 100000 & wait"]
      - name: keeper
        image: ${CRILET_IMAGE_BUSYBOX}
        command: [sh, -c, "trap 'exit 0' TERM; sleep 100000 & wait"]
  updateStrategy:
    type: InPlaceIfPossible
    maxUnavailable: 1
"#,
    );
    let before = k.ready_pods("app=meta", 2, Duration::from_secs(120)).await;
    let cri = env.cri();
    let flavour_in = |id: String| {
        let cri = cri.clone();
        async move {
            let id = id.trim_start_matches("containerd://").to_string();
            let (code, out) = cri.exec_sync(&id, vec!["env".into()], Duration::from_secs(5)).await.ok()?;
            let text = String::from_utf8_lossy(&out).to_string();
            (code == 0).then(|| text.lines().find_map(|l| l.strip_prefix("FLAVOUR=")).map(str::to_string))?
        }
    };
    for p in before.values() {
        assert_eq!(flavour_in(cid(p, "web")).await.as_deref(), Some("plain"), "{}", cstatus(p, "web"));
    }
    let t0 = Instant::now();
    let patch =
        json!([{"op": "replace", "path": "/spec/template/metadata/labels/flavour", "value": "spicy"}]);
    k.kubectl_ok(&["patch", "cloneset", "meta", "--type", "json", "-p", &patch.to_string()]);
    let cs =
        wait_for("updatedReadyReplicas = 2 after the label change", Duration::from_secs(180), || async {
            let cs = k.get(&["cloneset", "meta"])?;
            let s = &cs["status"];
            (s["observedGeneration"] == cs["metadata"]["generation"]
                && s["updatedReplicas"] == 2
                && s["updatedReadyReplicas"] == 2
                && s["readyReplicas"] == 2)
                .then_some(cs)
        })
        .await;
    println!("env from metadata in place: {:.1} s to updatedReadyReplicas", t0.elapsed().as_secs_f64());
    let revision = cs["status"]["updateRevision"].as_str().unwrap_or("").to_string();
    let after = wait_for("both pods Ready with web restarted", Duration::from_secs(60), || async {
        let pods = k.pods("app=meta");
        let ok = pods.len() == 2
            && pods.values().all(|p| restarts(p, "web") == 1 && api_condition(p, "Ready") == Some("True"));
        ok.then_some(pods)
    })
    .await;
    assert_eq!(after.keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>(), "the same pods");
    for (name, p) in &after {
        let old = &before[name];
        assert_eq!(uid(p), uid(old), "{name}: UID kept");
        assert_eq!(k.sandbox_of(&uid(p)).await, k.sandbox_of(&uid(old)).await, "{name}: sandbox kept");
        assert_eq!(p["metadata"]["labels"]["flavour"], "spicy", "{name}");
        assert_ne!(cid(p, "web"), cid(old, "web"), "{name}: web recreated");
        assert_eq!(flavour_in(cid(p, "web")).await.as_deref(), Some("spicy"), "{name}: the new label in env");
        assert_eq!(cid(p, "keeper"), cid(old, "keeper"), "{name}: keeper untouched");
        assert_eq!(restarts(p, "keeper"), 0, "{name}");
        // Kruise's record: finished, for this revision, with env from metadata.
        let state: Value = serde_json::from_str(p["metadata"]["annotations"][STATE].as_str().unwrap_or("{}"))
            .unwrap_or_default();
        assert_eq!(state["updateEnvFromMetadata"], true, "{name}: {state}");
        assert!(
            revision.ends_with(state["revision"].as_str().unwrap_or("?")),
            "{name}: {state} vs {revision}"
        );
        assert_eq!(api_condition(p, "InPlaceUpdateReady"), Some("True"), "{name}");
        // kruise-daemon's report of what runs agrees with the spec.
        let meta: Value = serde_json::from_str(
            p["metadata"]["annotations"]["apps.kruise.io/runtime-containers-meta"].as_str().unwrap_or("{}"),
        )
        .unwrap_or_default();
        let web = meta["containers"].as_array().and_then(|c| c.iter().find(|c| c["name"] == "web")).cloned();
        let web = web.unwrap_or_else(|| panic!("{name}: no web in runtime-containers-meta {meta}"));
        assert_eq!(web["containerID"].as_str(), Some(cid(p, "web").as_str()), "{name}: {meta}");
    }
}
