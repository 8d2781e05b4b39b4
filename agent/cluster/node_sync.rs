//! Keeping the Node object, its status and its Lease up to date, as the kubelet's node status
//! manager and lease controller do: status every 10 s, written when it changed or every 5 min;
//! the Lease renewed every 10 s for 40 s.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::ClusterLink;
use super::node_object::{self, NodeFacts, RuntimeReadiness};
use crate::cri::CriClient;

/// The kubelet's nodeStatusUpdateFrequency and nodeStatusReportFrequency.
const STATUS_CHECK: Duration = Duration::from_secs(10);
const STATUS_REPORT: Duration = Duration::from_secs(300);
/// The kubelet's node lease: 40 s long, renewed every quarter of that.
const LEASE_SECONDS: i32 = 40;
const LEASE_RENEW: Duration = Duration::from_secs(10);
/// How often the Node's image list is read again (the kubelet's image cache period).
const IMAGES_REFRESH: Duration = Duration::from_secs(30);

/// Reads what the Node reports about this machine, as `cfg` names it.
pub fn read_facts(cfg: &super::ClusterConfig, runtime_version: String) -> NodeFacts {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default();
    let memory_bytes = crate::node::memory_total();
    let ephemeral_bytes =
        nix::sys::statvfs::statvfs(&cfg.root_dir).map(|s| s.blocks() * s.fragment_size()).unwrap_or(0);
    let os_image = read("/etc/os-release")
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "Linux".into());
    NodeFacts {
        name: cfg.node_name.clone(),
        hostname: cfg.hostname.clone(),
        node_ip: cfg.node_ip.clone(),
        labels: cfg.node_labels.clone(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        memory_bytes,
        ephemeral_bytes,
        max_pods: cfg.max_pods,
        port: cfg.port,
        machine_id: read("/etc/machine-id"),
        system_uuid: read("/sys/class/dmi/id/product_uuid"),
        boot_id: read("/proc/sys/kernel/random/boot_id"),
        kernel: nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().to_string())
            .unwrap_or_default(),
        os_image,
        arch: node_object::go_arch(),
        runtime_version,
        kubelet_version: super::KUBELET_VERSION.to_string(),
        supplemental_groups_policy: false,
    }
}

/// Creates the Node, or patches the labels of the one that exists. Returns its UID.
pub async fn register(link: &ClusterLink, facts: &NodeFacts) -> Result<String, kube::Error> {
    let nodes: Api<Node> = Api::all(link.client.clone());
    match nodes.create(&PostParams::default(), &node_object::new_node(facts)).await {
        Ok(n) => {
            info!(node = %facts.name, "registered the Node");
            Ok(n.metadata.uid.unwrap_or_default())
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let patch = serde_json::json!({ "metadata": { "labels": node_object::labels(facts) } });
            let n = nodes.patch(&facts.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            info!(node = %facts.name, "the Node exists; its labels are patched");
            Ok(n.metadata.uid.unwrap_or_default())
        }
        Err(e) => Err(e),
    }
}

/// Why the node is not ready, from the runtime's `Status` (empty when ready).
async fn runtime_readiness(cri: &CriClient) -> RuntimeReadiness {
    match cri.check_ready().await {
        Ok(()) => RuntimeReadiness::default(),
        Err(e) => RuntimeReadiness { problems: vec![format!("container runtime not ready: {e}")] },
    }
}

/// Writes the node status every [`STATUS_CHECK`] when it changed, else every [`STATUS_REPORT`];
/// publishes whether the last write worked.
pub async fn run_status(
    link: Arc<ClusterLink>,
    cri: CriClient,
    facts: NodeFacts,
    mut shutting_down: watch::Receiver<bool>,
    mut pressure: watch::Receiver<crate::eviction::Pressure>,
    tasks: &crate::tasks::Tasks,
    cancel: CancellationToken,
) {
    let mut shutdown_watched = true;
    let mut pressure_watched = true;
    let nodes: Api<Node> = Api::all(link.heartbeat.clone());
    let (watched, watch_current) = watch_own_node(&nodes, &facts.name, tasks, cancel.clone());
    let mut written: Option<(NodeStatus, tokio::time::Instant)> = None;
    let mut images: Option<(Vec<k8s_openapi::api::core::v1::ContainerImage>, tokio::time::Instant)> = None;
    let mut tick = tokio::time::interval(STATUS_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
            // The node's shutdown shows at once (the kubelet syncs the node status as it starts).
            r = shutting_down.changed(), if shutdown_watched => shutdown_watched = r.is_ok(),
            // A pressure condition shows at once too (the kubelet's fast status update).
            r = pressure.changed(), if pressure_watched => pressure_watched = r.is_ok(),
        }
        let mut ready = runtime_readiness(&cri).await;
        if *shutting_down.borrow() {
            ready.problems.push(crate::pod::shutdown::NODE_NOT_READY.to_string());
        }
        // Compared with the Node as the API server has it (as the kubelet does): the node
        // lifecycle controller rewrites its conditions (Unknown) while the agent cannot reach the
        // API server, and that must be corrected as soon as it can again. Read from the watch,
        // as the kubelet reads its node lister; from the API server until the watch has listed.
        let cached =
            watch_current.load(Ordering::Relaxed).then(|| watched.state().into_iter().next()).flatten();
        let live = match cached {
            Some(n) => n.status.clone(),
            None => match nodes.get_opt(&facts.name).await {
                Ok(n) => n.and_then(|n| n.status),
                Err(e) => {
                    debug!(error = %e, "reading the Node failed; retrying");
                    link.api_failed(&e.to_string());
                    continue;
                }
            },
        };
        let pressure_now = pressure.borrow().clone();
        let previous = written.as_ref().and_then(|(s, _)| s.conditions.clone()).unwrap_or_default();
        let mut status = node_object::status(
            &facts,
            node_object::conditions(&ready, &pressure_now, &previous, jiff::Timestamp::now()),
        );
        // The node's images (the kubelet's Images setter), listed at most every
        // IMAGES_REFRESH as the kubelet's image cache is; a failed list is tried again at the
        // next check, the last list standing meanwhile.
        if images.as_ref().is_none_or(|(_, at)| at.elapsed() >= IMAGES_REFRESH) {
            match cri.images().await {
                Ok(list) => images = Some((node_object::images(&list), tokio::time::Instant::now())),
                Err(e) => debug!(error = %e, "listing images for the node status failed"),
            }
        }
        status.images = Some(images.as_ref().map(|(i, _)| i.clone()).unwrap_or_default());
        let drifted = live.as_ref().is_none_or(|l| node_object::differs_from_live(l, &status));
        let due = drifted
            || match &written {
                None => true,
                Some((last, at)) => node_object::changed(last, &status) || at.elapsed() >= STATUS_REPORT,
            };
        if !due {
            continue;
        }
        let patch = serde_json::json!({ "status": status });
        match nodes.patch_status(&facts.name, &PatchParams::default(), &Patch::Strategic(&patch)).await {
            Ok(_) => {
                debug!("node status written");
                written = Some((status, tokio::time::Instant::now()));
                link.api_ok();
            }
            Err(e) => {
                warn!(error = %e, "writing the node status failed; retrying");
                link.api_failed(&e.to_string());
            }
        }
    }
}

