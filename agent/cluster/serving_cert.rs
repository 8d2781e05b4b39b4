//! Where the kubelet API's serving certificate comes from, as the kubelet decides it:
//! - `--rotate-server-certificates` (KubeletConfiguration `serverTLSBootstrap`): a
//!   `kubernetes.io/kubelet-serving` CSR with the node's addresses as SANs, renewed before it
//!   expires (`rotation`). Nothing in the cluster approves these (the SANs are only the node's
//!   word): until someone does, the API refuses handshakes. A valid pair from an earlier run
//!   (`kubelet-server-current.pem`) is used at start without a new CSR.
//! - `--tls-cert-file`/`--tls-private-key-file`: those files (`kubelet_api::tls`).
//! - neither: a self-signed certificate made once in `--cert-dir` (`kubelet.crt`, `kubelet.key`)
//!   and reused after (the kubelet's `InitializeTLS`).
//!
//! Serving the slot is `kubelet_api`'s; the CSR round trip `bootstrap`'s.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tracing::{info, warn};

use super::cert_slot::CertSlot;
use super::certificate::{self, Kind, Sans};

/// How the kubelet API gets its certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// By CSR, rotated.
    Csr,
    /// `--tls-cert-file` and `--tls-private-key-file`.
    Files { cert: PathBuf, key: PathBuf },
    /// Made by the node for itself in `--cert-dir`.
    SelfSigned,
}

/// The kubelet's choice: `serverTLSBootstrap` first (the kubelet's certificate manager answers
/// every handshake then), then the files, then a self-signed certificate. Only one of the two
/// files is an error, as in the kubelet's flag validation.
pub fn source(cert: Option<&Path>, key: Option<&Path>, rotate_server: bool) -> Result<Source, String> {
    let given = |p: Option<&Path>| p.filter(|p| !p.as_os_str().is_empty()).map(Path::to_path_buf);
    match (rotate_server, given(cert), given(key)) {
        (true, _, _) => Ok(Source::Csr),
        (false, Some(cert), Some(key)) => Ok(Source::Files { cert, key }),
        (false, None, None) => Ok(Source::SelfSigned),
        (false, Some(_), None) => Err("--tls-cert-file is given without --tls-private-key-file".into()),
        (false, None, Some(_)) => Err("--tls-private-key-file is given without --tls-cert-file".into()),
    }
}

/// The serving certificate's SANs for the node at `node_ip` named `hostname` (its Hostname
/// address): the Node's addresses, as the Node reports them.
pub fn node_sans(hostname: &str, node_ip: &str) -> Sans {
    let addresses = super::node_object::addresses(node_ip, hostname);
    certificate::serving_sans(addresses.iter().map(|a| (a.type_.as_str(), a.address.as_str())))
}

