//! crilet: a kubelet-faithful node agent that runs static Pod manifests on containerd over CRI.
pub mod model;
pub mod registry;

pub mod proto {
    //! The generated control API (`proto/crilet/v1`).
    tonic::include_proto!("crilet.v1");
}
pub mod api;
pub mod cli;
pub mod source;
pub mod status;
