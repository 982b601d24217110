//! The run directory (docs/run-directory.md) as types: [`RunDir`] owns `runs/<name>/`, an
//! [`IterationDir`] owns `iterations/NNN/`, and trials are `ahe_bench::TrialDir`s. Every
//! path and every read and write of a run's files goes through here; no other module names
//! a file of the run directory. An iteration's own facts (visible and held-out pass@1, the
//! evaluated commit, per-role costs) are the typed [`IterationRecord`], stored in
//! `scores.json` `meta` beside the evaluation's facts.

pub mod analysis;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ahe_bench::layout::{join_segments, REPORT_HTML, REPORT_MD};

/// Name of the run directory's folder of iterations (`iterations/NNN/`); report pages link
/// into it.
pub const ITERATIONS: &str = "iterations";
use ahe_bench::{EvalDir, TrialDir};
use ahe_model::Usage;

use crate::attribution::ChangeEvaluation;
use crate::manifest::Manifest;
use crate::snapshots::ChangeSnapshots;
use crate::{read_json, write_json};

pub use crate::records::{Best, Contender, IterationRecord, IterationScores, RoleCost};

/// Dollars spent per iteration, as last read or written (shared by a run's dirs).
type Ledger = Arc<Mutex<BTreeMap<u32, f64>>>;

/// `runs/<name>/`.
#[derive(Debug, Clone)]
pub struct RunDir {
    root: PathBuf,
    ledger: Ledger,
}

