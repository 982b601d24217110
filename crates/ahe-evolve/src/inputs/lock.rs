//! The exclusive lock of a run directory (`.lock`), so two processes never run one run.

use std::path::Path;

use anyhow::{bail, Context};

use ahe_rundir::run_dir::RunDir;

/// The refusal of a run directory another live `ahe evolve` holds.
pub(crate) fn in_use(dir: &Path, pid: &str) -> String {
    format!(
        "{} is in use by another `ahe evolve` (pid {pid}, lock {}); wait for it to end or \
         stop it (Ctrl-C), then resume",
        dir.display(),
        RunDir::new(dir).lock_path().display()
    )
}

/// The exclusive lock of a run directory: `.lock`, flock'ed and holding the owner's pid.
/// The kernel releases it when the owner exits, however it dies (kill -9 included), so a
/// lock file left by a dead process is stale and simply taken over.
pub struct RunLock {
    file: std::fs::File,
}

impl RunLock {
    /// Takes the lock of `dir`, or fails naming the pid that holds it.
    pub fn acquire(dir: &Path) -> anyhow::Result<RunLock> {
        use std::io::Write;
        let path = RunDir::new(dir).lock_path();
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("opening the run lock {}", path.display()))?;
        // A holder that is already gone (killed, its teardown still under way) lets go
        // within moments: wait for it rather than refuse.
        let t0 = std::time::Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    let pid = read_pid(&path);
                    let gone = !pid_alive(&pid);
                    if !gone || t0.elapsed() > std::time::Duration::from_secs(10) {
                        bail!("{}", in_use(dir, &pid))
                    }
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(e).with_context(|| format!("locking {}", path.display()))
                }
            }
        }
        file.set_len(0)?;
        writeln!(file, "{}", std::process::id())?;
        file.flush()?;
        Ok(RunLock { file })
    }

    /// The pid holding the lock of `dir`, if a live process holds it.
    pub fn holder(dir: &Path) -> Option<String> {
        let path = RunDir::new(dir).lock_path();
        let file = std::fs::File::open(&path).ok()?;
        match file.try_lock_shared() {
            Err(std::fs::TryLockError::WouldBlock) => Some(read_pid(&path)),
            _ => None,
        }
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // Emptied, not removed: removing would let a waiter lock an unlinked file.
        let _ = self.file.set_len(0);
    }
}

/// The pid written in a lock file (the holder writes it right after locking: wait briefly).
/// Whether a process with this pid (as written in the lock file) is alive (`/proc/<pid>`,
/// not a zombie).
fn pid_alive(pid: &str) -> bool {
    let Ok(n) = pid.parse::<u32>() else {
        return true;
    };
    match std::fs::read_to_string(format!("/proc/{n}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn read_pid(path: &Path) -> String {
    for _ in 0..50 {
        let pid = std::fs::read_to_string(path).unwrap_or_default();
        if !pid.trim().is_empty() {
            return pid.trim().to_string();
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    "unknown".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_lock_is_exclusive_names_its_holder_and_takes_over_a_dead_one() {
        let d = tempfile::tempdir().unwrap();
        // A lock file left by a process that is gone (nobody holds the flock).
        std::fs::write(RunDir::new(d.path()).lock_path(), "4000000\n").unwrap();
        assert_eq!(RunLock::holder(d.path()), None);
        let lock = RunLock::acquire(d.path()).unwrap();
        let me = std::process::id().to_string();
        assert_eq!(
            std::fs::read_to_string(RunDir::new(d.path()).lock_path()).unwrap(),
            format!("{me}\n")
        );
        assert_eq!(RunLock::holder(d.path()), Some(me.clone()));
        let e = RunLock::acquire(d.path()).err().unwrap().to_string();
        assert!(
            e.contains(&format!("in use by another `ahe evolve` (pid {me},")),
            "{e}"
        );
        drop(lock);
        assert_eq!(RunLock::holder(d.path()), None);
        assert_eq!(
            std::fs::read_to_string(RunDir::new(d.path()).lock_path()).unwrap(),
            ""
        );
        RunLock::acquire(d.path()).unwrap();
    }
}
