//! A linear pre-pass over a manifest's text, run before the YAML or JSON parser sees it: refuses
//! control characters, flow nesting deeper than [`MAX_DEPTH`] and more than [`MAX_TOKENS`]
//! tokens, each with the line and column where the bound was crossed.
//!
//! Why a pre-pass: libyaml's scanner keeps one "possible simple key" per open flow collection and
//! walks all of them for every token, so `x: [[[[…]]]]` costs time quadratic in the depth (100 000
//! levels in 200 KB took 15 s of CPU) before any depth limit of the deserializer can act.
//!
//! It also refuses an alias to an anchor not defined before it in the same document: serde_yaml_ng
//! (0.10) reports the first such alias but then reads the rest of the stream as further documents
//! that start in the middle of a mapping, and panics on them.
//!
//! For YAML the pass mirrors libyaml's scanner (unsafe-libyaml 0.2, `yaml_parser_fetch_next_token`
//! and the scalar scanners) closely enough to know, for every `[`, `{`, `]` and `}`, whether
//! libyaml reads it as a flow indicator or as part of a scalar or comment: block indentation,
//! simple keys, plain, quoted and block scalars, anchors, tags and directives. Where libyaml
//! would stop with an error the pass just goes on: whatever it finds after that point can only
//! refuse a file that is invalid anyway, never let a deep one through.

use super::limits::{MAX_DEPTH, MAX_TOKENS};

mod yaml;

use yaml::Scanner;

/// Why a text is refused, and where (1-based line and column, in characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refusal {
    pub line: u64,
    pub column: u64,
    pub reason: String,
    /// The document (0-based, as the parser numbers them) where the bound was crossed ...
    pub doc: usize,
    /// ... and the byte offset where that document begins: what comes before can be parsed.
    pub doc_start: usize,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at line {} column {}", self.reason, self.line, self.column)
    }
}

/// Checks YAML text against the bounds.
pub(super) fn check_yaml(text: &str) -> Result<(), Refusal> {
    let bad = first_disallowed(text, yaml_allows);
    let end = bad.map_or(text.len(), |(at, _)| at);
    let mut s = Scanner::new(&text.as_bytes()[..end], MAX_DEPTH);
    s.run()?;
    match bad {
        None => Ok(()),
        Some((at, c)) => Err(control_character(text, at, c, s.doc, s.doc_start)),
    }
}

/// The deepest flow nesting libyaml would reach in `text` (no bound applied; for tests that
/// compare the scanner with libyaml).
#[cfg(test)]
pub(super) fn flow_depth(text: &str) -> usize {
    let end = first_disallowed(text, yaml_allows).map_or(text.len(), |(at, _)| at);
    let mut s = Scanner::new(&text.as_bytes()[..end], usize::MAX);
    let _ = s.run();
    s.deepest
}

/// Checks JSON text against the bounds. JSON is easy: brackets count unless inside a string.
pub(super) fn check_json(text: &str) -> Result<(), Refusal> {
    let json_allows = |c: char| c >= ' ' || matches!(c, '\t' | '\n' | '\r');
    let (mut line, mut column, mut depth, mut tokens) = (1u64, 1u64, 0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    // Top-level values are the documents: `between` is true outside any of them.
    let (mut doc, mut doc_start, mut between, mut started) = (0usize, 0usize, true, false);
    for (at, c) in text.char_indices() {
        if !json_allows(c) {
            return Err(control_character(text, at, c, doc, doc_start));
        }
        if depth == 0 && !in_string {
            let structural = c.is_whitespace() || matches!(c, ']' | '}' | ',' | ':');
            if structural {
                between = true;
            } else if between {
                if started {
                    doc += 1;
                }
                (started, between, doc_start) = (true, false, at);
            }
        }
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => {
                    in_string = false;
                    between |= depth == 0;
                }
                _ => {}
            }
        } else {
            match c {
                '"' => {
                    in_string = true;
                    tokens += 1;
                }
                '[' | '{' => {
                    depth += 1;
                    tokens += 1;
                    if depth > MAX_DEPTH {
                        return Err(too_deep(line, column, doc, doc_start));
                    }
                }
                ']' | '}' => {
                    depth = depth.saturating_sub(1);
                    between |= depth == 0;
                }
                ',' | ':' => tokens += 1,
                _ => {}
            }
            if tokens > MAX_TOKENS {
                return Err(too_many_tokens(line, column, doc, doc_start));
            }
        }
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    Ok(())
}

fn too_deep(line: u64, column: u64, doc: usize, doc_start: usize) -> Refusal {
    let reason = format!("nested more than {MAX_DEPTH} levels deep");
    Refusal { line, column, reason, doc, doc_start }
}

fn too_many_tokens(line: u64, column: u64, doc: usize, doc_start: usize) -> Refusal {
    let reason = format!("more than {MAX_TOKENS} tokens (values, keys and punctuation); not a Pod manifest");
    Refusal { line, column, reason, doc, doc_start }
}

/// The characters libyaml's reader accepts (anything else stops it with an error).
fn yaml_allows(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | ' '..='~' | '\u{85}' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}')
        || c >= '\u{10000}'
}

fn first_disallowed(text: &str, allowed: impl Fn(char) -> bool) -> Option<(usize, char)> {
    text.char_indices().find(|(_, c)| !allowed(*c))
}

fn control_character(text: &str, at: usize, c: char, doc: usize, doc_start: usize) -> Refusal {
    let before = &text[..at];
    let line = before.matches('\n').count() as u64 + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) as u64 + 1;
    let what = if c == '\0' { "a NUL byte".to_string() } else { format!("U+{:04X}", c as u32) };
    let reason = format!("control characters are not allowed: found {what}");
    Refusal { line, column, reason, doc, doc_start }
}
