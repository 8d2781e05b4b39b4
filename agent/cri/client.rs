//! The real CRI client: tonic over a Unix socket, a deadline on every call, and a lazily
//! (re)connecting channel so a containerd restart costs failed calls, not a crashed agent.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

use super::CriError;
use super::api;
use super::api::image_service_client::ImageServiceClient;
use super::api::runtime_service_client::RuntimeServiceClient;
use super::brief::{BriefContainers, BriefSandboxes, RuntimeBrief};
use super::convert::{container_from_status, sandbox_from_status};
use super::status_cache::{Listed, StatusCache};
use crate::model::{ObservedContainer, ObservedPod, ObservedSandbox, keys};

/// Deadline for quick calls (list, status, create, start, remove).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Deadline for image pulls (the kubelet uses 2 min for every call; a pull of a big image can
/// take longer, but a stuck registry must not pin a pod worker forever).
const PULL_TIMEOUT: Duration = Duration::from_secs(300);
/// Extra time granted beyond a stop/exec timeout before the RPC itself is abandoned (R5.8).
const RPC_SLACK: Duration = Duration::from_secs(120);

/// What the runtime says about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeInfo {
    pub name: String,
    pub version: String,
    pub api_version: String,
}

/// A cheaply cloned CRI client (one HTTP/2 connection shared by all clones).
/// A streaming session to ask the runtime for (kubectl exec, attach, port-forward).
#[derive(Debug, Clone)]
pub enum StreamingRequest {
    Exec(api::ExecRequest),
    Attach(api::AttachRequest),
    PortForward(api::PortForwardRequest),
}

#[derive(Clone)]
pub struct CriClient {
    endpoint: String,
    runtime: RuntimeServiceClient<Channel>,
    /// The runtime service's channel itself, for calls decoded into other messages (`brief.rs`).
    runtime_channel: Channel,
    images: ImageServiceClient<Channel>,
    /// Each pod's statuses, reused while its lists show the same (`status_cache.rs`); only the
    /// agent's own client has one (`with_status_cache`), so that a test's or a tool's client
    /// reads every status.
    statuses: Option<Arc<StatusCache>>,
    /// Told of every call (the agent's metrics; `with_observer`). A tool's client has none.
    observer: Option<&'static dyn CallObserver>,
}

/// Told the outcome and duration of every CRI call: how the agent's metrics learn of them
/// without the client knowing the metrics.
pub trait CallObserver: Send + Sync {
    fn call_finished(&self, op: &'static str, took: Duration, failed: bool);
}

fn socket_path(endpoint: &str) -> Result<PathBuf, CriError> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if path.starts_with('/') {
        Ok(PathBuf::from(path))
    } else {
        Err(CriError::Endpoint {
            endpoint: endpoint.to_string(),
            reason: "only unix:// endpoints with an absolute path are supported".into(),
        })
    }
}

fn lazy_channel(endpoint: &str) -> Result<Channel, CriError> {
    let path = socket_path(endpoint)?;
    let channel = Endpoint::from_static("http://[::]:50051")
        .connect_timeout(Duration::from_secs(5))
        .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }));
    Ok(channel)
}

/// The largest answer accepted (a list of everything on a busy node).
const MAX_MESSAGE: usize = 64 << 20;

/// A unary call of the runtime service whose answer is decoded as `Resp`, a wire-compatible
/// subset of the generated message (what the generated client does, with another codec).
async fn unary_as<Req, Resp>(
    channel: Channel,
    method: &'static str,
    path: &'static str,
    msg: Req,
) -> Result<tonic::Response<Resp>, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_MESSAGE);
    grpc.ready().await.map_err(|e| tonic::Status::unknown(format!("Service was not ready: {e}")))?;
    let mut r = req(msg, CALL_TIMEOUT);
    r.extensions_mut().insert(tonic::GrpcMethod::new("runtime.v1.RuntimeService", method));
    grpc.unary(r, http::uri::PathAndQuery::from_static(path), tonic_prost::ProstCodec::default()).await
}

