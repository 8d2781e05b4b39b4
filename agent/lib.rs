//! crilet: a kubelet-faithful node agent that runs static Pod manifests on containerd over CRI.
pub mod api;
pub mod apparmor;
pub mod backoff;
pub mod cgroup;
pub mod checkpoint;
pub mod cli;
pub mod cluster;
pub mod context;
pub mod cri;
pub mod dns;
pub mod eviction;
pub mod expand;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod health;
pub mod images;
pub mod kubelet_api;
pub mod ledger;
pub mod logrotate;
pub mod logs;
pub mod metrics;
pub mod model;
pub mod mountinfo;
pub mod node;
pub mod pleg;
pub mod pod;
pub mod podspec;
pub mod ports;
pub mod probe;
pub mod profile;
pub mod quantity;
pub mod recorder;
pub mod registry;
pub mod source;
pub mod stats;
pub mod status;
pub mod sysctl;
pub mod systemd;
pub mod tasks;
pub mod timeline;
pub mod volumes;

pub mod proto {
    //! The generated control API (`proto/crilet/v1`).
    tonic::include_proto!("crilet.v1");
}

/// The CRI v1 API (package `runtime.v1`) generated from `proto/cri/runtime/v1/api.proto`, the
/// cri-api v0.36.3 proto (`hack/update-cri-proto.sh`): messages, clients and servers. The CRI
/// client (`cri`, as `cri::api`) speaks it; observed state (`model`) carries its resources.
#[allow(clippy::all, missing_docs)]
pub mod cri_proto {
    tonic::include_proto!("runtime.v1");
}

pub mod http_get;

/// `e` and its causes, `: `-separated (for logs and error messages).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// `f` on tokio's blocking pool: file work reached from async code runs there, so a slow disk
/// never stalls a runtime thread (one call per logical step, not per syscall). A task that could
/// not finish (it panicked, or the runtime is shutting down) comes back as an `io::Error`.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(format!("blocking file work did not finish: {e}"))))
}

/// The Kubernetes minor version whose kubelet behaviour crilet follows (User-Agent strings).
pub const KUBE_VERSION: &str = "1.33";
