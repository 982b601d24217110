//! What makes `ahe view` live and fast: a cheap change token per directory (a few `stat`s,
//! never a re-read of the run), and pages rendered once per token and kept.
//!
//! A run's token covers its journal (every finished trial, phase start and end and note
//! is a journal line written after its files: `best.json`, `final.json`, scores…),
//! `run.toml`, `iterations/` and the trial records of its last iteration (trials finished
//! that a journal line does not name yet). An evaluation's covers `scores.json` and its
//! trial records (`result.json`); a matrix's, `matrix.jsonl` and `matrix.json`.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

use super::site::Kind;

/// Length and modification time (ns) of a path, zeros when it is missing.
fn stamp(p: &Path) -> (u64, u128) {
    std::fs::metadata(p)
        .map(|m| {
            let t = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            (m.len(), t)
        })
        .unwrap_or((0, 0))
}

/// The trial records (`<task>/<attempt>/result.json`) under a `trials/` directory: how many,
/// and the newest's modification time.
fn trial_records(trials: &Path) -> (u64, u128) {
    let mut n = 0u64;
    let mut newest = 0u128;
    for task in std::fs::read_dir(trials).into_iter().flatten().flatten() {
        for a in std::fs::read_dir(task.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let (len, t) = stamp(&ahe_bench::TrialDir::new(a.path()).result_path());
            if len > 0 || t > 0 {
                n += 1;
                newest = newest.max(t);
            }
        }
    }
    (n, newest)
}

/// The change token of a directory of `kind`: equal tokens, same page.
pub fn token(dir: &Path, kind: Kind) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    match kind {
        Kind::Run => {
            let rd = ahe_rundir::RunDir::new(dir);
            // best.json and final.json are written before the journal line of their phase.
            for f in [rd.journal_path(), rd.config_path(), rd.iterations()] {
                stamp(&f).hash(&mut h);
            }
            let last = rd.last_iteration_on_disk();
            if last > 0 {
                let it = rd.iteration(last);
                trial_records(&it.trials()).hash(&mut h);
                stamp(it.path()).hash(&mut h);
            }
        }
        Kind::Eval => {
            let ev = ahe_bench::EvalDir::new(dir);
            stamp(&ev.scores_path()).hash(&mut h);
            trial_records(&ev.trials()).hash(&mut h);
        }
        Kind::Matrix => {
            stamp(&dir.join("matrix.jsonl")).hash(&mut h);
            stamp(&dir.join("matrix.json")).hash(&mut h);
        }
    }
    format!("{:016x}", h.finish())
}

/// The token of the front page: the entries' tokens and the roots' listings.
pub fn list_token(roots: &[PathBuf], entries: &[(PathBuf, Kind)]) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for r in roots {
        stamp(r).hash(&mut h);
    }
    for (d, k) in entries {
        d.hash(&mut h);
        token(d, *k).hash(&mut h);
    }
    format!("{:016x}", h.finish())
}

/// Rendered pages and list rows, each kept with the token it was rendered at. Requests for
/// the same page wait for one rendering rather than each doing its own.
pub struct Cache<V> {
    map: Mutex<HashMap<Key, Slot<V>>>,
}

/// A directory and what of it was rendered (`run`, `row`…).
type Key = (PathBuf, &'static str);

/// One kept value with its token; locked while it is being rendered.
type Slot<V> = Arc<Mutex<Option<(String, Arc<V>)>>>;

impl<V> Default for Cache<V> {
    fn default() -> Self {
        Cache {
            map: Mutex::new(HashMap::new()),
        }
    }
}

impl<V> Cache<V> {
    /// The value kept for (`dir`, `what`) at `token`, or `make()` (kept for next time).
    /// `token` must be taken before `make` reads the directory, so a change during the
    /// rendering shows as a new token on the next request.
    pub fn get_or(
        &self,
        dir: &Path,
        what: &'static str,
        token: &str,
        make: impl FnOnce() -> anyhow::Result<V>,
    ) -> anyhow::Result<Arc<V>> {
        let slot = self
            .map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((dir.to_path_buf(), what))
            .or_default()
            .clone();
        let mut kept = slot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((t, v)) = kept.as_ref() {
            if t == token {
                return Ok(v.clone());
            }
        }
        let v = Arc::new(make()?);
        *kept = Some((token.to_string(), v.clone()));
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_trial_record_or_journal_line_changes_a_run_token() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("journal.jsonl"), "{}\n").unwrap();
        let trials = d.path().join("iterations/001/trials/t/1");
        std::fs::create_dir_all(&trials).unwrap();
        let t0 = token(d.path(), Kind::Run);
        assert_eq!(t0, token(d.path(), Kind::Run), "same files, same token");
        std::fs::write(trials.join("result.json"), "{}").unwrap();
        let t1 = token(d.path(), Kind::Run);
        assert_ne!(t0, t1, "a trial record changes the token");
        std::fs::write(d.path().join("journal.jsonl"), "{}\n{}\n").unwrap();
        assert_ne!(t1, token(d.path(), Kind::Run), "a journal line changes it");
    }

    #[test]
    fn the_cache_renders_once_per_token() {
        let c: Cache<String> = Cache::default();
        let n = std::cell::Cell::new(0);
        let mk = || {
            n.set(n.get() + 1);
            Ok(format!("page {}", n.get()))
        };
        let p = Path::new("/x");
        assert_eq!(*c.get_or(p, "page", "a", mk).unwrap(), "page 1");
        assert_eq!(*c.get_or(p, "page", "a", mk).unwrap(), "page 1");
        assert_eq!(*c.get_or(p, "page", "b", mk).unwrap(), "page 2");
    }
}
