//! `/containerLogs/{namespace}/{pod}/{container}`: the query as the kubelet decodes it into
//! `PodLogOptions`, the instance's CRI log file chosen by the kubelet's rules, and its records
//! turned into the text `kubectl logs` shows (kuberuntime's `ReadLogs`: `tailLines`, `since*`,
//! `timestamps`, `limitBytes`, `follow`). Reading files, rotations and the choice of instance are
//! shared with `crilet logs` (`cli::logs`); this module adds the filter and the streaming.

use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use hyper::body::Bytes;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::logs::{
    Follower, LogFile, RecordSink, container_status, log_directory, log_files, parse_cri_line,
    select_log_file,
};
use crate::model::PodKey;
use crate::registry::Registry;

/// How often a followed file is read again (the kubelet wakes on fsnotify or each second).
const POLL: Duration = Duration::from_millis(250);
/// Every this many polls, the registry is asked whether the followed instance still runs.
const STATUS_EVERY: u32 = 4;
/// Chunks in flight between the reader and the connection.
const CHANNEL_CHUNKS: usize = 8;

/// The query, as the kubelet decodes it (`PodLogOptions`, v1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LogOptions {
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub tail_lines: Option<u64>,
    pub limit_bytes: Option<u64>,
    /// Lines older than this are left out (`sinceSeconds` before now, or `sinceTime`).
    pub since: Option<Timestamp>,
}

/// A query the kubelet refuses; the messages are upstream's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum QueryError {
    /// 400: a value does not parse.
    #[error(r#"{{"message": "Unable to decode query."}}"#)]
    Decode,
    /// 422: `ValidatePodLogOptions` fails.
    #[error(r#"{{"message": "Invalid request."}}"#)]
    Invalid,
}

/// Decodes the query of a `containerLogs` request as of `now`. As upstream, the first value of a
/// parameter counts, `tail` is the old name of `tailLines` (`tail=all`: no limit), a boolean is
/// true unless it is `0` or `false`, and unknown parameters are ignored.
pub(crate) fn parse_query(query: Option<&str>, now: Timestamp) -> Result<LogOptions, QueryError> {
    let pairs: Vec<(String, String)> = query.map(decode_query).unwrap_or_default();
    let first = |name: &str| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let flag = |name: &str| first(name).is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"));
    let int = |name: &str| first(name).map(|v| v.parse::<i64>().map_err(|_| QueryError::Decode)).transpose();
    let tail_lines = match first("tail") {
        Some("all") => None,
        Some(t) => Some(t.parse::<i64>().map_err(|_| QueryError::Decode)?),
        None => int("tailLines")?,
    };
    let limit_bytes = int("limitBytes")?;
    let since_seconds = int("sinceSeconds")?;
    let since_time = match first("sinceTime").filter(|v| !v.is_empty()) {
        Some(t) => Some(t.parse::<Timestamp>().map_err(|_| QueryError::Decode)?),
        None => None,
    };
    let positive =
        |v: Option<i64>, min: i64| v.map(|n| if n < min { Err(QueryError::Invalid) } else { Ok(n) });
    let tail_lines = positive(tail_lines, 0).transpose()?;
    let limit_bytes = positive(limit_bytes, 1).transpose()?;
    let since_seconds = positive(since_seconds, 1).transpose()?;
    if since_seconds.is_some() && since_time.is_some() {
        return Err(QueryError::Invalid);
    }
    let since = match (since_seconds, since_time) {
        (Some(s), _) => Some(now.checked_sub(SignedDuration::from_secs(s)).unwrap_or(Timestamp::MIN)),
        (None, t) => t,
    };
    Ok(LogOptions {
        follow: flag("follow"),
        previous: flag("previous"),
        timestamps: flag("timestamps"),
        tail_lines: tail_lines.and_then(|n| u64::try_from(n).ok()),
        limit_bytes: limit_bytes.and_then(|n| u64::try_from(n).ok()),
        since,
    })
}

/// `application/x-www-form-urlencoded` pairs, as Go's `url.ParseQuery` splits them (on `&`, `+`
/// a space, `%XX` a byte); a pair that does not decode is dropped.
pub(crate) fn decode_query(query: &str) -> Vec<(String, String)> {
    fn unescape(s: &str) -> Option<String> {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' => {
                    let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                    out.push(u8::from_str_radix(hex, 16).ok()?);
                    i += 2;
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8(out).ok()
    }
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            Some((unescape(k)?, unescape(v)?))
        })
        .collect()
}

/// Turns CRI records into `kubectl logs` text under the query's options: partial (`P`) records
/// joined into their line; a line left out when its first record is older than `since`; with
/// `timestamps`, each line prefixed by its first record's time in the kubelet's fixed
/// nanosecond format; output cut at `limitBytes` (counting the prefixes, as upstream).
#[derive(Debug)]
pub(crate) struct LogFilter {
    timestamps: bool,
    since: Option<Timestamp>,
    remaining: Option<u64>,
    at_line_start: bool,
    skipping: bool,
}

