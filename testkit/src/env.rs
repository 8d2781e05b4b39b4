//! The env files of the development environment: `hack/setup.sh` writes the runtime's
//! (`/run/crilet-dev/env`, or `/run/crilet-dev/env-2.3` for the containerd it runs beside the main
//! one), `hack/cluster.sh` the control plane's and one per node identity. Each is `KEY=VALUE`
//! lines that the scripts also source (`. "$ENV_FILE"`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The main environment's env file (hack/lib.sh's `MAIN_ENV_FILE`).
pub const MAIN_ENV_FILE: &str = "/run/crilet-dev/env";
/// The control plane's env file, written by `hack/cluster.sh`.
pub const CLUSTER_ENV_FILE: &str = "/run/crilet-dev/cluster/env";
/// Names the env file of the runtime under test in place of [`MAIN_ENV_FILE`].
pub const ENV_FILE_VAR: &str = "CRILET_ENV_FILE";

/// The env file of the runtime under test: `CRILET_ENV_FILE` when set and not empty
/// (hack/test.sh's 2.3 leg: `/run/crilet-dev/env-2.3`, the containerd beside the main
/// environment), else [`MAIN_ENV_FILE`].
pub fn env_file() -> String {
    choose(std::env::var(ENV_FILE_VAR).ok())
}

fn choose(var: Option<String>) -> String {
    var.filter(|f| !f.is_empty()).unwrap_or_else(|| MAIN_ENV_FILE.to_string())
}

/// The variables of an env file's text: each line with a `=` is `KEY=VALUE`, split at the first
/// `=`, both sides trimmed, double quotes around the value dropped; other lines are ignored, and
/// a later line wins over an earlier one of the same key.
pub fn parse(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().trim_matches('"').to_string()))
        .collect()
}

/// One env file's variables.
#[derive(Clone, Debug)]
pub struct EnvFile {
    pub path: PathBuf,
    pub vars: HashMap<String, String>,
}

impl EnvFile {
    /// Reads and parses `path`.
    pub fn read(path: impl AsRef<Path>) -> std::io::Result<EnvFile> {
        let path = path.as_ref().to_path_buf();
        let text = std::fs::read_to_string(&path)?;
        Ok(EnvFile { vars: parse(&text), path })
    }

    /// [`EnvFile::read`], or a panic: "PATH is missing (ERROR): HINT" (the hint names the
    /// script that writes the file).
    pub fn load(path: impl AsRef<Path>, hint: &str) -> EnvFile {
        let path = path.as_ref();
        EnvFile::read(path).unwrap_or_else(|e| panic!("{} is missing ({e}): {hint}", path.display()))
    }

    /// The value of `k`; panics when the file does not have it.
    pub fn get(&self, k: &str) -> String {
        self.vars.get(k).cloned().unwrap_or_else(|| panic!("{k} missing from {}", self.path.display()))
    }

    /// The runtime's CRI endpoint.
    pub fn endpoint(&self) -> String {
        self.get("CRILET_CONTAINERD_ENDPOINT")
    }

    /// Replaces `${CRILET_…}` placeholders with the file's values.
    pub fn render(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (k, v) in &self.vars {
            out = out.replace(&format!("${{{k}}}"), v);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        let cases: &[(&str, &[(&str, &str)])] = &[
            ("", &[]),
            ("CRILET_RUNTIME=2.1", &[("CRILET_RUNTIME", "2.1")]),
            // As hack/setup.sh writes it: unquoted, one a line.
            (
                "CRILET_RUNTIME=2.1\nCRILET_CONTAINERD_ENDPOINT=unix:///run/crilet-dev/containerd/containerd.sock\n",
                &[
                    ("CRILET_RUNTIME", "2.1"),
                    ("CRILET_CONTAINERD_ENDPOINT", "unix:///run/crilet-dev/containerd/containerd.sock"),
                ],
            ),
            // Split at the first `=`: a value may hold more.
            ("CRILET_NODE_LABELS=a=b,c=d", &[("CRILET_NODE_LABELS", "a=b,c=d")]),
            // Trimmed, quotes dropped.
            ("  K = \"v w\"  ", &[("K", "v w")]),
            ("K=\"\"", &[("K", "")]),
            ("K=", &[("K", "")]),
            // Lines without `=` are not variables.
            ("just words\nK=v\n\n", &[("K", "v")]),
            // The later line wins.
            ("K=1\nK=2", &[("K", "2")]),
            // CRLF files.
            ("K=v\r\nL=w\r\n", &[("K", "v"), ("L", "w")]),
        ];
        for (text, want) in cases {
            let want: HashMap<String, String> =
                want.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            assert_eq!(parse(text), want, "{text:?}");
        }
    }

    #[test]
    fn env_file_override() {
        assert_eq!(choose(None), MAIN_ENV_FILE);
        assert_eq!(choose(Some(String::new())), MAIN_ENV_FILE, "an empty CRILET_ENV_FILE is unset");
        assert_eq!(choose(Some("/run/crilet-dev/env-2.3".into())), "/run/crilet-dev/env-2.3");
    }

    #[test]
    fn read_get_render() {
        let dir = std::env::temp_dir().join(format!("testkit-env-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("env");
        std::fs::write(
            &path,
            "CRILET_IMAGE_BUSYBOX=localhost:5000/busybox:1\nCRILET_CONTAINERD_ENDPOINT=unix:///s\n",
        )
        .unwrap();
        let env = EnvFile::load(&path, "run hack/setup.sh first");
        assert_eq!(env.get("CRILET_IMAGE_BUSYBOX"), "localhost:5000/busybox:1");
        assert_eq!(env.endpoint(), "unix:///s");
        assert_eq!(
            env.render("image: ${CRILET_IMAGE_BUSYBOX} ${CRILET_UNKNOWN}"),
            "image: localhost:5000/busybox:1 ${CRILET_UNKNOWN}"
        );
        let missing = std::panic::catch_unwind(|| env.get("CRILET_NOPE")).unwrap_err();
        let msg = missing.downcast_ref::<String>().unwrap();
        assert_eq!(*msg, format!("CRILET_NOPE missing from {}", path.display()));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(EnvFile::read(&path).is_err());
        let missing =
            std::panic::catch_unwind(|| EnvFile::load(&path, "run hack/setup.sh first")).unwrap_err();
        let msg = missing.downcast_ref::<String>().unwrap();
        assert!(msg.starts_with(&format!("{} is missing (", path.display())), "{msg}");
        assert!(msg.ends_with("): run hack/setup.sh first"), "{msg}");
    }
}
