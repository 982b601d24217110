//! The directory an evaluation writes (`ahe eval --out`, and each iteration of a run):
//! `scores.json` and `trials/<task>/<attempt>/` with each trial's files. The only place
//! that knows these file names; everything else goes through [`EvalDir`] and [`TrialDir`].

use std::path::{Path, PathBuf};

use crate::{Scores, TrialResult};

/// An evaluation's output directory: `scores.json` and `trials/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalDir(PathBuf);

/// One trial's directory: `result.json`, `trace.jsonl`, `agent.log`, `trace.clean.json`,
/// the verifier's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrialDir(PathBuf);

/// File name of the per-task scores of an evaluation.
pub const SCORES: &str = "scores.json";
/// File name of a trial's result.
const RESULT: &str = "result.json";
/// File name of a raw event trace (a trial's, and the run's host agents': debugger,
/// overview, evolve agent).
pub const TRACE: &str = "trace.jsonl";
/// File name of a trial's cleaned trace (written by the Clean phase of ahe-evolve).
const CLEAN: &str = "trace.clean.json";
/// File name of the trajectory judge's record of a trial.
const JUDGE: &str = "judge.json";
/// File name of a trial's readable log (one line per event of its trace).
pub const AGENT_LOG: &str = "agent.log";
/// File name of the HTML report at the top of an evaluation directory (and of a run).
pub const REPORT_HTML: &str = "report.html";
/// File name of the Markdown report beside it.
pub const REPORT_MD: &str = "report.md";

/// The two files an agent's trace is written to in `dir` (a trial's directory, or a host
/// agent's: debugger, overview, evolve agent): the raw event trace and the readable log.
pub fn trace_files(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join(TRACE), dir.join(AGENT_LOG))
}

/// A Harbor job directory, as `ahe export` writes it and `ahe import` reads it (Harbor's
/// names): the job's `config.json` and `result.json`, and one of each per trial directory.
pub mod harbor_job {
    /// File name of a job's (and a trial's) configuration.
    pub const CONFIG: &str = "config.json";
    /// File name of a job's (and a trial's) result.
    pub const RESULT: &str = "result.json";
}

/// The relative link from a file `segments` deep below a directory back up to that
/// directory: one `../` per folder the file is in (`report/trials/a/1.html` → `../../../`).
pub fn up_from(segments: &[String]) -> String {
    "../".repeat(segments.len().saturating_sub(1))
}

/// `base` joined with each of `segments`.
pub fn join_segments(base: &Path, segments: &[String]) -> PathBuf {
    segments.iter().fold(base.to_path_buf(), |p, s| p.join(s))
}

impl EvalDir {
    /// The evaluation directory at `path` (nothing is created).
    pub fn new(path: impl Into<PathBuf>) -> EvalDir {
        EvalDir(path.into())
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `trials/`: one directory per task, one per attempt inside.
    pub fn trials(&self) -> PathBuf {
        self.0.join("trials")
    }

    /// `trials/<task>/<attempt>/`.
    pub fn trial(&self, task: &str, attempt: u32) -> TrialDir {
        TrialDir(join_segments(&self.0, &Self::trial_segments(task, attempt)))
    }

    /// The path segments of a trial's directory below the evaluation directory:
    /// `trials/<task>/<attempt>` (links from report pages are built from them).
    pub fn trial_segments(task: &str, attempt: u32) -> Vec<String> {
        vec!["trials".into(), task.into(), attempt.to_string()]
    }

    /// The path segments of a trial's page below the evaluation directory:
    /// `report/trials/<task>/<attempt>.html`.
    pub fn trial_page_segments(task: &str, attempt: u32) -> Vec<String> {
        vec![
            "report".into(),
            "trials".into(),
            task.into(),
            format!("{attempt}.html"),
        ]
    }

    /// A trial's page: `report/trials/<task>/<attempt>.html`.
    pub fn trial_page(&self, task: &str, attempt: u32) -> PathBuf {
        join_segments(&self.0, &Self::trial_page_segments(task, attempt))
    }

    /// `report.html`: the evaluation's report.
    pub fn report_html(&self) -> PathBuf {
        self.0.join(REPORT_HTML)
    }

    /// `report.md`: the evaluation's report in Markdown.
    pub fn report_md(&self) -> PathBuf {
        self.0.join(REPORT_MD)
    }

    /// `model-cache/`: the record/replay cache of an `ahe eval` without `cache_dir`.
    pub fn model_cache(&self) -> PathBuf {
        self.0.join("model-cache")
    }

    /// `pulls.jsonl`: the image pulls of an `ahe eval` (an evolve run journals them).
    pub fn pulls_path(&self) -> PathBuf {
        self.0.join("pulls.jsonl")
    }

    /// Path of `scores.json`.
    pub fn scores_path(&self) -> PathBuf {
        self.0.join(SCORES)
    }

    /// Reads `scores.json`, naming the file in the error.
    pub fn read_scores(&self) -> anyhow::Result<Scores> {
        read_json(&self.scores_path())
    }

    /// Writes `scores.json` atomically (temp file, then rename).
    pub fn write_scores(&self, s: &Scores) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.0)?;
        write_atomic(&self.scores_path(), &serde_json::to_vec_pretty(s)?)
    }

    /// Removes `scores.json` and any half-written temp file of it (for `--force` reruns).
    pub fn remove_scores(&self) -> std::io::Result<()> {
        for p in [self.scores_path(), tmp_of(&self.scores_path())] {
            match std::fs::remove_file(&p) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }

    /// Every `trials/<task>/<attempt>/` directory, sorted by task then attempt number.
    pub fn trial_dirs(&self) -> Vec<TrialDir> {
        let mut out: Vec<(String, u32, PathBuf)> = Vec::new();
        let Ok(rd) = std::fs::read_dir(self.trials()) else {
            return Vec::new();
        };
        for task in rd.flatten() {
            let name = task.file_name().to_string_lossy().into_owned();
            let Ok(attempts) = std::fs::read_dir(task.path()) else {
                continue;
            };
            for a in attempts.flatten() {
                if let Some(n) = a.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
                    if a.path().is_dir() {
                        out.push((name.clone(), n, a.path()));
                    }
                }
            }
        }
        out.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        out.into_iter().map(|(_, _, p)| TrialDir(p)).collect()
    }
}

