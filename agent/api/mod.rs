//! The control API: serves `crilet.v1.Control` (proto/) on a Unix socket from the shared
//! [`Registry`], and connects the CLI to it. Pod state is owned by the pod workers; this module
//! only reads it, plus storing the conditions that readiness gates name. It is the one place where
//! errors become `tonic::Status` (`service.rs`).

mod service;
mod socket;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint, Server, Uri};
use tracing::info;

use crate::proto::control_client::ControlClient;
use crate::proto::control_server::ControlServer;
use crate::registry::Registry;

/// Version info the agent learned from the runtime at start-up.
#[derive(Clone, Debug, Default)]
pub struct RuntimeInfo {
    pub name: String,
    pub version: String,
    pub api_version: String,
    /// The PLEG's live mode (events or relist) and event count.
    pub pleg: std::sync::Arc<crate::pleg::PlegState>,
    /// The node's name (`--node-name`): the object of the node's events.
    pub node_name: String,
}

/// Why the control API could not be served or reached.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("cannot create the control socket's directory {}", .path.display())]
    SocketDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("another agent is already serving the control socket {}", .path.display())]
    InUse { path: PathBuf },
    #[error("{} exists and is not a socket; refusing to replace it", .path.display())]
    NotASocket { path: PathBuf },
    #[error("cannot bind the control socket {}", .path.display())]
    Bind {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the control API server on {} failed", .path.display())]
    Serve {
        path: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
    #[error(
        "cannot connect to the agent's control socket {}: is `crilet run` running and listening \
         there? Point elsewhere with --control-socket PATH, CRILET_CONTROL_SOCKET=PATH or \
         --config FILE",
        .path.display()
    )]
    Connect {
        path: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
}

/// Serves the Control service on a Unix socket at `path` (parent dir created 0755; stale socket
/// file removed; socket file mode 0600 before anyone can connect) until `cancel` fires; removes
/// the socket file on exit. Open event watches end when `cancel` fires.
pub async fn serve(
    path: PathBuf,
    registry: Registry,
    runtime: RuntimeInfo,
    cancel: CancellationToken,
) -> Result<(), ApiError> {
    let (listener, socket_file) = socket::bind(&path).await?;
    let service = service::ControlService::new(registry, runtime, cancel.clone());
    info!(socket = %path.display(), "control API listening");
    let served = Server::builder()
        .add_service(ControlServer::new(service))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), cancel.cancelled())
        .await;
    drop(socket_file);
    served.map_err(|source| ApiError::Serve { path, source })
}

/// Connects to the agent's control socket.
pub async fn connect(path: &Path) -> Result<ControlClient<Channel>, ApiError> {
    let socket = path.to_path_buf();
    // The URI is required by the HTTP/2 layer but unused: the connector always dials the socket.
    let channel = Endpoint::from_static("http://[::]:50051")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(socket).await?)) }
        }))
        .await
        .map_err(|source| ApiError::Connect { path: path.to_path_buf(), source })?;
    Ok(ControlClient::new(channel))
}
