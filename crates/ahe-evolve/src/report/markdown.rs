//! `report.md`: the same facts as `report.html` as Markdown tables, with the charts as SVG
//! files under `report/` (written by [`super::generate`]).

use std::fmt::Write;

use super::format::{cell_class, cell_text, ci, f3, iter_label, secs, tokens, verdict_class};
use super::model::{
    phase_name, verdict_name, IterationReport, RunReport, EVOLVE_PHASES, ROLES, VERDICTS,
};
use super::{href, trial_page_href};

/// Escapes text for a Markdown table cell or line: HTML specials, pipes, newlines,
/// backticks and emphasis markers (model-written text must not become markup).
pub fn md(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '|' => o.push_str("\\|"),
            '\n' | '\r' => o.push(' '),
            '`' | '*' | '_' | '[' | ']' | '#' | '\\' => {
                o.push('\\');
                o.push(c);
            }
            _ => o.push(c),
        }
    }
    o
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "–".into()
    } else {
        v.iter().map(|s| md(s)).collect::<Vec<_>>().join(", ")
    }
}

fn emoji(class: &str) -> &'static str {
    match class {
        "c-pass" => "🟩",
        "c-partial" => "🟨",
        "c-fail" => "🟥",
        "c-infra" => "⬜",
        "c-running" => "🟦",
        _ => "·",
    }
}

fn verdict_mark(v: &str) -> &'static str {
    match verdict_class(v).as_str() {
        "v-effective" => "✅",
        "v-partially-effective" => "☑️",
        "v-mixed" => "⚠️",
        "v-harmful" => "❌",
        "v-ineffective" => "➖",
        _ => "…",
    }
}

/// Renders `report.md`. Chart images are expected at `report/*.svg`.
pub fn render(run: &RunReport, pages: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# ahe report — {}\n", md(&run.name));
    if let Some(i) = &run.incomplete {
        let _ = writeln!(s, "> **Incomplete run.** {}\n", md(&i.message));
    }
    let _ = writeln!(
        s,
        "- status: **{}**{}\n- model: {}\n- tasks: {} visible + {} held out, k = {}\n- cost: {} · wall time (phases): {}",
        run.status(),
        run.ended.as_ref().map(|r| format!(" ({})", md(r))).unwrap_or_default(),
        md(&run.model),
        run.visible_tasks().len(),
        run.holdout.len(),
        run.info.k,
        run.cost_text(),
        secs(run.wall_sec())
    );
    match &run.best {
        Some(b) => {
            let _ = writeln!(
                s,
                "- best: **iteration {}** (visible pass@1 {}, commit `{}`, tag `best`)",
                b.iteration,
                f3(b.pass_at_1),
                b.commit.chars().take(12).collect::<String>()
            );
        }
        None => s.push_str("- best: none yet\n"),
    }
    s.push_str("\nHTML version with links to every trial: [report.html](report.html)\n\n");

    s.push_str("## pass@1 per iteration\n\n![pass@1 per iteration](report/pass_at_1.svg)\n\n");
    s.push_str("| iteration | pass@1 | 95% CI | held-out | all tasks | Δ (paired 95% CI) | fixed | regressed | verdicts of previous changes | changes | cost | wall |\n");
    s.push_str("|---|--:|---|--:|--:|---|--:|--:|---|--:|--:|--:|\n");
    for it in &run.iterations {
        let e = it.evaluation.as_ref();
        let vc = it.verdict_counts();
        let verdicts: Vec<String> = VERDICTS
            .iter()
            .filter_map(|v| {
                let n = verdict_name(*v);
                vc.get(n).map(|c| format!("{} {n} ×{c}", verdict_mark(n)))
            })
            .collect();
        let delta = e
            .and_then(|e| e.stats.delta.zip(e.stats.delta_ci))
            .map(|(d, c)| format!("{d:+.3} ({:+.3}…{:+.3})", c[0], c[1]))
            .unwrap_or_else(|| "–".into());
        let _ =
            writeln!(
            s,
            "| [{}{}{}](#iteration-{}) | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            iter_label(it),
            if run.is_best(it.iteration) { " ★ best" } else { "" },
            if it.complete { "" } else { " (incomplete)" },
            it.iteration,
            it.visible().map(|v| f3(v.0)).unwrap_or_else(|| "–".into()),
            it.visible().map(|v| ci(v.1)).unwrap_or_else(|| "–".into()),
            it.holdout().map(|v| f3(v.0)).unwrap_or_else(|| "–".into()),
            it.scores.as_ref().map(|x| f3(x.pass_at_1)).unwrap_or_else(|| "–".into()),
            delta,
            e.map(|e| e.fixed.len().to_string()).unwrap_or_else(|| "–".into()),
            e.map(|e| e.regressed.len().to_string()).unwrap_or_else(|| "–".into()),
            if verdicts.is_empty() { "–".into() } else { verdicts.join(", ") },
            it.manifest.as_ref().map(|m| m.changes.len().to_string()).unwrap_or_else(|| "–".into()),
            run.usd(it.cost_usd()),
            secs(it.wall_sec())
        );
    }

    s.push_str("\n## Tasks × iterations\n\n![task × iteration heatmap](report/heatmap.svg)\n\n");
    s.push_str("🟩 all k trials passed · 🟨 some · 🟥 none · ⬜ infra (no trial could run) · 🟦 running (journal only)\n\n");
    let _ = write!(s, "| task |");
    for it in &run.iterations {
        let _ = write!(s, " {} |", iter_label(it));
    }
    s.push_str("\n|---|");
    for _ in &run.iterations {
        s.push_str(":-:|");
    }
    s.push('\n');
    let mut rows: Vec<(&String, bool)> = run
        .visible_tasks()
        .into_iter()
        .map(|t| (t, false))
        .collect();
    rows.extend(run.holdout.iter().map(|t| (t, true)));
    for (task, held) in rows {
        let _ = write!(
            s,
            "| {}{} |",
            md(task),
            if held { " *(held out)*" } else { "" }
        );
        for it in &run.iterations {
            match it.cell(task) {
                Some(c) => {
                    let _ = write!(s, " {} {} |", emoji(cell_class(&c)), cell_text(&c));
                }
                None => s.push_str(" · |"),
            }
        }
        s.push('\n');
    }

    s.push_str("\n## Tokens and cost per role\n\n![tokens per role](report/tokens.svg)\n\n");
    if run.cost_usd() > 0.0 {
        s.push_str("![dollars per role](report/cost.svg)\n\n");
    }
    s.push_str("| iteration |");
    for r in ROLES {
        let _ = write!(s, " {r} |");
    }
    s.push_str(" total |\n|---|");
    for _ in ROLES {
        s.push_str("---|");
    }
    s.push_str("--:|\n");
    for it in &run.iterations {
        let _ = write!(s, "| {} |", iter_label(it));
        for r in ROLES {
            match it.roles.get(r) {
                Some(u) => {
                    let _ = write!(
                        s,
                        " {} in / {} out · {} |",
                        tokens(u.input_tokens),
                        tokens(u.output_tokens),
                        run.usd(u.cost_usd)
                    );
                }
                None => s.push_str(" – |"),
            }
        }
        let _ = writeln!(s, " {} |", run.usd(it.cost_usd()));
    }

    s.push_str(
        "\n## Wall time per phase\n\n![wall time per phase](report/phases.svg)\n\n| iteration |",
    );
    for p in EVOLVE_PHASES {
        let _ = write!(s, " {} |", phase_name(p));
    }
    s.push_str(" total |\n|---|");
    for _ in EVOLVE_PHASES {
        s.push_str("--:|");
    }
    s.push_str("--:|\n");
    for it in &run.iterations {
        let _ = write!(s, "| {} |", iter_label(it));
        for p in EVOLVE_PHASES {
            let v = match it.phases.iter().find(|x| x.phase == phase_name(p)) {
                Some(x) => match (x.secs, x.started) {
                    (Some(v), _) => secs(v),
                    (None, true) => "unfinished".into(),
                    _ => "–".into(),
                },
                None => "".into(),
            };
            let _ = write!(s, " {v} |");
        }
        let _ = writeln!(s, " {} |", secs(it.wall_sec()));
    }

    for it in &run.iterations {
        iteration(&mut s, run, it, pages);
    }
    s
}

