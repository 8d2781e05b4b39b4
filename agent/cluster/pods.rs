//! The API pod source: a watch of the pods bound to this node (`spec.nodeName`), turned into
//! [`DesiredPod`]s for the same supervisor that runs static pods.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::ClusterLink;
use crate::model::{DesiredPod, PodKey, PodSource};

/// The pods bound to this node, as the API server last showed them (deleting ones included).
#[derive(Debug, Clone, Default)]
pub struct ApiPods {
    /// The first complete list has arrived (until then nothing may be reaped).
    pub synced: bool,
    pub pods: BTreeMap<PodKey, Arc<Pod>>,
}

pub fn key_of(pod: &Pod) -> PodKey {
    PodKey::new(
        pod.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

/// What the node runs for an API pod: the spec and the metadata containers read (labels,
/// annotations), without the status and the fields the API server changes on every write. The
/// generation stays: it changes with the spec only, and the status reports it.
pub fn desired(pod: &Pod, node: &str) -> DesiredPod {
    let key = key_of(pod);
    let mut p = pod.clone();
    p.status = None;
    p.metadata.managed_fields = None;
    p.metadata.resource_version = None;
    p.metadata.deletion_timestamp = None;
    p.metadata.deletion_grace_period_seconds = None;
    p.metadata.finalizers = None;
    p.metadata.namespace = Some(key.namespace.clone());
    let uid = p.metadata.uid.clone().unwrap_or_default();
    DesiredPod {
        source: PodSource::Api { node: node.to_string() },
        key,
        uid,
        pod: Arc::new(p),
        doc: 0,
        warnings: Vec::new(),
    }
}

/// Watches this node's pods until cancelled, publishing the whole set after every change. The
/// watcher relists after an outage (with back-off) and says so in the log.
pub async fn watch_pods(link: Arc<ClusterLink>, tx: watch::Sender<ApiPods>, cancel: CancellationToken) {
    let api: Api<Pod> = Api::all(link.client.clone());
    let config = watcher::Config::default().fields(&format!("spec.nodeName={}", link.node_name));
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let mut building: Option<BTreeMap<PodKey, Arc<Pod>>> = None;
    loop {
        let next = tokio::select! {
            _ = cancel.cancelled() => return,
            n = stream.next() => n,
        };
        let Some(event) = next else { return };
        match event {
            Ok(Event::Init) => building = Some(BTreeMap::new()),
            Ok(Event::InitApply(p)) => {
                if let Some(b) = building.as_mut() {
                    b.insert(key_of(&p), Arc::new(p));
                }
            }
            Ok(Event::InitDone) => {
                let pods = building.take().unwrap_or_default();
                info!(pods = pods.len(), "listed this node's pods from the API server");
                link.api_ok();
                tx.send_modify(|s| {
                    s.synced = true;
                    s.pods = pods;
                });
            }
            Ok(Event::Apply(p)) => {
                debug!(pod = %key_of(&p), "pod changed in the API");
                link.api_ok();
                tx.send_modify(|s| {
                    s.pods.insert(key_of(&p), Arc::new(p));
                });
            }
            Ok(Event::Delete(p)) => {
                let key = key_of(&p);
                debug!(pod = %key, "pod deleted from the API");
                tx.send_modify(|s| {
                    if s.pods.get(&key).is_some_and(|cur| cur.metadata.uid == p.metadata.uid) {
                        s.pods.remove(&key);
                    }
                });
            }
            Err(e) => {
                warn!(error = %e, "watching this node's pods failed; retrying with back-off");
                link.api_failed(&e.to_string());
            }
        }
    }
}