/// The serving certificate could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum ServingError {
    #[error("making a self-signed serving certificate for {host}")]
    Generate {
        host: String,
        #[source]
        source: rcgen::Error,
    },
    #[error("writing the self-signed serving certificate")]
    Write(#[source] crate::checkpoint::CheckpointError),
    #[error("reading the serving certificates in {}", dir.display())]
    Read {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the new self-signed pair {} is not usable: {reason}", cert.display())]
    Unusable { cert: PathBuf, reason: String },
}

/// The slot a CSR-served kubelet API starts with: the cert dir's current serving pair if it is
/// valid now (a restart asks for no new one), else an empty slot, filled by the first rotation.
pub async fn csr_slot(cert_dir: &Path) -> Result<CertSlot, ServingError> {
    let current = certificate::current_path(cert_dir, Kind::Serving);
    let read = current.clone();
    let pem = crate::blocking(move || match std::fs::read(&read) {
        Ok(p) => Ok(Some(p)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    })
    .await
    .map_err(|source| ServingError::Read { dir: cert_dir.to_path_buf(), source })?;
    let now = SystemTime::now();
    let Some(pem) = pem else {
        info!(cert_dir = %cert_dir.display(), "no serving certificate yet; asking for one by CSR");
        return Ok(CertSlot::empty());
    };
    match CertSlot::new(&pem, &pem) {
        Ok(slot) if slot.info().is_some_and(|i| i.valid_at(now)) => {
            info!(pair = %current.display(), "using the serving certificate from an earlier run");
            Ok(slot)
        }
        Ok(_) => {
            info!(pair = %current.display(), "the stored serving certificate is not valid now; asking for a new one");
            Ok(CertSlot::empty())
        }
        Err(reason) => {
            warn!(pair = %current.display(), reason, "the stored serving certificate is unusable; asking for a new one");
            Ok(CertSlot::empty())
        }
    }
}

/// The self-signed pair's paths in `cert_dir`, as the kubelet names them.
pub fn self_signed_paths(cert_dir: &Path) -> (PathBuf, PathBuf) {
    (cert_dir.join("kubelet.crt"), cert_dir.join("kubelet.key"))
}

/// The self-signed serving pair in `cert_dir`: the one there if it loads (written once and
/// reused, as the kubelet, which does not renew it either), else a new one for `host` with
/// `sans`, valid a year from `now`. Blocks on the disk (startup).
pub fn self_signed(
    cert_dir: &Path,
    host: &str,
    sans: &Sans,
    now: SystemTime,
) -> Result<CertSlot, ServingError> {
    let (cert_path, key_path) = self_signed_paths(cert_dir);
    if let (Ok(cert), Ok(key)) = (std::fs::read(&cert_path), std::fs::read(&key_path)) {
        match CertSlot::new(&cert, &key) {
            Ok(slot) => {
                info!(cert = %cert_path.display(), "serving the kubelet API with the self-signed certificate made earlier");
                return Ok(slot);
            }
            Err(reason) => {
                warn!(cert = %cert_path.display(), reason, "the self-signed pair is unusable; making a new one")
            }
        }
    }
    let (cert_pem, key_pem) = self_signed_pem(host, sans, now)
        .map_err(|source| ServingError::Generate { host: host.to_string(), source })?;
    std::fs::create_dir_all(cert_dir)
        .map_err(|source| ServingError::Read { dir: cert_dir.to_path_buf(), source })?;
    // The key first: a crash between the two leaves no certificate without its key.
    crate::checkpoint::write_private(&key_path, key_pem.as_bytes()).map_err(ServingError::Write)?;
    crate::checkpoint::write(&cert_path, cert_pem.as_bytes()).map_err(ServingError::Write)?;
    let slot = CertSlot::new(cert_pem.as_bytes(), key_pem.as_bytes())
        .map_err(|reason| ServingError::Unusable { cert: cert_path.clone(), reason })?;
    info!(cert = %cert_path.display(), host, ?sans, "serving the kubelet API with a new self-signed certificate (no --tls-cert-file, no --rotate-server-certificates)");
    Ok(slot)
}

/// A self-signed certificate (PEM) and its key (PKCS#8 PEM) for `host`, with `sans`, from `now`
/// for a year (the kubelet's `GenerateSelfSignedCertKey`; it also makes a CA that signs the
/// leaf, which no client can be given anyway, so here the leaf signs itself).
pub fn self_signed_pem(host: &str, sans: &Sans, now: SystemTime) -> Result<(String, String), rcgen::Error> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut params = rcgen::CertificateParams::default();
    let secs = now.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, format!("{host}@{secs}"));
    params.not_before = now.into();
    params.not_after = (now + Duration::from_secs(365 * 86400)).into();
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    params.subject_alt_names = sans.to_rcgen()?;
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_cases() {
        let p = |s: &'static str| Some(Path::new(s));
        let files = Source::Files { cert: "/c".into(), key: "/k".into() };
        let cases = [
            ("serverTLSBootstrap wins over the files", p("/c"), p("/k"), true, Ok(Source::Csr)),
            ("serverTLSBootstrap alone", None, None, true, Ok(Source::Csr)),
            ("both files", p("/c"), p("/k"), false, Ok(files)),
            ("neither: self-signed", None, None, false, Ok(Source::SelfSigned)),
            ("empty paths are unset", p(""), p(""), false, Ok(Source::SelfSigned)),
            ("a cert without its key", p("/c"), None, false, Err("--tls-cert-file")),
            ("a key without its cert", None, p("/k"), false, Err("--tls-private-key-file")),
        ];
        for (name, cert, key, rotate, want) in cases {
            let got = source(cert, key, rotate);
            match want {
                Ok(w) => assert_eq!(got, Ok(w), "{name}"),
                Err(flag) => assert!(got.as_ref().is_err_and(|e| e.starts_with(flag)), "{name}: {got:?}"),
            }
        }
    }

    #[test]
    fn self_signed_pair_is_made_once_and_reused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("pki");
        let sans = Sans { dns: vec!["host-a".into()], ips: vec!["10.0.0.5".parse().unwrap()] };
        let now = SystemTime::now();
        let first = self_signed(&pki, "host-a", &sans, now).unwrap();
        let (cert, key) = self_signed_paths(&pki);
        assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600);
        let info = first.info().unwrap();
        assert!(info.common_name.starts_with("host-a@"), "{}", info.common_name);
        assert!(info.valid_at(now + Duration::from_secs(364 * 86400)), "a year");
        let pem = std::fs::read(&cert).unwrap();
        let again = self_signed(&pki, "host-b", &Sans::default(), now).unwrap();
        assert_eq!(std::fs::read(&cert).unwrap(), pem, "not rewritten");
        assert_eq!(again.key().unwrap().cert, first.key().unwrap().cert, "the same certificate served");
        // Its SANs: the host name and the node IP.
        let (_, parsed) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
        let parsed = parsed.parse_x509().unwrap();
        let san = parsed.subject_alternative_name().unwrap().unwrap();
        let names: Vec<String> = san.value.general_names.iter().map(|n| n.to_string()).collect();
        assert_eq!(names, ["DNSName(host-a)", "IPAddress(0a:00:00:05)"]);
    }

    #[test]
    fn an_unusable_self_signed_pair_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = self_signed_paths(dir.path());
        std::fs::write(&cert, "junk").unwrap();
        std::fs::write(&key, "junk").unwrap();
        let slot = self_signed(dir.path(), "h", &Sans::default(), SystemTime::now()).unwrap();
        assert!(slot.key().is_some());
        assert_ne!(std::fs::read(&cert).unwrap(), b"junk");
    }

    #[tokio::test]
    async fn csr_slot_uses_a_valid_stored_pair_only() {
        let dir = tempfile::tempdir().unwrap();
        assert!(csr_slot(dir.path()).await.unwrap().info().is_none(), "nothing stored: empty");
        let now = SystemTime::now();
        let (cert, key) = self_signed_pem("h", &Sans::default(), now).unwrap();
        certificate::store_pair(dir.path(), Kind::Serving, cert.as_bytes(), key.as_bytes(), now).unwrap();
        assert!(csr_slot(dir.path()).await.unwrap().info().is_some(), "a valid pair is used");
        let old = now - Duration::from_secs(2 * 365 * 86400);
        let (cert, key) = self_signed_pem("h", &Sans::default(), old).unwrap();
        certificate::store_pair(dir.path(), Kind::Serving, cert.as_bytes(), key.as_bytes(), now).unwrap();
        assert!(csr_slot(dir.path()).await.unwrap().info().is_none(), "an expired pair: a new CSR");
    }
}
