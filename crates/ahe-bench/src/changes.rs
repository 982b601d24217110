//! What a phase of a trial changed in the sandbox's file system, read on the host from the
//! sandbox's writable layer ([`ahe_sandbox::Layer`]): snapshots of the layer's entries, the
//! difference between two snapshots, and whether a changed file was read since a point in
//! time (its access time, reset before the verifier runs).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use ahe_sandbox::Layer;

/// At most this many entries are walked per snapshot (an agent that built a tree larger than
/// this leaves the rest unchecked, said in the trial's reasons).
pub const MAX_ENTRIES: usize = 400_000;

/// Sandbox top dirs that are the verifier's ground (reset or recreated before it runs) or
/// kernel file systems: their changes say nothing here.
const SKIP_TOPS: &[&str] = &["tests", "solution", "logs", "proc", "sys", "dev"];

/// What kind of entry a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// An overlay whiteout: the image's file was deleted.
    Deleted,
    /// A FIFO, socket or device.
    Other,
}

/// The identity of an entry: a rewrite, replacement or `chmod` changes its inode or ctime,
/// and no process in a sandbox can set a ctime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    kind: Kind,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    mode: u32,
}

/// One entry as walked: its identity and its access time (kept apart: a read is not a change).
#[derive(Debug, Clone, Copy)]
struct Entry {
    stamp: Stamp,
    atime: (i64, i64),
}

/// The entries of a sandbox's writable layer at one moment, by sandbox path.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    entries: HashMap<String, Entry>,
    /// Whether the walk stopped at [`MAX_ENTRIES`].
    pub truncated: bool,
    /// Directories seen but not walked into ([`Snapshot::take_after`]).
    pub pruned: usize,
}

/// One path the phase created, altered or deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    /// The path in the sandbox.
    pub path: String,
    /// The host path of its current content (in the writable layer).
    pub host: PathBuf,
    /// What it is now.
    pub kind: Kind,
    /// Whether the image had this path before the phase (altered) or not (created).
    pub existed: bool,
    /// Permission bits.
    pub mode: u32,
}

impl Changed {
    /// The last path component.
    pub fn name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or("")
    }

    /// The directory holding it (`/` for a top-level entry).
    pub fn dir(&self) -> &str {
        match self.path.rfind('/') {
            Some(0) | None => "/",
            Some(i) => &self.path[..i],
        }
    }
}

impl Snapshot {
    /// Walks every writable part of `layer`.
    pub fn take(layer: &Layer) -> Snapshot {
        Snapshot::take_where(layer, &|_| true)
    }

    /// Walks `layer` after the verifier ran, but not into a directory made while it ran
    /// (neither in `handed` nor in the image) unless `keep` says so: what the verifier's run
    /// creates there (package caches, unpacked test dependencies) is its own work and
    /// decides nothing, so its walk would be cost without a verdict. A directory that was
    /// there is walked whole: an altered or replaced file in it still shows.
    pub fn take_after(
        layer: &Layer,
        handed: &Snapshot,
        keep: &(dyn Fn(&str) -> bool + Sync),
    ) -> Snapshot {
        Snapshot::take_where(layer, &|p| {
            handed.contains(p) || keep(p) || layer.image_file(p).is_some()
        })
    }

    fn take_where(layer: &Layer, descend: &(dyn Fn(&str) -> bool + Sync)) -> Snapshot {
        let w = Walker {
            descend,
            seen: AtomicUsize::new(0),
            truncated: AtomicBool::new(false),
            found: Mutex::new(Found::default()),
        };
        let mut stack: Vec<(PathBuf, String)> = (layer.upper.iter())
            .map(|(mount, host)| (host.clone(), mount.trim_end_matches('/').to_string()))
            .filter(|(_, top)| !SKIP_TOPS.contains(&top.trim_start_matches('/')))
            .collect();
        // Most layers are small: walked on this thread (a hand-over to other threads costs a
        // wake-up each, on a loaded host more than a small walk); past `PARALLEL_PAST`
        // entries the directories left are walked on rayon's threads.
        while w.seen.load(Ordering::Relaxed) < PARALLEL_PAST {
            let Some((dir, spath)) = stack.pop() else {
                break;
            };
            w.read(&dir, &spath, &mut |host, sub| stack.push((host, sub)));
        }
        if !stack.is_empty() {
            let w = &w;
            rayon::scope(|s| {
                for (dir, spath) in stack {
                    s.spawn(move |s| w.dir(s, dir, spath));
                }
            });
        }
        let found = w.found.into_inner().unwrap_or_else(|e| e.into_inner());
        Snapshot {
            entries: found.entries.into_iter().collect(),
            truncated: w.truncated.into_inner(),
            pruned: found.pruned,
        }
    }

