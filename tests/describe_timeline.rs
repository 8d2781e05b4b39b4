//! `crilet describe pod` shows each container's lifecycle as the agent lived it, on the real
//! containerd: created, started, started=true after its startup probe, ready after its
//! readiness probe, killed for a failed liveness probe and for an image changed in place (with
//! the preStop hook's outcome), exited with its code, restarted; and the pod's termination with
//! the share of its grace budget it used. Also: `crilet events --watch` really streams.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use serde_json::Value;

const NS: &str = "t-timeline";

/// `app` ignores SIGTERM, is started 2 s after it runs (a file its startup probe waits for) and
/// ready 1 s later; its liveness probe fails once `/tmp/die` exists. `web` serves /healthz and
/// has a preStop hook. Grace 3 s.
fn manifest(web_image: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: timeline, namespace: {NS}}}
spec:
  terminationGracePeriodSeconds: 3
  containers:
  - name: app
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, 'trap "" TERM; sleep 2; touch /tmp/up; sleep 1; touch /tmp/ready; while true; do sleep 0.2; done']
    startupProbe:
      exec: {{command: [sh, -c, 'test -f /tmp/up']}}
      periodSeconds: 1
      failureThreshold: 30
    readinessProbe:
      exec: {{command: [sh, -c, 'test -f /tmp/ready']}}
      periodSeconds: 1
    livenessProbe:
      exec: {{command: [sh, -c, 'test ! -f /tmp/die']}}
      periodSeconds: 1
      failureThreshold: 1
  - name: web
    image: {web_image}
    readinessProbe:
      httpGet: {{path: /healthz, port: 8080}}
      periodSeconds: 1
    lifecycle:
      preStop: {{exec: {{command: [sh, -c, 'echo bye']}}}}
"#
    )
}

/// One timeline row: (step, detail).
type Row = (String, String);

/// The `Timeline:` rows of `container` in a `describe pod` text.
fn timeline(describe: &str, container: &str) -> Vec<Row> {
    let lines: Vec<&str> = describe.lines().collect();
    let Some(start) = lines.iter().position(|l| *l == format!("  {container}:")) else { return Vec::new() };
    let Some(header) = lines[start..].iter().position(|l| *l == "    Timeline:") else { return Vec::new() };
    lines[start + header + 1..]
        .iter()
        .take_while(|l| l.starts_with("      "))
        .filter_map(|l| {
            // TIME [+DELTA] STEP DETAIL…
            let mut words = l.split_whitespace().skip(1).skip_while(|w| w.starts_with('+'));
            let step = words.next()?.to_string();
            Some((step, words.collect::<Vec<_>>().join(" ")))
        })
        .collect()
}

/// The rows of the pod's `Termination:` block: (step, detail).
fn termination(describe: &str) -> Vec<Row> {
    let lines: Vec<&str> = describe.lines().collect();
    let Some(start) = lines.iter().position(|l| *l == "Termination:") else { return Vec::new() };
    lines[start + 1..]
        .iter()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| {
            let mut words = l.split_whitespace().skip(1);
            Some((words.next()?.to_string(), words.collect::<Vec<_>>().join(" ")))
        })
        .collect()
}

/// Whether `want` (step, detail substring) occur in `rows` in this order (others may be between).
fn in_order(rows: &[Row], want: &[(&str, &str)]) -> bool {
    let mut next = 0;
    for (step, detail) in rows {
        if let Some((s, d)) = want.get(next) {
            if step == s && detail.contains(d) {
                next += 1;
            }
        }
    }
    next == want.len()
}

fn describe(a: &Agent) -> Option<String> {
    let (ok, out, _) = a.cli(&["describe", "pod", "timeline", "-n", NS]);
    ok.then_some(out)
}

