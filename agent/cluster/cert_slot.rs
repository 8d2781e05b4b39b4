//! The certificate a TLS endpoint of the node presents now, swappable without a restart: the
//! client certificate every API connection presents (`client_cert`), and the kubelet API's
//! serving certificate (`kubelet_api`), which may not exist yet while its CSR waits for
//! approval. rustls asks the slot at each handshake, so a swap reaches every new connection;
//! what happens to the connections made before is the user's (`client_cert` closes them).

use std::sync::{Arc, RwLock};

use rustls::sign::CertifiedKey;
use tokio::sync::watch;

use super::certificate::{self, CertInfo};

/// A pair as rustls presents it, and what the agent reads from its certificate.
struct Pair {
    key: Arc<CertifiedKey>,
    info: CertInfo,
}

/// The pair in use (or none yet) and a generation counter bumped at each swap.
#[derive(Clone)]
pub struct CertSlot {
    pair: Arc<RwLock<Option<Arc<Pair>>>>,
    generation: Arc<watch::Sender<u64>>,
}

impl std::fmt::Debug for CertSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertSlot")
            .field("generation", &*self.generation.borrow())
            .field("not_after", &self.info().map(|i| i.not_after))
            .finish()
    }
}

/// Parses a certificate chain and its key (PEM) into what rustls presents; the key must be the
/// certificate's.
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the certificate PEM: {e}"))?;
    if certs.is_empty() {
        return Err("no certificate in the PEM".into());
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("the key PEM: {e}"))?;
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(certs, key, &provider).map_err(|e| format!("the key and certificate: {e}"))
}

impl CertSlot {
    /// A slot with no certificate yet: a server on it refuses handshakes.
    pub fn empty() -> Self {
        CertSlot { pair: Arc::new(RwLock::new(None)), generation: Arc::new(watch::channel(0).0) }
    }

    /// A slot holding `cert_pem` and `key_pem`.
    pub fn new(cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, String> {
        let slot = Self::empty();
        slot.swap(cert_pem, key_pem)?;
        Ok(slot)
    }

    /// A slot holding `key` (its chain's first certificate must parse).
    pub fn with_key(key: CertifiedKey) -> Result<Self, String> {
        let slot = Self::empty();
        slot.put(key)?;
        Ok(slot)
    }

    /// The certificate in use, if any.
    pub fn info(&self) -> Option<CertInfo> {
        self.current().map(|p| p.info.clone())
    }

    /// What a handshake presents now.
    pub fn key(&self) -> Option<Arc<CertifiedKey>> {
        self.current().map(|p| p.key.clone())
    }

    fn current(&self) -> Option<Arc<Pair>> {
        match self.pair.read() {
            Ok(p) => p.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Puts a new pair in: new handshakes present it.
    pub fn swap(&self, cert_pem: &[u8], key_pem: &[u8]) -> Result<(), String> {
        self.put(certified_key(cert_pem, key_pem)?)
    }

    fn put(&self, key: CertifiedKey) -> Result<(), String> {
        let info = key
            .cert
            .first()
            .and_then(|c| certificate::cert_info_der(c.as_ref()))
            .ok_or("the certificate does not parse")?;
        let pair = Some(Arc::new(Pair { key: Arc::new(key), info }));
        match self.pair.write() {
            Ok(mut p) => *p = pair,
            Err(poisoned) => *poisoned.into_inner() = pair,
        }
        self.generation.send_modify(|g| *g += 1);
        Ok(())
    }

    /// Changes at each swap.
    pub fn generation(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }
}
