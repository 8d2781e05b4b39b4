//! Turns the manifest set into pod workers: starts a worker per new pod, hands changed specs to
//! running workers, terminates pods whose manifest is gone or whose UID changed (the new UID
//! starts only after the old one has finished, R3.6), and on start adopts what already runs and
//! terminates pods that no manifest names any more.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::carry::{Carried, in_place_edit};
use super::context::WorkerContext;
use super::shutdown;
use super::worker::{Desire, Eviction, run_worker};
use crate::model::{DesiredPod, ManifestSet, PodKey, PodSource, ProblemKind, keys};
use crate::pleg::Wakers;

/// Removes the legacy `/var/log/containers` links that point into `log_dir`.
fn remove_legacy_links_into(links_dir: Option<&std::path::Path>, log_dir: &std::path::Path) {
    let Some(entries) = links_dir.and_then(|d| std::fs::read_dir(d).ok()) else { return };
    for e in entries.filter_map(Result::ok) {
        if std::fs::read_link(e.path()).is_ok_and(|t| t.starts_with(log_dir)) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// [`Supervisor::reap_leftover_dirs`]' file work: the dirs of pods not in `busy` and their log
/// dirs go. Returns their UIDs (their cgroups go next, through the node's cgroup driver).
fn reap_leftovers(node: &crate::node::NodeConfig, busy: &HashSet<String>) -> Vec<String> {
    let mut reaped = Vec::new();
    let Ok(dirs) = std::fs::read_dir(node.root_dir.join("pods")) else { return reaped };
    for e in dirs.filter_map(Result::ok) {
        let uid = e.file_name().to_string_lossy().to_string();
        if busy.contains(&uid) {
            continue;
        }
        info!(uid = %uid, "removing what is left of a pod removed earlier");
        // Never into a mount a Bidirectional container left there (see mountinfo).
        if let Err(why) = crate::mountinfo::remove_tree_unless_mounted(&e.path()) {
            tracing::warn!(uid = %uid, reason = %why, "pod dir left in place");
        }
        reaped.push(uid.clone());
        let suffix = format!("_{uid}");
        let Ok(logs) = std::fs::read_dir(&node.pod_logs_dir) else { continue };
        for l in logs.filter_map(Result::ok) {
            if l.file_name().to_string_lossy().ends_with(&suffix) {
                remove_legacy_links_into(node.container_logs_dir.as_deref(), &l.path());
                let _ = std::fs::remove_dir_all(l.path());
            }
        }
    }
    reaped
}

struct Running {
    uid: String,
    tx: watch::Sender<Desire>,
}

/// What graceful node shutdown (`systemd::logind`) asks of the supervisor.
pub enum NodeShutdown {
    /// The node is about to shut down: stop every pod, group by group, and say when done.
    Stop(ShutdownRequest),
    /// The shutdown was cancelled: pods may start again (those it stopped stay stopped, as the
    /// kubelet leaves them Failed).
    Cancelled,
}

/// The node is about to shut down: stop every pod, group by group (`pod::shutdown`), and say
/// when done.
pub struct ShutdownRequest {
    /// Lowest priority first.
    pub groups: Vec<shutdown::Group>,
    pub done: oneshot::Sender<()>,
}

pub struct Supervisor {
    ctx: Arc<WorkerContext>,
    wakers: Wakers,
    cancel: CancellationToken,
    running: BTreeMap<PodKey, Running>,
    /// Old UIDs still terminating: their pod, and the sender their worker listens on (dropping
    /// it would end the worker before it has finished).
    terminating: HashMap<String, (PodKey, watch::Sender<Desire>)>,
    /// New pods waiting for an old UID of the same name to finish.
    pending: BTreeMap<PodKey, DesiredPod>,
    tasks: JoinSet<(PodKey, String)>,
    first_syncs: Vec<oneshot::Receiver<()>>,
    /// Cluster mode: told the key and UID of every pod whose worker has finished terminating
    /// (the API pod may then be deleted), or that is being deleted and never ran here.
    gone: Option<mpsc::UnboundedSender<(PodKey, String)>>,
    /// Cluster mode: API pods that the runtime runs but the API lacks have been reaped (after
    /// the first complete list). Until then nothing of an API pod may be cleaned up.
    api_reaped: bool,
    /// Static pods resized in place: their new content UID maps to the running UID.
    carried: Carried,
    /// Graceful node shutdown's requests (`systemd::logind`), if it is on.
    shutdown: Option<mpsc::Receiver<NodeShutdown>>,
    /// The node is shutting down: its pods were stopped, nothing starts until a cancel.
    shut_down: bool,
    /// The UIDs of the pods stopped for a shutdown: they do not start again after a cancel.
    stopped_for_shutdown: HashSet<String>,
    /// Node-pressure eviction's requests (`eviction`), if it is on.
    evictions: Option<mpsc::Receiver<EvictRequest>>,
}

/// The eviction manager's request: evict the pod of `uid` (its worker stops everything within
/// the grace and keeps it stopped, Failed, `Evicted`).
#[derive(Debug, Clone)]
pub struct EvictRequest {
    pub uid: String,
    pub eviction: Eviction,
}

impl Supervisor {
    pub fn new(ctx: Arc<WorkerContext>, wakers: Wakers, cancel: CancellationToken) -> Self {
        Self {
            ctx,
            wakers,
            cancel,
            running: BTreeMap::new(),
            terminating: HashMap::new(),
            pending: BTreeMap::new(),
            tasks: JoinSet::new(),
            first_syncs: Vec::new(),
            gone: None,
            api_reaped: true,
            carried: Carried::default(),
            shutdown: None,
            shut_down: false,
            stopped_for_shutdown: HashSet::new(),
            evictions: None,
        }
    }

    /// Node-pressure eviction: `requests` name the pods to evict.
    pub fn with_evictions(mut self, requests: mpsc::Receiver<EvictRequest>) -> Self {
        self.evictions = Some(requests);
        self
    }

    /// Hands an eviction to the pod's worker; a pod not running here (any more) is left alone.
    fn evict(&mut self, request: EvictRequest) {
        let Some((key, r)) = self.running.iter().find(|(_, r)| r.uid == request.uid) else {
            return warn!(uid = %request.uid, "no running pod to evict");
        };
        info!(pod = %key, uid = %r.uid, "evicting pod for node pressure");
        r.tx.send_if_modified(|cur| match cur {
            Desire::Run(d) => {
                *cur = Desire::Evict(d.clone(), request.eviction);
                true
            }
            Desire::Evict(..) | Desire::Terminate { .. } => false,
        });
    }

    /// Graceful node shutdown: `requests` say when to stop every pod.
    pub fn with_shutdown(mut self, requests: mpsc::Receiver<NodeShutdown>) -> Self {
        self.shutdown = Some(requests);
        self
    }

    /// Cluster mode: API pods come in the sets too; `gone` hears of every pod that has finished.
    pub fn with_api_pods(mut self, gone: mpsc::UnboundedSender<(PodKey, String)>) -> Self {
        self.gone = Some(gone);
        self.api_reaped = false;
        self
    }

    fn report_gone(&self, key: &PodKey, uid: &str) {
        if let Some(tx) = &self.gone {
            let _ = tx.send((key.clone(), uid.to_string()));
        }
    }

    fn spawn(&mut self, d: DesiredPod, desire: Desire) -> watch::Sender<Desire> {
        let (tx, rx) = watch::channel(desire);
        let wake = self.wakers.register(&d.uid);
        let (synced_tx, synced_rx) = oneshot::channel();
        self.first_syncs.push(synced_rx);
        let ctx = self.ctx.clone();
        let cancel = self.cancel.child_token();
        let key = d.key.clone();
        let uid = d.uid.clone();
        let wakers = self.wakers.clone();
        self.tasks.spawn(async move {
            run_worker(ctx, d, rx, wake, cancel, Some(synced_tx)).await;
            wakers.unregister(&uid);
            (key, uid)
        });
        tx
    }

    fn start(&mut self, d: DesiredPod) {
        info!(pod = %d.key, uid = %d.uid, source = %d.source_text(), "starting pod worker");
        let key = d.key.clone();
        let uid = d.uid.clone();
        let tx = self.spawn(d.clone(), Desire::Run(d));
        self.running.insert(key, Running { uid, tx });
    }

    fn terminate(&mut self, key: &PodKey, grace: Option<Duration>) {
        if let Some(r) = self.running.remove(key) {
            info!(pod = %key, uid = %r.uid, grace_s = grace.map(|g| g.as_secs_f64()), "terminating pod");
            let _ = r.tx.send(Desire::Terminate { remove: true, grace, node_shutdown: false });
            self.terminating.insert(r.uid, (key.clone(), r.tx));
        }
    }

    /// Brings the workers in line with `set`. A running pod whose manifest file (or the whole
    /// directory) is currently broken is left alone: a bad edit never disturbs a running pod.
    pub fn apply(&mut self, set: &ManifestSet) {
        if self.shut_down {
            return;
        }
        if !self.stopped_for_shutdown.is_empty() {
            let live: HashSet<&str> = set.pods.values().map(|d| d.uid.as_str()).collect();
            self.stopped_for_shutdown.retain(|uid| live.contains(uid.as_str()));
        }
        self.carry_resized(set);
        let carried = self.carried.apply(set);
        let set = &carried;
        let keys: Vec<PodKey> = self.running.keys().cloned().collect();
        for key in keys {
            let broken = self.running.get(&key).is_some_and(|r| match &*r.tx.borrow() {
                Desire::Run(d) | Desire::Evict(d, _) => {
                    d.source.manifest().is_some_and(|file| file_broken(set, file))
                }
                Desire::Terminate { .. } => false,
            });
            if !set.pods.contains_key(&key) && !broken {
                self.pending.remove(&key);
                let uid = self.running.get(&key).map(|r| r.uid.clone()).unwrap_or_default();
                let grace = set.deleting.get(&key).filter(|d| d.uid == uid).map(|d| d.grace);
                self.terminate(&key, grace);
            }
        }
        // A second deletion with a shorter grace period reaches a kill under way.
        for d in set.deleting.values() {
            if let Some((_, tx)) = self.terminating.get(&d.uid) {
                tx.send_if_modified(|cur| match cur {
                    Desire::Terminate { grace, .. } if *grace != Some(d.grace) => {
                        *grace = Some(d.grace);
                        true
                    }
                    _ => false,
                });
            }
        }
        if self.api_reaped {
            // Deleted API pods that never ran here (or finished earlier): nothing to stop.
            for (key, d) in &set.deleting {
                let busy = self.running.get(key).is_some_and(|r| r.uid == d.uid)
                    || self.terminating.contains_key(&d.uid);
                if !busy {
                    self.pending.remove(key);
                    self.report_gone(key, &d.uid);
                }
            }
        }
        for (key, d) in &set.pods {
            match self.running.get(key) {
                Some(r) if r.uid == d.uid => {
                    // An evicted pod's worker keeps its eviction whatever it is sent next.
                    let same =
                        matches!(&*r.tx.borrow(), Desire::Run(cur) | Desire::Evict(cur, _) if cur == d);
                    if !same {
                        info!(pod = %key, "manifest changed; updating the pod in place");
                        let _ = r.tx.send(Desire::Run(d.clone()));
                    }
                }
                Some(_) => {
                    info!(pod = %key, uid = %d.uid, "manifest changed; replacing the pod (new UID)");
                    self.ctx.exec.rec.normal(
                        key,
                        None,
                        "Recreating",
                        format!("Manifest changed beyond images: the pod is stopped and replaced by a new one (UID {})", d.uid),
                    );
                    self.terminate(key, None);
                    self.pending.insert(key.clone(), d.clone());
                }
                None if self.terminating.values().any(|(k, _)| k == key) => {
                    self.pending.insert(key.clone(), d.clone());
                }
                None if self.stopped_for_shutdown.contains(&d.uid) => {}
                None => self.start(d.clone()),
            }
        }
    }

    /// Static pods whose edit changes only cpu/memory resources, labels or annotations (and
    /// images) keep their running UID (beyond upstream): the worker resizes them, and restarts
    /// the containers whose metadata env changed, in place. Learns such edits of
    /// running pods; the map forgets pods that are gone.
    fn carry_resized(&mut self, set: &ManifestSet) {
        for (key, d) in &set.pods {
            let Some(r) = self.running.get(key) else { continue };
            if r.uid == d.uid || is_api(d) || self.carried.contains(&d.uid) {
                continue;
            }
            let resized = match &*r.tx.borrow() {
                Desire::Run(cur) => in_place_edit(&cur.pod, &d.pod),
                Desire::Evict(..) | Desire::Terminate { .. } => false,
            };
            if resized {
                info!(pod = %key, uid = %r.uid, "manifest changed only in what changes in place (cpu/memory, labels, annotations): keeping the pod");
                self.carried.insert(&d.uid, &r.uid);
            }
        }
        let running: Vec<String> = self.running.values().map(|r| r.uid.clone()).collect();
        let set_uids: Vec<&str> = set.pods.values().map(|d| d.uid.as_str()).collect();
        // Kept while the pod runs, or before the first apply (learned from the runtime).
        let first = self.running.is_empty() && self.terminating.is_empty();
        self.carried
            .retain_live(|live| first || running.iter().any(|u| u == live) || set_uids.contains(&live));
    }

    /// On start, before the first apply: static pods whose manifest was resized (while the agent
    /// was down, or before it restarted) against the spec their sandbox carries keep their UID.
    pub async fn learn_carried(&mut self, set: &ManifestSet) {
        let sandboxes = match self.ctx.exec.cri.list_all(Some((keys::MANAGED_BY, "crilet"))).await {
            Ok((s, _)) => s,
            Err(e) => return warn!(error = %e, "cannot list sandboxes to find resized pods"),
        };
        for sb in sandboxes {
            let Some(uid) = sb.labels.get(keys::POD_UID) else { continue };
            let key = PodKey::new(
                sb.labels.get(keys::POD_NAMESPACE).cloned().unwrap_or_else(|| "default".into()),
                sb.labels.get(keys::POD_NAME).cloned().unwrap_or_default(),
            );
            let Some(d) = set.pods.get(&key).filter(|d| &d.uid != uid && !is_api(d)) else { continue };
            if set.pods.values().any(|o| &o.uid == uid) {
                continue;
            }
            let pod: Option<Pod> =
                sb.annotations.get(keys::POD_SPEC).and_then(|j| serde_json::from_str(j).ok());
            if pod.is_some_and(|p| in_place_edit(&p, &d.pod)) {
                info!(pod = %key, uid = %uid, "manifest differs from the running pod only in what changes in place: keeping its UID");
                self.carried.insert(&d.uid, uid);
            }
        }
    }

    /// Terminates pods the runtime runs for crilet that no manifest names (manifest removed while
    /// the agent was down). Their spec comes from the sandbox annotation.
    /// Only pods whose manifest lived in `manifest_dir` are this agent's to reap, so agents with
    /// different manifest directories can share one runtime.
    pub async fn reap_orphans(&mut self, set: &ManifestSet, manifest_dir: &std::path::Path) {
        self.reap(set, &|src: &PodSource| src.manifest().is_some_and(|f| f.starts_with(manifest_dir))).await;
    }

    /// Cluster mode, once the API's pods are listed: terminates API pods the runtime runs that
    /// the API no longer has (deleted while the agent was down).
    pub async fn reap_api_orphans(&mut self, set: &ManifestSet) {
        let me = self.ctx.node.node_name.clone();
        let api = |src: &PodSource| matches!(src, PodSource::Api { node } if *node == me);
        self.reap(set, &api).await;
        self.api_reaped = true;
    }

    /// Terminates pods the runtime runs for crilet whose source (`ours`, by manifest file) no
    /// longer names them.
    async fn reap(&mut self, set: &ManifestSet, ours: &dyn Fn(&PodSource) -> bool) {
        let (sandboxes, containers) =
            match self.ctx.exec.cri.list_all(Some((keys::MANAGED_BY, "crilet"))).await {
                Ok(v) => v,
                Err(e) => {
                    warn!(error = %e, "cannot list sandboxes to find orphaned pods");
                    return;
                }
            };
        let carried = self.carried.apply(set);
        let set = &carried;
        let wanted: Vec<&str> = set.pods.values().map(|d| d.uid.as_str()).collect();
        let mut orphans: BTreeMap<String, DesiredPod> = BTreeMap::new();
        for sb in sandboxes {
            let Some(uid) = sb.labels.get(keys::POD_UID) else { continue };
            if wanted.contains(&uid.as_str())
                || orphans.contains_key(uid)
                || self.terminating.contains_key(uid)
            {
                continue;
            }
            let key = PodKey::new(
                sb.labels.get(keys::POD_NAMESPACE).cloned().unwrap_or_else(|| "default".into()),
                sb.labels.get(keys::POD_NAME).cloned().unwrap_or_default(),
            );
            let mut pod: Pod = sb
                .annotations
                .get(keys::POD_SPEC)
                .and_then(|j| serde_json::from_str(j).ok())
                .unwrap_or_default();
            let source = PodSource::parse(sb.annotations.get(keys::MANIFEST_FILE).map_or("", String::as_str));
            if !ours(&source) {
                continue;
            }
            let keep = source.manifest().is_some_and(|file| file_broken(set, file));
            if keep {
                // The sandbox's spec may be older than what runs: keep what runs as it is.
                pod.metadata.annotations.get_or_insert_default().insert(keys::STAND_IN.into(), "true".into());
            }
            let d = DesiredPod {
                key,
                uid: uid.clone(),
                pod: Arc::new(pod),
                source,
                doc: 0,
                warnings: Vec::new(),
            };
            if keep && d.pod.spec.is_some() && !self.running.contains_key(&d.key) {
                // Its manifest is broken now: keep running what was last good, from the spec the
                // sandbox carries, until the file is fixed or removed.
                info!(pod = %d.key, uid = %uid, source = %d.source_text(), "manifest is broken; keeping the running pod");
                self.start(d);
                continue;
            }
            orphans.insert(uid.clone(), d);
        }
        // Containers whose sandbox is gone already (an agent killed while removing their pod).
        for c in containers {
            let Some(uid) = c.labels.get(keys::POD_UID) else { continue };
            let source = c.annotations.get(keys::MANIFEST_FILE).map(|f| PodSource::parse(f));
            let mine = source.as_ref().is_none_or(|s| ours(s));
            if !mine
                || wanted.contains(&uid.as_str())
                || orphans.contains_key(uid)
                || self.terminating.contains_key(uid)
                || self.running.values().any(|r| &r.uid == uid)
            {
                continue;
            }
            let key = PodKey::new(
                c.labels.get(keys::POD_NAMESPACE).cloned().unwrap_or_else(|| "default".into()),
                c.labels.get(keys::POD_NAME).cloned().unwrap_or_default(),
            );
            let d = DesiredPod {
                key,
                uid: uid.clone(),
                pod: Arc::new(Pod::default()),
                source: source.unwrap_or_else(|| PodSource::File(PathBuf::new())),
                doc: 0,
                warnings: Vec::new(),
            };
            orphans.insert(uid.clone(), d);
        }
        for (uid, d) in orphans {
            info!(pod = %d.key, uid = %uid, "terminating pod whose manifest is gone");
            let key = d.key.clone();
            let grace = set.deleting.get(&key).filter(|g| g.uid == uid).map(|g| g.grace);
            let tx = self.spawn(d, Desire::Terminate { remove: true, grace, node_shutdown: false });
            self.terminating.insert(uid, (key, tx));
        }
        self.reap_leftover_dirs(set).await;
    }

    /// What a pod removal leaves if the agent dies halfway (after the sandbox went, before the
    /// directories did): the pod dir (volumes), its log dir, its legacy log links and cgroups of
    /// a UID that no manifest wants and no worker handles. The sandbox and containers are gone by
    /// then (a pod that still has them is an orphan that a worker terminates first).
    pub async fn reap_leftover_dirs(&self, set: &ManifestSet) {
        if !self.api_reaped {
            // Cluster mode before the API's pods are known: an API pod's dir is not a leftover.
            return;
        }
        let busy: HashSet<String> = set
            .pods
            .values()
            .map(|d| d.uid.clone())
            .chain(self.running.values().map(|r| r.uid.clone()))
            .chain(self.terminating.keys().cloned())
            .collect();
        let node = self.ctx.node.clone();
        // Directory walks and tree removals block: on the blocking pool. The supervisor waits
        // for them, so no worker starts meanwhile for a UID found idle here.
        match tokio::task::spawn_blocking(move || reap_leftovers(&node, &busy)).await {
            Ok(reaped) => {
                for uid in reaped {
                    self.ctx.cgroups.remove_pod(&uid).await;
                }
            }
            Err(e) => warn!(error = %e, "removing what is left of earlier pods failed"),
        }
    }

    /// Waits until every worker started so far has finished its first sync (or `limit` passes).
    pub async fn wait_first_syncs(&mut self, limit: Duration) {
        let all = std::mem::take(&mut self.first_syncs);
        let _ = tokio::time::timeout(limit, async {
            for rx in all {
                let _ = rx.await;
            }
        })
        .await;
    }

    /// Runs until cancelled: applies manifest changes and starts pods that waited for an old UID.
    pub async fn run(mut self, mut manifests: watch::Receiver<ManifestSet>) {
        // Whatever changed since the caller's first look.
        let mut current = manifests.borrow_and_update().clone();
        self.apply(&current);
        // Housekeeping: leftovers of pods removed by an agent that died halfway.
        let mut housekeeping = tokio::time::interval(Duration::from_secs(60));
        housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The loop's heartbeat (/healthz, watchdog): it only beats while the loop turns.
        let mut beat = tokio::time::interval(crate::health::SYNC_LOOP_BEAT);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = beat.tick() => self.ctx.registry.liveness().sync_loop_beat(),
                _ = self.cancel.cancelled() => break,
                r = manifests.changed() => {
                    if r.is_err() { break }
                    current = manifests.borrow_and_update().clone();
                    if current.api_synced && !self.api_reaped {
                        self.reap_api_orphans(&current).await;
                    }
                    self.apply(&current);
                }
                _ = housekeeping.tick() => self.reap_leftover_dirs(&current).await,
                Some(done) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    let Ok((key, uid)) = done else { continue };
                    self.finished(key, uid);
                }
                Some(request) = next_eviction(&mut self.evictions) => self.evict(request),
                Some(event) = next_request(&mut self.shutdown) => match event {
                    NodeShutdown::Stop(request) => self.shut_down_pods(request, &mut beat).await,
                    NodeShutdown::Cancelled => {
                        info!(stopped = self.stopped_for_shutdown.len(), "node shutdown cancelled: pods may start again");
                        self.shut_down = false;
                        self.apply(&current);
                    }
                },
            }
        }
        // The agent is stopping: workers end without touching containers.
        while self.tasks.join_next().await.is_some() {}
    }

    /// A worker has ended: its pod is gone, and a new UID waiting for it may start.
    fn finished(&mut self, key: PodKey, uid: String) {
        self.report_gone(&key, &uid);
        if self.terminating.remove(&uid).is_some() {
            let still = self.terminating.values().any(|(k, _)| k == &key);
            if !still && !self.shut_down {
                if let Some(d) = self.pending.remove(&key) {
                    self.start(d);
                }
            }
        } else if self.running.get(&key).is_some_and(|r| r.uid == uid) {
            self.running.remove(&key);
        }
    }

    /// Graceful node shutdown (the kubelet's `processShutdownEvent`): the running pods are
    /// stopped group by group, lowest priority first, each pod with its group's grace (or its
    /// own, if shorter) and marked Failed for the shutdown; the next group starts when every pod
    /// of this one has stopped or its period has passed. Nothing starts afterwards.
    async fn shut_down_pods(&mut self, request: ShutdownRequest, beat: &mut tokio::time::Interval) {
        self.shut_down = true;
        self.pending.clear();
        let mut members: Vec<Vec<PodKey>> = vec![Vec::new(); request.groups.len()];
        for (key, r) in &self.running {
            if let Desire::Run(d) | Desire::Evict(d, _) = &*r.tx.borrow() {
                let group = shutdown::group_of(&request.groups, shutdown::priority(&d.pod));
                members[group].push(key.clone());
            }
        }
        for (group, keys) in request.groups.iter().zip(members) {
            if keys.is_empty() {
                continue;
            }
            info!(
                pods = keys.len(),
                priority = group.priority,
                period_s = group.period.as_secs(),
                "node shutdown: stopping pods"
            );
            let mut stopping = HashSet::new();
            for key in keys {
                let Some(r) = self.running.remove(&key) else { continue };
                let grace = match &*r.tx.borrow() {
                    Desire::Run(d) | Desire::Evict(d, _) => shutdown::pod_grace(group, &d.pod),
                    Desire::Terminate { .. } => group.period,
                };
                let _ =
                    r.tx.send(Desire::Terminate { remove: false, grace: Some(grace), node_shutdown: true });
                stopping.insert(r.uid.clone());
                self.stopped_for_shutdown.insert(r.uid.clone());
                self.terminating.insert(r.uid, (key, r.tx));
            }
            let period = tokio::time::sleep(group.period);
            tokio::pin!(period);
            while !stopping.is_empty() {
                tokio::select! {
                    _ = self.cancel.cancelled() => return,
                    _ = &mut period => {
                        warn!(left = stopping.len(), "node shutdown: pods still stopping when their group's period ended");
                        break;
                    }
                    // The sync loop is busy, not stuck: the watchdog keeps getting its beats.
                    _ = beat.tick() => self.ctx.registry.liveness().sync_loop_beat(),
                    Some(done) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                        let Ok((key, uid)) = done else { continue };
                        stopping.remove(&uid);
                        self.finished(key, uid);
                    }
                }
            }
        }
        info!("node shutdown: every pod stopped");
        let _ = request.done.send(());
    }
}

/// The next shutdown request, or never without graceful node shutdown.
async fn next_request(requests: &mut Option<mpsc::Receiver<NodeShutdown>>) -> Option<NodeShutdown> {
    match requests {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The next eviction request, or never without eviction.
async fn next_eviction(requests: &mut Option<mpsc::Receiver<EvictRequest>>) -> Option<EvictRequest> {
    match requests {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Does the current set report an error for `file` (or for the whole directory it is in)?
fn file_broken(set: &ManifestSet, file: &std::path::Path) -> bool {
    set.problems.iter().any(|p| {
        p.kind == ProblemKind::Error && (p.file == file || file.parent().is_some_and(|dir| p.file == dir))
    })
}

fn is_api(d: &DesiredPod) -> bool {
    d.source.is_api()
}
