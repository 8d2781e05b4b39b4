//! Container ports as probes and lifecycle hooks name them.

use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// A named or numbered port of the container (a numeric string is accepted last, R6.9).
pub fn resolve_port(port: &IntOrString, spec: &Container) -> Option<u16> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).ok().filter(|p| *p > 0),
        IntOrString::String(name) => spec
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .or_else(|| name.parse().ok()),
    }
}
