//! Optional cgroup v1 limits (memory, cpu) for a local sandbox.

use std::ffi::CString;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;

/// Root of the cgroup v1 hierarchies.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// CFS period used for the cpu limit, in microseconds.
const CFS_PERIOD_US: u64 = 100_000;

/// A per-trial cgroup in one or more v1 hierarchies; every exec joins it.
#[derive(Debug)]
pub(crate) struct Cgroup {
    dirs: Vec<PathBuf>,
    procs: Vec<CString>,
}

impl Cgroup {
    /// Creates `ahe/<name>` in the memory and/or cpu hierarchies with the given limits.
    /// Returns an error message when a requested limit cannot be applied.
    pub(crate) fn create(
        name: &str,
        memory_mb: Option<u64>,
        cpus: Option<f64>,
    ) -> Result<Option<Cgroup>, String> {
        let mut cg = Cgroup {
            dirs: Vec::new(),
            procs: Vec::new(),
        };
        if let Err(e) = cg.apply(name, memory_mb, cpus) {
            cg.remove();
            return Err(e);
        }
        Ok((!cg.dirs.is_empty()).then_some(cg))
    }

    fn apply(
        &mut self,
        name: &str,
        memory_mb: Option<u64>,
        cpus: Option<f64>,
    ) -> Result<(), String> {
        if let Some(mb) = memory_mb {
            let dir = self.make_dir("memory", name)?;
            let bytes = (mb.max(1) * 1024 * 1024).to_string();
            write(&dir.join("memory.limit_in_bytes"), &bytes)?;
            // Also cap swap when the kernel accounts it (memsw must be >= the limit).
            let memsw = dir.join("memory.memsw.limit_in_bytes");
            if memsw.exists() {
                write(&memsw, &bytes)?;
            }
        }
        if let Some(c) = cpus.filter(|c| *c > 0.0) {
            let dir = self.make_dir("cpu", name)?;
            let quota = ((c * CFS_PERIOD_US as f64) as u64).max(1000);
            write(&dir.join("cpu.cfs_period_us"), &CFS_PERIOD_US.to_string())?;
            write(&dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
        }
        Ok(())
    }

    fn make_dir(&mut self, controller: &str, name: &str) -> Result<PathBuf, String> {
        let parent = Path::new(CGROUP_ROOT).join(controller).join("ahe");
        let dir = parent.join(name);
        fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create cgroup {}: {e}", dir.display()))?;
        let procs = dir.join("cgroup.procs");
        self.dirs.push(dir);
        self.procs.push(
            CString::new(procs.as_os_str().as_encoded_bytes())
                .map_err(|e| format!("bad cgroup path: {e}"))?,
        );
        Ok(self.dirs.last().cloned().unwrap_or_default())
    }

    /// Makes the spawned process join the cgroup before it execs (so all its children do).
    pub(crate) fn attach(&self, cmd: &mut Command) {
        let procs = self.procs.clone();
        // SAFETY: the closure runs between fork and exec and only calls the
        // async-signal-safe open/write/close on paths allocated before the fork.
        unsafe {
            cmd.pre_exec(move || {
                for p in &procs {
                    let fd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    if fd < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    // Writing 0 moves the writing process itself.
                    let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                    libc::close(fd);
                    if n != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }

    /// Kills whatever is left in the cgroup and removes it (best effort, retried briefly).
    pub(crate) fn remove(&self) {
        for dir in &self.dirs {
            for _ in 0..50 {
                if let Ok(s) = fs::read_to_string(dir.join("cgroup.procs")) {
                    for pid in s.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                        // SAFETY: kill(2) has no memory-safety preconditions.
                        unsafe {
                            libc::kill(pid, libc::SIGKILL);
                        }
                    }
                }
                match fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
    }
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    fs::write(path, value).map_err(|e| format!("cannot write {value} to {}: {e}", path.display()))
}
