//! A pod's container logs as the runtime writes them (`<log dir>/<container>/<N>.log`, one file
//! per container instance, CRI-framed records), read the way the kubelet serves them: which
//! instance (current or previous) by the kubelet's rules, records de-framed, rotations followed.
//! `crilet logs` and the kubelet API's `containerLogs` both read through here.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

pub use crate::model::keys::LOG_DIRECTORY as LOG_DIRECTORY_ANNOTATION;

/// `--pod-logs-dir`'s default, used when a pod lacks the annotation.
const DEFAULT_POD_LOGS_DIR: &str = "/var/log/pods";
/// Polls without growth after which a rotated file counts as finished. The runtime can still
/// write to the old file for a moment after the new one appears at the path: containerd creates
/// the new file, switches its writer over, then closes the old writer, which flushes what it
/// still holds.
const ROTATED_QUIET_POLLS: u32 = 3;
/// Output is written out in pieces of about this size.
const OUT_CHUNK: usize = 64 * 1024;

/// One record of a CRI log file: `<RFC3339Nano> <stdout|stderr> <P|F>[:tags] <content>`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct CriLine<'a> {
    pub(crate) time: &'a [u8],
    /// `time`, parsed.
    pub(crate) at: jiff::Timestamp,
    /// A `P` record: the content continues in the next record.
    pub(crate) partial: bool,
    pub(crate) content: &'a [u8],
}

/// Parses one record (its trailing newline optional); `None` for a malformed one, which the
/// kubelet skips too.
pub(crate) fn parse_cri_line(line: &[u8]) -> Option<CriLine<'_>> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let mut parts = line.splitn(4, |&b| b == b' ');
    let time = parts.next()?;
    let at = std::str::from_utf8(time).ok()?.parse::<jiff::Timestamp>().ok()?;
    if !matches!(parts.next()?, b"stdout" | b"stderr") {
        return None;
    }
    let tag = parts.next()?;
    let partial = tag.split(|&b| b == b':').next() == Some(b"P");
    Some(CriLine { time, at, partial, content: parts.next().unwrap_or_default() })
}

/// Turns CRI records, one at a time, into output: `crilet logs`' [`LogPrinter`], and the kubelet
/// API's filter (`since`, `limitBytes`), share the reading of files and rotations below.
pub(crate) trait RecordSink {
    /// Appends what `record` (one line of the file, its newline optional) prints to `out`.
    fn push(&mut self, record: &[u8], out: &mut Vec<u8>);
    /// Whether nothing more will be printed (a byte limit is reached): reading stops.
    fn full(&self) -> bool {
        false
    }
}

/// Turns CRI records into the text `kubectl logs` prints: partial records joined, and with
/// `--timestamps` each line prefixed by the time of its first record.
#[derive(Debug)]
pub(crate) struct LogPrinter {
    timestamps: bool,
    at_line_start: bool,
}

impl LogPrinter {
    pub(crate) fn new(timestamps: bool) -> Self {
        Self { timestamps, at_line_start: true }
    }
}

impl RecordSink for LogPrinter {
    fn push(&mut self, record: &[u8], out: &mut Vec<u8>) {
        let Some(line) = parse_cri_line(record) else { return };
        if self.timestamps && self.at_line_start {
            out.extend_from_slice(line.time);
            out.push(b' ');
        }
        out.extend_from_slice(line.content);
        if !line.partial {
            out.push(b'\n');
        }
        self.at_line_start = !line.partial;
    }
}

