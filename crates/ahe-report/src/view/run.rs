//! The whole run's view: what `report.html` and `report.md` both lay out above and around
//! the iterations (facts, the iterations table, the task × iteration grid, tokens and time
//! per role and phase), computed once.

use rayon::prelude::*;
use serde::Serialize;

use super::{iter_view, summary_row, IterView, SummaryRow};
use crate::format::{cell_class, cell_text, f3, iter_label, secs, tokens, usd};
use crate::model::{phase_name, RunReport, EVOLVE_PHASES};

/// The run's summary, computed once: the header facts, the best harness, the closing
/// lines and the iterations table. `ahe show` prints it as its run view; `report.md` and
/// `report.html` show it at the top (it is flattened into [`RunView`]).
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// Run name.
    pub name: String,
    /// Why the run directory is incomplete, if it is.
    pub incomplete: Option<String>,
    /// `running`, `completed`, `budget`...
    pub status: String,
    /// How the run ended (journal), if it did.
    pub ended: Option<String>,
    /// The model(s) of the roles.
    pub model: String,
    /// Visible tasks.
    pub n_visible: usize,
    /// Held-out tasks.
    pub n_holdout: usize,
    /// Trials per task.
    pub k: u32,
    /// Cost, or why it is unknown / zero.
    pub cost: String,
    /// Wall time of the phases.
    pub wall: String,
    /// What the trials were checked with, when they recorded it (`RunReport::integrity_line`).
    pub integrity: Option<String>,
    /// (label, value) facts of the run's header.
    pub facts: Vec<(String, String)>,
    /// The best harness: iteration, visible pass@1, short commit.
    pub best: Option<(u32, String, String)>,
    /// HTML anchor of best's iteration.
    pub best_anchor: Option<String>,
    /// "Is best better than the seed?" lines.
    pub closing: Vec<String>,
    /// The run's spend per phase and the machinery's share, one line (`crate::spend`).
    pub spend: String,
    /// Per iteration: label, the machinery's share of its spend.
    pub machinery_share: Vec<(String, String)>,
    /// The iterations table.
    pub summary: Vec<SummaryRow>,
}

/// The run's view (see the module doc).
#[derive(Debug, Clone, Serialize)]
pub struct RunView {
    /// The header, best harness, closing lines and iterations table (flattened: templates
    /// read `name`, `best`, `summary`... at the top level).
    #[serde(flatten)]
    pub head: RunSummary,
    /// Roles that spent tokens.
    pub roles: Vec<String>,
    /// Per iteration: label, one cell per role, total.
    pub role_rows: Vec<(String, Vec<String>, String)>,
    /// The phases of the spend table (`crate::spend::PHASES`).
    pub spend_phases: Vec<String>,
    /// Per iteration, then `total`: label, spend of each phase, the machinery's share.
    pub spend_rows: Vec<(String, Vec<String>, String)>,
    /// Phases of an iteration, in order.
    pub phase_names: Vec<String>,
    /// Per iteration: label, one cell per phase, total.
    pub phase_rows: Vec<(String, Vec<String>, String)>,
    /// Column labels of the task × iteration grid.
    pub grid_labels: Vec<String>,
    /// Rows of the grid: visible tasks, then held-out ones.
    pub grid: Vec<GridRow>,
    /// Whether any dollar was spent (the cost chart).
    pub has_cost: bool,
    /// Whether the run holds tasks out.
    pub has_holdout: bool,
    /// Every iteration's view.
    pub iterations: Vec<IterView>,
}

/// One task's row of the task × iteration grid.
#[derive(Debug, Clone, Serialize)]
pub struct GridRow {
    /// Task name.
    pub task: String,
    /// Held out of the evolve agent's sight.
    pub held: bool,
    /// Per iteration: (CSS class, text) of the cell, or none.
    pub cells: Vec<Option<(String, String)>>,
}

/// Builds the run's summary (see [`RunSummary`]); cheap: no iteration view is built.
pub fn run_summary(run: &RunReport) -> RunSummary {
    let sp = crate::spend::spend(run);
    RunSummary {
        name: run.name.clone(),
        incomplete: run.incomplete.as_ref().map(|i| i.message.clone()),
        status: run.status().into(),
        ended: run.ended.clone(),
        model: run.model.clone(),
        n_visible: run.visible_tasks().len(),
        n_holdout: run.holdout.len(),
        k: run.info.k,
        cost: run.cost_text(),
        wall: secs(run.wall_sec()),
        integrity: run.integrity_line(),
        facts: facts(run),
        best: run.best.as_ref().map(|b| {
            let commit = b.commit.chars().take(12).collect::<String>();
            (b.iteration, f3(b.pass_at_1), commit)
        }),
        best_anchor: run
            .best
            .as_ref()
            .map(|b| format!("iter-{:03}", b.iteration)),
        closing: run.closing(),
        spend: sp.total_line(),
        machinery_share: sp
            .rows
            .iter()
            .map(|(l, r)| (l.clone(), sp.share_cell(r)))
            .collect(),
        summary: run.iterations.iter().map(|i| summary_row(run, i)).collect(),
    }
}

