//! An in-memory runtime for unit tests (`FakeRuntime`): sandboxes and containers kept as CRI
//! keeps them (the configs the agent sent, with their labels and annotations, states, timestamps
//! and exit codes) and answered through the client's own conversions (`convert.rs`), so
//! `observe` shows the engine what containerd would; images present or pullable; and a log of
//! every call. A test plays the world around it: a container exits, a sandbox dies, time passes.
//!
//! What it leaves out: networking (a sandbox gets a made-up IP), processes (exec answers 0),
//! the status cache, and failures the test does not ask for (`fail_next`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::client::RuntimeInfo;
use super::convert::{container_from_status, sandbox_from_status};
use super::{CriError, Runtime, api};
use crate::model::{ObservedContainer, ObservedPod, ObservedSandbox, keys};

/// One call the runtime was asked.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The CRI method (`StopContainer`, ...).
    pub op: &'static str,
    /// `name/attempt` of the container (or of the pod, for a sandbox call); the image of an
    /// image call; the pod UID of `Observe`.
    pub target: String,
    /// `StopContainer`'s and `ExecSync`'s timeout.
    pub timeout: Option<Duration>,
    /// When, on tokio's clock (which a paused test moves).
    pub at: Instant,
}

impl Call {
    /// `op target`, as tests compare them.
    pub fn text(&self) -> String {
        format!("{} {}", self.op, self.target)
    }
}

/// The calls that only read.
const READS: [&str; 6] = ["Observe", "List", "PodSandboxStatus", "ContainerStatus", "ImageStatus", "Version"];

#[derive(Default)]
struct State {
    next_id: u64,
    /// The last timestamp given, so that every object is strictly newer than the one before.
    last_ns: i64,
    sandboxes: BTreeMap<String, api::PodSandboxStatus>,
    containers: BTreeMap<String, Instance>,
    /// Present images, by the name they were pulled as.
    images: BTreeMap<String, api::Image>,
    /// What a pull can fetch.
    registry: BTreeSet<String>,
    /// By container name: how long it takes to exit after SIGTERM, and with which code.
    on_sigterm: HashMap<String, (Duration, i32)>,
    /// Sandboxes `StopPodSandbox` was called on: one that died by itself (`lose_sandbox`) is
    /// not ready but, as in containerd, holds its network until it is stopped.
    stopped: BTreeSet<String>,
    /// By CRI method: how many of its next calls fail (`FakeRuntime::fail_next`).
    failures: HashMap<&'static str, u32>,
    calls: Vec<Call>,
}

struct Instance {
    sandbox_id: String,
    status: api::ContainerStatus,
}

/// The in-memory runtime. Shared as `Arc<FakeRuntime>` by the test and (as `Arc<dyn Runtime>`)
/// by the agent's code under test.
pub struct FakeRuntime {
    state: Mutex<State>,
    /// Bumped on every change of a container's state: a `StopContainer` waiting for an exit wakes.
    changed: watch::Sender<u64>,
}

impl Default for FakeRuntime {
    fn default() -> Self {
        Self { state: Mutex::default(), changed: watch::channel(0).0 }
    }
}

fn wall_ns() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_nanos()).unwrap_or(i64::MAX)
}

/// A stable made-up digest of `what`.
fn digest(what: &str) -> String {
    let h =
        what.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    format!("sha256:{h:016x}{:048x}", 0)
}

/// The image `name` as the image service describes it: an ID, its tag and its repo digest.
fn image(name: &str) -> api::Image {
    let repo = match name.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => name,
    };
    api::Image {
        id: digest(name),
        repo_tags: vec![name.to_string()],
        repo_digests: vec![format!("{repo}@{}", digest(&format!("manifest of {name}")))],
        ..Default::default()
    }
}

fn rpc(op: &'static str, target: &str, code: tonic::Code, message: &str) -> CriError {
    CriError::Rpc { op, target: target.to_string(), code, message: message.to_string() }
}

