//! Variants per iteration (`[evolve] variants = N > 1`): N evolve agents work at the same
//! time (at most `variants_concurrency`) from the same evidence, each from the same start
//! (the evaluated harness after the automatic rollbacks) in its own working tree
//! (`evolve/variants/v<i>/harness/`, a linked git worktree, removed once it is committed),
//! with its own jail, its own files (`evolve/variants/v<i>/`) and optional steering
//! (`variant_focus`, `templates/variant_focus.md`); each change set passes validation and the
//! leak guard as usual and is committed on its own (tag `iter-NNN-v<i>`, HEAD does not
//! move). A screen minibatch (`screen_tasks`: failing and passing visible tasks, a seeded
//! sample, shrunk to what the iteration's `[attribution] max_extra_share` has left) runs one
//! trial per task of each variant as extra trial set `screen/v<i>`, the sets side by side;
//! the best (clean passes, ties to fewer changes, then the lower number) becomes the
//! iteration's evolve step; the others stay as tags, recorded in `evolve/variants.json`. A
//! finished variant (`evolve/variants/v<i>/result.json`) and every finished screen trial
//! (journaled) are kept by a resumed run; a half-done variant starts again from the start.

use minijinja::context;
use tokio_util::sync::CancellationToken;

use crate::evolve::agent::{EvolveInputs, EvolveOutcome};
use crate::evolve::screen::Screen;
use crate::inputs::spend::trace_spend;
use ahe_rundir::run_dir::IterationDir;
use ahe_rundir::{read_json, write_json};
use ahe_runner::config::EvolveConfig;
use ahe_runner::repo::HarnessRepo;

const FOCUS: &str = include_str!("../../templates/variant_focus.md");

pub use crate::evolve::screen::screen_set;
use ahe_rundir::variants::{Screened, VariantResult, VariantsRecord};

/// The steering text of variant `v` of `n` (`focus` cycled over the variants).
fn focus_text(v: u32, n: u32, focus: &str) -> String {
    ahe_harness::text::render(FOCUS, context! { variant => v, variants => n, focus })
}

/// Copies variant `from`'s files (trace, log, manifest, snapshots, proposals) into the
/// iteration's `evolve/`, replacing what is there.
fn copy_back(it: &IterationDir, from: &std::path::Path) -> anyhow::Result<()> {
    for f in it.evolve_agent_files() {
        let Some(src) = f.file_name().map(|n| from.join(n)) else {
            continue;
        };
        let _ = std::fs::remove_file(&f);
        if src.is_file() {
            std::fs::copy(&src, &f)?;
        }
    }
    Ok(())
}

/// Runs variant `v` from `start` in its own working tree and files (or reads it back when
/// it finished before a resume); a half-done attempt's calls are counted with the new one's.
async fn variant(
    ec: &EvolveConfig,
    main: &HarnessRepo,
    it: &IterationDir,
    base: &EvolveInputs<'_>,
    start: &str,
    v: u32,
) -> anyhow::Result<VariantResult> {
    let dir = it.variant_dir(v);
    let tag = format!("{}-v{v}", ahe_runner::repo::iter_tag(it.number()));
    let tree_dir = it.variant_harness(v);
    let done = it.variant_result(v);
    if let Ok(r) = read_json::<VariantResult>(&done) {
        main.remove_worktree(&tag, &tree_dir)?;
        return Ok(r);
    }
    let focus = match ec.variant_focus.len() {
        0 => String::new(),
        n => ec.variant_focus[(v as usize - 1) % n].clone(),
    };
    // The trace is appended across attempts: what it holds now, a killed attempt spent.
    let (mut usage, mut cost) = trace_spend(&it.variant_trace(v));
    let repo = main.worktree(&tag, &tree_dir, start)?;
    let mut inp = base.clone();
    inp.repo = &repo;
    inp.out = Some(dir.clone());
    let text = focus_text(v, ec.variants, &focus);
    inp.prompt = context! { variant_text => text, ..base.prompt.clone() };
    let out = crate::evolve::agent::evolve(inp).await?;
    usage.add(&out.usage);
    cost += out.cost_usd;
    let tree = repo.snapshot_worktree()?;
    let msg = format!(
        "{tag}: variant {v} ({} change(s))",
        out.manifest.changes.len()
    );
    let commit = repo.commit_tree(&tree, start, &msg)?;
    repo.set_tag(&tag, &commit)?;
    let r = VariantResult {
        variant: v,
        focus,
        commit,
        tag: tag.clone(),
        manifest: out.manifest,
        changed_files: out.changed_files,
        notes: out.notes,
        usage,
        cost_usd: cost,
    };
    write_json(&done, &r)?;
    drop(repo);
    main.remove_worktree(&tag, &tree_dir)?;
    Ok(r)
}

