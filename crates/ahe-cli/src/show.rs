//! `ahe show runs/NAME [--iteration N] [--task T] [--trial A] [--json]`: terminal tables of
//! a run (summary, one iteration, one task's history, one trial's turns). With `--json` it
//! prints one document whose shape is documented in `ahe_report::json`.

use std::path::PathBuf;

use ahe_report::format::{iter_label, secs, tokens};
use ahe_report::json;
use ahe_report::model::{IterationReport, RunReport};
use ahe_report::view::trial::trial_view;
use ahe_report::view::{iter_view, run_summary, AttributionView, IterView, SummaryRow};
use clap::Args;

use crate::CliError;

/// Arguments of `ahe show`.
#[derive(Args)]
pub struct ShowArgs {
    /// Run directory (runs/NAME), or an evaluation directory (`ahe eval --out`, `ahe import
    /// harbor --out`: its per-task table, or one task's trials with --task).
    run: PathBuf,
    /// One iteration: its tasks, attribution and changes.
    #[arg(long)]
    iteration: Option<u32>,
    /// One task: its results across iterations (or in --iteration N).
    #[arg(long)]
    task: Option<String>,
    /// One trial's turns (needs --iteration and --task).
    #[arg(long)]
    trial: Option<u32>,
    /// Print one JSON document (`kind`: run, iteration, task or trial) instead of tables.
    #[arg(long)]
    json: bool,
}

/// Runs `ahe show`.
pub fn run(a: ShowArgs) -> Result<(), CliError> {
    if a.trial.is_some() && (a.iteration.is_none() || a.task.is_none()) {
        return Err(CliError::usage(anyhow::anyhow!(
            "--trial needs --iteration N and --task T"
        )));
    }
    if eval::is_eval_dir(&a.run) {
        if a.iteration.is_some() || a.trial.is_some() {
            return Err(CliError::usage(anyhow::anyhow!(
                "{}: an evaluation directory has no iterations: use --task T (and --json)",
                a.run.display()
            )));
        }
        return eval::show(&a.run, a.task.as_deref(), a.json);
    }
    let run = RunReport::load(&a.run).map_err(CliError::usage)?;
    let missing_iter = |t: u32| {
        CliError::usage(anyhow::anyhow!(
            "{}: no iteration {t} (iterations: 1..={})",
            a.run.display(),
            run.iterations.len()
        ))
    };
    let missing_task = |t: &str| {
        CliError::usage(anyhow::anyhow!(
            "{}: no task {t:?} in this run",
            a.run.display()
        ))
    };
    let (doc, text) = match (a.iteration, a.task.as_deref(), a.trial) {
        (Some(t), Some(task), Some(attempt)) if !a.json => {
            let it = run.iteration(t).ok_or_else(|| missing_iter(t))?;
            let trace = run.trial(t, task, attempt).map_err(CliError::usage)?;
            let text = trial_text(&trial_view(&trace), t, &it.trial_rel(task, attempt));
            (serde_json::Value::Null, Some(text))
        }
        (Some(t), Some(task), Some(attempt)) => {
            run.iteration(t).ok_or_else(|| missing_iter(t))?;
            let doc = json::trial_doc(&run, t, task, attempt).map_err(CliError::usage)?;
            (doc, None)
        }
        (only, Some(task), _) => {
            if let Some(t) = only {
                run.iteration(t).ok_or_else(|| missing_iter(t))?;
            }
            let doc = json::task_doc(&run, task, only).ok_or_else(|| missing_task(task))?;
            let text = (!a.json).then(|| task_text(&run, &doc, only));
            (doc, text)
        }
        (Some(t), None, _) => {
            let doc = json::iteration_doc(&run, t).ok_or_else(|| missing_iter(t))?;
            let it = run.iteration(t).ok_or_else(|| missing_iter(t))?;
            let text = (!a.json).then(|| iteration_text(&run, it));
            (doc, text)
        }
        (None, None, _) => (json::run_doc(&run), (!a.json).then(|| run_text(&run))),
    };
    match text {
        // Every table may quote the run's files (task names, model text): escaped as a whole.
        Some(t) => print!("{}", ahe_harness::trace::escape_controls(&t)),
        None => println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(CliError::failed)?
        ),
    }
    Ok(())
}

mod detail;
mod eval;
use detail::{task_text, trial_text};
pub(crate) use eval::is_eval_dir;

/// Shows control characters (terminal escapes in model output) as visible escapes.
fn clean(s: &str) -> String {
    ahe_harness::trace::escape_controls(s).into_owned()
}

