//! Cluster mode (`--kubeconfig`): crilet as a node of a real Kubernetes cluster. It registers the
//! Node and keeps its status and Lease fresh (`node_sync`), watches the pods bound to it
//! (`pods`), admits them as the kubelet does (`admit`), runs them through the same supervisor
//! as static pods (`merge` makes one set of both sources), writes their status (`status_sync`)
//! and deletes a pod object once its containers have stopped.
//!
//! An API server that cannot be reached is never fatal: static pods run, every loop retries
//! with back-off, and the registry's API health says so (log, `/healthz`). A kubeconfig that
//! cannot work at all (bad file, unknown user, refused credentials) stops the agent at start.

pub mod admit;
pub mod bootstrap;
pub mod cert_slot;
pub mod certificate;
pub mod client_cert;
pub mod connect;
pub mod events;
pub mod merge;
pub mod mirror;
pub mod node_object;
pub mod node_sync;
pub mod pods;
pub mod rotation;
pub mod serving_cert;
pub mod status_sync;
pub mod throttle;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Preconditions};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::cri::CriClient;
use crate::error_chain;
use crate::model::ManifestSet;
use crate::model::PodKey;
use crate::registry::Registry;
use crate::tasks::Tasks;

/// The kubelet version crilet follows, as the Node's `nodeInfo.kubeletVersion` shows it.
pub const KUBELET_VERSION: &str = "v1.36.3";

/// `crilet run`'s cluster settings.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub kubeconfig: PathBuf,
    pub node_name: String,
    /// The Node's hostname (label and address): `--hostname-override`, else the machine's.
    pub hostname: String,
    pub node_ip: String,
    pub node_labels: BTreeMap<String, String>,
    pub max_pods: u32,
    pub port: u16,
    pub root_dir: PathBuf,
    /// `--kube-api-qps`/`--kube-api-burst`: the main client's rate limit.
    pub api_limit: throttle::Limit,
    /// `--event-qps`/`--event-burst`: the Events client's.
    pub event_limit: throttle::Limit,
    /// `--bootstrap-kubeconfig`: TLS bootstrapping when `kubeconfig` has no usable certificate.
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// `--cert-dir`: where the client pairs live (`kubelet-client-current.pem`).
    pub cert_dir: PathBuf,
    /// `--rotate-certificates`: renew the client certificate before it expires.
    pub rotate_certificates: bool,
    /// The sysctls API pods may set (the safe set and `--allowed-unsafe-sysctls`).
    pub sysctls: crate::sysctl::Allowlist,
}

/// The connection to the API server, shared by every cluster loop.
pub struct ClusterLink {
    /// Rate-limited by `--kube-api-qps`/`--kube-api-burst`.
    pub client: kube::Client,
    /// For Events, rate-limited by `--event-qps`/`--event-burst`.
    pub events: kube::Client,
    /// For the Node's status and Lease, not rate-limited.
    pub heartbeat: kube::Client,
    pub node_name: String,
    /// The client certificate every client presents, when it is rotated.
    cert_slot: Option<client_cert::ClientCertSlot>,
    registry: Registry,
}

impl ClusterLink {
    /// The API server answered.
    pub fn api_ok(&self) {
        self.registry.set_api_health(true, "");
    }

    /// A request to the API server failed with `error`.
    pub fn api_failed(&self, error: &str) {
        let was = self.registry.api_health().is_none_or(|h| h.reachable);
        self.registry.set_api_health(false, error);
        if was {
            warn!(error, "the API server is unreachable; pods keep running, retrying with back-off");
        }
    }
}

/// The node's allocatable resources (the downward API's default for unset limits).
pub fn allocatable(
    cfg: &ClusterConfig,
) -> BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity> {
    let facts = node_sync::read_facts(cfg, String::new());
    node_object::allocatable(&facts)
}

