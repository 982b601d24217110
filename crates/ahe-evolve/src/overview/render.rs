//! The overview's trends (each pattern against the previous iteration's) and its Markdown.

use std::collections::BTreeSet;

use ahe_bench::scores::TaskScore;
use ahe_bench::{Scores, TrialStatus};
use ahe_rundir::run_dir::analysis::{Pattern, Patterns, Trend};

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

fn trend_text(t: &Trend) -> String {
    match t {
        Trend::New => "new".into(),
        Trend::Grew { from } => format!("grew (from {from} failing trial(s))"),
        Trend::Shrank { from } => format!("shrank (from {from} failing trial(s))"),
        Trend::Steady => "steady".into(),
    }
}

fn task_links(tasks: &[String]) -> String {
    let v: Vec<String> = tasks
        .iter()
        .map(|t| format!("`{t}` (detail/{t}.md)"))
        .collect();
    v.join(", ")
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
    let mut s = crate::debug::overview_title(iteration);
    s.push_str(&patterns_md(iteration, p, failing, how));
    s.push_str(&suspect_md(scores, visible));
    s.push_str("## Per-task list\n\n");
    let body = list.split_once('\n').map_or(list, |(first, rest)| {
        if first.starts_with("# ") {
            rest.trim_start()
        } else {
            list
        }
    });
    if body.starts_with("## ") {
        s.push('#');
    }
    s.push_str(&body.replace("\n## ", "\n### "));
    s
}

/// The failure-pattern section: the patterns with their tasks and evidence, failing tasks in
/// none, patterns gone since the last iteration; or why there are none.
fn patterns_md(
    iteration: u32,
    p: &Patterns,
    failing: &BTreeSet<String>,
    how: Option<&str>,
) -> String {
    let mut s = String::new();
    match &p.fallback {
        _ if failing.is_empty() => s.push_str("No visible task failed: no failure pattern.\n\n"),
        Some(why) => s.push_str(&format!(
            "_No failure patterns this iteration: the synthesis over the task reports did not \
             run or failed ({why}). The per-task list below stands alone; read the detail \
             files for what is common._\n\n"
        )),
        None => {
            s.push_str(&format!(
                "## Failure patterns: {} pattern(s) over {} failing task(s)\n\n",
                p.patterns.len(),
                failing.len()
            ));
            if let Some(h) = how {
                s.push_str(&format!("_Synthesis: {h}._\n\n"));
            }
            for (i, x) in p.patterns.iter().enumerate() {
                s.push_str(&format!(
                    "### {}. {} — {} task(s), {} failing trial(s), component `{}`, trend: {}\n\n",
                    i + 1,
                    x.name,
                    x.tasks.len(),
                    x.trials,
                    x.component,
                    trend_text(&x.trend)
                ));
                if !x.mechanism.is_empty() {
                    s.push_str(&format!("{}\n\n", x.mechanism));
                }
                s.push_str(&format!("- tasks: {}\n", task_links(&x.tasks)));
                if !x.evidence.is_empty() {
                    s.push_str(&format!("- evidence: {}\n", x.evidence));
                }
                s.push('\n');
            }
            let covered: BTreeSet<&String> = p.patterns.iter().flat_map(|x| &x.tasks).collect();
            let rest: Vec<String> = failing
                .iter()
                .filter(|t| !covered.contains(t))
                .cloned()
                .collect();
            if !rest.is_empty() {
                s.push_str(&format!(
                    "Failing tasks in no pattern: {}\n\n",
                    task_links(&rest)
                ));
            }
            if !p.gone.is_empty() {
                s.push_str(&format!(
                    "Patterns of iteration {} that no longer appear: {}\n\n",
                    iteration.saturating_sub(1),
                    p.gone.join("; ")
                ));
            }
        }
    }
    s
}

/// The suspect trials of visible tasks, listed apart (empty when there are none).
fn suspect_md(scores: &Scores, visible: &[String]) -> String {
    let mut s = String::new();
    let suspect: Vec<String> = scores
        .tasks
        .iter()
        .filter(|(t, _)| visible.contains(t))
        .flat_map(|(t, ts)| {
            ts.trials
                .iter()
                .filter(|x| x.suspect)
                .map(move |x| format!("`{t}` trial {} (detail/{t}.md)", x.attempt))
        })
        .collect();
    if !suspect.is_empty() {
        s.push_str(&format!(
            "## Suspect trials (apart: counted in no pattern)\n\n{}\n\n",
            suspect.join(", ")
        ));
    }
    s
}