/// Per iteration: label, tokens and dollars of each role in `roles`, the iteration's cost.
fn role_rows(run: &RunReport, roles: &[&str]) -> Vec<(String, Vec<String>, String)> {
    run.iterations
        .iter()
        .map(|i| {
            let cells = roles
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
        .collect()
}

/// Per iteration, then the run's total: label, spend of each phase, the machinery's share.
pub fn spend_rows(run: &RunReport) -> Vec<(String, Vec<String>, String)> {
    let sp = crate::spend::spend(run);
    let row = |label: &str, r: &[crate::spend::PhaseSpend; 9]| {
        let cells = r.iter().map(|p| sp.cell(p)).collect();
        (label.to_string(), cells, sp.share_cell(r))
    };
    let mut out: Vec<_> = sp.rows.iter().map(|(l, r)| row(l, r)).collect();
    out.push(row("total", &sp.total));
    out
}

/// Per iteration: label, wall time of each phase in `phase_names`, the iteration's wall.
fn phase_rows(run: &RunReport, phase_names: &[String]) -> Vec<(String, Vec<String>, String)> {
    run.iterations
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
        .collect()
}

/// The task × iteration grid: visible tasks, then held-out ones.
fn grid(run: &RunReport) -> Vec<GridRow> {
    let mut grid: Vec<GridRow> = Vec::new();
    let visible = run.visible_tasks().into_iter().map(|t| (t, false));
    for (task, held) in visible.chain(run.holdout.iter().map(|t| (t, true))) {
        let cells = run
            .iterations
            .iter()
            .map(|i| {
                i.cell(task)
                    .map(|c| (cell_class(&c).to_string(), cell_text(&c)))
            })
            .collect();
        grid.push(GridRow {
            task: task.clone(),
            held,
            cells,
        });
    }
    grid
}

/// Builds the run's view (links to trial pages when `pages`, else to trial directories).
pub fn run_view(run: &RunReport, pages: bool) -> RunView {
    let its = &run.iterations;
    let roles = run.roles();
    let phase_names: Vec<String> = EVOLVE_PHASES
        .iter()
        .map(|p| phase_name(*p).into())
        .collect();
    RunView {
        head: run_summary(run),
        role_rows: role_rows(run, &roles),
        roles: roles.iter().map(|r| r.to_string()).collect(),
        spend_phases: crate::spend::PHASES.iter().map(|p| p.to_string()).collect(),
        spend_rows: spend_rows(run),
        phase_rows: phase_rows(run, &phase_names),
        phase_names,
        grid_labels: its.iter().map(iter_label).collect(),
        grid: grid(run),
        has_cost: run.cost_usd() > 0.0,
        has_holdout: !run.holdout.is_empty(),
        iterations: its.par_iter().map(|i| iter_view(run, i, pages)).collect(),
    }
}

/// The (label, value) facts of the report's header.
fn facts(run: &RunReport) -> Vec<(String, String)> {
    let tasks = format!(
        "{} visible + {} held out, k = {}",
        run.visible_tasks().len(),
        run.holdout.len(),
        run.info.k
    );
    let iterations = format!(
        "{} of {} planned + final evaluation",
        run.iterations.iter().filter(|i| !i.is_final).count(),
        run.info.iterations
    );
    let mut facts: Vec<(String, String)> = vec![
        ("status".into(), run.status().into()),
        ("model".into(), run.model.clone()),
        ("tasks".into(), tasks),
        ("iterations".into(), iterations),
        ("benchmark".into(), run.info.benchmark.clone()),
        ("sandbox".into(), run.info.sandbox.clone()),
        ("rollback policy".into(), run.info.rollback.clone()),
        ("cost".into(), run.cost_text()),
        ("wall time (phases)".into(), secs(run.wall_sec())),
    ];
    if let Some(l) = run.integrity_line() {
        facts.push(("reward integrity".into(), l));
    }
    if let Some(b) = run.info.budget_usd {
        facts.push(("budget".into(), usd(b)));
    }
    if let Some(r) = &run.ended {
        facts.push(("ended".into(), r.clone()));
    }
    facts
}
