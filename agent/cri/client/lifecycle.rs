//! Changing the runtime's state: sandboxes and containers made, started, stopped, updated and
//! removed, and the calls that reach into a running container (exec, streaming, log reopen,
//! the event stream).

use super::*;

impl CriClient {
    /// `RunPodSandbox`; returns the new sandbox ID.
    pub async fn run_sandbox(
        &self,
        config: api::PodSandboxConfig,
        handler: &str,
    ) -> Result<String, CriError> {
        let target =
            config.metadata.as_ref().map(|m| format!("{}/{}", m.namespace, m.name)).unwrap_or_default();
        let mut c = self.runtime.clone();
        // Sandbox creation includes CNI setup; give it the kubelet's full request timeout.
        let timeout = Duration::from_secs(120);
        let r = self
            .call(
                "RunPodSandbox",
                &target,
                timeout,
                c.run_pod_sandbox(req(
                    api::RunPodSandboxRequest { config: Some(config), runtime_handler: handler.to_string() },
                    timeout,
                )),
            )
            .await?;
        Ok(r.pod_sandbox_id)
    }

    /// `StopPodSandbox`; NotFound counts as stopped.
    pub async fn stop_sandbox(&self, id: &str) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        let timeout = Duration::from_secs(120);
        let r = self
            .call(
                "StopPodSandbox",
                id,
                timeout,
                c.stop_pod_sandbox(req(
                    api::StopPodSandboxRequest { pod_sandbox_id: id.to_string() },
                    timeout,
                )),
            )
            .await;
        ignore_not_found(r.map(drop))
    }

    /// `RemovePodSandbox` (removes its containers too); NotFound counts as removed.
    pub async fn remove_sandbox(&self, id: &str) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        let r = self
            .call(
                "RemovePodSandbox",
                id,
                CALL_TIMEOUT,
                c.remove_pod_sandbox(req(
                    api::RemovePodSandboxRequest { pod_sandbox_id: id.to_string() },
                    CALL_TIMEOUT,
                )),
            )
            .await;
        ignore_not_found(r.map(drop))
    }

    /// `CreateContainer`; returns the new container ID.
    pub async fn create_container(
        &self,
        sandbox_id: &str,
        config: api::ContainerConfig,
        sandbox_config: api::PodSandboxConfig,
    ) -> Result<String, CriError> {
        let target = config.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default();
        let mut c = self.runtime.clone();
        let r = self
            .call(
                "CreateContainer",
                &target,
                CALL_TIMEOUT,
                c.create_container(req(
                    api::CreateContainerRequest {
                        pod_sandbox_id: sandbox_id.to_string(),
                        config: Some(config),
                        sandbox_config: Some(sandbox_config),
                    },
                    CALL_TIMEOUT,
                )),
            )
            .await?;
        Ok(r.container_id)
    }

    pub async fn start_container(&self, id: &str) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        self.call(
            "StartContainer",
            id,
            CALL_TIMEOUT,
            c.start_container(req(api::StartContainerRequest { container_id: id.to_string() }, CALL_TIMEOUT)),
        )
        .await
        .map(drop)
    }

    /// `StopContainer` with `timeout` (whole seconds; 0 = SIGKILL at once); NotFound counts as stopped.
    pub async fn stop_container(&self, id: &str, timeout: Duration) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        let rpc_timeout = timeout + RPC_SLACK;
        let r = self
            .call(
                "StopContainer",
                id,
                rpc_timeout,
                c.stop_container(req(
                    api::StopContainerRequest {
                        container_id: id.to_string(),
                        timeout: timeout.as_secs() as i64,
                    },
                    rpc_timeout,
                )),
            )
            .await;
        ignore_not_found(r.map(drop))
    }

    /// `UpdateContainerResources` (in-place resize): the runtime applies `linux` to the
    /// running container and records it for its next start.
    pub async fn update_container_resources(
        &self,
        id: &str,
        linux: api::LinuxContainerResources,
    ) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        // The resources the runtime reports change: its pod's statuses are asked for again.
        let forget = || self.statuses.iter().for_each(|c| c.forget_container(id));
        forget();
        let r = self
            .call(
                "UpdateContainerResources",
                id,
                CALL_TIMEOUT,
                c.update_container_resources(req(
                    api::UpdateContainerResourcesRequest {
                        container_id: id.to_string(),
                        linux: Some(linux),
                        ..Default::default()
                    },
                    CALL_TIMEOUT,
                )),
            )
            .await
            .map(drop);
        forget();
        r
    }

    /// `RemoveContainer`; NotFound counts as removed.
    pub async fn remove_container(&self, id: &str) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        let r = self
            .call(
                "RemoveContainer",
                id,
                CALL_TIMEOUT,
                c.remove_container(req(
                    api::RemoveContainerRequest { container_id: id.to_string() },
                    CALL_TIMEOUT,
                )),
            )
            .await;
        ignore_not_found(r.map(drop))
    }

    /// `ReopenContainerLog`: the runtime opens the container's log path anew (after a rotation
    /// renamed the file away) and writes there from now on.
    pub async fn reopen_container_log(&self, id: &str) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        self.call(
            "ReopenContainerLog",
            id,
            CALL_TIMEOUT,
            c.reopen_container_log(req(
                api::ReopenContainerLogRequest { container_id: id.to_string() },
                CALL_TIMEOUT,
            )),
        )
        .await
        .map(drop)
    }

    /// `GetContainerEvents`: the runtime's event stream (containerd 1.7+). The stream has no
    /// deadline; an `Unimplemented` error means the runtime has none (containerd 1.6).
    pub async fn container_events(&self) -> Result<tonic::Streaming<api::ContainerEventResponse>, CriError> {
        let mut c = self.runtime.clone();
        let started = std::time::Instant::now();
        let r = c.get_container_events(api::GetEventsRequest {}).await;
        // A stream has no deadline, so it skips `call`; its opening is measured here.
        self.record_call("GetContainerEvents", started, r.is_err());
        r.map(tonic::Response::into_inner)
            .map_err(|s| CriError::from_status("GetContainerEvents", &self.endpoint, s))
    }

    /// `ExecSync`: runs `cmd` in the container; `timeout` zero means no runtime-side limit.
    /// Returns (exit code, stdout+stderr).
    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<(i32, Vec<u8>), CriError> {
        let mut c = self.runtime.clone();
        let rpc_timeout = timeout + RPC_SLACK;
        let r = self
            .call(
                "ExecSync",
                id,
                rpc_timeout,
                c.exec_sync(req(
                    api::ExecSyncRequest {
                        container_id: id.to_string(),
                        cmd,
                        timeout: timeout.as_secs() as i64,
                    },
                    rpc_timeout,
                )),
            )
            .await?;
        let mut out = r.stdout;
        out.extend_from_slice(&r.stderr);
        Ok((r.exit_code, out))
    }

    /// `Exec`, `Attach` or `PortForward`: the URL of the runtime's streaming server that serves
    /// the session (the kubelet API proxies the client's upgraded connection to it).
    pub async fn streaming_url(&self, request: StreamingRequest) -> Result<String, CriError> {
        let mut c = self.runtime.clone();
        match request {
            StreamingRequest::Exec(r) => {
                let id = r.container_id.clone();
                Ok(self.call("Exec", &id, CALL_TIMEOUT, c.exec(req(r, CALL_TIMEOUT))).await?.url)
            }
            StreamingRequest::Attach(r) => {
                let id = r.container_id.clone();
                Ok(self.call("Attach", &id, CALL_TIMEOUT, c.attach(req(r, CALL_TIMEOUT))).await?.url)
            }
            StreamingRequest::PortForward(r) => {
                let id = r.pod_sandbox_id.clone();
                Ok(self
                    .call("PortForward", &id, CALL_TIMEOUT, c.port_forward(req(r, CALL_TIMEOUT)))
                    .await?
                    .url)
            }
        }
    }
}
