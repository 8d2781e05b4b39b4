//! The kubelet API's TLS: the serving certificate chain and key (`--tls-cert-file`,
//! `--tls-private-key-file`), and with `--client-ca-file` client certificates verified against
//! that CA, though not required (a client without one may still bring a bearer token: the
//! kubelet's `VerifyClientCertIfGiven`). A verified certificate authenticates as its subject's
//! CN, with its O values as groups (upstream's `CommonNameUserConversion`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::auth::User;

/// The kubelet API could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("cannot read the {what} file {}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    #[error("the {what} file {} holds no PEM certificate", path.display())]
    NoCertificate { what: &'static str, path: PathBuf },
    #[error("the client CA file {} is not usable", path.display())]
    ClientCa {
        path: PathBuf,
        #[source]
        source: ClientCaError,
    },
    #[error("cannot serve TLS with the certificate {} and the key {}", cert.display(), key.display())]
    Tls {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("cannot listen on {address} (--node-ip, --port)")]
    Listen {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Why a client CA bundle is refused.
#[derive(Debug, thiserror::Error)]
pub enum ClientCaError {
    #[error("a certificate in it is invalid")]
    Certificate(#[source] rustls::Error),
    #[error("it cannot verify client certificates")]
    Verifier(#[source] rustls::server::VerifierBuilderError),
}

/// The TLS settings of the kubelet API, read from the files now so a bad file fails at start.
pub(crate) fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<rustls::ServerConfig, BindError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = read_certificates("certificate", cert)?;
    let private_key = PrivateKeyDer::from_pem_file(key).map_err(|source| BindError::Read {
        what: "private key",
        path: key.to_path_buf(),
        source,
    })?;
    let tls_error = |source| BindError::Tls { cert: cert.to_path_buf(), key: key.to_path_buf(), source };
    let builder =
        rustls::ServerConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions();
    let builder = builder.map_err(tls_error)?;
    let builder = match client_ca {
        Some(path) => {
            let ca_error = |source| BindError::ClientCa { path: path.to_path_buf(), source };
            let mut roots = RootCertStore::empty();
            for c in read_certificates("client CA", path)? {
                roots.add(c).map_err(|e| ca_error(ClientCaError::Certificate(e)))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| ca_error(ClientCaError::Verifier(e)))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, private_key).map_err(tls_error)?;
    // The API server speaks HTTP/2 or HTTP/1.1 to a kubelet; both are served.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

fn read_certificates(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, BindError> {
    let read_error = |source| BindError::Read { what, path: path.to_path_buf(), source };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(read_error)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read_error)?;
    if certs.is_empty() {
        return Err(BindError::NoCertificate { what, path: path.to_path_buf() });
    }
    Ok(certs)
}

/// The user a verified client certificate names: CN the name, each O a group. `None` without a
/// CN (upstream then tries the next authenticator).
pub(crate) fn certificate_user(cert: &CertificateDer<'_>) -> Option<User> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let subject = parsed.subject();
    // Go's pkix.Name keeps the last CN of the subject.
    let name = subject.iter_common_name().filter_map(|cn| cn.as_str().ok()).last()?;
    if name.is_empty() {
        return None;
    }
    let groups = subject.iter_organization().filter_map(|o| o.as_str().ok()).map(str::to_string).collect();
    Some(User { name: name.to_string(), groups, ..User::default() }.authenticated())
}
