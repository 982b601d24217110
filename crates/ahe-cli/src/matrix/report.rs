//! The matrix's report: `matrix.json` (one entry per cell, paired deltas against the
//! reference harness, each ablated component's contribution), and `matrix.md` /
//! `matrix.html` rendered from templates over that same document.

use std::collections::BTreeMap;
use std::path::Path;

use ahe_attribution::stats::{excludes_zero, paired_delta_ci};
use ahe_bench::Scores;
use serde_json::{json, Value};

use super::plan::Ablate;
use super::{Cell, Plan};

const MD: &str = include_str!("../../templates/matrix.md");
const HTML: &str = include_str!("../../templates/matrix.html");

/// The matrix document (`matrix.json`, and what the templates render).
pub fn document(plan: &Plan, cells: &[Cell], out: &Path, wall_sec: f64) -> Value {
    let harnesses: Vec<Value> = plan
        .harnesses
        .iter()
        .map(|h| {
            json!({
                "label": h.label, "identity": h.identity,
                "run": h.run.as_ref().map(|r| r.display().to_string()),
                "ablation": h.ablation.as_ref().map(|(t, how)| json!({"type": t, "how": how})),
                "invalid": h.invalid, "holdout": h.holdout,
            })
        })
        .collect();
    let cell_docs: Vec<Value> = cells.iter().map(|c| cell_doc(plan, c, out)).collect();
    let reference = &plan.harnesses[0].label;
    let mut deltas = Vec::new();
    for c in cells.iter().filter(|c| c.at.0 != 0) {
        if let Some(r) = find(cells, 0, c.at.1, c.at.2) {
            deltas.push(delta(r, c, "harness"));
        }
    }
    json!({
        "kind": "matrix",
        "k": plan.k,
        "out": out.display().to_string(),
        "wall_sec": wall_sec,
        "reference": reference,
        "harnesses": harnesses,
        "benchmarks": plan.benchmarks.iter().map(|b| &b.label).collect::<Vec<_>>(),
        "models": plan.models.iter().map(|m| json!({"label": m.label, "model": m.cfg.describe()})).collect::<Vec<_>>(),
        "cells": cell_docs,
        "deltas": deltas,
        "ablation": ablation(plan, cells),
        "cost_usd": cells.iter().filter(|c| priced(&plan.models[c.at.2].cfg)).filter_map(|c| c.scores.as_ref()).map(|s| s.cost_usd).sum::<f64>(),
        "cost_unknown": plan.models.iter().filter(|m| !priced(&m.cfg)).map(|m| &m.label).collect::<Vec<_>>(),
    })
}

/// Whether the model's dollars are known: it names prices, or runs locally (no API cost).
fn priced(m: &ahe_model::ModelConfig) -> bool {
    m.runs_locally() || !m.prices_unknown()
}

fn find(cells: &[Cell], h: usize, b: usize, m: usize) -> Option<&Cell> {
    cells.iter().find(|c| c.at == (h, b, m))
}

/// The per-task pass@1 of the tasks both cells scored.
fn paired(a: &Scores, b: &Scores) -> (Vec<f64>, Vec<f64>) {
    a.tasks
        .iter()
        .filter_map(|(t, x)| b.tasks.get(t).map(|y| (x.pass_at_1, y.pass_at_1)))
        .unzip()
}

/// `other` against `base`, paired by task: delta of pass@1 and its bootstrap interval.
fn delta(base: &Cell, other: &Cell, what: &str) -> Value {
    let pair = base
        .scores
        .as_ref()
        .zip(other.scores.as_ref())
        .map(|(b, o)| paired(b, o));
    let d = pair.as_ref().and_then(|(b, o)| paired_delta_ci(b, o));
    json!({
        "benchmark": other.key.benchmark, "model": other.key.model,
        what: other.key.harness, "against": base.key.harness,
        "n_paired": pair.map_or(0, |(b, _)| b.len()),
        "delta": d.map(|x| x.0), "delta_ci": d.map(|x| x.1),
        "excludes_zero": d.is_some_and(|x| excludes_zero(x.1)),
    })
}

fn cell_doc(plan: &Plan, c: &Cell, out: &Path) -> Value {
    let h = &plan.harnesses[c.at.0];
    let s = c.scores.as_ref();
    let holdout: Vec<(f64, &String)> = s
        .map(|s| {
            s.tasks
                .iter()
                .filter(|(t, _)| h.holdout.contains(*t))
                .map(|(t, x)| (x.pass_at_1, t))
                .collect()
        })
        .unwrap_or_default();
    let holdout_pass = (!holdout.is_empty())
        .then(|| holdout.iter().map(|x| x.0).sum::<f64>() / holdout.len() as f64);
    json!({
        "harness": c.key.harness, "benchmark": c.key.benchmark, "model": c.key.model,
        "dir": c.dir.strip_prefix(out).unwrap_or(&c.dir).display().to_string(),
        "status": c.status, "message": c.message,
        "pass_at_1": s.map(|s| s.pass_at_1),
        "pass_at_1_ci": s.map(|s| s.pass_at_1_ci),
        "n_tasks": s.map(|s| s.n_tasks),
        "infra_trials": s.map(|s| s.statuses.get("infra_error").copied().unwrap_or(0)),
        "suspect_trials": s.map(|s| s.suspect_trials),
        "holdout_tasks": holdout.len(),
        "holdout_pass_at_1": holdout_pass,
        // An API model without prices: unknown, never $0 (the local model costs nothing).
        "cost_usd": s.filter(|_| priced(&plan.models[c.at.2].cfg)).map(|s| s.cost_usd),
        "wall_sec": s.map(|s| s.durations.wall_sec),
    })
}

