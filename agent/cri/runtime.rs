//! The runtime as the pod engine and the probes use it: the CRI calls they make, behind a trait,
//! so a whole sync runs as well against the real client as against an in-memory runtime in a
//! unit test. The rooms that follow the runtime itself (the PLEG, the kubelet API,
//! log rotation, cluster mode, the CLI) keep the client.
//!
//! Each method is the client's call of the same name, with its semantics: NotFound counts as
//! done for stops and removals, statuses come back as domain types, `observe` is one pod's
//! full state, newest first.

use std::time::Duration;

use super::CriError;
use super::api;
use super::client::{CriClient, RuntimeInfo};
use crate::model::{ObservedContainer, ObservedPod, ObservedSandbox};

/// The CRI calls of the pod engine and the probes. Object-safe: shared as `Arc<dyn Runtime>`.
#[async_trait::async_trait]
pub trait Runtime: Send + Sync {
    /// Full state of pod `uid`: its sandboxes and containers with their statuses, newest first.
    async fn observe(&self, uid: &str) -> Result<ObservedPod, CriError>;

    /// Where the runtime's status cache stands, for [`Runtime::keep_statuses`]; `None` without one.
    fn statuses_generation(&self) -> Option<u64>;

    /// Keeps `observed` (read by this agent's own calls since `since`) for the next observation
    /// of its pod to reuse while the lists agree.
    fn keep_statuses(&self, since: Option<u64>, observed: ObservedPod);

    /// Every sandbox and container carrying `label` (all of them without one), as list views.
    async fn list_all(
        &self,
        label: Option<(&str, &str)>,
    ) -> Result<(Vec<api::PodSandbox>, Vec<api::Container>), CriError>;

    async fn sandbox_status(&self, id: &str) -> Result<ObservedSandbox, CriError>;

    async fn container_status(&self, id: &str, sandbox_id: &str) -> Result<ObservedContainer, CriError>;

    /// `RunPodSandbox`; the new sandbox's ID.
    async fn run_sandbox(&self, config: api::PodSandboxConfig, handler: &str) -> Result<String, CriError>;

    /// `StopPodSandbox`; NotFound counts as stopped.
    async fn stop_sandbox(&self, id: &str) -> Result<(), CriError>;

    /// `RemovePodSandbox` (its containers too); NotFound counts as removed.
    async fn remove_sandbox(&self, id: &str) -> Result<(), CriError>;

    /// `CreateContainer`; the new container's ID.
    async fn create_container(
        &self,
        sandbox_id: &str,
        config: api::ContainerConfig,
        sandbox_config: api::PodSandboxConfig,
    ) -> Result<String, CriError>;

    async fn start_container(&self, id: &str) -> Result<(), CriError>;

    /// `StopContainer` with `timeout` (whole seconds; 0 = SIGKILL at once); NotFound counts as
    /// stopped.
    async fn stop_container(&self, id: &str, timeout: Duration) -> Result<(), CriError>;

    /// `UpdateContainerResources` (in-place resize).
    async fn update_container_resources(
        &self,
        id: &str,
        linux: api::LinuxContainerResources,
    ) -> Result<(), CriError>;

    /// `RemoveContainer`; NotFound counts as removed.
    async fn remove_container(&self, id: &str) -> Result<(), CriError>;

    /// `ExecSync`: (exit code, stdout+stderr); `timeout` zero means no runtime-side limit.
    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<(i32, Vec<u8>), CriError>;

    /// `Version`: name and versions of the runtime.
    async fn version(&self) -> Result<RuntimeInfo, CriError>;

    /// `Status`: the runtime's handlers and the features each reports.
    async fn runtime_handlers(&self) -> Result<Vec<api::RuntimeHandler>, CriError>;

    /// `ImageStatus`: the image, if present.
    async fn image_id(&self, image: &str) -> Result<Option<api::Image>, CriError>;

    /// `Status`: whether the runtime applies `supplementalGroupsPolicy: Strict` (its
    /// `RuntimeFeatures`; runtimes before the field, such as containerd 1.x, do not).
    async fn supports_strict_groups(&self) -> Result<bool, CriError>;

