//! The YAML half of the pre-pass: libyaml's scanner (unsafe-libyaml 0.2,
//! `yaml_parser_fetch_next_token` and the scalar scanners) reduced to what decides where tokens
//! start and end, so every `[`, `{`, `]` and `}` is counted exactly when libyaml reads it as a
//! flow indicator. Where libyaml would stop with an error this goes on (see the parent module).

use std::collections::HashSet;

use super::{Refusal, too_deep, too_many_tokens};
use crate::source::limits::{MAX_QUOTED, MAX_TOKENS, cut};

/// The simple key libyaml may be holding at flow level 0 (the only level where a key's column
/// matters: it sets the block mapping's indentation).
#[derive(Clone, Copy, Default)]
struct SimpleKey {
    possible: bool,
    index: u64,
    line: u64,
    column: i64,
}

/// libyaml's scanner state, reduced to what decides where tokens start and end.
pub(super) struct Scanner<'a> {
    s: &'a [u8],
    pos: usize,
    /// Characters read so far (libyaml's `mark.index`; a CRLF counts two).
    index: u64,
    line: u64,
    column: i64,
    flow_level: usize,
    indent: i64,
    indents: Vec<i64>,
    simple_key_allowed: bool,
    key: SimpleKey,
    tokens: usize,
    /// The bound on `flow_level`, and the deepest level seen.
    max_depth: usize,
    pub(super) deepest: usize,
    /// The document being read (numbered as serde_yaml_ng numbers them) and where it began.
    pub(super) doc: usize,
    pub(super) doc_start: usize,
    /// Whether the current document has begun (with `---` or content) or was ended by `...`.
    doc_begun: bool,
    doc_ended: bool,
    /// The anchors defined so far in the current document.
    anchors: HashSet<&'a [u8]>,
}

impl<'a> Scanner<'a> {
    pub(super) fn new(s: &'a [u8], max_depth: usize) -> Self {
        Self {
            s,
            pos: 0,
            index: 0,
            line: 0,
            column: 0,
            flow_level: 0,
            indent: -1,
            indents: Vec::new(),
            simple_key_allowed: true,
            key: SimpleKey::default(),
            tokens: 0,
            max_depth,
            deepest: 0,
            doc: 0,
            doc_start: 0,
            doc_begun: false,
            doc_ended: false,
            anchors: HashSet::new(),
        }
    }

    // ---- characters (the text is valid UTF-8 without NUL, so 0 means the end) ----

    fn at(&self, k: usize) -> u8 {
        self.s.get(self.pos + k).copied().unwrap_or(0)
    }

    fn end(&self) -> bool {
        self.pos >= self.s.len()
    }

    fn is_break_at(&self, k: usize) -> bool {
        match self.at(k) {
            b'\r' | b'\n' => true,
            0xC2 => self.at(k + 1) == 0x85,
            0xE2 => self.at(k + 1) == 0x80 && matches!(self.at(k + 2), 0xA8 | 0xA9),
            _ => false,
        }
    }

    fn is_blank_at(&self, k: usize) -> bool {
        matches!(self.at(k), b' ' | b'\t')
    }

    fn is_blankz_at(&self, k: usize) -> bool {
        self.is_blank_at(k) || self.is_break_at(k) || self.pos + k >= self.s.len()
    }

    fn is_breakz(&self) -> bool {
        self.is_break_at(0) || self.end()
    }

    fn is_alpha(&self) -> bool {
        let c = self.at(0);
        c.is_ascii_alphanumeric() || c == b'_' || c == b'-'
    }

    fn is_doc_indicator(&self) -> bool {
        self.column == 0
            && ((self.at(0) == b'-' && self.at(1) == b'-' && self.at(2) == b'-')
                || (self.at(0) == b'.' && self.at(1) == b'.' && self.at(2) == b'.'))
            && self.is_blankz_at(3)
    }

    fn skip(&mut self) {
        let width = match self.at(0) {
            0xF0.. => 4,
            0xE0.. => 3,
            0xC0.. => 2,
            _ => 1,
        };
        self.pos = (self.pos + width).min(self.s.len());
        self.index += 1;
        self.column += 1;
    }

