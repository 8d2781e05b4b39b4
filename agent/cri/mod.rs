//! The only code that knows tonic and the CRI protos: a client for containerd's CRI v1
//! runtime and image services over a Unix socket, with a deadline on every call.
//!
//! Callers get domain types (`crate::model`) back; request building for sandboxes and
//! containers lives with the pod code, which owns the kubelet rules behind each field. The pod
//! engine and the probes call the runtime through the [`Runtime`] trait: the client implements it, and
//! so does `fake`, an in-memory runtime for unit tests.

mod brief;
mod client;
mod convert;
#[cfg(test)]
pub mod fake;
mod runtime;
pub mod signal;
mod status_cache;

pub use brief::{Brief, RuntimeBrief};
pub use client::{CallObserver, CriClient, ImageFs, RuntimeInfo, StreamingRequest};
pub use convert::{container_from_status, sandbox_from_status};
pub use runtime::Runtime;

/// The CRI v1 API's generated types (vocabulary, in `crate::cri_proto`).
pub use crate::cri_proto as api;

/// An error from one CRI call, naming the call and its target.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("CRI {op} for {target} failed: {code:?}: {message}")]
    Rpc { op: &'static str, target: String, code: tonic::Code, message: String },
    #[error("CRI {op} for {target}: {kind} not found")]
    NotFound { op: &'static str, target: String, kind: &'static str },
    #[error("CRI {op} for {target} did not answer within {timeout:?}")]
    DeadlineExceeded { op: &'static str, target: String, timeout: std::time::Duration },
    #[error("CRI endpoint {endpoint} is not usable: {reason}")]
    Endpoint { endpoint: String, reason: String },
}

impl CriError {
    pub(crate) fn from_status(op: &'static str, target: &str, status: tonic::Status) -> Self {
        match status.code() {
            tonic::Code::NotFound => CriError::NotFound { op, target: target.to_string(), kind: "object" },
            code => {
                CriError::Rpc { op, target: target.to_string(), code, message: status.message().to_string() }
            }
        }
    }

    /// The object the call was about no longer exists (callers treat stops/removals of it as done).
    pub fn is_not_found(&self) -> bool {
        matches!(self, CriError::NotFound { .. })
    }

    /// The runtime does not implement the call.
    pub fn is_unimplemented(&self) -> bool {
        matches!(self, CriError::Rpc { code: tonic::Code::Unimplemented, .. })
    }
}
