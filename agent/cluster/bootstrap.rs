//! TLS bootstrapping (the kubelet's `--bootstrap-kubeconfig`) and the CSR round trip that
//! rotation shares with it: submit a `certificates.k8s.io/v1` CertificateSigningRequest, wait
//! until the cluster approves and signs it (or says no), keep the pair under `--cert-dir`.
//! Nothing here signs anything: the controller-manager's csrapproving and csrsigning do.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use tracing::info;

use super::certificate::{self, CaSource, Kind};

/// How long a CSR may wait for approval and signing (the kubelet's bootstrap waits 1 h; its
/// rotation 15 min): past it the caller retries with back-off.
pub const CSR_WAIT: Duration = Duration::from_secs(15 * 60);

/// What went wrong getting a certificate.
#[derive(Debug, thiserror::Error)]
pub enum CsrError {
    #[error("creating CertificateSigningRequest {name}")]
    Create {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("CertificateSigningRequest {name} was denied ({reason}: {message})")]
    Denied { name: String, reason: String, message: String },
    #[error("CertificateSigningRequest {name} failed ({reason}: {message})")]
    Failed { name: String, reason: String, message: String },
    #[error("CertificateSigningRequest {name} was deleted before it was signed")]
    Deleted { name: String },
    #[error("CertificateSigningRequest {name} was not signed within {}s (approved: {approved})", .waited.as_secs())]
    Timeout { name: String, approved: bool, waited: Duration },
    #[error("watching CertificateSigningRequest {name}")]
    Watch {
        name: String,
        #[source]
        source: kube::runtime::wait::Error,
    },
    #[error("making the key and request: {0}")]
    Key(#[from] rcgen::Error),
    #[error("{what} {}", path.display())]
    File {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("bootstrap kubeconfig {}: {reason}", path.display())]
    Bootstrap { path: PathBuf, reason: String },
}

/// How a CSR is named: the bootstrap's digest name (found again after a restart), or a name
/// the API server generates (`csr-…`, as the kubelet's rotation).
pub enum CsrName<'a> {
    Fixed(&'a str),
    Generate,
}

/// Submits `csr_pem` for `kind`'s signer with the kubelet's usages and waits up to `wait` for
/// the signed certificate (PEM). A CSR of the same fixed name that exists
/// already is waited on (a restarted bootstrap asks with the same key). No `expirationSeconds`:
/// the kubelet asks for none, so the cluster's `--cluster-signing-duration` decides.
pub async fn request_certificate(
    client: &kube::Client,
    kind: Kind,
    csr_pem: &str,
    name: CsrName<'_>,
    wait: Duration,
) -> Result<String, CsrError> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let mut meta = ObjectMeta::default();
    match name {
        CsrName::Fixed(n) => meta.name = Some(n.to_string()),
        CsrName::Generate => meta.generate_name = Some("csr-".to_string()),
    }
    let csr = CertificateSigningRequest {
        metadata: meta,
        spec: CertificateSigningRequestSpec {
            request: ByteString(csr_pem.as_bytes().to_vec()),
            signer_name: kind.signer().to_string(),
            usages: Some(kind.usages().iter().map(|u| u.to_string()).collect()),
            ..Default::default()
        },
        status: None,
    };
    let name = match (api.create(&PostParams::default(), &csr).await, &name) {
        (Ok(made), _) => made.metadata.name.unwrap_or_default(),
        (Err(kube::Error::Api(s)), CsrName::Fixed(n)) if s.code == 409 => {
            info!(csr = %n, "the CertificateSigningRequest exists already (an earlier attempt); waiting on it");
            n.to_string()
        }
        (Err(source), CsrName::Fixed(n)) => return Err(CsrError::Create { name: n.to_string(), source }),
        (Err(source), CsrName::Generate) => return Err(CsrError::Create { name: "csr-…".into(), source }),
    };
    info!(csr = %name, signer = kind.signer(), "CertificateSigningRequest submitted; waiting for approval and signing");
    // Approved is not the end: the signer writes the certificate after the approver.
    let decided = |c: Option<&CertificateSigningRequest>| {
        c.is_none_or(|c| !matches!(outcome(c), Outcome::Pending | Outcome::Approved))
    };
    let seen =
        tokio::time::timeout(wait, kube::runtime::wait::await_condition(api.clone(), &name, decided)).await;
    let csr = match seen {
        Err(_) => {
            let approved =
                api.get_opt(&name).await.ok().flatten().is_some_and(|c| outcome(&c) == Outcome::Approved);
            return Err(CsrError::Timeout { name, approved, waited: wait });
        }
        Ok(Err(source)) => return Err(CsrError::Watch { name, source }),
        Ok(Ok(None)) => return Err(CsrError::Deleted { name }),
        Ok(Ok(Some(c))) => c,
    };
    let condition = |t: &str| {
        csr.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == t))
            .map(|c| (c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()))
    };
    match outcome(&csr) {
        Outcome::Denied => {
            let (reason, message) = condition("Denied").unwrap_or_default();
            Err(CsrError::Denied { name, reason, message })
        }
        Outcome::Failed => {
            let (reason, message) = condition("Failed").unwrap_or_default();
            Err(CsrError::Failed { name, reason, message })
        }
        Outcome::Issued(cert) => {
            info!(csr = %name, "CertificateSigningRequest approved and signed");
            Ok(cert)
        }
        Outcome::Pending | Outcome::Approved => Err(CsrError::Timeout { name, approved: true, waited: wait }),
    }
}