impl TrialDir {
    /// File name of the result, for views that list a trial's files by name.
    pub const RESULT_FILE: &'static str = RESULT;
    /// File name of the cleaned trace, for views that list a trial's files by name.
    pub const CLEAN_FILE: &'static str = CLEAN;
    /// File name of the trajectory judge's record, for views that list a trial's files.
    pub const JUDGE_FILE: &'static str = JUDGE;

    /// The trial directory at `path`.
    pub fn new(path: impl Into<PathBuf>) -> TrialDir {
        TrialDir(path.into())
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The task name (the parent directory's name).
    pub fn task(&self) -> String {
        self.0
            .parent()
            .and_then(|p| p.file_name())
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// The attempt number (the directory's name), 0 when it is not a number.
    pub fn attempt(&self) -> u32 {
        self.0
            .file_name()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    /// Path of `result.json`.
    pub fn result_path(&self) -> PathBuf {
        self.0.join(RESULT)
    }

    /// Path of the readable log `agent.log` (one line per event of the trace).
    pub fn agent_log_path(&self) -> PathBuf {
        self.0.join(AGENT_LOG)
    }

    /// Path of the raw event trace `trace.jsonl`.
    pub fn trace_path(&self) -> PathBuf {
        self.0.join(TRACE)
    }

    /// Path of the cleaned trace `trace.clean.json`.
    pub fn clean_path(&self) -> PathBuf {
        self.0.join(CLEAN)
    }

    /// Path of the trajectory judge's record `judge.json`.
    pub fn judge_path(&self) -> PathBuf {
        self.0.join(JUDGE)
    }

    /// The trajectory judge's record, when there is a readable one.
    pub fn read_judge(&self) -> Option<crate::judge::JudgeRecord> {
        read_json(&self.judge_path()).ok()
    }

    /// Writes `judge.json` atomically.
    pub fn write_judge(&self, j: &crate::judge::JudgeRecord) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.0)?;
        write_atomic(&self.judge_path(), &serde_json::to_vec_pretty(j)?)
    }

    /// Reads `result.json`, naming the file in the error.
    pub fn read_result(&self) -> anyhow::Result<TrialResult> {
        read_json(&self.result_path())
    }

    /// Writes `result.json` atomically; a write error is logged, not raised (the trial's
    /// result is also returned in memory and reaches `scores.json`).
    pub fn write_result(&self, r: &TrialResult) {
        let _ = std::fs::create_dir_all(&self.0);
        let json = serde_json::to_vec_pretty(r).expect("result serializes");
        if let Err(e) = write_atomic(&self.result_path(), &json) {
            tracing::warn!("{}: {e}", self.result_path().display());
        }
    }
}

fn tmp_of(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

/// Writes `bytes` to `path` through a temp file and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = tmp_of(path);
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// Reads a JSON file, naming it in the error.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trial_page_climbs_back_to_the_evaluation_directory() {
        let e = EvalDir::new("/e");
        let page = EvalDir::trial_page_segments("a", 2);
        assert_eq!(e.trial_page("a", 2), Path::new("/e/report/trials/a/2.html"));
        assert_eq!(up_from(&page), "../../../");
        assert_eq!(
            join_segments(e.path(), &EvalDir::trial_segments("a", 2)),
            e.trial("a", 2).path()
        );
    }
}
