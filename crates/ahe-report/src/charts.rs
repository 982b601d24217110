//! The report's charts, drawn from the read model (see [`super::svg`] for the primitives).

use ahe_rundir::run_dir::ITERATIONS;
use rayon::prelude::*;

use super::format::{cell_class, cell_text, iter_label, secs, tokens, usd};
use super::model::{phase_name, IterationReport, RunReport};
use super::svg::{self, HeatCell, PassPoint, Series};
use super::view::trial_href;

/// The heatmap rows (visible tasks, then held-out ones) with their cells.
fn heatmap_svg(run: &RunReport, pages: bool) -> String {
    let mut rows: Vec<(String, bool)> = run
        .visible_tasks()
        .into_iter()
        .map(|t| (t.clone(), false))
        .collect();
    rows.extend(run.holdout.iter().map(|t| (t.clone(), true)));
    let cols: Vec<(u32, String)> = run
        .iterations
        .iter()
        .map(|i| (i.iteration, iter_label(i)))
        .collect();
    let cells: Vec<Vec<Option<HeatCell>>> = rows
        .par_iter()
        .map(|(task, _)| {
            run.iterations
                .iter()
                .map(|it| {
                    let c = it.cell(task)?;
                    let statuses: Vec<(u32, String)> = match it.task(task) {
                        Some(s) => s
                            .trials
                            .iter()
                            .map(|x| (x.attempt, x.status.as_str().to_string()))
                            .collect(),
                        None => it
                            .journal_trials
                            .get(task)
                            .map(|m| m.iter().map(|(a, s)| (*a, s.clone())).collect())
                            .unwrap_or_default(),
                    };
                    // Link the first trial that did not pass (the one worth reading).
                    let link = statuses
                        .iter()
                        .find(|(_, s)| s != "pass")
                        .or(statuses.first())
                        .map(|(a, _)| trial_href(it, task, *a, pages));
                    let list: Vec<String> = statuses.iter().map(|(_, s)| s.clone()).collect();
                    Some(HeatCell {
                        text: cell_text(&c),
                        class: cell_class(&c),
                        title: format!(
                            "{task} · iteration {}: {} ({}){}",
                            it.iteration,
                            cell_text(&c),
                            list.join(", "),
                            it.task_move(task)
                                .map(|m| format!(" · {m}"))
                                .unwrap_or_default()
                        ),
                        href: link,
                    })
                })
                .collect()
        })
        .collect();
    svg::heatmap(&rows, &cols, &cells)
}

/// The report's charts as SVG strings (shared by `report.html` and the `report/*.svg` files).
pub struct Charts {
    /// pass@1 per iteration with intervals.
    pub pass: String,
    /// Task × iteration heatmap (links relative to the run dir).
    pub heatmap: String,
    /// Tokens per role per iteration.
    pub tokens: String,
    /// Dollars per role per iteration (None when nothing was priced).
    pub cost: Option<String>,
    /// Wall time per phase per iteration.
    pub phases: String,
}

/// Seconds per phase per iteration, one series per evolve phase.
fn phase_series(run: &RunReport) -> Vec<Series> {
    super::model::EVOLVE_PHASES
        .iter()
        .map(|p| Series {
            label: phase_name(*p).to_string(),
            values: run
                .iterations
                .iter()
                .map(|i| {
                    i.phases
                        .iter()
                        .find(|x| x.phase == phase_name(*p))
                        .and_then(|x| x.secs)
                        .unwrap_or(0.0)
                })
                .collect(),
        })
        .collect()
}

/// The wall time per phase chart: long runs are drawn in minutes or hours, not seconds.
fn phase_chart(cats: &[String], phase_series: &[Series]) -> String {
    let max = (0..cats.len())
        .map(|c| phase_series.iter().map(|s| s.values[c]).sum::<f64>())
        .fold(0.0, f64::max);
    let (div, unit) = if max >= 7200.0 {
        (3600.0, "h")
    } else if max >= 120.0 {
        (60.0, "min")
    } else {
        (1.0, "s")
    };
    let scaled: Vec<Series> = phase_series
        .iter()
        .map(|s| Series {
            label: s.label.clone(),
            values: s.values.iter().map(|v| v / div).collect(),
        })
        .collect();
    let fmt = move |v: f64| {
        if unit == "s" {
            secs(v)
        } else if v >= 10.0 || v == 0.0 {
            format!("{v:.0} {unit}")
        } else {
            format!("{v:.1} {unit}")
        }
    };
    svg::stacked_bars("wall time per phase per iteration", cats, &scaled, &fmt)
}

/// Draws every chart of a run (heatmap links go to trial pages when `pages`).
pub fn charts(run: &RunReport, pages: bool) -> Charts {
    let scored: Vec<&IterationReport> = run.iterations.iter().collect();
    let points: Vec<PassPoint> = scored
        .iter()
        .filter(|i| i.scores.is_some())
        .map(|i| PassPoint {
            iteration: i.iteration,
            label: iter_label(i),
            visible: i.visible(),
            holdout: i.holdout(),
            best: run.is_best(i.iteration),
        })
        .collect();
    let cats: Vec<String> = scored.iter().map(|i| iter_label(i)).collect();
    let role_series = |f: &dyn Fn(&super::model::RoleUsage) -> f64| -> Vec<Series> {
        run.roles()
            .iter()
            .map(|r| Series {
                label: r.to_string(),
                values: scored
                    .iter()
                    .map(|i| i.roles.get(*r).map(f).unwrap_or(0.0))
                    .collect(),
            })
            .collect()
    };
    Charts {
        pass: svg::pass_chart(&points),
        heatmap: heatmap_svg(run, pages),
        tokens: svg::stacked_bars(
            "tokens per role per iteration",
            &cats,
            &role_series(&|u| (u.input_tokens + u.output_tokens) as f64),
            &|v| tokens(v as u64),
        ),
        cost: (run.cost_usd() > 0.0).then(|| {
            svg::stacked_bars(
                "dollars per role per iteration",
                &cats,
                &role_series(&|u| u.cost_usd),
                &usd,
            )
        }),
        phases: phase_chart(&cats, &phase_series(run)),
    }
}

/// A chart as a standalone `.svg` file under `report/`: the page's CSS embedded, links
/// made relative to `report/`.
pub fn standalone_svg(chart: &str) -> String {
    let css = include_str!("../templates/report/report.css");
    let chart = chart.replace("href=\"report/", "href=\"").replace(
        &format!("href=\"{ITERATIONS}/"),
        &format!("href=\"../{ITERATIONS}/"),
    );
    match chart.find('>') {
        Some(i) => format!(
            "{}<style>{}</style>{}",
            &chart[..=i],
            css.replace('<', "&lt;"),
            &chart[i + 1..]
        ),
        None => chart,
    }
}
