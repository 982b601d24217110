//! Recording image pulls and the host reserve's events: each finished or failed pull, and each
//! disk pause, stop or resumption (`{"ev":"disk", state, free_bytes, ...}`), becomes one line of the run's journal
//! (`{"ev":"image_pull", image, ts, secs, ok, bytes | error}`; `ahe eval`: `<out>/pulls.jsonl`).
//! Resume and the journal reader skip the lines they do not know.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use ahe_bench::Progress;
use ahe_sandbox::PullPhase;

/// A progress callback.
pub type Callback = Arc<dyn Fn(Progress) + Send + Sync>;

/// Wraps `inner` so that finished pulls are also appended to the file `target` names (once
/// set; pulls before that are only shown).
pub fn recorder(inner: Callback, target: Arc<OnceLock<PathBuf>>) -> Callback {
    Arc::new(move |p: Progress| {
        if let (Progress::Disk(e), Some(path)) = (&p, target.get()) {
            // The host reserve's pauses, stops and resumptions, one line each.
            let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            let mut v = serde_json::to_value(e).unwrap_or_default();
            v["ev"] = "disk".into();
            v["ts"] = ts.into();
            v["message"] = e.text().into();
            let res = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .and_then(|mut f| f.write_all(format!("{v}\n").as_bytes()));
            if let Err(err) = res {
                tracing::warn!("cannot record a disk event in {}: {err}", path.display());
            }
        }
        if let (Progress::Pull(e), Some(path)) = (&p, target.get()) {
            let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            let line = match &e.phase {
                PullPhase::Done { secs, bytes } => Some(serde_json::json!({
                    "ev": "image_pull", "image": e.image, "ts": ts, "secs": secs,
                    "ok": true, "bytes": bytes,
                })),
                PullPhase::Failed { secs, error } => Some(serde_json::json!({
                    "ev": "image_pull", "image": e.image, "ts": ts, "secs": secs,
                    "ok": false, "error": error,
                })),
                _ => None,
            };
            if let Some(l) = line {
                // One write of one line in append mode: whole even beside the run's own writer.
                let res = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .and_then(|mut f| f.write_all(format!("{l}\n").as_bytes()));
                if let Err(err) = res {
                    tracing::warn!(
                        "cannot record the pull of {} in {}: {err}",
                        e.image,
                        path.display()
                    );
                }
            }
        }
        inner(p)
    })
}
