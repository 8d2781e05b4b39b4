//! The house keeps its shape: every `crate::` path under `agent/` points to a room on the same
//! layer or below, as `ARCHITECTURE.md`'s table assigns them, rooms on one layer never use each
//! other in a circle, and every top-level module is in the table. Pure: reads files only.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The table's rows: `| N | `room`, `room` | ... |` → room → layer.
fn layers(doc: &str) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(layer), Some(rooms)) = (cells.get(1), cells.get(2)) else { continue };
        let Ok(layer) = layer.parse::<u32>() else { continue };
        for room in rooms.split(',') {
            let room = room.trim().trim_matches('`');
            assert!(!room.is_empty(), "an empty room on layer {layer} in ARCHITECTURE.md");
            let before = out.insert(room.to_string(), layer);
            assert!(before.is_none(), "room {room} is on two layers in ARCHITECTURE.md");
        }
    }
    out
}

/// The crate's top-level modules, from `agent/lib.rs` (`mod x;`, `pub mod x {`, ...).
fn top_modules(lib: &str) -> BTreeSet<String> {
    lib.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let rest = l.strip_prefix("pub ").or_else(|| l.strip_prefix("pub(crate) ")).unwrap_or(l);
            let rest = rest.strip_prefix("mod ")?;
            Some(rest.trim_end_matches([';', '{', ' ']).to_string())
        })
        .collect()
}

/// Drops `//` comments (doc comments name rooms in prose, which is no dependency).
fn code_of(src: &str) -> String {
    src.lines().map(|l| l.split_once("//").map_or(l, |(code, _)| code)).collect::<Vec<_>>().join("\n")
}

/// The first segment of every `crate::` path in `code`, including each one of a group
/// (`crate::{a, b::c}`).
fn crate_refs(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let preceded_by_ident =
            rest[..i].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_');
        rest = &rest[i + "crate::".len()..];
        if preceded_by_ident {
            continue; // e.g. `mycrate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut item_start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 1 => item_start = true,
                    c if item_start && depth == 1 && (c.is_alphanumeric() || c == '_') => {
                        out.push(ident_at(&group[j..]));
                        item_start = false;
                    }
                    _ => {}
                }
                if depth == 0 {
                    break;
                }
            }
        } else {
            out.push(ident_at(rest));
        }
    }
    out
}

fn ident_at(s: &str) -> String {
    s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

/// Which top-level module a file under `agent/` belongs to: its first path segment, with a
/// sibling test file (`timeline_tests.rs`, included by `#[path]`) counted as its module's.
fn room_of(rel: &Path) -> String {
    let first = rel.components().next().expect("a path under agent/").as_os_str().to_string_lossy();
    let stem = first.trim_end_matches(".rs");
    stem.strip_suffix("_tests").unwrap_or(stem).to_string()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read agent/") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// room → rooms it uses (other than itself), with one file that does, for the message.
fn dependencies(agent: &Path, rooms: &BTreeSet<String>) -> BTreeMap<String, BTreeMap<String, PathBuf>> {
    let mut files = Vec::new();
    rust_files(agent, &mut files);
    let mut deps: BTreeMap<String, BTreeMap<String, PathBuf>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(agent).expect("under agent/").to_path_buf();
        let room = room_of(&rel);
        if !rooms.contains(&room) {
            continue; // the crate root, and the binary with its own modules (agent/app/): above every room
        }
        let src = std::fs::read_to_string(&file).expect("read source");
        for used in crate_refs(&code_of(&src)) {
            if used != room && rooms.contains(&used) {
                deps.entry(room.clone()).or_default().entry(used).or_insert_with(|| rel.clone());
            }
        }
    }
    deps
}

/// A circle among `deps`, if there is one (rooms in order, the first repeated at the end).
fn find_cycle(deps: &BTreeMap<String, BTreeMap<String, PathBuf>>) -> Option<Vec<String>> {
    fn visit(
        room: &str,
        deps: &BTreeMap<String, BTreeMap<String, PathBuf>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|r| r == room) {
            let mut cycle = path[i..].to_vec();
            cycle.push(room.to_string());
            return Some(cycle);
        }
        if done.contains(room) {
            return None;
        }
        path.push(room.to_string());
        for next in deps.get(room).into_iter().flat_map(|d| d.keys()) {
            if let Some(c) = visit(next, deps, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(room.to_string());
        None
    }
    let mut done = BTreeSet::new();
    deps.keys().find_map(|room| visit(room, deps, &mut Vec::new(), &mut done))
}

#[test]
fn imports_never_run_up_a_layer_and_never_circle() {
    let root = repo();
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("read ARCHITECTURE.md");
    let layers = layers(&doc);
    let lib = std::fs::read_to_string(root.join("agent/lib.rs")).expect("read agent/lib.rs");
    let modules = top_modules(&lib);

    let unplaced: Vec<_> = modules.iter().filter(|m| !layers.contains_key(*m)).collect();
    assert!(unplaced.is_empty(), "modules on no layer of ARCHITECTURE.md's table: {unplaced:?}");
    let stale: Vec<_> = layers.keys().filter(|r| !modules.contains(*r)).collect();
    assert!(stale.is_empty(), "ARCHITECTURE.md names rooms agent/lib.rs does not have: {stale:?}");

    let deps = dependencies(&root.join("agent"), &modules);
    let mut up = Vec::new();
    for (room, used) in &deps {
        for (to, file) in used {
            if layers[to] > layers[room] {
                up.push(format!(
                    "agent/{}: {room} (layer {}) uses {to} (layer {})",
                    file.display(),
                    layers[room],
                    layers[to]
                ));
            }
        }
    }
    assert!(up.is_empty(), "imports that run up a layer:\n{}", up.join("\n"));
    if let Some(cycle) = find_cycle(&deps) {
        panic!("rooms that use each other in a circle: {}", cycle.join(" -> "));
    }
}

/// The scanner itself: groups, nested groups, comments and look-alike paths.
#[test]
fn crate_paths_are_read_as_rustc_reads_them() {
    let cases: &[(&str, &[&str])] = &[
        ("use crate::model::PodKey;", &["model"]),
        ("use crate::{backoff, context::Shared, expand};", &["backoff", "context", "expand"]),
        ("use crate::{a::{b, c}, d};", &["a", "d"]),
        ("let x = crate::metrics::get();", &["metrics"]),
        ("use mycrate::pod::x;", &[]),
        ("// see crate::cli::logs", &[]),
        ("/// [`crate::pod`] docs", &[]),
    ];
    for (src, want) in cases {
        let got = crate_refs(&code_of(src));
        assert_eq!(got, want.iter().map(|s| s.to_string()).collect::<Vec<_>>(), "{src}");
    }
    let cycle: BTreeMap<String, BTreeMap<String, PathBuf>> = [
        ("a".to_string(), [("b".to_string(), PathBuf::new())].into()),
        ("b".to_string(), [("a".to_string(), PathBuf::new())].into()),
    ]
    .into();
    assert_eq!(find_cycle(&cycle), Some(vec!["a".into(), "b".into(), "a".into()]));
    let line: BTreeMap<String, BTreeMap<String, PathBuf>> =
        [("a".to_string(), [("b".to_string(), PathBuf::new())].into())].into();
    assert_eq!(find_cycle(&line), None);
    assert_eq!(room_of(Path::new("timeline_tests.rs")), "timeline");
    assert_eq!(room_of(Path::new("pod/worker/mod.rs")), "pod");
}
