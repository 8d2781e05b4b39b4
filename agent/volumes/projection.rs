//! Pure: the files of a `configMap`, `secret`, `downwardAPI` or `projected` volume, given the
//! objects the API server returned (the kubelet's `MakePayload` / `CollectData` /
//! `collectData`), and the downward API values they and the env share. Reading the API and
//! writing the files are `VolumeManager`'s.
//!
//! Error texts are upstream's, since they end up in `FailedMount` events.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, DownwardAPIVolumeFile, KeyToPath, Pod, ProjectedVolumeSource,
    ResourceFieldSelector, Secret, Volume,
};

use super::atomic_writer::{FileProjection, Payload};
use crate::quantity::Quantity;

/// Resource name → quantity (a Node's `status.allocatable`).
pub type ResourceList = BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>;

/// The API's `defaultMode` when a volume gives none (`0644` for all four kinds).
pub const DEFAULT_MODE: u32 = 0o644;

/// What the API server returned for the objects a pod's volumes name, in the pod's namespace:
/// `Ok(None)` is "not found", `Err` a failed read.
#[derive(Default)]
pub struct Fetched {
    pub config_maps: BTreeMap<String, Result<Option<ConfigMap>, String>>,
    pub secrets: BTreeMap<String, Result<Option<Secret>, String>>,
    /// The token of each `serviceAccountToken` source, by (volume name, path).
    pub tokens: BTreeMap<(String, String), Result<String, String>>,
}

impl Fetched {
    fn config_map(&self, name: &str) -> Result<Option<&ConfigMap>, String> {
        match self.config_maps.get(name) {
            Some(Ok(cm)) => Ok(cm.as_ref()),
            Some(Err(e)) => Err(e.clone()),
            None => Err(format!("configmap {name:?} was not read")),
        }
    }

    fn secret(&self, name: &str) -> Result<Option<&Secret>, String> {
        match self.secrets.get(name) {
            Some(Ok(s)) => Ok(s.as_ref()),
            Some(Err(e)) => Err(e.clone()),
            None => Err(format!("secret {name:?} was not read")),
        }
    }
}

fn mode_or(mode: Option<i32>, default: u32) -> u32 {
    mode.and_then(|m| u32::try_from(m).ok()).unwrap_or(default)
}

/// Go's `utilerrors.NewAggregate(..).Error()`: one error as is, several as `[a, b]`.
fn aggregate(errors: Vec<String>) -> Result<(), String> {
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.into_iter().next().unwrap_or_default()),
        _ => Err(format!("[{}]", errors.join(", "))),
    }
}

/// The payload of one API-backed volume of `pod`; `None` for other volume types.
pub fn volume_payload(
    vol: &Volume,
    pod: &Pod,
    fetched: &Fetched,
    allocatable: &ResourceList,
) -> Option<Result<Payload, String>> {
    if let Some(src) = &vol.config_map {
        let optional = src.optional == Some(true);
        let mode = mode_or(src.default_mode, DEFAULT_MODE);
        return Some(fetched.config_map(&src.name).and_then(|cm| match cm {
            Some(cm) => config_map_files(src.items.as_deref(), cm, mode, optional),
            None if optional => Ok(Payload::new()),
            None => Err(format!("configmap {:?} not found", src.name)),
        }));
    }
    if let Some(src) = &vol.secret {
        let name = src.secret_name.clone().unwrap_or_default();
        let optional = src.optional == Some(true);
        let mode = mode_or(src.default_mode, DEFAULT_MODE);
        return Some(fetched.secret(&name).and_then(|s| match s {
            Some(s) => secret_files(src.items.as_deref(), s, mode, optional),
            None if optional => Ok(Payload::new()),
            None => Err(format!("secret {name:?} not found")),
        }));
    }
    if let Some(src) = &vol.downward_api {
        let mode = mode_or(src.default_mode, DEFAULT_MODE);
        return Some(downward_api_files(src.items.as_deref().unwrap_or_default(), mode, pod, allocatable));
    }
    if let Some(src) = &vol.projected {
        return Some(projected_files(&vol.name, src, pod, fetched, allocatable));
    }
    None
}

