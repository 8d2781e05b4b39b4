//! Column alignment exactly as Go's `text/tabwriter` does it, because kubectl's output shapes come
//! from it: cells are `\t`-terminated, the text after a line's last tab is not part of any column,
//! and a column's width is computed per *block* of consecutive lines that have a cell there.
//!
//! kubectl uses two settings: tables (`get`, `events`) pad by 3 with a minimum width of 6 and
//! remember widths across flushes (for `--watch`); `describe` pads by 2 with no minimum.

/// How a block of text is aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Minimum cell width, padding included.
    pub min_width: usize,
    /// Spaces added after the widest cell of a column.
    pub padding: usize,
}

/// kubectl's table printer (`printers.GetNewTabWriter`).
pub(crate) const TABLE: Layout = Layout { min_width: 6, padding: 3 };
/// kubectl's describe printer (`tabbedString`).
pub(crate) const DESCRIBE: Layout = Layout { min_width: 0, padding: 2 };

/// Aligns `text` once (one flush of a fresh Go tabwriter).
pub(crate) fn align(text: &str, layout: Layout) -> String {
    run(text, layout, None)
}

/// Aligns `text` and widens columns to at least the widths in `remembered`, which it then updates:
/// kubectl's `RememberWidths` flag, so rows printed later under `--watch` line up with earlier ones.
pub(crate) fn align_remembering(text: &str, layout: Layout, remembered: &mut Vec<usize>) -> String {
    run(text, layout, Some(remembered))
}

fn run(text: &str, layout: Layout, remembered: Option<&mut Vec<usize>>) -> String {
    let lines: Vec<Vec<&str>> = text.split('\n').map(|l| l.split('\t').collect()).collect();
    let mut f = Formatter { lines: &lines, layout, widths: Vec::new(), remembered, out: String::new() };
    f.format(0, lines.len());
    f.out
}

struct Formatter<'a> {
    lines: &'a [Vec<&'a str>],
    layout: Layout,
    /// Widths of the columns to the left of the one being formatted.
    widths: Vec<usize>,
    remembered: Option<&'a mut Vec<usize>>,
    out: String,
}

impl Formatter<'_> {
    /// A port of `(*tabwriter.Writer).format`: find each block of lines that has a cell in the
    /// next column, size that column over the block, and recurse into the columns to its right.
    fn format(&mut self, mut line0: usize, line1: usize) {
        let column = self.widths.len();
        let mut this = line0;
        while this < line1 {
            if column + 1 >= self.lines[this].len() {
                this += 1;
                continue;
            }
            self.write_lines(line0, this);
            line0 = this;
            let mut width = self.layout.min_width;
            while this < line1 && column + 1 < self.lines[this].len() {
                width = width.max(self.lines[this][column].chars().count() + self.layout.padding);
                this += 1;
            }
            if let Some(mem) = self.remembered.as_deref_mut() {
                if mem.len() <= column {
                    mem.resize(column + 1, 0);
                }
                width = width.max(mem[column]);
                mem[column] = width;
            }
            self.widths.push(width);
            self.format(line0, this);
            self.widths.pop();
            line0 = this;
        }
        self.write_lines(line0, line1);
    }

    fn write_lines(&mut self, line0: usize, line1: usize) {
        for i in line0..line1 {
            for (j, cell) in self.lines[i].iter().enumerate() {
                self.out.push_str(cell);
                if let Some(&w) = self.widths.get(j) {
                    let pad = w.saturating_sub(cell.chars().count());
                    self.out.extend(std::iter::repeat_n(' ', pad));
                }
            }
            // The text after the last '\n' is an unterminated (usually empty) line.
            if i + 1 < self.lines.len() {
                self.out.push('\n');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn align_cases() {
        let cases = [
            (
                "table: one block, last column unpadded",
                "NAME\tREADY\tSTATUS\n web\t1/1\tRunning\n",
                TABLE,
                "NAME   READY   STATUS\n web   1/1     Running\n",
            ),
            ("table: minimum width 6 includes the padding", "A\tB\n", TABLE, "A     B\n"),
            (
                "describe: a line without tabs ends the block",
                "Name:\tweb\nNamespace:\tdefault\nContainers:\n  app:\n    Image:\tbusybox\n",
                DESCRIBE,
                "Name:       web\nNamespace:  default\nContainers:\n  app:\n    Image:  busybox\n",
            ),
            (
                "describe: continuation lines with an empty first cell align",
                "Labels:\ta=b\n\tc=d\nIP:\t\n",
                DESCRIBE,
                "Labels:  a=b\n         c=d\nIP:      \n",
            ),
            (
                "nested blocks: inner column sized over its own lines only",
                "x\ty\tz\nlonger\tq\n",
                DESCRIBE,
                "x       y  z\nlonger  q\n",
            ),
            ("no trailing newline", "a\tb", DESCRIBE, "a  b"),
        ];
        for (name, input, layout, want) in cases {
            assert_eq!(align(input, layout), want, "{name}");
        }
    }

    #[test]
    fn remembered_widths_only_grow() {
        let mut mem = Vec::new();
        let first = align_remembering("LAST SEEN\tTYPE\tMSG\n2s\tNormal\thi\n", TABLE, &mut mem);
        assert_eq!(first, "LAST SEEN   TYPE     MSG\n2s          Normal   hi\n");
        let next = align_remembering("5s\tWarning\tx\n", TABLE, &mut mem);
        assert_eq!(next, "5s          Warning   x\n");
        let after = align_remembering("1m\tNormal\ty\n", TABLE, &mut mem);
        assert_eq!(after, "1m          Normal    y\n");
    }
}