fn not_found(op: &'static str, target: &str) -> CriError {
    CriError::NotFound { op, target: target.to_string(), kind: "object" }
}

fn label_of(status: &api::ContainerStatus) -> String {
    let name = status.labels.get(keys::CONTAINER_NAME).cloned().unwrap_or_default();
    format!("{name}/{}", status.metadata.as_ref().map_or(0, |m| m.attempt))
}

fn sandbox_label(status: &api::PodSandboxStatus) -> String {
    let m = status.metadata.clone().unwrap_or_default();
    format!("{}/{}", m.name, m.attempt)
}

fn running(status: &api::ContainerStatus) -> bool {
    status.state == api::ContainerState::ContainerRunning as i32
}

impl State {
    fn now(&mut self) -> i64 {
        self.last_ns = wall_ns().max(self.last_ns + 1);
        self.last_ns
    }

    fn record(&mut self, op: &'static str, target: String, timeout: Option<Duration>) {
        self.calls.push(Call { op, target, timeout, at: Instant::now() });
    }

    fn record_on(&mut self, op: &'static str, id: &str, timeout: Option<Duration>) {
        let target = self.target_of(id);
        self.record(op, target, timeout);
    }

    /// Fails this call of `op` on `target` if the test asked for it (`FakeRuntime::fail_next`).
    fn injected(&mut self, op: &'static str, target: &str) -> Result<(), CriError> {
        match self.failures.get_mut(op) {
            Some(n) if *n > 0 => {
                *n -= 1;
                Err(rpc(op, target, tonic::Code::Unknown, "injected failure"))
            }
            _ => Ok(()),
        }
    }

    /// [`State::injected`] for a call on object `id`, named as the call log names it.
    fn injected_on(&mut self, op: &'static str, id: &str) -> Result<(), CriError> {
        let target = self.target_of(id);
        self.injected(op, &target)
    }

    fn target_of(&self, id: &str) -> String {
        match (self.containers.get(id), self.sandboxes.get(id)) {
            (Some(c), _) => label_of(&c.status),
            (None, Some(s)) => sandbox_label(s),
            (None, None) => id.to_string(),
        }
    }

    /// Ends instance `id`'s process with `code` (`reason` as containerd gives it).
    fn exit(&mut self, id: &str, code: i32) {
        let now = self.now();
        let Some(c) = self.containers.get_mut(id) else { return };
        if !running(&c.status) && c.status.state != api::ContainerState::ContainerCreated as i32 {
            return;
        }
        c.status.state = api::ContainerState::ContainerExited as i32;
        c.status.finished_at = now;
        c.status.exit_code = code;
        c.status.reason = if code == 0 { "Completed" } else { "Error" }.to_string();
    }

    fn find_image(&self, reference: &str) -> Option<&api::Image> {
        self.images.values().find(|i| i.id == reference || i.repo_tags.iter().any(|t| t == reference))
    }

    fn list(&self, label: Option<(&str, &str)>) -> (Vec<api::PodSandbox>, Vec<api::Container>) {
        let carries = |labels: &HashMap<String, String>| {
            label.is_none_or(|(k, v)| labels.get(k).is_some_and(|l| l == v))
        };
        let sandboxes = self.sandboxes.values().filter(|s| carries(&s.labels)).map(|s| api::PodSandbox {
            id: s.id.clone(),
            metadata: s.metadata.clone(),
            state: s.state,
            created_at: s.created_at,
            labels: s.labels.clone(),
            annotations: s.annotations.clone(),
            runtime_handler: s.runtime_handler.clone(),
        });
        let containers =
            self.containers.values().filter(|c| carries(&c.status.labels)).map(|c| api::Container {
                id: c.status.id.clone(),
                pod_sandbox_id: c.sandbox_id.clone(),
                metadata: c.status.metadata.clone(),
                image: c.status.image.clone(),
                image_ref: c.status.image_ref.clone(),
                state: c.status.state,
                created_at: c.status.created_at,
                labels: c.status.labels.clone(),
                annotations: c.status.annotations.clone(),
                image_id: c.status.image_id.clone(),
            });
        (sandboxes.collect(), containers.collect())
    }
}