/// A plain table: columns padded to their widest cell; `right` marks numeric columns.
fn table(head: &[&str], rows: &[Vec<String>], right: &[usize]) -> String {
    let n = head.len();
    let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(n) {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = w[i].saturating_sub(c.chars().count());
            if i > 0 {
                s.push_str("  ");
            }
            if right.contains(&i) {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            } else {
                s.push_str(c);
                if i + 1 < cells.len() {
                    s.push_str(&" ".repeat(pad));
                }
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(head.to_vec());
    for r in rows {
        out.push_str(&line(r.iter().map(|s| s.as_str()).collect()));
    }
    out
}

fn abbrev(v: &str) -> &'static str {
    match v {
        "EFFECTIVE" => "E",
        "PARTIALLY_EFFECTIVE" => "P",
        "INEFFECTIVE" => "I",
        "MIXED" => "M",
        "HARMFUL" => "H",
        "UNJUDGED" => "U",
        _ => "?",
    }
}

/// The run's summary (`ahe_report::view::RunSummary`, the one report.md and report.html
/// show at their top) as text: header lines, then the iterations table.
fn run_text(run: &RunReport) -> String {
    let h = run_summary(run);
    let mut s = format!(
        "run {} — {}{} · model {} · {} visible + {} held-out tasks · k={}\n",
        h.name,
        h.status,
        h.ended
            .as_ref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default(),
        if h.model.is_empty() { "?" } else { &h.model },
        h.n_visible,
        h.n_holdout,
        h.k
    );
    if let Some(i) = &h.incomplete {
        s.push_str(&format!("incomplete: {i}\n"));
    }
    match &h.best {
        Some((iteration, pass, commit)) => s.push_str(&format!(
            "best: iteration {iteration} · visible pass@1 {pass} · commit {commit}\n"
        )),
        None => s.push_str("best: none yet\n"),
    }
    for l in &h.closing {
        s.push_str(&format!("  {l}\n"));
    }
    let rows: Vec<Vec<String>> = h.summary.iter().map(summary_cells).collect();
    s.push_str(&table(
        &[
            "iter", "pass@1", "95% CI", "held-out", "Δ", "fixed", "regr", "verdicts", "changes",
            "cost", "wall",
        ],
        &rows,
        &[1, 3, 4, 5, 6, 8, 9, 10],
    ));
    s.push_str(&format!(
        "total: {} · {} wall · verdicts of the previous iteration's changes: E effective, P partially, I ineffective, U unjudged, M mixed, H harmful · * Δ interval excludes 0\n",
        h.cost, h.wall
    ));
    s.push_str(&format!(
        "{}
",
        h.spend
    ));
    let shares: Vec<String> = (h.machinery_share.iter())
        .map(|(l, v)| format!("{l}: {v}"))
        .collect();
    s.push_str(&format!(
        "machinery share per iteration: {}
",
        shares.join(" · ")
    ));
    s
}

/// One row of the iterations table as text cells.
fn summary_cells(r: &SummaryRow) -> Vec<String> {
    let dash = |v: &str| {
        if v.is_empty() {
            "–".to_string()
        } else {
            v.to_string()
        }
    };
    let verdicts: Vec<String> = r
        .verdicts
        .iter()
        .map(|(n, c, _)| format!("{}{c}", abbrev(n)))
        .collect();
    vec![
        format!(
            "{}{}{}",
            r.label,
            if r.best { " ★" } else { "" },
            if r.status.is_empty() {
                ""
            } else {
                " (incomplete)"
            }
        ),
        r.pass.clone(),
        dash(&r.pass_ci),
        r.holdout.clone(),
        if r.delta_significant {
            format!("{}*", r.delta)
        } else {
            r.delta.clone()
        },
        r.fixed.clone(),
        r.regressed.clone(),
        dash(&verdicts.join(" ")),
        r.changes.clone(),
        r.cost.clone(),
        r.wall.clone(),
    ]
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "–".into()
    } else {
        v.join(", ")
    }
}

/// The variants of an evolve step as a table, with the screen's line and note.
fn variants_text(vv: &ahe_report::view::VariantsView) -> String {
    let rows: Vec<Vec<String>> = vv
        .rows
        .iter()
        .map(|r| {
            vec![
                r.variant.clone(),
                r.focus.clone(),
                r.changes.to_string(),
                r.screen.clone(),
                r.outcome.clone(),
                r.evolve_cost.clone(),
                r.screen_cost.clone(),
            ]
        })
        .collect();
    let mut s = String::from("variants:\n");
    s.push_str(&table(
        &[
            "variant",
            "focus",
            "changes",
            "screen",
            "outcome",
            "evolve",
            "screen cost",
        ],
        &rows,
        &[2, 3],
    ));
    s.push_str(&format!("{}\n", vv.screen));
    if let Some(n) = &vv.note {
        s.push_str(&format!("{n}\n"));
    }
    s
}

fn iteration_text(run: &RunReport, it: &IterationReport) -> String {
    let v = iter_view(run, it, false);
    let mut s = header_text(&v);
    s.push_str(&task_table(&v));
    if let Some(a) = &v.attribution {
        s.push_str(&attribution_text(a));
    }
    if !v.manifest_missing && !v.is_final {
        s.push_str(&changes_text(&v));
    }
    if !v.notes.is_empty() {
        s.push_str("\nnotes:\n");
        for (n, _) in &v.notes {
            s.push_str(&format!("  - {}\n", clean(n).replace('\n', "\n    ")));
        }
    }
    let mut files: Vec<&str> = v.files.iter().map(|(_, p)| p.as_str()).collect();
    if files.is_empty() && v.scored {
        files.push("(no analysis or evolve files)");
    }
    if !files.is_empty() {
        s.push_str(&format!("\nfiles: {}\n", files.join("  ")));
    }
    s
}

