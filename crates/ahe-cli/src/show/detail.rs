//! `ahe show --task T` and `--trial A`: one task's history across iterations and one
//! trial's turns, laid out from the `--json` documents.

use super::*;

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

pub(super) fn trial_text(doc: &serde_json::Value) -> String {
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
