//! Loading the kubeconfig and telling a wrong one (fatal) from an API server that cannot be
//! reached yet (retried).

use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::{Api, PostParams};
use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::throttle::{Limit, ThrottleLayer};

/// Why the agent cannot use a kubeconfig at all: the agent stops with this.
#[derive(Debug, thiserror::Error)]
#[error("kubeconfig {}: {reason}", file.display())]
pub struct KubeconfigError {
    pub file: PathBuf,
    pub reason: String,
}

/// The node's clients of one API server, as the kubelet's: each with its own rate limit.
pub struct Clients {
    /// Pods, statuses, mirror pods, Node registration, the objects volumes read.
    pub api: kube::Client,
    /// Events.
    pub events: kube::Client,
    /// The Node's status and Lease: never throttled.
    pub heartbeat: kube::Client,
}

/// The client settings of a kubeconfig file.
async fn config(file: &Path) -> Result<kube::Config, KubeconfigError> {
    let fail = |reason: String| KubeconfigError { file: file.to_path_buf(), reason };
    let kubeconfig = Kubeconfig::read_from(file).map_err(|e| fail(format!("{e}")))?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| fail(format!("{e}")))?;
    // The kubelet's defaults: a watch is long-lived; single requests are bounded.
    config.read_timeout = Some(std::time::Duration::from_secs(300));
    config.connect_timeout = Some(std::time::Duration::from_secs(10));
    Ok(config)
}

/// A client with `limit` from the settings of `file`.
fn build(file: &Path, config: &kube::Config, limit: Limit) -> Result<kube::Client, KubeconfigError> {
    ClientBuilder::try_from(config.clone()).map(|b| b.with_layer(&ThrottleLayer::new(limit)).build()).map_err(
        |e| KubeconfigError { file: file.to_path_buf(), reason: format!("building the client: {e}") },
    )
}

/// Builds one client (not rate-limited) from the kubeconfig file. Nothing is sent yet.
pub async fn client(file: &Path) -> Result<kube::Client, KubeconfigError> {
    build(file, &config(file).await?, Limit::NONE)
}

/// Builds the node's clients from the kubeconfig file. Nothing is sent yet. With `slot`
/// (client certificate rotation), every client presents the slot's certificate instead of the
/// kubeconfig's (`client_cert`).
pub async fn clients(
    file: &Path,
    api: Limit,
    events: Limit,
    slot: Option<&super::client_cert::ClientCertSlot>,
) -> Result<Clients, KubeconfigError> {
    let config = config(file).await?;
    let one = |limit| match slot {
        None => build(file, &config, limit),
        Some(slot) => super::client_cert::client(&config, slot, limit)
            .map_err(|reason| KubeconfigError { file: file.to_path_buf(), reason }),
    };
    Ok(Clients { api: one(api)?, events: one(events)?, heartbeat: one(Limit::NONE)? })
}

/// What asking the API server who we are found.
#[derive(Debug)]
pub enum Identity {
    /// The credentials work: the user name the API server sees.
    User(String),
    /// The API server refused the credentials (401) or the TLS handshake: fatal.
    Refused(String),
    /// The API server cannot be reached (yet): retry.
    Unreachable(String),
}

/// Asks the API server who the client's credentials are (`SelfSubjectReview`, which any
/// authenticated user may create).
pub async fn whoami(client: &kube::Client) -> Identity {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    match api.create(&PostParams::default(), &SelfSubjectReview::default()).await {
        Ok(r) => {
            Identity::User(r.status.and_then(|s| s.user_info).and_then(|u| u.username).unwrap_or_default())
        }
        Err(kube::Error::Api(s)) if s.code == 401 => {
            Identity::Refused(format!("the API server refused the credentials (401 {})", s.message))
        }
        Err(kube::Error::Api(s)) => {
            Identity::Refused(format!("the API server answered {} {}", s.code, s.message))
        }
        Err(e) => classify_transport(&e),
    }
}

/// A transport error: a certificate problem is the kubeconfig's fault, anything else is an API
/// server that is not there yet.
fn classify_transport(e: &kube::Error) -> Identity {
    let text = crate::error_chain(e);
    let lower = text.to_lowercase();
    let tls = ["certificate", "unknownissuer", "badsignature", "handshake", "decrypt error", "tls"];
    if tls.iter().any(|t| lower.contains(t)) && !lower.contains("connection refused") {
        Identity::Refused(format!("TLS with the API server failed: {text}"))
    } else {
        Identity::Unreachable(text)
    }
}