    fn skip_line(&mut self) {
        if self.at(0) == b'\r' && self.at(1) == b'\n' {
            self.pos += 2;
            self.index += 2;
        } else if self.is_break_at(0) {
            self.skip();
        } else {
            return;
        }
        self.column = 0;
        self.line += 1;
    }

    fn here(&self) -> (u64, u64) {
        (self.line + 1, self.column as u64 + 1)
    }

    /// A token that is content: the first after `...` begins a new document.
    fn content(&mut self) {
        if self.doc_ended {
            self.doc += 1;
            self.doc_start = self.pos;
            self.doc_ended = false;
            self.anchors.clear();
        }
        self.doc_begun = true;
    }

    /// `---`: begins a new document, unless it is the first thing in the stream.
    fn document_start(&mut self) {
        if self.doc_begun || self.doc_ended {
            self.doc += 1;
        }
        self.doc_start = self.pos;
        self.doc_begun = true;
        self.doc_ended = false;
        self.anchors.clear();
    }

    // ---- libyaml's bookkeeping ----

    fn save_simple_key(&mut self) {
        if self.flow_level == 0 && self.simple_key_allowed {
            self.key = SimpleKey { possible: true, index: self.index, line: self.line, column: self.column };
        }
    }

    fn remove_simple_key(&mut self) {
        if self.flow_level == 0 {
            self.key.possible = false;
        }
    }

    fn stale_simple_keys(&mut self) {
        let k = &mut self.key;
        if k.possible && (k.line < self.line || k.index + 1024 < self.index) {
            k.possible = false;
        }
    }

    fn roll_indent(&mut self, column: i64) {
        if self.flow_level == 0 && self.indent < column {
            self.indents.push(self.indent);
            self.indent = column;
        }
    }

    fn unroll_indent(&mut self, column: i64) {
        if self.flow_level != 0 {
            return;
        }
        while self.indent > column {
            self.indent = self.indents.pop().unwrap_or(-1);
        }
    }

    // ---- the token loop (`yaml_parser_fetch_next_token`) ----

