//! `ahe show --task T` and `--trial A`: one task's history across iterations (laid out from
//! the `--json` task document) and one trial's turns (from the trial view its HTML page
//! renders, `ahe_report::view::trial`).

use super::*;
use ahe_report::view::trial::{
    excerpt_lines, one_line_clip, TrialView, TurnView, EXCERPT_LINE_CHARS, TEXT_SUMMARY_CHARS,
};

/// One task's history as text: a row per iteration (result, status, move, trials, the
/// predictions about it), and with `only` (one iteration) a row per trial of it.
pub(super) fn task_text(run: &RunReport, doc: &serde_json::Value, only: Option<u32>) -> String {
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
    let hist = doc["history"].as_array().cloned().unwrap_or_default();
    let rows: Vec<Vec<String>> = hist.iter().map(|h| history_row(run, h)).collect();
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
        s.push_str(&trials_table(h));
        s.push_str(&format!(
            "turns of one trial: ahe show {} --iteration {t} --task {task} --trial N\n",
            run.dir.display()
        ));
    }
    s
}

/// The row of one iteration in a task's history (`h`, an entry of the task document's
/// `history`).
fn history_row(run: &RunReport, h: &serde_json::Value) -> Vec<String> {
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
}

/// The table of one iteration's trials of a task: attempt, status, reward, turns, tokens,
/// time (`–` where unknown).
fn trials_table(h: &serde_json::Value) -> String {
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
    table(
        &["trial", "status", "reward", "turns", "tokens", "time"],
        &rows,
        &[2, 3, 4, 5],
    )
}

/// At most `n` lines of `text` (control characters made visible first), each cut to
/// [`EXCERPT_LINE_CHARS`] characters, indented.
fn excerpt(text: &str, n: usize, indent: &str) -> String {
    let (lines, more) = excerpt_lines(&clean(text), n, EXCERPT_LINE_CHARS);
    let mut s = String::new();
    for l in lines {
        s.push_str(&format!("{indent}{l}\n"));
    }
    if more > 0 {
        s.push_str(&format!("{indent}… {more} more lines\n"));
    }
    s
}

/// One trial's view (`ahe_report::view::trial::TrialView`, the one its HTML page renders)
/// as text: its result line, files, suspect signs and errors, the task, then every turn.
pub(super) fn trial_text(v: &TrialView, iteration: u32, dir: &str) -> String {
    // The reward as `--json` writes it (`1.0`), `–` when there is none.
    let reward = v
        .reward
        .and_then(serde_json::Number::from_f64)
        .map(|n| n.to_string())
        .unwrap_or_else(|| "–".into());
    let mut s = format!(
        "{} #{} · iteration {iteration} · {} · reward {reward} · agent {} · trace {} · {} turns · {} · {} · {}\n",
        v.task,
        v.attempt,
        v.status,
        v.agent_end.as_deref().unwrap_or("–"),
        v.trace_state,
        v.turns.len(),
        v.tokens,
        v.cost,
        v.duration
    );
    s.push_str(&format!("files: {dir}/\n"));
    for (turn, reason) in &v.suspect {
        let turn = turn.map(|t| format!(" turn {t}")).unwrap_or_default();
        s.push_str(&format!("SUSPECT{turn}: {}\n", clean(reason)));
    }
    for (turn, _, kind, message) in &v.errors {
        s.push_str(&format!("ERROR [{kind}] turn {turn}: {}\n", clean(message)));
    }
    s.push_str("\ntask:\n");
    s.push_str(&excerpt(&v.user, 6, "  "));
    for t in &v.turns {
        s.push_str(&turn_text(t));
    }
    s
}

/// One turn of a trial as text: its head, the answer, each call with its observation, the
/// middleware decisions and runtime messages.
fn turn_text(t: &TurnView) -> String {
    let mut s = format!("\nturn {} ({}) · {}\n", t.turn, t.agent, t.tokens);
    if let Some(c) = &t.content {
        s.push_str(&excerpt(c, 10, "  "));
    }
    for c in &t.calls {
        s.push_str(&format!(
            "  → {} {}{}\n",
            c.name,
            one_line_clip(&clean(&c.one_line), TEXT_SUMMARY_CHARS),
            match (c.exit_code, c.reported_ok) {
                (Some(x), _) => format!("  [exit {x}]"),
                (None, false) => "  [failed]".into(),
                _ => String::new(),
            }
        ));
        if let Some(e) = &c.error {
            s.push_str(&format!("    ERROR: {}\n", clean(e)));
        }
        if let Some(o) = &c.output {
            s.push_str(&excerpt(o, 8, "    │ "));
        }
    }
    for (hook, name, decision) in &t.middleware {
        s.push_str(&format!("  middleware {name} at {hook}: {decision}\n"));
    }
    for f in &t.feedback {
        s.push_str(&format!("  runtime: {}\n", clean(f)));
    }
    s
}
