//! Starting one trial's environment: a start request on the current bridge, and what a
//! start lost with its bridge (made again by `create`) or failed for good looks like.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::{json, Value};

use super::bridge::{Bridge, Refusal};
use super::image::Prebuilt;
use super::{records, Inner};
use crate::{SandboxError, SandboxSpec};

/// A Docker Compose project name Harbor accepts (lower-case letters, digits, `-`).
fn session_name(spec: &SandboxSpec, seq: u64) -> String {
    let raw = format!("ahe-{}-{}-{seq}", std::process::id(), spec.trial_id);
    let mut s: String = raw
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9') => c,
            _ => '-',
        })
        .collect();
    s.truncate(60);
    s.trim_end_matches('-').to_string()
}

/// A start that must be made again ([`StartError::Lost`]: its bridge died under it), or
/// failed for good.
pub(super) enum StartError {
    /// The bridge died while it started the environment (the half-made one is deleted
    /// through the next bridge).
    Lost(String),
    /// The environment could not start (the provider's message), or no bridge runs.
    Failed(SandboxError),
}

/// Starts made again after their bridge died, at most, within one `create`.
pub const MAX_START_LOSSES: usize = 3;

/// The live environment of one start: its bridge, session, start request, record, answer.
type Started = (Arc<Bridge>, String, Value, PathBuf, Value);

/// One start request for a trial's environment on the current bridge (a new session).
pub(super) async fn start_once(
    inner: &Arc<Inner>,
    spec: &SandboxSpec,
    prebuilt: Option<&Prebuilt>,
    trial_dir: &Path,
) -> std::result::Result<Started, StartError> {
    let seq = inner.seq.fetch_add(1, Ordering::Relaxed);
    let session = session_name(spec, seq);
    let mut start = json!({
        "op": "start",
        "session": session,
        "task": spec.task,
        "environment": inner.cfg.environment,
        "options": inner.cfg.options,
        "environment_dir": spec.context_dir,
        "docker_image": spec.docker_image,
        "cpus": spec.cpus,
        "memory_mb": spec.memory_mb,
        "storage_mb": spec.storage_mb,
        "allow_internet": spec.allow_internet,
        "env": spec.env,
        "build_timeout_sec": spec.build_timeout_sec,
        "trial_dir": trial_dir,
    });
    if let Some(p) = prebuilt {
        // Harbor starts the environment from the image ahe built (no build per trial).
        start["docker_image"] = json!(p.image);
        start["workdir"] = json!(p.workdir);
        if !p.healthcheck {
            // One service from an image without a HEALTHCHECK: `up --detach` returns once
            // its container runs, which is all `--wait` would wait for (in 0.5 s polls).
            start["wait"] = json!(false);
        }
    }
    if inner.cfg.environment == "docker" && super::engine::project_is_new(&session).await {
        // Nothing to take down before `up` (the bridge skips Harbor's `down`).
        start["fresh"] = json!(true);
    }
    if super::engine::wanted(&inner.cfg) {
        // The start's own commands come back for ahe to run through the Engine API.
        start["engine"] = json!(true);
    }
    let bridge = inner.bridge().await.map_err(StartError::Failed)?;
    let mut rec = records::Record {
        pid: std::process::id(),
        python: inner.python.clone(),
        start,
    };
    rec.start["record"] = json!(records::path(&inner.state, &session));
    let record =
        records::write(&inner.state, &session, &rec).map_err(|e| StartError::Failed(e.into()))?;
    let start = rec.start;
    match bridge.call(start.clone()).await {
        Ok(answer) => Ok((bridge, session, start, record, answer)),
        Err(Refusal { kind, message }) if kind == "lost" => {
            // The half-made environment is deleted through the next bridge.
            inner.delete_later(bridge, start, record);
            Err(StartError::Lost(message))
        }
        Err(Refusal { message, .. }) => {
            // The bridge deleted it already when its start failed.
            let _ = std::fs::remove_file(&record);
            let env = &inner.cfg.environment;
            Err(StartError::Failed(SandboxError::Backend(format!(
                "harbor {env}: {message}"
            ))))
        }
    }
}
