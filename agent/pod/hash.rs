//! The container hash (`io.kubernetes.container.hash`), versioned so that a crilet upgrade
//! never restarts a container by itself.
//!
//! Scheme 1 is the upstream kubelet's 1.31+ hash (R2.1): FNV-1a 32 over the spew dump of the
//! JSON `{"image":…,"name":…}`. A container created by crilet also carries
//! `crilet.io/container-hash-scheme`; comparison always uses the scheme the running container
//! was created with, so a future scheme only applies to containers created after it.

use k8s_openapi::api::core::v1::Container;

/// Annotation naming the hash scheme a container's hash was computed with.
pub const HASH_SCHEME_ANNOTATION: &str = "crilet.io/container-hash-scheme";
/// The scheme new containers get.
pub const CURRENT_SCHEME: &str = "1";

/// The hash of `container` under the current scheme.
pub fn container_hash(container: &Container) -> String {
    hash_v1(&container.name, container.image.as_deref().unwrap_or(""))
}

/// The hash of `container` under `scheme` (as recorded on a running container); `None` when
/// this crilet does not know the scheme (then the container is left alone, never restarted).
pub fn container_hash_with(scheme: Option<&str>, container: &Container) -> Option<String> {
    match scheme.unwrap_or(CURRENT_SCHEME) {
        "1" => Some(container_hash(container)),
        _ => None,
    }
}

/// Upstream 1.31+: spew-dumped JSON bytes of the name+image map, FNV-1a 32, hex, no padding.
fn hash_v1(name: &str, image: &str) -> String {
    // Go's encoding/json sorts map keys ("image" < "name") and escapes <, >, & and U+2028/9.
    let json = format!("{{\"image\":{},\"name\":{}}}", go_json_string(image), go_json_string(name));
    let mut dump = String::with_capacity(json.len() * 4 + 12);
    dump.push_str("([]uint8)[");
    for (i, b) in json.bytes().enumerate() {
        if i > 0 {
            dump.push(' ');
        }
        dump.push_str(&b.to_string());
    }
    dump.push(']');
    format!("{:x}", fnv1a32(dump.as_bytes()))
}

/// FNV-1a 32 (also Kruise's metadata env hash, `metadata_env`).
pub(crate) fn fnv1a32(data: &[u8]) -> u32 {
    data.iter().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(*b)).wrapping_mul(0x0100_0193))
}

/// A JSON string literal as Go's encoding/json writes it (HTML-safe escaping).
fn go_json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(name: &str, image: &str) -> Container {
        Container { name: name.into(), image: Some(image.into()), ..Default::default() }
    }

    /// Golden values: the upstream unit-test vector and the spec's R2.2 vectors. If one of these
    /// changes, every running container would restart on upgrade: add a new scheme instead.
    #[test]
    fn golden_hashes() {
        let cases = [
            ("test_container", "foo/image:v1", "8e45cbd0"),
            ("app", "nginx:1.25", "e324a2d6"),
            ("app", "nginx:1.27", "a763184"),
            ("sidecar", "busybox:1.36", "7621d729"),
        ];
        for (name, image, want) in cases {
            assert_eq!(container_hash(&c(name, image)), want, "{name} {image}");
        }
    }

    #[test]
    fn only_name_and_image_matter() {
        let mut a = c("app", "nginx:1.25");
        a.command = Some(vec!["sleep".into()]);
        assert_eq!(container_hash(&a), "e324a2d6");
    }

    #[test]
    fn schemes() {
        let a = c("app", "nginx:1.25");
        assert_eq!(container_hash_with(None, &a).as_deref(), Some("e324a2d6"));
        assert_eq!(container_hash_with(Some("1"), &a).as_deref(), Some("e324a2d6"));
        assert_eq!(container_hash_with(Some("99"), &a), None);
    }

    #[test]
    fn go_escaping() {
        assert_eq!(go_json_string("a<b>&\"c"), r#""a\u003cb\u003e\u0026\"c""#);
    }
}