fn req<T>(msg: T, timeout: Duration) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.set_timeout(timeout);
    r
}

impl CriClient {
    /// A client for `runtime_endpoint` (and `image_endpoint`, usually the same). Does not
    /// connect yet; the first call does, and every call after a failure reconnects.
    pub fn new(runtime_endpoint: &str, image_endpoint: &str) -> Result<Self, CriError> {
        let runtime_channel = lazy_channel(runtime_endpoint)?;
        let runtime =
            RuntimeServiceClient::new(runtime_channel.clone()).max_decoding_message_size(MAX_MESSAGE);
        let images =
            ImageServiceClient::new(lazy_channel(image_endpoint)?).max_decoding_message_size(MAX_MESSAGE);
        Ok(Self {
            endpoint: runtime_endpoint.to_string(),
            runtime,
            runtime_channel,
            images,
            statuses: None,
            observer: None,
        })
    }

    /// This client, reusing each pod's statuses while its lists show the same objects in the same
    /// states (`status_cache.rs`): the agent's, whose own resource updates are the only ones.
    pub fn with_status_cache(mut self) -> Self {
        self.statuses = Some(Arc::default());
        self
    }

    /// This client, telling `observer` of every call.
    pub fn with_observer(mut self, observer: &'static dyn CallObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    fn record_call(&self, op: &'static str, started: std::time::Instant, failed: bool) {
        if let Some(o) = self.observer {
            o.call_finished(op, started.elapsed(), failed);
        }
    }

