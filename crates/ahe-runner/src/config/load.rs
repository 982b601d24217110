//! Loading a config file: `extends` chains (cycles refused), model presets, per-role model
//! sections layered over `[models.default]`, and `${VAR}` / `${VAR:-default}` substitution.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};

use super::ROLES;

/// Reads one file, merges it over its `extends` parent, and substitutes env vars.
pub(super) fn load_layered(path: &Path, seen: &mut Vec<PathBuf>) -> anyhow::Result<toml::Table> {
    let canon = path
        .canonicalize()
        .with_context(|| format!("{}: cannot read config", path.display()))?;
    if seen.contains(&canon) {
        bail!("{}: `extends` cycle", path.display());
    }
    seen.push(canon);
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read config", path.display()))?;
    let mut table: toml::Table =
        toml::from_str(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    substitute(&mut table, path)?;
    model_presets(&mut table, path)?;
    let Some(parent) = table.remove("extends") else {
        return Ok(table);
    };
    let parent = parent
        .as_str()
        .ok_or_else(|| anyhow!("{}: extends: must be a file path string", path.display()))?;
    let parent_path = path.parent().unwrap_or(Path::new(".")).join(parent);
    let mut base = load_layered(&parent_path, seen)
        .with_context(|| format!("{}: extends = {parent:?}", path.display()))?;
    merge(&mut base, table);
    Ok(base)
}

/// Replaces each `[models.X]` section that says `extends = "models/NAME.toml"` (a model
/// preset: a flat model table, path relative to this file) by the preset with the
/// section's own keys over it.
pub(super) fn model_presets(table: &mut toml::Table, path: &Path) -> anyhow::Result<()> {
    let Some(toml::Value::Table(models)) = table.get_mut("models") else {
        return Ok(());
    };
    for (role, v) in models.iter_mut() {
        let toml::Value::Table(sec) = v else { continue };
        let Some(ext) = sec.remove("extends") else {
            continue;
        };
        let ext = ext.as_str().ok_or_else(|| {
            anyhow!(
                "{}: models.{role}.extends: must be a file path string",
                path.display()
            )
        })?;
        let p = path.parent().unwrap_or(Path::new(".")).join(ext);
        let text = std::fs::read_to_string(&p).with_context(|| {
            format!(
                "{}: models.{role}.extends = {ext:?}: cannot read the model preset (see configs/models/)",
                path.display()
            )
        })?;
        let mut preset: toml::Table =
            toml::from_str(&text).map_err(|e| anyhow!("{}: {e}", p.display()))?;
        substitute(&mut preset, &p)?;
        merge(&mut preset, std::mem::take(sec));
        *sec = preset;
    }
    Ok(())
}

/// Layers each role section over `models.default`, so an override that only changes
/// `model` keeps the default's provider and prices. A section naming another provider
/// stands alone (one provider's settings mean nothing to another).
pub(super) fn layer_roles(table: &mut toml::Table) {
    let Some(toml::Value::Table(models)) = table.get_mut("models") else {
        return;
    };
    let Some(toml::Value::Table(def)) = models.get("default").cloned() else {
        return;
    };
    for r in ROLES {
        if let Some(toml::Value::Table(role)) = models.get_mut(r) {
            if matches!((role.get("provider"), def.get("provider")), (Some(a), Some(b)) if a != b) {
                continue;
            }
            let mut merged = def.clone();
            merge(&mut merged, std::mem::take(role));
            *role = merged;
        }
    }
}

/// Deep-merges `over` into `base` (tables merge, everything else replaces).
pub(super) fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

pub(super) fn substitute(t: &mut toml::Table, file: &Path) -> anyhow::Result<()> {
    fn walk(v: &mut toml::Value, file: &Path, key: &str) -> anyhow::Result<()> {
        match v {
            toml::Value::String(s) if s.contains("${") => *s = expand(s, file, key)?,
            toml::Value::Table(t) => {
                for (k, v) in t.iter_mut() {
                    walk(
                        v,
                        file,
                        &format!("{key}{}{k}", if key.is_empty() { "" } else { "." }),
                    )?;
                }
            }
            toml::Value::Array(a) => {
                for (i, v) in a.iter_mut().enumerate() {
                    walk(v, file, &format!("{key}[{i}]"))?;
                }
            }
            _ => {}
        }
        Ok(())
    }
    for (k, v) in t.iter_mut() {
        walk(v, file, k)?;
    }
    Ok(())
}

/// Expands `${VAR}` and `${VAR:-default}` in a string.
pub(super) fn expand(s: &str, file: &Path, key: &str) -> anyhow::Result<String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| anyhow!("{}: {key}: unclosed ${{ in {s:?}", file.display()))?;
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        match (std::env::var(name), default) {
            (Ok(v), _) => out.push_str(&v),
            (Err(_), Some(d)) => out.push_str(d),
            (Err(_), None) => bail!(
                "{}: {key}: environment variable {name} is not set (use ${{{name}:-default}} for a fallback)",
                file.display()
            ),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}
