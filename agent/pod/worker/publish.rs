//! Publishing the pod's status (computed by `crate::status` from what the runtime shows), and
//! the termination messages it carries (R9.2).

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use super::*;

/// The first read from a log's end when looking for its last lines; grown fourfold until it
/// holds them.
const LOG_TAIL_CHUNK: u64 = 64 * 1024;

impl Worker {
    pub(super) async fn publish(
        &mut self,
        observed: &ObservedPod,
        terminating: bool,
        probe_states: &BTreeMap<String, ProbeState>,
    ) {
        let span = tracing::trace_span!("publish");
        self.publish_untraced(observed, terminating, probe_states).instrument(span).await
    }

    async fn publish_untraced(
        &mut self,
        observed: &ObservedPod,
        terminating: bool,
        probe_states: &BTreeMap<String, ProbeState>,
    ) {
        let ctx = &self.ctx;
        let external = ctx.registry.external_conditions(&self.desired.key);
        if self.saved.conditions.as_deref().unwrap_or_default() != external.as_slice() {
            let path = conditions_path(&ctx.node, &self.desired.uid);
            let written = crate::checkpoint::write_json_async(path, &external).await.is_ok();
            if written {
                self.saved.conditions = Some(external.clone());
            }
        }
        let api_pod = self.desired.source.is_api();
        let owner = update::Owner::of(&self.desired.pod, api_pod);
        let mut external = update::with_own_condition(external, self.saved.update.as_ref(), owner);
        external
            .retain(|c| c.type_ != crate::pod::resize::PENDING && c.type_ != crate::pod::resize::IN_PROGRESS);
        external.extend(self.resize_conditions());
        let status = compute(&StatusInput {
            desired: &self.desired,
            observed,
            probes: probe_states,
            start_errors: &self.tracked.start_errors,
            terminating,
            external_conditions: &external,
            previous: self.saved.status.as_ref(),
            termination_messages: &self.tracked.termination_messages,
            host_ip: ctx.node.host_ip.as_deref(),
            now: jiff::Timestamp::now(),
        });
        let mut pod = (*self.desired.pod).clone();
        let annotations = pod.metadata.annotations.get_or_insert_with(Default::default);
        annotations
            .insert(LOG_DIR_ANNOTATION.into(), pod_log_dir(&ctx.node, &self.desired).display().to_string());
        let created = observed
            .sandboxes
            .last()
            .and_then(|s| jiff::Timestamp::from_nanosecond(i128::from(s.created_at)).ok())
            .filter(|t| *t < self.tracked.first_seen)
            .unwrap_or(self.tracked.first_seen);
        pod.metadata.creation_timestamp = Some(Time(created));
        if terminating {
            pod.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
            pod.metadata.deletion_grace_period_seconds =
                pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds);
        }
        let mut status = status;
        for list in [status.container_statuses.as_mut(), status.init_container_statuses.as_mut()]
            .into_iter()
            .flatten()
        {
            self.resize_status(list, observed);
        }
        match self.tracked.failed {
            // Upstream's active-deadline handler: the pod fails for good.
            Some(Failed::DeadlineExceeded) => {
                status.phase = Some("Failed".into());
                status.reason = Some("DeadlineExceeded".into());
                status.message = Some("Pod was active on the node longer than the specified deadline".into());
            }
            Some(Failed::NodeShutdown) => crate::pod::shutdown::mark(&mut status, jiff::Timestamp::now()),
            Some(Failed::Evicted) => {
                let message = self.tracked.eviction.as_ref().map(|e| e.message.as_str()).unwrap_or_default();
                crate::pod::shutdown::mark_failed(&mut status, "Evicted", message, jiff::Timestamp::now());
            }
            None => {}
        }
        pod.status = Some(status.clone());
        self.ctx.metrics.pod_published(&self.desired.uid, &pod);
        self.ctx.registry.put_pod(
            self.desired.key.clone(),
            PodRecord {
                pod,
                manifest_file: self.desired.source_text(),
                warnings: self.desired.warnings.clone(),
            },
        );
        self.save_status(&status).await;
        let now = jiff::Timestamp::now();
        for (name, step) in
            crate::timeline::status_steps(&self.desired.pod, self.saved.status.as_ref(), &status, now)
        {
            self.ctx.exec.rec.step(&self.desired.key, Some(&name), step);
        }
        self.saved.status = Some(status);
    }

    /// Observes the pod and publishes its status (after actions; errors only delay that to the
    /// next sync).
    pub(super) async fn observe_and_publish(&mut self, terminating: bool) {
        match self.ctx.exec.cri.observe(&self.desired.uid).await {
            Ok(observed) => {
                self.read_termination_messages(&observed).await;
                let pod = self.desired.pod.clone();
                self.probes.reconcile(&pod, &observed, terminating);
                self.probes.save().await;
                let (_, probe_states) = self.probes.view();
                self.publish(&observed, terminating, &probe_states).await;
            }
            Err(e) => debug!(error = %e, "observing the pod after the sync failed; the next sync publishes"),
        }
    }

    /// Publishes the sync's live snapshot with the instance just started spliced in.
    pub(super) async fn publish_started(&mut self, id: &str, sandbox_id: &str) {
        if self.live.is_none() {
            return;
        }
        let started = match self.ctx.exec.cri.container_status(id, sandbox_id).await {
            Ok(c) => c,
            Err(e) => {
                // The snapshot no longer shows the pod as it is: nothing more is planned from it
                // (a start it misses would be made twice).
                self.live = None;
                return debug!(error = %e, "status of the started container; the sync's end publishes");
            }
        };
        let Some(live) = self.live.as_mut() else { return };
        live.containers.retain(|c| c.id != started.id);
        live.containers.insert(0, started);
        let snapshot = live.clone();
        let (_, probe_states) = self.probes.view();
        self.publish(&snapshot, false, &probe_states).await;
    }

    /// R9.2: termination messages of exited instances, read once per instance. The files are
    /// the container's (a log may be as large as its rotation size): read on the blocking pool.
    pub(super) async fn read_termination_messages(&mut self, observed: &ObservedPod) {
        let unread: Vec<(String, Option<String>, Option<String>)> = observed
            .containers
            .iter()
            .filter(|c| {
                c.state == ContainerState::Exited && !self.tracked.termination_messages.contains_key(&c.id)
            })
            .map(|c| {
                let file = c.annotations.get(crate::pod::spec::TERMINATION_FILE_ANNOTATION).cloned();
                let fallback =
                    c.annotations.get(crate::model::keys::TERMINATION_MESSAGE_POLICY).map(String::as_str)
                        == Some("FallbackToLogsOnError");
                let log = (fallback && c.exit_code != 0).then(|| c.log_path.clone());
                (c.id.clone(), file, log)
            })
            .collect();
        if !unread.is_empty() {
            let read = tokio::task::spawn_blocking(move || {
                let read = |(id, file, log): (String, Option<String>, Option<String>)| {
                    (id, termination_message(file.as_deref(), log.as_deref()))
                };
                unread.into_iter().map(read).collect::<Vec<_>>()
            });
            match read.await {
                Ok(messages) => self.tracked.termination_messages.extend(messages),
                // Read again at the next sync.
                Err(e) => debug!(error = %e, "reading termination messages failed"),
            }
        }
        self.tracked.termination_messages.retain(|id, _| observed.containers.iter().any(|c| &c.id == id));
    }
}

