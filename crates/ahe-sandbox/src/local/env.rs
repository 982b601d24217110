//! What every local sandbox process starts with: a clean base environment and the per-file
//! size limit (RLIMIT_FSIZE) of the task's storage.

use super::*;

/// The environment every exec starts from.
pub(super) fn base_env() -> BTreeMap<String, String> {
    [
        ("PATH", DEFAULT_PATH),
        ("HOME", "/root"),
        ("LANG", "C.UTF-8"),
        ("TERM", "dumb"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Sets `RLIMIT_FSIZE` of the command (and so of everything it starts) to `bytes`: no file
/// it writes grows past the task's storage limit.
pub(super) fn limit_file_size(cmd: &mut Command, bytes: Option<u64>) {
    let Some(b) = bytes else { return };
    let lim = libc::rlimit {
        rlim_cur: b as libc::rlim_t,
        rlim_max: b as libc::rlim_t,
    };
    // SAFETY: setrlimit is async-signal-safe; `lim` is copied into the closure.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Gives the command default dispositions for SIGINT, SIGQUIT, SIGTERM and SIGHUP: an `ahe`
/// started in the background of a script (or under `nohup`) ignores some of them, a shell
/// cannot undo an ignore it inherited, and the sandbox's commands would keep it.
pub(super) fn default_signals(cmd: &mut Command) {
    // SAFETY: signal(2) is async-signal-safe; nothing is allocated in the closure.
    unsafe {
        cmd.pre_exec(|| {
            for s in [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(s, libc::SIG_DFL);
            }
            Ok(())
        });
    }
}
