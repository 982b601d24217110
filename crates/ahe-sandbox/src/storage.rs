//! Disk use of a sandbox, watched from the host: the task's storage limit and the data the
//! host reserve (`[sandbox] min_free_disk`) needs to pick which trials to stop.
//!
//! A [`Meter`] sums the blocks allocated under a sandbox's host directories (docker: the
//! container's overlay2 upper dir; local: the trial's `fs/`, which holds every writable dir
//! the sandbox binds) again and again, off the async runtime. The pause between two walks
//! grows with the walk's cost (20× the last walk, between [`MIN_INTERVAL`] and
//! [`MAX_INTERVAL`]; at least [`MEASURE_INTERVAL`] without a limit), so a watcher spends at
//! most ~5% of one core however large the tree.
//! A single file cannot outgrow the limit between two walks: the backends also set
//! `RLIMIT_FSIZE` to the limit (a write past it fails with `EFBIG`, and `SIGXFSZ` ends the
//! writer), so a runaway `yes > f` or `dd` stops at the limit by itself; several files
//! written at once are caught by the next walk.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Shortest pause between two walks.
pub const MIN_INTERVAL: Duration = Duration::from_millis(50);
/// Shortest pause of a meter without a limit (it only tells the host reserve which trial is
/// largest).
pub const MEASURE_INTERVAL: Duration = Duration::from_secs(1);
/// Longest pause between two walks.
pub const MAX_INTERVAL: Duration = Duration::from_secs(3);

/// Bytes allocated on disk under `dirs` (blocks, so sparse files count what they use; a file
/// with several links once; symbolic links are not followed; files that vanish meanwhile
/// are skipped), and the number of entries seen.
pub fn usage(dirs: &[PathBuf]) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut bytes = 0u64;
    let mut entries = 0u64;
    let mut linked: HashSet<(u64, u64)> = HashSet::new();
    let mut stack: Vec<PathBuf> = dirs.to_vec();
    while let Some(dir) = stack.pop() {
        let Ok(md) = std::fs::symlink_metadata(&dir) else {
            continue;
        };
        bytes += md.blocks() * 512;
        entries += 1;
        if !md.is_dir() {
            continue;
        }
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(e.path());
                continue;
            }
            let Ok(md) = e.metadata() else { continue };
            entries += 1;
            if md.nlink() > 1 && !linked.insert((md.dev(), md.ino())) {
                continue;
            }
            bytes += md.blocks() * 512;
        }
    }
    (bytes, entries)
}

/// The largest file (bytes) a sandbox with storage limit `storage_mb` may write: the limit
/// (`RLIMIT_FSIZE`; `None`: no limit).
pub fn fsize_limit(storage_mb: Option<u64>) -> Option<u64> {
    storage_mb
        .filter(|m| *m > 0)
        .map(|m| m.saturating_mul(1 << 20).min(i64::MAX as u64))
}

/// Why a trial was stopped from outside its agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// Its sandbox wrote more than the task allows: the agent's failure.
    OverLimit(String),
    /// The host ran short of disk and this trial was among the largest: an infra error, re-run.
    HostReserve(String),
}

/// One sandbox's disk use, measured by a background watcher until dropped.
pub struct Meter {
    dirs: Vec<PathBuf>,
    limit: Option<u64>,
    bytes: AtomicU64,
    peak: AtomicU64,
    walks: AtomicU64,
    walk_ns: AtomicU64,
    stop: Mutex<Option<Stop>>,
    notify: tokio::sync::Notify,
    done: AtomicBool,
    started: Instant,
    /// When the limit was first seen exceeded.
    tripped_after: Mutex<Option<Duration>>,
}

impl std::fmt::Debug for Meter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meter")
            .field("dirs", &self.dirs)
            .field("limit", &self.limit)
            .field("bytes", &self.bytes())
            .finish()
    }
}

/// What a meter saw, for the trial's result and the benchmarks.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MeterStats {
    /// The most bytes seen at once.
    pub peak_bytes: u64,
    /// Walks made.
    pub walks: u64,
    /// CPU-ish time of all walks (wall time of the blocking walks).
    pub walk_ms: f64,
}

/// The reason text of a trial over its storage limit.
pub fn over_limit_reason(limit_mb: u64) -> String {
    format!("exceeded the task's storage limit ({limit_mb} MiB)")
}