/// Upstream `configmap.MakePayload`: every key (`data` and `binaryData`) at its own name, or
/// only the `items`, each at its path; a missing item key is skipped only when optional.
pub fn config_map_files(
    items: Option<&[KeyToPath]>,
    cm: &ConfigMap,
    default_mode: u32,
    optional: bool,
) -> Result<Payload, String> {
    let data = cm.data.as_ref();
    let binary = cm.binary_data.as_ref();
    let mut out = Payload::new();
    match items.filter(|i| !i.is_empty()) {
        None => {
            for (k, v) in data.into_iter().flatten() {
                out.insert(k.clone(), FileProjection { data: v.as_bytes().to_vec(), mode: default_mode });
            }
            for (k, v) in binary.into_iter().flatten() {
                out.insert(k.clone(), FileProjection { data: v.0.clone(), mode: default_mode });
            }
        }
        Some(items) => {
            for item in items {
                let bytes = match (data.and_then(|d| d.get(&item.key)), binary.and_then(|b| b.get(&item.key)))
                {
                    (Some(s), _) => s.as_bytes().to_vec(),
                    (None, Some(b)) => b.0.clone(),
                    (None, None) if optional => continue,
                    (None, None) => {
                        return Err(format!("configmap references non-existent config key: {}", item.key));
                    }
                };
                out.insert(
                    item.path.clone(),
                    FileProjection { data: bytes, mode: mode_or(item.mode, default_mode) },
                );
            }
        }
    }
    Ok(out)
}

/// Upstream `secret.MakePayload` (a Secret read from the API has only `data`: the API server
/// folds `stringData` into it).
pub fn secret_files(
    items: Option<&[KeyToPath]>,
    secret: &Secret,
    default_mode: u32,
    optional: bool,
) -> Result<Payload, String> {
    let data = secret.data.as_ref();
    let mut out = Payload::new();
    match items.filter(|i| !i.is_empty()) {
        None => {
            for (k, v) in data.into_iter().flatten() {
                out.insert(k.clone(), FileProjection { data: v.0.clone(), mode: default_mode });
            }
        }
        Some(items) => {
            for item in items {
                let Some(v) = data.and_then(|d| d.get(&item.key)) else {
                    if optional {
                        continue;
                    }
                    return Err(format!("references non-existent secret key: {}", item.key));
                };
                out.insert(
                    item.path.clone(),
                    FileProjection { data: v.0.clone(), mode: mode_or(item.mode, default_mode) },
                );
            }
        }
    }
    Ok(out)
}

/// Upstream `downwardapi.CollectData`: one file per item, from a `fieldRef` (metadata only) or a
/// `resourceFieldRef` (limits defaulted to the node's allocatable). Errors are aggregated.
pub fn downward_api_files(
    items: &[DownwardAPIVolumeFile],
    default_mode: u32,
    pod: &Pod,
    allocatable: &ResourceList,
) -> Result<Payload, String> {
    let mut out = Payload::new();
    let mut errors = Vec::new();
    for item in items {
        let value = if let Some(f) = &item.field_ref {
            pod_metadata_field(pod, &f.field_path)
        } else if let Some(r) = &item.resource_field_ref {
            let name = r.container_name.as_deref().unwrap_or("");
            find_container(pod, name).and_then(|c| container_resource_value(r, c, allocatable))
        } else {
            Ok(String::new())
        };
        match value {
            Ok(v) => {
                out.insert(
                    item.path.clone(),
                    FileProjection { data: v.into_bytes(), mode: mode_or(item.mode, default_mode) },
                );
            }
            Err(e) => errors.push(e),
        }
    }
    aggregate(errors).map(|()| out)
}

