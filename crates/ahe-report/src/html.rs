//! `report.html`: view models of the run rendered with the minijinja templates of
//! `templates/report/` (compiled in; auto-escaped: traces hold arbitrary model output).

use std::sync::OnceLock;

use minijinja::{context, Environment, Value};
use rayon::prelude::*;

use super::charts::Charts;
use super::format::{f3, iter_label, secs, tokens, usd};
use super::model::{phase_name, IterationReport, RunReport};
use super::view::{iter_view, summary_row, IterView, SummaryRow};
use ahe_rundir::journal::Phase;

/// The template environment (report.html, trial.html, eval.html, eval.md, report.css).
pub(super) fn env() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut e = Environment::new();
        let t = [
            ("report.css", include_str!("../templates/report/report.css")),
            (
                "report.html",
                include_str!("../templates/report/report.html"),
            ),
            ("trial.html", include_str!("../templates/report/trial.html")),
            ("eval.html", include_str!("../templates/report/eval.html")),
            ("eval.md", include_str!("../templates/report/eval.md")),
        ];
        for (name, src) in t {
            e.add_template(name, src)
                .unwrap_or_else(|err| panic!("report template {name}: {err}"));
        }
        // Model-written text in Markdown templates (`eval.md`) must not become markup.
        e.add_filter("md", |s: String| super::markdown::md(&s));
        e
    })
}

/// Renders `report.html` (links to trial pages when `pages`, else to trial directories).
pub fn render_report(run: &RunReport, charts: &Charts, pages: bool) -> anyhow::Result<String> {
    let scored: Vec<&IterationReport> = run.iterations.iter().collect();
    let phase_names: Vec<&str> = super::model::EVOLVE_PHASES
        .iter()
        .map(|p: &Phase| phase_name(*p))
        .collect();
    let summary: Vec<SummaryRow> = scored.iter().map(|i| summary_row(run, i)).collect();
    let iterations: Vec<IterView> = scored
        .par_iter()
        .map(|i| iter_view(run, i, pages))
        .collect();
    let role_rows: Vec<(String, Vec<String>, String)> = scored
        .iter()
        .map(|i| {
            let cells = run
                .roles()
                .iter()
                .map(|r| match i.roles.get(*r) {
                    Some(u) => format!(
                        "{} in / {} out · {}",
                        tokens(u.input_tokens),
                        tokens(u.output_tokens),
                        run.usd(u.cost_usd)
                    ),
                    None => "–".into(),
                })
                .collect();
            (iter_label(i), cells, run.usd(i.cost_usd()))
        })
        .collect();
    let phase_rows: Vec<(String, Vec<String>, String)> = scored
        .iter()
        .map(|i| {
            let cells = phase_names
                .iter()
                .map(|p| match i.phases.iter().find(|x| x.phase == *p) {
                    Some(x) => match (x.secs, x.started) {
                        (Some(s), _) => secs(s),
                        (None, true) => "unfinished".into(),
                        _ => "–".into(),
                    },
                    None => "".into(),
                })
                .collect();
            (iter_label(i), cells, secs(i.wall_sec()))
        })
        .collect();
    let mut facts: Vec<(String, String)> = vec![
        ("status".into(), run.status().into()),
        ("model".into(), run.model.clone()),
        (
            "tasks".into(),
            format!(
                "{} visible + {} held out, k = {}",
                run.visible_tasks().len(),
                run.holdout.len(),
                run.info.k
            ),
        ),
        (
            "iterations".into(),
            format!(
                "{} of {} planned + final evaluation",
                run.iterations.iter().filter(|i| !i.is_final).count(),
                run.info.iterations
            ),
        ),
        ("benchmark".into(), run.info.benchmark.clone()),
        ("sandbox".into(), run.info.sandbox.clone()),
        ("rollback policy".into(), run.info.rollback.clone()),
        ("cost".into(), run.cost_text()),
        ("wall time (phases)".into(), secs(run.wall_sec())),
    ];
    if let Some(b) = run.info.budget_usd {
        facts.push(("budget".into(), usd(b)));
    }
    if let Some(r) = &run.ended {
        facts.push(("ended".into(), r.clone()));
    }
    let best = run.best.as_ref().map(|b| {
        format!(
            "iteration {} (visible pass@1 {}, commit {}, git tag best)",
            b.iteration,
            f3(b.pass_at_1),
            b.commit.chars().take(12).collect::<String>()
        )
    });
    let tmpl = env().get_template("report.html")?;
    let html = tmpl.render(context! {
        name => run.name,
        generated => chrono::Local::now().format("%Y-%m-%d %H:%M:%S").to_string(),
        incomplete => run.incomplete.as_ref().map(|i| i.message.clone()),
        facts => facts,
        best => best,
        best_anchor => run.best.as_ref().map(|b| format!("iter-{:03}", b.iteration)),
        closing => run.closing(),
        pass_svg => Value::from_safe_string(charts.pass.clone()),
        heatmap_svg => Value::from_safe_string(charts.heatmap.clone()),
        tokens_svg => Value::from_safe_string(charts.tokens.clone()),
        cost_svg => charts.cost.clone().map(Value::from_safe_string),
        phase_svg => Value::from_safe_string(charts.phases.clone()),
        summary => summary,
        roles => run.roles(),
        role_rows => role_rows,
        phase_names => phase_names,
        phase_rows => phase_rows,
        iterations => iterations,
        has_holdout => !run.holdout.is_empty(),
        trial_pages => pages,
    })?;
    Ok(html)
}