/// The evolve step with `[evolve] variants` agents: the variants (at most
/// `variants_concurrency` at once), the screen, the choice; leaves the chosen variant's
/// harness in the working tree and its files in `evolve/`.
pub async fn evolve_variants(
    s: &Screen<'_>,
    it: &IterationDir,
    base: EvolveInputs<'_>,
    start_tree: &str,
    cancel: CancellationToken,
) -> anyhow::Result<EvolveOutcome> {
    let (ec, repo) = (s.evolve, s.trials.repo);
    let n = ec.variants;
    let start = match repo.tree_of(base.evaluated)? == start_tree {
        true => base.evaluated.to_string(),
        false => repo.commit_tree(start_tree, base.evaluated, "variants: start")?,
    };
    let at_once = ec.variants_concurrency.unwrap_or(n).max(1);
    let sem = tokio::sync::Semaphore::new(at_once as usize);
    let (sem, base_ref, start_ref) = (&sem, &base, start.as_str());
    let runs = (1..=n).map(|v| async move {
        let _permit = sem.acquire().await?;
        variant(ec, repo, it, base_ref, start_ref, v).await
    });
    let results = futures::future::join_all(runs)
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<VariantResult>>>()?;
    let (per_variant, screen_note) = crate::evolve::screen::screen_size(s, it, n as usize);
    let tasks = screen_set(it, base.visible, per_variant);
    let (mut screened, screen_cost) =
        crate::evolve::screen::screen(s.trials, it, results, &tasks, cancel).await?;
    it.record_role_cost("screen", &screen_cost.usage, screen_cost.cost_usd)?;
    let best = (0..screened.len())
        .min_by_key(|&i| {
            let s = &screened[i];
            (
                std::cmp::Reverse(s.passed),
                s.result.changes(),
                s.result.variant,
            )
        })
        .unwrap_or(0);
    screened[best].chosen = true;
    let chosen = screened[best].result.clone();
    repo.reset_worktree(&chosen.commit)?;
    copy_back(it, &it.variant_dir(chosen.variant))?;
    let mut notes = chosen.notes.clone();
    notes.extend(screen_note.clone());
    notes.push(summary(&screened, &tasks));
    let (mut e_usage, mut e_cost) = (ahe_model::Usage::default(), 0.0);
    for s in &screened {
        e_usage.add(&s.result.usage);
        e_cost += s.result.cost_usd;
    }
    let record = VariantsRecord {
        screen_tasks: tasks,
        variants: screened,
        screen_cost_usd: screen_cost.cost_usd,
        screen_cost,
        screen_note,
    };
    write_json(&it.variants_path(), &record)?;
    Ok(EvolveOutcome {
        manifest: chosen.manifest,
        changed_files: chosen.changed_files,
        notes,
        usage: e_usage,
        cost_usd: e_cost,
    })
}

/// The journal note of the screen: each variant's figures, the chosen one, the tags kept.
fn summary(screened: &[Screened], tasks: &[String]) -> String {
    let figures: Vec<String> = screened
        .iter()
        .map(|s| {
            format!(
                "v{}{} {}/{} ({} change(s)){}",
                s.result.variant,
                match s.result.focus.as_str() {
                    "" => String::new(),
                    f => format!(" [{f}]"),
                },
                s.passed,
                s.trials,
                s.result.changes(),
                if s.chosen { " chosen" } else { "" }
            )
        })
        .collect();
    let others: Vec<String> = screened
        .iter()
        .filter(|s| !s.chosen)
        .map(|s| s.result.tag.clone())
        .collect();
    let on = match tasks.is_empty() {
        true => "no task".to_string(),
        false => tasks.join(", "),
    };
    format!(
        "variants: screen on {on} (one trial per task and variant): {}; the others stay as \
         tags {}",
        figures.join(", "),
        others.join(", ")
    )
}