/// Upstream `projected.collectData`: the sources in order, later paths replacing earlier ones,
/// every mode defaulting to the projected volume's `defaultMode`; any failed source fails the
/// volume (errors aggregated).
///
/// The token's mode is `defaultMode` too: upstream makes it 0600 when the pod has an `fsGroup`
/// (then 0640 through the volume's group ownership) or one run-as user for all containers (then
/// owned by that user); crilet applies neither ownership, so it keeps `defaultMode`.
pub fn projected_files(
    volume: &str,
    src: &ProjectedVolumeSource,
    pod: &Pod,
    fetched: &Fetched,
    allocatable: &ResourceList,
) -> Result<Payload, String> {
    let mode = mode_or(src.default_mode, DEFAULT_MODE);
    let mut out = Payload::new();
    let mut errors = Vec::new();
    for source in src.sources.iter().flatten() {
        let part = if let Some(s) = &source.secret {
            let optional = s.optional == Some(true);
            fetched.secret(&s.name).and_then(|found| match found {
                Some(found) => secret_files(s.items.as_deref(), found, mode, optional),
                None if optional => secret_files(s.items.as_deref(), &Secret::default(), mode, optional),
                None => Err(format!("secret {:?} not found", s.name)),
            })
        } else if let Some(c) = &source.config_map {
            let optional = c.optional == Some(true);
            fetched.config_map(&c.name).and_then(|found| match found {
                Some(found) => config_map_files(c.items.as_deref(), found, mode, optional),
                None if optional => {
                    config_map_files(c.items.as_deref(), &ConfigMap::default(), mode, optional)
                }
                None => Err(format!("configmap {:?} not found", c.name)),
            })
        } else if let Some(d) = &source.downward_api {
            downward_api_files(d.items.as_deref().unwrap_or_default(), mode, pod, allocatable)
        } else if let Some(t) = &source.service_account_token {
            let key = (volume.to_string(), t.path.clone());
            match fetched.tokens.get(&key) {
                Some(Ok(token)) => Ok(Payload::from([(
                    t.path.clone(),
                    FileProjection { data: token.as_bytes().to_vec(), mode },
                )])),
                Some(Err(e)) => Err(e.clone()),
                None => Err(format!("token for {:?} was not requested", t.path)),
            }
        } else if source.cluster_trust_bundle.is_some() {
            Err("clusterTrustBundle projections are not supported by crilet".to_string())
        } else {
            Ok(Payload::new())
        };
        match part {
            Ok(p) => out.extend(p),
            Err(e) => errors.push(e),
        }
    }
    aggregate(errors).map(|()| out)
}

/// `metadata.labels['key']` → (`metadata.labels`, `key`) (upstream `SplitMaybeSubscriptedPath`).
fn split_subscript(path: &str) -> Option<(&str, &str)> {
    let inner = path.strip_suffix("']")?;
    let (base, key) = inner.split_once("['")?;
    Some((base, key))
}

/// A pod metadata field as the downward API gives it (upstream `ExtractFieldPathAsString`):
/// name, namespace, uid, one label or annotation (`metadata.labels['k']`, empty when absent), or
/// all of them as `key="value"` lines sorted by key.
pub fn pod_metadata_field(pod: &Pod, path: &str) -> Result<String, String> {
    let m = &pod.metadata;
    if let Some((base, key)) = split_subscript(path) {
        return match base {
            "metadata.annotations" => {
                Ok(m.annotations.as_ref().and_then(|a| a.get(key)).cloned().unwrap_or_default())
            }
            "metadata.labels" => Ok(m.labels.as_ref().and_then(|l| l.get(key)).cloned().unwrap_or_default()),
            _ => Err(format!("fieldPath {path:?} does not support subscript")),
        };
    }
    Ok(match path {
        "metadata.annotations" => format_map(m.annotations.as_ref()),
        "metadata.labels" => format_map(m.labels.as_ref()),
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        _ => return Err(format!("unsupported fieldPath: {path}")),
    })
}

