//! crilet: a kubelet-faithful node agent that runs static Pod manifests on containerd over CRI.
pub mod api;
pub mod cli;
pub mod cri;
pub mod model;
pub mod pod;
pub mod registry;
pub mod source;
pub mod status;

pub mod proto {
    //! The generated control API (`proto/crilet/v1`).
    tonic::include_proto!("crilet.v1");
}
