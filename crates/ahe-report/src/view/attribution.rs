//! The attribution part of an iteration's view: moves, judged changes, predictions.

use super::super::format::{f3, verdict_class};
use super::super::model::{verdict_name, IterationReport};
use super::*;
use ahe_rundir::attribution::{ChangeVerdict, TaskMove};

fn moves(v: &[TaskMove]) -> Vec<MoveView> {
    v.iter()
        .map(|m| MoveView {
            task: m.task.clone(),
            from: format!("{}/{}", m.prev_passed, m.prev_k),
            to: format!("{}/{}", m.cur_passed, m.cur_k),
            p_value: format!("{:.3}", m.p_value),
            within_noise: m.within_noise,
        })
        .collect()
}

pub(super) fn change_view(
    c: &ahe_rundir::manifest::Change,
    out: Option<&ChangeVerdict>,
    judged: bool,
) -> ChangeView {
    let kind = serde_json::to_value(c.kind)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    let component = serde_json::to_value(c.component)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    let verdict = match out {
        Some(o) => verdict_name(o.verdict).to_string(),
        None if judged => "NOT JUDGED".into(),
        None => "PENDING".into(),
    };
    let l = |f: fn(&ChangeVerdict) -> &Vec<String>| out.map(|o| f(o).clone()).unwrap_or_default();
    ChangeView {
        judged: out.is_some(),
        id: c.id.clone(),
        kind,
        component,
        description: c.description.clone(),
        files: c.files.clone(),
        failure_pattern: c.failure_pattern.clone(),
        root_cause: c.root_cause.clone(),
        why: c.why_this_component.clone(),
        predicted_fixes: c.predicted_fixes.clone(),
        risk_tasks: c.risk_tasks.clone(),
        verdict_class: verdict_class(&verdict),
        verdict,
        actually_fixed: l(|o| &o.actually_fixed),
        still_failed: l(|o| &o.still_failed),
        risk_realized: l(|o| &o.risk_realized),
        improved: l(|o| &o.improved),
        within_noise: l(|o| &o.flips_within_noise),
        regressions_matched: l(|o| &o.regressions_matched),
    }
}

fn opt_ratio(v: Option<f64>) -> String {
    v.map(f3).unwrap_or_else(|| "–".into())
}

/// The Δ pass@1 sentence: value, paired interval, significance and pairs, or why none.
fn delta_line(st: &ahe_rundir::attribution::RunStats) -> String {
    match (st.delta, st.delta_ci) {
        (Some(d), Some(c)) => format!(
            "Δ pass@1 = {d:+.3} (paired 95% CI {:+.3}…{:+.3}{}) over {} paired tasks",
            c[0],
            c[1],
            if st.delta_significant {
                ", significant"
            } else {
                ", within noise"
            },
            st.n_paired
        ),
        _ => "no previous iteration to compare with".into(),
    }
}

/// Δ pass@1 as values, when there is a previous iteration.
fn delta_values(st: &ahe_rundir::attribution::RunStats) -> Option<DeltaView> {
    match (st.delta, st.delta_ci) {
        (Some(d), Some(c)) => Some(DeltaView {
            value: format!("{d:+.3}"),
            lo: format!("{:+.3}", c[0]),
            hi: format!("{:+.3}", c[1]),
            significant: st.delta_significant,
            n_paired: st.n_paired,
        }),
        _ => None,
    }
}

/// Prediction quality as (label, value) cells: precision, recall and the counts.
fn prediction_cells(p: &ahe_rundir::attribution::PredictionQuality) -> Vec<(String, String)> {
    vec![
        ("fix precision".into(), opt_ratio(p.fix_precision)),
        ("fix recall".into(), opt_ratio(p.fix_recall)),
        ("risk precision".into(), opt_ratio(p.risk_precision)),
        ("risk recall".into(), opt_ratio(p.risk_recall)),
        (
            "predicted fixes / fixed".into(),
            format!("{} / {}", p.predicted_fixes, p.fixed),
        ),
        (
            "predicted risks / regressed".into(),
            format!("{} / {}", p.predicted_risks, p.regressed),
        ),
    ]
}

/// The judged changes with their predictions and outcomes.
fn judged_rows(e: &ahe_rundir::attribution::ChangeEvaluation) -> Vec<JudgedRow> {
    e.changes
        .iter()
        .map(|c| JudgedRow {
            id: c.id.clone(),
            verdict: verdict_name(c.verdict).to_string(),
            predicted_fixes: c.predicted_fixes.clone(),
            actually_fixed: c.actually_fixed.clone(),
            risk_tasks: c.risk_tasks.clone(),
            risk_realized: c.risk_realized.clone(),
        })
        .collect()
}

