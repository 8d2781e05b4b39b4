//! Certificate rotation, the kubelet certificate manager's loop, for both of the node's
//! certificates: at the jittered deadline (70–90 % of the certificate's life), or at once when
//! there is none yet (a serving certificate asked for the first time), it makes a new key,
//! asks for a certificate by CSR, stores the pair in `--cert-dir` and puts it in the slot that
//! new handshakes read, so no restart is needed. The CSR round trip is `bootstrap`'s; what the
//! swap does to existing connections is the slot user's.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::bootstrap::{self, CsrError, CsrName};
use super::cert_slot::CertSlot;
use super::certificate::{self, CertInfo, Kind, Sans};

/// What the rotation loop needs.
pub struct Rotation {
    pub kind: Kind,
    pub slot: CertSlot,
    /// An unthrottled client: the node asks for its next certificate as itself.
    pub client: kube::Client,
    pub node_name: String,
    /// The serving certificate's SANs (none for the client one).
    pub sans: Sans,
    pub cert_dir: PathBuf,
    /// `--bootstrap-kubeconfig`, used when the current client certificate has expired (a node
    /// that was down past its certificate's life asks as a bootstrapper again, as the kubelet).
    pub bootstrap_kubeconfig: Option<PathBuf>,
}

/// When the next rotation is due: at once without a certificate, else at the kubelet's
/// jittered deadline (`jitter` in [0, 1)).
pub fn next_due(current: Option<&CertInfo>, jitter: f64, now: SystemTime) -> SystemTime {
    match current {
        Some(info) => certificate::rotation_deadline(info.not_before, info.not_after, jitter),
        None => now,
    }
}

/// Renews `r`'s certificate at each rotation deadline until `cancel`; failures are retried
/// with back-off (2 s doubling to 5 min).
pub async fn run(r: Rotation, cancel: CancellationToken) {
    let what = r.kind.as_str();
    let mut retry = Duration::from_secs(2);
    let mut deadline = None;
    loop {
        let info = r.slot.info();
        let due = *deadline.get_or_insert_with(|| {
            let due = next_due(info.as_ref(), fastrand::f64(), SystemTime::now());
            let at = jiff::Timestamp::try_from(due).map(|t| t.to_string()).unwrap_or_default();
            let not_after = info.as_ref().map(|i| i.not_after);
            info!(certificate = what, deadline = %at, ?not_after, "certificate rotation scheduled");
            due
        });
        let wait = due.duration_since(SystemTime::now()).unwrap_or_default();
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        info!(certificate = what, node = %r.node_name, "asking for a new certificate");
        match renew(&r, info.as_ref()).await {
            Ok(()) => {
                retry = Duration::from_secs(2);
                deadline = None;
            }
            Err(e) => {
                warn!(certificate = what, error = %crate::error_chain(&e), retry_in_s = retry.as_secs(), "rotating the certificate failed; retrying");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(retry) => {}
                }
                retry = (retry * 2).min(Duration::from_secs(300));
            }
        }
    }
}

/// One rotation: a new key, a CSR, the pair stored and swapped in.
async fn renew(r: &Rotation, current: Option<&CertInfo>) -> Result<(), CsrError> {
    let req = certificate::request(&r.node_name, &r.sans, None)?;
    let expired = current.is_some_and(|c| !c.valid_at(SystemTime::now()));
    let client = match &r.bootstrap_kubeconfig {
        Some(boot) if r.kind == Kind::Client && expired => {
            warn!("the client certificate has expired; asking for a new one with the bootstrap credentials");
            super::connect::client(boot)
                .await
                .map_err(|e| CsrError::Bootstrap { path: boot.clone(), reason: e.reason })?
        }
        _ => r.client.clone(),
    };
    let cert =
        bootstrap::request_certificate(&client, r.kind, &req.csr_pem, CsrName::Generate, bootstrap::CSR_WAIT)
            .await?;
    let pair = bootstrap::store(&r.cert_dir, r.kind, cert.clone(), req.key_pem.clone()).await?;
    r.slot.swap(cert.as_bytes(), req.key_pem.as_bytes()).map_err(|reason| CsrError::File {
        what: "loading the new pair",
        path: pair.clone(),
        source: std::io::Error::other(reason),
    })?;
    let not_after = r.slot.info().map(|i| i.not_after);
    let what = r.kind.as_str();
    info!(pair = %pair.display(), ?not_after, "{what} certificate rotated; new connections present it");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_due_cases() {
        let at = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let info = |nb, na| CertInfo { not_before: at(nb), not_after: at(na), common_name: String::new() };
        let cases = [
            ("no certificate yet (a serving CSR at start): now", None, 0.5, 50),
            ("a certificate: its jittered deadline", Some(info(1000, 2000)), 0.5, 1800),
            ("an expired one: its deadline, long past", Some(info(0, 10)), 0.0, 7),
        ];
        for (name, current, jitter, want) in cases {
            assert_eq!(next_due(current.as_ref(), jitter, at(50)), at(want), "{name}");
        }
    }
}