    /// `PullImage` without credentials; the image reference the runtime resolved.
    async fn pull_image(
        &self,
        image: &str,
        sandbox_config: Option<api::PodSandboxConfig>,
    ) -> Result<String, CriError> {
        self.pull_image_with(image, sandbox_config, None).await
    }

    /// `PullImage` with registry credentials (`imagePullSecrets`).
    async fn pull_image_with(
        &self,
        image: &str,
        sandbox_config: Option<api::PodSandboxConfig>,
        auth: Option<api::AuthConfig>,
    ) -> Result<String, CriError>;
}

/// The real runtime: each call is the client's own.
#[async_trait::async_trait]
impl Runtime for CriClient {
    async fn observe(&self, uid: &str) -> Result<ObservedPod, CriError> {
        CriClient::observe(self, uid).await
    }

    fn statuses_generation(&self) -> Option<u64> {
        CriClient::statuses_generation(self)
    }

    fn keep_statuses(&self, since: Option<u64>, observed: ObservedPod) {
        CriClient::keep_statuses(self, since, observed)
    }

    async fn list_all(
        &self,
        label: Option<(&str, &str)>,
    ) -> Result<(Vec<api::PodSandbox>, Vec<api::Container>), CriError> {
        CriClient::list_all(self, label).await
    }

    async fn sandbox_status(&self, id: &str) -> Result<ObservedSandbox, CriError> {
        CriClient::sandbox_status(self, id).await
    }

    async fn container_status(&self, id: &str, sandbox_id: &str) -> Result<ObservedContainer, CriError> {
        CriClient::container_status(self, id, sandbox_id).await
    }

    async fn run_sandbox(&self, config: api::PodSandboxConfig, handler: &str) -> Result<String, CriError> {
        CriClient::run_sandbox(self, config, handler).await
    }

    async fn stop_sandbox(&self, id: &str) -> Result<(), CriError> {
        CriClient::stop_sandbox(self, id).await
    }

    async fn remove_sandbox(&self, id: &str) -> Result<(), CriError> {
        CriClient::remove_sandbox(self, id).await
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: api::ContainerConfig,
        sandbox_config: api::PodSandboxConfig,
    ) -> Result<String, CriError> {
        CriClient::create_container(self, sandbox_id, config, sandbox_config).await
    }

    async fn start_container(&self, id: &str) -> Result<(), CriError> {
        CriClient::start_container(self, id).await
    }

    async fn stop_container(&self, id: &str, timeout: Duration) -> Result<(), CriError> {
        CriClient::stop_container(self, id, timeout).await
    }

    async fn update_container_resources(
        &self,
        id: &str,
        linux: api::LinuxContainerResources,
    ) -> Result<(), CriError> {
        CriClient::update_container_resources(self, id, linux).await
    }

    async fn remove_container(&self, id: &str) -> Result<(), CriError> {
        CriClient::remove_container(self, id).await
    }

    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<(i32, Vec<u8>), CriError> {
        CriClient::exec_sync(self, id, cmd, timeout).await
    }

    async fn version(&self) -> Result<RuntimeInfo, CriError> {
        CriClient::version(self).await
    }

    async fn runtime_handlers(&self) -> Result<Vec<api::RuntimeHandler>, CriError> {
        CriClient::runtime_handlers(self).await
    }

    async fn image_id(&self, image: &str) -> Result<Option<api::Image>, CriError> {
        CriClient::image_id(self, image).await
    }

    async fn supports_strict_groups(&self) -> Result<bool, CriError> {
        let s = self.runtime_status(false, Duration::from_secs(10)).await?;
        Ok(s.features.is_some_and(|f| f.supplemental_groups_policy))
    }

    async fn pull_image(
        &self,
        image: &str,
        sandbox_config: Option<api::PodSandboxConfig>,
    ) -> Result<String, CriError> {
        CriClient::pull_image(self, image, sandbox_config).await
    }

    async fn pull_image_with(
        &self,
        image: &str,
        sandbox_config: Option<api::PodSandboxConfig>,
        auth: Option<api::AuthConfig>,
    ) -> Result<String, CriError> {
        CriClient::pull_image_with(self, image, sandbox_config, auth).await
    }
}
