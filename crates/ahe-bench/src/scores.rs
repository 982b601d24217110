//! Per-task and per-run scores: k-trial status, unbiased pass@1, bootstrap intervals.

use std::collections::BTreeMap;

use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::record::{TrialResult, TrialStatus};

/// Status of a task over its k trials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Every trial passed.
    Pass,
    /// At least one trial that ran did not pass.
    Fail,
    /// No trial could run (all infra errors).
    Infra,
}

/// Short per-trial line kept in `scores.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrialSummary {
    /// 1-based attempt number.
    pub attempt: u32,
    /// Final status.
    pub status: TrialStatus,
    /// Verifier reward, if any.
    pub reward: Option<f64>,
    /// Wall time of the trial.
    pub duration_sec: f64,
    /// Agent turns.
    pub turns: u32,
    /// Input + output tokens.
    pub tokens: u64,
    /// Whether the trial was flagged suspect (signs of tampering with the verifier).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspect: bool,
    /// Whether the reward-integrity change checks ran (`false`: this host could not read the
    /// sandbox's layer); `None` when the verifier did not run, or the run predates the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked: Option<bool>,
}

/// Scores of one task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskScore {
    /// Trials run.
    pub k: u32,
    /// Trials passed.
    pub passed: u32,
    /// Task status.
    pub status: TaskStatus,
    /// passed / k (infra counted as failure).
    pub pass_at_1: f64,
    /// Trials, by attempt.
    pub trials: Vec<TrialSummary>,
}

/// Token totals.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Tokens {
    /// Prompt tokens.
    pub input: u64,
    /// Of those, read from the provider's prompt cache.
    pub cached_input: u64,
    /// Completion tokens.
    pub output: u64,
    /// Of the prompt tokens, written to the provider's prompt cache.
    #[serde(default)]
    pub cache_write_input: u64,
    /// Of the completion tokens, reasoning (thinking).
    #[serde(default)]
    pub reasoning: u64,
}

/// Wall-time figures.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Durations {
    /// Wall time of the whole evaluation.
    pub wall_sec: f64,
    /// Mean trial wall time.
    pub mean_trial_sec: f64,
    /// Sum of sandbox setup time.
    pub setup_sec: f64,
    /// Sum of agent time.
    pub agent_sec: f64,
    /// Sum of verifier time.
    pub verifier_sec: f64,
}

/// The contents of `scores.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Scores {
    /// Mean over tasks of passed/k (infra and suspect passes counted as failure): the figure
    /// `best`, attribution, the canary, comparisons and reports use.
    pub pass_at_1: f64,
    /// pass@1 counting suspect passes as passes (what the verifier alone said).
    #[serde(default)]
    pub pass_at_1_raw: f64,
    /// 95% percentile-bootstrap interval over tasks.
    pub pass_at_1_ci: [f64; 2],
    /// pass@1 over tasks that were not all-infra (reported apart from the headline).
    pub pass_at_1_excluding_infra: f64,
    /// Number of tasks.
    pub n_tasks: usize,
    /// Trials per task requested.
    pub k: u32,
    /// Count of trials per status.
    pub statuses: BTreeMap<String, u64>,
    /// Trials flagged suspect (counted apart: see `pass_at_1_excluding_suspect`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub suspect_trials: u64,
    /// pass@1 with every suspect pass counted as not passed (only when some trial is suspect;
    /// equal to `pass_at_1` since suspect passes count as failures there; kept for readers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass_at_1_excluding_suspect: Option<f64>,
    /// Per-task scores.
    pub tasks: BTreeMap<String, TaskScore>,
    /// Token totals of the code agent.
    pub tokens: Tokens,
    /// Cost of the code agent in USD.
    pub cost_usd: f64,
    /// Wall-time figures.
    pub durations: Durations,
    /// Facts about the evaluation (model, harness, backend, model-call counters...).
    #[serde(default)]
    pub meta: ScoresMeta,
}