    /// Stamps `changed` entries anew (after [`reset_atime`] changed their ctime), so that a
    /// later snapshot does not count the reset as a change.
    pub fn refresh<'a>(&mut self, changed: impl IntoIterator<Item = &'a Changed>) {
        for c in changed {
            if let Ok(md) = std::fs::symlink_metadata(&c.host) {
                self.entries
                    .insert(c.path.clone(), entry(&md, kind_of(&md)));
            }
        }
    }

    /// Whether the next read of `path` might not show in its access time, so that it must be
    /// reset ([`reset_atime`]) before the verifier runs: with `relatime` (the default mount
    /// option) a read updates the access time only when it is not later than the
    /// modification or change time, and an access time in the future (`touch -a -d`) would
    /// hide any read. `now` is the present as seconds and nanoseconds since the epoch.
    pub fn needs_reset(&self, path: &str, now: (i64, i64)) -> bool {
        self.entries
            .get(path)
            .is_none_or(|e| e.atime > now || (e.atime > e.stamp.mtime && e.atime > e.stamp.ctime))
    }

    /// Whether `path` was read between `earlier` and `self` (its access time moved on); a
    /// path gone since, or not in `earlier`, counts as read (a file that deletes itself once
    /// loaded is judged like one that stays).
    pub fn read_since(&self, earlier: &Snapshot, path: &str) -> bool {
        match (self.entries.get(path), earlier.entries.get(path)) {
            (Some(now), Some(then)) => now.atime > then.atime,
            _ => true,
        }
    }

    /// Number of entries seen.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry was seen.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Files and links of `earlier` no longer in `self` (removed since; directories aside).
    pub fn gone_since(&self, earlier: &Snapshot) -> Vec<String> {
        let mut out: Vec<String> = (earlier.entries.iter())
            .filter(|(p, e)| e.stamp.kind != Kind::Dir && !self.entries.contains_key(*p))
            .map(|(p, _)| p.clone())
            .collect();
        out.sort();
        out
    }

    /// The tops of the directory trees made since `earlier`: directories of `self` that
    /// neither `earlier` nor the image has, under one that either has.
    pub fn dirs_made_since(&self, earlier: &Snapshot, layer: &Layer) -> Vec<String> {
        let known = |p: &str| p == "/" || earlier.contains(p) || layer.image_file(p).is_some();
        let mut out: Vec<String> = (self.entries.iter())
            .filter(|(p, e)| e.stamp.kind == Kind::Dir && !known(p) && known(parent(p)))
            .map(|(p, _)| p.clone())
            .collect();
        out.sort();
        out
    }

    /// Whether `path` was in the writable layer then.
    pub fn contains(&self, path: &str) -> bool {
        self.entries.contains_key(path)
    }

    /// The files, links and deletions of `self` (later) that are new or different since
    /// `before` (directories are not listed; their content is). A path counts as existing
    /// before when `before` holds it or the image has it.
    pub fn changes_since(&self, before: &Snapshot, layer: &Layer) -> Vec<Changed> {
        // Whether the image has a directory, asked once per directory, and not at all below
        // one it lacks: a path whose directory the image lacks is created without a look at
        // each of its files.
        let mut image_dirs: HashMap<String, bool> = HashMap::new();
        let mut out: Vec<Changed> = self
            .entries
            .iter()
            .filter(|(p, e)| {
                e.stamp.kind != Kind::Dir
                    && before.entries.get(*p).map(|b| b.stamp) != Some(e.stamp)
            })
            .map(|(p, e)| {
                let st = &e.stamp;
                let dir = parent(p);
                let in_image = before.entries.contains_key(p)
                    || (image_has_dir(layer, &mut image_dirs, dir)
                        && layer.image_file(p).is_some());
                Changed {
                    path: p.clone(),
                    host: layer.upper_file(p).unwrap_or_default(),
                    kind: st.kind,
                    existed: in_image,
                    mode: st.mode,
                }
            })
            .collect();
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out
    }
}

