//! The overview's trends (each pattern against the previous iteration's) and its Markdown.

use std::collections::BTreeSet;

use ahe_bench::scores::TaskScore;
use ahe_bench::{Scores, TrialStatus};
use ahe_rundir::run_dir::analysis::{Pattern, Patterns, Trend};

const OVERVIEW: &str = include_str!("../../../templates/overview.md");

/// One mark per trial: ✓ pass, ✗ not, ⚑ suspect.
pub(super) fn marks(ts: &TaskScore) -> String {
    ts.trials
        .iter()
        .map(|t| match (t.suspect, t.status == TrialStatus::Pass) {
            (true, _) => "⚑",
            (false, true) => "✓",
            (false, false) => "✗",
        })
        .collect()
}

fn same_name(a: &str, b: &str) -> bool {
    a.trim().eq_ignore_ascii_case(b.trim())
}

/// Share of tasks two patterns have in common (Jaccard).
fn overlap(a: &[String], b: &[String]) -> f64 {
    let a: BTreeSet<&String> = a.iter().collect();
    let b: BTreeSet<&String> = b.iter().collect();
    let union = a.union(&b).count();
    if union == 0 {
        return 0.0;
    }
    a.intersection(&b).count() as f64 / union as f64
}

/// The previous pattern `p` continues: the one with the same name, else the one of the same
/// component sharing at least half of the tasks (the most shared).
fn matching<'a>(p: &Pattern, prev: &'a [Pattern]) -> Option<&'a Pattern> {
    prev.iter()
        .find(|q| same_name(&q.name, &p.name))
        .or_else(|| {
            prev.iter()
                .filter(|q| q.component == p.component)
                .map(|q| (overlap(&q.tasks, &p.tasks), q))
                .filter(|(o, _)| *o >= 0.5)
                .max_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(_, q)| q)
        })
}

/// The trend of `p` against the previous iteration's patterns.
pub fn trend_of(p: &Pattern, prev: &[Pattern]) -> Trend {
    match matching(p, prev) {
        None => Trend::New,
        Some(q) if p.trials > q.trials => Trend::Grew { from: q.trials },
        Some(q) if p.trials < q.trials => Trend::Shrank { from: q.trials },
        Some(_) => Trend::Steady,
    }
}

/// Sets every pattern's trend; returns the previous patterns none continues.
pub(super) fn apply_trends(patterns: &mut [Pattern], prev: Option<&Patterns>) -> Vec<String> {
    let prev = prev.map(|p| p.patterns.as_slice()).unwrap_or_default();
    let mut used: BTreeSet<String> = BTreeSet::new();
    for p in patterns.iter_mut() {
        p.trend = trend_of(p, prev);
        if let Some(q) = matching(p, prev) {
            used.insert(q.name.clone());
        }
    }
    prev.iter()
        .filter(|q| !used.contains(&q.name))
        .map(|q| q.name.clone())
        .collect()
}

/// `analysis/overview.md`: the failure patterns (or why there are none), the failing tasks
/// in no pattern, the patterns gone since the previous iteration, the suspect trials apart,
/// then `list` (the deterministic per-task list, its own title dropped).
pub fn overview_md(
    iteration: u32,
    p: &Patterns,
    failing: &BTreeSet<String>,
    scores: &Scores,
    how: Option<&str>,
    visible: &[String],
    list: &str,
) -> String {
    let covered: BTreeSet<&String> = p.patterns.iter().flat_map(|x| &x.tasks).collect();
    let rest: Vec<&String> = failing.iter().filter(|t| !covered.contains(t)).collect();
    let suspect: Vec<minijinja::Value> = (scores.tasks.iter())
        .filter(|(t, _)| visible.contains(t))
        .flat_map(|(task, ts)| {
            (ts.trials.iter().filter(|x| x.suspect))
                .map(move |x| minijinja::context! { task, attempt => x.attempt })
        })
        .collect();
    let list = list_body(list);
    ahe_harness::text::render(
        OVERVIEW,
        minijinja::context! {
            iteration, failing => failing.len(), fallback => p.fallback, how,
            patterns => p.patterns, rest, gone => p.gone, suspect, list,
        },
    )
}

/// The per-task list as the overview's last section: its own `# ` title dropped, its
/// headings one level down.
fn list_body(list: &str) -> String {
    let body = list.split_once('\n').map_or(list, |(first, rest)| {
        if first.starts_with("# ") {
            rest.trim_start()
        } else {
            list
        }
    });
    let lead = if body.starts_with("## ") { "#" } else { "" };
    format!("{lead}{}", body.replace("\n## ", "\n### "))
}
