//! The API side of a container's env (the kubelet's `makeEnvironmentVariables`): `envFrom`
//! ConfigMaps and Secrets, `configMapKeyRef` / `secretKeyRef`, and `resourceFieldRef`.
//! The objects are read once, before the container's config is built ([`fetch`]); the rest is
//! pure and called by `pod::spec::resolve_env`, which keeps the order and the `$(VAR)`
//! expansion. Without the API (static pods) the object references fail as upstream's kubelet
//! without a client does.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use k8s_openapi::api::core::v1::{ConfigMap, Container, EnvVarSource, Pod, ResourceFieldSelector, Secret};

use super::ApiObjects;
use super::projection::{ResourceList, container_resource_value, find_container};

/// The ConfigMaps and Secrets a container's env names (`None`: not found), and the node's
/// allocatable (the default of unset limits for `resourceFieldRef`).
#[derive(Clone, Default)]
pub struct EnvSources {
    pub config_maps: BTreeMap<String, Option<ConfigMap>>,
    pub secrets: BTreeMap<String, Option<Secret>>,
    pub allocatable: ResourceList,
    /// The service environment variables (`services::service_env`), sorted by name.
    pub services: Vec<(String, String)>,
}

impl std::fmt::Debug for EnvSources {
    // Secret values are never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvSources")
            .field("config_maps", &self.config_maps.keys().collect::<Vec<_>>())
            .field("secrets", &self.secrets.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Reads every ConfigMap and Secret `c`'s env names, each once, and the service variables of the
/// pod's namespace. A missing object is recorded as `None` (whether that is an error depends on
/// `optional`); a failed read is the error.
pub async fn fetch(
    api: &dyn ApiObjects,
    namespace: &str,
    enable_service_links: bool,
    c: &Container,
    allocatable: ResourceList,
) -> Result<EnvSources, String> {
    let services = api.service_env(namespace, enable_service_links).await?;
    let mut out = EnvSources { allocatable, services, ..Default::default() };
    let mut cms = Vec::new();
    let mut secrets = Vec::new();
    for f in c.env_from.iter().flatten() {
        cms.extend(f.config_map_ref.as_ref().map(|r| r.name.clone()));
        secrets.extend(f.secret_ref.as_ref().map(|r| r.name.clone()));
    }
    for from in c.env.iter().flatten().filter_map(|e| e.value_from.as_ref()) {
        cms.extend(from.config_map_key_ref.as_ref().map(|r| r.name.clone()));
        secrets.extend(from.secret_key_ref.as_ref().map(|r| r.name.clone()));
    }
    for name in cms {
        if let Entry::Vacant(slot) = out.config_maps.entry(name) {
            let cm = api.config_map(namespace, slot.key()).await?;
            slot.insert(cm);
        }
    }
    for name in secrets {
        if let Entry::Vacant(slot) = out.secrets.entry(name) {
            let s = api.secret(namespace, slot.key()).await?;
            slot.insert(s);
        }
    }
    Ok(out)
}

fn put(env: &mut Vec<(String, String)>, key: String, value: String) {
    env.retain(|(k, _)| *k != key);
    env.push((key, value));
}

fn no_client(kind: &str, namespace: &str, name: &str) -> String {
    format!("couldn't get {kind} {namespace}/{name}, no kubeClient defined")
}

/// The variables of `c.envFrom`, in order: a later source replaces an earlier one's keys, keys
/// of one source come sorted, each with the source's prefix. Only a ConfigMap's `data` counts.
/// A missing object is skipped when optional, else an error such as `configmap "x" not found`.
/// Every key is taken as it is, as the kubelet does since environment variable names were
/// relaxed (ConfigMap and Secret keys are validated by the API server).
pub fn env_from(
    api: Option<&EnvSources>,
    namespace: &str,
    c: &Container,
) -> Result<Vec<(String, String)>, String> {
    let mut env = Vec::new();
    for f in c.env_from.iter().flatten() {
        let prefix = f.prefix.as_deref().unwrap_or("");
        if let Some(r) = &f.config_map_ref {
            let Some(api) = api else { return Err(no_client("configMap", namespace, &r.name)) };
            match api.config_maps.get(&r.name) {
                Some(Some(cm)) => {
                    for (k, v) in cm.data.iter().flatten() {
                        put(&mut env, format!("{prefix}{k}"), v.clone());
                    }
                }
                _ if r.optional == Some(true) => {}
                _ => return Err(format!("configmap {:?} not found", r.name)),
            }
        } else if let Some(r) = &f.secret_ref {
            let Some(api) = api else { return Err(no_client("secret", namespace, &r.name)) };
            match api.secrets.get(&r.name) {
                Some(Some(s)) => {
                    for (k, v) in s.data.iter().flatten() {
                        put(&mut env, format!("{prefix}{k}"), String::from_utf8_lossy(&v.0).into_owned());
                    }
                }
                _ if r.optional == Some(true) => {}
                _ => return Err(format!("secret {:?} not found", r.name)),
            }
        }
    }
    Ok(env)
}

/// The value of a `configMapKeyRef` or `secretKeyRef`; `Ok(None)` when it is optional and its
/// object or key is missing (the variable is then not set at all, as upstream).
pub fn key_ref(
    api: Option<&EnvSources>,
    namespace: &str,
    from: &EnvVarSource,
) -> Result<Option<String>, String> {
    if let Some(r) = &from.config_map_key_ref {
        let optional = r.optional == Some(true);
        let Some(api) = api else { return Err(no_client("configMap", namespace, &r.name)) };
        let Some(Some(cm)) = api.config_maps.get(&r.name) else {
            return if optional { Ok(None) } else { Err(format!("configmap {:?} not found", r.name)) };
        };
        return match cm.data.as_ref().and_then(|d| d.get(&r.key)) {
            Some(v) => Ok(Some(v.clone())),
            None if optional => Ok(None),
            None => Err(format!("couldn't find key {} in ConfigMap {namespace}/{}", r.key, r.name)),
        };
    }
    if let Some(r) = &from.secret_key_ref {
        let optional = r.optional == Some(true);
        let Some(api) = api else { return Err(no_client("secret", namespace, &r.name)) };
        let Some(Some(s)) = api.secrets.get(&r.name) else {
            return if optional { Ok(None) } else { Err(format!("secret {:?} not found", r.name)) };
        };
        return match s.data.as_ref().and_then(|d| d.get(&r.key)) {
            Some(v) => Ok(Some(String::from_utf8_lossy(&v.0).into_owned())),
            None if optional => Ok(None),
            None => Err(format!("couldn't find key {} in Secret {namespace}/{}", r.key, r.name)),
        };
    }
    Err("valueFrom names no source".to_string())
}

/// A `resourceFieldRef` value: of `c` itself, or of the container it names; unset limits are
/// the node's allocatable (none known without the API: they count as 0).
pub fn resource_ref(
    api: Option<&EnvSources>,
    pod: &Pod,
    c: &Container,
    sel: &ResourceFieldSelector,
) -> Result<String, String> {
    static NONE: ResourceList = ResourceList::new();
    let allocatable = api.map_or(&NONE, |a| &a.allocatable);
    let target = match sel.container_name.as_deref().filter(|n| !n.is_empty()) {
        Some(name) => find_container(pod, name)?,
        None => c,
    };
    container_resource_value(sel, target, allocatable)
}
