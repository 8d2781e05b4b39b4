//! The node's certificates as the kubelet keeps them, its client certificate and (with
//! `--rotate-server-certificates`) the kubelet API's serving one: what a
//! CertificateSigningRequest for each holds (`system:node:<name>` in `system:nodes`, the
//! signer, the kubelet's usages, the serving one's SANs), when it is due for rotation (the
//! kubelet's jittered deadline), and where it lives on disk (`--cert-dir`:
//! `kubelet-{client,server}-<timestamp>.pem`, cert and key in one file, 0600, and the
//! `-current.pem` symlink). Asking the API server for one is `cluster::bootstrap`'s; renewing
//! it `cluster::rotation`'s; presenting it to connections `cluster::cert_slot`'s.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The group every node's certificate names (the Node authorizer's).
pub const NODES_GROUP: &str = "system:nodes";

/// Which of the node's two certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The node's identity towards the API server.
    Client,
    /// The kubelet API's (`serverTLSBootstrap`).
    Serving,
}

impl Kind {
    /// The signer: the client one is approved by the controller-manager's csrapproving (for
    /// bootstrappers and nodes renewing their own) and signed by csrsigning; the serving one is
    /// signed by csrsigning too, but nothing in the cluster approves it (its SANs are the
    /// node's word), so an operator or an approver of their choosing does.
    pub fn signer(self) -> &'static str {
        match self {
            Kind::Client => "kubernetes.io/kube-apiserver-client-kubelet",
            Kind::Serving => "kubernetes.io/kubelet-serving",
        }
    }

    /// The kubelet's usages for an ECDSA key (`pkg/kubelet/certificate`): key encipherment is
    /// only asked for RSA keys, and the node's keys are ECDSA.
    pub fn usages(self) -> &'static [&'static str] {
        match self {
            Kind::Client => &["digital signature", "client auth"],
            Kind::Serving => &["digital signature", "server auth"],
        }
    }

    /// The file-name prefix of the pair (`kubelet-client-…`), as the kubelet's stores.
    pub fn prefix(self) -> &'static str {
        match self {
            Kind::Client => "kubelet-client",
            Kind::Serving => "kubelet-server",
        }
    }

    /// For logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Client => "client",
            Kind::Serving => "serving",
        }
    }
}

/// A serving certificate's subject alternative names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sans {
    pub dns: Vec<String>,
    pub ips: Vec<std::net::IpAddr>,
}

impl Sans {
    /// As rcgen writes them: the DNS names, then the IPs.
    pub fn to_rcgen(&self) -> Result<Vec<rcgen::SanType>, rcgen::Error> {
        let dns = self.dns.iter().map(|d| Ok(rcgen::SanType::DnsName(d.clone().try_into()?)));
        let ips = self.ips.iter().map(|ip| Ok(rcgen::SanType::IpAddress(*ip)));
        dns.chain(ips).collect()
    }
}

/// The SANs of the node's serving certificate from the Node's addresses (type, address), as
/// the kubelet's `addressesToHostnamesAndIPs`: host names and DNS names as DNS SANs, internal
/// and external IPs as IP SANs, each once, in order; empty or unparsable ones left out.
pub fn serving_sans<'a>(addresses: impl IntoIterator<Item = (&'a str, &'a str)>) -> Sans {
    let mut sans = Sans::default();
    for (kind, address) in addresses {
        if address.is_empty() {
            continue;
        }
        match kind {
            "Hostname" | "InternalDNS" | "ExternalDNS" if !sans.dns.iter().any(|d| d == address) => {
                sans.dns.push(address.to_string());
            }
            "InternalIP" | "ExternalIP" => {
                if let Ok(ip) = address.parse()
                    && !sans.ips.contains(&ip)
                {
                    sans.ips.push(ip);
                }
            }
            _ => {}
        }
    }
    sans
}

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

/// A request for a certificate of node `node_name` with `sans` (none for the client one), for
/// `key_pem` (a PKCS#8 PEM key, reused across attempts so a retried bootstrap finds its own CSR)
/// or a new key. The usages are not in the request: the CSR object carries them.
pub fn request(node_name: &str, sans: &Sans, key_pem: Option<&str>) -> Result<KeyAndRequest, rcgen::Error> {
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
    params.subject_alt_names = sans.to_rcgen()?;
    let csr = params.serialize_request(&key)?;
    let user = node_user(node_name);
    Ok(KeyAndRequest {
        name: bootstrap_csr_name(
            &key.subject_public_key_info(),
            &user,
            &[NODES_GROUP],
            Kind::Client.usages(),
        ),
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
    cert_info_der(&der.contents)
}

/// [`cert_info`] of a DER certificate.
pub fn cert_info_der(der: &[u8]) -> Option<CertInfo> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
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

/// The name of the `kind` pair file written at `at` (UTC):
/// `kubelet-client-2006-01-02-15-04-05.pem`, the kubelet's layout, so tools that look for it
/// find it.
pub fn pair_file_name(kind: Kind, at: SystemTime) -> String {
    let ts = jiff::Timestamp::try_from(at).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    format!("{}-{}.pem", kind.prefix(), ts.strftime("%Y-%m-%d-%H-%M-%S"))
}

/// The symlink to the `kind` pair in use (the client one is what the kubeconfig names).
pub fn current_path(cert_dir: &Path, kind: Kind) -> PathBuf {
    cert_dir.join(format!("{}-current.pem", kind.prefix()))
}

/// Where a bootstrap keeps its key until the certificate arrives (the kubelet's
/// `kubelet-client.key.tmp`): a restarted bootstrap asks again with the same key.
pub fn pending_key_path(cert_dir: &Path) -> PathBuf {
    cert_dir.join(format!("{}.key.tmp", Kind::Client.prefix()))
}

/// Writes `cert_pem` and `key_pem` to a new timestamped `kind` file in `cert_dir` (0600,
/// fsynced) and points `kubelet-<kind>-current.pem` at it (a new symlink renamed over the old
/// one, so a reader sees the old pair or the new one). Blocks on the disk. Returns the pair's
/// path.
pub fn store_pair(
    cert_dir: &Path,
    kind: Kind,
    cert_pem: &[u8],
    key_pem: &[u8],
    now: SystemTime,
) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(cert_dir)?;
    let mut path = cert_dir.join(pair_file_name(kind, now));
    // Two rotations in one second (a test's short certificates) must not share a file.
    let mut n = 1;
    while path.exists() {
        path = cert_dir.join(format!("{}.{n}", pair_file_name(kind, now)));
        n += 1;
    }
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
    f.write_all(cert_pem)?;
    if !cert_pem.ends_with(b"\n") {
        f.write_all(b"\n")?;
    }
    f.write_all(key_pem)?;
    f.sync_all()?;
    let updated = cert_dir.join(format!("{}-updated.pem", kind.prefix()));
    let _ = std::fs::remove_file(&updated);
    std::os::unix::fs::symlink(&path, &updated)?;
    std::fs::rename(&updated, current_path(cert_dir, kind))?;
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