/// `scores.json` `meta`: who was evaluated, where, and what the model calls cost.
/// Keys written by other layers (an evolve run's iteration record) are kept in `extra`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScoresMeta {
    /// The code agent's model (`provider:model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Directory of the evaluated harness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness: Option<String>,
    /// Sandbox backend name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// Model calls made, retries included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_calls: Option<u64>,
    /// Model calls retried after a transient error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_retries: Option<u64>,
    /// Transient model faults by kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_faults: Option<BTreeMap<String, u64>>,
    /// Model calls that failed for good.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_failed_calls: Option<u64>,
    /// Every model call paid for, including attempts re-run after an infra error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_cost_usd: Option<f64>,
    /// The run a replayed harness came from (`ahe eval --harness runs/X@REF`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_of: Option<String>,
    /// Full commit id of a replayed harness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness_commit: Option<String>,
    /// Trials per docker host, when the backend has several (`[sandbox] hosts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<BTreeMap<String, HostCount>>,
    /// Keys of other layers, kept as they are.
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

/// One docker host's part in an evaluation (`scores.json` `meta.hosts.<name>`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostCount {
    /// Trials whose (final) run was on this host.
    pub trials: u64,
    /// Of those, passed.
    pub passed: u64,
    /// Runs lost on it (the engine stopped answering), each re-run on another host.
    pub lost: u64,
    /// The engine's address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Trials it runs at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<usize>,
    /// The most trials it ran at once (over the backend's life).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak: Option<usize>,
    /// Whether it answered when the evaluation ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up: Option<bool>,
    /// Images built on it (over the backend's life; once per task environment per host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub builds: Option<u64>,
    /// Images pulled on it (over the backend's life).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pulls: Option<u64>,
}

/// Trials per host from trial results (`None` when no trial names a host).
pub fn host_counts(results: &[TrialResult]) -> Option<BTreeMap<String, HostCount>> {
    let mut m: BTreeMap<String, HostCount> = BTreeMap::new();
    for r in results {
        if let Some(h) = &r.host {
            let c = m.entry(h.clone()).or_default();
            c.trials += 1;
            c.passed += (r.status == TrialStatus::Pass) as u64;
        }
        for h in &r.lost_hosts {
            m.entry(h.clone()).or_default().lost += 1;
        }
    }
    (!m.is_empty()).then_some(m)
}