/// Which instance's file (`N.log`) to read, by the kubelet's rules (`validateContainerLogStatus`).
/// The newest instance's number is the status's restartCount. In back-off (waiting, with a
/// last termination) the last state *is* that newest instance; otherwise it is the one before.
pub(crate) fn select_log_file(
    files: &[u32],
    status: Option<&ContainerStatus>,
    previous: bool,
    container: &str,
    pod: &str,
) -> Result<u32, String> {
    let reported = status.map_or(0, |st| u32::try_from(st.restart_count).unwrap_or(0));
    // The files can be ahead of a status that lags (the instance was created after the status
    // was read): a file numbered above the restartCount is a newer instance, so the one before
    // it has terminated.
    let top = files.iter().copied().max().filter(|&t| t > reported);
    let newest = top.unwrap_or(reported);
    let state = status.and_then(|st| st.state.clone()).unwrap_or_default();
    let exited_before =
        top.is_some() || status.and_then(|st| st.last_state.as_ref()).is_some_and(|l| l.terminated.is_some());
    let waiting = top.is_none() && state.running.is_none() && state.terminated.is_none();
    let highest_below = |limit: u32| files.iter().copied().filter(|&n| n < limit).max();
    if previous {
        let limit = if waiting { newest.saturating_add(1) } else { newest };
        return highest_below(limit)
            .filter(|_| exited_before)
            .ok_or_else(|| format!("previous terminated container {container:?} in pod {pod:?} not found"));
    }
    let found = highest_below(newest.saturating_add(1));
    let reason = state.waiting.as_ref().map_or("", |w| w.reason.as_deref().unwrap_or(""));
    match (status, &state.waiting) {
        (Some(_), _) if !waiting || exited_before => found.ok_or_else(|| not_started(container, pod, reason)),
        (Some(_), Some(_)) => Err(not_started(container, pod, reason)),
        _ => Err(format!("container {container:?} in pod {pod:?} is waiting to start - no logs yet")),
    }
}

fn not_started(container: &str, pod: &str, reason: &str) -> String {
    let why = match reason {
        "ErrImagePull" => "image can't be pulled",
        "ImagePullBackOff" => "trying and failing to pull image",
        "" => "ContainerCreating",
        r => r,
    };
    format!("container {container:?} in pod {pod:?} is waiting to start: {why}")
}

/// Byte offset where the last `n` lines start (the kubelet's `FindTailLineStartIndex`).
pub(crate) fn tail_offset<R: Read + Seek>(r: &mut R, n: usize) -> io::Result<u64> {
    let len = r.seek(SeekFrom::End(0))?;
    let mut end = len;
    let mut seen = 0;
    let mut buf = vec![0u8; 64 * 1024];
    while end > 0 {
        let size = usize::try_from(end.min(buf.len() as u64)).unwrap_or(buf.len());
        let start = end - size as u64;
        r.seek(SeekFrom::Start(start))?;
        r.read_exact(&mut buf[..size])?;
        for (i, _) in buf[..size].iter().enumerate().rev().filter(|&(_, &b)| b == b'\n') {
            seen += 1;
            if seen == n + 1 {
                return Ok(start + i as u64 + 1);
            }
        }
        end = start;
    }
    Ok(0)
}

/// The pod's status entry for a container (init or regular).
pub(crate) fn container_status<'a>(pod: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    let status = pod.status.as_ref()?;
    status
        .init_container_statuses
        .iter()
        .chain(&status.container_statuses)
        .chain(&status.ephemeral_container_statuses)
        .flatten()
        .find(|c| c.name == name)
}

/// The pod's log directory: its `crilet.io/log-directory` annotation, else the kubelet's layout.
pub(crate) fn log_directory(pod: &Pod) -> PathBuf {
    let meta = &pod.metadata;
    match meta.annotations.as_ref().and_then(|a| a.get(LOG_DIRECTORY_ANNOTATION)) {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(DEFAULT_POD_LOGS_DIR).join(format!(
            "{}_{}_{}",
            meta.namespace.as_deref().unwrap_or(""),
            meta.name.as_deref().unwrap_or(""),
            meta.uid.as_deref().unwrap_or("")
        )),
    }
}

/// The instance numbers `N` of the `N.log` files in a container's log directory.
pub(crate) fn log_files(dir: &Path) -> io::Result<Vec<u32>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut files = Vec::new();
    for entry in entries {
        let name = entry?.file_name();
        if let Some(n) = name.to_str().and_then(|n| n.strip_suffix(".log")).and_then(|n| n.parse().ok()) {
            files.push(n);
        }
    }
    Ok(files)
}

/// An open log file, read record by record from `offset`.
pub(crate) struct LogFile {
    pub(crate) reader: BufReader<File>,
    ino: u64,
    offset: u64,
    /// Bytes of a record whose newline has not been written yet.
    pending: Vec<u8>,
}

impl LogFile {
    pub(crate) fn open(path: &Path) -> io::Result<Self> {
        let file = File::open(path)?;
        let ino = file.metadata()?.ino();
        Ok(Self { reader: BufReader::new(file), ino, offset: 0, pending: Vec::new() })
    }