    pub(super) fn run(&mut self) -> Result<(), Refusal> {
        loop {
            self.scan_to_next_token();
            self.stale_simple_keys();
            self.unroll_indent(self.column);
            if self.end() {
                return Ok(());
            }
            self.tokens += 1;
            if self.tokens > MAX_TOKENS && self.max_depth != usize::MAX {
                let (line, column) = self.here();
                return Err(too_many_tokens(line, column, self.doc, self.doc_start));
            }
            let c = self.at(0);
            let flow = self.flow_level > 0;
            if self.column == 0 && c == b'%' {
                // A directive: libyaml reads it to the end of the line or stops with an error.
                self.remove_simple_key();
                self.simple_key_allowed = false;
                while !self.is_breakz() {
                    self.skip();
                }
                continue;
            }
            if self.is_doc_indicator() {
                if c == b'-' {
                    self.document_start();
                } else {
                    self.doc_ended = true;
                    self.doc_begun = false;
                }
                self.unroll_indent(-1);
                self.remove_simple_key();
                self.simple_key_allowed = false;
                (0..3).for_each(|_| self.skip());
                continue;
            }
            self.content();
            match c {
                b'[' | b'{' => {
                    self.save_simple_key();
                    self.flow_level += 1;
                    self.deepest = self.deepest.max(self.flow_level);
                    if self.flow_level > self.max_depth {
                        let (line, column) = self.here();
                        return Err(too_deep(line, column, self.doc, self.doc_start));
                    }
                    self.simple_key_allowed = true;
                    self.skip();
                }
                b']' | b'}' => {
                    self.remove_simple_key();
                    self.flow_level = self.flow_level.saturating_sub(1);
                    self.simple_key_allowed = false;
                    self.skip();
                }
                b',' => {
                    self.remove_simple_key();
                    self.simple_key_allowed = true;
                    self.skip();
                }
                b'-' if self.is_blankz_at(1) => {
                    self.roll_indent(self.column);
                    self.remove_simple_key();
                    self.simple_key_allowed = true;
                    self.skip();
                }
                b'?' if flow || self.is_blankz_at(1) => {
                    self.roll_indent(self.column);
                    self.remove_simple_key();
                    self.simple_key_allowed = !flow;
                    self.skip();
                }
                b':' if flow || self.is_blankz_at(1) => {
                    if !flow && self.key.possible {
                        self.roll_indent(self.key.column);
                        self.key.possible = false;
                        self.simple_key_allowed = false;
                    } else {
                        self.roll_indent(self.column);
                        self.simple_key_allowed = !flow;
                    }
                    self.skip();
                }
                b'*' | b'&' => {
                    self.save_simple_key();
                    self.simple_key_allowed = false;
                    let (line, column) = self.here();
                    self.skip();
                    let start = self.pos;
                    while self.is_alpha() {
                        self.skip();
                    }
                    let name = &self.s[start..self.pos];
                    if c == b'&' {
                        self.anchors.insert(name);
                    } else if !name.is_empty() && !self.anchors.contains(name) {
                        let name = String::from_utf8_lossy(name);
                        let name = cut(&name, MAX_QUOTED);
                        let reason =
                            format!("alias *{name} names no anchor defined before it in this document");
                        return Err(Refusal {
                            line,
                            column,
                            reason,
                            doc: self.doc,
                            doc_start: self.doc_start,
                        });
                    }
                }
                b'!' => {
                    self.save_simple_key();
                    self.simple_key_allowed = false;
                    self.tag();
                }
                b'|' | b'>' if !flow => {
                    self.remove_simple_key();
                    self.simple_key_allowed = true;
                    self.block_scalar();
                }
                b'\'' | b'"' => {
                    self.save_simple_key();
                    self.simple_key_allowed = false;
                    self.quoted(c == b'\'');
                }
                _ if self.plain_start(c) => {
                    self.save_simple_key();
                    self.simple_key_allowed = false;
                    self.plain();
                }
                // libyaml stops here ("found character that cannot start any token").
                _ => self.skip(),
            }
        }
    }

    fn scan_to_next_token(&mut self) {
        loop {
            if self.column == 0 && self.s[self.pos..].starts_with("\u{feff}".as_bytes()) {
                self.skip();
            }
            while self.at(0) == b' '
                || ((self.flow_level > 0 || !self.simple_key_allowed) && self.at(0) == b'\t')
            {
                self.skip();
            }
            if self.at(0) == b'#' {
                while !self.is_breakz() {
                    self.skip();
                }
            }
            if !self.is_break_at(0) {
                return;
            }
            self.skip_line();
            if self.flow_level == 0 {
                self.simple_key_allowed = true;
            }
        }
    }

    fn plain_start(&self, c: u8) -> bool {
        let indicator = self.is_blankz_at(0) || b"-?:,[]{}#&*!|>'\"%@`".contains(&c);
        !indicator
            || (c == b'-' && !self.is_blank_at(1))
            || (self.flow_level == 0 && matches!(c, b'?' | b':') && !self.is_blankz_at(1))
    }

    fn tag(&mut self) {
        let verbatim = self.at(1) == b'<';
        self.skip();
        if verbatim {
            self.skip();
        }
        loop {
            let c = self.at(0);
            let uri = self.is_alpha()
                || b";/?:@&=+$.%!~*'()".contains(&c)
                || (verbatim && matches!(c, b',' | b'[' | b']'));
            if !uri {
                break;
            }
            self.skip();
        }
        if verbatim && self.at(0) == b'>' {
            self.skip();
        }
    }