/// Each ablated type's contribution per benchmark × model: the drop when it is removed
/// from the evolved harness (`components`), or the gain when it alone is added to the base
/// (`add-one`).
fn ablation(plan: &Plan, cells: &[Cell]) -> Value {
    let Some((mode, evolved, base)) = &plan.ablation else {
        return Value::Null;
    };
    let reference = match mode {
        Ablate::Components => evolved,
        Ablate::AddOne => base,
    };
    let Some(ri) = plan.harnesses.iter().position(|h| &h.label == reference) else {
        return Value::Null;
    };
    let mut rows = Vec::new();
    for (hi, h) in plan.harnesses.iter().enumerate() {
        let Some((ty, _)) = &h.ablation else { continue };
        for c in cells.iter().filter(|c| c.at.0 == hi) {
            let Some(r) = find(cells, ri, c.at.1, c.at.2) else {
                continue;
            };
            // components: evolved − (evolved without T); add-one: (base with T) − base.
            let mut row = match mode {
                Ablate::Components => delta(c, r, "harness"),
                Ablate::AddOne => delta(r, c, "harness"),
            };
            row["type"] = json!(ty);
            row["ablated"] = json!(h.label);
            rows.push(row);
        }
    }
    json!({"mode": mode, "evolved": evolved, "base": base, "contributions": rows})
}

/// Writes `matrix.json`, `matrix.md` and `matrix.html` into `out`.
pub fn write(out: &Path, doc: &Value) -> anyhow::Result<()> {
    std::fs::write(out.join("matrix.json"), serde_json::to_string_pretty(doc)?)?;
    std::fs::write(out.join("matrix.md"), render(MD, doc)?)?;
    std::fs::write(out.join("matrix.html"), render(HTML, doc)?)?;
    Ok(())
}

/// `matrix.html` of a matrix document (`ahe view` renders it from `matrix.json`).
pub fn html(doc: &Value) -> anyhow::Result<String> {
    render(HTML, doc)
}

/// The terminal's table (the Markdown report).
pub fn text(doc: &Value) -> String {
    render(MD, doc).unwrap_or_else(|e| format!("(the matrix report does not render: {e})\n"))
}

fn render(template: &str, doc: &Value) -> anyhow::Result<String> {
    let mut env = minijinja::Environment::new();
    env.add_filter("pct", |v: Option<f64>| {
        v.map_or("–".to_string(), |x| format!("{:.1}", 100.0 * x))
    });
    env.add_filter("signed", |v: Option<f64>| {
        v.map_or("–".to_string(), |x| format!("{:+.1}", 100.0 * x))
    });
    // An empty f64 sum is -0.0: shown as $0.0000.
    env.add_filter("usd", |v: Option<f64>| {
        v.map_or("–".to_string(), |x| format!("${:.4}", x + 0.0))
    });
    env.add_filter("secs", |v: Option<f64>| {
        v.map_or("–".to_string(), |x| format!("{x:.1}s"))
    });
    env.add_template("t", template)?;
    let by_pair = group(doc);
    Ok(env
        .get_template("t")?
        .render(minijinja::context! { m => doc, groups => by_pair })?)
}

/// Cells grouped by benchmark × model, in plan order, for the tables.
fn group(doc: &Value) -> Vec<Value> {
    let mut order: Vec<(String, String)> = Vec::new();
    let mut rows: BTreeMap<(String, String), Vec<Value>> = BTreeMap::new();
    for c in doc["cells"].as_array().into_iter().flatten() {
        let key = (
            c["benchmark"].as_str().unwrap_or("").to_string(),
            c["model"].as_str().unwrap_or("").to_string(),
        );
        if !rows.contains_key(&key) {
            order.push(key.clone());
        }
        let mut c = c.clone();
        let d = doc["deltas"].as_array().into_iter().flatten().find(|d| {
            d["harness"] == c["harness"]
                && d["benchmark"] == c["benchmark"]
                && d["model"] == c["model"]
        });
        c["delta"] = d.cloned().unwrap_or(Value::Null);
        rows.entry(key).or_default().push(c);
    }
    order
        .into_iter()
        .map(|k| {
            let contributions: Vec<&Value> = doc["ablation"]["contributions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|r| r["benchmark"] == k.0.as_str() && r["model"] == k.1.as_str())
                .collect();
            json!({"benchmark": k.0, "model": k.1, "cells": rows[&k], "contributions": contributions})
        })
        .collect()
}
