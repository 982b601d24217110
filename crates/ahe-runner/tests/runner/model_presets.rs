//! Model presets (configs/models/*.toml) used through `extends` in a model section, and the
//! provider configs: each loads, validates and names its prices.

use std::path::{Path, PathBuf};

use ahe_runner::config::{RunConfig, ROLES};

fn configs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs")
}

fn run_config(dir: &Path, body: &str) -> RunConfig {
    let p = dir.join("run.toml");
    std::fs::write(
        &p,
        format!("[benchmark]\npath = \"benchmarks/smoke\"\n{body}"),
    )
    .unwrap();
    RunConfig::load(&p).unwrap_or_else(|e| panic!("{e:#}"))
}

#[test]
fn every_preset_loads_through_extends_with_prices() {
    let d = tempfile::tempdir().unwrap();
    let mut n = 0;
    for e in std::fs::read_dir(configs().join("models")).unwrap() {
        let p = e.unwrap().path();
        let c = run_config(
            d.path(),
            &format!(
                "[models.default]\nextends = {:?}\n",
                p.display().to_string()
            ),
        );
        for r in ROLES {
            let m = c.model(r);
            assert!(!m.prices_unknown(), "{}: no prices", p.display());
            assert!(
                m.price_output_per_mtok > m.price_input_per_mtok,
                "{}",
                p.display()
            );
        }
        n += 1;
    }
    assert!(n >= 10, "{n} presets");
}

#[test]
fn a_section_overrides_its_preset_and_other_providers_stand_alone() {
    let d = tempfile::tempdir().unwrap();
    let models = configs().join("models");
    let body = format!(
        "[models.default]\nextends = {:?}\nreasoning_effort = \"high\"\n\
         [models.evolve]\nextends = {:?}\n[models.debugger]\nmodel = \"gpt-5-mini\"\n",
        models.join("gpt-5.toml").display().to_string(),
        models
            .join("claude-sonnet-4-5-thinking.toml")
            .display()
            .to_string(),
    );
    let c = run_config(d.path(), &body);
    let code = c.model("code_agent");
    assert_eq!(
        (code.model.as_str(), code.reasoning_effort.as_deref()),
        ("gpt-5", Some("high"))
    );
    assert_eq!(code.price_input_per_mtok, 1.25);
    // Same provider: layered over the default.
    let dbg = c.model("debugger");
    assert_eq!(
        (dbg.model.as_str(), dbg.reasoning_effort.as_deref()),
        ("gpt-5-mini", Some("high"))
    );
    // Another provider: the preset alone, none of the openai settings.
    let ev = c.model("evolve");
    assert_eq!(
        (ev.provider.as_str(), ev.thinking_budget_tokens),
        ("anthropic", Some(8000))
    );
    assert!(ev.reasoning_effort.is_none());
    // A missing preset is named with the section.
    let p = d.path().join("bad.toml");
    std::fs::write(
        &p,
        "[benchmark]\npath = \"b\"\n[models.evolve]\nextends = \"models/nope.toml\"\n",
    )
    .unwrap();
    let e = format!("{:#}", RunConfig::load(&p).unwrap_err());
    assert!(
        e.contains("models.evolve.extends") && e.contains("nope.toml"),
        "{e}"
    );
}

#[test]
fn provider_configs_load() {
    for f in ["openai.toml", "anthropic.toml"] {
        let c = RunConfig::load(&configs().join(f)).unwrap_or_else(|e| panic!("{f}: {e:#}"));
        for r in ROLES {
            assert!(!c.model(r).prices_unknown(), "{f} {r}");
        }
    }
    let a = RunConfig::load(&configs().join("anthropic.toml")).unwrap();
    assert!(a.model("code_agent").prompt_cache_on());
    assert_eq!(a.model("code_agent").price_cache_write_per_mtok, Some(3.75));
}