/// Entries a walk records on its own thread before it walks the rest on rayon's threads.
const PARALLEL_PAST: usize = 2_000;

/// What a walk found, gathered from the threads that walked its directories.
#[derive(Default)]
struct Found {
    entries: Vec<(String, Entry)>,
    pruned: usize,
}

/// One walk of a writable layer, a task per directory on rayon's threads (a large layer is
/// thousands of directories; each is read and its entries stat'ed apart).
struct Walker<'a> {
    /// Whether to walk into a directory (by sandbox path).
    descend: &'a (dyn Fn(&str) -> bool + Sync),
    /// Entries recorded so far (at most [`MAX_ENTRIES`]).
    seen: AtomicUsize,
    truncated: AtomicBool,
    found: Mutex<Found>,
}

impl Walker<'_> {
    /// Walks host directory `dir` (sandbox path `spath`) and its subdirectories as further
    /// tasks of `scope`.
    fn dir<'s>(&'s self, scope: &rayon::Scope<'s>, dir: PathBuf, spath: String) {
        self.read(&dir, &spath, &mut |host, sub| {
            scope.spawn(move |s| self.dir(s, host, sub));
        });
    }

    /// Records the entries of host directory `dir` (sandbox path `spath`) and hands each
    /// subdirectory to walk into to `sub` (host path, sandbox path).
    fn read(&self, dir: &Path, spath: &str, sub: &mut dyn FnMut(PathBuf, String)) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        let mut local = Found::default();
        for e in rd.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if spath.is_empty() && SKIP_TOPS.contains(&name.as_ref()) {
                continue;
            }
            let mut p = String::with_capacity(spath.len() + 1 + name.len());
            p.push_str(spath);
            p.push('/');
            p.push_str(&name);
            if skip_sandbox_path(&p) {
                continue;
            }
            let Ok(md) = e.metadata() else { continue };
            if self.seen.fetch_add(1, Ordering::Relaxed) >= MAX_ENTRIES {
                self.truncated.store(true, Ordering::Relaxed);
                break;
            }
            let kind = kind_of(&md);
            if kind == Kind::Dir {
                if (self.descend)(&p) {
                    sub(e.path(), p.clone());
                } else {
                    local.pruned += 1;
                }
            }
            local.entries.push((p, entry(&md, kind)));
        }
        let mut f = self.found.lock().unwrap_or_else(|e| e.into_inner());
        f.entries.append(&mut local.entries);
        f.pruned += local.pruned;
    }
}

/// The directory holding `p` (`/` for a top-level entry).
fn parent(p: &str) -> &str {
    match p.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &p[..i],
    }
}

/// Whether the image has directory `dir`, from `known` when asked before; a directory below
/// one the image lacks is not looked up.
fn image_has_dir(layer: &Layer, known: &mut HashMap<String, bool>, dir: &str) -> bool {
    if dir == "/" {
        return true;
    }
    if let Some(&k) = known.get(dir) {
        return k;
    }
    let has = image_has_dir(layer, known, parent(dir)) && layer.image_file(dir).is_some();
    known.insert(dir.to_string(), has);
    has
}

/// Paths the verifier's own run and the sandbox's plumbing write (caches), never read as code
/// that decides a reward.
pub(crate) fn skip_sandbox_path(p: &str) -> bool {
    p.ends_with("/.pytest_cache") || p.ends_with("/.ahe-keeper") || p == "/.dockerenv"
}

