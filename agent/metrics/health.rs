//! The `/healthz` answer: what [`crate::health::Liveness`] finds (the sync loop turns, the
//! relist is answered, no long-lived loop has ended) and the runtime health the PLEG reports. Pure.

use crate::health::Unhealthy;
use crate::registry::{ApiHealth, RuntimeHealth};

/// Cluster mode: a line saying the API server is unreachable, after the health answer. It does
/// not make the agent unhealthy (pods keep running without the API server, as the kubelet's).
pub fn api_server_line(api: Option<&ApiHealth>, now: jiff::Timestamp) -> String {
    match api {
        Some(a) if !a.reachable => {
            let secs = now.duration_since(a.since).as_secs_f64().max(0.0);
            format!("api server: unreachable for {secs:.0}s (retrying with back-off): {}\n", a.last_error)
        }
        _ => String::new(),
    }
}

/// The HTTP status and body of `/healthz`: `200 ok`, or `500` with one line per reason.
pub fn healthz(
    liveness: Result<(), Vec<Unhealthy>>,
    runtime: &RuntimeHealth,
    now: jiff::Timestamp,
) -> (u16, String) {
    let mut reasons: Vec<String> =
        liveness.err().unwrap_or_default().iter().map(ToString::to_string).collect();
    if !runtime.available {
        let secs = now.duration_since(runtime.since).as_secs_f64().max(0.0);
        reasons.push(format!("container runtime: unavailable for {secs:.0}s: {}", runtime.last_error));
    }
    if reasons.is_empty() {
        return (200, "ok\n".to_string());
    }
    let mut body = reasons.join("\n");
    body.push('\n');
    (500, body)
}
