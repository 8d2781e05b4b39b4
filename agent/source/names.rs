//! The name syntaxes the API server enforces (apimachinery `validation` package): DNS-1123
//! labels and subdomains, IANA service names, qualified names and label values, environment
//! variable names, sysctl names and HTTP header names. Each check returns the reason it failed
//! (quoting the value, cut to a readable length).

use super::limits::quoted;

/// Why a value is not a DNS-1123 label, or `None` if it is one.
pub(super) fn dns1123_label(s: &str) -> Option<String> {
    if s.is_empty() {
        return Some("must not be empty".into());
    }
    if s.len() > 63 || !label_chars(s) {
        return Some(format!(
            "{} must be a DNS-1123 label: at most 63 lowercase letters, digits or '-', \
             starting and ending with a letter or digit",
            quoted(s)
        ));
    }
    None
}

/// Why a value is not a DNS-1123 subdomain, or `None` if it is one.
pub(super) fn dns1123_subdomain(s: &str) -> Option<String> {
    if s.is_empty() {
        return Some("must not be empty".into());
    }
    if s.len() > 253 || !s.split('.').all(label_chars) {
        return Some(format!(
            "{} must be a DNS-1123 subdomain: at most 253 lowercase letters, digits, '-' or '.', \
             each '.'-separated part starting and ending with a letter or digit",
            quoted(s)
        ));
    }
    None
}

fn label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => alnum(first) && alnum(last) && b.iter().all(|c| alnum(c) || *c == b'-'),
        _ => false,
    }
}

/// Why a value is not an IANA service name (a port name), or `None` if it is one.
pub(super) fn iana_svc_name(s: &str) -> Option<String> {
    let ok = !s.is_empty()
        && s.len() <= 15
        && s.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && s.bytes().any(|c| c.is_ascii_lowercase())
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--");
    (!ok).then(|| {
        format!(
            "{} must be an IANA service name: at most 15 lowercase letters, digits or '-', \
             with at least one letter and no leading, trailing or doubled '-'",
            quoted(s)
        )
    })
}

/// Why a value is not a qualified name (`[prefix/]name`, as label and annotation keys), or
/// `None` if it is one.
pub(super) fn qualified_name(s: &str) -> Option<String> {
    let (prefix, name) = match s.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, s),
    };
    if let Some(prefix) = prefix {
        if let Some(why) = dns1123_subdomain(prefix) {
            return Some(format!("prefix {why}"));
        }
    }
    if name.is_empty() || name.len() > 63 || !name_chars(name) {
        return Some(format!(
            "{} must be a qualified name: an optional DNS subdomain prefix and '/', then at most \
             63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
            quoted(s)
        ));
    }
    None
}

/// Why a value is not a valid label value (empty is valid), or `None`.
pub(super) fn label_value(s: &str) -> Option<String> {
    if s.is_empty() {
        return None;
    }
    (s.len() > 63 || !name_chars(s)).then(|| {
        format!(
            "{} must be a label value: at most 63 letters, digits, '-', '_' or '.', starting \
             and ending with a letter or digit",
            quoted(s)
        )
    })
}

fn name_chars(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// Why a value is not an environment variable name, or `None`. This is the relaxed rule the API
/// server applies since `RelaxedEnvironmentVariableValidation` (beta and on in 1.32, GA in 1.34):
/// any printable ASCII character except '='.
pub(super) fn env_var_name(s: &str) -> Option<String> {
    if s.is_empty() {
        return Some("required".into());
    }
    (!s.bytes().all(|c| (b' '..=b'~').contains(&c) && c != b'=')).then(|| {
        format!(
            "{} is not a valid environment variable name: use printable ASCII characters other than '='",
            quoted(s)
        )
    })
}

/// Why a value is not a sysctl name, or `None`.
pub(super) fn sysctl_name(s: &str) -> Option<String> {
    let segment_ok = |seg: &str| {
        let b = seg.as_bytes();
        let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        match (b.first(), b.last()) {
            (Some(f), Some(l)) => {
                alnum(f) && alnum(l) && b.iter().all(|c| alnum(c) || *c == b'-' || *c == b'_')
            }
            _ => false,
        }
    };
    let ok = !s.is_empty() && s.len() <= 253 && s.split(['.', '/']).all(segment_ok);
    (!ok).then(|| format!("{} is not a valid sysctl name (like net.ipv4.ip_forward)", quoted(s)))
}

/// Why a value is not an HTTP header field name (an RFC 7230 token), or `None`.
pub(super) fn http_header_name(s: &str) -> Option<String> {
    let token = |c: u8| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c);
    let ok = !s.is_empty() && s.bytes().all(token);
    (!ok).then(|| format!("{} is not a valid HTTP header name", quoted(s)))
}
