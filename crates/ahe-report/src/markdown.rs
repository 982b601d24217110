//! `report.md`: the same facts as `report.html` as Markdown tables, with the charts as SVG
//! files under `report/` (written by [`super::generate`]).

use std::fmt::Write;

use super::format::{cell_class, cell_text, ci, f3, iter_label, secs, tokens, verdict_class};
use super::href;
use super::model::{phase_name, verdict_name, RunReport, EVOLVE_PHASES, VERDICTS};
use super::view::{iter_view, IterView};

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
    let closing = run.closing();
    if !closing.is_empty() {
        s.push_str("\n## Is best better than the seed?\n\n");
        for l in closing {
            let _ = writeln!(s, "- {}", md(&l));
        }
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
    let roles = run.roles();
    s.push_str("| iteration |");
    for r in &roles {
        let _ = write!(s, " {r} |");
    }
    s.push_str(" total |\n|---|");
    for _ in &roles {
        s.push_str("---|");
    }
    s.push_str("--:|\n");
    for it in &run.iterations {
        let _ = write!(s, "| {} |", iter_label(it));
        for r in &roles {
            match it.roles.get(*r) {
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
        iteration(&mut s, &iter_view(run, it, pages));
    }
    s
}

fn iteration(s: &mut String, v: &IterView) {
    let t = v.iteration;
    let _ = writeln!(
        s,
        "\n<a id=\"iteration-{t}\"></a>\n\n## Iteration {t}{}{}\n",
        if v.is_final {
            " — final evaluation"
        } else {
            ""
        },
        if v.best { " ★ best" } else { "" }
    );
    if let Some(i) = &v.incomplete {
        let _ = writeln!(s, "> **Incomplete:** {}\n", md(i));
    }
    if let Some((p, c)) = &v.visible {
        let _ = write!(s, "Visible pass@1 **{p}** (95% CI {c})");
        if let Some((h, hc)) = &v.holdout_score {
            let _ = write!(s, " · held-out pass@1 {h} (95% CI {hc})");
        }
        if !v.commit.is_empty() {
            let _ = write!(s, " · evaluated harness `{}`", v.commit);
        }
        s.push_str("\n\n");
        if let Some(line) = &v.suspect {
            let _ = writeln!(s, "> **{}**\n", md(line));
        }
    }
    let links: Vec<String> = v
        .files
        .iter()
        .map(|(label, p)| format!("[{label}]({})", href(p)))
        .collect();
    if !links.is_empty() {
        let _ = writeln!(s, "{}\n", links.join(" · "));
    }
    if let Some(a) = &v.attribution {
        let _ = writeln!(
            s,
            "**Attribution**{}:",
            a.manifest_iteration
                .map(|m| format!(" (changes of iteration {m} judged here)"))
                .unwrap_or_default()
        );
        if let Some(d) = &a.delta_view {
            let _ = writeln!(
                s,
                "- Δ pass@1 {} (paired 95% CI {}…{}{}, {} tasks)",
                d.value,
                d.lo,
                d.hi,
                if d.significant {
                    ", significant"
                } else {
                    ", within noise"
                },
                d.n_paired
            );
        }
        for (kind, moves) in &a.moves {
            if moves.is_empty() {
                continue;
            }
            let items: Vec<String> = moves
                .iter()
                .map(|m| {
                    let noise = if m.within_noise {
                        " (within noise)"
                    } else {
                        ""
                    };
                    format!("{} {} → {}{noise}", md(&m.task), m.from, m.to)
                })
                .collect();
            let _ = writeln!(s, "- {kind}: {}", items.join(", "));
        }
        if !a.unattributed.is_empty() {
            let items: Vec<String> = a
                .unattributed
                .iter()
                .map(|(task, changes)| {
                    if changes.is_empty() {
                        md(task)
                    } else {
                        format!("{} (files of {})", md(task), md(changes))
                    }
                })
                .collect();
            let _ = writeln!(s, "- **unattributed regressions**: {}", items.join(", "));
        }
        if a.manifest_iteration.is_some() {
            let p = &a.precision;
            let _ = writeln!(
                s,
                "- predictions: fix precision {} · fix recall {} · risk precision {} · risk recall {}",
                p.fix_precision, p.fix_recall, p.risk_precision, p.risk_recall
            );
        }
        for line in &a.evidence {
            let _ = writeln!(s, "- {line}");
        }
        s.push('\n');
    }
    if !v.manifest_missing && !v.is_final {
        let _ = writeln!(
            s,
            "**Changes made in iteration {t}** (judged in iteration {}):\n",
            t + 1
        );
        if v.changes.is_empty() {
            s.push_str("No changes.\n\n");
        } else {
            s.push_str("| change | type | component | description | predicted fixes | risk tasks | verdict | fixed | risk realized |\n|---|---|---|---|---|---|---|---|---|\n");
            for c in &v.changes {
                let (verdict, fixed, realized) = if c.judged {
                    (
                        format!("{} {}", verdict_mark(&c.verdict), c.verdict),
                        list(&c.actually_fixed),
                        list(&c.risk_realized),
                    )
                } else {
                    ("pending".into(), "–".into(), "–".into())
                };
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {verdict} | {fixed} | {realized} |",
                    md(&c.id),
                    c.kind,
                    c.component,
                    md(&c.description),
                    list(&c.predicted_fixes),
                    list(&c.risk_tasks),
                );
            }
            s.push('\n');
        }
    }
    if let Some(vv) = &v.variants {
        s.push_str("**Variants of the evolve step:**\n\n");
        s.push_str("| variant | focus | changes | screen passes | outcome | evolve tokens · $ | screen tokens · $ |\n|---|---|---|---|---|---|---|\n");
        for r in &vv.rows {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} |",
                r.variant,
                md(&r.focus),
                r.changes,
                r.screen,
                r.outcome,
                r.evolve_cost,
                r.screen_cost
            );
        }
        let _ = writeln!(s, "\n{}\n", md(&vv.screen));
        if let Some(n) = &vv.note {
            let _ = writeln!(s, "{}\n", md(n));
        }
    }
    if !v.leaks.is_empty() {
        s.push_str("**Leak guard:**\n\n");
        for l in &v.leaks {
            let _ = writeln!(s, "- {}", md(l));
        }
        s.push('\n');
    }
    if !v.notes.is_empty() {
        s.push_str("**Notes from the journal:**\n\n");
        for (n, _) in &v.notes {
            let _ = writeln!(s, "- {}", md(n));
        }
        s.push('\n');
    }
    let failing: Vec<String> = v
        .tasks
        .iter()
        .filter_map(|r| {
            let (_, link) = r.first_failing.as_ref()?;
            let detail = r
                .detail
                .as_ref()
                .map(|h| format!(" · [detail]({h})"))
                .unwrap_or_default();
            Some(format!("[{}]({link}) {}{detail}", md(&r.task), r.text))
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