/// Where a CSR stands, from its status.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Pending,
    Approved,
    Denied,
    Failed,
    Issued(String),
}

fn outcome(csr: &CertificateSigningRequest) -> Outcome {
    let status = csr.status.as_ref();
    let has = |t: &str| {
        status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == t && c.status == "True"))
    };
    if has("Denied") {
        return Outcome::Denied;
    }
    if has("Failed") {
        return Outcome::Failed;
    }
    if !has("Approved") {
        return Outcome::Pending;
    }
    match status.and_then(|s| s.certificate.as_ref()).filter(|c| !c.0.is_empty()) {
        Some(cert) => Outcome::Issued(String::from_utf8_lossy(&cert.0).into_owned()),
        None => Outcome::Approved,
    }
}

/// The settings TLS bootstrapping needs.
#[derive(Debug, Clone)]
pub struct Bootstrap {
    /// `--kubeconfig`: written here once the certificate is issued.
    pub kubeconfig: PathBuf,
    /// `--bootstrap-kubeconfig`.
    pub bootstrap_kubeconfig: PathBuf,
    /// `--cert-dir`.
    pub cert_dir: PathBuf,
    pub node_name: String,
}

/// Makes sure `--kubeconfig` holds a usable client certificate, as the kubelet's
/// `LoadClientCert`: a kubeconfig whose certificate is valid now is used as it is; else a
/// valid pair already in `--cert-dir` gets a kubeconfig written for it; else the node asks the
/// cluster for one with the bootstrap kubeconfig's credentials and waits until it is signed.
pub async fn ensure_client_certificate(b: &Bootstrap) -> Result<(), CsrError> {
    let now = SystemTime::now();
    let kubeconfig = b.kubeconfig.clone();
    let current = certificate::current_path(&b.cert_dir, Kind::Client);
    let (existing, stored) = crate::blocking(move || {
        let existing = certificate::read_kubeconfig(&kubeconfig);
        let stored = std::fs::read(&current).ok();
        Ok((existing, stored))
    })
    .await
    .map_err(|source| CsrError::File { what: "reading", path: b.kubeconfig.clone(), source })?;
    let usable = |pem: &Option<Vec<u8>>| {
        pem.as_deref().and_then(certificate::cert_info).is_some_and(|i| i.valid_at(now))
    };
    if existing.as_ref().is_some_and(|k| usable(&k.cert_pem) && k.key_pem.is_some()) {
        info!(kubeconfig = %b.kubeconfig.display(), "the kubeconfig's client certificate is valid; no bootstrap");
        return Ok(());
    }
    let boot = certificate::read_kubeconfig(&b.bootstrap_kubeconfig).ok_or_else(|| CsrError::Bootstrap {
        path: b.bootstrap_kubeconfig.clone(),
        reason: "missing or not a kubeconfig".into(),
    })?;
    if usable(&stored) {
        info!(cert_dir = %b.cert_dir.display(), "a valid client certificate is in the cert dir; writing the kubeconfig for it");
        return write_kubeconfig(b, &boot).await;
    }
    info!(
        kubeconfig = %b.kubeconfig.display(),
        bootstrap_kubeconfig = %b.bootstrap_kubeconfig.display(),
        "no usable client certificate; bootstrapping one with a CertificateSigningRequest"
    );
    let client = super::connect::client(&b.bootstrap_kubeconfig)
        .await
        .map_err(|e| CsrError::Bootstrap { path: b.bootstrap_kubeconfig.clone(), reason: e.reason })?;
    // The key outlives a failed attempt, so the next asks under the same CSR name.
    let key_path = certificate::pending_key_path(&b.cert_dir);
    let kp = key_path.clone();
    let key_pem = crate::blocking(move || Ok(std::fs::read_to_string(&kp).ok())).await.ok().flatten();
    let req = certificate::request(&b.node_name, &certificate::Sans::default(), key_pem.as_deref())?;
    if key_pem.is_none() {
        let (dir, kp, pem) = (b.cert_dir.clone(), key_path.clone(), req.key_pem.clone());
        crate::blocking(move || {
            std::fs::create_dir_all(&dir)?;
            crate::checkpoint::write_private(&kp, pem.as_bytes()).map_err(|e| e.source)
        })
        .await
        .map_err(|source| CsrError::File {
            what: "writing the pending key",
            path: key_path.clone(),
            source,
        })?;
    }
    let name = CsrName::Fixed(&req.name);
    let cert =
        request_certificate(&client, Kind::Client, &req.csr_pem, name, Duration::from_secs(3600)).await?;
    let pair = store(&b.cert_dir, Kind::Client, cert, req.key_pem).await?;
    info!(pair = %pair.display(), "client certificate issued and stored");
    write_kubeconfig(b, &boot).await
}