impl RunDir {
    /// The run directory at `root` (nothing is created).
    pub fn new(root: impl Into<PathBuf>) -> RunDir {
        RunDir {
            root: root.into(),
            ledger: Ledger::default(),
        }
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// The run's name (the directory's name).
    pub fn name(&self) -> String {
        self.root
            .canonicalize()
            .unwrap_or_else(|_| self.root.clone())
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Whether `root` holds a run (a journal, a frozen config or iterations).
    pub fn looks_like_run(&self) -> bool {
        self.journal_path().exists() || self.config_path().exists() || self.iterations().is_dir()
    }

    /// `run.toml`: the frozen, fully merged config.
    pub fn config_path(&self) -> PathBuf {
        self.root.join("run.toml")
    }

    /// `journal.jsonl`.
    pub fn journal_path(&self) -> PathBuf {
        self.root.join("journal.jsonl")
    }

    /// `.lock`: the run's exclusive lock.
    pub fn lock_path(&self) -> PathBuf {
        self.root.join(".lock")
    }

    /// `harness/`: the harness git repository.
    pub fn harness_repo(&self) -> PathBuf {
        self.root.join("harness")
    }

    /// `model-cache/`: the record/replay cache of every model client of the run.
    pub fn model_cache(&self) -> PathBuf {
        self.root.join("model-cache")
    }

    /// `report/`: where `ahe report` writes.
    pub fn report_dir(&self) -> PathBuf {
        self.root.join("report")
    }

    /// `report/trials/NNN/<task>/<attempt>.html`: a trial's trace page.
    pub fn trial_page(&self, t: u32, task: &str, attempt: u32) -> PathBuf {
        join_segments(&self.root, &Self::trial_page_segments(t, task, attempt))
    }

    /// The path segments of a trial's page below the run directory:
    /// `report/trials/NNN/<task>/<attempt>.html` (links from report pages are built from them).
    pub fn trial_page_segments(t: u32, task: &str, attempt: u32) -> Vec<String> {
        let mut v = vec!["report".to_string(), "trials".into(), format!("{t:03}")];
        v.extend([task.to_string(), format!("{attempt}.html")]);
        v
    }

    /// The path segments of a trial's directory below the run directory:
    /// `iterations/NNN/trials/<task>/<attempt>`.
    pub fn trial_segments(t: u32, task: &str, attempt: u32) -> Vec<String> {
        let mut v = vec!["iterations".to_string(), format!("{t:03}")];
        v.extend(EvalDir::trial_segments(task, attempt));
        v
    }

    /// `report.html`: the run's report.
    pub fn report_html(&self) -> PathBuf {
        self.root.join(REPORT_HTML)
    }

    /// `report.md`: the run's report in Markdown.
    pub fn report_md(&self) -> PathBuf {
        self.root.join(REPORT_MD)
    }

    /// `baseline/`: the seed's matched-budget trials (`ahe baseline`): trials/, scores.json
    /// and `baseline.json`.
    pub fn baseline(&self) -> EvalDir {
        EvalDir::new(self.root.join("baseline"))
    }

    /// `baseline/harness/`: the seed's export while the baseline's trials run.
    pub fn baseline_harness(&self) -> PathBuf {
        self.root.join("baseline").join("harness")
    }

    /// `baseline/baseline.json`: the matched-budget comparison.
    pub fn baseline_path(&self) -> PathBuf {
        self.root.join("baseline").join("baseline.json")
    }

    /// The matched-budget comparison, when `ahe baseline` (or the baseline phase) ran.
    pub fn baseline_record(&self) -> Option<crate::final_eval::Baseline> {
        read_json(&self.baseline_path()).ok()
    }

    /// Writes `baseline/baseline.json`.
    pub fn write_baseline(&self, b: &crate::final_eval::Baseline) -> anyhow::Result<()> {
        write_json(&self.baseline_path(), b)
    }

    /// `final.json`: the final re-evaluation of best, seed and runner-up.
    pub fn final_eval(&self) -> Option<crate::final_eval::FinalEval> {
        read_json(&self.root.join("final.json")).ok()
    }

    /// Writes `final.json`.
    pub fn write_final_eval(&self, f: &crate::final_eval::FinalEval) -> anyhow::Result<()> {
        write_json(&self.root.join("final.json"), f)
    }

    /// `iterations/`.
    pub fn iterations(&self) -> PathBuf {
        self.root.join(ITERATIONS)
    }

    /// `iterations/NNN/`.
    pub fn iteration(&self, t: u32) -> IterationDir {
        IterationDir {
            t,
            eval: EvalDir::new(self.iterations().join(format!("{t:03}"))),
            ledger: self.ledger.clone(),
        }
    }

    /// The highest iteration number with a directory on disk (0 when none).
    pub fn last_iteration_on_disk(&self) -> u32 {
        std::fs::read_dir(self.iterations())
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
            .max()
            .unwrap_or(0)
    }

    /// `best.json`, when some iteration was evaluated.
    pub fn best(&self) -> Option<Best> {
        read_json(&self.root.join("best.json")).ok()
    }

    /// Writes `best.json`.
    pub fn write_best(&self, b: &Best) -> anyhow::Result<()> {
        write_json(&self.root.join("best.json"), b)
    }

    /// Dollars spent by every role in iterations 1..=t (each iteration read from disk once,
    /// then kept up to date by the writes through this run's directories).
    pub fn spent_usd(&self, t: u32) -> f64 {
        (1..=t)
            .map(|i| {
                let known = self.ledger.lock().unwrap().get(&i).copied();
                known.unwrap_or_else(|| {
                    let s = self.iteration(i).scores().map_or(0.0, |s| s.spent_usd());
                    self.ledger.lock().unwrap().insert(i, s);
                    s
                })
            })
            .sum()
    }
}

/// `iterations/NNN/`: one iteration's evaluation, attribution, analysis and evolve step.
#[derive(Debug, Clone)]
pub struct IterationDir {
    t: u32,
    eval: EvalDir,
    ledger: Ledger,
}

impl IterationDir {
    /// The iteration directory at `path` outside a [`RunDir`] (its number from its name).
    pub fn at(path: &Path) -> IterationDir {
        IterationDir {
            t: path
                .file_name()
                .and_then(|s| s.to_str())
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
            eval: EvalDir::new(path),
            ledger: Ledger::default(),
        }
    }

    /// The iteration number.
    pub fn number(&self) -> u32 {
        self.t
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        self.eval.path()
    }

    /// The evaluation part (`scores.json`, `trials/`).
    pub fn eval(&self) -> &EvalDir {
        &self.eval
    }

    /// Creates the directory.
    pub fn create(&self) -> anyhow::Result<()> {
        Ok(std::fs::create_dir_all(self.path())?)
    }

    /// `trials/`.
    pub fn trials(&self) -> PathBuf {
        self.eval.trials()
    }

    /// Every trial directory, sorted by task then attempt.
    pub fn trial_dirs(&self) -> Vec<TrialDir> {
        self.eval.trial_dirs()
    }

    /// `trials/<task>/<attempt>/`.
    pub fn trial(&self, task: &str, attempt: u32) -> TrialDir {
        self.eval.trial(task, attempt)
    }

    /// `harness/`: the export of the evaluated commit that the rollout runs.
    pub fn harness_checkout(&self) -> PathBuf {
        self.path().join("harness")
    }

    /// The evaluated commit (`evaluated.txt`), when recorded.
    pub fn evaluated(&self) -> Option<String> {
        std::fs::read_to_string(self.path().join("evaluated.txt"))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }

    /// Records the evaluated commit (`evaluated.txt`).
    pub fn write_evaluated(&self, commit: &str) -> anyhow::Result<()> {
        self.create()?;
        Ok(std::fs::write(
            self.path().join("evaluated.txt"),
            format!("{commit}\n"),
        )?)
    }

    /// `scores.json` with the loop's record.
    pub fn scores(&self) -> anyhow::Result<IterationScores> {
        Ok(IterationScores::of(self.eval.read_scores()?))
    }

    /// Writes `scores.json`: the evaluation with `record` in its meta.
    pub fn write_scores(&self, mut s: IterationScores) -> anyhow::Result<IterationScores> {
        s.store_record();
        self.eval.write_scores(&s.scores)?;
        self.ledger.lock().unwrap().insert(self.t, s.spent_usd());
        Ok(s)
    }

    /// Adds a role's tokens and cost to the record (one write of `scores.json`).
    pub fn record_role_cost(&self, role: &str, usage: &Usage, cost: f64) -> anyhow::Result<()> {
        let mut s = self.scores()?;
        let code = s.roles().remove("code_agent").unwrap_or_default();
        let roles = s.record.roles.get_or_insert_with(BTreeMap::new);
        roles.insert("code_agent".into(), code);
        roles.insert(
            role.into(),
            RoleCost {
                input_tokens: usage.input_tokens,
                cached_input_tokens: usage.cached_input_tokens,
                output_tokens: usage.output_tokens,
                cache_write_input_tokens: usage.cache_write_input_tokens,
                reasoning_tokens: usage.reasoning_tokens,
                cost_usd: cost,
            },
        );
        self.write_scores(s).map(|_| ())
    }

    /// Path of `change_evaluation.json`.
    pub fn change_evaluation_path(&self) -> PathBuf {
        self.path().join("change_evaluation.json")
    }

    /// `change_evaluation.json`: the previous iteration's changes judged on these scores.
    pub fn change_evaluation(&self) -> anyhow::Result<ChangeEvaluation> {
        read_json(&self.change_evaluation_path())
    }

    /// Writes `change_evaluation.json` atomically (temp file, then rename).
    pub fn write_change_evaluation(&self, ev: &ChangeEvaluation) -> anyhow::Result<()> {
        self.create()?;
        let path = self.change_evaluation_path();
        let mut json = serde_json::to_vec_pretty(ev)?;
        json.push(b'\n');
        ahe_bench::layout::write_atomic(&path, &json)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))
    }