/// Parses `--node-labels` (`k=v,k2=v2`).
pub fn parse_labels(text: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((k, v)) = item.split_once('=') else {
            anyhow::bail!("--node-labels: {item:?} is not key=value");
        };
        out.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(out)
}

pub use pods::ApiPods;

/// Connects: a kubeconfig that cannot work is an error (the agent stops); an API server that
/// does not answer yet is only logged (every loop retries).
pub async fn connect(cfg: &ClusterConfig, registry: &Registry) -> anyhow::Result<Arc<ClusterLink>> {
    if let Some(boot) = &cfg.bootstrap_kubeconfig {
        // The kubelet waits here too: without a certificate the node cannot be a node.
        bootstrap::ensure_client_certificate(&bootstrap::Bootstrap {
            kubeconfig: cfg.kubeconfig.clone(),
            bootstrap_kubeconfig: boot.clone(),
            cert_dir: cfg.cert_dir.clone(),
            node_name: cfg.node_name.clone(),
        })
        .await
        .map_err(|e| anyhow::anyhow!("TLS bootstrap: {}", error_chain(&e)))?;
    }
    let cert_slot = if cfg.rotate_certificates { Some(initial_slot(cfg).await?) } else { None };
    let clients =
        connect::clients(&cfg.kubeconfig, cfg.api_limit, cfg.event_limit, cert_slot.as_ref()).await?;
    let link = Arc::new(ClusterLink {
        client: clients.api,
        events: clients.events,
        heartbeat: clients.heartbeat,
        node_name: cfg.node_name.clone(),
        cert_slot,
        registry: registry.clone(),
    });
    let who = tokio::time::timeout(Duration::from_secs(15), connect::whoami(&link.client)).await;
    match who {
        Ok(connect::Identity::User(user)) => {
            link.api_ok();
            let expected = format!("system:node:{}", cfg.node_name);
            if user != expected {
                warn!(user = %user, expected = %expected, "the kubeconfig's user is not this node's identity; the Node authorizer will refuse what it may not do");
            }
            info!(user = %user, kubeconfig = %cfg.kubeconfig.display(), "connected to the API server");
        }
        Ok(connect::Identity::Refused(reason)) => {
            anyhow::bail!("kubeconfig {}: {reason}", cfg.kubeconfig.display());
        }
        Ok(connect::Identity::Unreachable(reason)) => link.api_failed(&reason),
        Err(_) => link.api_failed("no answer within 15s"),
    }
    Ok(link)
}

/// The pair rotation starts from, as the kubelet's certificate manager: the cert dir's
/// current pair if it is valid (a rotated one, newer than what the kubeconfig names), else the
/// kubeconfig's own client certificate and key.
async fn initial_slot(cfg: &ClusterConfig) -> anyhow::Result<client_cert::ClientCertSlot> {
    let (kubeconfig, current) =
        (cfg.kubeconfig.clone(), certificate::current_path(&cfg.cert_dir, certificate::Kind::Client));
    let (parts, stored) = crate::blocking(move || {
        Ok((certificate::read_kubeconfig(&kubeconfig), std::fs::read(&current).ok()))
    })
    .await?;
    let now = std::time::SystemTime::now();
    if let Some(pem) = stored.filter(|p| certificate::cert_info(p).is_some_and(|i| i.valid_at(now)))
        && let Ok(slot) = client_cert::ClientCertSlot::new(&pem, &pem)
    {
        return Ok(slot);
    }
    match parts {
        Some(certificate::KubeconfigParts { cert_pem: Some(cert), key_pem: Some(key), .. }) => {
            client_cert::ClientCertSlot::new(&cert, &key).map_err(|reason| {
                anyhow::anyhow!("kubeconfig {}: client certificate: {reason}", cfg.kubeconfig.display())
            })
        }
        _ => anyhow::bail!(
            "kubeconfig {}: --rotate-certificates needs a client certificate and key in it (or in --cert-dir {})",
            cfg.kubeconfig.display(),
            cfg.cert_dir.display()
        ),
    }
}

