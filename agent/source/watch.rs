//! Watching the manifest directory (R3.7): inotify through `notify` for prompt changes, plus a
//! full rescan every `resync` and once at start. Each rescan is a [`load_dir`] against the last
//! published set; a new set is published only when it differs. New problems are logged once.
//!
//! The watch is (re)established on every rescan when missing or stale (the directory did not
//! exist yet, or was removed and created again), so a failing watch heals within one resync.
//!
//! Every scan runs on an OS thread of its own, never on the async runtime's workers or its
//! blocking pool: a scan blocks for at most [`SCAN_WAIT`] on parses (a file still being parsed
//! after that counts as broken, and its late result wakes another scan), and stopping the agent
//! never waits for one. Parses are remembered by content across scans, so an unchanged file,
//! however expensive, is parsed once.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::dir::{load_dir_with, manifest_name};
use super::limits::SCAN_WAIT;
use super::pool::Parser;
use super::{ManifestProblem, ManifestSet, ProblemKind};
use crate::sysctl::Allowlist;

/// The kubelet's `fileCheckFrequency` default.
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(20);

/// How long a burst of file events may last before the rescan (editors write in several steps),
/// unless an event says a write is complete.
const SETTLE: Duration = Duration::from_millis(50);
/// Longest a stream of events may postpone the rescan.
const MAX_SETTLE: Duration = Duration::from_secs(1);

/// Watches `dir` (notify/inotify, plus a full rescan every `resync` and once at start) and
/// publishes a new [`ManifestSet`] only when it differs from the last one. Logs each new problem
/// once (warn for errors and conflicts, info for warnings). Stops when `cancel` fires (the
/// sender is dropped then). If the directory does not exist, the set is empty and it keeps
/// checking.
///
/// The first scan is done before this returns, so the receiver's initial value is the real
/// directory content, never a transient empty set; it runs on its own thread, so awaiting this
/// never blocks the runtime. `None` when `cancel` fires before the first scan is done. Must be
/// called within a tokio runtime. The watch itself is the returned loop, for the caller to run
/// (the agent runs it in its task set, which notices if it ends early).
pub async fn watch_dir(
    dir: PathBuf,
    node_name: String,
    sysctls: Allowlist,
    resync: Duration,
    cancel: CancellationToken,
) -> Option<(watch::Receiver<ManifestSet>, impl std::future::Future<Output = ()> + Send + 'static)> {
    // Watch first, then scan: a change between the two is then seen by both, never by neither.
    // One wake-up for any burst of inotify events (and late parse results).
    let events = Arc::new(Wake::default());
    let mut dir_watch = DirWatch { dir: dir.clone(), events: events.clone(), current: None };
    dir_watch.ensure();
    let wake = events.clone();
    let parser = Parser::new(&node_name, &sysctls).on_late_result(move || wake.complete());
    let first = loop {
        match scan(&parser, &dir, ManifestSet::default(), &cancel).await {
            Scan::Done(set) => break set,
            Scan::Cancelled => return None,
            Scan::Failed(e) => {
                warn!(error = %e, "cannot scan the manifest directory; retrying in 1 s");
                tokio::select! {
                    _ = cancel.cancelled() => return None,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    };
    log_new_problems(&[], &first.problems);
    let (tx, rx) = watch::channel(first);
    Some((rx, run(dir, resync, cancel, tx, dir_watch, events, parser)))
}

/// Wakes the rescan loop. `complete` is set by events after which the file is whole (a writer
/// closed it, a rename put it in place, it was removed, a late parse finished): the rescan then
/// runs at once instead of waiting for the burst to settle, which would cost every pod start
/// [`SETTLE`]. Events of a write still going on (create, modify) only wake the settle wait.
#[derive(Default)]
struct Wake {
    notify: Notify,
    complete: AtomicBool,
}

impl Wake {
    fn in_progress(&self) {
        self.notify.notify_one();
    }

    fn complete(&self) {
        self.complete.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    /// Whether a complete event came since the last call.
    fn take_complete(&self) -> bool {
        self.complete.swap(false, Ordering::AcqRel)
    }
}

enum Scan {
    Done(ManifestSet),
    Cancelled,
    Failed(String),
}

/// One scan of the directory on a thread of its own.
async fn scan(parser: &Parser, dir: &Path, previous: ManifestSet, cancel: &CancellationToken) -> Scan {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (parser, dir) = (parser.clone(), dir.to_path_buf());
    let spawned = std::thread::Builder::new().name("manifest-scan".into()).spawn(move || {
        let _span = tracing::trace_span!("manifest_scan").entered();
        let _ = tx.send(load_dir_with(&parser, &dir, &previous, SCAN_WAIT));
    });
    if let Err(e) = spawned {
        return Scan::Failed(format!("cannot start the scan thread: {e}"));
    }
    tokio::select! {
        _ = cancel.cancelled() => Scan::Cancelled,
        r = rx => match r {
            Ok(set) => Scan::Done(set),
            Err(_) => Scan::Failed("the scan thread ended without a result".to_string()),
        },
    }
}

async fn run(
    dir: PathBuf,
    resync: Duration,
    cancel: CancellationToken,
    tx: watch::Sender<ManifestSet>,
    mut dir_watch: DirWatch,
    events: Arc<Wake>,
    parser: Parser,
) {
    let mut ticker = tokio::time::interval(resync.max(Duration::from_millis(10)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await; // the first tick is immediate; the first scan is done already
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = ticker.tick() => {}
            _ = events.notify.notified() => {
                // Let a write in progress settle, so one save is one rescan (but never wait past
                // MAX_SETTLE); a complete write is read at once.
                let deadline = tokio::time::Instant::now() + MAX_SETTLE;
                while !events.take_complete() {
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(SETTLE) => break,
                        _ = tokio::time::sleep_until(deadline) => break,
                        _ = events.notify.notified() => {}
                    }
                }
            }
        }
        dir_watch.ensure();
        let previous = tx.borrow().clone();
        let next = match scan(&parser, &dir, previous.clone(), &cancel).await {
            Scan::Done(next) => next,
            Scan::Cancelled => return,
            Scan::Failed(e) => {
                warn!(error = %e, "manifest scan failed; retrying at the next change or resync");
                continue;
            }
        };
        log_new_problems(&previous.problems, &next.problems);
        tx.send_if_modified(|current| {
            if *current == next {
                return false;
            }
            debug!(pods = next.pods.len(), problems = next.problems.len(), "manifest set changed");
            *current = next;
            true
        });
    }
}

/// The inotify watch on the directory, tied to the directory's identity (device, inode).
struct DirWatch {
    dir: PathBuf,
    events: Arc<Wake>,
    current: Option<(RecommendedWatcher, (u64, u64))>,
}

impl DirWatch {
    /// Makes sure a live watch exists on the directory as it is now.
    fn ensure(&mut self) {
        let identity = std::fs::metadata(&self.dir).ok().filter(|m| m.is_dir()).map(|m| (m.dev(), m.ino()));
        let Some(identity) = identity else {
            self.current = None; // nothing to watch; resync will look again
            return;
        };
        if self.current.as_ref().is_some_and(|(_, watched)| *watched == identity) {
            return;
        }
        match self.start() {
            Ok(watcher) => {
                debug!(dir = %self.dir.display(), "watching manifest directory");
                self.current = Some((watcher, identity));
            }
            Err(e) => {
                warn!(dir = %self.dir.display(), error = %e, "cannot watch manifest directory; relying on resync");
                self.current = None;
            }
        }
    }

    fn start(&self) -> notify::Result<RecommendedWatcher> {
        let events = self.events.clone();
        let dir = self.dir.clone();
        let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            match matters(&dir, &event) {
                Some(Change::Complete) => events.complete(),
                Some(Change::InProgress) => events.in_progress(),
                None => {}
            }
        })?;
        watcher.watch(&self.dir, RecursiveMode::NonRecursive)?;
        Ok(watcher)
    }
}

/// What an event says about the directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    /// A file may be half written (created, modified): wait for the burst to settle.
    InProgress,
    /// The file is whole or gone: rescan now.
    Complete,
}

