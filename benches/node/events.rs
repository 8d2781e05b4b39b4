//! How the benchmark sees containers start and stop: the runtime's CRI event stream, recorded
//! with the moment each event arrived, or (on a runtime without it) `ListContainers` every 5 ms.
//! Both the baseline's pods and crilet's are observed by this one observer, the same way; the
//! agent itself is never polled for this.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crilet::cri::{CriClient, api};
use crilet::model::keys;
use tokio::sync::Notify;

/// The fallback's polling period (no event stream).
pub const LIST_POLL: Duration = Duration::from_millis(5);

/// One CRI event as it arrived.
#[derive(Clone, Debug)]
pub struct Seen {
    /// When the benchmark received it.
    pub at: Instant,
    /// The same moment on the wall clock (ns since the epoch).
    pub wall: i64,
    pub kind: api::ContainerEventType,
    /// The runtime's own timestamp of the event (ns), 0 if it gave none.
    pub created_at: i64,
    pub id: String,
    /// The event is about the sandbox itself (its id is the sandbox's).
    pub sandbox: bool,
    pub namespace: String,
    pub pod: String,
    /// Empty for a sandbox event.
    pub container: String,
    /// The container's CRI `finished_at` as the event's status carries it (0 if none).
    pub finished_at: i64,
}

/// (pod name, container name).
pub type Key = (String, String);

/// The recorded event stream (or nothing, when the runtime has none).
pub struct Events {
    log: Mutex<Vec<Seen>>,
    notify: Notify,
    /// Whether the runtime has `GetContainerEvents`.
    pub live: bool,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Events {
    fn drop(&mut self) {
        if let Some(t) = self.task.lock().unwrap().take() {
            t.abort();
        }
    }
}

pub fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos() as i64
}

fn record(ev: api::ContainerEventResponse) -> Option<Seen> {
    let (at, wall) = (Instant::now(), now_ns());
    let kind = api::ContainerEventType::try_from(ev.container_event_type).ok()?;
    let sb = ev.pod_sandbox_status.as_ref();
    let meta = sb.and_then(|s| s.metadata.as_ref());
    let status = ev.containers_statuses.iter().find(|c| c.id == ev.container_id);
    let label = |k: &str| status.and_then(|s| s.labels.get(k).cloned()).unwrap_or_default();
    let namespace = meta.map(|m| m.namespace.clone()).unwrap_or_else(|| label(keys::POD_NAMESPACE));
    let pod = meta.map(|m| m.name.clone()).unwrap_or_else(|| label(keys::POD_NAME));
    let sandbox = sb.is_some_and(|s| s.id == ev.container_id);
    Some(Seen {
        at,
        wall,
        kind,
        created_at: ev.created_at,
        sandbox,
        namespace,
        pod,
        container: status.and_then(|s| s.metadata.as_ref()).map(|m| m.name.clone()).unwrap_or_default(),
        finished_at: status.map_or(0, |s| s.finished_at),
        id: ev.container_id,
    })
}

impl Events {
    /// Subscribes to the runtime's event stream. containerd (grpc-go) sends the response headers
    /// only with the first event but refuses an unimplemented call at once, so a call still
    /// pending after a moment counts as subscribed (as crilet itself does).
    pub async fn open(cri: &CriClient) -> Arc<Events> {
        let ev = Arc::new(Events {
            log: Mutex::new(Vec::new()),
            notify: Notify::new(),
            live: true,
            task: Mutex::new(None),
        });
        let (etx, erx) = tokio::sync::oneshot::channel();
        let (cri2, weak) = (cri.clone(), Arc::downgrade(&ev));
        let task = tokio::spawn(async move {
            match cri2.container_events().await {
                Err(e) => {
                    let _ = etx.send(e);
                }
                Ok(mut stream) => loop {
                    let msg = stream.message().await;
                    let Some(ev) = weak.upgrade() else { return };
                    match msg {
                        Ok(Some(m)) => {
                            if let Some(s) = record(m) {
                                ev.log.lock().unwrap().push(s);
                                ev.notify.notify_waiters();
                            }
                        }
                        Ok(None) | Err(_) => {
                            eprintln!("the CRI event stream ended; waits now time out");
                            return;
                        }
                    }
                },
            }
        });
        match tokio::time::timeout(Duration::from_secs(1), erx).await {
            Ok(Ok(e)) if e.is_unimplemented() => Arc::new(Events {
                log: Mutex::new(Vec::new()),
                notify: Notify::new(),
                live: false,
                task: Mutex::new(None),
            }),
            Ok(Ok(e)) => panic!("GetContainerEvents: {e}"),
            _ => {
                *ev.task.lock().unwrap() = Some(task);
                ev
            }
        }
    }