    /// `extra/<set>/`: an extra trial set's harness checkout, trials and scores (each `/`
    /// of `set` a level; other characters than `[A-Za-z0-9_.-]` become `_`, `..` too).
    pub fn extra(&self, set: &str) -> PathBuf {
        let mut p = self.path().join("extra");
        for part in set.split('/') {
            let safe: String = part
                .chars()
                .map(|c| match c {
                    'a'..='z' | 'A'..='Z' | '0'..='9' | '_' | '-' | '.' => c,
                    _ => '_',
                })
                .collect();
            p.push(match safe.as_str() {
                "" | "." | ".." => "_".to_string(),
                _ => safe,
            });
        }
        p
    }

    /// The extra trial set `set` as an evaluation directory (its `trials/<task>/<attempt>/`).
    pub fn extra_eval(&self, set: &str) -> EvalDir {
        EvalDir::new(self.extra(set))
    }

    /// `extra/<set>/harness/`: the checkout of the harness commit the set runs.
    pub fn extra_harness(&self, set: &str) -> PathBuf {
        self.extra(set).join("harness")
    }

    /// Path of `evidence.json`.
    pub fn evidence_path(&self) -> PathBuf {
        self.path().join("evidence.json")
    }

    /// `evidence.json` (confirmation and counterfactual trials); empty when absent.
    pub fn evidence(&self) -> crate::evidence::Evidence {
        read_json(&self.evidence_path()).unwrap_or_default()
    }

    /// Writes `evidence.json` atomically.
    pub fn write_evidence(&self, e: &crate::evidence::Evidence) -> anyhow::Result<()> {
        write_json(&self.evidence_path(), e)
    }

    /// `analysis/`: the debugger's reports.
    pub fn analysis(&self) -> PathBuf {
        self.path().join("analysis")
    }

    /// `analysis/overview.md`.
    pub fn overview_path(&self) -> PathBuf {
        self.analysis().join("overview.md")
    }

    /// `analysis/overview.md`, empty when the debug phase has not written it.
    pub fn overview(&self) -> String {
        std::fs::read_to_string(self.overview_path()).unwrap_or_default()
    }

    /// `analysis/detail/`: one `<task>.md` per analysed task.
    pub fn details(&self) -> PathBuf {
        self.analysis().join("detail")
    }

    /// `analysis/detail/<task>.md`.
    pub fn detail_path(&self, task: &str) -> PathBuf {
        self.details().join(format!("{task}.md"))
    }

    /// `analysis/debugger/<task>/trace.jsonl`: the debugger agent's own trace.
    pub fn debugger_trace(&self, task: &str) -> PathBuf {
        self.analysis()
            .join("debugger")
            .join(task)
            .join("trace.jsonl")
    }

