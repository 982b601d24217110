//! What earlier iterations left on disk, read back for the next phases: score history,
//! stability, costs, automatic rollbacks, the evolve agent's inputs and summaries.
//! Only visible tasks ever reach the evolve agent from here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use ahe_bench::{Scores, TrialStatus};
use ahe_model::Usage;
use minijinja::context;

use crate::attribute::{ChangeEvaluation, Verdict};
use crate::commit::HarnessRepo;
use crate::journal::{Entry, Journal};
use crate::manifest::{Change, ChangeKind, Manifest};
use crate::r#loop::{iter_dir, Best, Exercised};
use crate::{clean, read_json, write_json};

/// The harness files each visible task's trials exercised (from `trace.clean.json`).
pub fn exercised(trials: &Path, visible: &BTreeSet<String>) -> Exercised {
    let mut out: Exercised = BTreeMap::new();
    for d in clean::trial_dirs(trials).unwrap_or_default() {
        let Ok(t) = clean::read_clean(&d) else {
            continue;
        };
        if visible.contains(&t.task) {
            out.entry(t.task.clone())
                .or_default()
                .extend(clean::exercised_files(&t));
        }
    }
    out
}

/// Adds a role's tokens and cost to `scores.json` under `meta.roles`.
pub fn record_role_cost(dir: &Path, role: &str, usage: &Usage, cost: f64) -> anyhow::Result<()> {
    let path = dir.join("scores.json");
    let mut s: Scores = read_json(&path)?;
    let roles = s
        .meta
        .entry("roles".into())
        .or_insert_with(|| serde_json::json!({}));
    roles["code_agent"] = serde_json::json!({
        "input_tokens": s.tokens.input, "cached_input_tokens": s.tokens.cached_input,
        "cache_write_input_tokens": s.tokens.cache_write_input,
        "output_tokens": s.tokens.output, "reasoning_tokens": s.tokens.reasoning,
        "cost_usd": s.cost_usd,
    });
    roles[role] = serde_json::json!({
        "input_tokens": usage.input_tokens, "cached_input_tokens": usage.cached_input_tokens,
        "cache_write_input_tokens": usage.cache_write_input_tokens,
        "output_tokens": usage.output_tokens, "reasoning_tokens": usage.reasoning_tokens,
        "cost_usd": cost,
    });
    write_json(&path, &s)
}

/// Dollars spent by all roles in iterations 1..=t.
pub fn spent_usd(run: &Path, t: u32) -> f64 {
    (1..=t)
        .filter_map(|i| read_json::<Scores>(&iter_dir(run, i).join("scores.json")).ok())
        .map(|s| {
            let roles = s.meta.get("roles");
            let other: f64 = ["debugger", "evolve"]
                .iter()
                .filter_map(|r| {
                    roles
                        .and_then(|x| x.get(r))
                        .and_then(|x| x.get("cost_usd"))
                        .and_then(|c| c.as_f64())
                })
                .sum();
            // `model_cost_usd` also counts trial attempts that were re-run after an infra error.
            let code = s
                .meta
                .get("model_cost_usd")
                .and_then(|c| c.as_f64())
                .unwrap_or(0.0)
                .max(s.cost_usd);
            code + other
        })
        .sum()
}

/// Restores the files of the previous iteration's HARMFUL changes (from the harness that
/// iteration evaluated) and returns the rollback changes to record.
pub fn auto_rollback(
    run: &Path,
    t: u32,
    repo: &HarnessRepo,
    ev: &ChangeEvaluation,
) -> anyhow::Result<Vec<Change>> {
    let prev = iter_dir(run, t - 1);
    let base = std::fs::read_to_string(prev.join("evaluated.txt"))?
        .trim()
        .to_string();
    let Ok(manifest) = read_json::<Manifest>(&prev.join("evolve/manifest.json")) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for v in ev.changes.iter().filter(|v| v.verdict == Verdict::Harmful) {
        let Some(c) = manifest.changes.iter().find(|c| c.id == v.id) else {
            continue;
        };
        repo.restore_files(&base, &c.files)?;
        out.push(Change {
            id: format!("rollback-{}", c.id),
            kind: ChangeKind::Rollback,
            description: format!(
                "Automatic rollback of HARMFUL change {} (iteration {}): {}",
                c.id,
                t - 1,
                c.description
            ),
            files: c.files.clone(),
            failure_pattern: format!("regressions caused by {}", c.id),
            root_cause: c.root_cause.clone(),
            predicted_fixes: v.risk_realized.clone(),
            risk_tasks: Vec::new(),
            component: c.component,
            why_this_component: "restores the files the harmful change touched".into(),
        });
    }
    Ok(out)
}

