//! Reading a run directory into the read model of [`super`]: the frozen config's
//! facts, and each iteration from the journal and its files (completeness included).

use std::collections::BTreeMap;
use std::path::Path;

use ahe_bench::Scores;

use super::{
    phase_name, Incomplete, IterationFiles, IterationReport, PhaseTime, RoleUsage, RunInfo,
    TrialRef, EVOLVE_PHASES, FINAL_PHASES,
};
use ahe_rundir::attribution::ChangeEvaluation;
use ahe_rundir::journal::{Entry, Phase};
use ahe_rundir::manifest::Manifest;
use ahe_rundir::run_dir::IterationDir;

/// Whether no role's model in a `run.toml` value names a non-zero price.
fn prices_unknown(v: &toml::Value) -> bool {
    let models = v.get("models");
    ["code_agent", "debugger", "evolve"].iter().all(|r| {
        let m = models.and_then(|m| m.get(r).or_else(|| m.get("default")));
        [
            "price_input_per_mtok",
            "price_cached_input_per_mtok",
            "price_cache_write_per_mtok",
            "price_output_per_mtok",
        ]
        .iter()
        .all(|p| {
            m.and_then(|m| m.get(p))
                .and_then(|x| x.as_float().or_else(|| x.as_integer().map(|i| i as f64)))
                .unwrap_or(0.0)
                == 0.0
        })
    })
}

/// Whether every agent role runs on the embedded local model (no API, so no money).
fn local_only(v: &toml::Value) -> bool {
    let models = v.get("models");
    ["code_agent", "debugger", "evolve"].iter().all(|r| {
        let m = models.and_then(|m| m.get(r).or_else(|| m.get("default")));
        m.and_then(|m| m.get("provider")).and_then(|p| p.as_str()) == Some("local")
    })
}

/// The facts of a frozen `run.toml` (lenient: a missing field stays empty).
pub(super) fn read_info(path: &Path) -> RunInfo {
    let v: toml::Value = std::fs::read_to_string(path)
        .ok()
        .and_then(|s| toml::from_str(&s).ok())
        .unwrap_or(toml::Value::Table(Default::default()));
    let s = |a: &str, b: &str| {
        v.get(a)
            .and_then(|x| x.get(b))
            .and_then(|x| x.as_str())
            .unwrap_or("")
            .to_string()
    };
    RunInfo {
        k: v.get("k").and_then(|x| x.as_integer()).unwrap_or(0) as u32,
        iterations: v
            .get("iterations")
            .and_then(|x| x.as_integer())
            .unwrap_or(0) as u32,
        benchmark: s("benchmark", "path"),
        sandbox: s("sandbox", "backend"),
        rollback: s("evolve", "rollback"),
        budget_usd: v
            .get("evolve")
            .and_then(|x| x.get("budget_usd"))
            .and_then(|x| x.as_float().or_else(|| x.as_integer().map(|i| i as f64))),
        cost_unknown: path.exists() && prices_unknown(&v) && !local_only(&v),
        local_only: path.exists() && local_only(&v),
        judge: v.get("models").and_then(|m| m.get("judge")).is_some(),
    }
}

/// The file a finished phase must have left.
fn phase_output(it: &IterationDir, p: Phase) -> Option<std::path::PathBuf> {
    match p {
        Phase::Rollout => Some(it.eval().scores_path()),
        Phase::Clean => None,
        Phase::Attribute => Some(it.change_evaluation_path()),
        Phase::Canary | Phase::Confirm | Phase::Counterfactual => None,
        Phase::Final | Phase::Baseline => None,
        Phase::Debug => Some(it.overview_path()),
        Phase::Evolve => Some(it.manifest_path()),
        Phase::Commit => Some(it.diff_path()),
    }
}

/// What the journal says about one iteration: phases started and their times, notes, and
/// trials done (by task, then attempt).
#[derive(Default)]
struct JournalFacts {
    started: BTreeMap<&'static str, bool>,
    secs: BTreeMap<&'static str, f64>,
    notes: Vec<String>,
    trials: BTreeMap<String, BTreeMap<u32, String>>,
}

/// The journal entries of iteration `t`.
fn journal_facts(entries: &[Entry], t: u32) -> JournalFacts {
    let mut j = JournalFacts::default();
    for e in entries {
        match e {
            Entry::PhaseStart { iter, phase, .. } if *iter == t => {
                j.started.insert(phase_name(*phase), true);
            }
            Entry::PhaseEnd {
                iter,
                phase,
                secs: s,
                ..
            } if *iter == t => {
                j.secs.insert(phase_name(*phase), *s);
            }
            Entry::Note { iter, message } if *iter == t => j.notes.push(message.clone()),
            Entry::TrialDone {
                iter,
                task,
                attempt,
                status,
            } if *iter == t => {
                j.trials
                    .entry(task.clone())
                    .or_default()
                    .insert(*attempt, status.clone());
            }
            _ => {}
        }
    }
    j
}

/// The phases an iteration is expected to run, and their times from the journal.
fn phase_times(is_final: bool, j: &JournalFacts) -> (Vec<Phase>, Vec<PhaseTime>) {
    let expected: &[Phase] = if is_final {
        &FINAL_PHASES
    } else {
        &EVOLVE_PHASES
    };
    // The closing phases (final re-evaluation, baseline) count where the run reached them:
    // runs of older versions, and runs without a baseline, never had them.
    let mut expected: Vec<Phase> = expected.to_vec();
    if is_final {
        expected.retain(|p| *p != Phase::Final || j.started.contains_key(phase_name(*p)));
        if j.started.contains_key(phase_name(Phase::Baseline)) {
            expected.push(Phase::Baseline);
        }
    }
    let phases: Vec<PhaseTime> = expected
        .iter()
        .map(|p| {
            let name = phase_name(*p);
            PhaseTime {
                phase: name.into(),
                started: j.started.contains_key(name) || j.secs.contains_key(name),
                finished: j.secs.contains_key(name),
                secs: j.secs.get(name).copied(),
            }
        })
        .collect();
    (expected, phases)
}

