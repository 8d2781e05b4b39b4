//! `hack/install.sh` staged into a temporary DESTDIR: the binary, the unit and the commented
//! default config land with the right modes; a second run keeps a config the user changed; the
//! installed config is one `crilet run --config` accepts, and it names every `crilet run` setting
//! (so a new flag cannot be forgotten in it). Needs no containerd.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_crilet");

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs hack/install.sh into `dest`; panics with its output on failure.
fn install(dest: &Path) -> String {
    let out = Command::new(repo().join("hack/install.sh"))
        .env("DESTDIR", dest)
        .env("CRILET_BIN", BIN)
        .output()
        .expect("run hack/install.sh");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "hack/install.sh failed:\n{text}");
    text
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap_or_else(|e| panic!("{} not installed: {e}", p.display())).permissions().mode()
        & 0o7777
}

/// `crilet preflight --config FILE`'s verdict on the file: its `config` line.
fn config_verdict(file: &Path) -> String {
    let out = Command::new(BIN)
        .args(["preflight", "--config"])
        .arg(file)
        // Paths of its own, so no check looks at (or near) this machine's real agent.
        .arg("--control-socket")
        .arg(file.with_extension("sock"))
        .output()
        .expect("run crilet preflight");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.lines()
        .find(|l| l.split_whitespace().nth(1) == Some("config"))
        .unwrap_or_else(|| panic!("no config line from preflight:\n{text}"))
        .to_string()
}

/// The settings the default config lists (`#name: value` lines).
fn listed_settings(config: &str) -> BTreeSet<String> {
    config
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .filter_map(|l| l.split_once(": "))
        .map(|(k, _)| k)
        .filter(|k| !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        .map(str::to_string)
        .collect()
}

#[test]
fn install_stages_binary_unit_and_a_config_it_never_overwrites() {
    let dest = tempfile::tempdir().expect("temp dir");
    let root = dest.path();
    install(root);

    let bin = root.join("usr/local/bin/crilet");
    let unit = root.join("etc/systemd/system/crilet.service");
    let config = root.join("etc/crilet/config.yaml");
    let manifests = root.join("etc/crilet/manifests");
    let kubeadm = root.join("usr/local/share/crilet/kubeadm.conf");
    for (path, want) in
        [(&bin, 0o755), (&unit, 0o644), (&config, 0o644), (&manifests, 0o755), (&kubeadm, 0o644)]
    {
        assert_eq!(mode(path), want, "mode of {}", path.display());
    }
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    assert_eq!(read(&unit), read(&repo().join("systemd/crilet.service")));
    // The kubeadm drop-in runs the installed binary with the files kubeadm writes.
    assert!(
        read(&kubeadm).lines().any(|l| l
            == "ExecStart=/usr/local/bin/crilet run $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS"),
        "the kubeadm drop-in's ExecStart:\n{}",
        read(&kubeadm)
    );
    let default_config = read(&repo().join("systemd/config.yaml"));
    assert_eq!(read(&config), default_config);
    assert!(
        read(&unit)
            .lines()
            .any(|l| l == "ExecStart=/usr/local/bin/crilet run --config /etc/crilet/config.yaml"),
        "the unit must run with the installed config"
    );

    // As installed (everything commented out) the file is accepted: all defaults.
    let verdict = config_verdict(&config);
    assert!(verdict.starts_with("PASS"), "{verdict}");

    // A user's edit survives the next install.
    let edited = format!("{default_config}root-dir: /srv/crilet\n");
    std::fs::write(&config, &edited).expect("edit config");
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).expect("chmod config");
    let out = install(root);
    assert_eq!(read(&config), edited, "install.sh overwrote a user's config:\n{out}");
    assert_eq!(mode(&config), 0o600, "install.sh changed a user's config mode");
}

#[test]
fn default_config_lists_every_run_setting_with_a_valid_default() {
    let text = std::fs::read_to_string(repo().join("systemd/config.yaml")).expect("systemd/config.yaml");
    let listed = listed_settings(&text);

    let help = Command::new(BIN).args(["run", "--help"]).output().expect("crilet run --help");
    let help = String::from_utf8_lossy(&help.stdout);
    let flags: BTreeSet<String> = help
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("--"))
        .map(|w| w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric()))
        .filter(|w| !w.is_empty() && !["config", "help"].contains(w))
        .map(str::to_string)
        .collect();
    assert!(flags.len() >= 10, "could not read the flags from `crilet run --help`:\n{help}");
    assert_eq!(listed, flags, "systemd/config.yaml must list exactly the settings of `crilet run`");

    // Uncommented, every default shown is a value `crilet run` accepts.
    let dir = tempfile::tempdir().expect("temp dir");
    let uncommented: String = text
        .lines()
        .map(|l| match l.strip_prefix('#') {
            Some(rest) if rest.split_once(": ").is_some_and(|(k, _)| listed.contains(k)) => rest,
            _ => l,
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let all = dir.path().join("all.yaml");
    std::fs::write(&all, &uncommented).expect("write config");
    let verdict = config_verdict(&all);
    assert!(verdict.starts_with("PASS"), "{verdict}\n{uncommented}");

    // And the check can fail: a misspelt setting is refused, naming it.
    let typo = dir.path().join("typo.yaml");
    std::fs::write(&typo, "root-dri: /srv/crilet\n").expect("write config");
    let verdict = config_verdict(&typo);
    assert!(verdict.starts_with("FAIL") && verdict.contains("root-dri"), "{verdict}");
}