fn visible_rate(s: &Scores, visible: &BTreeSet<String>) -> f64 {
    s.meta
        .get("visible_pass_at_1")
        .and_then(|v| v.as_f64())
        .unwrap_or_else(|| {
            let r: Vec<f64> = s
                .tasks
                .iter()
                .filter(|(k, _)| visible.contains(*k))
                .map(|(_, v)| v.pass_at_1)
                .collect();
            r.iter().sum::<f64>() / r.len().max(1) as f64
        })
}

/// A Markdown table of visible pass@1 per iteration up to t.
pub fn score_history(run: &Path, t: u32, visible: &BTreeSet<String>) -> String {
    let mut s = "| iteration | visible pass@1 | 95% CI |\n|---|---|---|\n".to_string();
    for i in 1..=t {
        if let Ok(sc) = read_json::<Scores>(&iter_dir(run, i).join("scores.json")) {
            let ci = sc
                .meta
                .get("visible_pass_at_1_ci")
                .cloned()
                .unwrap_or_default();
            s.push_str(&format!(
                "| {i} | {:.3} | {} |\n",
                visible_rate(&sc, visible),
                ci
            ));
        }
    }
    s
}

/// Per visible task, its k-trial results in every iteration (e.g. `2/2 1/2 2/2`).
pub fn stability(run: &Path, t: u32, visible: &BTreeSet<String>) -> String {
    let mut rows: BTreeMap<&String, Vec<String>> = BTreeMap::new();
    for i in 1..=t {
        let Ok(sc) = read_json::<Scores>(&iter_dir(run, i).join("scores.json")) else {
            continue;
        };
        for v in visible {
            let cell = sc.tasks.get(v).map(|x| {
                if x.trials.iter().all(|t| t.status == TrialStatus::InfraError) {
                    "infra".to_string()
                } else {
                    format!("{}/{}", x.passed, x.k)
                }
            });
            rows.entry(v).or_default().push(cell.unwrap_or("-".into()));
        }
    }
    rows.iter()
        .map(|(k, v)| format!("- `{k}`: {}\n", v.join(" ")))
        .collect()
}

