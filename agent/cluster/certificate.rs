//! The node's client certificate as the kubelet keeps it: what a CertificateSigningRequest for
//! it holds (`system:node:<name>` in `system:nodes`, the `kube-apiserver-client-kubelet` signer,
//! the kubelet's usages), when it is due for rotation (the kubelet's jittered deadline), and
//! where it lives on disk (`--cert-dir`: `kubelet-client-<timestamp>.pem`, cert and key in one
//! file, 0600, and the `kubelet-client-current.pem` symlink). Asking the API server for one is
//! `cluster::bootstrap`'s; serving it to connections is `cluster::client_cert`'s.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The signer of kubelet client certificates (the controller-manager's csrsigning signs it with
/// the cluster CA; csrapproving approves it for bootstrappers and for nodes renewing their own).
pub const SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

/// The kubelet's usages for an ECDSA client key (`pkg/kubelet/certificate`): key encipherment
/// is only asked for RSA keys.
pub const USAGES: [&str; 2] = ["digital signature", "client auth"];

/// The group every node's certificate names (the Node authorizer's).
pub const NODES_GROUP: &str = "system:nodes";

/// The file-name prefix of the client pair (`kubelet-client-…`), as the kubelet's store.
pub const PAIR_PREFIX: &str = "kubelet-client";

/// The user a node's client certificate names.
pub fn node_user(node_name: &str) -> String {
    format!("system:node:{node_name}")
}

/// A new private key (ECDSA P-256, as the kubelet makes) and its CSR for node `node_name`.
pub struct KeyAndRequest {
    /// The private key, PKCS#8 PEM.
    pub key_pem: String,
    /// The PKCS#10 request, PEM.
    pub csr_pem: String,
    /// The bootstrap CSR's name, derived from the key and subject as the kubelet's `node-csr-…`.
    pub name: String,
}

/// A request for node `node_name`'s client certificate, for `key_pem` (a PKCS#8 PEM key, reused
/// across attempts so a retried bootstrap finds its own CSR) or a new key.
pub fn request(node_name: &str, key_pem: Option<&str>) -> Result<KeyAndRequest, rcgen::Error> {
    use rcgen::PublicKeyData;
    let key = match key_pem {
        Some(pem) => rcgen::KeyPair::from_pem(pem)?,
        None => rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?,
    };
    let mut params = rcgen::CertificateParams::default();
    // Organization then CommonName, as Go's pkix.Name orders them.
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::OrganizationName, NODES_GROUP);
    params.distinguished_name.push(rcgen::DnType::CommonName, node_user(node_name));
    let csr = params.serialize_request(&key)?;
    let user = node_user(node_name);
    Ok(KeyAndRequest {
        name: bootstrap_csr_name(&key.subject_public_key_info(), &user, &[NODES_GROUP], &USAGES),
        key_pem: key.serialize_pem(),
        csr_pem: csr.pem()?,
    })
}

/// The kubelet's bootstrap CSR name (`digestedName` in `pkg/kubelet/certificate/bootstrap`):
/// `node-csr-` and the unpadded URL-safe base64 of SHA-512/256 over the public key, the common
/// name, the organizations and the usages, each base64'd and ended by `|` (outside the base64
/// alphabet, so no two inputs write the same stream). The same key asks under the same name, so
/// an agent restarted mid-bootstrap finds the CSR it made.
pub fn bootstrap_csr_name(spki_der: &[u8], common_name: &str, orgs: &[&str], usages: &[&str]) -> String {
    use base64::Engine;
    let encode = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let mut hash = ring::digest::Context::new(&ring::digest::SHA512_256);
    let parts = [spki_der, common_name.as_bytes()]
        .into_iter()
        .chain(orgs.iter().map(|o| o.as_bytes()))
        .chain(usages.iter().map(|u| u.as_bytes()));
    for part in parts {
        hash.update(encode(part).as_bytes());
        hash.update(b"|");
    }
    format!("node-csr-{}", encode(hash.finish().as_ref()))
}

