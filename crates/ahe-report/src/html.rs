//! `report.html`: view models of the run rendered with the minijinja templates of
//! `templates/report/` (compiled in; auto-escaped: traces hold arbitrary model output).

use std::sync::OnceLock;

use minijinja::{context, Environment, Value};

use super::charts::Charts;
use super::model::RunReport;
use super::view::run_view;

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

/// The reports' stylesheet (`templates/report/report.css`), for pages that share its look.
pub fn css() -> &'static str {
    include_str!("../templates/report/report.css")
}

/// Renders `report.html` (links to trial pages when `pages`, else to trial directories).
pub fn render_report(run: &RunReport, charts: &Charts, pages: bool) -> anyhow::Result<String> {
    let v = run_view(run, pages);
    let best = v.head.best.as_ref().map(|(iteration, pass, commit)| {
        format!("iteration {iteration} (visible pass@1 {pass}, commit {commit}, git tag best)")
    });
    let tmpl = env().get_template("report.html")?;
    let html = tmpl.render(context! {
        name => v.head.name,
        generated => chrono::Local::now().format("%Y-%m-%d %H:%M:%S").to_string(),
        incomplete => v.head.incomplete,
        facts => v.head.facts,
        best => best,
        best_anchor => v.head.best_anchor,
        closing => v.head.closing,
        pass_svg => Value::from_safe_string(charts.pass.clone()),
        heatmap_svg => Value::from_safe_string(charts.heatmap.clone()),
        tokens_svg => Value::from_safe_string(charts.tokens.clone()),
        cost_svg => charts.cost.clone().map(Value::from_safe_string),
        phase_svg => Value::from_safe_string(charts.phases.clone()),
        summary => v.head.summary,
        roles => v.roles,
        role_rows => v.role_rows,
        spend => v.head.spend,
        spend_phases => v.spend_phases,
        spend_rows => v.spend_rows,
        phase_names => v.phase_names,
        phase_rows => v.phase_rows,
        iterations => v.iterations,
        has_holdout => v.has_holdout,
        trial_pages => pages,
    })?;
    Ok(html)
}