    async fn call<T, F>(
        &self,
        op: &'static str,
        target: &str,
        timeout: Duration,
        fut: F,
    ) -> Result<T, CriError>
    where
        F: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let started = std::time::Instant::now();
        let span = tracing::trace_span!("cri", op);
        let result = match tracing::Instrument::instrument(
            tokio::time::timeout(timeout + Duration::from_secs(1), fut),
            span,
        )
        .await
        {
            Err(_) => Err(CriError::DeadlineExceeded { op, target: target.to_string(), timeout }),
            Ok(Err(status)) if status.code() == tonic::Code::DeadlineExceeded => {
                Err(CriError::DeadlineExceeded { op, target: target.to_string(), timeout })
            }
            Ok(Err(status)) => Err(CriError::from_status(op, target, status)),
            Ok(Ok(resp)) => Ok(resp.into_inner()),
        };
        // Every unary CRI call passes here: kubelet_runtime_operations_* by method.
        self.record_call(op, started, result.is_err());
        result
    }

    /// `Version`: name and versions of the runtime.
    pub async fn version(&self) -> Result<RuntimeInfo, CriError> {
        let mut c = self.runtime.clone();
        let v = self
            .call(
                "Version",
                &self.endpoint,
                CALL_TIMEOUT,
                c.version(req(api::VersionRequest::default(), CALL_TIMEOUT)),
            )
            .await?;
        Ok(RuntimeInfo {
            name: v.runtime_name,
            version: v.runtime_version,
            api_version: v.runtime_api_version,
        })
    }

    /// `Status`: the runtime's conditions; Err names every required condition that is not true.
    pub async fn check_ready(&self) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        let s = self
            .call(
                "Status",
                &self.endpoint,
                CALL_TIMEOUT,
                c.status(req(api::StatusRequest { verbose: false }, CALL_TIMEOUT)),
            )
            .await?;
        let conditions = s.status.map(|s| s.conditions).unwrap_or_default();
        let bad: Vec<String> = ["RuntimeReady", "NetworkReady"]
            .iter()
            .filter_map(|want| match conditions.iter().find(|c| c.r#type == *want) {
                Some(c) if c.status => None,
                Some(c) => Some(format!("{want}=false ({}: {})", c.reason, c.message)),
                None => Some(format!("{want} not reported")),
            })
            .collect();
        if bad.is_empty() {
            Ok(())
        } else {
            Err(CriError::Endpoint {
                endpoint: self.endpoint.clone(),
                reason: format!("runtime not ready: {}", bad.join("; ")),
            })
        }
    }

    /// The runtime's running containers (list view), of every pod.
    pub async fn running_containers(&self) -> Result<Vec<api::Container>, CriError> {
        let mut c = self.runtime.clone();
        let filter = api::ContainerFilter {
            state: Some(api::ContainerStateValue { state: api::ContainerState::ContainerRunning as i32 }),
            ..Default::default()
        };
        Ok(self
            .call(
                "ListContainers",
                "running containers",
                CALL_TIMEOUT,
                c.list_containers(req(api::ListContainersRequest { filter: Some(filter) }, CALL_TIMEOUT)),
            )
            .await?
            .containers)
    }

    /// Every sandbox and container the runtime has that carries `label` (used by the PLEG
    /// relist and to find orphans): (sandboxes, containers) as the cheap list views.
    pub async fn list_all(
        &self,
        label: Option<(&str, &str)>,
    ) -> Result<(Vec<api::PodSandbox>, Vec<api::Container>), CriError> {
        let selector: HashMap<String, String> =
            label.map(|(k, v)| HashMap::from([(k.to_string(), v.to_string())])).unwrap_or_default();
        let (mut sc, mut cc) = (self.runtime.clone(), self.runtime.clone());
        // Both lists at once: they are independent, and every sync waits for the pair.
        let sandboxes = self.call(
            "ListPodSandbox",
            "all pods",
            CALL_TIMEOUT,
            sc.list_pod_sandbox(req(
                api::ListPodSandboxRequest {
                    filter: Some(api::PodSandboxFilter {
                        label_selector: selector.clone(),
                        ..Default::default()
                    }),
                },
                CALL_TIMEOUT,
            )),
        );
        let containers = self.call(
            "ListContainers",
            "all pods",
            CALL_TIMEOUT,
            cc.list_containers(req(
                api::ListContainersRequest {
                    filter: Some(api::ContainerFilter { label_selector: selector, ..Default::default() }),
                },
                CALL_TIMEOUT,
            )),
        );
        // Both answers are awaited, not the first error only: a call dropped half-way would be
        // missing from kubelet_runtime_operations_* (counted when it ends).
        let (sandboxes, containers) = futures::future::join(sandboxes, containers).await;
        Ok((sandboxes?.items, containers?.containers))
    }

    /// Every sandbox and container, decoded only as far as the relist needs (`brief.rs`): the
    /// same two list calls as [`CriClient::list_all`], at a fraction of the decoding.
    pub async fn list_brief(&self) -> Result<RuntimeBrief, CriError> {
        let sandboxes = self.call(
            "ListPodSandbox",
            "all pods",
            CALL_TIMEOUT,
            unary_as::<_, BriefSandboxes>(
                self.runtime_channel.clone(),
                "ListPodSandbox",
                "/runtime.v1.RuntimeService/ListPodSandbox",
                api::ListPodSandboxRequest::default(),
            ),
        );
        let containers = self.call(
            "ListContainers",
            "all pods",
            CALL_TIMEOUT,
            unary_as::<_, BriefContainers>(
                self.runtime_channel.clone(),
                "ListContainers",
                "/runtime.v1.RuntimeService/ListContainers",
                api::ListContainersRequest::default(),
            ),
        );
        let (sandboxes, containers) = futures::future::join(sandboxes, containers).await;
        let (sandboxes, containers) = (sandboxes?, containers?);
        Ok(RuntimeBrief { sandboxes: sandboxes.into_briefs(), containers: containers.into_briefs() })
    }

    /// Full state of one pod UID (R1.15): sandboxes and containers with their statuses, newest
    /// first. Objects that vanish between list and status are skipped. The statuses are those
    /// last read while the lists show the pod's objects unchanged (`status_cache.rs`).
    pub async fn observe(&self, uid: &str) -> Result<ObservedPod, CriError> {
        let since = self.statuses.as_ref().map(|c| c.generation());
        let (sandboxes, containers) = self.list_all(Some((keys::POD_UID, uid))).await?;
        let listed = Listed::new(&sandboxes, &containers);
        let mut observed = ObservedPod { uid: uid.to_string(), ..Default::default() };
        if let Some((sandboxes, containers)) = self.statuses.as_ref().and_then(|c| c.reuse(uid, &listed)) {
            observed.sandboxes = sandboxes;
            observed.containers = containers;
            return Ok(observed);
        }
        // Only what can really have been removed since the list (a not-ready sandbox, an exited
        // container) is skipped on NotFound; for a ready sandbox or a live container it is an
        // error, and the sync is retried: dropping it would start a second copy of it.
        // The statuses are asked for all at once (a pod's sync waits for the slowest, not the sum).
        let sandbox_statuses =
            futures::future::join_all(sandboxes.iter().map(|sb| self.sandbox_status(&sb.id)));
        let container_statuses = futures::future::join_all(
            containers.iter().map(|ct| self.container_status(&ct.id, &ct.pod_sandbox_id)),
        );
        let (sandbox_statuses, container_statuses) =
            futures::future::join(sandbox_statuses, container_statuses).await;
        for (sb, r) in sandboxes.iter().zip(sandbox_statuses) {
            match r {
                Ok(s) => observed.sandboxes.push(s),
                Err(e) if e.is_not_found() && sb.state != api::PodSandboxState::SandboxReady as i32 => {}
                Err(e) => return Err(e),
            }
        }
        for (ct, r) in containers.iter().zip(container_statuses) {
            match r {
                Ok(c) => observed.containers.push(c),
                Err(e) if e.is_not_found() && ct.state == api::ContainerState::ContainerExited as i32 => {}
                Err(e) => return Err(e),
            }
        }
        observed.sandboxes.sort_by_key(|s| std::cmp::Reverse(s.created_at));
        observed.containers.sort_by_key(|c| std::cmp::Reverse(c.created_at));
        if let (Some(cache), Some(since)) = (&self.statuses, since) {
            cache.keep(since, listed, &observed);
        }
        Ok(observed)
    }

    /// Where the status cache stands (for [`CriClient::keep_statuses`]); `None` without one.
    pub fn statuses_generation(&self) -> Option<u64> {
        self.statuses.as_ref().map(|c| c.generation())
    }

    /// Keeps `observed`, the whole of its pod as this agent's own status calls made since
    /// `since` ([`CriClient::statuses_generation`]) read it (a sync that created and started
    /// it), for the next observation to reuse while the lists show every object of it in the
    /// state its status gave: the runtime's events of those starts then cost lists only.
    pub fn keep_statuses(&self, since: Option<u64>, mut observed: ObservedPod) {
        if let (Some(cache), Some(since)) = (&self.statuses, since) {
            // Newest first, as `observe` returns them.
            observed.sandboxes.sort_by_key(|s| std::cmp::Reverse(s.created_at));
            observed.containers.sort_by_key(|c| std::cmp::Reverse(c.created_at));
            cache.keep(since, Listed::of(&observed), &observed);
        }
    }

    pub async fn sandbox_status(&self, id: &str) -> Result<ObservedSandbox, CriError> {
        let mut c = self.runtime.clone();
        let r = self
            .call(
                "PodSandboxStatus",
                id,
                CALL_TIMEOUT,
                c.pod_sandbox_status(req(
                    api::PodSandboxStatusRequest { pod_sandbox_id: id.to_string(), verbose: false },
                    CALL_TIMEOUT,
                )),
            )
            .await?;
        let status = r.status.ok_or_else(|| CriError::NotFound {
            op: "PodSandboxStatus",
            target: id.into(),
            kind: "status",
        })?;
        Ok(sandbox_from_status(&status))
    }

    pub async fn container_status(&self, id: &str, sandbox_id: &str) -> Result<ObservedContainer, CriError> {
        let mut c = self.runtime.clone();
        let r = self
            .call(
                "ContainerStatus",
                id,
                CALL_TIMEOUT,
                c.container_status(req(
                    api::ContainerStatusRequest { container_id: id.to_string(), verbose: false },
                    CALL_TIMEOUT,
                )),
            )
            .await?;
        let status = r.status.ok_or_else(|| CriError::NotFound {
            op: "ContainerStatus",
            target: id.into(),
            kind: "status",
        })?;
        Ok(container_from_status(&status, sandbox_id))
    }

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

    /// `ImageStatus`: the image's ID if present.
    pub async fn image_id(&self, image: &str) -> Result<Option<api::Image>, CriError> {
        let mut c = self.images.clone();
        let r = self
            .call(
                "ImageStatus",
                image,
                CALL_TIMEOUT,
                c.image_status(req(
                    api::ImageStatusRequest {
                        image: Some(api::ImageSpec { image: image.to_string(), ..Default::default() }),
                        verbose: false,
                    },
                    CALL_TIMEOUT,
                )),
            )
            .await?;
        Ok(r.image)
    }

    /// `PullImage`; returns the image reference the runtime resolved.
    pub async fn pull_image(
        &self,
        image: &str,
        sandbox_config: Option<api::PodSandboxConfig>,
    ) -> Result<String, CriError> {
        self.pull_image_with(image, sandbox_config, None).await
    }

    /// `PullImage` with registry credentials (`imagePullSecrets`).
    pub async fn pull_image_with(
        &self,
        image: &str,
        sandbox_config: Option<api::PodSandboxConfig>,
        auth: Option<api::AuthConfig>,
    ) -> Result<String, CriError> {
        let mut c = self.images.clone();
        let r = self
            .call(
                "PullImage",
                image,
                PULL_TIMEOUT,
                c.pull_image(req(
                    api::PullImageRequest {
                        image: Some(api::ImageSpec { image: image.to_string(), ..Default::default() }),
                        auth,
                        sandbox_config,
                    },
                    PULL_TIMEOUT,
                )),
            )
            .await?;
        Ok(r.image_ref)
    }
}

