//! (placeholder until the source module lands)
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::model::{DesiredPod, PodKey};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ManifestSet {
    pub pods: BTreeMap<PodKey, DesiredPod>,
    pub problems: Vec<String>,
}

pub fn load_dir(_dir: &Path, _node_name: &str, _previous: &ManifestSet) -> ManifestSet {
    ManifestSet::default()
}

pub fn watch_dir(
    _dir: PathBuf,
    _node: String,
    _resync: Duration,
    _cancel: CancellationToken,
) -> tokio::sync::watch::Receiver<ManifestSet> {
    tokio::sync::watch::channel(ManifestSet::default()).1
}
