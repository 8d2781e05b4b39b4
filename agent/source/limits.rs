//! The bounds on what one manifest file may cost to read and parse, so that a hostile or broken
//! file (a 100 MB file, 100 000 nested `[`, a YAML alias bomb) is refused quickly with a clear
//! reason instead of eating CPU and memory.
//!
//! Each bound is far above what any Pod manifest needs: the API server itself refuses objects
//! over 1.5 MB (etcd's request limit), and real pods nest a dozen levels and hold a few thousand
//! values.

use std::time::Duration;

/// Largest manifest file read, in bytes. A larger file is refused without being read (at most
/// this many bytes plus one are ever read, even from a file that grows meanwhile).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Deepest nesting of mappings and lists in a document. Checked on the raw text before the YAML
/// parser runs (libyaml's scanner costs time quadratic in the flow nesting depth), and again
/// while building each document's value.
pub const MAX_DEPTH: usize = 64;

/// Most YAML tokens a file may hold; bounds the parser's event buffer before it is built.
pub const MAX_TOKENS: usize = 200_000;

/// Most values (scalars, lists, mappings) one file may expand to, YAML aliases counted each time
/// they are used: a billion-laughs file is refused after this many, not after a billion.
pub const MAX_VALUES: usize = 100_000;

/// Most bytes of strings (keys and scalars) one file may expand to, aliases counted each time.
pub const MAX_EXPANDED_BYTES: usize = 4 * 1024 * 1024;

/// Most problems reported for one file; the rest are summed up in one more line.
pub const MAX_PROBLEMS_PER_FILE: usize = 50;

/// Longest a file's parse may run before the file is refused for it. Parsing runs on its own
/// thread, so other files never wait for this; with the bounds above no real file comes close.
pub const PARSE_DEADLINE: Duration = Duration::from_secs(10);

/// How long one scan of the directory waits for parses still running before it publishes what
/// it has (a file still being parsed then counts as broken: its running pods are kept).
pub const SCAN_WAIT: Duration = Duration::from_secs(3);

/// Most parse threads running at once (threads past their deadline no longer count).
pub const MAX_PARSE_THREADS: usize = 4;

/// Longest piece of a user's value quoted back in a message.
pub(crate) const MAX_QUOTED: usize = 80;

/// Longest reason of one problem, in characters (type errors quote values; a value can be long).
pub(crate) const MAX_REASON: usize = 1000;

/// `value` quoted for a message (`{:?}`), cut to [`MAX_QUOTED`] characters with its length
/// said, so an over-long name never makes a megabyte log line.
pub(crate) fn quoted(value: &str) -> String {
    if value.chars().count() <= MAX_QUOTED {
        return format!("{value:?}");
    }
    let head: String = value.chars().take(MAX_QUOTED).collect();
    format!("{head:?}… ({} bytes)", value.len())
}

/// `text` cut to `max` characters, saying how long it was.
pub(crate) fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let head: String = text.chars().take(max).collect();
    format!("{head}… ({} bytes)", text.len())
}
