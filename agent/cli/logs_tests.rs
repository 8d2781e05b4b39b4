use serde_json::json;

use super::*;
use crate::fixtures::pod;

#[test]
fn container_choice() {
    let two =
        pod(json!({"spec": {"containers": [{"name": "app", "image": "b"}, {"name": "side", "image": "b"}],
                                  "initContainers": [{"name": "setup", "image": "b"}]}}));
    assert_eq!(
        pick_container(&two, None),
        Ok((
            "app".to_string(),
            vec!["Defaulted container \"app\" out of: app, side, setup (init)".to_string()]
        ))
    );
    assert_eq!(pick_container(&two, Some("setup")), Ok(("setup".to_string(), vec![])));
    assert_eq!(pick_container(&two, Some("x")), Err("container x is not valid for pod web".to_string()));
    let annotated = pod(
        json!({"metadata": {"annotations": {"kubectl.kubernetes.io/default-container": "side"}},
                               "spec": {"containers": [{"name": "app", "image": "b"}, {"name": "side", "image": "b"}]}}),
    );
    assert_eq!(pick_container(&annotated, None), Ok(("side".to_string(), vec![])));
    assert_eq!(pick_container(&pod(json!({})), None), Ok(("app".to_string(), vec![])));
}
