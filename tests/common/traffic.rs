//! Traffic as a Service's client sees it: one HTTP GET to an address, and a client that follows
//! a Service's EndpointSlices as kube-proxy would (ready endpoints only, round-robin), counting
//! what failed. Shared by tests/kruise.rs and the Kruise benchmark (benches/kruise).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::watcher;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One HTTP/1.0 GET to a pod IP: the body, or why it failed.
pub async fn http_get(addr: &str, path: &str) -> Result<String, String> {
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("connect: {e}"))?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.map_err(|e| format!("read: {e}"))?;
        let text = String::from_utf8_lossy(&buf).to_string();
        let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| format!("no header end: {text:?}"))?;
        if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
            return Err(format!("status: {}", head.lines().next().unwrap_or("")));
        }
        Ok(body.trim().to_string())
    };
    tokio::time::timeout(Duration::from_secs(2), fut).await.unwrap_or_else(|_| Err("timeout".into()))
}

/// A client that routes as kube-proxy would: the Service's EndpointSlices, ready endpoints
/// only, round-robin, one request at a time, for as long as it runs.
#[derive(Default)]
pub struct Traffic {
    pub ok: u64,
    pub failed: Vec<String>,
    pub bodies: BTreeMap<String, u64>,
}

pub fn start_client(
    client: kube::Client,
    namespace: &str,
    service: &str,
    port: u16,
    stop: tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<Traffic> {
    let slices: Api<EndpointSlice> = Api::namespaced(client, namespace);
    let ready: Arc<Mutex<BTreeMap<String, Vec<String>>>> = Arc::default();
    let cfg = watcher::Config::default().labels(&format!("kubernetes.io/service-name={service}"));
    let watch_ready = ready.clone();
    let watch_stop = stop.clone();
    tokio::spawn(async move {
        let mut stream = watcher::watcher(slices, cfg).boxed();
        loop {
            let ev = tokio::select! {
                _ = watch_stop.cancelled() => return,
                ev = stream.next() => ev,
            };
            let Some(Ok(ev)) = ev else { continue };
            let set = |s: &EndpointSlice| {
                let name = s.metadata.name.clone().unwrap_or_default();
                let addrs = s
                    .endpoints
                    .iter()
                    .flatten()
                    .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                    .flat_map(|e| e.addresses.clone())
                    .collect();
                watch_ready.lock().unwrap().insert(name, addrs);
            };
            match ev {
                watcher::Event::Apply(s) | watcher::Event::InitApply(s) => set(&s),
                watcher::Event::Delete(s) => {
                    watch_ready.lock().unwrap().remove(&s.metadata.name.unwrap_or_default());
                }
                watcher::Event::Init | watcher::Event::InitDone => {}
            }
        }
    });
    tokio::spawn(async move {
        let mut t = Traffic::default();
        let mut i = 0usize;
        while !stop.is_cancelled() {
            let addrs: Vec<String> = ready.lock().unwrap().values().flatten().cloned().collect();
            if addrs.is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            let addr = &addrs[i % addrs.len()];
            i += 1;
            match http_get(&format!("{addr}:{port}"), "/").await {
                Ok(body) => {
                    t.ok += 1;
                    *t.bodies.entry(body).or_default() += 1;
                }
                Err(e) => t.failed.push(format!("{addr}: {e}")),
            }
            // About 50 requests a second: a steady load, not a flood on 2 cores.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        t
    })
}
