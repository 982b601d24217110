//! `ahe show runs/NAME [--iteration N] [--task T] [--trial A] [--json]`: terminal tables of
//! a run (summary, one iteration, one task's history, one trial's turns). With `--json` it
//! prints one document whose shape is documented in `ahe_evolve::report::json`.

use std::path::PathBuf;

use ahe_evolve::report::format::{f3, iter_label, secs, tokens, usd};
use ahe_evolve::report::json;
use ahe_evolve::report::model::{IterationReport, RunReport};
use ahe_evolve::report::view::{iter_view, summary_row};
use clap::Args;

use crate::CliError;

/// Arguments of `ahe show`.
#[derive(Args)]
pub struct ShowArgs {
    /// Run directory (runs/NAME).
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
        (Some(t), Some(task), Some(attempt)) => {
            run.iteration(t).ok_or_else(|| missing_iter(t))?;
            let doc = json::trial_doc(&run, t, task, attempt).map_err(CliError::usage)?;
            let text = (!a.json).then(|| trial_text(&doc));
            (doc, text)
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
        _ => "?",
    }
}

fn run_text(run: &RunReport) -> String {
    let mut s = format!(
        "run {} — {}{} · model {} · {} visible + {} held-out tasks · k={}\n",
        run.name,
        run.status(),
        run.ended
            .as_ref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default(),
        if run.model.is_empty() {
            "?"
        } else {
            &run.model
        },
        run.visible_tasks().len(),
        run.holdout.len(),
        run.info.k
    );
    if let Some(i) = &run.incomplete {
        s.push_str(&format!("incomplete: {}\n", i.message));
    }
    match &run.best {
        Some(b) => s.push_str(&format!(
            "best: iteration {} · visible pass@1 {} · commit {}\n",
            b.iteration,
            f3(b.pass_at_1),
            b.commit.chars().take(12).collect::<String>()
        )),
        None => s.push_str("best: none yet\n"),
    }
    let rows: Vec<Vec<String>> = run
        .iterations
        .iter()
        .map(|it| {
            let r = summary_row(run, it);
            let dash = |v: String| if v.is_empty() { "–".to_string() } else { v };
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
                r.pass,
                dash(r.pass_ci),
                r.holdout,
                if r.delta_significant {
                    format!("{}*", r.delta)
                } else {
                    r.delta
                },
                r.fixed,
                r.regressed,
                dash(verdicts.join(" ")),
                r.changes,
                r.cost,
                r.wall,
            ]
        })
        .collect();
    s.push_str(&table(
        &[
            "iter", "pass@1", "95% CI", "held-out", "Δ", "fixed", "regr", "verdicts", "changes",
            "cost", "wall",
        ],
        &rows,
        &[1, 3, 4, 5, 6, 8, 9, 10],
    ));
    s.push_str(&format!(
        "total: {} · {} wall · verdicts of the previous iteration's changes: E effective, P partially, I ineffective, M mixed, H harmful · * Δ interval excludes 0\n",
        run.cost_text(),
        secs(run.wall_sec())
    ));
    s
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "–".into()
    } else {
        v.join(", ")
    }
}

fn iteration_text(run: &RunReport, it: &IterationReport) -> String {
    let v = iter_view(run, it, false);
    let t = v.iteration;
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
    s.push('\n');
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
    s.push_str(&table(
        &["task", "result", "status", "move", "trials"],
        &rows,
        &[1],
    ));
    if let Some(a) = &v.attribution {
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
    }
    if !v.manifest_missing && !v.is_final {
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

fn task_text(run: &RunReport, doc: &serde_json::Value, only: Option<u32>) -> String {
    let task = doc["task"].as_str().unwrap_or("");
    let mut s = format!(
        "task {task}{}{}\n",
        if doc["holdout"].as_bool() == Some(true) {
            " (held out)"
        } else {
            ""
        },
        only.map(|t| format!(" · iteration {t}"))
            .unwrap_or_default()
    );
    let strs = |v: &serde_json::Value| -> String {
        let l: Vec<String> = v
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        list(&l)
    };
    let hist = doc["history"].as_array().cloned().unwrap_or_default();
    let rows: Vec<Vec<String>> = hist
        .iter()
        .map(|h| {
            let trials: Vec<String> = h["trials"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|x| x["status"].as_str().unwrap_or("?").to_string())
                        .collect()
                })
                .unwrap_or_default();
            let t = h["iteration"].as_u64().unwrap_or(0) as u32;
            vec![
                run.iteration(t)
                    .map(iter_label)
                    .unwrap_or_else(|| t.to_string()),
                format!("{}/{}", h["passed"], h["k"]),
                h["status"].as_str().unwrap_or("").to_string(),
                h["move"].as_str().unwrap_or("").to_string(),
                trials.join(" "),
                strs(&h["predicted_fix_by"]),
                strs(&h["risk_of"]),
                h["detail"].as_str().unwrap_or("").to_string(),
            ]
        })
        .collect();
    s.push_str(&table(
        &[
            "iter",
            "result",
            "status",
            "move",
            "trials",
            "predicted fix by",
            "risk of",
            "detail",
        ],
        &rows,
        &[1],
    ));
    if let (Some(t), Some(h)) = (only, hist.first()) {
        s.push('\n');
        let rows: Vec<Vec<String>> = h["trials"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| {
                        vec![
                            format!("#{}", x["attempt"]),
                            x["status"].as_str().unwrap_or("").to_string(),
                            x["reward"]
                                .as_f64()
                                .map(|r| r.to_string())
                                .unwrap_or_else(|| "–".into()),
                            x["turns"]
                                .as_u64()
                                .map(|r| r.to_string())
                                .unwrap_or_else(|| "–".into()),
                            x["tokens"]
                                .as_u64()
                                .map(tokens)
                                .unwrap_or_else(|| "–".into()),
                            x["duration_sec"]
                                .as_f64()
                                .map(secs)
                                .unwrap_or_else(|| "–".into()),
                        ]
                    })
                    .collect()
            })
            .unwrap_or_default();
        s.push_str(&table(
            &["trial", "status", "reward", "turns", "tokens", "time"],
            &rows,
            &[2, 3, 4, 5],
        ));
        s.push_str(&format!(
            "turns of one trial: ahe show {} --iteration {t} --task {task} --trial N\n",
            run.dir.display()
        ));
    }
    s
}