/// What the agent reads from a certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    /// The subject's common name.
    pub common_name: String,
}

impl CertInfo {
    /// Usable at `now`: inside its validity window (the kubelet's `isClientConfigStillValid`).
    pub fn valid_at(&self, now: SystemTime) -> bool {
        self.not_before <= now && now < self.not_after
    }
}

/// The first certificate of a PEM text, `None` when there is none or it does not parse.
pub fn cert_info(pem: &[u8]) -> Option<CertInfo> {
    let (_, der) = x509_parser::pem::parse_x509_pem(pem).ok()?;
    let cert = der.parse_x509().ok()?;
    let at = |t: x509_parser::time::ASN1Time| {
        let secs = t.timestamp();
        if secs >= 0 {
            SystemTime::UNIX_EPOCH + Duration::from_secs(secs.unsigned_abs())
        } else {
            SystemTime::UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
        }
    };
    let common_name = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|c| c.as_str().ok())
        .unwrap_or_default()
        .to_string();
    Some(CertInfo {
        not_before: at(cert.validity().not_before),
        not_after: at(cert.validity().not_after),
        common_name,
    })
}

/// When a certificate is due for rotation: a point between 70 % and 90 % of its life
/// (`jitter` in [0, 1) picks it), as the kubelet's certificate manager (`nextRotationDeadline`:
/// `wait.Jitter(total, 0.2) - 0.3 * total`). The jitter keeps a fleet of nodes from asking at
/// once; the 10 % left is for an approval that takes time.
pub fn rotation_deadline(not_before: SystemTime, not_after: SystemTime, jitter: f64) -> SystemTime {
    let total = not_after.duration_since(not_before).unwrap_or_default();
    let fraction = 0.7 + 0.2 * jitter.clamp(0.0, 1.0);
    not_before + total.mul_f64(fraction)
}

/// The name of the pair file written at `at` (UTC): `kubelet-client-2006-01-02-15-04-05.pem`,
/// the kubelet's layout, so tools that look for it find it.
pub fn pair_file_name(at: SystemTime) -> String {
    let ts = jiff::Timestamp::try_from(at).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    format!("{PAIR_PREFIX}-{}.pem", ts.strftime("%Y-%m-%d-%H-%M-%S"))
}

/// The symlink to the pair in use, which the kubeconfig names.
pub fn current_path(cert_dir: &Path) -> PathBuf {
    cert_dir.join(format!("{PAIR_PREFIX}-current.pem"))
}

/// Where a bootstrap keeps its key until the certificate arrives (the kubelet's
/// `kubelet-client.key.tmp`): a restarted bootstrap asks again with the same key.
pub fn pending_key_path(cert_dir: &Path) -> PathBuf {
    cert_dir.join(format!("{PAIR_PREFIX}.key.tmp"))
}

/// Writes `cert_pem` and `key_pem` to a new timestamped file in `cert_dir` (0600, fsynced) and
/// points `kubelet-client-current.pem` at it (a new symlink renamed over the old one, so a
/// reader sees the old pair or the new one). Blocks on the disk. Returns the pair's path.
pub fn store_pair(
    cert_dir: &Path,
    cert_pem: &[u8],
    key_pem: &[u8],
    now: SystemTime,
) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(cert_dir)?;
    let mut path = cert_dir.join(pair_file_name(now));
    // Two rotations in one second (a test's short certificates) must not share a file.
    let mut n = 1;
    while path.exists() {
        path = cert_dir.join(format!("{}.{n}", pair_file_name(now)));
        n += 1;
    }
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
    f.write_all(cert_pem)?;
    if !cert_pem.ends_with(b"\n") {
        f.write_all(b"\n")?;
    }
    f.write_all(key_pem)?;
    f.sync_all()?;
    let updated = cert_dir.join(format!("{PAIR_PREFIX}-updated.pem"));
    let _ = std::fs::remove_file(&updated);
    std::os::unix::fs::symlink(&path, &updated)?;
    std::fs::rename(&updated, current_path(cert_dir))?;
    std::fs::File::open(cert_dir)?.sync_all()?;
    Ok(path)
}

