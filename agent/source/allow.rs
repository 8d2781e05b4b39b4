//! The allow-list of Pod fields crilet implements, checked on the raw JSON value before it is
//! turned into the typed `Pod` (which would silently drop what it does not know).
//!
//! Every key at every level is looked up in a table: supported keys are accepted (and walked into
//! when they hold objects), keys crilet accepts but ignores are warnings, keys it cannot honour
//! are errors, and keys the table does not list get the table's `unknown` rule, so a field added
//! to Kubernetes after this table was written is reported ("field not supported by crilet,
//! ignored") rather than silently dropped. Values that are `null`, `[]` or `{}` count as unset.
//! Type errors (a string where a list belongs) are left to the typed decode, which names the path.

use serde_json::Value;

use super::Findings;

/// What to do with one key.
pub(super) enum Rule {
    /// Supported; the value is not walked further (scalars, string lists, free-form maps).
    Leaf,
    /// Supported object whose keys are checked against a nested table.
    Obj(&'static Table),
    /// Supported list of objects, each checked against a nested table.
    List(&'static Table),
    /// Accepted but not acted on: a warning with this reason.
    Warn(&'static str),
    /// Refused: an error with this reason (`{key}` is replaced by the key).
    Reject(&'static str),
    /// A boolean whose value `ok` is what crilet does anyway; the other value gets `reason` as an
    /// error (`refuse`) or a warning.
    Flag { ok: bool, refuse: bool, reason: &'static str },
}

/// The keys one kind of object may hold.
pub(super) struct Table {
    fields: &'static [(&'static str, Rule)],
    unknown: Unknown,
}

/// What to do with a key a table does not list.
enum Unknown {
    Warn,
    Reject(&'static str),
}

use Rule::{Flag, Leaf, List, Obj, Reject, Warn};

const UNKNOWN_FIELD: &str = "field not supported by crilet, ignored";
const SCHEDULING: &str = "scheduling field, meaningless for a static pod; ignored";
const NO_SERVICE_ACCOUNT: &str = "static pods have no service account; ignored";

/// Checks one document (already known to be `v1`/`Pod`) against the allow-list.
pub(super) fn check_document(doc: &Value, findings: &mut Findings) {
    walk(doc, "", &DOCUMENT, findings);
}

fn walk(value: &Value, path: &str, table: &Table, findings: &mut Findings) {
    let Value::Object(map) = value else { return };
    for (key, value) in map {
        let here = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
        match table.fields.iter().find(|(k, _)| k == key) {
            Some((_, rule)) => apply(rule, key, value, &here, findings),
            None if is_unset(value) => {}
            None => match table.unknown {
                Unknown::Warn => findings.warn(here, UNKNOWN_FIELD),
                Unknown::Reject(reason) => findings.error(here, reason.replace("{key}", key)),
            },
        }
    }
}

fn apply(rule: &Rule, key: &str, value: &Value, here: &str, findings: &mut Findings) {
    match rule {
        Leaf => {}
        Obj(table) => walk(value, here, table, findings),
        List(table) => {
            if let Value::Array(items) = value {
                for (i, item) in items.iter().enumerate() {
                    walk(item, &format!("{here}[{i}]"), table, findings);
                }
            }
        }
        Warn(reason) if !is_unset(value) => findings.warn(here, *reason),
        Reject(reason) if !is_unset(value) => findings.error(here, reason.replace("{key}", key)),
        Flag { ok, refuse, reason } if value.as_bool() == Some(!ok) => {
            if *refuse {
                findings.error(here, *reason);
            } else {
                findings.warn(here, *reason);
            }
        }
        Warn(_) | Reject(_) | Flag { .. } => {}
    }
}

fn is_unset(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

static DOCUMENT: Table = Table {
    fields: &[
        ("apiVersion", Leaf),
        ("kind", Leaf),
        ("metadata", Obj(&METADATA)),
        ("spec", Obj(&SPEC)),
        ("status", Warn("status is ignored: crilet reports the status it observes")),
    ],
    unknown: Unknown::Warn,
};

static METADATA: Table = Table {
    fields: &[
        ("name", Leaf),
        ("namespace", Leaf),
        ("uid", Leaf),
        ("labels", Leaf),
        ("annotations", Leaf),
        ("generateName", Warn("generateName is not used for static pods; metadata.name names the pod")),
    ],
    unknown: Unknown::Warn,
};

static SPEC: Table = Table {
    fields: &[
        ("containers", List(&CONTAINER)),
        ("initContainers", List(&CONTAINER)),
        ("volumes", List(&VOLUME)),
        ("restartPolicy", Leaf),
        ("terminationGracePeriodSeconds", Leaf),
        ("activeDeadlineSeconds", Leaf),
        ("dnsPolicy", Leaf),
        ("dnsConfig", Obj(&DNS_CONFIG)),
        ("hostNetwork", Leaf),
        ("hostPID", Leaf),
        ("hostIPC", Leaf),
        ("shareProcessNamespace", Leaf),
        ("hostname", Leaf),
        ("subdomain", Leaf),
        ("securityContext", Obj(&POD_SECURITY_CONTEXT)),
        ("readinessGates", List(&READINESS_GATE)),
        ("nodeName", Leaf),
        ("hostAliases", List(&HOST_ALIAS)),
        ("runtimeClassName", Leaf),
        ("os", Obj(&POD_OS)),
        ("tolerations", Warn(SCHEDULING)),
        ("nodeSelector", Warn(SCHEDULING)),
        ("affinity", Warn(SCHEDULING)),
        // Graceful node shutdown stops pods by priority (kubeadm's static pods set both, the
        // class for their mirror pod's admission).
        ("priority", Leaf),
        ("priorityClassName", Leaf),
        ("preemptionPolicy", Warn(SCHEDULING)),
        ("schedulerName", Warn(SCHEDULING)),
        ("schedulingGates", Warn(SCHEDULING)),
        ("topologySpreadConstraints", Warn(SCHEDULING)),
        ("schedulingGroup", Warn(SCHEDULING)),
        // It would change the hostname the containers see: refused rather than ignored.
        ("hostnameOverride", Reject("hostnameOverride is not supported by crilet")),
        ("overhead", Warn("pod overhead is not accounted by crilet; ignored")),
        ("serviceAccountName", Warn(NO_SERVICE_ACCOUNT)),
        ("serviceAccount", Warn(NO_SERVICE_ACCOUNT)),
        ("automountServiceAccountToken", Flag { ok: false, refuse: false, reason: NO_SERVICE_ACCOUNT }),
        (
            "enableServiceLinks",
            Flag {
                ok: false,
                refuse: false,
                reason: "crilet injects no service environment variables; ignored",
            },
        ),
        // false: the pod's own user namespace (KEP-127, pod::userns), refused at sandbox
        // creation when the runtime handler does not report user namespace support.
        ("hostUsers", Leaf),
        ("setHostnameAsFQDN", Flag { ok: false, refuse: false, reason: "not supported by crilet; ignored" }),
        ("resources", Warn("pod-level resources are not enforced by crilet; ignored")),
        ("ephemeralContainers", Reject("ephemeral containers are not supported by crilet")),
        ("imagePullSecrets", Reject("static pods cannot reference API objects (secrets)")),
        ("resourceClaims", Reject("static pods cannot reference API objects (resource claims)")),
    ],
    unknown: Unknown::Warn,
};

static CONTAINER: Table = Table {
    fields: &[
        ("name", Leaf),
        ("image", Leaf),
        ("imagePullPolicy", Leaf),
        ("command", Leaf),
        ("args", Leaf),
        ("workingDir", Leaf),
        ("env", List(&ENV_VAR)),
        ("envFrom", Reject("static pods cannot reference API objects (envFrom)")),
        ("ports", List(&PORT)),
        ("volumeMounts", List(&VOLUME_MOUNT)),
        (
            "volumeDevices",
            Reject("volumeDevices are not supported by crilet (they need a PersistentVolumeClaim)"),
        ),
        ("resources", Obj(&RESOURCES)),
        ("resizePolicy", List(&RESIZE_POLICY)),
        ("securityContext", Obj(&SECURITY_CONTEXT)),
        ("livenessProbe", Obj(&PROBE)),
        ("readinessProbe", Obj(&PROBE)),
        ("startupProbe", Obj(&PROBE)),
        ("lifecycle", Obj(&LIFECYCLE)),
        ("terminationMessagePath", Leaf),
        ("terminationMessagePolicy", Leaf),
        ("restartPolicy", Leaf),
        ("restartPolicyRules", List(&RESTART_RULE)),
        // Passed to the runtime; `kubectl attach` reaches them in cluster mode.
        ("stdin", Leaf),
        ("stdinOnce", Leaf),
        ("tty", Leaf),
    ],
    unknown: Unknown::Warn,
};

static ENV_VAR: Table = Table {
    fields: &[("name", Leaf), ("value", Leaf), ("valueFrom", Obj(&ENV_SOURCE))],
    unknown: Unknown::Warn,
};

static ENV_SOURCE: Table = Table {
    fields: &[
        ("fieldRef", Obj(&FIELD_REF)),
        ("configMapKeyRef", Reject("static pods cannot reference API objects ({key})")),
        ("secretKeyRef", Reject("static pods cannot reference API objects ({key})")),
        ("resourceFieldRef", Reject("{key} is not supported by crilet")),
    ],
    unknown: Unknown::Reject("environment source {key} is not supported by crilet"),
};

static FIELD_REF: Table =
    Table { fields: &[("apiVersion", Leaf), ("fieldPath", Leaf)], unknown: Unknown::Warn };

static PORT: Table = Table {
    fields: &[
        ("name", Leaf),
        ("containerPort", Leaf),
        ("hostPort", Leaf),
        ("hostIP", Leaf),
        ("protocol", Leaf),
    ],
    unknown: Unknown::Warn,
};

/// KEP-5307 container restart rules.
static RESIZE_POLICY: Table =
    Table { fields: &[("resourceName", Leaf), ("restartPolicy", Leaf)], unknown: Unknown::Warn };

static RESTART_RULE: Table =
    Table { fields: &[("action", Leaf), ("exitCodes", Obj(&EXIT_CODES))], unknown: Unknown::Warn };

static EXIT_CODES: Table = Table { fields: &[("operator", Leaf), ("values", Leaf)], unknown: Unknown::Warn };

static VOLUME_MOUNT: Table = Table {
    fields: &[
        ("name", Leaf),
        ("mountPath", Leaf),
        ("readOnly", Leaf),
        ("subPath", Leaf),
        ("mountPropagation", Leaf),
        ("subPathExpr", Reject("subPathExpr is not supported by crilet")),
        ("recursiveReadOnly", Reject("recursiveReadOnly is not supported by crilet")),
    ],
    unknown: Unknown::Warn,
};

static RESOURCES: Table = Table {
    fields: &[
        ("limits", Leaf),
        ("requests", Leaf),
        ("claims", Reject("static pods cannot reference API objects (resource claims)")),
    ],
    unknown: Unknown::Warn,
};

static SECURITY_CONTEXT: Table = Table {
    fields: &[
        ("runAsUser", Leaf),
        ("runAsGroup", Leaf),
        ("runAsNonRoot", Leaf),
        ("privileged", Leaf),
        ("readOnlyRootFilesystem", Leaf),
        ("allowPrivilegeEscalation", Leaf),
        ("capabilities", Obj(&CAPABILITIES)),
        ("seccompProfile", Obj(&SECCOMP_PROFILE)),
        // Default gets the kubelet's masked and read-only /proc paths; Unmasked is refused by
        // validation (it needs a user namespace).
        ("procMount", Leaf),
        ("seLinuxOptions", Obj(&SELINUX_OPTIONS)),
        ("windowsOptions", Warn(WINDOWS_OPTIONS)),
        ("appArmorProfile", Obj(&APPARMOR_PROFILE)),
    ],
    unknown: Unknown::Warn,
};

/// Passed to the runtime as the kubelet passes them; it labels the container only where SELinux
/// is enabled on the node.
static SELINUX_OPTIONS: Table = Table {
    fields: &[("user", Leaf), ("role", Leaf), ("type", Leaf), ("level", Leaf)],
    unknown: Unknown::Warn,
};

const WINDOWS_OPTIONS: &str =
    "windowsOptions apply to Windows containers only; ignored on Linux, as by the kubelet";

static SECCOMP_PROFILE: Table =
    Table { fields: &[("type", Leaf), ("localhostProfile", Leaf)], unknown: Unknown::Warn };

static APPARMOR_PROFILE: Table =
    Table { fields: &[("type", Leaf), ("localhostProfile", Leaf)], unknown: Unknown::Warn };

static CAPABILITIES: Table = Table { fields: &[("add", Leaf), ("drop", Leaf)], unknown: Unknown::Warn };

static POD_SECURITY_CONTEXT: Table = Table {
    fields: &[
        ("runAsUser", Leaf),
        ("runAsGroup", Leaf),
        ("runAsNonRoot", Leaf),
        ("supplementalGroups", Leaf),
        ("sysctls", List(&SYSCTL)),
        (
            "fsGroup",
            Warn(
                "fsGroup is added to the containers' supplemental groups, but crilet changes no volume's group ownership to it (emptyDirs are world-writable)",
            ),
        ),
        ("supplementalGroupsPolicy", Leaf),
        (
            "fsGroupChangePolicy",
            Warn("crilet changes no volume ownership (emptyDirs are world-writable); ignored"),
        ),
        ("seccompProfile", Obj(&SECCOMP_PROFILE)),
        ("seLinuxOptions", Obj(&SELINUX_OPTIONS)),
        (
            "seLinuxChangePolicy",
            Warn(
                "crilet relabels no volumes (the runtime labels the containers where SELinux is enabled); ignored",
            ),
        ),
        ("windowsOptions", Warn(WINDOWS_OPTIONS)),
        ("appArmorProfile", Obj(&APPARMOR_PROFILE)),
    ],
    unknown: Unknown::Warn,
};

static SYSCTL: Table = Table { fields: &[("name", Leaf), ("value", Leaf)], unknown: Unknown::Warn };

static PROBE: Table = Table {
    fields: &[
        ("exec", Obj(&EXEC)),
        ("httpGet", Obj(&HTTP_GET)),
        ("tcpSocket", Obj(&TCP_SOCKET)),
        ("grpc", Obj(&GRPC)),
        ("initialDelaySeconds", Leaf),
        ("periodSeconds", Leaf),
        ("timeoutSeconds", Leaf),
        ("successThreshold", Leaf),
        ("failureThreshold", Leaf),
        ("terminationGracePeriodSeconds", Leaf),
    ],
    unknown: Unknown::Warn,
};

static EXEC: Table = Table { fields: &[("command", Leaf)], unknown: Unknown::Warn };

static HTTP_GET: Table = Table {
    fields: &[
        ("path", Leaf),
        ("port", Leaf),
        ("host", Leaf),
        ("scheme", Leaf),
        ("httpHeaders", List(&HEADER)),
    ],
    unknown: Unknown::Warn,
};

static HEADER: Table = Table { fields: &[("name", Leaf), ("value", Leaf)], unknown: Unknown::Warn };

static TCP_SOCKET: Table = Table { fields: &[("port", Leaf), ("host", Leaf)], unknown: Unknown::Warn };

static GRPC: Table = Table { fields: &[("port", Leaf), ("service", Leaf)], unknown: Unknown::Warn };

static LIFECYCLE: Table = Table {
    fields: &[("postStart", Obj(&HANDLER)), ("preStop", Obj(&HANDLER)), ("stopSignal", Leaf)],
    unknown: Unknown::Warn,
};

static HANDLER: Table = Table {
    fields: &[
        ("exec", Obj(&EXEC)),
        ("httpGet", Obj(&HTTP_GET)),
        ("sleep", Obj(&SLEEP)),
        ("tcpSocket", Reject("tcpSocket lifecycle handlers are deprecated and not supported by crilet")),
    ],
    unknown: Unknown::Reject("lifecycle handler {key} is not supported by crilet"),
};

static SLEEP: Table = Table { fields: &[("seconds", Leaf)], unknown: Unknown::Warn };

static VOLUME: Table = Table {
    fields: &[
        ("name", Leaf),
        ("emptyDir", Obj(&EMPTY_DIR)),
        ("hostPath", Obj(&HOST_PATH)),
        ("secret", Reject(API_VOLUME)),
        ("configMap", Reject(API_VOLUME)),
        ("projected", Reject(API_VOLUME)),
        ("persistentVolumeClaim", Reject(API_VOLUME)),
        ("ephemeral", Reject(API_VOLUME)),
    ],
    unknown: Unknown::Reject("volume type {key} is not supported by crilet"),
};

const API_VOLUME: &str =
    "volume type {key} is not supported by crilet (static pods cannot reference API objects)";

static EMPTY_DIR: Table = Table { fields: &[("medium", Leaf), ("sizeLimit", Leaf)], unknown: Unknown::Warn };

static HOST_PATH: Table = Table { fields: &[("path", Leaf), ("type", Leaf)], unknown: Unknown::Warn };

static DNS_CONFIG: Table = Table {
    fields: &[("nameservers", Leaf), ("searches", Leaf), ("options", List(&DNS_OPTION))],
    unknown: Unknown::Warn,
};

static DNS_OPTION: Table = Table { fields: &[("name", Leaf), ("value", Leaf)], unknown: Unknown::Warn };

static READINESS_GATE: Table = Table { fields: &[("conditionType", Leaf)], unknown: Unknown::Warn };

static HOST_ALIAS: Table = Table { fields: &[("ip", Leaf), ("hostnames", Leaf)], unknown: Unknown::Warn };

static POD_OS: Table = Table { fields: &[("name", Leaf)], unknown: Unknown::Warn };
