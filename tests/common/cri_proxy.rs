//! A fault-injecting CRI proxy, the node e2e's way of making a real runtime misbehave: a tonic
//! server on the generated CRI service definitions (`crilet::cri::api`), on a Unix socket of its own, that forwards every
//! call to the real containerd. Run the agent with `--container-runtime-endpoint` set to
//! [`CriProxy::endpoint`] and change the faults from the test at any time.
//!
//! There is no fake of CRI here: a call that no fault names gets containerd's own answer, and a
//! faulted call either never reaches containerd (an injected error) or reaches it late (a delay).
//!
//! - Faults are per CRI method (`"ListContainers"`, `"ContainerStatus"`, ... as in the proto),
//!   optionally only for calls that name one id ([`Fault::only_for`]: a container or sandbox ID,
//!   a pod UID in a label filter or a sandbox config, a pod or container name): an error code,
//!   a delay before the call goes on, or both; for the next N calls or until cleared.
//! - The event stream (`GetContainerEvents`) can drop, duplicate or reorder events
//!   ([`EventMode`]), re-send the events seen so far ([`CriProxy::replay_events`]) and be broken
//!   ([`CriProxy::break_event_streams`]); an error fault on it refuses (re)opening it.
//! - Every call is logged with the ids it names, and calls still running (a delayed call, a call
//!   containerd has not answered yet) are visible, so a test can prove what ran while another
//!   call hung.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crilet::cri::api;
use crilet::cri::api::image_service_client::ImageServiceClient;
use crilet::cri::api::image_service_server::{ImageService, ImageServiceServer};
use crilet::cri::api::runtime_service_client::RuntimeServiceClient;
use crilet::cri::api::runtime_service_server::{RuntimeService, RuntimeServiceServer};
use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{broadcast, mpsc, watch};
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tonic::transport::{Channel, Endpoint, Server, Uri};
use tonic::{Code, Request, Response, Status};

/// Every method of CRI's `RuntimeService` and `ImageService`, by its gRPC name.
pub const METHODS: [&str; 41] = [
    "Version",
    "RunPodSandbox",
    "StopPodSandbox",
    "RemovePodSandbox",
    "PodSandboxStatus",
    "ListPodSandbox",
    "StreamPodSandboxes",
    "CreateContainer",
    "StartContainer",
    "StopContainer",
    "RemoveContainer",
    "ListContainers",
    "StreamContainers",
    "ContainerStatus",
    "UpdateContainerResources",
    "ReopenContainerLog",
    "ExecSync",
    "Exec",
    "Attach",
    "PortForward",
    "ContainerStats",
    "ListContainerStats",
    "StreamContainerStats",
    "PodSandboxStats",
    "ListPodSandboxStats",
    "StreamPodSandboxStats",
    "UpdateRuntimeConfig",
    "Status",
    "CheckpointContainer",
    "GetContainerEvents",
    "ListMetricDescriptors",
    "ListPodSandboxMetrics",
    "StreamPodSandboxMetrics",
    "RuntimeConfig",
    "UpdatePodSandboxResources",
    "ListImages",
    "StreamImages",
    "ImageStatus",
    "PullImage",
    "RemoveImage",
    "ImageFsInfo",
];

/// Largest message either side may send (containerd's lists of many containers are big).
const MAX_MESSAGE: usize = 64 << 20;

/// What happens to the calls of one method.
#[derive(Debug, Clone, Default)]
pub struct Fault {
    error: Option<Code>,
    delay: Duration,
    /// How many more calls it applies to; `None`: until cleared.
    times: Option<u32>,
    /// Only calls that name this id.
    only: Option<String>,
}

impl Fault {
    /// Calls fail with `code` without reaching containerd.
    pub fn error(code: Code) -> Fault {
        Fault { error: Some(code), ..Fault::default() }
    }

    /// Calls wait `delay`, then go on to containerd. A delay past the caller's deadline is a
    /// runtime that does not answer in time; the caller giving up cancels the call here, so it
    /// never reaches containerd.
    pub fn delay(delay: Duration) -> Fault {
        Fault { delay, ..Fault::default() }
    }

    /// After the delay, fail with `code` instead of going on.
    pub fn then_error(mut self, code: Code) -> Fault {
        self.error = Some(code);
        self
    }

    /// Only the next `n` matching calls.
    pub fn times(mut self, n: u32) -> Fault {
        self.times = Some(n);
        self
    }

