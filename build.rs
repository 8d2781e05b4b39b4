//! Compiles the control API (`proto/crilet/v1/*.proto`) with tonic's build tooling.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure().compile_protos(&["proto/crilet/v1/control.proto"], &["proto"])?;
    Ok(())
}