impl FakeRuntime {
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Tells every `StopContainer` waiting for an exit to look again.
    fn wake(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// Images already on the node.
    pub fn with_images(self, names: &[&str]) -> Self {
        self.state().images.extend(names.iter().map(|n| (n.to_string(), image(n))));
        self
    }

    /// Images a pull can fetch.
    pub fn pullable(self, names: &[&str]) -> Self {
        self.state().registry.extend(names.iter().map(|n| n.to_string()));
        self
    }

    /// Containers named `name` take `after` to exit on SIGTERM, with `code` (one that takes
    /// longer than its stop's timeout is SIGKILLed then: 137). By default they exit at once with
    /// 143, as a process without a handler.
    pub fn on_sigterm(&self, name: &str, after: Duration, code: i32) {
        self.state().on_sigterm.insert(name.to_string(), (after, code));
    }

    /// The next `times` calls of CRI method `op`, as the call log names it (`RunPodSandbox`,
    /// `StopPodSandbox`, `RemovePodSandbox`, `CreateContainer`, `StartContainer`,
    /// `StopContainer`, `UpdateContainerResources`, `RemoveContainer`, `ExecSync`, `PullImage`),
    /// fail with `Unknown` and change nothing; they are still in the call log.
    pub fn fail_next(&self, op: &'static str, times: u32) {
        *self.state().failures.entry(op).or_default() += times;
    }

    /// The newest running instance of container `name` exits with `code`, now.
    pub fn exit(&self, name: &str, code: i32) {
        let mut s = self.state();
        let newest = s
            .containers
            .values()
            .filter(|c| {
                running(&c.status) && c.status.labels.get(keys::CONTAINER_NAME).is_some_and(|n| n == name)
            })
            .max_by_key(|c| c.status.created_at)
            .map(|c| c.status.id.clone());
        let id = newest.unwrap_or_else(|| panic!("no running instance of {name} to exit"));
        s.exit(&id, code);
        drop(s);
        self.wake();
    }

    /// Pod `uid`'s ready sandbox dies (its network is gone, as an out-of-band `StopPodSandbox`
    /// does it): it turns NotReady and the runtime SIGKILLs its containers.
    pub fn lose_sandbox(&self, uid: &str) {
        let mut s = self.state();
        let ready = api::PodSandboxState::SandboxReady as i32;
        let id = s
            .sandboxes
            .values()
            .find(|sb| sb.state == ready && sb.labels.get(keys::POD_UID).is_some_and(|u| u == uid))
            .map(|sb| sb.id.clone())
            .unwrap_or_else(|| panic!("pod {uid} has no ready sandbox to lose"));
        stop_sandbox_in(&mut s, &id);
        drop(s);
        self.wake();
    }

    /// Moves every time the runtime reports `by` into the past, as if that much time had gone by
    /// since (the agent's rules read the wall clock, which a paused tokio clock does not move).
    pub fn rewind(&self, by: Duration) {
        let by = i64::try_from(by.as_nanos()).unwrap_or(i64::MAX);
        let back = |t: &mut i64| {
            if *t > 0 {
                *t -= by;
            }
        };
        let mut s = self.state();
        s.sandboxes.values_mut().for_each(|sb| back(&mut sb.created_at));
        for c in s.containers.values_mut() {
            back(&mut c.status.created_at);
            back(&mut c.status.started_at);
            back(&mut c.status.finished_at);
        }
    }

    /// The sandboxes of pod `uid` never stopped by `StopPodSandbox` (`name/attempt`, oldest
    /// first): ready ones, and dead ones whose network is still set up.
    pub fn unstopped_sandboxes(&self, uid: &str) -> Vec<String> {
        let s = self.state();
        let mut left: Vec<&api::PodSandboxStatus> = s
            .sandboxes
            .values()
            .filter(|sb| {
                sb.labels.get(keys::POD_UID).is_some_and(|u| u == uid) && !s.stopped.contains(&sb.id)
            })
            .collect();
        left.sort_by_key(|sb| sb.created_at);
        left.into_iter().map(sandbox_label).collect()
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    /// The calls that changed something since the last time this was asked, as `op target`.
    pub fn take_actions(&self) -> Vec<String> {
        let calls = std::mem::take(&mut self.state().calls);
        calls.iter().filter(|c| !READS.contains(&c.op)).map(Call::text).collect()
    }
}

/// `StopPodSandbox`: every container of the sandbox is SIGKILLed, the sandbox turns NotReady.
fn stop_sandbox_in(s: &mut State, id: &str) {
    let ids: Vec<String> =
        s.containers.values().filter(|c| c.sandbox_id == id).map(|c| c.status.id.clone()).collect();
    for c in ids {
        s.exit(&c, 137);
    }
    if let Some(sb) = s.sandboxes.get_mut(id) {
        sb.state = api::PodSandboxState::SandboxNotready as i32;
    }
}

#[async_trait::async_trait]
impl Runtime for FakeRuntime {
    async fn observe(&self, uid: &str) -> Result<ObservedPod, CriError> {
        let mut s = self.state();
        s.record("Observe", uid.to_string(), None);
        let mut observed = ObservedPod { uid: uid.to_string(), ..Default::default() };
        let (sandboxes, containers) = s.list(Some((keys::POD_UID, uid)));
        observed.sandboxes =
            sandboxes.iter().filter_map(|sb| s.sandboxes.get(&sb.id)).map(sandbox_from_status).collect();
        observed.containers = containers
            .iter()
            .filter_map(|c| s.containers.get(&c.id))
            .map(|c| container_from_status(&c.status, &c.sandbox_id))
            .collect();
        observed.sandboxes.sort_by_key(|s| std::cmp::Reverse(s.created_at));
        observed.containers.sort_by_key(|c| std::cmp::Reverse(c.created_at));
        Ok(observed)
    }

    fn statuses_generation(&self) -> Option<u64> {
        None
    }

    fn keep_statuses(&self, _since: Option<u64>, _observed: ObservedPod) {}

    async fn list_all(
        &self,
        label: Option<(&str, &str)>,
    ) -> Result<(Vec<api::PodSandbox>, Vec<api::Container>), CriError> {
        let mut s = self.state();
        s.record("List", label.map(|(k, v)| format!("{k}={v}")).unwrap_or_default(), None);
        Ok(s.list(label))
    }

    async fn sandbox_status(&self, id: &str) -> Result<ObservedSandbox, CriError> {
        let mut s = self.state();
        s.record_on("PodSandboxStatus", id, None);
        s.sandboxes.get(id).map(sandbox_from_status).ok_or_else(|| not_found("PodSandboxStatus", id))
    }

    async fn container_status(&self, id: &str, sandbox_id: &str) -> Result<ObservedContainer, CriError> {
        let mut s = self.state();
        s.record_on("ContainerStatus", id, None);
        let c = s.containers.get(id).ok_or_else(|| not_found("ContainerStatus", id))?;
        Ok(container_from_status(&c.status, sandbox_id))
    }

    async fn run_sandbox(&self, config: api::PodSandboxConfig, handler: &str) -> Result<String, CriError> {
        let mut s = self.state();
        let label = config.metadata.as_ref().map(|m| format!("{}/{}", m.name, m.attempt)).unwrap_or_default();
        if let Err(e) = s.injected("RunPodSandbox", &label) {
            s.record("RunPodSandbox", label, None);
            return Err(e);
        }
        s.next_id += 1;
        let id = format!("sandbox-{}", s.next_id);
        let linux = config.linux.as_ref().and_then(|l| l.security_context.as_ref());
        let options = linux.and_then(|c| c.namespace_options.clone());
        let host_network = options.as_ref().is_some_and(|o| o.network == api::NamespaceMode::Node as i32);
        let ip = if host_network { String::new() } else { format!("10.88.0.{}", s.next_id) };
        let status = api::PodSandboxStatus {
            id: id.clone(),
            metadata: config.metadata,
            state: api::PodSandboxState::SandboxReady as i32,
            created_at: s.now(),
            network: Some(api::PodSandboxNetworkStatus { ip, additional_ips: Vec::new() }),
            linux: Some(api::LinuxPodSandboxStatus { namespaces: Some(api::Namespace { options }) }),
            labels: config.labels,
            annotations: config.annotations,
            runtime_handler: handler.to_string(),
        };
        s.record("RunPodSandbox", sandbox_label(&status), None);
        s.sandboxes.insert(id.clone(), status);
        Ok(id)
    }

    async fn stop_sandbox(&self, id: &str) -> Result<(), CriError> {
        let mut s = self.state();
        s.record_on("StopPodSandbox", id, None);
        s.injected_on("StopPodSandbox", id)?;
        stop_sandbox_in(&mut s, id);
        if s.sandboxes.contains_key(id) {
            s.stopped.insert(id.to_string());
        }
        drop(s);
        self.wake();
        Ok(())
    }

    async fn remove_sandbox(&self, id: &str) -> Result<(), CriError> {
        let mut s = self.state();
        s.record_on("RemovePodSandbox", id, None);
        s.injected_on("RemovePodSandbox", id)?;
        let Some(sb) = s.sandboxes.get(id) else { return Ok(()) };
        if sb.state == api::PodSandboxState::SandboxReady as i32 {
            let msg = "sandbox container is not fully stopped";
            return Err(rpc("RemovePodSandbox", id, tonic::Code::FailedPrecondition, msg));
        }
        s.sandboxes.remove(id);
        s.stopped.remove(id);
        s.containers.retain(|_, c| c.sandbox_id != id);
        Ok(())
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: api::ContainerConfig,
        sandbox_config: api::PodSandboxConfig,
    ) -> Result<String, CriError> {
        let mut s = self.state();
        let reference = config.image.as_ref().map(|i| i.image.clone()).unwrap_or_default();
        let name = config.metadata.as_ref().map(|m| format!("{}/{}", m.name, m.attempt)).unwrap_or_default();
        s.record("CreateContainer", name.clone(), None);
        s.injected("CreateContainer", &name)?;
        if !s.sandboxes.contains_key(sandbox_id) {
            return Err(not_found("CreateContainer", &name));
        }
        // As containerd reports it: the image by its tag, `image_ref` its repo digest.
        let Some(img) = s.find_image(&reference).cloned() else {
            return Err(rpc("CreateContainer", &name, tonic::Code::NotFound, "image not found"));
        };
        s.next_id += 1;
        let id = format!("container-{}", s.next_id);
        let log_path = std::path::Path::new(&sandbox_config.log_directory).join(&config.log_path);
        let status = api::ContainerStatus {
            id: id.clone(),
            metadata: config.metadata,
            state: api::ContainerState::ContainerCreated as i32,
            created_at: s.now(),
            image: Some(api::ImageSpec { image: img.repo_tags[0].clone(), ..Default::default() }),
            image_ref: img.repo_digests[0].clone(),
            image_id: img.id.clone(),
            labels: config.labels,
            annotations: config.annotations,
            log_path: log_path.display().to_string(),
            resources: config
                .linux
                .and_then(|l| l.resources)
                .map(|r| api::ContainerResources { linux: Some(r), windows: None }),
            stop_signal: config.stop_signal,
            ..Default::default()
        };
        s.containers.insert(id.clone(), Instance { sandbox_id: sandbox_id.to_string(), status });
        Ok(id)
    }

    async fn start_container(&self, id: &str) -> Result<(), CriError> {
        let mut s = self.state();
        s.record_on("StartContainer", id, None);
        s.injected_on("StartContainer", id)?;
        let now = s.now();
        let c = s.containers.get_mut(id).ok_or_else(|| not_found("StartContainer", id))?;
        if c.status.state != api::ContainerState::ContainerCreated as i32 {
            return Err(rpc("StartContainer", id, tonic::Code::Unknown, "container is not in created state"));
        }
        c.status.state = api::ContainerState::ContainerRunning as i32;
        c.status.started_at = now;
        // The runtime opens the container's log as it starts it.
        let _ = std::fs::File::create(&c.status.log_path);
        Ok(())
    }

    async fn stop_container(&self, id: &str, timeout: Duration) -> Result<(), CriError> {
        let (exit_at, code) = {
            let mut s = self.state();
            s.record_on("StopContainer", id, Some(timeout));
            s.injected_on("StopContainer", id)?;
            let Some(c) = s.containers.get(id).filter(|c| running(&c.status)) else { return Ok(()) };
            let name = c.status.labels.get(keys::CONTAINER_NAME).cloned().unwrap_or_default();
            let (after, code) = s.on_sigterm.get(&name).copied().unwrap_or((Duration::ZERO, 143));
            if after < timeout { (Instant::now() + after, code) } else { (Instant::now() + timeout, 137) }
        };
        let mut changed = self.changed.subscribe();
        loop {
            if !self.state().containers.get(id).is_some_and(|c| running(&c.status)) {
                return Ok(());
            }
            tokio::select! {
                _ = tokio::time::sleep_until(exit_at) => break,
                _ = changed.changed() => {}
            }
        }
        self.state().exit(id, code);
        self.wake();
        Ok(())
    }

    async fn update_container_resources(
        &self,
        id: &str,
        linux: api::LinuxContainerResources,
    ) -> Result<(), CriError> {
        let mut s = self.state();
        s.record_on("UpdateContainerResources", id, None);
        s.injected_on("UpdateContainerResources", id)?;
        let c = s.containers.get_mut(id).ok_or_else(|| not_found("UpdateContainerResources", id))?;
        c.status.resources = Some(api::ContainerResources { linux: Some(linux), windows: None });
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<(), CriError> {
        let mut s = self.state();
        s.record_on("RemoveContainer", id, None);
        s.injected_on("RemoveContainer", id)?;
        if s.containers.get(id).is_some_and(|c| running(&c.status)) {
            let msg = "container is running, stop it first";
            return Err(rpc("RemoveContainer", id, tonic::Code::FailedPrecondition, msg));
        }
        s.containers.remove(id);
        Ok(())
    }

    async fn exec_sync(
        &self,
        id: &str,
        _cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<(i32, Vec<u8>), CriError> {
        let mut s = self.state();
        s.record_on("ExecSync", id, Some(timeout));
        s.injected_on("ExecSync", id)?;
        match s.containers.get(id) {
            Some(c) if running(&c.status) => Ok((0, Vec::new())),
            Some(_) => Err(rpc("ExecSync", id, tonic::Code::Unknown, "container is not running")),
            None => Err(not_found("ExecSync", id)),
        }
    }

    async fn version(&self) -> Result<RuntimeInfo, CriError> {
        self.state().record("Version", String::new(), None);
        Ok(RuntimeInfo { name: "fake".into(), version: "0".into(), api_version: "v1".into() })
    }

    async fn supports_strict_groups(&self) -> Result<bool, CriError> {
        self.state().record("Status", String::new(), None);
        Ok(true)
    }

    /// The default handler only, without user namespaces.
    async fn runtime_handlers(&self) -> Result<Vec<api::RuntimeHandler>, CriError> {
        self.state().record("Status", String::new(), None);
        Ok(vec![api::RuntimeHandler { name: String::new(), features: Some(Default::default()) }])
    }

    async fn image_id(&self, image: &str) -> Result<Option<api::Image>, CriError> {
        let mut s = self.state();
        s.record("ImageStatus", image.to_string(), None);
        Ok(s.find_image(image).cloned())
    }

    async fn pull_image_with(
        &self,
        image: &str,
        _sandbox_config: Option<api::PodSandboxConfig>,
        _auth: Option<api::AuthConfig>,
    ) -> Result<String, CriError> {
        let mut s = self.state();
        s.record("PullImage", image.to_string(), None);
        s.injected("PullImage", image)?;
        if let Some(present) = s.find_image(image) {
            return Ok(present.id.clone());
        }
        if !s.registry.contains(image) {
            return Err(rpc("PullImage", image, tonic::Code::Unknown, "not found in the registry"));
        }
        let pulled = self::image(image);
        let id = pulled.id.clone();
        s.images.insert(image.to_string(), pulled);
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ContainerState, SandboxState};

    fn sandbox_config(uid: &str) -> api::PodSandboxConfig {
        api::PodSandboxConfig {
            metadata: Some(api::PodSandboxMetadata {
                name: "web".into(),
                uid: uid.into(),
                attempt: 2,
                ..Default::default()
            }),
            labels: HashMap::from([(keys::POD_UID.to_string(), uid.to_string())]),
            ..Default::default()
        }
    }

    fn container_config(uid: &str, name: &str, image: &str) -> api::ContainerConfig {
        api::ContainerConfig {
            metadata: Some(api::ContainerMetadata { name: name.into(), attempt: 3 }),
            image: Some(api::ImageSpec { image: image.into(), ..Default::default() }),
            labels: HashMap::from([
                (keys::POD_UID.to_string(), uid.to_string()),
                (keys::CONTAINER_NAME.to_string(), name.to_string()),
            ]),
            annotations: HashMap::from([
                (keys::CONTAINER_HASH.to_string(), "v2-abc".to_string()),
                (keys::CONTAINER_RESTART_COUNT.to_string(), "3".to_string()),
            ]),
            log_path: format!("{name}/3.log"),
            ..Default::default()
        }
    }

    /// What `observe` shows is what the client's conversions make of CRI's answers: the name from
    /// its label, hash and restart count from their annotations, states and exits as they happen.
    #[tokio::test]
    async fn observe_shows_what_the_client_would() {
        let rt = FakeRuntime::new().pullable(&["nginx:1"]);
        let id = rt.pull_image("nginx:1", None).await.expect("pull");
        assert_eq!(rt.image_id("nginx:1").await.expect("status").map(|i| i.id), Some(id.clone()));
        assert!(rt.pull_image("missing:1", None).await.is_err(), "not in the registry");

        let sb = rt.run_sandbox(sandbox_config("u1"), "").await.expect("sandbox");
        rt.run_sandbox(sandbox_config("u2"), "").await.expect("another pod's sandbox");
        let config = container_config("u1", "app", &id);
        let sb_config = api::PodSandboxConfig { log_directory: "/logs/web".into(), ..sandbox_config("u1") };
        let c = rt.create_container(&sb, config, sb_config).await.expect("create");
        rt.start_container(&c).await.expect("start");

        let seen = rt.observe("u1").await.expect("observe");
        assert_eq!(seen.sandboxes.len(), 1, "only the pod's own");
        let (s, o) = (&seen.sandboxes[0], &seen.containers[0]);
        assert_eq!((s.id.as_str(), s.attempt, s.state), (sb.as_str(), 2, SandboxState::Ready));
        assert!(!s.ips.is_empty(), "a pod IP");
        assert_eq!((o.name.as_str(), o.attempt, o.sandbox_id.as_str()), ("app", 3, sb.as_str()));
        assert_eq!((o.hash.as_str(), o.restart_count, o.state), ("v2-abc", 3, ContainerState::Running));
        assert_eq!((o.image.as_str(), o.log_path.as_str()), ("nginx:1", "/logs/web/app/3.log"));
        assert!(o.image_ref.starts_with("nginx@sha256:") && o.started_at > o.created_at, "{o:?}");

        assert!(rt.remove_container(&c).await.is_err(), "a running container is not removed");
        rt.exit("app", 2);
        let o = rt.observe("u1").await.expect("observe").containers.remove(0);
        assert_eq!((o.state, o.exit_code, o.reason.as_str()), (ContainerState::Exited, 2, "Error"));
        rt.rewind(Duration::from_secs(10));
        let back = rt.observe("u1").await.expect("observe").containers.remove(0);
        assert_eq!(o.finished_at - back.finished_at, 10_000_000_000, "rewound");

        rt.lose_sandbox("u1");
        assert_eq!(rt.sandbox_status(&sb).await.expect("status").state, SandboxState::NotReady);
        rt.remove_sandbox(&sb).await.expect("remove");
        assert_eq!(
            rt.observe("u1").await.expect("observe"),
            ObservedPod { uid: "u1".into(), ..Default::default() }
        );
        assert_eq!(
            rt.take_actions(),
            [
                "PullImage nginx:1",
                "PullImage missing:1",
                "RunPodSandbox web/2",
                "RunPodSandbox web/2",
                "CreateContainer app/3",
                "StartContainer app/3",
                "RemoveContainer app/3",
                "RemovePodSandbox web/2"
            ]
        );
    }

    /// `StopContainer` waits for the exit as long as its timeout lets it, then SIGKILLs; a second
    /// stop with timeout 0 ends the wait of the first.
    #[tokio::test(start_paused = true)]
    async fn stops_wait_for_the_exit_up_to_their_timeout() {
        let rt = FakeRuntime::new().with_images(&["nginx:1"]);
        let sb = rt.run_sandbox(sandbox_config("u1"), "").await.expect("sandbox");
        let start = |name: &'static str| {
            let (rt, sb) = (&rt, sb.clone());
            async move {
                let c =
                    rt.create_container(&sb, container_config("u1", name, "nginx:1"), sandbox_config("u1"));
                let id = c.await.expect("create");
                rt.start_container(&id).await.expect("start");
                id
            }
        };
        let (quick, slow, stuck) = (start("quick").await, start("slow").await, start("stuck").await);
        rt.on_sigterm("slow", Duration::from_secs(4), 0);
        rt.on_sigterm("stuck", Duration::from_secs(3600), 0);
        let exit = |id: String| {
            let rt = &rt;
            async move {
                let seen = rt.observe("u1").await.expect("observe");
                let c = seen.containers.into_iter().find(|c| c.id == id).expect("the container");
                (c.state, c.exit_code)
            }
        };
        let t0 = Instant::now();
        rt.stop_container(&quick, Duration::from_secs(30)).await.expect("stop");
        assert_eq!((exit(quick).await, t0.elapsed()), ((ContainerState::Exited, 143), Duration::ZERO));
        rt.stop_container(&slow, Duration::from_secs(30)).await.expect("stop");
        assert_eq!((exit(slow).await, t0.elapsed()), ((ContainerState::Exited, 0), Duration::from_secs(4)));
        rt.stop_container(&stuck, Duration::from_secs(2)).await.expect("stop");
        assert_eq!(
            (exit(stuck.clone()).await, t0.elapsed()),
            ((ContainerState::Exited, 137), Duration::from_secs(6))
        );

        let again = start("stuck").await;
        let t1 = Instant::now();
        let term = rt.stop_container(&again, Duration::from_secs(30));
        let kill = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            rt.stop_container(&again, Duration::ZERO).await
        };
        let (a, b) = futures::future::join(term, kill).await;
        assert!(a.is_ok() && b.is_ok());
        assert_eq!(
            (exit(again).await, t1.elapsed()),
            ((ContainerState::Exited, 137), Duration::from_secs(1))
        );
        assert!(rt.stop_container("gone", Duration::ZERO).await.is_ok(), "NotFound counts as stopped");
    }
}