    pub(crate) fn seek(&mut self, offset: u64) -> io::Result<()> {
        self.offset = self.reader.seek(SeekFrom::Start(offset))?;
        Ok(())
    }

    /// Positions the file at its last `lines` records.
    pub(crate) fn seek_tail(&mut self, lines: usize) -> io::Result<()> {
        let start = tail_offset(self.reader.get_mut(), lines)?;
        self.seek(start)
    }

    /// Prints every complete record up to the end of the file (and with `last`, an unterminated
    /// final one) to `out`; reports whether anything was read.
    pub(crate) fn drain(
        &mut self,
        printer: &mut dyn RecordSink,
        last: bool,
        out: &mut dyn Write,
    ) -> io::Result<bool> {
        if self.reader.get_ref().metadata()?.len() < self.offset {
            // Truncated in place: start over, as the kubelet does.
            self.pending.clear();
            self.seek(0)?;
        }
        let mut buf = Vec::new();
        let mut grew = false;
        while !printer.full() {
            let n = self.reader.read_until(b'\n', &mut self.pending)?;
            self.offset += n as u64;
            grew |= n > 0;
            if n == 0 || !self.pending.ends_with(b"\n") {
                break;
            }
            printer.push(&self.pending, &mut buf);
            self.pending.clear();
            if buf.len() >= OUT_CHUNK {
                out.write_all(&std::mem::take(&mut buf))?;
            }
        }
        if last && !self.pending.is_empty() && !printer.full() {
            printer.push(&std::mem::take(&mut self.pending), &mut buf);
        }
        out.write_all(&buf)?;
        out.flush()?;
        Ok(grew)
    }
}

/// Follows a container's log path across rotations (renamed away, a new file opened at the same
/// path): the files that held the path, oldest first. Only the oldest is read until a newer one
/// exists and the oldest has stopped growing for [`ROTATED_QUIET_POLLS`] polls, so records the
/// runtime wrote to the old file after the rename (before or just after its reopen) come out
/// before the new file's, in the order they were written.
pub(crate) struct Follower {
    path: PathBuf,
    files: VecDeque<LogFile>,
    quiet: u32,
}

impl Follower {
    pub(crate) fn new(path: PathBuf, current: LogFile) -> Self {
        Self { path, files: VecDeque::from([current]), quiet: 0 }
    }

    /// One poll: notices a new file at the path, prints what is new in order; reports whether
    /// anything was read.
    pub(crate) fn poll(&mut self, printer: &mut dyn RecordSink, out: &mut dyn Write) -> io::Result<bool> {
        self.notice_rotation();
        let mut grew = false;
        loop {
            let newest = self.files.len() <= 1;
            let Some(front) = self.files.front_mut() else { break };
            let front_grew = front.drain(printer, false, out)?;
            grew |= front_grew;
            if newest || front_grew {
                self.quiet = 0;
                break;
            }
            self.quiet += 1;
            if self.quiet < ROTATED_QUIET_POLLS {
                break;
            }
            // Finished: its unterminated end (if any) will never be completed.
            front.drain(printer, true, out)?;
            self.files.pop_front();
            self.quiet = 0;
        }
        Ok(grew)
    }

    /// Prints everything left in every file, in order (the followed instance has exited).
    pub(crate) fn finish(&mut self, printer: &mut dyn RecordSink, out: &mut dyn Write) -> io::Result<()> {
        self.notice_rotation();
        for file in &mut self.files {
            file.drain(printer, true, out)?;
        }
        self.files.clear();
        Ok(())
    }

    /// Opens the file now at the path if it is not one already followed. The inode of what was
    /// opened counts, as the path may have been rotated again in between.
    fn notice_rotation(&mut self) {
        let known = |files: &VecDeque<LogFile>, ino: u64| files.iter().any(|f| f.ino == ino);
        match std::fs::metadata(&self.path) {
            Ok(m) if !known(&self.files, m.ino()) => {}
            _ => return,
        }
        if let Ok(f) = LogFile::open(&self.path)
            && !known(&self.files, f.ino)
        {
            self.files.push_back(f);
        }
    }
}

#[cfg(test)]
#[path = "logs_tests.rs"]
mod tests;