/// The analysis and evolve files an iteration holds (run-relative paths).
fn iteration_files(it: &IterationDir) -> IterationFiles {
    let present = |p: std::path::PathBuf| p.is_file().then(|| it.rel(&p));
    let mut files = IterationFiles {
        overview: present(it.overview_path()),
        diff: present(it.diff_path()),
        summary: present(it.summary_path()),
        details: BTreeMap::new(),
    };
    if let Ok(rd) = std::fs::read_dir(it.details()) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(task) = name.strip_suffix(".md") {
                files.details.insert(task.to_string(), it.rel(&e.path()));
            }
        }
    }
    files
}

/// Where an iteration stops short: the first expected phase that started but did not
/// finish, finished without its output, or (unless the run ended, e.g. on budget) never ran.
fn completeness(
    it: &IterationDir,
    expected: &[Phase],
    phases: &[PhaseTime],
    scored: bool,
    j: &JournalFacts,
    ended: bool,
) -> Option<Incomplete> {
    let t = it.number();
    for (p, pt) in expected.iter().zip(phases) {
        let missing = phase_output(it, *p)
            .filter(|f| pt.finished && !f.is_file())
            .map(|f| {
                f.strip_prefix(it.path())
                    .unwrap_or(&f)
                    .display()
                    .to_string()
            });
        let msg = if pt.started && !pt.finished {
            Some(match (*p, !scored) {
                (Phase::Rollout, true) => format!(
                    "phase rollout did not finish ({} trials done)",
                    j.trials.values().map(|m| m.len()).sum::<usize>()
                ),
                _ => format!("phase {} did not finish", phase_name(*p)),
            })
        } else if let Some(f) = missing {
            Some(format!(
                "phase {} finished but {f} is missing",
                phase_name(*p)
            ))
        } else if !pt.started && !ended {
            Some(format!("phase {} has not run", phase_name(*p)))
        } else {
            None
        };
        if let Some(m) = msg {
            return Some(Incomplete {
                iteration: t,
                phase: Some(phase_name(*p).into()),
                message: format!("iteration {t}: {m}"),
            });
        }
    }
    (ended && !phases[0].finished).then(|| Incomplete {
        iteration: t,
        phase: Some("rollout".into()),
        message: format!("iteration {t}: phase rollout has not run"),
    })
}

/// One iteration from the journal entries and its directory (`n`: planned iterations).
pub(super) fn load_iteration(
    it: &IterationDir,
    n: u32,
    entries: &[Entry],
    ended: bool,
) -> IterationReport {
    let t = it.number();
    let is_final = n > 0 && t == n + 1;
    let j = journal_facts(entries, t);
    let (expected, phases) = phase_times(is_final, &j);
    let loaded = it.scores().ok();
    let record = loaded
        .as_ref()
        .map(|s| s.record.clone())
        .unwrap_or_default();
    let roles_of = loaded.as_ref().map(|s| s.roles()).unwrap_or_default();
    let scores: Option<Scores> = loaded.map(|s| s.scores);
    let evaluation: Option<ChangeEvaluation> = it.change_evaluation().ok();
    let manifest: Option<Manifest> = it.manifest().ok();
    let files = iteration_files(it);
    let trials = list_trials(it);
    let incomplete = completeness(it, &expected, &phases, scores.is_some(), &j, ended);
    let roles: BTreeMap<String, RoleUsage> = roles_of
        .into_iter()
        .map(|(role, c)| {
            let u = RoleUsage {
                input_tokens: c.input_tokens,
                output_tokens: c.output_tokens,
                cost_usd: c.cost_usd,
            };
            (role, u)
        })
        .collect();
    IterationReport {
        iteration: t,
        is_final,
        evaluated_commit: it.evaluated(),
        phases,
        complete: incomplete.is_none(),
        incomplete,
        journal_trials: j.trials,
        scores,
        record,
        evaluation,
        manifest,
        notes: j.notes,
        roles,
        extra: it.evidence().total_cost(),
        files,
        trials,
        variants: ahe_rundir::read_json(&it.variants_path()).ok(),
    }
}

/// The trial directories of an iteration, sorted by task then attempt number.
fn list_trials(it: &IterationDir) -> Vec<TrialRef> {
    it.trial_dirs()
        .into_iter()
        .map(|d| TrialRef {
            task: d.task(),
            attempt: d.attempt(),
            cleaned: d.clean_path().is_file(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_model_run_costs_nothing_and_an_unpriced_api_run_is_unknown() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("run.toml");
        let local = "[models.default]\nprovider = \"local\"\nmodel = \"smollm2\"\n";
        std::fs::write(&p, local).unwrap();
        let i = read_info(&p);
        assert!(i.local_only && !i.cost_unknown);
        let api =
            "[models.default]\nprovider = \"local\"\n[models.evolve]\nprovider = \"openai\"\n";
        std::fs::write(&p, api).unwrap();
        let i = read_info(&p);
        assert!(
            !i.local_only && i.cost_unknown,
            "an unpriced API role: unknown dollars"
        );
    }
}