    /// Only calls that name `id` (see [`ids`](Ids::ids) for what each request names).
    pub fn only_for(mut self, id: impl Into<String>) -> Fault {
        self.only = Some(id.into());
        self
    }

    fn matches(&self, ids: &[String]) -> bool {
        self.only.as_ref().is_none_or(|id| ids.contains(id))
    }
}

/// What the proxy does to the events of open `GetContainerEvents` streams (all of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EventMode {
    #[default]
    Forward,
    /// Events from containerd are not sent on.
    Drop,
    /// Every event is sent twice.
    Duplicate,
    /// Events are held until this many have arrived, then sent newest first. Switching to
    /// another mode sends what is held, the same way.
    Reverse(usize),
}

/// One call the proxy received.
#[derive(Debug, Clone)]
pub struct Call {
    /// Ordinal, unique per proxy: tells one call from the next call of the same method.
    pub seq: u64,
    pub method: &'static str,
    /// The ids the request names (empty for an unfiltered list, such as the agent's relist).
    pub ids: Vec<String>,
    pub at: Instant,
}

/// How to end the open event streams.
#[derive(Debug, Clone, Copy)]
enum StreamEnd {
    /// With an error status (what the agent sees when the runtime goes away).
    Error(Code),
    /// As if the runtime ended it cleanly.
    Clean,
}

#[derive(Debug, Clone)]
enum StreamCommand {
    End(StreamEnd),
    Send(Vec<api::ContainerEventResponse>),
}

struct State {
    faults: Mutex<Vec<(&'static str, Fault)>>,
    calls: Mutex<Vec<Call>>,
    running: Mutex<HashMap<u64, Call>>,
    seq: AtomicU64,
    mode: watch::Sender<EventMode>,
    streams: broadcast::Sender<StreamCommand>,
    events_seen: Mutex<Vec<api::ContainerEventResponse>>,
    events_sent: AtomicU64,
    events_dropped: AtomicU64,
    open_streams: AtomicU64,
}

fn method_name(method: &str) -> &'static str {
    METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or_else(|| panic!("{method:?} is not a CRI method (see cri_proxy::METHODS)"))
}

/// A call in progress; it leaves [`CriProxy::running`] when dropped (answered or abandoned).
struct Running {
    state: Arc<State>,
    seq: u64,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(mut r) = self.state.running.lock() {
            r.remove(&self.seq);
        }
    }
}

impl State {
    /// Logs the call and applies its fault, if any: the delay, then the error.
    async fn enter(self: &Arc<Self>, method: &'static str, ids: Vec<String>) -> Result<Running, Status> {
        let fault = {
            let mut faults = self.faults.lock().expect("fault table");
            let found = faults.iter().position(|(m, f)| *m == method && f.matches(&ids));
            found.map(|i| {
                let fault = faults[i].1.clone();
                if let Some(n) = faults[i].1.times.as_mut() {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        faults.remove(i);
                    }
                }
                fault
            })
        };
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let call = Call { seq, method, ids, at: Instant::now() };
        self.calls.lock().expect("call log").push(call.clone());
        self.running.lock().expect("running calls").insert(seq, call);
        let running = Running { state: self.clone(), seq };
        if let Some(f) = fault {
            if !f.delay.is_zero() {
                tokio::time::sleep(f.delay).await;
            }
            if let Some(code) = f.error {
                return Err(Status::new(code, format!("{method}: {code:?} injected by the CRI proxy")));
            }
        }
        Ok(running)
    }
}

/// The ids a request names, for [`Fault::only_for`] and the call log.
trait Ids {
    fn ids(&self) -> Vec<String> {
        Vec::new()
    }
}

fn label_values(selector: &HashMap<String, String>) -> impl Iterator<Item = String> + '_ {
    selector.values().cloned()
}

fn sandbox_ids(config: Option<&api::PodSandboxConfig>) -> Vec<String> {
    config.and_then(|c| c.metadata.as_ref()).map(|m| vec![m.uid.clone(), m.name.clone()]).unwrap_or_default()
}

macro_rules! names_nothing {
    ($($req:ident),* $(,)?) => { $(impl Ids for api::$req {})* };
}

macro_rules! names_field {
    ($($req:ident . $field:ident),* $(,)?) => {
        $(impl Ids for api::$req {
            fn ids(&self) -> Vec<String> {
                vec![self.$field.clone()]
            }
        })*
    };
}