    /// `yaml_parser_scan_flow_scalar`: to the closing quote (`''` and `\` escapes).
    fn quoted(&mut self, single: bool) {
        let quote = if single { b'\'' } else { b'"' };
        self.skip();
        loop {
            if self.is_doc_indicator() || self.end() {
                return; // libyaml stops with an error
            }
            while !self.is_blankz_at(0) {
                let c = self.at(0);
                if single && c == b'\'' && self.at(1) == b'\'' {
                    self.skip();
                    self.skip();
                } else if c == quote {
                    break;
                } else if !single && c == b'\\' && self.is_break_at(1) {
                    self.skip();
                    self.skip_line();
                    break;
                } else if !single && c == b'\\' {
                    self.skip();
                    if !self.end() {
                        self.skip();
                    }
                } else {
                    self.skip();
                }
            }
            if self.at(0) == quote {
                self.skip();
                return;
            }
            while self.is_blank_at(0) || self.is_break_at(0) {
                if self.is_blank_at(0) { self.skip() } else { self.skip_line() }
            }
        }
    }

    /// `yaml_parser_scan_block_scalar`: the header, then every line indented at least as much as
    /// the first (or the explicit indentation indicator).
    fn block_scalar(&mut self) {
        self.skip();
        let mut increment = 0i64;
        let digit = |c: u8| c.is_ascii_digit() && c != b'0';
        if matches!(self.at(0), b'+' | b'-') {
            self.skip();
            if digit(self.at(0)) {
                increment = i64::from(self.at(0) - b'0');
                self.skip();
            }
        } else if digit(self.at(0)) {
            increment = i64::from(self.at(0) - b'0');
            self.skip();
            if matches!(self.at(0), b'+' | b'-') {
                self.skip();
            }
        }
        while self.is_blank_at(0) {
            self.skip();
        }
        if self.at(0) == b'#' {
            while !self.is_breakz() {
                self.skip();
            }
        }
        if !self.is_breakz() {
            return; // libyaml stops with an error
        }
        self.skip_line();
        let mut indent = match increment {
            0 => 0,
            n if self.indent >= 0 => self.indent + n,
            n => n,
        };
        if !self.block_breaks(&mut indent) {
            return;
        }
        while self.column == indent && !self.end() {
            while !self.is_breakz() {
                self.skip();
            }
            if self.end() {
                return;
            }
            self.skip_line();
            if !self.block_breaks(&mut indent) {
                return;
            }
        }
    }

    /// `yaml_parser_scan_block_scalar_breaks`: empty lines and indentation; picks the
    /// indentation when it is not given. False where libyaml stops with an error.
    fn block_breaks(&mut self, indent: &mut i64) -> bool {
        let mut max_indent = 0;
        loop {
            while (*indent == 0 || self.column < *indent) && self.at(0) == b' ' {
                self.skip();
            }
            max_indent = max_indent.max(self.column);
            if (*indent == 0 || self.column < *indent) && self.at(0) == b'\t' {
                return false;
            }
            if !self.is_break_at(0) {
                break;
            }
            self.skip_line();
        }
        if *indent == 0 {
            *indent = max_indent.max(self.indent + 1).max(1);
        }
        true
    }

    /// `yaml_parser_scan_plain_scalar`: in flow context it ends at `,[]{}`, in block context at
    /// a line indented no deeper than the enclosing collection; `: ` and ` #` end it in both.
    fn plain(&mut self) {
        let indent = self.indent + 1;
        let flow = self.flow_level > 0;
        let mut leading_blanks = false;
        loop {
            if self.is_doc_indicator() || self.at(0) == b'#' {
                break;
            }
            while !self.is_blankz_at(0) {
                let c = self.at(0);
                if flow && c == b':' && b",?[]{}".contains(&self.at(1)) {
                    return; // libyaml stops with an error ("found unexpected ':'")
                }
                if (c == b':' && self.is_blankz_at(1)) || (flow && b",[]{}".contains(&c)) {
                    break;
                }
                leading_blanks = false;
                self.skip();
            }
            if !(self.is_blank_at(0) || self.is_break_at(0)) {
                break;
            }
            while self.is_blank_at(0) || self.is_break_at(0) {
                if self.is_blank_at(0) {
                    if leading_blanks && self.column < indent && self.at(0) == b'\t' {
                        return; // libyaml stops with an error
                    }
                    self.skip();
                } else {
                    self.skip_line();
                    leading_blanks = true;
                }
            }
            if !flow && self.column < indent {
                break;
            }
        }
        if leading_blanks {
            self.simple_key_allowed = true;
        }
    }
}