/// The iteration's heading: label, best, pass@1, harness, suspect and incomplete lines,
/// phase times, tokens per role, the variants.
fn header_text(v: &IterView) -> String {
    let mut s = format!(
        "iteration {}{}{}",
        v.label,
        if v.best { " ★ best" } else { "" },
        match &v.visible {
            Some((p, c)) => format!(" — visible pass@1 {p} (95% CI {c})"),
            None => " — not scored yet".into(),
        }
    );
    if let Some((h, _)) = &v.holdout_score {
        s.push_str(&format!(" · held-out {h}"));
    }
    if !v.commit.is_empty() {
        s.push_str(&format!(" · harness {}", v.commit));
    }
    s.push('\n');
    if let Some(line) = &v.suspect {
        s.push_str(&format!("{line}\n"));
    }
    if let Some(i) = &v.incomplete {
        s.push_str(&format!("incomplete: {i}\n"));
    }
    let phases: Vec<String> = v.phases.iter().map(|(p, t)| format!("{p} {t}")).collect();
    s.push_str(&format!("phases: {}\n", phases.join(" · ")));
    let roles: Vec<String> = v
        .roles
        .iter()
        .map(|(r, i, o, c)| format!("{r} {i} in / {o} out {c}"))
        .collect();
    if !roles.is_empty() {
        s.push_str(&format!("roles: {}\n", roles.join(" · ")));
    }
    if let Some(vv) = &v.variants {
        s.push_str(&variants_text(vv));
    }
    s.push('\n');
    s
}

/// The iteration's task table: result, status, move and each trial's status.
fn task_table(v: &IterView) -> String {
    let rows: Vec<Vec<String>> = v
        .tasks
        .iter()
        .filter(|r| r.has_cell)
        .map(|r| {
            let trials: Vec<String> = r
                .trials
                .iter()
                .map(|(a, _, st)| {
                    let flag = if r.suspect.contains(a) {
                        " (suspect)"
                    } else {
                        ""
                    };
                    format!("{st}{flag}")
                })
                .collect();
            let held = if r.holdout { " (held out)" } else { "" };
            vec![
                format!("{}{held}", r.task),
                r.text.clone(),
                r.status.clone(),
                r.movement.clone(),
                trials.join(" "),
            ]
        })
        .collect();
    table(&["task", "result", "status", "move", "trials"], &rows, &[1])
}

/// What attribution found: the paired delta, the judged changes with their predictions'
/// precision and recall, the unattributed regressions, the evidence lines.
fn attribution_text(a: &AttributionView) -> String {
    let mut s = String::new();
    s.push('\n');
    if let Some(d) = &a.delta_view {
        s.push_str(&format!(
            "Δ pass@1 {} (paired 95% CI {}…{}, {})\n",
            d.value,
            d.lo,
            d.hi,
            if d.significant {
                "significant"
            } else {
                "within noise"
            }
        ));
    }
    if let Some(m) = a.manifest_iteration {
        s.push_str(&format!("changes of iteration {m} judged here:\n"));
        let rows: Vec<Vec<String>> = a
            .judged_rows
            .iter()
            .map(|c| {
                vec![
                    c.id.clone(),
                    c.verdict.clone(),
                    list(&c.predicted_fixes),
                    list(&c.actually_fixed),
                    list(&c.risk_tasks),
                    list(&c.risk_realized),
                ]
            })
            .collect();
        s.push_str(&table(
            &[
                "change",
                "verdict",
                "predicted fixes",
                "fixed",
                "risk tasks",
                "risk realized",
            ],
            &rows,
            &[],
        ));
        let p = &a.precision;
        s.push_str(&format!(
            "predictions: fix precision {} · fix recall {} · risk precision {} · risk recall {}\n",
            p.fix_precision, p.fix_recall, p.risk_precision, p.risk_recall
        ));
    }
    let un: Vec<String> = a.unattributed.iter().map(|(t, _)| t.clone()).collect();
    s.push_str(&format!("unattributed regressions: {}\n", list(&un)));
    for line in &a.evidence {
        s.push_str(&format!("{line}\n"));
    }
    s
}

/// The changes the iteration made (judged in the next one), one row each.
fn changes_text(v: &IterView) -> String {
    let t = v.iteration;
    let mut s = String::new();
    s.push_str(&format!(
        "\nchanges made in iteration {t} (judged in iteration {}):\n",
        t + 1
    ));
    let rows: Vec<Vec<String>> = v
        .changes
        .iter()
        .map(|c| {
            vec![
                c.id.clone(),
                c.kind.clone(),
                c.component.clone(),
                if c.judged {
                    c.verdict.clone()
                } else {
                    "pending".into()
                },
                list(&c.predicted_fixes),
                list(&c.risk_tasks),
                clean(&c.description).replace('\n', " "),
            ]
        })
        .collect();
    s.push_str(&table(
        &[
            "change",
            "type",
            "component",
            "verdict",
            "predicted fixes",
            "risk tasks",
            "description",
        ],
        &rows,
        &[],
    ));
    s
}