fn kind_of(md: &std::fs::Metadata) -> Kind {
    let ft = md.file_type();
    if ahe_sandbox::is_whiteout(md) {
        Kind::Deleted
    } else if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_dir() {
        Kind::Dir
    } else if ft.is_file() {
        Kind::File
    } else {
        Kind::Other
    }
}

fn entry(md: &std::fs::Metadata, kind: Kind) -> Entry {
    Entry {
        stamp: Stamp {
            kind,
            ino: md.ino(),
            size: md.size(),
            mtime: (md.mtime(), md.mtime_nsec()),
            ctime: (md.ctime(), md.ctime_nsec()),
            mode: md.mode(),
        },
        atime: (md.atime(), md.atime_nsec()),
    }
}

/// One entry as `stat` printed it inside the sandbox ([`crate::inside`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawStat {
    /// What it is.
    pub kind: Kind,
    /// Inode number.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Modification time (seconds, nanoseconds).
    pub mtime: (i64, i64),
    /// Status change time.
    pub ctime: (i64, i64),
    /// Access time.
    pub atime: (i64, i64),
    /// `st_mode` (type and permission bits).
    pub mode: u32,
}

impl Snapshot {
    /// Records `path` as stat printed it inside the sandbox (replacing what was there).
    pub fn insert_raw(&mut self, path: String, s: RawStat) {
        let stamp = Stamp {
            kind: s.kind,
            ino: s.ino,
            size: s.size,
            mtime: s.mtime,
            ctime: s.ctime,
            mode: s.mode,
        };
        self.entries.insert(
            path,
            Entry {
                stamp,
                atime: s.atime,
            },
        );
    }

    /// What `path` is, when the snapshot has it.
    pub fn kind(&self, path: &str) -> Option<Kind> {
        self.entries.get(path).map(|e| e.stamp.kind)
    }

    /// Every path of the snapshot.
    pub fn paths(&self) -> impl Iterator<Item = &String> {
        self.entries.keys()
    }

    /// Drops what [`Snapshot::take_after`] would not have walked (the content of directories
    /// made since `handed`, neither in the image nor kept by `keep`), for a snapshot taken
    /// whole inside the sandbox; counts the directories as pruned.
    pub fn prune_made(&mut self, handed: &Snapshot, layer: &Layer, keep: &dyn Fn(&str) -> bool) {
        let mut made: Vec<String> = (self.entries.iter())
            .filter(|(_, e)| e.stamp.kind == Kind::Dir)
            .filter(|(p, _)| !(handed.contains(p) || keep(p) || layer.image_file(p).is_some()))
            .map(|(p, _)| format!("{p}/"))
            .collect();
        made.sort();
        // Keep only the topmost of nested made directories.
        made.dedup_by(|later, kept| later.starts_with(kept.as_str()));
        let inside = |p: &str| {
            let i = made.partition_point(|d| d.as_str() <= p);
            i > 0 && p.starts_with(made[i - 1].as_str())
        };
        self.entries.retain(|p, _| !inside(p));
        self.pruned += made.len();
    }
}

/// The present as seconds and nanoseconds since the epoch, for [`Snapshot::needs_reset`].
pub fn now() -> (i64, i64) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs() as i64, d.subsec_nanos() as i64)
}

/// The access time [`reset_atime`] gives a file: one second after the epoch, older than any
/// real read (relatime then records the next read).
const RESET_ATIME: Duration = Duration::from_secs(1);

/// Sets the access time of the file at `host` to [`RESET_ATIME`] (its modification time is
/// kept): one `utimensat` on the path, without following a link.
pub fn reset_atime(host: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(host.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let times = [
        libc::timespec {
            tv_sec: RESET_ATIME.as_secs() as libc::time_t,
            tv_nsec: 0,
        },
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
    ];
    // SAFETY: `c` is a NUL-terminated path and `times` two valid timespecs.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether the regular file at `host` was read since [`reset_atime`].
pub fn read_since_reset(host: &Path) -> bool {
    std::fs::symlink_metadata(host).is_ok_and(|m| m.atime() > RESET_ATIME.as_secs() as i64)
}

#[cfg(test)]
#[path = "changes_tests.rs"]
mod tests;
