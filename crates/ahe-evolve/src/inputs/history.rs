//! What earlier iterations left on disk, read back for the next phases: score history,
//! stability, costs, the evolve agent's inputs and summaries, commit messages.
//! Only visible tasks ever reach the evolve agent from here.

use std::collections::{BTreeMap, BTreeSet};

use ahe_bench::TrialStatus;
use minijinja::context;

use ahe_attribution::attribute::ChangeEvaluation;
use ahe_rundir::clean;
use ahe_rundir::journal::{Entry, Journal};
use ahe_rundir::manifest::{Change, Manifest};
use ahe_rundir::run_dir::{IterationDir, RunDir};

/// Per task, the harness files its trials exercised (what attribution matches changes to).
pub type Exercised = BTreeMap<String, BTreeSet<String>>;

/// The harness files each visible task's trials exercised (from `trace.clean.json`).
pub fn exercised(it: &IterationDir, visible: &BTreeSet<String>) -> Exercised {
    let mut out: Exercised = BTreeMap::new();
    for d in it.trial_dirs() {
        let Ok(t) = clean::read_clean(d.path()) else {
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

/// A Markdown table of visible pass@1 per iteration up to t.
pub fn score_history(run: &RunDir, t: u32) -> String {
    let mut s = "| iteration | visible pass@1 | 95% CI |\n|---|---|---|\n".to_string();
    for i in 1..=t {
        if let Ok(sc) = run.iteration(i).scores() {
            s.push_str(&format!(
                "| {i} | {:.3} | {} |\n",
                sc.visible_pass_at_1(),
                ci_text(sc.record.visible_pass_at_1_ci)
            ));
        }
    }
    s
}

/// A 95% interval for people: `[0.25, 0.75]`, or `n/a`.
pub fn ci_text(ci: Option<[f64; 2]>) -> String {
    ci.map_or("n/a".into(), |[a, b]| format!("[{a:.2}, {b:.2}]"))
}

/// Per visible task, its k-trial results in every iteration (e.g. `2/2 1/2 2/2`).
pub fn stability(run: &RunDir, t: u32, visible: &BTreeSet<String>) -> String {
    let mut rows: BTreeMap<&String, Vec<String>> = BTreeMap::new();
    for i in 1..=t {
        let Ok(sc) = run.iteration(i).scores().map(|s| s.scores) else {
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

/// A readable summary of what the previous iteration's changes did
/// (`templates/change_summary.md`).
pub fn change_summary(ev: &ChangeEvaluation) -> String {
    let moves = |v: &[ahe_attribution::attribute::TaskMove]| -> Vec<String> {
        v.iter()
            .map(|m| {
                let noise = if m.within_noise {
                    " (within noise)"
                } else {
                    ""
                };
                format!("{}{noise}", m.task)
            })
            .collect()
    };
    let changes: Vec<minijinja::Value> = ev
        .changes
        .iter()
        .map(|c| {
            context! {
                id => &c.id, verdict => ahe_attribution::attribute::verdict_name(c.verdict),
                description => &c.description, predicted_fixes => &c.predicted_fixes,
                actually_fixed => &c.actually_fixed, still_failed => &c.still_failed,
                risk_tasks => &c.risk_tasks, risk_realized => &c.risk_realized,
                counterfactual => &c.counterfactual, blamed => &c.blamed_regressions,
            }
        })
        .collect();
    ahe_harness::text::render(
        include_str!("../../templates/change_summary.md"),
        context! {
            fixed => moves(&ev.fixed), regressed => moves(&ev.regressed), changes,
            unattributed => &ev.unattributed_regressions, p => &ev.prediction,
        },
    )
}

/// Writes `evolve/inputs/` (change evaluation, score history, stability, best).
pub fn write_inputs(run: &RunDir, t: u32, visible: &BTreeSet<String>) -> anyhow::Result<()> {
    run.iteration(t).write_evolve_inputs(
        &score_history(run, t),
        &stability(run, t, visible),
        run.best().as_ref(),
    )
}

/// `evolve/summary.md`: the committed changes and what the orchestrator did
/// (`templates/summary.md`).
pub fn summary_md(t: u32, m: &Manifest, journal: &Journal, from: &str, to: &str) -> String {
    let notes: Vec<String> = journal
        .entries()
        .into_iter()
        .filter_map(|e| match e {
            Entry::Note { iter, message } if iter == t => Some(message),
            _ => None,
        })
        .collect();
    ahe_harness::text::render(
        include_str!("../../templates/summary.md"),
        context! { t, changes => &m.changes, from, to, notes },
    )
}

/// The commit message of iteration `t`: its tag, the number of changes, one line each.
pub fn commit_message(t: u32, m: &Manifest) -> String {
    let summary: Vec<String> = m
        .changes
        .iter()
        .map(|c| format!("{}: {}", c.id, c.description))
        .collect();
    format!(
        "{}: {} change(s)\n\n{}",
        ahe_runner::repo::iter_tag(t),
        m.changes.len(),
        if summary.is_empty() {
            "no changes".to_string()
        } else {
            summary.join("\n")
        }
    )
}

/// The message of commit `i` (0-based) of the `n` commits of iteration `t`'s chain, holding
/// `change` (`None`: edits named by no change). The last one starts with `iter-NNN:` and
/// lists every change; the others start with `iter-NNN <id>:`.
pub fn step_message(t: u32, m: &Manifest, change: Option<&Change>, i: usize, n: usize) -> String {
    let tag = ahe_runner::repo::iter_tag(t);
    let what = match change {
        Some(c) => {
            let d = c.description.lines().next().unwrap_or("");
            let d: String = if d.chars().count() > 72 {
                d.chars().take(71).chain(['…']).collect()
            } else {
                d.to_string()
            };
            format!("{}: {d}", c.id)
        }
        None if n == 1 => return commit_message(t, m),
        None => "edits named by no change".to_string(),
    };
    let pos = format!("commit {} of {n}", i + 1);
    if i + 1 < n {
        format!("{tag} {what}\n\n{pos} of iteration {t}")
    } else {
        let all = commit_message(t, m);
        let body = all.split_once("\n\n").map_or("", |(_, b)| b);
        format!(
            "{tag}: {what}\n\n{pos}; iteration {t}: {} change(s)\n{body}",
            m.changes.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahe_rundir::manifest::{ChangeKind, Component};

    #[test]
    fn summary_md_lists_changes_and_this_iterations_notes() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(&dir.path().join("journal.jsonl")).unwrap();
        for (iter, message) in [(2, "rolled back c0"), (3, "not this one")] {
            let message = message.to_string();
            journal.append(Entry::Note { iter, message }).unwrap();
        }
        let change = |id: &str, commit: Option<&str>| Change {
            id: id.into(),
            kind: ChangeKind::Improvement,
            description: format!("{id} tightens the prompt"),
            files: vec!["system_prompt.md".into(), "tools/sh.toml".into()],
            failure_pattern: String::new(),
            root_cause: String::new(),
            predicted_fixes: vec!["fix-sum".into()],
            risk_tasks: vec![],
            component: Component::SystemPrompt,
            why_this_component: "the prompt says nothing of tests".into(),
            commit: commit.map(str::to_string),
        };
        let m = Manifest {
            iteration: 2,
            changes: vec![change("c1", Some("abc123")), change("c2", None)],
            ..serde_json::from_str(r#"{"iteration": 2, "changes": []}"#).unwrap()
        };
        let s = summary_md(2, &m, &journal, "1111", "2222");
        assert!(s.starts_with("# Iteration 2: 2 change(s)\n\nEvaluated 1111 → committed 2222\n\n## c1 (improvement, system_prompt)\nc1 tightens the prompt\n\n- files: system_prompt.md, tools/sh.toml\n"), "{s}");
        assert!(
            s.contains("- predicted fixes: fix-sum\n- risk tasks: \n"),
            "{s}"
        );
        assert!(s.contains("- commit: abc123\n\n## c2 (improvement"), "{s}");
        assert_eq!(s.matches("- commit:").count(), 1, "{s}");
        assert!(
            s.ends_with("## Orchestrator notes\n- rolled back c0\n"),
            "{s}"
        );
        assert!(
            !s.contains("not this one") && !s.contains("Improvement"),
            "{s}"
        );
    }
}