/// Upstream `fieldpath.FormatMap`: `key="value"` per line (Go `%q` quoting), sorted by key, no
/// final newline.
pub fn format_map(m: Option<&BTreeMap<String, String>>) -> String {
    m.into_iter().flatten().map(|(k, v)| format!("{k}={}", go_quote(v))).collect::<Vec<_>>().join("\n")
}

/// Go's `strconv.Quote`: `"`, `\` and non-printable characters escaped (`\n`, `\x01`, `\u00a0`).
/// Printability follows Go's `unicode.IsPrint` for controls, spaces, format and private-use
/// characters; unassigned code points are printed as they are.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if is_go_printable(c) => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

fn is_go_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    let u = c as u32;
    let format = matches!(u, 0xad | 0x600..=0x605 | 0x61c | 0x6dd | 0x70f | 0x180e | 0x200b..=0x200f
        | 0x202a..=0x202e | 0x2060..=0x2064 | 0x2066..=0x206f | 0xfeff | 0xfff9..=0xfffb | 0x110bd
        | 0x1d173..=0x1d17a | 0xe0001 | 0xe0020..=0xe007f);
    let private = matches!(u, 0xe000..=0xf8ff | 0xf0000..=0xffffd | 0x100000..=0x10fffd);
    !(c.is_control() || c.is_whitespace() || format || private)
}

/// The named container among the pod's containers, then its init containers.
pub fn find_container<'a>(pod: &'a Pod, name: &str) -> Result<&'a Container, String> {
    let spec = pod.spec.as_ref();
    let apps = spec.map(|s| s.containers.iter()).into_iter().flatten();
    let inits = spec.and_then(|s| s.init_containers.as_ref()).into_iter().flatten();
    apps.chain(inits).find(|c| c.name == name).ok_or_else(|| format!("container {name} not found"))
}

/// A container's requests or limits as the downward API gives them (upstream
/// `ExtractContainerResourceValue` after `MergeContainerResourceLimits`): a cpu, memory,
/// ephemeral-storage limit that is unset or zero is the node's allocatable; the value is divided
/// by `divisor` (default 1) and rounded up; cpu counts in millicores before dividing.
pub fn container_resource_value(
    sel: &ResourceFieldSelector,
    c: &Container,
    allocatable: &ResourceList,
) -> Result<String, String> {
    let (kind, name) = sel
        .resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported container resource : {}", sel.resource))?;
    let hugepages = name.starts_with("hugepages-");
    if !matches!(kind, "limits" | "requests")
        || !(hugepages || matches!(name, "cpu" | "memory" | "ephemeral-storage"))
    {
        return Err(format!("unsupported container resource : {}", sel.resource));
    }
    let res = c.resources.as_ref();
    let set = if kind == "limits" {
        res.and_then(|r| r.limits.as_ref())
    } else {
        res.and_then(|r| r.requests.as_ref())
    };
    let parse = |q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity| {
        Quantity::parse(&q.0).ok_or_else(|| format!("invalid quantity {:?} for {}", q.0, sel.resource))
    };
    let zero = Quantity::parse("0").ok_or("zero quantity")?;
    let mut value = match set.and_then(|m| m.get(name)) {
        Some(q) => parse(q)?,
        None => zero,
    };
    if kind == "limits"
        && !hugepages
        && value.milli_value() == Some(0)
        && let Some(q) = allocatable.get(name)
    {
        value = parse(q)?;
    }
    let divisor = match &sel.divisor {
        Some(d) => parse(d)?,
        None => zero,
    };
    let in_units = |q: &Quantity| if name == "cpu" { q.milli_value() } else { q.value() };
    let overflow = || format!("{} overflows", sel.resource);
    let v = in_units(&value).ok_or_else(overflow)?;
    let d = in_units(&divisor).ok_or_else(overflow)?;
    // A zero divisor means 1 (a whole core for cpu).
    let d = if d <= 0 { if name == "cpu" { 1000 } else { 1 } } else { d };
    let q = v / d;
    let ceil = if v % d > 0 { q + 1 } else { q };
    Ok(ceil.to_string())
}

#[cfg(test)]
mod tests;
