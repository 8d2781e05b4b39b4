//! Parsing files off the caller's thread, each on a thread of its own with a deadline, and
//! remembering each file's outcome by content so an unchanged file is never parsed twice.
//!
//! Why: one file must never delay or hide the others. A scan starts every changed file's parse
//! at once (up to [`MAX_PARSE_THREADS`] running), waits for them at most `wait`, and reports a
//! file still being parsed as an error for now (so its running pods are kept); when that parse
//! ends, the owner is woken to scan again. A parse that runs past [`PARSE_DEADLINE`] is refused
//! ("took longer than"), and the same content is never tried again. The threads are plain OS
//! threads, not the async runtime's blocking pool, so stopping the agent never waits for them.
//! A panic in the parser is caught and reported as that file's error.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::limits::{MAX_PARSE_THREADS, PARSE_DEADLINE};
use super::{ManifestProblem, ProblemKind, parse_manifest};
use crate::model::DesiredPod;
use crate::sysctl::{self, Allowlist};

/// One file's parse result: its valid pods and every problem found.
pub(super) type Parsed = (Vec<DesiredPod>, Vec<ManifestProblem>);

/// Stack for a parse thread: deserialization recurses once per nesting level (64 at most) through
/// serde frames that are large in debug builds.
const PARSE_STACK: usize = 16 * 1024 * 1024;

/// The function that parses one file: `parse_manifest` (tests put slow or failing ones in).
type ParseFn = dyn Fn(&Path, &str, &str) -> Parsed + Send + Sync;

/// Parses manifests for one node; cheap to clone (the cache is shared).
#[derive(Clone)]
pub(crate) struct Parser {
    node_name: String,
    /// The sysctls pods may set: a pod setting another is refused, as the kubelet's admission
    /// refuses it.
    sysctls: Arc<Allowlist>,
    shared: Arc<Shared>,
    wake: Option<Arc<dyn Fn() + Send + Sync>>,
    parse: Arc<ParseFn>,
    deadline: Duration,
}

struct Shared {
    state: Mutex<State>,
    done: Condvar,
}

#[derive(Default)]
struct State {
    files: HashMap<PathBuf, Cached>,
    /// Start times of the parse threads still running, by job number.
    live: HashMap<u64, Instant>,
    next_job: u64,
    /// A scan ended with files it could not start (all threads busy): wake the owner when a
    /// thread is free again.
    starved: bool,
}

struct Cached {
    content: Fingerprint,
    outcome: Outcome,
}

enum Outcome {
    Running { started: Instant, reported: bool },
    Done(Parsed),
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    len: usize,
    hash: u64,
}

impl Fingerprint {
    fn of(text: &str) -> Self {
        let mut h = DefaultHasher::new();
        text.hash(&mut h);
        Self { len: text.len(), hash: h.finish() }
    }
}

impl Parser {
    /// A parser with an empty cache that admits the sysctls `sysctls` allows.
    pub fn new(node_name: &str, sysctls: &Allowlist) -> Self {
        let shared = Arc::new(Shared { state: Mutex::new(State::default()), done: Condvar::new() });
        Self {
            node_name: node_name.to_string(),
            sysctls: Arc::new(sysctls.clone()),
            shared,
            wake: None,
            parse: Arc::new(parse_manifest),
            deadline: PARSE_DEADLINE,
        }
    }

    /// The same, with another parse function and deadline (for tests of slow and failing parses).
    #[cfg(test)]
    pub fn with_parse(
        node_name: &str,
        deadline: Duration,
        parse: impl Fn(&Path, &str, &str) -> Parsed + Send + Sync + 'static,
    ) -> Self {
        Self { parse: Arc::new(parse), deadline, ..Self::new(node_name, &Allowlist::default()) }
    }