names_nothing!(
    VersionRequest,
    ListContainerStatsRequest,
    ListPodSandboxStatsRequest,
    UpdateRuntimeConfigRequest,
    StatusRequest,
    GetEventsRequest,
    ListMetricDescriptorsRequest,
    ListPodSandboxMetricsRequest,
    RuntimeConfigRequest,
    ListImagesRequest,
    ImageFsInfoRequest,
    StreamPodSandboxesRequest,
    StreamContainersRequest,
    StreamContainerStatsRequest,
    StreamPodSandboxStatsRequest,
    StreamPodSandboxMetricsRequest,
    StreamImagesRequest,
);

names_field!(
    StopPodSandboxRequest.pod_sandbox_id,
    RemovePodSandboxRequest.pod_sandbox_id,
    PodSandboxStatusRequest.pod_sandbox_id,
    PodSandboxStatsRequest.pod_sandbox_id,
    StartContainerRequest.container_id,
    StopContainerRequest.container_id,
    RemoveContainerRequest.container_id,
    ContainerStatusRequest.container_id,
    UpdateContainerResourcesRequest.container_id,
    ReopenContainerLogRequest.container_id,
    ExecSyncRequest.container_id,
    ExecRequest.container_id,
    AttachRequest.container_id,
    PortForwardRequest.pod_sandbox_id,
    ContainerStatsRequest.container_id,
    CheckpointContainerRequest.container_id,
    UpdatePodSandboxResourcesRequest.pod_sandbox_id,
);

impl Ids for api::RunPodSandboxRequest {
    fn ids(&self) -> Vec<String> {
        sandbox_ids(self.config.as_ref())
    }
}

impl Ids for api::ListPodSandboxRequest {
    fn ids(&self) -> Vec<String> {
        let Some(f) = &self.filter else { return Vec::new() };
        let id = Some(f.id.clone()).filter(|id| !id.is_empty());
        id.into_iter().chain(label_values(&f.label_selector)).collect()
    }
}

impl Ids for api::ListContainersRequest {
    fn ids(&self) -> Vec<String> {
        let Some(f) = &self.filter else { return Vec::new() };
        let ids = [f.id.clone(), f.pod_sandbox_id.clone()].into_iter().filter(|id| !id.is_empty());
        ids.chain(label_values(&f.label_selector)).collect()
    }
}

impl Ids for api::CreateContainerRequest {
    fn ids(&self) -> Vec<String> {
        let mut ids = vec![self.pod_sandbox_id.clone()];
        ids.extend(self.config.as_ref().and_then(|c| c.metadata.as_ref()).map(|m| m.name.clone()));
        ids.extend(sandbox_ids(self.sandbox_config.as_ref()));
        ids
    }
}

fn image_ids(image: Option<&api::ImageSpec>) -> Vec<String> {
    image.map(|i| vec![i.image.clone()]).unwrap_or_default()
}

impl Ids for api::ImageStatusRequest {
    fn ids(&self) -> Vec<String> {
        image_ids(self.image.as_ref())
    }
}

impl Ids for api::PullImageRequest {
    fn ids(&self) -> Vec<String> {
        let mut ids = image_ids(self.image.as_ref());
        ids.extend(sandbox_ids(self.sandbox_config.as_ref()));
        ids
    }
}

impl Ids for api::RemoveImageRequest {
    fn ids(&self) -> Vec<String> {
        image_ids(self.image.as_ref())
    }
}