/// One instance's termination message: the end of its termination file, else (when `log` is
/// given: `FallbackToLogsOnError` and a failure) the end of its log. Blocks on the disk.
fn termination_message(file: Option<&str>, log: Option<&str>) -> String {
    let msg = file.and_then(|f| read_tail(Path::new(f), 4096).ok()).map(|b| tail_bytes(&b, 4096));
    match (msg.filter(|m| !m.is_empty()), log) {
        (Some(m), _) => m,
        (None, Some(log)) => read_log_tail(Path::new(log), 80, 2048, LOG_TAIL_CHUNK).unwrap_or_default(),
        (None, None) => String::new(),
    }
}

/// The last `max` bytes of the file at `path`, read from its end.
fn read_tail(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(max)))?;
    let mut buf = Vec::new();
    f.take(max).read_to_end(&mut buf)?;
    Ok(buf)
}

/// [`log_tail`] of the CRI log file at `path`, reading only its end: `chunk` bytes, then four
/// times as many, until the read holds the last `lines` entries or `max` bytes of their text
/// (either decides the answer) or the whole file.
fn read_log_tail(path: &Path, lines: usize, max: usize, chunk: u64) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let mut chunk = chunk.max(1);
    loop {
        let from = len.saturating_sub(chunk);
        f.seek(SeekFrom::Start(from))?;
        let mut buf = Vec::new();
        (&mut f).take(len - from).read_to_end(&mut buf)?;
        // A read that starts inside the file starts with the end of a line: it is not an entry.
        let whole = match from {
            0 => &buf[..],
            _ => buf.iter().position(|b| *b == b'\n').map_or(&buf[..0], |i| &buf[i + 1..]),
        };
        let entries = log_entries(whole);
        let last = &entries[entries.len().saturating_sub(lines)..];
        if from == 0 || entries.len() >= lines || last.iter().map(String::len).sum::<usize>() >= max {
            return Ok(log_tail(whole, lines, max));
        }
        chunk = chunk.saturating_mul(4);
    }
}