/// Starts the Node, Lease, pod watch, merge, status and deletion loops in `tasks`. Returns the
/// merged pod set for the supervisor and the sender it reports finished pods on.
#[allow(clippy::too_many_arguments)]
pub fn start(
    tasks: &Tasks,
    link: Arc<ClusterLink>,
    cfg: &ClusterConfig,
    volumes: Option<(Arc<crate::volumes::VolumeManager>, Duration)>,
    cri: CriClient,
    runtime_version: String,
    groups_policy: bool,
    runtime_uids: BTreeSet<String>,
    registry: Registry,
    ledger: crate::ledger::Ledger,
    files: watch::Receiver<ManifestSet>,
    shutting_down: watch::Receiver<bool>,
    pressure: watch::Receiver<crate::eviction::Pressure>,
    cancel: CancellationToken,
) -> (watch::Receiver<ManifestSet>, mpsc::UnboundedSender<(PodKey, String)>) {
    let facts = node_object::NodeFacts {
        supplemental_groups_policy: groups_policy,
        ..node_sync::read_facts(cfg, runtime_version)
    };
    let (uid_tx, uid_rx) = watch::channel(String::new());
    {
        let link = link.clone();
        let facts = facts.clone();
        let cri = cri.clone();
        let cancel = cancel.clone();
        let status_tasks = tasks.clone();
        let shutting_down_node = shutting_down.clone();
        let pressure_node = pressure.clone();
        tasks.spawn("node registration and status", async move {
            let mut delay = Duration::from_millis(500);
            loop {
                match node_sync::register(&link, &facts).await {
                    Ok(uid) => {
                        link.api_ok();
                        let _ = uid_tx.send(uid);
                        break;
                    }
                    Err(e) => {
                        warn!(error = %e, retry_in_s = delay.as_secs_f64(), "registering the Node failed; retrying");
                        link.api_failed(&e.to_string());
                    }
                }
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(Duration::from_secs(7));
            }
            node_sync::run_status(
                link.clone(),
                cri,
                facts,
                shutting_down_node,
                pressure_node,
                &status_tasks,
                cancel.clone(),
            )
            .await;
        });
    }
    tasks.spawn(
        "node lease",
        node_sync::run_lease(link.clone(), cfg.node_name.clone(), uid_rx, cancel.clone()),
    );

    if let Some(slot) = link.cert_slot.clone() {
        let rotation = rotation::Rotation {
            kind: certificate::Kind::Client,
            slot,
            client: link.heartbeat.clone(),
            node_name: cfg.node_name.clone(),
            sans: certificate::Sans::default(),
            cert_dir: cfg.cert_dir.clone(),
            bootstrap_kubeconfig: cfg.bootstrap_kubeconfig.clone(),
        };
        tasks.spawn("client certificate rotation", rotation::run(rotation, cancel.clone()));
    }

    let (api_tx, api_rx) = watch::channel(ApiPods::default());
    tasks.spawn("pod watch", pods::watch_pods(link.clone(), api_tx, cancel.clone()));

    let alloc = node_object::allocatable(&facts);
    let milli = |k: &str| {
        alloc
            .get(k)
            .and_then(|q| crate::quantity::Quantity::parse(&q.0))
            .and_then(|q| if k == "cpu" { q.milli_value() } else { q.value() })
            .and_then(|v| i64::try_from(v).ok())
            .unwrap_or(0)
    };
    let room = admit::NodeRoom {
        name: cfg.node_name.clone(),
        labels: node_object::labels(&facts),
        max_pods: cfg.max_pods,
        cpu_milli: milli("cpu"),
        memory: milli("memory"),
        sysctls: cfg.sysctls.clone(),
        supplemental_groups_policy: groups_policy,
        apparmor: crate::apparmor::host().clone(),
    };
    tasks.spawn("mirror pods", mirror::run(link.clone(), files.clone(), api_rx.clone(), cancel.clone()));
    tasks.spawn("event sender", events::run(link.clone(), registry.clone(), api_rx.clone(), cancel.clone()));
    let (set_tx, set_rx) = watch::channel(files.borrow().clone());
    let (rej_tx, rej_rx) = watch::channel(merge::Rejections::new());
    tasks.spawn(
        "pod merge",
        merge::run(
            files,
            api_rx.clone(),
            registry.clone(),
            room,
            runtime_uids,
            ledger,
            set_tx,
            rej_tx,
            shutting_down,
            pressure,
            cancel.clone(),
        ),
    );
    tasks.spawn(
        "pod status writer",
        status_sync::run(link.clone(), registry, api_rx.clone(), rej_rx, cancel.clone()),
    );

    if let Some((volumes, period)) = volumes {
        tasks.spawn("volume refresh", refresh_volumes(volumes, set_rx.clone(), period, cancel.clone()));
    }
    let (gone_tx, gone_rx) = mpsc::unbounded_channel();
    tasks.spawn("finished pod deletion", delete_finished(link, api_rx, gone_rx, cancel));
    (set_rx, gone_tx)
}

