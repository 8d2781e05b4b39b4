//! Fuzz target `manifest`: one file's text through the agent's own parse and validation
//! (`crilet::source::parse_manifest`), as YAML and as JSON. Besides crashes and hangs
//! (libFuzzer's -timeout), it checks what every caller relies on: each problem names the file,
//! a file reports a bounded number of problems of bounded length, and every pod it accepts has
//! a name and a UID.

#![no_main]

use std::path::Path;

use crilet::source::limits::MAX_PROBLEMS_PER_FILE;
use crilet::source::parse_manifest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The reader hands the parser UTF-8 text only (anything else is refused before).
    let Ok(text) = std::str::from_utf8(data) else { return };
    for file in ["fuzz.yaml", "fuzz.json"] {
        let path = Path::new(file);
        let (pods, problems) = parse_manifest(path, text, "node");
        assert!(problems.len() <= MAX_PROBLEMS_PER_FILE + 1, "{} problems", problems.len());
        for p in &problems {
            assert_eq!(p.file, path, "{p}");
            assert!(p.reason.len() < 8 * 1024, "a {} byte reason", p.reason.len());
            assert!(p.field.as_ref().is_none_or(|f| f.len() < 8 * 1024), "a long field path");
        }
        for pod in &pods {
            assert!(!pod.key.name.is_empty() && !pod.uid.is_empty(), "{pod:?}");
        }
    }
});
