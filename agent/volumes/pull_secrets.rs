//! `imagePullSecrets`: the registry credentials of a pod, as the kubelet's keyring finds them
//! (pure). A `kubernetes.io/dockerconfigjson` secret (`.dockerconfigjson`: `{"auths": {...}}`)
//! or `kubernetes.io/dockercfg` (`.dockercfg`: the map itself) lists credentials by registry
//! key (`host[:port][/path]`, optionally with a scheme); an image matches a key whose host is
//! the image's registry and whose path is a prefix of the image's repository path. Matches are
//! tried in order of the secrets, most specific key first.

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use serde::Deserialize;

/// One credential for a pull (CRI's `AuthConfig` fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub server: String,
    pub username: String,
    pub password: String,
}

#[derive(Deserialize, Default)]
struct Entry {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    auth: String,
}

#[derive(Deserialize)]
struct DockerConfigJson {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

/// The registry host and repository path of an image reference (`docker.io` for short names).
pub fn registry_of(image: &str) -> (String, String) {
    let name = image.split('@').next().unwrap_or(image);
    let (first, rest) = match name.split_once('/') {
        Some((f, r)) if f.contains('.') || f.contains(':') || f == "localhost" => {
            (f.to_string(), r.to_string())
        }
        _ => ("docker.io".to_string(), name.to_string()),
    };
    // The tag is not part of the path.
    let path = match rest.rsplit_once(':') {
        Some((p, tag)) if !tag.contains('/') => p.to_string(),
        _ => rest,
    };
    let host = if first == "index.docker.io" || first == "registry-1.docker.io" {
        "docker.io".into()
    } else {
        first
    };
    (host, path)
}

/// A keyring key as (host, path prefix).
fn parse_key(key: &str) -> (String, String) {
    let k = key.trim();
    let k = k.strip_prefix("https://").or_else(|| k.strip_prefix("http://")).unwrap_or(k);
    let (host, path) = k.split_once('/').unwrap_or((k, ""));
    let host = match host {
        "index.docker.io" | "registry-1.docker.io" => "docker.io",
        h => h,
    };
    let path = path.trim_end_matches('/');
    // Docker Hub's classic key carries an API path, not a repository.
    let path = if path.starts_with("v1") || path.starts_with("v2") { "" } else { path };
    (host.to_string(), path.to_string())
}

fn entries(secret: &Secret) -> BTreeMap<String, Entry> {
    let data = secret.data.as_ref();
    let get = |k: &str| data.and_then(|d| d.get(k)).map(|b| b.0.clone());
    if let Some(json) = get(".dockerconfigjson") {
        return serde_json::from_slice::<DockerConfigJson>(&json).map(|c| c.auths).unwrap_or_default();
    }
    if let Some(json) = get(".dockercfg") {
        return serde_json::from_slice(&json).unwrap_or_default();
    }
    BTreeMap::new()
}

/// The credentials in `secrets` that apply to `image`, in the order to try them.
pub fn credentials(secrets: &[Secret], image: &str) -> Vec<Credential> {
    let (host, path) = registry_of(image);
    let mut out: Vec<(usize, usize, Credential)> = Vec::new();
    for (i, secret) in secrets.iter().enumerate() {
        for (key, e) in entries(secret) {
            let (k_host, k_path) = parse_key(&key);
            let path_ok = k_path.is_empty() || path == k_path || path.starts_with(&format!("{k_path}/"));
            if k_host != host || !path_ok {
                continue;
            }
            let (mut username, mut password) = (e.username, e.password);
            if username.is_empty() && !e.auth.is_empty() {
                let decoded =
                    base64::engine::general_purpose::STANDARD.decode(e.auth.trim()).unwrap_or_default();
                let text = String::from_utf8_lossy(&decoded).to_string();
                if let Some((u, p)) = text.split_once(':') {
                    username = u.to_string();
                    password = p.to_string();
                }
            }
            out.push((i, usize::MAX - k_path.len(), Credential { server: k_host, username, password }));
        }
    }
    out.sort_by_key(|(i, specificity, _)| (*specificity, *i));
    out.into_iter().map(|(_, _, c)| c).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(key: &str, json: &str) -> Secret {
        Secret {
            data: Some(BTreeMap::from([(key.to_string(), ByteString(json.as_bytes().to_vec()))])),
            ..Default::default()
        }
    }

    #[test]
    fn image_references_split_into_registry_and_path() {
        let cases = [
            ("localhost:5099/busybox:1.36", ("localhost:5099", "busybox")),
            ("registry.example.com/team/app@sha256:abc", ("registry.example.com", "team/app")),
            ("busybox", ("docker.io", "busybox")),
            ("library/busybox:1", ("docker.io", "library/busybox")),
            ("index.docker.io/x/y", ("docker.io", "x/y")),
        ];
        for (image, (h, p)) in cases {
            assert_eq!(registry_of(image), (h.to_string(), p.to_string()), "{image}");
        }
    }

    #[test]
    fn credentials_match_registry_and_path_most_specific_first() {
        let auth = base64::engine::general_purpose::STANDARD.encode("bob:pw2");
        let a = secret(
            ".dockerconfigjson",
            &format!(
                r#"{{"auths": {{"localhost:5098": {{"username": "alice", "password": "pw1"}}, "http://localhost:5098/private": {{"auth": "{auth}"}}, "other:1": {{"username": "x"}}}}}}"#
            ),
        );
        let b =
            secret(".dockercfg", r#"{"https://localhost:5098/": {"username": "carol", "password": "pw3"}}"#);
        let got = credentials(&[a.clone(), b.clone()], "localhost:5098/private/busybox:1.36");
        let users: Vec<&str> = got.iter().map(|c| c.username.as_str()).collect();
        assert_eq!(users, ["bob", "alice", "carol"], "the path key first, then host keys in secret order");
        assert_eq!(got[0].password, "pw2", "from the base64 auth field");
        let users: Vec<String> = credentials(&[a.clone(), b], "localhost:5098/public/app")
            .into_iter()
            .map(|c| c.username)
            .collect();
        assert_eq!(users, ["alice", "carol"]);
        assert!(credentials(&[a], "localhost:5099/busybox").is_empty(), "another registry");
        assert!(credentials(&[secret("token", "x")], "localhost:5098/a").is_empty(), "not a registry secret");
    }
}
