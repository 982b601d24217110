//! `ahe eval` with several harnesses (`--harness A --harness B`, `--against runs/X@best`):
//! per-task differences and the paired delta of pass@1 with its paired-bootstrap 95%
//! interval (`ahe_attribution::stats`), each harness against the baseline (the first one).
//!
//! `--json` document:
//! ```text
//! { kind: "comparison", k, model, baseline: label,
//!   harnesses: [{label, harness, out, pass_at_1, pass_at_1_ci: [lo, hi], n_tasks, commit|null}],
//!   comparisons: [{baseline, other, n_paired, excluded_infra: [task] (no trial of one side
//!                  could run: left out of the pairing), delta|null, delta_ci: [lo, hi]|null,
//!                  significant, changed,
//!                  tasks: [{task, baseline_passed, baseline_k, other_passed, other_k,
//!                           baseline_status, other_status, delta, p_value, within_noise}]}] }
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use ahe_attribution::stats::{excludes_zero, fisher_exact, paired_delta_ci, ALPHA};
use ahe_bench::Scores;
use serde_json::{json, Value};

/// One evaluated harness.
pub struct Evaluated {
    /// Short name (also the output sub-directory).
    pub label: String,
    /// The `--harness` / `--against` argument.
    pub harness: String,
    /// Output directory.
    pub out: PathBuf,
    /// Its scores.
    pub scores: Scores,
}

/// Distinct directory-safe labels: `runs/X@best` → `X@best`, `dir/h` → `h`.
pub fn labels(args: &[PathBuf]) -> Vec<String> {
    let mut seen: BTreeSet<String> = BTreeSet::new();
    args.iter()
        .map(|a| {
            let s = a.to_string_lossy();
            let base = match s.rsplit_once('@') {
                Some((run, rev)) if !a.is_dir() => {
                    let name = Path::new(run)
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_else(|| run.to_string());
                    format!("{name}@{rev}")
                }
                _ => a
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "harness".into()),
            };
            let clean: String = base
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || "-_.@".contains(c) {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let clean = if clean.is_empty() || clean.starts_with('.') {
                format!("h{clean}")
            } else {
                clean
            };
            let mut label = clean.clone();
            let mut n = 2;
            while !seen.insert(label.clone()) {
                label = format!("{clean}-{n}");
                n += 1;
            }
            label
        })
        .collect()
}