impl LogFilter {
    pub(crate) fn new(opts: &LogOptions) -> Self {
        Self {
            timestamps: opts.timestamps,
            since: opts.since,
            remaining: opts.limit_bytes,
            at_line_start: true,
            skipping: false,
        }
    }
}

impl RecordSink for LogFilter {
    fn push(&mut self, record: &[u8], out: &mut Vec<u8>) {
        if self.full() {
            return;
        }
        let Some(line) = parse_cri_line(record) else { return };
        let starts_line = self.at_line_start;
        if starts_line {
            self.skipping = self.since.is_some_and(|since| line.at < since);
        }
        self.at_line_start = !line.partial;
        if self.skipping {
            return;
        }
        let start = out.len();
        if self.timestamps && starts_line {
            out.extend_from_slice(&fixed_nanos(line.time));
            out.push(b' ');
        }
        out.extend_from_slice(line.content);
        if !line.partial {
            out.push(b'\n');
        }
        if let Some(remaining) = self.remaining.as_mut() {
            let written = (out.len() - start) as u64;
            if written > *remaining {
                out.truncate(start + usize::try_from(*remaining).unwrap_or(usize::MAX));
            }
            *remaining = remaining.saturating_sub(written);
        }
    }

    fn full(&self) -> bool {
        self.remaining == Some(0)
    }
}

/// A CRI record's RFC 3339 time in the kubelet's output format (`RFC3339NanoFixed`): always nine
/// fraction digits, the offset as written (`Z` for a zero offset). The runtime writes Go's
/// `RFC3339Nano`, which drops trailing zeros. Anything unexpected is returned as it is.
pub(crate) fn fixed_nanos(time: &[u8]) -> Vec<u8> {
    // `YYYY-MM-DDTHH:MM:SS` is 19 bytes; a fraction and the offset follow.
    const SECONDS: usize = 19;
    if time.len() < SECONDS {
        return time.to_vec();
    }
    let (head, rest) = time.split_at(SECONDS);
    let (digits, zone) = match rest.strip_prefix(b".") {
        Some(r) => r.split_at(r.iter().position(|b| !b.is_ascii_digit()).unwrap_or(r.len())),
        None => (&b""[..], rest),
    };
    let mut out = Vec::with_capacity(SECONDS + 10 + zone.len());
    out.extend_from_slice(head);
    out.push(b'.');
    out.extend(digits.iter().copied().chain(std::iter::repeat(b'0')).take(9));
    match zone {
        b"z" | b"Z" | b"+00:00" | b"-00:00" => out.push(b'Z'),
        z => out.extend_from_slice(z),
    }
    out
}

/// Why a container's log cannot be served; the messages are the kubelet's.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    /// 404.
    #[error("pod {0:?} does not exist")]
    PodNotFound(String),
    /// 404.
    #[error("container {container:?} not found in pod {pod:?}")]
    ContainerNotFound { container: String, pod: String },
    /// 400: no instance to read (not started, no previous one, ...).
    #[error("{0}")]
    NoLog(String),
    /// 400.
    #[error("failed to open log file {}: {source}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// A log file opened at the place the query starts reading it.
pub(crate) struct OpenedLog {
    pub file: LogFile,
    pub path: PathBuf,
    /// The running instance's container ID, when the file is that instance's (only it is
    /// followed, and only until it stops).
    pub running_id: Option<String>,
}

/// Finds the pod and container in the registry and opens the instance's file, positioned for
/// `tailLines`. Blocking (reads the log directory).
pub(crate) fn open(
    registry: &Registry,
    key: &PodKey,
    container: &str,
    opts: &LogOptions,
) -> Result<OpenedLog, OpenError> {
    let record = registry.pod(key).ok_or_else(|| OpenError::PodNotFound(key.name.clone()))?;
    let pod = &record.pod;
    if !has_container(pod, container) {
        return Err(OpenError::ContainerNotFound { container: container.to_string(), pod: key.name.clone() });
    }
    let Some(status) = container_status(pod, container) else {
        return Err(OpenError::NoLog(format!(
            "container {container:?} in pod {:?} is not available",
            key.name
        )));
    };
    let dir = log_directory(pod).join(container);
    let files = log_files(&dir).map_err(|source| OpenError::Open { path: dir.clone(), source })?;
    let n = select_log_file(&files, Some(status), opts.previous, container, &key.name)
        .map_err(OpenError::NoLog)?;
    let path = dir.join(format!("{n}.log"));
    let open_error = |source| OpenError::Open { path: path.clone(), source };
    let mut file = LogFile::open(&path).map_err(open_error)?;
    if let Some(lines) = opts.tail_lines {
        file.seek_tail(usize::try_from(lines).unwrap_or(usize::MAX)).map_err(open_error)?;
    }
    let running_id = status
        .container_id
        .clone()
        .filter(|_| status.state.as_ref().is_some_and(|s| s.running.is_some()))
        .filter(|_| i64::from(status.restart_count) == i64::from(n));
    Ok(OpenedLog { file, path, running_id })
}