/// Every `period`, refreshes the API volumes of the running API pods (ConfigMap and Secret
/// contents, the downward API's labels and annotations, tokens due for renewal), as the kubelet
/// remounts them on each pod sync; forgets the caches of pods that are gone.
async fn refresh_volumes(
    volumes: Arc<crate::volumes::VolumeManager>,
    set: watch::Receiver<ManifestSet>,
    period: Duration,
    cancel: CancellationToken,
) {
    let mut known: BTreeSet<String> = BTreeSet::new();
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let pods: Vec<crate::model::DesiredPod> =
            set.borrow().pods.values().filter(|d| d.source.is_api()).cloned().collect();
        let now: BTreeSet<String> = pods.iter().map(|d| d.uid.clone()).collect();
        for gone in known.difference(&now) {
            volumes.forget(gone);
        }
        known = now;
        for d in pods {
            if let Err(e) = volumes.resync(&d.pod).await {
                tracing::debug!(pod = %d.key, error = %e, "refreshing the pod's volumes failed; retrying");
            }
        }
    }
}

/// Deletes an API pod being deleted once its worker has stopped everything: grace 0 with the
/// UID as precondition (a new pod of the same name is never touched), retried while the API
/// server is unreachable.
async fn delete_finished(
    link: Arc<ClusterLink>,
    api: watch::Receiver<ApiPods>,
    mut gone: mpsc::UnboundedReceiver<(PodKey, String)>,
    cancel: CancellationToken,
) {
    let mut pending: BTreeMap<String, PodKey> = BTreeMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            g = gone.recv() => match g {
                Some((key, uid)) => { pending.insert(uid, key); }
                None => return,
            },
            _ = tick.tick(), if !pending.is_empty() => {}
        }
        let current = api.borrow().clone();
        let mut done = Vec::new();
        for (uid, key) in &pending {
            let deleting = current.pods.get(key).is_some_and(|p| {
                p.metadata.uid.as_deref() == Some(uid.as_str()) && p.metadata.deletion_timestamp.is_some()
            });
            if !deleting {
                done.push(uid.clone());
                continue;
            }
            let pods: Api<Pod> = Api::namespaced(link.client.clone(), &key.namespace);
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions { uid: Some(uid.clone()), resource_version: None }),
                ..Default::default()
            };
            match pods.delete(&key.name, &dp).await {
                Ok(_) => {
                    info!(pod = %key, uid = %uid, "pod stopped; deleted from the API");
                    link.api_ok();
                    done.push(uid.clone());
                }
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => done.push(uid.clone()),
                Err(e) => {
                    warn!(pod = %key, error = %e, "deleting the stopped pod from the API failed; retrying");
                    link.api_failed(&e.to_string());
                }
            }
        }
        for uid in done {
            pending.remove(&uid);
        }
    }
}
