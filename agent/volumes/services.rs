//! Service environment variables (the kubelet's `getServiceEnvVarMap` and `envvars.FromServices`):
//! every container of a cluster pod gets `<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT` and the
//! Docker-link variables of the services of its namespace (when `enableServiceLinks`, the
//! default) and, always, of the `kubernetes` service of namespace `default`. Services without a
//! cluster IP (headless) give none. The values come from a watch of all services (the node
//! authorizer lets a node read them), as the kubelet's service informer.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;

/// The variables for `services` as a pod in `namespace` sees them, sorted by name.
pub fn service_env<'a>(
    services: impl IntoIterator<Item = &'a Service>,
    namespace: &str,
    enable_service_links: bool,
) -> Vec<(String, String)> {
    // By service name: a service of the pod's namespace wins over the master service of the
    // same name, as upstream.
    let mut chosen: BTreeMap<String, &Service> = BTreeMap::new();
    for s in services {
        let ns = s.metadata.namespace.as_deref().unwrap_or("");
        let name = s.metadata.name.clone().unwrap_or_default();
        if cluster_ip(s).is_none() {
            continue;
        }
        if ns == "default" && name == "kubernetes" {
            chosen.entry(name).or_insert(s);
        } else if ns == namespace && enable_service_links {
            chosen.insert(name, s);
        }
    }
    let mut out = BTreeMap::new();
    for s in chosen.values() {
        out.extend(variables(s));
    }
    out.into_iter().collect()
}

fn cluster_ip(s: &Service) -> Option<&str> {
    let ip = s.spec.as_ref()?.cluster_ip.as_deref()?;
    (!ip.is_empty() && ip != "None").then_some(ip)
}

/// `FOO-bar` → `FOO_BAR` (upstream's makeEnvVariableName).
fn env_name(s: &str) -> String {
    s.replace('-', "_").to_uppercase()
}

fn variables(s: &Service) -> Vec<(String, String)> {
    let (Some(ip), Some(spec)) = (cluster_ip(s), s.spec.as_ref()) else { return vec![] };
    let ports = spec.ports.as_deref().unwrap_or_default();
    let Some(first) = ports.first() else { return vec![] };
    let prefix = env_name(s.metadata.name.as_deref().unwrap_or_default());
    let mut v = vec![(format!("{prefix}_SERVICE_HOST"), ip.to_string())];
    v.push((format!("{prefix}_SERVICE_PORT"), first.port.to_string()));
    for p in ports {
        if let Some(name) = p.name.as_deref().filter(|n| !n.is_empty()) {
            v.push((format!("{prefix}_SERVICE_PORT_{}", env_name(name)), p.port.to_string()));
        }
    }
    // Docker link variables.
    let host_port = |port: i32| {
        if ip.contains(':') { format!("[{ip}]:{port}") } else { format!("{ip}:{port}") }
    };
    for (i, p) in ports.iter().enumerate() {
        let protocol = p.protocol.as_deref().filter(|p| !p.is_empty()).unwrap_or("TCP");
        let url = format!("{}://{}", protocol.to_lowercase(), host_port(p.port));
        if i == 0 {
            v.push((format!("{prefix}_PORT"), url.clone()));
        }
        let pp = format!("{prefix}_PORT_{}_{}", p.port, protocol.to_uppercase());
        v.push((pp.clone(), url));
        v.push((format!("{pp}_PROTO"), protocol.to_lowercase()));
        v.push((format!("{pp}_PORT"), p.port.to_string()));
        v.push((format!("{pp}_ADDR"), ip.to_string()));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(ns: &str, name: &str, ip: &str, ports: serde_json::Value) -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {"clusterIP": ip, "ports": ports}
        }))
        .expect("service")
    }

    fn names(v: &[(String, String)]) -> Vec<&str> {
        v.iter().map(|(k, _)| k.as_str()).collect()
    }

    #[test]
    fn a_service_gives_the_kubelets_variables() {
        let s = svc(
            "app",
            "my-db",
            "10.0.0.9",
            serde_json::json!([{"port": 5432}, {"name": "metrics", "port": 9100, "protocol": "UDP"}]),
        );
        let env = service_env([&s], "app", true);
        let want = [
            ("MY_DB_PORT", "tcp://10.0.0.9:5432"),
            ("MY_DB_PORT_5432_TCP", "tcp://10.0.0.9:5432"),
            ("MY_DB_PORT_5432_TCP_ADDR", "10.0.0.9"),
            ("MY_DB_PORT_5432_TCP_PORT", "5432"),
            ("MY_DB_PORT_5432_TCP_PROTO", "tcp"),
            ("MY_DB_PORT_9100_UDP", "udp://10.0.0.9:9100"),
            ("MY_DB_PORT_9100_UDP_ADDR", "10.0.0.9"),
            ("MY_DB_PORT_9100_UDP_PORT", "9100"),
            ("MY_DB_PORT_9100_UDP_PROTO", "udp"),
            ("MY_DB_SERVICE_HOST", "10.0.0.9"),
            ("MY_DB_SERVICE_PORT", "5432"),
            ("MY_DB_SERVICE_PORT_METRICS", "9100"),
        ];
        let want: Vec<(String, String)> = want.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(env, want);
    }

    #[test]
    fn which_services_a_pod_sees() {
        let master =
            svc("default", "kubernetes", "10.0.0.1", serde_json::json!([{"name": "https", "port": 443}]));
        let other_default = svc("default", "web", "10.0.0.2", serde_json::json!([{"port": 80}]));
        let mine = svc("app", "api", "10.0.0.3", serde_json::json!([{"port": 8080}]));
        let headless = svc("app", "peers", "None", serde_json::json!([{"port": 7000}]));
        let shadow = svc("app", "kubernetes", "10.0.0.4", serde_json::json!([{"port": 1}]));
        let all = [&master, &other_default, &mine, &headless, &shadow];
        let host =
            |env: &[(String, String)], k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());

        // Links on: the namespace's services with a cluster IP, plus the master service (a
        // same-named service of the namespace wins over it).
        let env = service_env(all, "app", true);
        assert_eq!(host(&env, "KUBERNETES_SERVICE_HOST").as_deref(), Some("10.0.0.4"));
        let env = service_env([&master, &mine], "app", true);
        assert_eq!(host(&env, "KUBERNETES_SERVICE_HOST").as_deref(), Some("10.0.0.1"));
        assert_eq!(host(&env, "API_SERVICE_HOST").as_deref(), Some("10.0.0.3"));
        assert!(!names(&env).iter().any(|n| n.starts_with("PEERS_") || n.starts_with("WEB_")), "{env:?}");

        // Links off: only the master service.
        let env = service_env(all, "app", false);
        assert!(names(&env).iter().all(|n| n.starts_with("KUBERNETES_")), "{env:?}");
        assert_eq!(host(&env, "KUBERNETES_SERVICE_PORT_HTTPS").as_deref(), Some("443"));

        // A pod of the default namespace sees the default namespace's services.
        let env = service_env(all, "default", true);
        assert_eq!(host(&env, "WEB_SERVICE_HOST").as_deref(), Some("10.0.0.2"));
        assert!(service_env([&headless], "app", true).is_empty());
    }
}
