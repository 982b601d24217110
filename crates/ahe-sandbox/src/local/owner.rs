//! Who a local sandbox's processes are on the host. When `ahe` runs as root they run as an
//! unprivileged uid (default 100000, `AHE_SANDBOX_UID` to choose another) that bubblewrap's
//! user namespace shows as root inside (`--uid 0`), with no capabilities: tasks that want
//! root get a root-looking uid, but the host sees a nobody — read-only binds cannot be
//! remounted, host files are not writable, `/etc/shadow` is not readable. The trial's own
//! files are chowned to that uid so it can write them.

use std::io;
use std::path::Path;

use tokio::process::Command;

/// The uid (and gid) sandboxes run as when `ahe` is root and none is configured.
pub const DEFAULT_SANDBOX_UID: u32 = 100_000;

/// An unprivileged host identity for a sandbox's processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owner {
    uid: u32,
    gid: u32,
}

impl Owner {
    /// The identity to drop to: `None` when `ahe` is not root (bubblewrap then maps the
    /// caller's own unprivileged uid); `AHE_SANDBOX_UID` (not 0) overrides the default.
    pub(crate) fn detect() -> Option<Owner> {
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return None;
        }
        let uid = std::env::var("AHE_SANDBOX_UID")
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
            .filter(|u| *u != 0)
            .unwrap_or(DEFAULT_SANDBOX_UID);
        Some(Owner { uid, gid: uid })
    }

    /// The host uid.
    pub(crate) fn uid(&self) -> u32 {
        self.uid
    }

    /// Makes the spawned process drop every group and switch to this uid/gid before it
    /// execs (after any earlier `pre_exec` step, e.g. joining the trial's cgroup as root).
    pub(crate) fn drop_to(&self, cmd: &mut Command) {
        let (uid, gid) = (self.uid, self.gid);
        // SAFETY: the closure runs between fork and exec and only calls the
        // async-signal-safe setgroups/setgid/setuid.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// Gives `path` (not following a symlink) to this identity.
    pub(crate) fn chown(&self, path: &Path) -> io::Result<()> {
        std::os::unix::fs::lchown(path, Some(self.uid), Some(self.gid))
    }

    /// Gives `path` and everything below it to this identity (links are not followed).
    pub(crate) fn chown_tree(&self, path: &Path) -> io::Result<()> {
        for entry in walkdir::WalkDir::new(path).follow_links(false) {
            let entry = entry.map_err(io::Error::other)?;
            self.chown(entry.path())?;
        }
        Ok(())
    }

    /// Gives every dir from `top` (inclusive) down to `path` to this identity, then the
    /// tree at `path`: what a host-side copy into the sandbox created.
    pub(crate) fn chown_copied(&self, top: &Path, path: &Path) -> io::Result<()> {
        if let Ok(rel) = path.strip_prefix(top) {
            let mut cur = top.to_path_buf();
            self.chown(&cur)?;
            for c in rel.parent().into_iter().flat_map(|p| p.components()) {
                cur.push(c);
                self.chown(&cur)?;
            }
        }
        self.chown_tree(path)
    }
}
