//! Ablations as generated harnesses: per component type, the evolved harness without that
//! type's changes (`components`), or the base with only them (`add-one`).

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Context;

use super::plan::files;

/// The component types an ablation separates, in report order. The seven of the paper,
/// plus `agent_config` (agent.toml: limits and which tools/middleware are on).
pub const TYPES: [&str; 8] = [
    "system_prompt",
    "tool_descriptions",
    "tool_code",
    "middleware",
    "skills",
    "subagents",
    "memory",
    "agent_config",
];

/// The component type of a harness-relative file: `tools/*.toml` and `tools/*.md` are
/// descriptions, any other file under `tools/` is tool code; None outside the components.
pub fn type_of(rel: &str) -> Option<&'static str> {
    let (first, rest) = rel.split_once('/').unwrap_or((rel, ""));
    Some(match (first, rest) {
        ("system_prompt.md", "") => "system_prompt",
        ("agent.toml", "") => "agent_config",
        ("tools", r) if r.ends_with(".toml") || r.ends_with(".md") => "tool_descriptions",
        ("tools", _) => "tool_code",
        ("middleware", _) => "middleware",
        ("skills", _) => "skills",
        ("subagents", _) => "subagents",
        ("memory", _) => "memory",
        _ => return None,
    })
}

/// The files that differ between `base` and `evolved` (added, changed or removed).
pub fn changed(base: &Path, evolved: &Path) -> anyhow::Result<BTreeSet<String>> {
    let mut all: BTreeSet<String> = files(base)?.into_iter().collect();
    all.extend(files(evolved)?);
    Ok(all
        .into_iter()
        .filter(|f| std::fs::read(base.join(f)).ok() != std::fs::read(evolved.join(f)).ok())
        .collect())
}

/// The component types with at least one changed file, in [`TYPES`] order.
pub fn changed_types(changed: &BTreeSet<String>) -> Vec<&'static str> {
    TYPES
        .into_iter()
        .filter(|t| changed.iter().any(|f| type_of(f) == Some(*t)))
        .collect()
}

/// Writes into `dest` a copy of `start` whose changed files of type `ty` are taken from
/// `from` (deleted where `from` has none).
pub fn generate(
    start: &Path,
    from: &Path,
    changed: &BTreeSet<String>,
    ty: &str,
    dest: &Path,
) -> anyhow::Result<()> {
    let _ = std::fs::remove_dir_all(dest);
    for rel in files(start)? {
        copy(&start.join(&rel), &dest.join(&rel))?;
    }
    for rel in changed.iter().filter(|f| type_of(f) == Some(ty)) {
        let (src, dst) = (from.join(rel), dest.join(rel));
        if src.is_file() {
            copy(&src, &dst)?;
        } else if dst.exists() {
            std::fs::remove_file(&dst).with_context(|| format!("removing {}", dst.display()))?;
        }
    }
    Ok(())
}

fn copy(src: &Path, dst: &Path) -> anyhow::Result<()> {
    if let Some(p) = dst.parent() {
        std::fs::create_dir_all(p)?;
    }
    std::fs::copy(src, dst)
        .with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
    Ok(())
}
