//! The agent's long-lived loops (the PLEG, its servers, the cluster loops), owned by one
//! `JoinSet` under a name each. They run until the agent stops; one that ends before (returns or
//! panics) is a fault nothing repairs (a Lease no longer renewed, statuses no longer written),
//! so it is logged at error level and reported to [`crate::health::Liveness`]: `/healthz` names
//! it and the systemd watchdog is no longer fed, so systemd restarts the agent (its containers
//! keep running). Tasks that end by design (pod workers, connections, streams) are not here.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;

use tokio::sync::{mpsc, watch};
use tokio::task::{JoinError, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error};

use crate::registry::Registry;

type Loop = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A handle that spawns named long-lived loops into the owner's set; cheap to clone.
#[derive(Clone)]
pub struct Tasks {
    spawn: mpsc::UnboundedSender<(&'static str, Loop)>,
    /// The names of the loops that have ended, for whatever reason.
    ended: watch::Receiver<BTreeSet<&'static str>>,
}

impl Tasks {
    /// Starts the owner. A loop that ends before `stopping` fires is reported to `registry`'s
    /// liveness.
    pub fn start(registry: Registry, stopping: CancellationToken) -> Tasks {
        let (spawn, rx) = mpsc::unbounded_channel();
        let (ended_tx, ended) = watch::channel(BTreeSet::new());
        tokio::spawn(own(rx, registry, stopping, ended_tx));
        Tasks { spawn, ended }
    }

    /// Runs `task` as the long-lived loop `name` (a name says what stopped in logs and
    /// `/healthz`: "node lease", "pod status writer").
    pub fn spawn(&self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        if self.spawn.send((name, Box::pin(task))).is_err() {
            // The owner is gone only when the runtime is shutting down.
            debug!(task = name, "not started: the agent is shutting down");
        }
    }

    /// Waits until the loop `name` has ended (at once if it has already).
    pub async fn ended(&self, name: &'static str) {
        let mut ended = self.ended.clone();
        let _ = ended.wait_for(|names| names.contains(name)).await;
    }
}

/// The owner: spawns what it is sent, and reports each loop as it ends.
async fn own(
    mut spawn: mpsc::UnboundedReceiver<(&'static str, Loop)>,
    registry: Registry,
    stopping: CancellationToken,
    ended: watch::Sender<BTreeSet<&'static str>>,
) {
    let mut set = JoinSet::new();
    let mut names: HashMap<tokio::task::Id, &'static str> = HashMap::new();
    let mut open = true;
    while open || !set.is_empty() {
        tokio::select! {
            s = spawn.recv(), if open => match s {
                Some((name, task)) => {
                    let handle = set.spawn(task);
                    names.insert(handle.id(), name);
                }
                None => open = false,
            },
            Some(done) = set.join_next_with_id() => {
                let (id, failure) = match done {
                    Ok((id, ())) => (id, None),
                    Err(e) => (e.id(), Some(e)),
                };
                let name = names.remove(&id).unwrap_or("unnamed loop");
                report(&registry, &stopping, name, failure);
                ended.send_modify(|names| {
                    names.insert(name);
                });
            }
        }
    }
}

fn report(registry: &Registry, stopping: &CancellationToken, name: &'static str, failure: Option<JoinError>) {
    let panicked = failure.as_ref().is_some_and(JoinError::is_panic);
    if stopping.is_cancelled() {
        return debug!(task = name, panicked, "loop ended (the agent is stopping)");
    }
    match failure {
        Some(e) if e.is_panic() => {
            let payload = e.into_panic();
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            error!(task = name, panic = %message, "a long-lived loop panicked; the agent is unhealthy until restarted");
        }
        Some(e) => {
            error!(task = name, error = %e, "a long-lived loop was cancelled; the agent is unhealthy until restarted")
        }
        None => error!(task = name, "a long-lived loop ended; the agent is unhealthy until restarted"),
    }
    registry.liveness().loop_ended(name, panicked);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::Unhealthy;

    fn ended_loops(registry: &Registry) -> Vec<Unhealthy> {
        let problems = registry.liveness().check().err().unwrap_or_default();
        problems.into_iter().filter(|p| matches!(p, Unhealthy::LoopEnded { .. })).collect()
    }

    /// A loop that panics or returns while the agent runs is reported by name; one still running
    /// is not.
    #[tokio::test]
    async fn a_loop_that_ends_early_is_reported() {
        let registry = Registry::default();
        let stopping = CancellationToken::new();
        let tasks = Tasks::start(registry.clone(), stopping.clone());
        tasks.spawn("node lease", async { panic!("lease client gone") });
        tasks.spawn("pod status writer", async {});
        tasks.spawn("relist", std::future::pending());
        tasks.ended("node lease").await;
        tasks.ended("pod status writer").await;
        let mut got = ended_loops(&registry);
        got.sort_by_key(|p| p.to_string());
        assert_eq!(
            got,
            [
                Unhealthy::LoopEnded { name: "node lease", panicked: true },
                Unhealthy::LoopEnded { name: "pod status writer", panicked: false },
            ]
        );
    }

    /// Loops that end because the agent stops are no fault.
    #[tokio::test]
    async fn loops_ending_while_stopping_are_not_reported() {
        let registry = Registry::default();
        let stopping = CancellationToken::new();
        let tasks = Tasks::start(registry.clone(), stopping.clone());
        let cancel = stopping.clone();
        tasks.spawn("relist", async move { cancel.cancelled().await });
        stopping.cancel();
        tasks.ended("relist").await;
        assert_eq!(ended_loops(&registry), []);
    }
}