/// The judged changes as (id, verdict, CSS class, anchor of the change) tuples.
fn judged_tuples(
    e: &ahe_rundir::attribution::ChangeEvaluation,
) -> Vec<(String, String, String, String)> {
    e.changes
        .iter()
        .map(|c| {
            let v = verdict_name(c.verdict);
            let anchor = format!("iter-{:03}-{}", e.manifest_iteration.unwrap_or(0), c.id);
            (c.id.clone(), v.to_string(), verdict_class(v), anchor)
        })
        .collect()
}

/// Tasks listed with the changes they matched, `a, b`.
fn matched(v: &[ahe_rundir::attribution::FileMatch]) -> Vec<(String, String)> {
    v.iter()
        .map(|m| (m.task.clone(), m.matched_changes.join(", ")))
        .collect()
}

pub(super) fn attribution_view(it: &IterationReport) -> Option<AttributionView> {
    let e = it.evaluation.as_ref()?;
    let st = &e.stats;
    let p = &e.prediction;
    Some(AttributionView {
        delta_view: delta_values(st),
        judged_rows: judged_rows(e),
        precision: PredictionView {
            fix_precision: opt_ratio(p.fix_precision),
            fix_recall: opt_ratio(p.fix_recall),
            risk_precision: opt_ratio(p.risk_precision),
            risk_recall: opt_ratio(p.risk_recall),
        },
        manifest_iteration: e.manifest_iteration,
        delta: delta_line(st),
        prev: st.prev_pass_at_1.map(f3).unwrap_or_else(|| "–".into()),
        has_moves: !(e.fixed.is_empty()
            && e.regressed.is_empty()
            && e.improved.is_empty()
            && e.worsened.is_empty()
            && e.infra_changes.is_empty()),
        moves: vec![
            ("fixed".into(), moves(&e.fixed)),
            ("regressed".into(), moves(&e.regressed)),
            ("improved".into(), moves(&e.improved)),
            ("worsened".into(), moves(&e.worsened)),
            ("infra".into(), moves(&e.infra_changes)),
        ],
        unattributed: matched(&e.unattributed_regressions),
        unpredicted: matched(&e.unpredicted_fixes),
        prediction: prediction_cells(p),
        evidence: evidence_lines(e),
        judged: judged_tuples(e),
    })
}

/// The sentences of [`AttributionView::evidence`].
fn evidence_lines(e: &ahe_rundir::attribution::ChangeEvaluation) -> Vec<String> {
    let mut out = Vec::new();
    let q = |t: &ahe_rundir::attribution::TruthQuality| {
        format!(
            "fix precision {} · recall {} · risk precision {} · recall {}",
            opt_ratio(t.fix_precision),
            opt_ratio(t.fix_recall),
            opt_ratio(t.risk_precision),
            opt_ratio(t.risk_recall)
        )
    };
    if e.manifest_iteration.is_some() {
        let (t, c) = (&e.prediction_vs_truth, &e.prediction_vs_truth_cumulative);
        out.push(format!(
            "against the truth ({} flip(s) decided by counterfactual): {}; cumulative: {}",
            t.counterfactual_tasks,
            q(t),
            q(c)
        ));
    }
    for c in &e.changes {
        if let Some(cf) = &c.counterfactual {
            let names = |v: &[String]| match v.is_empty() {
                true => "none".to_string(),
                false => v.join(", "),
            };
            out.push(format!(
                "{} reverted: restored {}; not restored {} ({} trial(s))",
                c.id,
                names(&cf.restored),
                names(&cf.not_restored),
                cf.trials
            ));
        }
    }
    for c in &e.changes {
        if let Some(why) = &c.unjudged_reason {
            out.push(format!("{} is UNJUDGED: {why}", c.id));
        }
    }
    if let Some(k) = &e.canary {
        let reverted = match k.rolled_back.is_empty() {
            true => "nothing reverted".to_string(),
            false => format!("reverted {} before the rollout", k.rolled_back.join(", ")),
        };
        let regressions = match k.regressions.is_empty() {
            true => "none".to_string(),
            false => k.regressions.join(", "),
        };
        out.push(format!(
            "canary: {} task(s), regressions {regressions}; {reverted}; {} canary + {} \
             counterfactual trial(s), {} reused by the rollout",
            k.tasks.len(),
            k.canary_trials,
            k.cf_trials,
            k.trials_saved
        ));
    }
    if !e.unconfirmed.is_empty() {
        out.push(format!(
            "flips left within noise by confirmation trials (counted in no verdict): {}",
            e.unconfirmed.join(", ")
        ));
    }
    if e.confirm_trials + e.counterfactual_trials > 0 {
        out.push(format!(
            "extra trials: {} confirmation, {} counterfactual (${:.4})",
            e.confirm_trials, e.counterfactual_trials, e.extra_cost_usd
        ));
    }
    out
}