    pub fn how(&self) -> &'static str {
        if self.live {
            "the CRI event stream (GetContainerEvents): the arrival of CONTAINER_STARTED_EVENT"
        } else {
            "ListContainers every 5 ms (the runtime has no CRI event stream): the first list showing it running"
        }
    }

    /// A position in the log; waits look only at events after it.
    pub fn mark(&self) -> usize {
        self.log.lock().unwrap().len()
    }

    /// Waits until every event `pick` accepts after `mark` has arrived, or `deadline` (then
    /// returns what came). `pick` returns the key an event fills; the first event for a key wins.
    async fn wait_for<K, F>(
        &self,
        mark: usize,
        want: &HashSet<K>,
        deadline: Instant,
        pick: F,
    ) -> HashMap<K, Seen>
    where
        K: std::hash::Hash + Eq + Clone + std::fmt::Debug,
        F: Fn(&Seen) -> Option<K>,
    {
        let mut got: HashMap<K, Seen> = HashMap::new();
        let mut cursor = mark;
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let log = self.log.lock().unwrap();
                for s in &log[cursor.min(log.len())..] {
                    if let Some(k) = pick(s).filter(|k| want.contains(k)) {
                        got.entry(k).or_insert_with(|| s.clone());
                    }
                }
                cursor = log.len();
            }
            if got.len() == want.len() {
                return got;
            }
            if tokio::time::timeout_at(deadline.into(), notified).await.is_err() {
                return got;
            }
        }
    }

    /// When each (pod, container) of `want` in `namespace` was first seen running after `mark`.
    pub async fn wait_started(
        &self,
        cri: &CriClient,
        mark: usize,
        namespace: &str,
        want: HashSet<Key>,
        deadline: Instant,
    ) -> HashMap<Key, Instant> {
        if self.live {
            let ns = namespace.to_string();
            let got = self
                .wait_for(mark, &want, deadline, |s| {
                    (s.kind == api::ContainerEventType::ContainerStartedEvent
                        && !s.sandbox
                        && s.namespace == ns)
                        .then(|| (s.pod.clone(), s.container.clone()))
                })
                .await;
            let missing: Vec<_> = want.iter().filter(|k| !got.contains_key(*k)).take(5).collect();
            assert!(
                missing.is_empty(),
                "{namespace}: no CONTAINER_STARTED_EVENT in time for {} of {} containers (e.g. {missing:?})",
                want.len() - got.len(),
                want.len()
            );
            return got.into_iter().map(|(k, s)| (k, s.at)).collect();
        }
        poll_started(cri, namespace, want, deadline, LIST_POLL).await
    }

    /// The stop events of one pod after `mark`: its containers `names` and its sandbox (key
    /// ""); whatever arrived by `deadline`.
    pub async fn wait_stopped(
        &self,
        mark: usize,
        namespace: &str,
        pod: &str,
        names: &[&str],
        deadline: Instant,
    ) -> HashMap<String, Seen> {
        let want: HashSet<String> = names.iter().map(|n| n.to_string()).chain([String::new()]).collect();
        let (ns, pod) = (namespace.to_string(), pod.to_string());
        self.wait_for(mark, &want, deadline, |s| {
            (s.kind == api::ContainerEventType::ContainerStoppedEvent && s.namespace == ns && s.pod == pod)
                .then(|| if s.sandbox { String::new() } else { s.container.clone() })
        })
        .await
    }
}

/// The fallback, and the outside-in observation of bursts: the running containers
/// (`ListContainers`, state running) every `period`; the first list that shows a container of
/// `namespace` running is its time.
pub async fn poll_started(
    cri: &CriClient,
    namespace: &str,
    want: HashSet<Key>,
    deadline: Instant,
    period: Duration,
) -> HashMap<Key, Instant> {
    let mut got = HashMap::new();
    while got.len() < want.len() {
        assert!(
            Instant::now() < deadline,
            "{} of {} containers not running in time",
            want.len() - got.len(),
            want.len()
        );
        if let Ok(cs) = cri.running_containers().await {
            let at = Instant::now();
            for c in cs.iter().filter(|c| c.labels.get(keys::POD_NAMESPACE).is_some_and(|n| n == namespace)) {
                let key = (
                    c.labels.get(keys::POD_NAME).cloned().unwrap_or_default(),
                    c.labels.get(keys::CONTAINER_NAME).cloned().unwrap_or_default(),
                );
                if want.contains(&key) {
                    got.entry(key).or_insert(at);
                }
            }
        }
        tokio::time::sleep(period).await;
    }
    got
}
