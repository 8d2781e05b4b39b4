//! Container log rotation, as the kubelet's container log manager does it: every monitor
//! interval, each running container of this agent's pods whose log file (the path its CRI status
//! gives) reached the size limit has its older rotated files trimmed and gzip-compressed, its
//! current file renamed to `<log>.<YYYYMMDD-hhmmss>`, and the runtime told to reopen the path
//! (CRI `ReopenContainerLog`). Decisions are pure ([`plan`]); [`rotate`] does the I/O.
//!
//! Removing the logs of a removed container is left to the pod workers
//! ([`remove_container_logs`] removes the rotated files too, as the kubelet's `Clean`).

pub mod plan;
mod rotate;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::cri::CriClient;
use crate::model::keys;
use crate::quantity::Quantity;

/// Containers checked at once. Rotation is mostly disk-bound (compression of one file per
/// rotation), so a few workers keep one slow container from delaying the others without
/// contending much for the disk (the kubelet's `containerLogMaxWorkers` defaults to 1).
const MAX_WORKERS: usize = 4;
/// How long a stopping agent lets in-flight rotations finish before abandoning them (a rotation
/// cut between rename and reopen is repaired by the next pass: a missing log is reopened).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// The rotation settings (`--container-log-max-size`, `--container-log-max-files`,
/// `--container-log-monitor-interval`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Rotate once the current file holds this many bytes or more.
    pub max_size: u64,
    /// Files kept per container log: the current one plus rotated ones (≥ 2).
    pub max_files: usize,
    /// How often every running container's log is checked.
    pub monitor_interval: Duration,
}

/// A rotation setting that cannot be used; the agent refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("invalid --container-log-max-size {value:?}: {reason}")]
    MaxSize { value: String, reason: &'static str },
    #[error(
        "invalid --container-log-max-files {0}: must be 2 or more (the current file and at least one rotated file)"
    )]
    MaxFiles(i64),
    #[error("invalid --container-log-monitor-interval {value:?}: {reason}")]
    MonitorInterval { value: String, reason: &'static str },
}

impl Policy {
    pub const DEFAULT_MAX_SIZE: &str = "10Mi";
    pub const DEFAULT_MAX_FILES: i64 = 5;
    pub const DEFAULT_MONITOR_INTERVAL: &str = "10s";

    /// Validates the settings (absent ones take the kubelet's defaults), as the kubelet's
    /// config validation does. Unlike the kubelet (at least 3 s), any positive interval is
    /// accepted, so tests can rotate quickly.
    pub fn parse(
        max_size: Option<&str>,
        max_files: Option<i64>,
        monitor_interval: Option<&str>,
    ) -> Result<Self, PolicyError> {
        let size_text = max_size.unwrap_or(Self::DEFAULT_MAX_SIZE);
        let size_err = |reason| PolicyError::MaxSize { value: size_text.to_string(), reason };
        let q = Quantity::parse(size_text).ok_or_else(|| size_err("not a quantity (e.g. 10Mi, 50M, 1Gi)"))?;
        let milli = q.milli_value().ok_or_else(|| size_err("too large"))?;
        if milli % 1000 != 0 {
            return Err(size_err("must be a whole number of bytes"));
        }
        let bytes = u64::try_from(milli / 1000).map_err(|_| size_err("must be greater than zero"))?;
        if bytes == 0 {
            return Err(size_err("must be greater than zero"));
        }
        let files = max_files.unwrap_or(Self::DEFAULT_MAX_FILES);
        let files = usize::try_from(files).ok().filter(|f| *f >= 2).ok_or(PolicyError::MaxFiles(files))?;
        let interval_text = monitor_interval.unwrap_or(Self::DEFAULT_MONITOR_INTERVAL);
        let interval_err = |reason| PolicyError::MonitorInterval { value: interval_text.to_string(), reason };
        let interval = plan::parse_go_duration(interval_text)
            .ok_or_else(|| interval_err("not a duration (e.g. 10s, 500ms, 1m)"))?;
        if interval.is_zero() {
            return Err(interval_err("must be greater than zero"));
        }
        Ok(Self { max_size: bytes, max_files: files, monitor_interval: interval })
    }
}

