//! Lifecycle hook handlers (postStart, preStop): exec through CRI `ExecSync`, httpGet, sleep
//! (spec §8). The caller bounds preStop by the grace budget; postStart has no kubelet-side
//! timeout (R8.1).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler};

use crate::cri::Runtime;
use crate::http_get::{HttpRequest, http_get};
use crate::ports::resolve_port;

/// Runs one hook handler against a running container; Err carries the failure text.
pub async fn run_handler(
    cri: &dyn Runtime,
    container_id: &str,
    spec: &Container,
    handler: &LifecycleHandler,
    pod_ip: Option<&str>,
) -> Result<(), String> {
    if let Some(exec) = &handler.exec {
        let cmd = exec.command.clone().unwrap_or_default();
        let (code, out) = cri
            .exec_sync(container_id, cmd, Duration::ZERO)
            .await
            .map_err(|e| format!("exec hook failed: {e}"))?;
        if code != 0 {
            let out = String::from_utf8_lossy(&out);
            return Err(format!("command exited with {code}: {}", out.trim_end()));
        }
        return Ok(());
    }
    if let Some(sleep) = &handler.sleep {
        tokio::time::sleep(Duration::from_secs(u64::try_from(sleep.seconds).unwrap_or(0))).await;
        return Ok(());
    }
    if let Some(get) = &handler.http_get {
        let host =
            get.host.clone().or_else(|| pod_ip.map(str::to_string)).unwrap_or_else(|| "127.0.0.1".into());
        let port =
            resolve_port(&get.port, spec).ok_or_else(|| format!("cannot resolve port {:?}", get.port))?;
        let req =
            HttpRequest::for_action(get, host, port, format!("kube-lifecycle/{}", crate::KUBE_VERSION), None);
        // Only transport errors fail a hook; the status code is not checked (R8.4).
        return http_get(&req).await.map(drop).map_err(|e| e.to_string());
    }
    if handler.tcp_socket.is_some() {
        return Err("tcpSocket lifecycle handlers are not supported".into());
    }
    Err("hook has no handler".into())
}