/// Stores a signed `kind` pair in `cert_dir` and makes it current (`certificate::store_pair`);
/// a bootstrap's pending key is no longer needed then.
pub async fn store(cert_dir: &Path, kind: Kind, cert: String, key: String) -> Result<PathBuf, CsrError> {
    let dir = cert_dir.to_path_buf();
    crate::blocking(move || {
        let pair = certificate::store_pair(&dir, kind, cert.as_bytes(), key.as_bytes(), SystemTime::now())?;
        if kind == Kind::Client {
            let _ = std::fs::remove_file(certificate::pending_key_path(&dir));
        }
        Ok(pair)
    })
    .await
    .map_err(|source| CsrError::File {
        what: "storing the certificate in",
        path: cert_dir.to_path_buf(),
        source,
    })
}

/// Writes `--kubeconfig` for the pair in the cert dir, with the bootstrap kubeconfig's server
/// and CA.
async fn write_kubeconfig(b: &Bootstrap, boot: &certificate::KubeconfigParts) -> Result<(), CsrError> {
    let text = certificate::node_kubeconfig(
        &boot.server,
        boot.ca.as_ref().unwrap_or(&CaSource::None),
        &certificate::current_path(&b.cert_dir, Kind::Client),
    );
    let path = b.kubeconfig.clone();
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    crate::blocking(move || {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(&dir)?;
        }
        crate::checkpoint::write_private(&path, text.as_bytes()).map_err(|e| e.source)
    })
    .await
    .map_err(|source| CsrError::File {
        what: "writing the kubeconfig",
        path: b.kubeconfig.clone(),
        source,
    })?;
    info!(kubeconfig = %b.kubeconfig.display(), "kubeconfig written for the node's client certificate");
    Ok(())
}