fn status(s: &Scores, t: &str) -> String {
    s.tasks
        .get(t)
        .and_then(|x| serde_json::to_value(x.status).ok())
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

/// One harness against the baseline.
pub fn pair(base: &Evaluated, other: &Evaluated) -> Value {
    let (b, o) = (&base.scores, &other.scores);
    // A task where no trial of one side could run (infra) says nothing of either harness.
    let infra = |s: &Scores, t: &str| status(s, t) == "infra";
    let (paired, no_trial): (Vec<&String>, Vec<&String>) = b
        .tasks
        .keys()
        .filter(|t| o.tasks.contains_key(*t))
        .partition(|t| !infra(b, t) && !infra(o, t));
    let (pb, po): (Vec<f64>, Vec<f64>) = paired
        .iter()
        .map(|t| (b.tasks[*t].pass_at_1, o.tasks[*t].pass_at_1))
        .unzip();
    let d = paired_delta_ci(&pb, &po);
    let tasks: Vec<Value> = paired
        .iter()
        .map(|t| {
            let (x, y) = (&b.tasks[*t], &o.tasks[*t]);
            let p = fisher_exact(x.passed, x.k, y.passed, y.k);
            json!({
                "task": t,
                "baseline_passed": x.passed, "baseline_k": x.k,
                "other_passed": y.passed, "other_k": y.k,
                "baseline_status": status(b, t), "other_status": status(o, t),
                "delta": y.pass_at_1 - x.pass_at_1,
                "p_value": p,
                "within_noise": p >= ALPHA,
            })
        })
        .collect();
    let changed = tasks
        .iter()
        .filter(|t| t["delta"].as_f64().unwrap_or(0.0) != 0.0)
        .count();
    json!({
        "baseline": base.label,
        "other": other.label,
        "n_paired": paired.len(),
        "excluded_infra": no_trial,
        "delta": d.map(|x| x.0),
        "delta_ci": d.map(|x| x.1),
        "significant": d.is_some_and(|x| excludes_zero(x.1)),
        "changed": changed,
        "tasks": tasks,
    })
}

/// The comparison document (see the module doc).
pub fn document(ev: &[Evaluated], k: u32, model: &str) -> Value {
    let harnesses: Vec<Value> = ev
        .iter()
        .map(|e| {
            json!({
                "label": e.label,
                "harness": e.harness,
                "out": e.out.display().to_string(),
                "pass_at_1": e.scores.pass_at_1,
                "pass_at_1_ci": e.scores.pass_at_1_ci,
                "n_tasks": e.scores.n_tasks,
                "commit": e.scores.meta.harness_commit,
            })
        })
        .collect();
    let comparisons: Vec<Value> = ev.iter().skip(1).map(|o| pair(&ev[0], o)).collect();
    json!({
        "kind": "comparison",
        "k": k,
        "model": model,
        "baseline": ev.first().map(|e| e.label.clone()),
        "harnesses": harnesses,
        "comparisons": comparisons,
    })
}

/// Terminal rendering of the comparison document.
pub fn text(doc: &Value) -> String {
    let k = match &doc["k"] {
        Value::Array(ks) => ks
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join(" / "),
        k => k.to_string(),
    };
    let model = doc["model"].as_str().unwrap_or("");
    let mut s = format!("\nharness comparison (k = {k}, {model}; paired on the tasks in common)\n");
    let hs = doc["harnesses"].as_array().cloned().unwrap_or_default();
    let w = hs
        .iter()
        .filter_map(|h| h["label"].as_str().map(|l| l.chars().count()))
        .max()
        .unwrap_or(5)
        .max(5);
    for (i, h) in hs.iter().enumerate() {
        let ci = &h["pass_at_1_ci"];
        s.push_str(&format!(
            "  {:<w$}  pass@1 {:.3} (95% CI {:.3}–{:.3})  {}{}\n",
            h["label"].as_str().unwrap_or(""),
            h["pass_at_1"].as_f64().unwrap_or(0.0),
            ci[0].as_f64().unwrap_or(0.0),
            ci[1].as_f64().unwrap_or(0.0),
            h["out"].as_str().unwrap_or(""),
            if i == 0 { "  (baseline)" } else { "" }
        ));
    }
    for c in doc["comparisons"].as_array().into_iter().flatten() {
        s.push_str(&comparison_text(c));
    }
    s
}

/// One comparison of the document as text: its delta line, the tasks left out, and the table
/// of tasks that differ (largest gain first).
fn comparison_text(c: &Value) -> String {
    let mut s = format!(
        "\n{} vs {}: ",
        c["other"].as_str().unwrap_or(""),
        c["baseline"].as_str().unwrap_or("")
    );
    match (c["delta"].as_f64(), c["delta_ci"].as_array()) {
        (Some(d), Some(ci)) => s.push_str(&format!(
            "Δ pass@1 {d:+.3} (paired bootstrap 95% CI {:+.3}…{:+.3}, {} tasks{})\n",
            ci[0].as_f64().unwrap_or(0.0),
            ci[1].as_f64().unwrap_or(0.0),
            c["n_paired"],
            if c["significant"].as_bool() == Some(true) {
                ", significant"
            } else {
                ", within noise"
            }
        )),
        _ => s.push_str("no tasks in common\n"),
    }
    let left_out: Vec<&str> = c["excluded_infra"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if !left_out.is_empty() {
        s.push_str(&format!(
            "  left out (no trial of one side could run: infra): {}\n",
            left_out.join(", ")
        ));
    }
    s.push_str(&differing_tasks_table(c));
    s
}

/// The tasks of one comparison whose pass rate differs, as a table sorted by delta (largest
/// gain first), with each difference's Fisher p-value; a line saying so when none differs.
fn differing_tasks_table(c: &Value) -> String {
    let mut rows: Vec<&Value> = c["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["delta"].as_f64().unwrap_or(0.0) != 0.0)
        .collect();
    rows.sort_by(|a, b| {
        b["delta"]
            .as_f64()
            .unwrap_or(0.0)
            .total_cmp(&a["delta"].as_f64().unwrap_or(0.0))
    });
    if rows.is_empty() {
        return "  no task differs\n".to_string();
    }
    let tw = rows
        .iter()
        .filter_map(|t| t["task"].as_str().map(|x| x.chars().count()))
        .max()
        .unwrap_or(4)
        .max(4);
    let mut s = format!(
        "  {:<tw$}  {:>8}  {:>8}  {:>6}  {}\n",
        "task", "baseline", "other", "Δ", "p (Fisher)"
    );
    for t in rows {
        s.push_str(&format!(
            "  {:<tw$}  {:>8}  {:>8}  {:>+6.2}  {:.3}{}\n",
            t["task"].as_str().unwrap_or(""),
            format!("{}/{}", t["baseline_passed"], t["baseline_k"]),
            format!("{}/{}", t["other_passed"], t["other_k"]),
            t["delta"].as_f64().unwrap_or(0.0),
            t["p_value"].as_f64().unwrap_or(1.0),
            if t["within_noise"].as_bool() == Some(true) {
                " (within noise)"
            } else {
                ""
            }
        ));
    }
    s
}

/// `ahe compare EVAL_DIR EVAL_DIR...`: the comparison view over evaluation directories that
/// already exist (`ahe eval --out`, `ahe import harbor --out`), e.g. an ahe harness against
/// another agent's imported Harbor job; no trial is run.
#[derive(clap::Args)]
pub struct CompareArgs {
    /// Evaluation directories; the first is the baseline.
    #[arg(required = true, num_args = 2..)]
    pub dirs: Vec<PathBuf>,
    /// Print the comparison document as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `ahe compare`.
pub fn run(a: CompareArgs) -> Result<(), crate::CliError> {
    use crate::CliError;
    let labels = labels(&a.dirs);
    let mut ev = Vec::new();
    for (dir, label) in a.dirs.iter().zip(labels) {
        let scores = ahe_bench::EvalDir::new(dir).read_scores().map_err(|e| {
            CliError::usage(anyhow::anyhow!("{e:#} (is it an evaluation directory?)"))
        })?;
        ev.push(Evaluated {
            label,
            harness: scores
                .meta
                .harness
                .clone()
                .unwrap_or_else(|| dir.display().to_string()),
            out: dir.clone(),
            scores,
        });
    }
    let ks: BTreeSet<u32> = ev.iter().map(|e| e.scores.k).collect();
    let mut models: Vec<String> = Vec::new();
    for e in &ev {
        let m = e.scores.meta.model.clone();
        let m = m.unwrap_or_else(|| "unknown model".into());
        if !models.contains(&m) {
            models.push(m);
        }
    }
    let model = models.join(" vs ");
    let mut doc = document(&ev, ev[0].scores.k, &model);
    if ks.len() > 1 {
        // Per-task counts and the paired delta stay exact; only the header's k is shared.
        doc["k"] = json!(ks.into_iter().collect::<Vec<_>>());
    }
    if a.json {
        let s = serde_json::to_string_pretty(&doc).map_err(CliError::failed)?;
        println!("{s}");
    } else {
        print!("{}", text(&doc));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_distinct_and_safe() {
        let l = labels(&[
            PathBuf::from("runs/demo@best"),
            PathBuf::from("harness-seed"),
            PathBuf::from("other/harness-seed"),
            PathBuf::from("x y"),
        ]);
        assert_eq!(l, ["demo@best", "harness-seed", "harness-seed-2", "x_y"]);
    }
}
