//! `-o json` and `-o yaml` as kubectl prints them: objects as unstructured maps (keys sorted),
//! JSON indented by four spaces with Go's HTML escaping, several pods wrapped in a `v1`
//! `PodList` (DESIGN's contract; kubectl itself says `List` for the same shape).

use serde::Serialize;
use serde_json::{Value, json};

/// The `v1/PodList` that `get pods -o json|yaml` prints.
pub(crate) fn pod_list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "items": items, "kind": "PodList", "metadata": {"resourceVersion": ""}})
}

/// Go's `json.Indent(json.Marshal(v), "", "    ")` plus the trailing newline kubectl adds.
pub(crate) fn to_json(value: &Value) -> anyhow::Result<String> {
    let mut buf = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(
        &mut buf,
        serde_json::ser::PrettyFormatter::with_indent(b"    "),
    );
    value.serialize(&mut ser)?;
    let text = String::from_utf8(buf)?;
    // These characters can only occur inside JSON strings, where Go's encoder escapes them.
    let mut out = String::with_capacity(text.len() + 1);
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.push('\n');
    Ok(out)
}

/// YAML of the same unstructured object (block style, keys sorted).
pub(crate) fn to_yaml(value: &Value) -> anyhow::Result<String> {
    Ok(serde_yaml_ng::to_string(value)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_like_kubectl() {
        let pod = json!({"metadata": {"name": "web", "annotations": {"a": "x<y&z"}}, "kind": "Pod", "apiVersion": "v1"});
        let want = r#"{
    "apiVersion": "v1",
    "items": [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "annotations": {
                    "a": "x\u003cy\u0026z"
                },
                "name": "web"
            }
        }
    ],
    "kind": "PodList",
    "metadata": {
        "resourceVersion": ""
    }
}
"#;
        assert_eq!(to_json(&pod_list(vec![pod])).expect("serializable"), want);
    }

    #[test]
    fn yaml_like_kubectl() {
        let pod = json!({"kind": "Pod", "apiVersion": "v1", "spec": {"containers": [{"name": "app", "args": ["a"]}]}});
        let want = "apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Pod\n  spec:\n    containers:\n    - args:\n      - a\n      name: app\nkind: PodList\nmetadata:\n  resourceVersion: ''\n";
        assert_eq!(to_yaml(&pod_list(vec![pod])).expect("serializable"), want);
    }
}