/// Removes a container's log file and every file rotated from it (`<log>.*`), as the kubelet's
/// `Clean` does when the container is removed. Files already gone are no error.
pub fn remove_container_logs(log_path: &Path) -> std::io::Result<()> {
    let (Some(dir), Some(name)) = (log_path.parent(), log_path.file_name().and_then(|n| n.to_str())) else {
        return Ok(());
    };
    let prefix = format!("{name}.");
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let file = entry?.file_name();
        let Some(file) = file.to_str() else { continue };
        if file == name || file.starts_with(&prefix) {
            match std::fs::remove_file(dir.join(file)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    Ok(())
}

/// A running container whose log directory is under this agent's `--pod-logs-dir`.
struct Candidate {
    id: String,
    /// Where this agent puts its log (`<pod dir>/<name>/<attempt>.log`, DESIGN.md's layout),
    /// from the list's labels and metadata: taken when that file exists, so a new container's
    /// first pass costs no status call.
    laid_out: Option<PathBuf>,
}

/// Runs the rotation loop until `cancel`: each interval, every running container of this agent
/// gets a check on a bounded pool of workers. A container still being handled from an earlier
/// pass is skipped (as the kubelet's work queue dedupes it), so one slow container holds up
/// neither the others nor the next pass.
pub async fn run(cri: CriClient, pod_logs_dir: PathBuf, policy: Policy, cancel: CancellationToken) {
    info!(
        max_size = policy.max_size,
        max_files = policy.max_files,
        interval = ?policy.monitor_interval,
        workers = MAX_WORKERS,
        "container log rotation started"
    );
    let mut tick = tokio::time::interval(policy.monitor_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let workers = Arc::new(Semaphore::new(MAX_WORKERS));
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut in_flight: HashMap<tokio::task::Id, String> = HashMap::new();
    let paths = Arc::new(rotate::LogPaths::default());
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tick.tick() => {}
        }
        while let Some(done) = tasks.try_join_next_with_id() {
            let task = match done {
                Ok((task, ())) => task,
                Err(e) => {
                    warn!(error = %e, "a log rotation task failed");
                    e.id()
                }
            };
            in_flight.remove(&task);
        }
        let candidates = match running_containers(&cri, &pod_logs_dir).await {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "cannot list containers for log rotation; retrying next interval");
                continue;
            }
        };
        paths.retain(&candidates.iter().map(|c| c.id.as_str()).collect());
        let busy: HashSet<&String> = in_flight.values().collect();
        let fresh: Vec<Candidate> = candidates.into_iter().filter(|c| !busy.contains(&c.id)).collect();
        for c in fresh {
            let (cri, dir, workers, paths) =
                (cri.clone(), pod_logs_dir.clone(), workers.clone(), paths.clone());
            let span = info_span!("logrotate", container = %c.id, path = tracing::field::Empty);
            let id = c.id.clone();
            let handle = tasks.spawn(
                async move {
                    let Ok(_permit) = workers.acquire_owned().await else { return };
                    // Boxed: a finished task's slot stays allocated until the next pass joins
                    // it, and 220 of them at the check's full size add up to a megabyte.
                    let laid_out = c.laid_out.as_deref();
                    Box::pin(rotate::check_container(&cri, &c.id, laid_out, &dir, &policy, &paths)).await;
                }
                .instrument(span),
            );
            in_flight.insert(handle.id(), id);
        }
    }
    if tokio::time::timeout(SHUTDOWN_GRACE, async { while tasks.join_next().await.is_some() {} })
        .await
        .is_err()
    {
        debug!(left = tasks.len(), "abandoning unfinished log rotations");
        tasks.shutdown().await;
    }
}

/// The running containers whose pod's log directory (`<ns>_<name>_<uid>`) exists under
/// `pod_logs_dir`: this agent's, even when other agents share the runtime. Checked from the list
/// labels, so no status call is spent on anyone else's containers.
async fn running_containers(
    cri: &CriClient,
    pod_logs_dir: &Path,
) -> Result<Vec<Candidate>, crate::cri::CriError> {
    // Containers carry the pod's labels but not the sandbox's managed-by mark: list every
    // running one, and keep those whose pod log directory is ours.
    let containers = cri.running_containers().await?;
    Ok(containers
        .into_iter()
        .filter_map(|c| {
            let label = |k: &str| c.labels.get(k).map(String::as_str).unwrap_or_default();
            let pod_dir = pod_logs_dir.join(format!(
                "{}_{}_{}",
                label(keys::POD_NAMESPACE),
                label(keys::POD_NAME),
                label(keys::POD_UID)
            ));
            if label(keys::POD_UID).is_empty() || !pod_dir.is_dir() {
                return None;
            }
            let laid_out = c
                .metadata
                .as_ref()
                .map(|m| pod_dir.join(crate::node::container_log_path(&m.name, m.attempt)));
            Some(Candidate { id: c.id, laid_out })
        })
        .collect())
}

#[cfg(test)]
mod tests;