    /// Calls `wake` when a parse that a scan reported as still running is done.
    pub fn on_late_result(mut self, wake: impl Fn() + Send + Sync + 'static) -> Self {
        self.wake = Some(Arc::new(wake));
        self
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Parses `files` (path and text, in the order wanted back), waiting at most `wait` for the
    /// parses this needs. Every file gets an outcome: its parse, or an error saying it is still
    /// being parsed or took too long.
    pub fn parse_all(&self, files: Vec<(PathBuf, String)>, wait: Duration) -> Vec<(PathBuf, Parsed)> {
        let until = Instant::now() + wait;
        let mut state = self.lock();
        state.files.retain(|path, _| files.iter().any(|(p, _)| p == path));
        let mut queue: Vec<(PathBuf, String, Fingerprint)> = Vec::new();
        let mut wanted = Vec::with_capacity(files.len());
        for (path, text) in files {
            let content = Fingerprint::of(&text);
            if state.files.get(&path).is_none_or(|c| c.content != content) {
                state.files.remove(&path);
                queue.push((path.clone(), text, content));
            }
            wanted.push((path, content));
        }
        queue.reverse(); // popped from the back: file order
        // Files whose thread could not be started: reported for this scan only, tried again at
        // the next.
        let mut failed: HashMap<PathBuf, ManifestProblem> = HashMap::new();
        loop {
            let now = Instant::now();
            let mut running = state.live.values().filter(|t| now - **t < self.deadline).count();
            while running < MAX_PARSE_THREADS {
                let Some((path, text, content)) = queue.pop() else { break };
                if let Err(problem) = self.spawn(&mut state, path.clone(), text, content, now) {
                    failed.insert(path, problem);
                }
                running += 1;
            }
            let settled = queue.is_empty()
                && wanted.iter().all(|(path, _)| match state.files.get(path).map(|c| &c.outcome) {
                    Some(Outcome::Running { started, .. }) => now - *started >= self.deadline,
                    _ => true,
                });
            if settled || now >= until {
                break;
            }
            let next_deadline = state
                .live
                .values()
                .map(|t| *t + self.deadline)
                .filter(|t| *t > now)
                .min()
                .unwrap_or(until)
                .min(until);
            state = self
                .shared
                .done
                .wait_timeout(state, next_deadline - now)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        state.starved = !queue.is_empty();
        let now = Instant::now();
        wanted
            .into_iter()
            .map(|(path, content)| {
                if let Some(problem) = failed.remove(&path) {
                    return (path, (Vec::new(), vec![problem]));
                }
                let parsed = match state.files.get_mut(&path) {
                    Some(Cached { content: c, outcome: Outcome::Done(parsed) }) if *c == content => {
                        parsed.clone()
                    }
                    Some(Cached { outcome: Outcome::Running { started, reported }, .. }) => {
                        *reported = true;
                        (
                            Vec::new(),
                            vec![still_parsing(&path, now - *started >= self.deadline, self.deadline)],
                        )
                    }
                    _ => (Vec::new(), vec![still_parsing(&path, false, self.deadline)]),
                };
                (path, parsed)
            })
            .collect()
    }

    /// Starts one file's parse on its own thread.
    fn spawn(
        &self,
        state: &mut State,
        path: PathBuf,
        text: String,
        content: Fingerprint,
        now: Instant,
    ) -> Result<(), ManifestProblem> {
        let job = state.next_job;
        state.next_job += 1;
        let worker = self.clone();
        let file = path.clone();
        let spawned = std::thread::Builder::new()
            .name("manifest-parse".into())
            .stack_size(PARSE_STACK)
            .spawn(move || worker.run_job(job, &file, &text, content));
        match spawned {
            Ok(_) => {
                state.live.insert(job, now);
                state.files.insert(
                    path,
                    Cached { content, outcome: Outcome::Running { started: now, reported: false } },
                );
                Ok(())
            }
            Err(e) => Err(ManifestProblem::file(
                ProblemKind::Error,
                &path,
                format!("cannot start a thread to parse it ({e}); it is tried again at the next scan"),
            )),
        }
    }

    fn run_job(&self, job: u64, file: &Path, text: &str, content: Fingerprint) {
        let parsed = catch_unwind(AssertUnwindSafe(|| (self.parse)(file, text, &self.node_name)))
            .unwrap_or_else(|panic| {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                let reason = format!(
                    "the manifest parser failed on this file ({what}); please report this as a crilet bug"
                );
                (Vec::new(), vec![ManifestProblem::file(ProblemKind::Error, file, reason)])
            });
        let parsed = admit_sysctls(file, parsed, &self.sysctls);
        let parsed = admit_apparmor(file, parsed, crate::apparmor::host());
        let mut state = self.lock();
        state.live.remove(&job);
        let mut late = std::mem::take(&mut state.starved);
        if let Some(cached) = state.files.get_mut(file).filter(|c| c.content == content) {
            if let Outcome::Running { reported, .. } = cached.outcome {
                late |= reported;
                cached.outcome = Outcome::Done(parsed);
            }
        }
        drop(state);
        self.shared.done.notify_all();
        if late {
            if let Some(wake) = &self.wake {
                wake();
            }
        }
    }
}

/// The kubelet's AppArmor admission for static pods: a pod asking for a profile the host cannot
/// enforce (no AppArmor in its kernel) is not run, never run unconfined; its document gets the
/// kubelet's reason and message as an error, as [`admit_sysctls`] does.
fn admit_apparmor(file: &Path, (pods, mut problems): Parsed, host: &crate::apparmor::Host) -> Parsed {
    let mut admitted = Vec::with_capacity(pods.len());
    for pod in pods {
        match crate::apparmor::admit(&pod.pod, host) {
            None => admitted.push(pod),
            Some(message) => problems.push(ManifestProblem::doc(
                ProblemKind::Error,
                file,
                pod.doc,
                crate::apparmor::asking(&pod.pod),
                format!("{}: {message}", crate::apparmor::NOT_ADMITTED_REASON),
            )),
        }
    }
    (admitted, problems)
}

/// The error for a file without a parse result yet (stable text: it is compared across scans).
fn still_parsing(file: &Path, timed_out: bool, deadline: Duration) -> ManifestProblem {
    let reason = if timed_out {
        format!(
            "parsing took longer than {} s; refusing it (it is not tried again until the file changes)",
            deadline.as_secs_f32()
        )
    } else {
        "still being parsed; its pods are kept as they are until that is done".to_string()
    };
    ManifestProblem::file(ProblemKind::Error, file, reason)
}

/// The kubelet's sysctl admission for static pods: a pod setting a sysctl the node does not
/// allow is not run; its document gets an error with the kubelet's reason and message, so the
/// file is handled as any invalid one (a pod already running from it keeps running).
fn admit_sysctls(file: &Path, (pods, mut problems): Parsed, allow: &Allowlist) -> Parsed {
    let mut admitted = Vec::with_capacity(pods.len());
    for pod in pods {
        match allow.admit(&pod.pod) {
            None => admitted.push(pod),
            Some((i, message)) => problems.push(ManifestProblem::doc(
                ProblemKind::Error,
                file,
                pod.doc,
                Some(format!("spec.securityContext.sysctls[{i}].name")),
                format!("{}: {message}", sysctl::FORBIDDEN_REASON),
            )),
        }
    }
    (admitted, problems)
}