/// The deadline the caller put on a call (`grpc-timeout`: digits and a unit, H M S m u n).
fn caller_deadline<T>(request: &Request<T>) -> Option<Duration> {
    let v = request.metadata().get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Runs one forwarded call within the caller's deadline, and answers `DeadlineExceeded` when it
/// runs out, as containerd (grpc-go) does; a little early, so that it is this answer and not
/// tonic's own `Cancelled` that the caller gets. Containerd is given the same deadline.
async fn within_deadline<T, F>(deadline: Option<Duration>, call: F) -> Result<Response<T>, Status>
where
    F: std::future::Future<Output = Result<Response<T>, Status>>,
{
    let Some(d) = deadline else { return call.await };
    match tokio::time::timeout(d.saturating_sub(Duration::from_millis(50)), call).await {
        Ok(r) => r,
        Err(_) => {
            Err(Status::deadline_exceeded(format!("context deadline exceeded (after {d:?}, CRI proxy)")))
        }
    }
}

fn forwarded<T>(message: T, deadline: Option<Duration>) -> Request<T> {
    let mut r = Request::new(message);
    if let Some(d) = deadline {
        r.set_timeout(d);
    }
    r
}

/// The server side: both CRI services, forwarding to containerd.
#[derive(Clone)]
struct Proxy {
    state: Arc<State>,
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
}

/// `impl $service for Proxy`, each unary method logged, faulted and forwarded with `$client`;
/// `$extra` holds the service's other items (the event stream).
/// `streams { method(Req) -> Resp as StreamType = "Name"; }` forwards a server-streaming method
/// (cri-api 0.34+'s `Stream*` lists): faulted on the open, then containerd's stream as it is.
macro_rules! forwarding {
    ($service:ident via $client:ident { $($method:ident($req:ident) -> $resp:ident = $name:literal;)* }
     streams { $($smethod:ident($sreq:ident) -> $sresp:ident as $stype:ident = $sname:literal;)* }
     $($extra:tt)*) => {
        #[tonic::async_trait]
        impl $service for Proxy {
            $(
                async fn $method(&self, request: Request<api::$req>) -> Result<Response<api::$resp>, Status> {
                    let deadline = caller_deadline(&request);
                    let message = request.into_inner();
                    within_deadline(deadline, async {
                        let _running = self.state.enter($name, message.ids()).await?;
                        self.$client.clone().$method(forwarded(message, deadline)).await
                    })
                    .await
                }
            )*
            $(
                type $stype = tonic::Streaming<api::$sresp>;

                async fn $smethod(&self, request: Request<api::$sreq>) -> Result<Response<Self::$stype>, Status> {
                    let message = request.into_inner();
                    let _running = self.state.enter($sname, message.ids()).await?;
                    self.$client.clone().$smethod(Request::new(message)).await
                }
            )*
            $($extra)*
        }
    };
}

forwarding!(RuntimeService via runtime {
    version(VersionRequest) -> VersionResponse = "Version";
    run_pod_sandbox(RunPodSandboxRequest) -> RunPodSandboxResponse = "RunPodSandbox";
    stop_pod_sandbox(StopPodSandboxRequest) -> StopPodSandboxResponse = "StopPodSandbox";
    remove_pod_sandbox(RemovePodSandboxRequest) -> RemovePodSandboxResponse = "RemovePodSandbox";
    pod_sandbox_status(PodSandboxStatusRequest) -> PodSandboxStatusResponse = "PodSandboxStatus";
    list_pod_sandbox(ListPodSandboxRequest) -> ListPodSandboxResponse = "ListPodSandbox";
    create_container(CreateContainerRequest) -> CreateContainerResponse = "CreateContainer";
    start_container(StartContainerRequest) -> StartContainerResponse = "StartContainer";
    stop_container(StopContainerRequest) -> StopContainerResponse = "StopContainer";
    remove_container(RemoveContainerRequest) -> RemoveContainerResponse = "RemoveContainer";
    list_containers(ListContainersRequest) -> ListContainersResponse = "ListContainers";
    container_status(ContainerStatusRequest) -> ContainerStatusResponse = "ContainerStatus";
    update_container_resources(UpdateContainerResourcesRequest) -> UpdateContainerResourcesResponse
        = "UpdateContainerResources";
    reopen_container_log(ReopenContainerLogRequest) -> ReopenContainerLogResponse = "ReopenContainerLog";
    exec_sync(ExecSyncRequest) -> ExecSyncResponse = "ExecSync";
    exec(ExecRequest) -> ExecResponse = "Exec";
    attach(AttachRequest) -> AttachResponse = "Attach";
    port_forward(PortForwardRequest) -> PortForwardResponse = "PortForward";
    container_stats(ContainerStatsRequest) -> ContainerStatsResponse = "ContainerStats";
    list_container_stats(ListContainerStatsRequest) -> ListContainerStatsResponse = "ListContainerStats";
    pod_sandbox_stats(PodSandboxStatsRequest) -> PodSandboxStatsResponse = "PodSandboxStats";
    list_pod_sandbox_stats(ListPodSandboxStatsRequest) -> ListPodSandboxStatsResponse = "ListPodSandboxStats";
    update_runtime_config(UpdateRuntimeConfigRequest) -> UpdateRuntimeConfigResponse = "UpdateRuntimeConfig";
    status(StatusRequest) -> StatusResponse = "Status";
    checkpoint_container(CheckpointContainerRequest) -> CheckpointContainerResponse = "CheckpointContainer";
    list_metric_descriptors(ListMetricDescriptorsRequest) -> ListMetricDescriptorsResponse
        = "ListMetricDescriptors";
    list_pod_sandbox_metrics(ListPodSandboxMetricsRequest) -> ListPodSandboxMetricsResponse
        = "ListPodSandboxMetrics";
    runtime_config(RuntimeConfigRequest) -> RuntimeConfigResponse = "RuntimeConfig";
    update_pod_sandbox_resources(UpdatePodSandboxResourcesRequest) -> UpdatePodSandboxResourcesResponse
        = "UpdatePodSandboxResources";
}
streams {
    stream_pod_sandboxes(StreamPodSandboxesRequest) -> StreamPodSandboxesResponse
        as StreamPodSandboxesStream = "StreamPodSandboxes";
    stream_containers(StreamContainersRequest) -> StreamContainersResponse
        as StreamContainersStream = "StreamContainers";
    stream_container_stats(StreamContainerStatsRequest) -> StreamContainerStatsResponse
        as StreamContainerStatsStream = "StreamContainerStats";
    stream_pod_sandbox_stats(StreamPodSandboxStatsRequest) -> StreamPodSandboxStatsResponse
        as StreamPodSandboxStatsStream = "StreamPodSandboxStats";
    stream_pod_sandbox_metrics(StreamPodSandboxMetricsRequest) -> StreamPodSandboxMetricsResponse
        as StreamPodSandboxMetricsStream = "StreamPodSandboxMetrics";
}
    type GetContainerEventsStream = ReceiverStream<Result<api::ContainerEventResponse, Status>>;

    /// Opens containerd's stream and pumps it through the event faults. The open is awaited
    /// before answering, as containerd answers it (with its first event), so the agent sees
    /// the runtime's own timing and an `Unimplemented` (containerd 1.6) as the open's error.
    async fn get_container_events(
        &self,
        request: Request<api::GetEventsRequest>,
    ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
        let message = request.into_inner();
        let running = self.state.enter("GetContainerEvents", message.ids()).await?;
        // Subscribed before opening: a break ordered while containerd has not answered the
        // open yet ends this stream too.
        let mut commands = self.state.streams.subscribe();
        let mut client = self.runtime.clone();
        let open = client.get_container_events(Request::new(message));
        tokio::pin!(open);
        let upstream = loop {
            tokio::select! {
                r = &mut open => break r?.into_inner(),
                c = commands.recv() => match c {
                    Ok(StreamCommand::End(StreamEnd::Error(code))) => {
                        return Err(Status::new(code, "event stream broken by the CRI proxy"));
                    }
                    Ok(StreamCommand::End(StreamEnd::Clean)) => {
                        let (_, rx) = mpsc::channel(1);
                        return Ok(Response::new(ReceiverStream::new(rx)));
                    }
                    Ok(StreamCommand::Send(_)) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return Err(Status::unavailable("proxy stopped")),
                },
            }
        };
        drop(running);
        let (tx, rx) = mpsc::channel(1024);
        tokio::spawn(pump(self.state.clone(), upstream, commands, tx));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
);

forwarding!(ImageService via images {
    list_images(ListImagesRequest) -> ListImagesResponse = "ListImages";
    image_status(ImageStatusRequest) -> ImageStatusResponse = "ImageStatus";
    pull_image(PullImageRequest) -> PullImageResponse = "PullImage";
    remove_image(RemoveImageRequest) -> RemoveImageResponse = "RemoveImage";
    image_fs_info(ImageFsInfoRequest) -> ImageFsInfoResponse = "ImageFsInfo";
}
streams {
    stream_images(StreamImagesRequest) -> StreamImagesResponse as StreamImagesStream = "StreamImages";
});

/// Moves one stream's events from containerd to the agent through the event faults, until
/// either side ends it or a test breaks it.
async fn pump(
    state: Arc<State>,
    mut upstream: tonic::Streaming<api::ContainerEventResponse>,
    mut commands: broadcast::Receiver<StreamCommand>,
    tx: mpsc::Sender<Result<api::ContainerEventResponse, Status>>,
) {
    state.open_streams.fetch_add(1, Ordering::Relaxed);
    let _open = OpenStream(state.clone());
    let mut mode = state.mode.subscribe();
    let mut held: Vec<api::ContainerEventResponse> = Vec::new();
    let send = |ev: api::ContainerEventResponse| {
        let tx = tx.clone();
        let state = state.clone();
        async move {
            let sent = tx.send(Ok(ev)).await.is_ok();
            if sent {
                state.events_sent.fetch_add(1, Ordering::Relaxed);
            }
            sent
        }
    };
    loop {
        tokio::select! {
            () = tx.closed() => return,
            c = commands.recv() => match c {
                Ok(StreamCommand::End(StreamEnd::Error(code))) => {
                    let _ = tx.send(Err(Status::new(code, "event stream broken by the CRI proxy"))).await;
                    return;
                }
                Ok(StreamCommand::End(StreamEnd::Clean)) | Err(broadcast::error::RecvError::Closed) => return,
                Ok(StreamCommand::Send(events)) => {
                    for ev in events {
                        if !send(ev).await {
                            return;
                        }
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {}
            },
            changed = mode.changed() => {
                if changed.is_err() {
                    return;
                }
                mode.borrow_and_update();
                for ev in held.drain(..).rev() {
                    if !send(ev).await {
                        return;
                    }
                }
            }
            m = upstream.message() => {
                let ev = match m {
                    Ok(Some(ev)) => ev,
                    Ok(None) => return,
                    Err(s) => {
                        let _ = tx.send(Err(s)).await;
                        return;
                    }
                };
                state.events_seen.lock().expect("event log").push(ev.clone());
                let current = *mode.borrow();
                let ok = match current {
                    EventMode::Forward => send(ev).await,
                    EventMode::Drop => {
                        state.events_dropped.fetch_add(1, Ordering::Relaxed);
                        true
                    }
                    EventMode::Duplicate => send(ev.clone()).await && send(ev).await,
                    EventMode::Reverse(n) => {
                        held.push(ev);
                        let mut ok = true;
                        if held.len() >= n.max(1) {
                            for ev in held.drain(..).rev() {
                                ok = ok && send(ev).await;
                            }
                        }
                        ok
                    }
                };
                if !ok {
                    return;
                }
            }
        }
    }
}

/// Counts an open event stream for as long as its pump runs.
struct OpenStream(Arc<State>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.open_streams.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A channel to containerd's socket that connects on first use and again after each failure
/// (as the agent's own client does), so containerd restarting under the proxy costs calls only.
fn upstream_channel(endpoint: &str) -> Channel {
    let path = PathBuf::from(endpoint.strip_prefix("unix://").unwrap_or(endpoint));
    Endpoint::from_static("http://[::]:50051")
        .connect_timeout(Duration::from_secs(5))
        .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
}

/// A running proxy; stops serving when dropped.
pub struct CriProxy {
    socket: PathBuf,
    state: Arc<State>,
    server: tokio::task::JoinHandle<()>,
}

impl CriProxy {
    /// Serves a proxy for test `name` on a socket of its own, forwarding to `upstream`
    /// (a `unix://` CRI endpoint, normally the environment's containerd).
    pub async fn start(name: &str, upstream: &str) -> CriProxy {
        let socket = PathBuf::from("/run/crilet-dev/tests").join(format!("{name}-cri.sock"));
        std::fs::create_dir_all(socket.parent().expect("socket dir")).expect("mkdir for the proxy socket");
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket)
            .unwrap_or_else(|e| panic!("cannot bind the CRI proxy on {}: {e}", socket.display()));
        let (mode, _) = watch::channel(EventMode::Forward);
        let (streams, _) = broadcast::channel(64);
        let state = Arc::new(State {
            faults: Mutex::default(),
            calls: Mutex::default(),
            running: Mutex::default(),
            seq: AtomicU64::new(0),
            mode,
            streams,
            events_seen: Mutex::default(),
            events_sent: AtomicU64::new(0),
            events_dropped: AtomicU64::new(0),
            open_streams: AtomicU64::new(0),
        });
        let channel = upstream_channel(upstream);
        let proxy = Proxy {
            state: state.clone(),
            runtime: RuntimeServiceClient::new(channel.clone()).max_decoding_message_size(MAX_MESSAGE),
            images: ImageServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE),
        };
        let serve = Server::builder()
            .add_service(
                RuntimeServiceServer::new(proxy.clone())
                    .max_decoding_message_size(MAX_MESSAGE)
                    .max_encoding_message_size(MAX_MESSAGE),
            )
            .add_service(
                ImageServiceServer::new(proxy)
                    .max_decoding_message_size(MAX_MESSAGE)
                    .max_encoding_message_size(MAX_MESSAGE),
            )
            .serve_with_incoming(UnixListenerStream::new(listener));
        let server = tokio::spawn(async move {
            if let Err(e) = serve.await {
                eprintln!("CRI proxy stopped: {e}");
            }
        });
        CriProxy { socket, state, server }
    }

    /// The endpoint to give the agent (`unix://…`).
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Adds a fault to `method`'s calls. Faults of one method are tried in the order they were
    /// added; the first that matches a call applies to it.
    pub fn inject(&self, method: &str, fault: Fault) {
        let method = method_name(method);
        self.state.faults.lock().expect("fault table").push((method, fault));
    }

    /// Removes every fault of `method` (calls already delayed stay delayed).
    pub fn clear(&self, method: &str) {
        let method = method_name(method);
        self.state.faults.lock().expect("fault table").retain(|(m, _)| *m != method);
    }

    /// Removes every fault of every method.
    pub fn clear_all(&self) {
        self.state.faults.lock().expect("fault table").clear();
    }

    /// Every call received so far, oldest first.
    pub fn calls(&self) -> Vec<Call> {
        self.state.calls.lock().expect("call log").clone()
    }

    /// How many calls of `method` were received.
    pub fn count(&self, method: &str) -> usize {
        let method = method_name(method);
        self.state.calls.lock().expect("call log").iter().filter(|c| c.method == method).count()
    }

    /// How many unfiltered calls of `method` were received (for `ListContainers`: the agent's
    /// relists, which name no pod, as opposed to a pod worker's observation of its pod).
    pub fn count_unfiltered(&self, method: &str) -> usize {
        let method = method_name(method);
        let calls = self.state.calls.lock().expect("call log");
        calls.iter().filter(|c| c.method == method && c.ids.is_empty()).count()
    }

    /// Calls of `method` naming `id` still in progress (delayed, or not answered yet), oldest first.
    pub fn running(&self, method: &str, id: &str) -> Vec<Call> {
        let method = method_name(method);
        let running = self.state.running.lock().expect("running calls");
        let mut calls: Vec<Call> = running
            .values()
            .filter(|c| c.method == method && c.ids.iter().any(|i| i == id))
            .cloned()
            .collect();
        calls.sort_by_key(|c| c.seq);
        calls
    }

    /// Is call `seq` still in progress?
    pub fn is_running(&self, seq: u64) -> bool {
        self.state.running.lock().expect("running calls").contains_key(&seq)
    }

    /// Sets what happens to events from now on (see [`EventMode`]).
    pub fn set_event_mode(&self, mode: EventMode) {
        self.state.mode.send_replace(mode);
    }

    /// Ends every open event stream with `code` (the agent sees the stream break). To keep it
    /// from being reopened, also inject an error fault on `GetContainerEvents`.
    pub fn break_event_streams(&self, code: Code) {
        let _ = self.state.streams.send(StreamCommand::End(StreamEnd::Error(code)));
    }

    /// Ends every open event stream as if containerd had closed it.
    pub fn end_event_streams(&self) {
        let _ = self.state.streams.send(StreamCommand::End(StreamEnd::Clean));
    }

    /// Sends `events` again on every open stream: stale and duplicate news.
    pub fn replay_events(&self, events: Vec<api::ContainerEventResponse>) {
        let _ = self.state.streams.send(StreamCommand::Send(events));
    }

    /// Every event containerd sent through the proxy, oldest first (whatever the mode did to it).
    pub fn events_seen(&self) -> Vec<api::ContainerEventResponse> {
        self.state.events_seen.lock().expect("event log").clone()
    }

    /// Events sent on to the agent (each copy of a duplicate counts) and events dropped.
    pub fn event_counts(&self) -> (u64, u64) {
        (self.state.events_sent.load(Ordering::Relaxed), self.state.events_dropped.load(Ordering::Relaxed))
    }

    /// Event streams currently open between the agent and containerd.
    pub fn open_event_streams(&self) -> u64 {
        self.state.open_streams.load(Ordering::Relaxed)
    }
}

impl Drop for CriProxy {
    fn drop(&mut self) {
        self.server.abort();
        let _ = self.state.streams.send(StreamCommand::End(StreamEnd::Error(Code::Unavailable)));
        let _ = std::fs::remove_file(&self.socket);
    }
}
