//! `watch_dir` on a real directory: inotify picks up an added and a removed file, resync finds a
//! directory created later, cancellation ends the watch. Waits are deadlines on `changed()`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::NODE;
use crate::source::{ManifestSet, watch_dir};
use crate::sysctl::Allowlist;

const DEADLINE: Duration = Duration::from_secs(10);
/// Long enough that only inotify can explain a prompt update.
const NO_RESYNC: Duration = Duration::from_secs(3600);

fn write_pod(dir: &Path, file: &str, name: &str) {
    let text = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: app\n    image: busybox:1\n"
    );
    let path = dir.join(file);
    fs::write(&path, text).expect("write");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
}

async fn wait_for(
    rx: &mut watch::Receiver<ManifestSet>,
    what: &str,
    done: impl Fn(&ManifestSet) -> bool,
) -> ManifestSet {
    let waited = tokio::time::timeout(DEADLINE, async {
        loop {
            {
                let set = rx.borrow_and_update();
                if done(&set) {
                    return set.clone();
                }
            }
            rx.changed().await.expect("the watcher is still running");
        }
    })
    .await;
    waited.unwrap_or_else(|_| panic!("timed out waiting for: {what}; last set: {:#?}", *rx.borrow()))
}

fn names(set: &ManifestSet) -> Vec<String> {
    set.pods.keys().map(|k| k.name.clone()).collect()
}

#[tokio::test]
async fn watch_picks_up_added_and_removed_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_pod(dir.path(), "first.yaml", "first");
    let cancel = CancellationToken::new();
    let (mut rx, watch) = watch_dir(
        dir.path().to_path_buf(),
        NODE.to_string(),
        Allowlist::default(),
        NO_RESYNC,
        cancel.clone(),
    )
    .await
    .expect("not cancelled");
    tokio::spawn(watch);
    assert_eq!(names(&rx.borrow_and_update()), ["first"], "the first scan is done before watch_dir returns");

    write_pod(dir.path(), "second.yaml", "second");
    wait_for(&mut rx, "second pod added", |s| names(s) == ["first", "second"]).await;

    fs::remove_file(dir.path().join("first.yaml")).expect("rm");
    wait_for(&mut rx, "first pod removed", |s| names(s) == ["second"]).await;

    // Editor leftovers do not publish anything new.
    fs::write(dir.path().join(".second.yaml.swp"), "x").expect("write swap");
    fs::rename(dir.path().join("second.yaml"), dir.path().join("renamed.yml")).expect("mv");
    let set = wait_for(&mut rx, "rename seen", |s| {
        s.pods.values().any(|p| p.source.manifest().is_some_and(|f| f.ends_with("renamed.yml")))
    })
    .await;
    assert_eq!(names(&set), ["second"]);
    cancel.cancel();
}

#[tokio::test]
async fn watch_finds_a_directory_created_later_and_stops_on_cancel() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = parent.path().join("manifests");
    let cancel = CancellationToken::new();
    let (mut rx, watch) = watch_dir(
        dir.clone(),
        NODE.to_string(),
        Allowlist::default(),
        Duration::from_millis(100),
        cancel.clone(),
    )
    .await
    .expect("not cancelled");
    tokio::spawn(watch);
    assert!(rx.borrow_and_update().pods.is_empty());

    fs::create_dir(&dir).expect("mkdir");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod");
    write_pod(&dir, "late.yaml", "late");
    wait_for(&mut rx, "pod from the late directory", |s| names(s) == ["late"]).await;

    // Once watched, a change shows up too.
    write_pod(&dir, "more.yaml", "more");
    wait_for(&mut rx, "second pod", |s| names(s) == ["late", "more"]).await;

    cancel.cancel();
    let closed = tokio::time::timeout(DEADLINE, async { while rx.changed().await.is_ok() {} }).await;
    assert!(closed.is_ok(), "the channel closes after cancel");
}

#[test]
fn only_events_of_a_whole_file_skip_the_settle_wait() {
    use crate::source::watch::{Change, matters};
    use notify::event::{
        AccessKind, AccessMode, CreateKind, DataChange, MetadataKind, ModifyKind, RemoveKind, RenameMode,
    };
    use notify::{Event, EventKind};
    let dir = Path::new("/etc/crilet/manifests");
    let cases: &[(EventKind, &str, Option<Change>)] = &[
        (EventKind::Create(CreateKind::File), "web.yaml", Some(Change::InProgress)),
        (EventKind::Modify(ModifyKind::Data(DataChange::Any)), "web.yaml", Some(Change::InProgress)),
        (EventKind::Access(AccessKind::Close(AccessMode::Write)), "web.yaml", Some(Change::Complete)),
        (EventKind::Modify(ModifyKind::Name(RenameMode::To)), "web.yaml", Some(Change::Complete)),
        (EventKind::Modify(ModifyKind::Name(RenameMode::From)), "web.yaml", Some(Change::Complete)),
        (EventKind::Remove(RemoveKind::File), "web.yaml", Some(Change::Complete)),
        (
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::Permissions)),
            "web.yaml",
            Some(Change::Complete),
        ),
        // Our own reads, and files that are not manifests, change nothing.
        (EventKind::Access(AccessKind::Close(AccessMode::Read)), "web.yaml", None),
        (EventKind::Access(AccessKind::Open(AccessMode::Any)), "web.yaml", None),
        (EventKind::Access(AccessKind::Close(AccessMode::Write)), ".web.yaml.swp", None),
        (EventKind::Modify(ModifyKind::Data(DataChange::Any)), "notes.txt", None),
    ];
    for (kind, file, want) in cases {
        let event = Ok(Event::new(*kind).add_path(dir.join(file)));
        assert_eq!(matters(dir, &event), *want, "{kind:?} on {file}");
    }
    let overflow: notify::Result<Event> = Err(notify::Error::generic("queue overflow"));
    assert_eq!(matters(dir, &overflow), Some(Change::Complete), "an error rescans at once");
}
