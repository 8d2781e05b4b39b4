//! Compiles the protos under `proto/` with tonic's build tooling:
//! - the control API (`proto/crilet/v1/control.proto`), client and server;
//! - the CRI v1 API (`proto/cri/runtime/v1/api.proto`, cri-api v0.36.3, refreshed by
//!   `hack/update-cri-proto.sh`), client for the agent and server for the tests' CRI proxy.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure().compile_protos(&["proto/crilet/v1/control.proto"], &["proto"])?;
    tonic_prost_build::configure().compile_protos(&["proto/cri/runtime/v1/api.proto"], &["proto/cri"])?;
    Ok(())
}