/// The last `max` bytes of `b` as text.
pub(super) fn tail_bytes(b: &[u8], max: usize) -> String {
    let start = b.len().saturating_sub(max);
    String::from_utf8_lossy(&b[start..]).to_string()
}

/// R9.2 fallback: the last `lines` lines of a CRI log file's content, at most `max` bytes.
pub(super) fn log_tail(b: &[u8], lines: usize, max: usize) -> String {
    let content = log_entries(b);
    let joined: String = content[content.len().saturating_sub(lines)..].concat();
    tail_bytes(joined.as_bytes(), max)
}

/// The text of each entry of CRI log content (a partial entry without its newline).
fn log_entries(b: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(b)
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(4, ' ');
            let (_ts, _stream, tag, msg) =
                (parts.next()?, parts.next()?, parts.next()?, parts.next().unwrap_or(""));
            Some(if tag == "P" { msg.to_string() } else { format!("{msg}\n") })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn log_tail_joins_partials_and_bounds() {
        let log = b"2024-01-01T00:00:00Z stdout F one\n2024-01-01T00:00:00Z stderr P tw\n2024-01-01T00:00:00Z stderr F o\n";
        assert_eq!(log_tail(log, 80, 2048), "one\ntwo\n");
        assert_eq!(log_tail(log, 1, 2048), "o\n");
        assert_eq!(log_tail(log, 80, 3), "wo\n");
    }

    /// Reading a log's end gives what reading all of it gave, whatever the read's first size.
    #[test]
    fn the_log_tail_read_from_the_end_is_the_whole_files() {
        let line =
            |i: usize, tag: &str, text: &str| format!("2024-01-01T00:00:00.{i:09}Z stdout {tag} {text}\n");
        let many: String = (0..500).map(|i| line(i, "F", &format!("line {i}"))).collect();
        let long: String = (0..100).map(|i| line(i, "F", &"x".repeat(i * 37))).collect();
        let partials: String =
            (0..200).map(|i| line(i, if i % 3 == 0 { "F" } else { "P" }, "part")).collect();
        let mut odd = many.clone().into_bytes();
        odd.extend_from_slice(
            b"garbage\r\n2024-01-01T00:00:00Z stderr F caf\xc3\r\n2024-01-01T00:00:00Z stderr F last",
        );
        let cases: [(&str, Vec<u8>); 6] = [
            ("empty", Vec::new()),
            ("a few lines", line(1, "F", "one").repeat(3).into_bytes()),
            ("more lines than wanted", many.into_bytes()),
            ("long lines: the byte limit decides", long.into_bytes()),
            ("partial entries", partials.into_bytes()),
            ("CRLF, bad UTF-8, a malformed line, no final newline", odd),
        ];
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, content) in cases {
            let path = dir.path().join("0.log");
            std::fs::write(&path, &content).expect("write");
            let want = log_tail(&content, 80, 2048);
            for chunk in [1, 7, 100, 4096, LOG_TAIL_CHUNK] {
                let got = read_log_tail(&path, 80, 2048, chunk).expect("read");
                assert_eq!(got, want, "{name}, first read {chunk} bytes");
            }
            let tail = read_tail(&path, 4096).expect("read");
            assert_eq!(
                tail_bytes(&tail, 4096),
                tail_bytes(&content, 4096),
                "{name}: the termination file's end"
            );
        }
    }

    /// Termination messages: the file's end first, the log only as the fallback.
    #[test]
    fn termination_message_sources() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("termination-log");
        let log = dir.path().join("0.log");
        std::fs::write(&log, "2024-01-01T00:00:00Z stderr F panic: boom\n").expect("write");
        let (file_s, log_s) = (file.to_str().expect("utf-8"), log.to_str().expect("utf-8"));
        // (case, the termination file's content if there is one, the fallback log, message)
        let cases = [
            ("no file, no fallback", None, None, ""),
            ("no file: the log", None, Some(log_s), "panic: boom\n"),
            ("an empty file: the log", Some(""), Some(log_s), "panic: boom\n"),
            ("the file wins", Some("bye"), Some(log_s), "bye"),
        ];
        for (name, content, fallback, want) in cases {
            if let Some(text) = content {
                std::fs::write(&file, text).expect("write");
            }
            assert_eq!(termination_message(Some(file_s), fallback), want, "{name}");
        }
    }
}