fn iteration(s: &mut String, run: &RunReport, it: &IterationReport, pages: bool) {
    let t = it.iteration;
    let _ = writeln!(
        s,
        "\n<a id=\"iteration-{t}\"></a>\n\n## Iteration {t}{}{}\n",
        if it.is_final {
            " — final evaluation"
        } else {
            ""
        },
        if run.is_best(t) { " ★ best" } else { "" }
    );
    if let Some(i) = &it.incomplete {
        let _ = writeln!(s, "> **Incomplete:** {}\n", md(&i.message));
    }
    if let Some((p, c)) = it.visible() {
        let _ = write!(s, "Visible pass@1 **{}** (95% CI {})", f3(p), ci(c));
        if let Some((h, hc)) = it.holdout() {
            let _ = write!(s, " · held-out pass@1 {} (95% CI {})", f3(h), ci(hc));
        }
        if let Some(c) = &it.evaluated_commit {
            let _ = write!(
                s,
                " · evaluated harness `{}`",
                c.chars().take(12).collect::<String>()
            );
        }
        s.push_str("\n\n");
        if let Some(line) = it.suspect_line() {
            let _ = writeln!(s, "> **{}**\n", md(&line));
        }
    }
    let mut links = Vec::new();
    for (label, f) in [
        ("analysis overview", &it.files.overview),
        ("evolve summary", &it.files.summary),
        ("harness diff", &it.files.diff),
    ] {
        if let Some(p) = f {
            links.push(format!("[{label}]({})", href(p)));
        }
    }
    if !links.is_empty() {
        let _ = writeln!(s, "{}\n", links.join(" · "));
    }
    if let Some(e) = &it.evaluation {
        let _ = writeln!(
            s,
            "**Attribution**{}:",
            e.manifest_iteration
                .map(|m| format!(" (changes of iteration {m} judged here)"))
                .unwrap_or_default()
        );
        if let (Some(d), Some(c)) = (e.stats.delta, e.stats.delta_ci) {
            let _ = writeln!(
                s,
                "- Δ pass@1 {d:+.3} (paired 95% CI {:+.3}…{:+.3}{}, {} tasks)",
                c[0],
                c[1],
                if e.stats.delta_significant {
                    ", significant"
                } else {
                    ", within noise"
                },
                e.stats.n_paired
            );
        }
        for (kind, moves) in [
            ("fixed", &e.fixed),
            ("regressed", &e.regressed),
            ("improved", &e.improved),
            ("worsened", &e.worsened),
            ("infra", &e.infra_changes),
        ] {
            if moves.is_empty() {
                continue;
            }
            let items: Vec<String> = moves
                .iter()
                .map(|m| {
                    format!(
                        "{} {}/{} → {}/{}{}",
                        md(&m.task),
                        m.prev_passed,
                        m.prev_k,
                        m.cur_passed,
                        m.cur_k,
                        if m.within_noise {
                            " (within noise)"
                        } else {
                            ""
                        }
                    )
                })
                .collect();
            let _ = writeln!(s, "- {kind}: {}", items.join(", "));
        }
        if !e.unattributed_regressions.is_empty() {
            let items: Vec<String> = e
                .unattributed_regressions
                .iter()
                .map(|m| {
                    if m.matched_changes.is_empty() {
                        md(&m.task)
                    } else {
                        format!("{} (files of {})", md(&m.task), list(&m.matched_changes))
                    }
                })
                .collect();
            let _ = writeln!(s, "- **unattributed regressions**: {}", items.join(", "));
        }
        if e.manifest_iteration.is_some() {
            let p = &e.prediction;
            let r = |v: Option<f64>| v.map(f3).unwrap_or_else(|| "–".into());
            let _ = writeln!(
                s,
                "- predictions: fix precision {} · fix recall {} · risk precision {} · risk recall {}",
                r(p.fix_precision),
                r(p.fix_recall),
                r(p.risk_precision),
                r(p.risk_recall)
            );
        }
        s.push('\n');
    }
    if let Some(m) = &it.manifest {
        let _ = writeln!(
            s,
            "**Changes made in iteration {t}** (judged in iteration {}):\n",
            t + 1
        );
        if m.changes.is_empty() {
            s.push_str("No changes.\n\n");
        } else {
            s.push_str("| change | type | component | description | predicted fixes | risk tasks | verdict | fixed | risk realized |\n|---|---|---|---|---|---|---|---|---|\n");
            for c in &m.changes {
                let out = run.outcome(t, &c.id);
                let verdict = out
                    .map(|o| {
                        let n = verdict_name(o.verdict);
                        format!("{} {n}", verdict_mark(n))
                    })
                    .unwrap_or_else(|| "pending".into());
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    md(&c.id),
                    serde_json::to_value(c.kind)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default(),
                    serde_json::to_value(c.component)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default(),
                    md(&c.description),
                    list(&c.predicted_fixes),
                    list(&c.risk_tasks),
                    verdict,
                    out.map(|o| list(&o.actually_fixed))
                        .unwrap_or_else(|| "–".into()),
                    out.map(|o| list(&o.risk_realized))
                        .unwrap_or_else(|| "–".into()),
                );
            }
            s.push('\n');
        }
    }
    let leaks = super::format::leak_lines(it.manifest.as_ref());
    if !leaks.is_empty() {
        s.push_str("**Leak guard:**\n\n");
        for l in &leaks {
            let _ = writeln!(s, "- {}", md(l));
        }
        s.push('\n');
    }
    if !it.notes.is_empty() {
        s.push_str("**Notes from the journal:**\n\n");
        for n in &it.notes {
            let _ = writeln!(s, "- {}", md(n));
        }
        s.push('\n');
    }
    if !it.trials.is_empty() {
        let failing: Vec<String> = run
            .tasks
            .iter()
            .filter_map(|task| {
                let c = it.cell(task)?;
                (c.passed < c.k || c.status == "infra").then(|| {
                    let a = it
                        .task(task)
                        .and_then(|s| s.trials.iter().find(|x| x.status.as_str() != "pass"))
                        .map(|x| x.attempt)
                        .unwrap_or(1);
                    let detail = it
                        .files
                        .details
                        .get(task)
                        .map(|p| format!(" · [detail]({})", href(p)))
                        .unwrap_or_default();
                    format!(
                        "[{}]({}) {}{}",
                        md(task),
                        if pages {
                            trial_page_href(t, task, a)
                        } else {
                            href(&it.trial_rel(task, a))
                        },
                        cell_text(&c),
                        detail
                    )
                })
            })
            .collect();
        if !failing.is_empty() {
            let _ = writeln!(
                s,
                "Tasks not passing (first failing trial): {}\n",
                failing.join(" · ")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_escaping_neutralises_markup() {
        assert_eq!(
            md("a|b\n<script>`x`*y*"),
            "a\\|b &lt;script&gt;\\`x\\`\\*y\\*"
        );
        assert_eq!(md("[link](http://x)"), "\\[link\\](http://x)");
    }
}