fn ignore_not_found(r: Result<(), CriError>) -> Result<(), CriError> {
    match r {
        Err(e) if e.is_not_found() => Ok(()),
        other => other,
    }
}

/// Read-only calls for `crilet preflight`, each with the caller's deadline (it must never hang).
impl CriClient {
    /// The socket path of a `unix://` endpoint (preflight looks at the file before dialing it).
    pub fn endpoint_socket_path(endpoint: &str) -> Result<PathBuf, CriError> {
        socket_path(endpoint)
    }

    /// `Status`, verbose when asked: the runtime's conditions and, from containerd, its
    /// configuration as JSON in `info["config"]`.
    pub async fn runtime_status(
        &self,
        verbose: bool,
        timeout: Duration,
    ) -> Result<api::StatusResponse, CriError> {
        let mut c = self.runtime.clone();
        self.call("Status", &self.endpoint, timeout, c.status(req(api::StatusRequest { verbose }, timeout)))
            .await
    }

    /// `RuntimeConfig`: the cgroup driver the runtime uses; `None` when the answer has no Linux
    /// section. Unimplemented before containerd 2.0.
    pub async fn cgroup_driver(&self, timeout: Duration) -> Result<Option<api::CgroupDriver>, CriError> {
        let mut c = self.runtime.clone();
        let r = self
            .call(
                "RuntimeConfig",
                &self.endpoint,
                timeout,
                c.runtime_config(req(api::RuntimeConfigRequest {}, timeout)),
            )
            .await?;
        Ok(r.linux.and_then(|l| api::CgroupDriver::try_from(l.cgroup_driver).ok()))
    }

    /// `ListImages`: every image the image service holds (preflight looks for pinned ones).
    pub async fn list_images(&self, timeout: Duration) -> Result<Vec<api::Image>, CriError> {
        let mut c = self.images.clone();
        let r = self
            .call(
                "ListImages",
                "all images",
                timeout,
                c.list_images(req(api::ListImagesRequest { filter: None }, timeout)),
            )
            .await?;
        Ok(r.images)
    }
}