    /// `evolve/`: the evolve step's files.
    pub fn evolve(&self) -> PathBuf {
        self.path().join("evolve")
    }

    /// `evolve/inputs/`: what the evolve agent reads besides traces and analysis.
    pub fn evolve_inputs(&self) -> PathBuf {
        self.evolve().join("inputs")
    }

    /// Writes `evolve/inputs/`: a copy of `change_evaluation.json`, `score_history.md`,
    /// `stability.md` and `best.json`.
    pub fn write_evolve_inputs(
        &self,
        score_history: &str,
        stability: &str,
        best: Option<&Best>,
    ) -> anyhow::Result<()> {
        let d = self.evolve_inputs();
        std::fs::create_dir_all(&d)?;
        std::fs::copy(
            self.change_evaluation_path(),
            d.join("change_evaluation.json"),
        )?;
        std::fs::write(d.join("score_history.md"), score_history)?;
        std::fs::write(d.join("stability.md"), stability)?;
        if let Some(b) = best {
            write_json(&d.join("best.json"), b)?;
        }
        Ok(())
    }

    /// `evolve/preflight/`: the smoke trial of the new harness.
    pub fn preflight(&self) -> PathBuf {
        self.evolve().join("preflight")
    }

    /// `evolve/trace.jsonl`: the evolve agent's trace.
    pub fn evolve_trace(&self) -> PathBuf {
        self.evolve().join(ahe_bench::layout::TRACE)
    }

    /// Path of `evolve/manifest.json`.
    pub fn manifest_path(&self) -> PathBuf {
        self.evolve().join("manifest.json")
    }

    /// `evolve/manifest.json`: the changes this iteration made.
    pub fn manifest(&self) -> anyhow::Result<Manifest> {
        read_json(&self.manifest_path())
    }

    /// Writes `evolve/manifest.json` atomically.
    pub fn write_manifest(&self, m: &Manifest) -> anyhow::Result<()> {
        write_json(&self.manifest_path(), m)
    }

    /// Path of `evolve/snapshots.json`: the working-tree snapshot after each change.
    pub fn change_snapshots_path(&self) -> PathBuf {
        self.evolve().join("snapshots.json")
    }

    /// `evolve/snapshots.json` (empty when the evolve phase recorded none, e.g. older runs).
    pub fn change_snapshots(&self) -> anyhow::Result<ChangeSnapshots> {
        let p = self.change_snapshots_path();
        if !p.is_file() {
            return Ok(ChangeSnapshots::default());
        }
        read_json(&p)
    }

    /// Writes `evolve/snapshots.json` atomically.
    pub fn write_change_snapshots(&self, s: &ChangeSnapshots) -> anyhow::Result<()> {
        write_json(&self.change_snapshots_path(), s)
    }

    /// Path of `evolve/diff.patch`.
    pub fn diff_path(&self) -> PathBuf {
        self.evolve().join("diff.patch")
    }

    /// Path of `evolve/summary.md`.
    pub fn summary_path(&self) -> PathBuf {
        self.evolve().join("summary.md")
    }

    /// Writes the committed step's `evolve/diff.patch` and `evolve/summary.md`.
    pub fn write_commit_files(&self, diff: &str, summary: &str) -> anyhow::Result<()> {
        std::fs::create_dir_all(self.evolve())?;
        std::fs::write(self.diff_path(), diff)?;
        std::fs::write(self.summary_path(), summary)?;
        Ok(())
    }

    /// A path relative to the run directory (`iterations/NNN/<rel>`), for links in reports.
    pub fn rel(&self, p: &Path) -> String {
        let rel = p.strip_prefix(self.path()).unwrap_or(p);
        format!("iterations/{:03}/{}", self.t, rel.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Component;

    /// `p` with each `..` taking back the folder before it.
    fn normalize(p: &Path) -> PathBuf {
        let mut out = PathBuf::new();
        for c in p.components() {
            match c {
                Component::ParentDir => {
                    out.pop();
                }
                c => out.push(c),
            }
        }
        out
    }

    #[test]
    fn the_segments_of_trial_pages_and_dirs_name_the_paths_the_dirs_use() {
        let rd = RunDir::new("/r");
        assert_eq!(
            join_segments(rd.path(), &RunDir::trial_segments(3, "a b", 2)),
            rd.iteration(3).trial("a b", 2).path()
        );
        let page = rd.trial_page(3, "t", 1);
        assert_eq!(page, Path::new("/r/report/trials/003/t/1.html"));
        let up = ahe_bench::layout::up_from(&RunDir::trial_page_segments(3, "t", 1));
        assert_eq!(up, "../../../../");
        assert_eq!(normalize(&page.parent().unwrap().join(&up)), rd.path());
    }
}