/// At most `n` lines of `text`, each cut to 160 characters, indented.
fn excerpt(text: &str, n: usize, indent: &str) -> String {
    let text = clean(text);
    let lines: Vec<&str> = text.lines().collect();
    let mut s = String::new();
    for l in lines.iter().take(n) {
        let cut: String = l.chars().take(160).collect();
        s.push_str(indent);
        s.push_str(&cut);
        if l.chars().count() > 160 {
            s.push('…');
        }
        s.push('\n');
    }
    if lines.len() > n {
        s.push_str(&format!("{indent}… {} more lines\n", lines.len() - n));
    }
    s
}

fn trial_text(doc: &serde_json::Value) -> String {
    let g = |k: &str| -> String {
        match &doc[k] {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Null => "–".into(),
            v => v.to_string(),
        }
    };
    let u = &doc["usage"];
    let mut s = format!(
        "{} #{} · iteration {} · {} · reward {} · agent {} · trace {} · {} turns · {} in / {} out · {} · {}\n",
        g("task"),
        g("attempt"),
        g("iteration"),
        g("status"),
        g("reward"),
        g("agent_end"),
        g("trace"),
        doc["turns"].as_array().map(|a| a.len()).unwrap_or(0),
        tokens(u["input_tokens"].as_u64().unwrap_or(0)),
        tokens(u["output_tokens"].as_u64().unwrap_or(0)),
        usd(doc["cost_usd"].as_f64().unwrap_or(0.0)),
        secs(doc["duration_ms"].as_f64().unwrap_or(0.0) / 1000.0)
    );
    s.push_str(&format!("files: {}/\n", g("dir")));
    for r in doc["suspect"].as_array().into_iter().flatten() {
        let turn = r["turn"]
            .as_u64()
            .map(|t| format!(" turn {t}"))
            .unwrap_or_default();
        s.push_str(&format!(
            "SUSPECT{turn}: {}\n",
            clean(r["reason"].as_str().unwrap_or(""))
        ));
    }
    for e in doc["errors"].as_array().into_iter().flatten() {
        s.push_str(&format!(
            "ERROR [{}] turn {}: {}\n",
            e["kind"].as_str().unwrap_or(""),
            e["turn"],
            clean(e["message"].as_str().unwrap_or(""))
        ));
    }
    s.push_str("\ntask:\n");
    s.push_str(&excerpt(doc["user"].as_str().unwrap_or(""), 6, "  "));
    for t in doc["turns"].as_array().into_iter().flatten() {
        let tu = &t["usage"];
        s.push_str(&format!(
            "\nturn {} ({}) · {} in / {} out\n",
            t["turn"],
            t["agent"].as_str().unwrap_or(""),
            tokens(tu["input_tokens"].as_u64().unwrap_or(0)),
            tokens(tu["output_tokens"].as_u64().unwrap_or(0))
        ));
        if let Some(c) = t["content"].as_str().filter(|c| !c.is_empty()) {
            s.push_str(&excerpt(c, 10, "  "));
        }
        for c in t["tool_calls"].as_array().into_iter().flatten() {
            let args = match &c["args"] {
                serde_json::Value::Object(m) if m.len() == 1 => m
                    .values()
                    .next()
                    .map(|v| {
                        v.as_str()
                            .map(String::from)
                            .unwrap_or_else(|| v.to_string())
                    })
                    .unwrap_or_default(),
                v => v.to_string(),
            };
            let first: String = clean(&args)
                .replace('\n', " ⏎ ")
                .chars()
                .take(140)
                .collect();
            s.push_str(&format!(
                "  → {} {}{}\n",
                c["name"].as_str().unwrap_or(""),
                first,
                match (c["exit_code"].as_i64(), c["ok"].as_bool()) {
                    (Some(x), _) => format!("  [exit {x}]"),
                    (None, Some(false)) => "  [failed]".into(),
                    _ => String::new(),
                }
            ));
            if let Some(e) = c["error"].as_str() {
                s.push_str(&format!("    ERROR: {}\n", clean(e)));
            }
            if let Some(o) = c["output"].as_str() {
                s.push_str(&excerpt(o, 8, "    │ "));
            }
        }
        for m in t["middleware"].as_array().into_iter().flatten() {
            s.push_str(&format!(
                "  middleware {} at {}: {}\n",
                m["name"].as_str().unwrap_or(""),
                m["hook"].as_str().unwrap_or(""),
                m["decision"]
            ));
        }
        for f in t["feedback"].as_array().into_iter().flatten() {
            s.push_str(&format!("  runtime: {}\n", clean(f.as_str().unwrap_or(""))));
        }
    }
    s
}
