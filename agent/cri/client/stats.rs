//! The runtime's resource statistics (the kubelet's CRI stats provider asks for the same):
//! `ListContainerStats`, `ListPodSandboxStats` and the image service's `ImageFsInfo`.

use super::*;

impl CriClient {
    /// `ListContainerStats` of every container the runtime has (running ones carry CPU and
    /// memory; the writable layer's usage is there for all).
    pub async fn list_container_stats(&self) -> Result<Vec<api::ContainerStats>, CriError> {
        let mut c = self.runtime.clone();
        let r = self
            .call(
                "ListContainerStats",
                "all containers",
                CALL_TIMEOUT,
                c.list_container_stats(req(api::ListContainerStatsRequest { filter: None }, CALL_TIMEOUT)),
            )
            .await?;
        Ok(r.stats)
    }

    /// `ListPodSandboxStats` of every sandbox (the pod's CPU, memory and network as the runtime
    /// measures them). A runtime without it answers Unimplemented ([`CriError::is_unimplemented`]).
    pub async fn list_pod_sandbox_stats(&self) -> Result<Vec<api::PodSandboxStats>, CriError> {
        let mut c = self.runtime.clone();
        let r = self
            .call(
                "ListPodSandboxStats",
                "all pods",
                CALL_TIMEOUT,
                c.list_pod_sandbox_stats(req(api::ListPodSandboxStatsRequest { filter: None }, CALL_TIMEOUT)),
            )
            .await?;
        Ok(r.stats)
    }
}
