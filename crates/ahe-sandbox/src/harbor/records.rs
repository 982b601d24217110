//! Records of the Harbor environments this host's `ahe` processes started: one JSON file per
//! live environment under `<state>/live/` (the owning `ahe`'s pid, the python that ran its
//! bridge, and the start request), written before the environment starts and removed once it
//! is deleted. A record left behind names an environment a dead bridge or a dead `ahe` did not
//! delete; [`reap`] deletes it through a new bridge (`ahe sandbox reap`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::bridge::Bridge;

/// One live environment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    /// The `ahe` process that started it.
    pub pid: u32,
    /// The python of the Harbor venv its bridge ran with.
    pub python: PathBuf,
    /// The bridge's start request (also what `delete` needs).
    pub start: Value,
}

/// The directory of live records.
pub(crate) fn live_dir(state: &Path) -> PathBuf {
    state.join("live")
}

/// The record file of `session`.
pub(crate) fn path(state: &Path, session: &str) -> PathBuf {
    live_dir(state).join(format!("{session}.json"))
}

/// Writes the record of `session` and returns its path.
pub(crate) fn write(state: &Path, session: &str, rec: &Record) -> std::io::Result<PathBuf> {
    let dir = live_dir(state);
    std::fs::create_dir_all(&dir)?;
    let path = path(state, session);
    let tmp = dir.join(format!(".{session}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec_pretty(rec).unwrap_or_default())?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// Every record under `state` with its path (unreadable files are skipped with a warning).
pub(crate) fn list(state: &Path) -> Vec<(PathBuf, Record)> {
    let Ok(rd) = std::fs::read_dir(live_dir(state)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "json") {
            continue;
        }
        match std::fs::read(&p).map(|b| serde_json::from_slice::<Record>(&b)) {
            Ok(Ok(r)) => out.push((p, r)),
            Ok(Err(err)) => tracing::warn!("harbor record {}: {err}", p.display()),
            Err(err) => tracing::warn!("harbor record {}: {err}", p.display()),
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Whether process `pid` is alive on this host.
pub(crate) fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// What [`reap`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HarborReap {
    /// Environments deleted.
    pub removed: usize,
    /// Records of live `ahe` processes left alone.
    pub live: usize,
    /// Environments that could not be deleted, with the provider's message.
    pub failed: Vec<String>,
}

/// Deletes the environments whose records `state` holds (`all`: every one; else those of dead
/// `ahe` processes), each through a bridge run by the python its record names.
pub async fn reap_in(state: &Path, all: bool) -> HarborReap {
    let mut out = HarborReap::default();
    let mut bridges: Vec<(PathBuf, std::sync::Arc<Bridge>)> = Vec::new();
    for (path, rec) in list(state) {
        if !all && alive(rec.pid) {
            out.live += 1;
            continue;
        }
        let bridge = match bridges.iter().find(|(p, _)| *p == rec.python) {
            Some((_, b)) => b.clone(),
            None => {
                let started = super::bridge::script_in(state).and_then(|script| {
                    Bridge::start(&rec.python, &script, state.join("bridge-reap.log"))
                });
                match started {
                    Ok(b) => {
                        bridges.push((rec.python.clone(), b.clone()));
                        b
                    }
                    Err(e) => {
                        out.failed.push(format!(
                            "{}: cannot start {}: {e}",
                            path.display(),
                            rec.python.display()
                        ));
                        continue;
                    }
                }
            }
        };
        let session = rec.start["session"].as_str().unwrap_or("?").to_string();
        match delete(&bridge, &rec.start).await {
            Ok(()) => {
                let _ = std::fs::remove_file(&path);
                out.removed += 1;
            }
            Err(e) => out.failed.push(format!("{session}: {e}")),
        }
    }
    for (_, b) in bridges {
        b.close();
    }
    out
}

/// Deletes the environment a start request describes through `bridge`.
pub(crate) async fn delete(bridge: &Bridge, start: &Value) -> Result<(), String> {
    let mut req = start.clone();
    req["op"] = "delete".into();
    bridge.call(req).await.map(|_| ()).map_err(|r| r.message)
}

impl super::Inner {
    /// Deletes (in the background; `drain` waits) the environment a start request describes:
    /// through `own` when it still lives, else through the current bridge; its record goes
    /// once that succeeded.
    pub(super) fn delete_later(
        self: &std::sync::Arc<Self>,
        own: std::sync::Arc<Bridge>,
        start: Value,
        record: PathBuf,
    ) {
        let inner = self.clone();
        let task = tokio::spawn(async move {
            let session = start["session"].as_str().unwrap_or("?").to_string();
            let stop = serde_json::json!({"op": "stop", "session": session, "delete": true});
            let mut result = match own.dead() {
                None => own.call(stop).await.map(|_| ()).map_err(|r| r.message),
                Some(_) => Err("bridge lost".into()),
            };
            if result.is_err() {
                // The bridge that started it died: a new one deletes it (a start the dead
                // bridge left running may still finish, so wait a little first).
                tokio::time::sleep(std::time::Duration::from_secs(3)).await;
                result = match inner.bridge().await {
                    Ok(b) => delete(&b, &start).await,
                    Err(e) => Err(e.to_string()),
                };
            }
            match result {
                Ok(()) => {
                    let _ = std::fs::remove_file(&record);
                }
                Err(e) => tracing::warn!(
                    "harbor: environment {session} not deleted ({e}); `ahe sandbox reap` deletes it"
                ),
            }
        });
        self.stops.lock().unwrap().push(task);
    }
}