/// Whether an event can change the set, and how: not our own reads (inotify reports opens and
/// closes of files only read), and not files that are not manifests (an editor's swap file is
/// written every few seconds).
pub(super) fn matters(dir: &Path, event: &notify::Result<notify::Event>) -> Option<Change> {
    let Ok(event) = event else { return Some(Change::Complete) }; // e.g. queue overflow: rescan
    let change = match event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => Change::Complete,
        EventKind::Access(_) => return None,
        EventKind::Create(_) | EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Any) => Change::InProgress,
        EventKind::Modify(ModifyKind::Name(RenameMode::Any | RenameMode::Other)) => Change::InProgress,
        _ => Change::Complete, // renamed in or out, removed, chmod, unknown
    };
    let relevant = event.paths.is_empty()
        || event.paths.iter().any(|p| {
            p == dir || p.parent() != Some(dir) || p.file_name().is_some_and(|n| manifest_name(n).is_ok())
        });
    relevant.then_some(change)
}

/// Logs the problems of `next` that `previous` did not have.
fn log_new_problems(previous: &[ManifestProblem], next: &[ManifestProblem]) {
    let seen: HashSet<&ManifestProblem> = previous.iter().collect();
    for problem in next.iter().filter(|p| !seen.contains(p)) {
        match problem.kind {
            ProblemKind::Error => warn!(problem = %problem, "manifest error"),
            ProblemKind::Conflict => warn!(problem = %problem, "manifest conflict"),
            ProblemKind::Warning => info!(problem = %problem, "manifest warning"),
        }
    }
}
