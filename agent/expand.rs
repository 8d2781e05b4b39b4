//! Kubernetes `$(VAR)` expansion (the kubelet's `third_party/forked/golang/expansion`):
//! `$(NAME)` is replaced when NAME is defined, `$$` is an escaped `$`, anything else
//! (unknown names, unclosed references) stays as written.

/// Expands `$(NAME)` references in `input` using `lookup`.
pub fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut i = 0;
    let mut last = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            out.push_str(&input[last..i]);
            match bytes[i + 1] {
                b'$' => {
                    out.push('$');
                    i += 2;
                }
                b'(' => match input[i + 2..].find(')') {
                    Some(end) => {
                        let name = &input[i + 2..i + 2 + end];
                        match lookup(name) {
                            Some(v) => out.push_str(&v),
                            None => out.push_str(&input[i..i + 3 + end]),
                        }
                        i += 3 + end;
                    }
                    None => {
                        out.push_str(&input[i..]);
                        i = bytes.len();
                    }
                },
                _ => {
                    out.push('$');
                    i += 1;
                }
            }
            last = i;
        } else {
            i += 1;
        }
    }
    out.push_str(&input[last.min(input.len())..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases() {
        let lookup = |n: &str| match n {
            "A" => Some("1".to_string()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };
        let cases = [
            ("plain", "plain"),
            ("$(A)", "1"),
            ("x$(A)y$(A)", "x1y1"),
            ("$(B)", "$(B)"),
            ("$$(A)", "$(A)"),
            ("$$", "$"),
            ("$(A", "$(A"),
            ("a$b", "a$b"),
            ("$(EMPTY)z", "z"),
            ("end$", "end$"),
        ];
        for (input, want) in cases {
            assert_eq!(expand(input, &lookup), want, "{input}");
        }
    }
}
