//! The real CRI client: tonic over a Unix socket, a deadline on every call, and a lazily
//! (re)connecting channel so a containerd restart costs failed calls, not a crashed agent. The
//! calls themselves are in `observe`, `lifecycle` and `images`.

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
use crate::cgroup::CgroupDriver;
use crate::model::{ObservedContainer, ObservedPod, ObservedSandbox, keys};

mod images;
mod lifecycle;
mod observe;

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
    observer: Option<Arc<dyn CallObserver>>,
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
    pub fn with_observer(mut self, observer: Arc<dyn CallObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    fn record_call(&self, op: &'static str, started: std::time::Instant, failed: bool) {
        if let Some(o) = &self.observer {
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

    /// `Status`: the runtime's handlers and their features (user namespaces, recursive
    /// read-only mounts).
    pub async fn runtime_handlers(&self) -> Result<Vec<api::RuntimeHandler>, CriError> {
        Ok(self.runtime_status(false, CALL_TIMEOUT).await?.runtime_handlers)
    }

    /// `RuntimeConfig`: the cgroup driver the runtime uses; `None` when the answer has no Linux
    /// section. Unimplemented before containerd 2.0.
    pub async fn cgroup_driver(&self, timeout: Duration) -> Result<Option<CgroupDriver>, CriError> {
        let mut c = self.runtime.clone();
        let r = self
            .call(
                "RuntimeConfig",
                &self.endpoint,
                timeout,
                c.runtime_config(req(api::RuntimeConfigRequest {}, timeout)),
            )
            .await?;
        let driver = r.linux.and_then(|l| api::CgroupDriver::try_from(l.cgroup_driver).ok());
        Ok(driver.map(|d| match d {
            api::CgroupDriver::Systemd => CgroupDriver::Systemd,
            api::CgroupDriver::Cgroupfs => CgroupDriver::Cgroupfs,
        }))
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

    /// `ImageFsInfo`: the image filesystems' mountpoints and what images use of them (the
    /// eviction manager's imagefs signal).
    pub async fn image_fs_info(&self, timeout: Duration) -> Result<Vec<api::FilesystemUsage>, CriError> {
        let mut c = self.images.clone();
        let r = self
            .call(
                "ImageFsInfo",
                "image filesystems",
                timeout,
                c.image_fs_info(req(api::ImageFsInfoRequest {}, timeout)),
            )
            .await?;
        Ok(r.image_filesystems)
    }
}
