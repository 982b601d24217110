//! Reaping the local sandboxes of dead ahe processes (`ahe sandbox reap`): a process killed
//! with its run (`kill -9`, OOM, a lost terminal) leaves its trial dirs
//! `$TMPDIR/ahe-local-<task>-<trial>-<pid>-<n>-<nanos>` and their cgroups
//! (`/sys/fs/cgroup/<controller>/ahe/<dir name>`) behind. A dir whose pid is alive is never
//! touched, even when that pid may have been reused by another process since.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::fsmap::remove_tree;
use crate::docker::pid_start_time;

/// Prefix of every local trial dir name (see `make_trial_dir`).
const PREFIX: &str = "ahe-local-";

/// Root of the cgroup v1 hierarchies the local backend puts its limits in.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The cgroup v1 controllers a local sandbox may have a group in.
const CONTROLLERS: [&str; 2] = ["memory", "cpu"];

/// What one reaping pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LocalReap {
    /// Trial dirs of dead processes that were removed.
    pub removed: usize,
    /// Cgroups of dead processes that were removed.
    pub cgroups: usize,
    /// Trial dirs left alone because their process is alive.
    pub live: usize,
    /// Dirs or cgroups of dead processes that could not be removed, with the reason.
    pub failed: Vec<(PathBuf, String)>,
}

/// Removes the local trial dirs (under the temp dir) and cgroups of ahe processes that no
/// longer run on this host.
pub fn reap_dead() -> LocalReap {
    reap_dead_in(&std::env::temp_dir(), Path::new(CGROUP_ROOT))
}

/// [`reap_dead`] with explicit roots: trial dirs directly under `tmp`, cgroups under
/// `cgroup_root/<controller>/ahe/`.
pub fn reap_dead_in(tmp: &Path, cgroup_root: &Path) -> LocalReap {
    let mut out = LocalReap::default();
    for (name, pid) in trial_names(tmp) {
        if pid_start_time(pid).is_some() {
            out.live += 1;
            continue;
        }
        let dir = tmp.join(&name);
        match remove_tree(&dir) {
            Ok(()) => out.removed += 1,
            Err(e) => out.failed.push((dir, e.to_string())),
        }
    }
    for c in CONTROLLERS {
        let parent = cgroup_root.join(c).join("ahe");
        for (name, pid) in trial_names(&parent) {
            if pid_start_time(pid).is_some() {
                continue;
            }
            let dir = parent.join(&name);
            match remove_cgroup(&dir) {
                Ok(()) => out.cgroups += 1,
                Err(e) => out.failed.push((dir, e.to_string())),
            }
        }
    }
    out
}

/// The entries of `dir` named like local trial dirs, with the pid each name holds.
fn trial_names(dir: &Path) -> Vec<(String, u32)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, u32)> = rd
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let pid = owner_pid(&name)?;
            Some((name, pid))
        })
        .collect();
    out.sort();
    out
}

/// The pid in a trial dir name `ahe-local-<task>-<trial>-<pid>-<n>-<nanos hex>`, read from
/// the right (task and trial names may hold dashes); None for any other name.
pub(crate) fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let mut parts = rest.rsplitn(4, '-');
    let (nanos, n, pid, front) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let hex = !nanos.is_empty() && nanos.bytes().all(|b| b.is_ascii_hexdigit());
    if !hex || !digits(n) || !digits(pid) || front.is_empty() {
        return None;
    }
    pid.parse().ok().filter(|p| *p > 0)
}

/// Kills what is left in a dead run's cgroup and removes it (retried briefly: killed
/// processes leave the group asynchronously).
fn remove_cgroup(dir: &Path) -> std::io::Result<()> {
    let mut last = None;
    for _ in 0..50 {
        if let Ok(s) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            for pid in s.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                // SAFETY: kill(2) has no memory-safety preconditions.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("cgroup still busy")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A pid that no longer runs: a child that exited and was waited for.
    fn dead_pid() -> u32 {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        assert!(
            pid_start_time(pid).is_none(),
            "pid {pid} was reused at once"
        );
        pid
    }

    #[test]
    fn owner_pid_reads_from_the_right() {
        assert_eq!(owner_pid("ahe-local-fix-sum-t-1-4242-7-1a2b3c"), Some(4242));
        assert_eq!(owner_pid("ahe-local-a-b-c-d-e-1-2-99-0-ff"), Some(99));
        assert_eq!(
            owner_pid("ahe-local-task-trial-4242-7-zz"),
            None,
            "nanos not hex"
        );
        assert_eq!(owner_pid("ahe-local-task-trial-42x-7-ff"), None);
        assert_eq!(owner_pid("ahe-local-4242-7-ff"), None, "no task/trial part");
        assert_eq!(owner_pid("ahe-local-t-r-+42-7-ff"), None);
        assert_eq!(owner_pid("ahe-replay-0123-4242"), None);
        assert_eq!(
            owner_pid("ahe-local-t-r-0-7-ff"),
            None,
            "pid 0 is no process"
        );
    }

    #[test]
    fn removes_dead_owners_dirs_and_cgroups_and_keeps_live_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let cg = tempfile::tempdir().unwrap();
        let dead = dead_pid();
        let live = std::process::id();
        let dead_name = format!("ahe-local-fix-sum-fix-sum-1-{dead}-3-beef");
        let live_name = format!("ahe-local-fix-sum-fix-sum-1-{live}-3-beef");
        for name in [&dead_name, &live_name] {
            let d = tmp.path().join(name);
            // A tree like a trial's, with a read-only dir a sandboxed command left behind.
            std::fs::create_dir_all(d.join("fs/app/locked")).unwrap();
            std::fs::write(d.join("fs/app/locked/f"), "x").unwrap();
            std::fs::set_permissions(d.join("fs/app/locked"), PermissionsExt::from_mode(0o500))
                .unwrap();
            std::fs::create_dir_all(cg.path().join("memory/ahe").join(name)).unwrap();
        }
        // Not trial dirs: never touched, whatever pid they seem to hold.
        let other = tmp.path().join(format!("ahe-replay-0123-{dead}"));
        std::fs::create_dir(&other).unwrap();
        let file = tmp.path().join(format!("ahe-local-x-y-{dead}-1-ff"));
        std::fs::write(&file, "").unwrap();

        let r = reap_dead_in(tmp.path(), cg.path());
        assert_eq!(r.failed, vec![], "{r:?}");
        assert_eq!((r.removed, r.cgroups, r.live), (1, 1, 1), "{r:?}");
        assert!(!tmp.path().join(&dead_name).exists());
        assert!(!cg.path().join("memory/ahe").join(&dead_name).exists());
        assert!(tmp
            .path()
            .join(&live_name)
            .join("fs/app/locked/f")
            .is_file());
        assert!(cg.path().join("memory/ahe").join(&live_name).is_dir());
        assert!(other.is_dir() && file.is_file());

        // Nothing left to do the second time.
        let r = reap_dead_in(tmp.path(), cg.path());
        assert_eq!((r.removed, r.cgroups, r.live), (0, 0, 1), "{r:?}");
        std::fs::set_permissions(
            tmp.path().join(&live_name).join("fs/app/locked"),
            PermissionsExt::from_mode(0o700),
        )
        .unwrap();
    }
}