/// Waits until `describe` shows `want` in order in `container`'s timeline; returns the text.
async fn timeline_shows(a: &Agent, container: &str, want: &[(&str, &str)], limit: Duration) -> String {
    let mut last = String::new();
    let found = tokio::time::timeout(limit, async {
        loop {
            if let Some(text) = describe(a) {
                if in_order(&timeline(&text, container), want) {
                    return text;
                }
                last = text;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("{container}'s timeline never showed {want:?} within {limit:?}:\n{last}"))
}

fn restarted_and_ready(p: &Value, c: &str) -> bool {
    restart_count(p, c) == Some(1) && running(p, c) && cstatus(p, c).is_some_and(|s| s["ready"] == true)
}

#[tokio::test(flavor = "multi_thread")]
async fn describe_shows_each_lifecycle_step_in_order() {
    let a = Agent::start("describe-timeline").await;
    let v1 = a.env.get("CRILET_IMAGE_WEB_V1");
    let v2 = a.env.get("CRILET_IMAGE_WEB_V2");
    a.write_manifest("timeline.yaml", &manifest(&v1));
    let p = running_pod(&a, "timeline").await;

    // Start: created, started, started=true once the startup probe passes, then ready.
    let first_start = [
        ("Created", "(restart 0)"),
        ("Started", ""),
        ("Started=true", "startup probe succeeded"),
        ("Ready=true", "readiness probe succeeded"),
    ];
    let text = timeline_shows(&a, "app", &first_start, Duration::from_secs(10)).await;
    let web_start = [("Created", "(restart 0)"), ("Started", ""), ("Started=true", "no startup probe")];
    assert!(in_order(&timeline(&text, "web"), &web_start), "web's start:\n{text}");
    assert!(termination(&text).is_empty(), "no termination yet:\n{text}");

    // A failed liveness probe: killed (why), exited (code), restarted, started and ready again.
    let app = container_id(&p, "app").expect("app's container id");
    let cri = a.env.cri();
    cri.exec_sync(&app, vec!["touch".into(), "/tmp/die".into()], Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("exec touch /tmp/die in {app}: {e}"));
    wait_for("app restarted and ready", Duration::from_secs(60), || async {
        a.pod("timeline").filter(|p| restarted_and_ready(p, "app")).map(drop)
    })
    .await;
    let after_liveness: Vec<(&str, &str)> = first_start
        .iter()
        .copied()
        .chain([
            ("Killing", "Container app failed liveness probe, will be restarted"),
            // It ignores SIGTERM: SIGKILLed when the 3 s grace ran out.
            ("Exited", "exit code 137"),
            ("Created", "(restart 1)"),
            ("Started", ""),
            ("Started=true", "startup probe succeeded"),
            ("Ready=true", "readiness probe succeeded"),
        ])
        .collect();
    timeline_shows(&a, "app", &after_liveness, Duration::from_secs(10)).await;

    // An image changed in place: killed for it, the preStop hook, exited, restarted.
    a.write_manifest("timeline.yaml", &manifest(&v2));
    wait_for("web updated in place and ready", Duration::from_secs(90), || async {
        a.pod("timeline").filter(|p| restarted_and_ready(p, "web")).map(drop)
    })
    .await;
    let image_change = [
        ("Killing", &*format!("image changed to {v2} (in-place update)")),
        ("PreStop", "preStop hook finished"),
        ("Exited", "exit code"),
        ("Created", "(restart 1)"),
        ("Started", ""),
        ("Ready=true", "readiness probe succeeded"),
    ];
    let text = timeline_shows(&a, "web", &image_change, Duration::from_secs(10)).await;
    eprintln!("describe after the liveness kill and the image change:\n{text}");

    // Deleted: while it terminates (app ignores SIGTERM: about 3 s), the pod kill and each
    // container's kill with its reason.
    a.remove_manifest("timeline.yaml");
    let text = timeline_shows(&a, "app", &[("Killing", "pod deleted")], Duration::from_secs(10)).await;
    assert!(
        text.lines().any(|l| l.starts_with("Status:") && l.contains("Terminating")),
        "terminating:\n{text}"
    );
    eprintln!("describe while terminating:\n{text}");
    let killing = termination(&text);
    assert!(in_order(&killing, &[("Killing", "pod deleted; grace period 3s")]), "{killing:?}\n{text}");
    assert!(in_order(&timeline(&text, "web"), &[("Killing", "pod deleted")]), "{text}");

    // Gone: the budget it used is in the pod's events (the pod's timeline went with it). app
    // ignored SIGTERM, so it used the whole budget: about 3 s.
    let stopped = wait_for("the pod removed and its stop reported", Duration::from_secs(30), || async {
        if a.pod("timeline").is_some() {
            return None;
        }
        let events = a.events_of(NS, "timeline");
        events.lines().find(|l| l.contains("PodStopped")).map(str::to_string)
    })
    .await;
    let used: f64 = stopped
        .split("all containers stopped in ")
        .nth(1)
        .and_then(|rest| rest.split('s').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no budget in {stopped:?}"));
    assert!(
        stopped.contains("pod deleted: all containers stopped in") && stopped.contains("of 3s grace"),
        "{stopped}"
    );
    assert!((2.5..=4.0).contains(&used), "used {used}s of the 3 s budget: {stopped}");
}

#[tokio::test(flavor = "multi_thread")]
async fn events_watch_streams_new_events() {
    let a = Agent::start("events-watch").await;
    wait_for("the agent answering", Duration::from_secs(30), || async { a.pods().map(drop) }).await;
    let stderr_file = a.dir.join("events-watch.stderr");
    let stderr = std::fs::File::create(&stderr_file).expect("stderr file");
    let mut child = Command::new(bin())
        .args(["events", "--watch", "-A", "--control-socket"])
        .arg(&a.socket)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("spawn crilet events --watch");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let stderr_text = || std::fs::read_to_string(&stderr_file).unwrap_or_default();
    let pod = |name: &str| {
        format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: t-watch}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 0.2; done']
"#
        )
    };
    let mut seen = Vec::new();
    let mut started_line = |name: &str, child: &mut std::process::Child| -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) if l.contains(&format!("Pod/{name}")) && l.contains("Started") => return l,
                Ok(l) => seen.push(l),
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "events --watch printed no Started event of pod {name} within 60 s; it printed:\n{}\nstderr:\n{}",
                        seen.join("\n"),
                        stderr_text()
                    );
                }
            }
        }
    };
    // A first pod proves the watch is connected (its event was printed, from the backlog or
    // live); the second pod is only written after that, so its event can only come live.
    a.write_manifest("primer.yaml", &pod("primer"));
    started_line("primer", &mut child);
    assert!(child.try_wait().expect("try_wait").is_none(), "events --watch exited: {}", stderr_text());
    a.write_manifest("watched.yaml", &pod("watched"));
    let line = started_line("watched", &mut child);
    assert!(line.starts_with("t-watch"), "-A prints the namespace first: {line}");
    // Ended by its own PID (std's Child::kill), never by name.
    child.kill().expect("kill events --watch");
    let _ = child.wait();

    a.remove_manifest("watched.yaml");
    a.remove_manifest("primer.yaml");
    wait_for("pods watched and primer removed", Duration::from_secs(30), || async {
        a.pods().filter(|pods| pods.is_empty()).map(drop)
    })
    .await;
}