/// A readable summary of what the previous iteration's changes did.
pub fn change_summary(ev: &ChangeEvaluation) -> String {
    let mut s = String::new();
    let names = |v: &[crate::attribute::TaskMove]| {
        v.iter()
            .map(|m| {
                format!(
                    "{}{}",
                    m.task,
                    if m.within_noise {
                        " (within noise)"
                    } else {
                        ""
                    }
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    s.push_str(&format!(
        "Fixed: {}\nRegressed: {}\n",
        or_none(&names(&ev.fixed)),
        or_none(&names(&ev.regressed))
    ));
    for c in &ev.changes {
        s.push_str(&format!(
            "- {} [{}] {:?}: predicted fixes {:?} → fixed {:?}, still failing {:?}; risks {:?} → realized {:?}\n",
            c.id, serde_json::to_value(c.verdict).unwrap_or_default().as_str().unwrap_or(""), c.description, c.predicted_fixes, c.actually_fixed, c.still_failed, c.risk_tasks, c.risk_realized
        ));
    }
    for u in &ev.unattributed_regressions {
        s.push_str(&format!(
            "- unpredicted regression `{}`; changes touching files it used: {:?}\n",
            u.task, u.matched_changes
        ));
    }
    let p = &ev.prediction;
    s.push_str(&format!(
        "Fix-prediction precision {:?}, recall {:?}; risk precision {:?}, recall {:?}\n",
        p.fix_precision, p.fix_recall, p.risk_precision, p.risk_recall
    ));
    if ev.changes.is_empty() {
        s.push_str("(no changes from the previous iteration to evaluate)\n");
    }
    s
}

fn or_none(s: &str) -> &str {
    if s.is_empty() {
        "none"
    } else {
        s
    }
}

/// Writes `evolve/inputs/` (change evaluation, score history, stability, best).
pub fn write_inputs(run: &Path, t: u32, visible: &BTreeSet<String>) -> anyhow::Result<()> {
    let d = iter_dir(run, t).join("evolve/inputs");
    std::fs::create_dir_all(&d)?;
    std::fs::copy(
        iter_dir(run, t).join("change_evaluation.json"),
        d.join("change_evaluation.json"),
    )?;
    std::fs::write(d.join("score_history.md"), score_history(run, t, visible))?;
    std::fs::write(d.join("stability.md"), stability(run, t, visible))?;
    if let Ok(b) = read_json::<Best>(&run.join("best.json")) {
        write_json(&d.join("best.json"), &b)?;
    }
    Ok(())
}

/// Template variables of the evolve agent's user prompt.
pub fn prompt_vars(
    run: &Path,
    t: u32,
    evaluated: &str,
    ev: &ChangeEvaluation,
    rollbacks: &[Change],
    visible: &BTreeSet<String>,
) -> anyhow::Result<minijinja::Value> {
    let dir = iter_dir(run, t);
    let scores: Scores = read_json(&dir.join("scores.json"))?;
    let best: Option<Best> = read_json(&run.join("best.json")).ok();
    let rb: Vec<String> = rollbacks
        .iter()
        .map(|c| format!("- {}: {}", c.id, c.description))
        .collect();
    Ok(context! {
        iteration => t,
        commit => &evaluated[..evaluated.len().min(12)],
        pass_at_1 => format!("{:.3}", visible_rate(&scores, visible)),
        ci => scores.meta.get("visible_pass_at_1_ci").map(|v| v.to_string()).unwrap_or_default(),
        best_iteration => best.as_ref().map(|b| b.iteration).unwrap_or(t),
        best_pass_at_1 => best.as_ref().map(|b| format!("{:.3}", b.pass_at_1)).unwrap_or_default(),
        history => score_history(run, t, visible),
        change_summary => change_summary(ev),
        rollbacks => rb.join("\n"),
        overview => std::fs::read_to_string(dir.join("analysis/overview.md")).unwrap_or_default(),
    })
}

/// `evolve/summary.md`: the committed changes and what the orchestrator did.
pub fn summary_md(t: u32, m: &Manifest, journal: &Journal, from: &str, to: &str) -> String {
    let mut s = format!(
        "# Iteration {t}: {} change(s)\n\nEvaluated {from} → committed {to}\n\n",
        m.changes.len()
    );
    for c in &m.changes {
        s.push_str(&format!(
            "## {} ({:?}, {:?})\n{}\n\n- files: {}\n- predicted fixes: {}\n- risk tasks: {}\n- why this component: {}\n\n",
            c.id,
            c.kind,
            c.component,
            c.description,
            c.files.join(", "),
            c.predicted_fixes.join(", "),
            c.risk_tasks.join(", "),
            c.why_this_component
        ));
    }
    let notes: Vec<String> = journal
        .entries()
        .into_iter()
        .filter_map(|e| match e {
            Entry::Note { iter, message } if iter == t => Some(format!("- {message}")),
            _ => None,
        })
        .collect();
    if !notes.is_empty() {
        s.push_str(&format!("## Orchestrator notes\n{}\n", notes.join("\n")));
    }
    s
}