/// A store holding this node's Node object, fed by a watch of it alone (the kubelet's node
/// informer): the status check every 10 s reads it instead of asking the API server each time.
/// Its second value says whether the watch is current: false from a failure of it until it has
/// listed again (after an outage the store may hold a Node older than the one the API has).
fn watch_own_node(
    nodes: &Api<Node>,
    name: &str,
    tasks: &crate::tasks::Tasks,
    cancel: CancellationToken,
) -> (reflector::Store<Node>, Arc<AtomicBool>) {
    let (store, writer) = reflector::store();
    let current = Arc::new(AtomicBool::new(false));
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let stream = reflector(writer, watcher(nodes.clone(), config)).default_backoff().touched_objects();
    let flag = current.clone();
    tasks.spawn("node watch", async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                r = stream.next() => match r {
                    Some(Err(e)) => {
                        flag.store(false, Ordering::Relaxed);
                        debug!(error = %e, "watching the Node failed; retrying with back-off");
                    }
                    Some(Ok(_)) => flag.store(true, Ordering::Relaxed),
                    None => return,
                },
            }
        }
    });
    (store, current)
}

/// Renews the node's Lease every [`LEASE_RENEW`], creating it (owned by the Node) when missing.
pub async fn run_lease(
    link: Arc<ClusterLink>,
    node: String,
    mut node_uid: watch::Receiver<String>,
    cancel: CancellationToken,
) {
    let leases: Api<Lease> = Api::namespaced(link.heartbeat.clone(), "kube-node-lease");
    let mut cached: Option<Lease> = None;
    // The Lease is owned by the Node: it is made once the Node is registered (as the kubelet).
    while node_uid.borrow_and_update().is_empty() {
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = node_uid.changed() => if r.is_err() { return },
        }
    }
    let mut tick = tokio::time::interval(LEASE_RENEW);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let uid = node_uid.borrow_and_update().clone();
        let now = MicroTime(jiff::Timestamp::now());
        let owner = (!uid.is_empty()).then(|| {
            vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: node.clone(),
                uid: uid.clone(),
                ..Default::default()
            }]
        });
        let result = match cached.take() {
            Some(mut lease) => {
                let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                spec.renew_time = Some(now);
                spec.holder_identity = Some(node.clone());
                spec.lease_duration_seconds = Some(LEASE_SECONDS);
                if lease.metadata.owner_references.as_deref().unwrap_or_default().is_empty() {
                    lease.metadata.owner_references = owner;
                }
                leases.replace(&node, &PostParams::default(), &lease).await
            }
            None => match leases.get_opt(&node).await {
                Ok(Some(lease)) => {
                    cached = Some(lease);
                    tick.reset_immediately();
                    continue;
                }
                Ok(None) => {
                    let lease = Lease {
                        metadata: ObjectMeta {
                            name: Some(node.clone()),
                            namespace: Some("kube-node-lease".into()),
                            owner_references: owner,
                            ..Default::default()
                        },
                        spec: Some(LeaseSpec {
                            holder_identity: Some(node.clone()),
                            lease_duration_seconds: Some(LEASE_SECONDS),
                            renew_time: Some(now),
                            ..Default::default()
                        }),
                    };
                    leases.create(&PostParams::default(), &lease).await
                }
                Err(e) => Err(e),
            },
        };
        match result {
            Ok(lease) => {
                cached = Some(lease);
                link.api_ok();
            }
            Err(e) => {
                // A conflict means someone else wrote it: read it again next time.
                debug!(error = %e, "renewing the node lease failed; retrying");
                link.api_failed(&e.to_string());
                if !matches!(&e, kube::Error::Api(s) if s.code == 409) {
                    warn!(error = %e, "renewing the node lease failed");
                }
            }
        }
    }
}