/// The container is in the pod's spec (regular, init or ephemeral), as `GetContainerSpec`.
fn has_container(pod: &Pod, name: &str) -> bool {
    let Some(spec) = pod.spec.as_ref() else { return false };
    spec.containers.iter().any(|c| c.name == name)
        || spec.init_containers.iter().flatten().any(|c| c.name == name)
        || spec.ephemeral_containers.iter().flatten().any(|c| c.name == name)
}

/// Whether the instance `id` is still the container's running one. A pod gone from the
/// registry has stopped.
fn still_running(registry: &Registry, key: &PodKey, container: &str, id: &str) -> bool {
    registry.pod(key).is_some_and(|r| {
        container_status(&r.pod, container).is_some_and(|st| {
            st.container_id.as_deref() == Some(id) && st.state.as_ref().is_some_and(|s| s.running.is_some())
        })
    })
}

/// Where a reader puts its output: chunks for the response body. A client gone is a broken pipe.
struct ChunkWriter {
    tx: mpsc::Sender<io::Result<Bytes>>,
}

impl Write for ChunkWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Called on a blocking thread only (see `Reader::step`).
        self.tx.blocking_send(Ok(Bytes::copy_from_slice(buf))).map_err(|_| io::ErrorKind::BrokenPipe)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The state of one response: moved onto a blocking thread for each read, and back.
struct Reader {
    follower: Follower,
    filter: LogFilter,
    out: ChunkWriter,
}

impl Reader {
    async fn step<T: Send + 'static>(
        self,
        f: impl FnOnce(&mut Self) -> io::Result<T> + Send + 'static,
    ) -> Option<(Self, io::Result<T>)> {
        let mut this = self;
        tokio::task::spawn_blocking(move || {
            let r = f(&mut this);
            (this, r)
        })
        .await
        .ok()
    }
}

/// What a streamed log needs to know to follow its container.
pub(crate) struct FollowContext {
    pub registry: Registry,
    pub key: PodKey,
    pub container: String,
    pub cancel: CancellationToken,
}

/// Streams the opened log as body chunks: what the file holds, then with `follow` on a running
/// instance, what it gains (across rotations) until the instance stops, the client goes away or
/// `cancel` fires. A read error after the first byte ends the body with that error.
pub(crate) fn stream(
    opened: OpenedLog,
    opts: &LogOptions,
    ctx: FollowContext,
) -> mpsc::Receiver<io::Result<Bytes>> {
    let (tx, rx) = mpsc::channel(CHANNEL_CHUNKS);
    let follow_id = opened.running_id.filter(|_| opts.follow && !opts.previous);
    let filter = LogFilter::new(opts);
    tokio::spawn(run_stream(opened.file, opened.path, filter, follow_id, tx, ctx));
    rx
}

async fn run_stream(
    mut file: LogFile,
    path: PathBuf,
    mut filter: LogFilter,
    follow_id: Option<String>,
    tx: mpsc::Sender<io::Result<Bytes>>,
    ctx: FollowContext,
) {
    let mut out = ChunkWriter { tx: tx.clone() };
    // Without follow only the current file is read, to its very end, as the kubelet does.
    let last = follow_id.is_none();
    let first = tokio::task::spawn_blocking(move || {
        let r = file.drain(&mut filter, last, &mut out);
        (file, filter, out, r)
    });
    let Ok((file, filter, out, first)) = first.await else { return };
    if let Err(e) = first {
        return fail(&tx, e).await;
    }
    let mut reader = Reader { follower: Follower::new(path, file), filter, out };
    let Some(id) = follow_id else { return };
    let mut polls = 0u32;
    let mut stopping = false;
    loop {
        if reader.filter.full() {
            return;
        }
        tokio::select! {
            _ = ctx.cancel.cancelled() => return,
            _ = tx.closed() => return,
            _ = tokio::time::sleep(POLL) => {}
        }
        polls = polls.wrapping_add(1);
        if !stopping && polls.is_multiple_of(STATUS_EVERY) {
            stopping = !still_running(&ctx.registry, &ctx.key, &ctx.container, &id);
        }
        let Some((next, grew)) = reader.step(|r| r.follower.poll(&mut r.filter, &mut r.out)).await else {
            return;
        };
        reader = next;
        match grew {
            Ok(true) => {}
            Ok(false) if stopping => {
                if let Some((_, Err(e))) = reader.step(|r| r.follower.finish(&mut r.filter, &mut r.out)).await
                {
                    fail(&tx, e).await;
                }
                return;
            }
            Ok(false) => {}
            Err(e) => return fail(&tx, e).await,
        }
    }
}

/// Ends the body with `e`, unless the client is gone anyway.
async fn fail(tx: &mpsc::Sender<io::Result<Bytes>>, e: io::Error) {
    if e.kind() != io::ErrorKind::BrokenPipe {
        debug!(error = %e, "reading a container log failed");
        let _ = tx.send(Err(e)).await;
    }
}