impl Meter {
    /// Starts watching `dirs` (on the current tokio runtime); `limit_mb`: the task's limit
    /// (`None`: only measure, for the host reserve). The watcher stops when the meter is
    /// dropped or [`Meter::finish`]ed.
    pub fn start(dirs: Vec<PathBuf>, limit_mb: Option<u64>) -> Arc<Meter> {
        let m = Arc::new(Meter {
            dirs,
            limit: limit_mb.map(|mb| mb.saturating_mul(1 << 20)),
            bytes: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            walks: AtomicU64::new(0),
            walk_ns: AtomicU64::new(0),
            stop: Mutex::new(None),
            notify: tokio::sync::Notify::new(),
            done: AtomicBool::new(false),
            started: Instant::now(),
            tripped_after: Mutex::new(None),
        });
        let weak = Arc::downgrade(&m);
        let min = if limit_mb.is_some() {
            MIN_INTERVAL
        } else {
            MEASURE_INTERVAL
        };
        let limit_mb = limit_mb.unwrap_or(0);
        tokio::spawn(async move {
            loop {
                let Some(m) = weak.upgrade() else { return };
                if m.done.load(Ordering::SeqCst) || m.stopped().is_some() {
                    return;
                }
                let dirs = m.dirs.clone();
                drop(m);
                let t = Instant::now();
                let Ok((bytes, _)) = tokio::task::spawn_blocking(move || usage(&dirs)).await else {
                    return;
                };
                let spent = t.elapsed();
                let Some(m) = weak.upgrade() else { return };
                m.walks.fetch_add(1, Ordering::Relaxed);
                m.walk_ns
                    .fetch_add(spent.as_nanos() as u64, Ordering::Relaxed);
                m.bytes.store(bytes, Ordering::SeqCst);
                m.peak.fetch_max(bytes, Ordering::SeqCst);
                if m.limit.is_some_and(|l| bytes > l) {
                    *m.tripped_after.lock().unwrap() = Some(m.started.elapsed());
                    m.stop_with(Stop::OverLimit(over_limit_reason(limit_mb)));
                    return;
                }
                drop(m);
                tokio::time::sleep((spent * 20).clamp(min, MAX_INTERVAL)).await;
            }
        });
        m
    }

    /// The directories watched.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Bytes at the last walk.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::SeqCst)
    }

    /// The limit in bytes, if any.
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// How long after the start the limit was seen exceeded.
    pub fn tripped_after(&self) -> Option<Duration> {
        *self.tripped_after.lock().unwrap()
    }

    /// Peak, walks and their cost so far.
    pub fn stats(&self) -> MeterStats {
        MeterStats {
            peak_bytes: self.peak.load(Ordering::SeqCst),
            walks: self.walks.load(Ordering::Relaxed),
            walk_ms: self.walk_ns.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }

    /// Stops the trial from outside (the first reason wins).
    pub fn stop_with(&self, why: Stop) {
        let mut s = self.stop.lock().unwrap();
        if s.is_none() {
            *s = Some(why);
            self.notify.notify_waiters();
            self.notify.notify_one();
        }
    }

    /// Why the trial was stopped, if it was.
    pub fn stopped(&self) -> Option<Stop> {
        self.stop.lock().unwrap().clone()
    }

    /// Resolves once the trial is stopped (over its limit, or for the host reserve).
    pub async fn wait_stop(&self) -> Stop {
        loop {
            let n = self.notify.notified();
            if let Some(s) = self.stopped() {
                return s;
            }
            n.await;
        }
    }

    /// Ends the watching (the trial is over).
    pub fn finish(&self) {
        self.done.store(true, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_counts_blocks_once_per_inode_and_not_holes() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("d");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/a"), vec![1u8; 1 << 20]).unwrap();
        std::fs::hard_link(d.join("sub/a"), d.join("b")).unwrap();
        let f = std::fs::File::create(d.join("sparse")).unwrap();
        f.set_len(1 << 30).unwrap();
        std::os::unix::fs::symlink("/usr", d.join("link")).unwrap();
        let (bytes, entries) = usage(&[d]);
        assert!(bytes >= 1 << 20, "{bytes}");
        assert!(
            bytes < (1 << 20) + (1 << 16),
            "{bytes}: counted twice or the hole"
        );
        assert_eq!(entries, 6);
    }

    #[tokio::test]
    async fn a_meter_stops_past_its_limit() {
        let t = tempfile::tempdir().unwrap();
        let m = Meter::start(vec![t.path().to_path_buf()], Some(1));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(m.stopped(), None);
        std::fs::write(t.path().join("big"), vec![1u8; 2 << 20]).unwrap();
        let s = tokio::time::timeout(Duration::from_secs(3), m.wait_stop())
            .await
            .unwrap();
        assert_eq!(
            s,
            Stop::OverLimit("exceeded the task's storage limit (1 MiB)".into())
        );
        assert!(m.stats().peak_bytes >= 2 << 20);
    }
}