/// The kubeconfig the kubelet writes after bootstrapping: the bootstrap kubeconfig's server and
/// CA, and the client pair from `pair` (the `current` symlink, so rotation never rewrites it).
pub fn node_kubeconfig(server: &str, ca: &CaSource, pair: &Path) -> String {
    let (ca_key, ca_value) = match ca {
        CaSource::File(p) => ("certificate-authority", p.display().to_string()),
        CaSource::Data(b64) => ("certificate-authority-data", b64.clone()),
        CaSource::None => ("insecure-skip-tls-verify", "false".to_string()),
    };
    let pair = pair.display();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: default-cluster\n  cluster:\n    server: {server}\n    {ca_key}: {ca_value}\nusers:\n- name: default-auth\n  user:\n    client-certificate: {pair}\n    client-key: {pair}\ncontexts:\n- name: default-context\n  context:\n    cluster: default-cluster\n    user: default-auth\n    namespace: default\ncurrent-context: default-context\n"
    )
}

/// Where a kubeconfig's CA comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaSource {
    File(PathBuf),
    /// base64 of the PEM, as `certificate-authority-data` holds it.
    Data(String),
    None,
}

/// The pieces of a kubeconfig the node's certificate handling reads: the current context's
/// server, CA and client pair (paths made absolute against the kubeconfig's directory).
#[derive(Debug, Clone, Default)]
pub struct KubeconfigParts {
    pub server: String,
    pub ca: Option<CaSource>,
    pub cert_pem: Option<Vec<u8>>,
    pub key_pem: Option<Vec<u8>>,
}

/// Reads `file`'s current context (`None` when the file is missing or is not a kubeconfig).
/// Files it names that cannot be read leave their part empty: the caller treats that as an
/// unusable certificate, as the kubelet does.
pub fn read_kubeconfig(file: &Path) -> Option<KubeconfigParts> {
    use base64::Engine;
    let text = std::fs::read_to_string(file).ok()?;
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).ok()?;
    let dir = file.parent().unwrap_or(Path::new("."));
    let abs = |p: &str| if Path::new(p).is_absolute() { PathBuf::from(p) } else { dir.join(p) };
    let current = doc.get("current-context")?.as_str()?;
    let named = |list: &str, name: &str, field: &str| {
        doc.get(list)?
            .as_sequence()?
            .iter()
            .find(|e| e.get("name").and_then(|n| n.as_str()) == Some(name))?
            .get(field)
            .cloned()
    };
    let context = named("contexts", current, "context")?;
    let cluster = named("clusters", context.get("cluster")?.as_str()?, "cluster")?;
    let user = context.get("user").and_then(|u| u.as_str()).and_then(|u| named("users", u, "user"));
    let s = |v: Option<&serde_yaml_ng::Value>| v.and_then(|v| v.as_str()).map(str::to_string);
    let pem = |data: &str, path: &str| {
        let user = user.as_ref()?;
        match (s(user.get(data)), s(user.get(path))) {
            (Some(b64), _) => base64::engine::general_purpose::STANDARD.decode(b64.trim()).ok(),
            (None, Some(p)) => std::fs::read(abs(&p)).ok(),
            (None, None) => None,
        }
    };
    let ca = match (s(cluster.get("certificate-authority-data")), s(cluster.get("certificate-authority"))) {
        (Some(d), _) => Some(CaSource::Data(d)),
        (None, Some(p)) => Some(CaSource::File(abs(&p))),
        (None, None) => None,
    };
    Some(KubeconfigParts {
        server: s(cluster.get("server")).unwrap_or_default(),
        ca,
        cert_pem: pem("client-certificate-data", "client-certificate"),
        key_pem: pem("client-key-data", "client-key"),
    })
}

#[cfg(test)]
#[path = "certificate_tests.rs"]
mod tests;