/// Adds what the backend knows of its hosts (address, capacity, peak, health) to the counts;
/// hosts no trial ran on are listed too.
pub fn add_host_loads(
    counts: &mut Option<BTreeMap<String, HostCount>>,
    loads: &[ahe_sandbox::HostLoad],
) {
    if loads.is_empty() {
        return;
    }
    let m = counts.get_or_insert_with(BTreeMap::new);
    for l in loads {
        let c = m.entry(l.name.clone()).or_default();
        c.url = Some(l.url.clone());
        c.capacity = Some(l.capacity);
        c.peak = Some(l.peak);
        c.up = Some(l.up);
        c.builds = Some(l.builds);
        c.pulls = Some(l.pulls);
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Status of a task from its trials (docs/attribution.md#task-status-pass1-flips).
pub fn task_status(trials: &[TrialStatus]) -> TaskStatus {
    let ran: Vec<&TrialStatus> = trials
        .iter()
        .filter(|s| **s != TrialStatus::InfraError)
        .collect();
    if ran.is_empty() {
        TaskStatus::Infra
    } else if trials.iter().all(|s| *s == TrialStatus::Pass) {
        TaskStatus::Pass
    } else {
        TaskStatus::Fail
    }
}

/// Mean of per-task rates and its 95% percentile-bootstrap interval (seeded: deterministic).
pub fn mean_with_ci(rates: &[f64]) -> (f64, [f64; 2]) {
    if rates.is_empty() {
        return (0.0, [0.0, 0.0]);
    }
    let n = rates.len();
    let mean = rates.iter().sum::<f64>() / n as f64;
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let reps = 2000;
    let mut means: Vec<f64> = (0..reps)
        .map(|_| (0..n).map(|_| rates[rng.gen_range(0..n)]).sum::<f64>() / n as f64)
        .collect();
    means.sort_by(|a, b| a.total_cmp(b));
    let lo = means[(reps as f64 * 0.025) as usize];
    let hi = means[((reps as f64 * 0.975) as usize).min(reps - 1)];
    (mean, [lo, hi])
}

/// Chen et al.'s unbiased pass@n of one task from `trials` samples of which `passed`
/// passed: the chance that n samples drawn without replacement hold at least one pass,
/// `1 - C(trials - passed, n) / C(trials, n)`. None when fewer than n samples exist.
pub fn pass_at_n(trials: u32, passed: u32, n: u32) -> Option<f64> {
    if n == 0 || trials < n || passed > trials {
        return None;
    }
    if trials - passed < n {
        return Some(1.0);
    }
    // The product form avoids huge binomials: prod_{i = trials-passed+1}^{trials} (1 - n/i).
    let miss: f64 = ((trials - passed + 1)..=trials)
        .map(|i| 1.0 - n as f64 / i as f64)
        .product();
    Some(1.0 - miss)
}

/// Builds scores from finished trials (any order).
pub fn compute(k: u32, results: &[TrialResult], wall_sec: f64) -> Scores {
    let mut by_task: BTreeMap<String, Vec<&TrialResult>> = BTreeMap::new();
    for r in results {
        by_task.entry(r.task.clone()).or_default().push(r);
    }
    let mut tasks = BTreeMap::new();
    let mut totals = Totals {
        durations: Durations {
            wall_sec,
            ..Default::default()
        },
        ..Default::default()
    };
    for (name, mut trs) in by_task {
        trs.sort_by_key(|t| t.attempt);
        for t in &trs {
            totals.add(t);
        }
        tasks.insert(name, task_score(&trs));
    }
    let mut d = totals.durations;
    if !results.is_empty() {
        d.mean_trial_sec /= results.len() as f64;
    }
    let suspect_trials = results.iter().filter(|r| r.suspect.is_some()).count() as u64;
    let rates: Vec<f64> = tasks.values().map(|t| t.pass_at_1).collect();
    let (pass_at_1, ci) = mean_with_ci(&rates);
    Scores {
        pass_at_1,
        pass_at_1_ci: ci,
        pass_at_1_excluding_infra: mean_excluding_infra(&tasks),
        n_tasks: tasks.len(),
        k,
        statuses: totals.statuses,
        suspect_trials,
        pass_at_1_raw: raw_pass_at_1(&tasks),
        pass_at_1_excluding_suspect: (suspect_trials > 0).then_some(pass_at_1),
        tasks,
        tokens: totals.tokens,
        cost_usd: totals.cost,
        durations: d,
        meta: ScoresMeta {
            hosts: host_counts(results),
            ..Default::default()
        },
    }
}

/// Sums over every trial of an evaluation: trials per status, tokens, dollars, and seconds
/// per phase (`mean_trial_sec` holds the total until divided).
#[derive(Default)]
struct Totals {
    statuses: BTreeMap<String, u64>,
    tokens: Tokens,
    cost: f64,
    durations: Durations,
}

impl Totals {
    /// Counts one trial in.
    fn add(&mut self, t: &TrialResult) {
        *self.statuses.entry(t.status.as_str().into()).or_default() += 1;
        let tokens = &mut self.tokens;
        tokens.input += t.usage.input_tokens;
        tokens.cached_input += t.usage.cached_input_tokens;
        tokens.output += t.usage.output_tokens;
        tokens.cache_write_input += t.usage.cache_write_input_tokens;
        tokens.reasoning += t.usage.reasoning_tokens;
        self.cost += t.cost_usd;
        let d = &mut self.durations;
        d.setup_sec += t.timings.setup_ms as f64 / 1000.0;
        d.agent_sec += t.timings.agent_ms as f64 / 1000.0;
        d.verifier_sec += t.timings.verifier_ms as f64 / 1000.0;
        d.mean_trial_sec += t.timings.total_ms as f64 / 1000.0;
    }
}

/// One task's score from its trials (sorted by attempt); a suspect pass counts as a fail.
fn task_score(trs: &[&TrialResult]) -> TaskScore {
    // A suspect pass is no pass for the optimiser (its raw figure is `pass_at_1_raw`).
    let passed = trs.iter().filter(|t| t.clean_pass()).count() as u32;
    let n = trs.len() as u32;
    let st: Vec<TrialStatus> = trs
        .iter()
        .map(|t| match t.status {
            TrialStatus::Pass if !t.clean_pass() => TrialStatus::Fail,
            s => s,
        })
        .collect();
    TaskScore {
        k: n,
        passed,
        status: task_status(&st),
        pass_at_1: if n == 0 {
            0.0
        } else {
            passed as f64 / n as f64
        },
        trials: trs
            .iter()
            .map(|t| TrialSummary {
                attempt: t.attempt,
                status: t.status,
                reward: t.reward,
                duration_sec: t.timings.total_ms as f64 / 1000.0,
                turns: t.turns,
                tokens: t.usage.total(),
                suspect: t.suspect.is_some(),
                checked: t.witness.as_ref().map(|_| t.change_set.is_some()),
            })
            .collect(),
    }
}

/// Mean pass@1 over the tasks counting every verifier pass, suspect ones included.
fn raw_pass_at_1(tasks: &BTreeMap<String, TaskScore>) -> f64 {
    let raw_rates: Vec<f64> = tasks
        .values()
        .map(|t| {
            let raw = t
                .trials
                .iter()
                .filter(|x| x.status == TrialStatus::Pass)
                .count();
            if t.k == 0 {
                0.0
            } else {
                raw as f64 / t.k as f64
            }
        })
        .collect();
    raw_rates.iter().sum::<f64>() / raw_rates.len().max(1) as f64
}

/// Mean pass@1 over the tasks that ran at all (0 when none did).
fn mean_excluding_infra(tasks: &BTreeMap<String, TaskScore>) -> f64 {
    let ran: Vec<f64> = tasks
        .values()
        .filter(|t| t.status != TaskStatus::Infra)
        .map(|t| t.pass_at_1)
        .collect();
    if ran.is_empty() {
        0.0
    } else {
        ran.iter().sum::<f64>() / ran.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_at_n_is_chens_unbiased_estimator() {
        // By brute force over every n-subset of 6 samples with 2 passes.
        let (t, c) = (6u32, 2u32);
        for n in 1..=t {
            let mut hit = 0u32;
            let mut all = 0u32;
            for mask in 0u32..(1 << t) {
                if mask.count_ones() == n {
                    all += 1;
                    hit += u32::from(mask & 0b11 != 0); // samples 0 and 1 pass
                }
            }
            let want = hit as f64 / all as f64;
            let got = pass_at_n(t, c, n).unwrap();
            assert!((got - want).abs() < 1e-12, "n={n}: {got} vs {want}");
        }
        assert_eq!(pass_at_n(4, 0, 2), Some(0.0));
        assert_eq!(pass_at_n(4, 4, 1), Some(1.0));
        assert_eq!(pass_at_n(3, 1, 4), None, "fewer samples than n");
        let p1 = pass_at_n(10, 3, 1).unwrap();
        assert!((p1 - 0.3).abs() < 1e-12, "pass@1 is the pass rate: {p1}");
    }
    use TrialStatus::*;

    #[test]
    fn task_status_rules() {
        assert_eq!(task_status(&[Pass, Pass]), TaskStatus::Pass);
        assert_eq!(task_status(&[Pass, Fail]), TaskStatus::Fail);
        assert_eq!(task_status(&[Pass, InfraError]), TaskStatus::Fail);
        assert_eq!(task_status(&[AgentTimeout, Pass]), TaskStatus::Fail);
        assert_eq!(task_status(&[InfraError, InfraError]), TaskStatus::Infra);
    }

    #[test]
    fn ci_brackets_mean_and_is_deterministic() {
        let rates = [1.0, 0.0, 0.5, 1.0, 1.0, 0.0, 0.5, 1.0];
        let (m, ci) = mean_with_ci(&rates);
        assert!((m - 0.625).abs() < 1e-12);
        assert!(ci[0] < m && m < ci[1], "{ci:?}");
        assert!(ci[0] >= 0.0 && ci[1] <= 1.0);
        assert_eq!(mean_with_ci(&rates).1, ci);
        let (m, ci) = mean_with_ci(&[1.0, 1.0, 1.0]);
        assert_eq!((m, ci), (1.0, [1.0, 1.0]));
    }

    fn s_flag() -> Option<crate::Suspect> {
        Some(crate::Suspect {
            reasons: vec![crate::SuspectReason {
                reason: "x".into(),
                turn: None,
            }],
        })
    }

    fn tr(task: &str, attempt: u32, status: TrialStatus) -> TrialResult {
        let mut t = TrialResult::new(task, attempt);
        t.status = status;
        t.reward = Some(if status == Pass { 1.0 } else { 0.0 });
        t
    }

    #[test]
    fn compute_counts_infra_as_failure_in_headline() {
        let rs = vec![
            tr("a", 1, Pass),
            tr("a", 2, Pass),
            tr("b", 1, Pass),
            tr("b", 2, Fail),
            tr("c", 1, InfraError),
            tr("c", 2, InfraError),
        ];
        let s = compute(2, &rs, 1.0);
        assert_eq!(s.n_tasks, 3);
        assert!((s.pass_at_1 - 0.5).abs() < 1e-12);
        assert!((s.pass_at_1_excluding_infra - 0.75).abs() < 1e-12);
        assert_eq!(s.tasks["a"].status, TaskStatus::Pass);
        assert_eq!(s.tasks["b"].status, TaskStatus::Fail);
        assert_eq!(s.tasks["b"].passed, 1);
        assert_eq!(s.tasks["c"].status, TaskStatus::Infra);
        assert_eq!(s.statuses["infra_error"], 2);
    }

    #[test]
    fn suspect_trials_are_counted_apart() {
        let mut flagged = tr("a", 2, Pass);
        flagged.suspect = Some(crate::Suspect {
            reasons: vec![crate::SuspectReason {
                reason: "names the reward file".into(),
                turn: Some(3),
            }],
        });
        let rs = vec![
            tr("a", 1, Pass),
            flagged,
            tr("b", 1, Pass),
            tr("b", 2, Pass),
        ];
        let s = compute(2, &rs, 1.0);
        // A flagged pass is no pass: the headline, the task's count and status say so.
        assert_eq!(s.pass_at_1, 0.75);
        assert_eq!(s.pass_at_1_raw, 1.0);
        assert_eq!(s.tasks["a"].passed, 1);
        assert_eq!(s.tasks["a"].status, TaskStatus::Fail);
        assert_eq!(s.tasks["b"].status, TaskStatus::Pass);
        assert_eq!(s.suspect_trials, 1);
        assert_eq!(s.pass_at_1_excluding_suspect, Some(0.75));
        // Every trial of a hack suite flagged: its pass@1 is 0 however many passed.
        let all: Vec<TrialResult> = rs
            .iter()
            .cloned()
            .map(|mut t| {
                t.suspect = s_flag();
                t
            })
            .collect();
        let h = compute(2, &all, 1.0);
        assert_eq!((h.pass_at_1, h.pass_at_1_raw), (0.0, 1.0));
        assert!(s.tasks["a"].trials[1].suspect);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["suspect_trials"], 1);
        // No suspect trial: the fields stay out of scores.json (old readers see no change).
        let clean = serde_json::to_value(compute(2, &rs[2..], 1.0)).unwrap();
        assert!(clean.get("suspect_trials").is_none());
        assert!(clean.get("pass_at_1_excluding_suspect").is_none());
        assert!(clean["tasks"]["b"]["trials"][0].get("suspect").is_none());
    }
}
