//! `ahe evolve` over the strict API stand-ins, one run per API: chat completions with a
//! reasoning model, the Responses API, Anthropic with prompt caching and extended thinking.
//! Every role talks to its own stand-in (the scripted smoke-mock answers); each run
//! completes 2 iterations (plus the final evaluation) and scores.json records per-role
//! cached and reasoning tokens; every request the stand-ins saw was accepted.

use std::path::{Path, PathBuf};
use std::process::Command;

use ahe_model::mock::MockProvider;
use ahe_model::{ModelConfig, Role};
use ahe_testsupport::{StandIn, StandInOptions};
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn script_mock() -> MockProvider {
    let path = root().join("configs/smoke-mock.script.toml");
    let cfg = ModelConfig::from_spec(&format!("mock:script={}", path.display())).unwrap();
    MockProvider::from_config(&cfg).unwrap()
}

/// One stand-in per role, answering as the smoke-mock script does for that role.
fn servers() -> Vec<(Role, StandIn)> {
    [Role::CodeAgent, Role::Debugger, Role::Evolve]
        .into_iter()
        .map(|role| {
            let opts = StandInOptions {
                role,
                api_key: Some("sk-frontier-test-key".into()),
                ..StandInOptions::default()
            };
            (role, StandIn::with_mock(opts, script_mock()))
        })
        .collect()
}

/// The `[models.<role>]` sections of a run config for `api`.
fn model_sections(api: &str, servers: &[(Role, StandIn)]) -> String {
    let mut s = String::new();
    for (role, srv) in servers {
        let section = match api {
            "chat" => format!(
                "provider = \"openai\"\nmodel = \"gpt-5-mini\"\nbase_url = \"{}\"\n\
                 reasoning_effort = \"low\"\nmax_tokens = 8000\n\
                 price_input_per_mtok = 0.25\nprice_cached_input_per_mtok = 0.025\n\
                 price_output_per_mtok = 2.0\n",
                srv.openai_base_url()
            ),
            "responses" => format!(
                "provider = \"openai\"\napi = \"responses\"\nmodel = \"gpt-5\"\nbase_url = \"{}\"\n\
                 reasoning_effort = \"medium\"\nmax_tokens = 8000\n\
                 price_input_per_mtok = 1.25\nprice_cached_input_per_mtok = 0.125\n\
                 price_output_per_mtok = 10.0\n",
                srv.openai_base_url()
            ),
            _ => format!(
                "provider = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\nbase_url = \"{}\"\n\
                 max_tokens = 16000\nthinking_budget_tokens = 2048\ntemperature = 0.3\n\
                 price_input_per_mtok = 3.0\nprice_output_per_mtok = 15.0\n",
                srv.anthropic_base_url()
            ),
        };
        s.push_str(&format!(
            "[models.{}]\napi_key_env = \"AHE_T_FRONTIER_KEY\"\n{section}\n",
            role.as_str()
        ));
    }
    s
}

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), &to).unwrap();
        }
    }
}

/// The smoke benchmark with a long background section in every instruction, so that the
/// code agent's and the debugger's prompts pass the 1024-token minimum of both caches, as
/// Terminal-Bench instructions and traces do.
fn long_smoke(dir: &Path) -> PathBuf {
    let out = dir.join("smoke-long");
    copy_dir(&root().join("benchmarks/smoke"), &out);
    let para = "Background for the operator: the machine is a shared build host; keep every \
                change inside the working directory, prefer small reversible steps, and read \
                the files you are about to change before changing them. Logs rotate daily \
                and older copies are compressed; configuration lives beside the code. ";
    let background = format!("\n\n## Background\n\n{}\n", para.repeat(24));
    for e in std::fs::read_dir(&out).unwrap() {
        let p = e.unwrap().path().join("instruction.md");
        if p.is_file() {
            let text = std::fs::read_to_string(&p).unwrap();
            std::fs::write(&p, format!("{text}{background}")).unwrap();
        }
    }
    out
}

fn evolve_over(api: &str) {
    let servers = servers();
    let d = tempfile::tempdir().unwrap();
    let bench = long_smoke(d.path());
    let cfg = d.path().join(format!("{api}.toml"));
    let base = root().join("configs/base.toml");
    std::fs::write(
        &cfg,
        format!(
            "extends = {:?}\nk = 2\niterations = 2\nharness = {:?}\n\
             [benchmark]\npath = {:?}\n[sandbox]\nbackend = \"local\"\nconcurrency = 4\n\
             [holdout]\ntasks = [\"config-port\"]\n[evolve]\nrollback = \"auto\"\n{}",
            base.display().to_string(),
            root().join("harness-seed").display().to_string(),
            bench.display().to_string(),
            model_sections(api, &servers)
        ),
    )
    .unwrap();
    let runs = d.path().join("runs");
    let o = Command::new(env!("CARGO_BIN_EXE_ahe"))
        .args(["evolve", "--config", cfg.to_str().unwrap(), "--name", api])
        .arg("--runs-dir")
        .arg(&runs)
        .current_dir(root())
        .env("AHE_T_FRONTIER_KEY", "sk-frontier-test-key")
        .output()
        .unwrap();
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    // Every request was accepted by the strict stand-ins.
    for (role, srv) in &servers {
        let x = srv.exchanges();
        assert!(!x.is_empty(), "{api}: no calls for {}", role.as_str());
        for e in &x {
            assert_eq!(
                e.status,
                200,
                "{api} {}: {} — {}",
                role.as_str(),
                e.reply,
                out
            );
        }
    }
    assert_eq!(o.status.code(), Some(0), "{api}: {out}");
    let run = runs.join(api);
    for t in 1..=3 {
        let p = run.join(format!("iterations/{t:03}/scores.json"));
        assert!(p.is_file(), "{api}: {} missing", p.display());
    }
    // The first iteration ran every role; its per-role usage shows reasoning and caching.
    let s: Value = serde_json::from_str(
        &std::fs::read_to_string(run.join("iterations/001/scores.json")).unwrap(),
    )
    .unwrap();
    let roles = &s["meta"]["roles"];
    let n = |r: &str, k: &str| roles[r][k].as_u64().unwrap_or(0);
    for r in ["code_agent", "debugger", "evolve"] {
        assert!(n(r, "reasoning_tokens") > 0, "{api} {r}: {roles}");
        assert!(n(r, "input_tokens") > 0, "{api} {r}: {roles}");
        for k in ["cached_input_tokens", "cache_write_input_tokens"] {
            assert!(roles[r][k].is_u64(), "{api} {r} {k}: {roles}");
        }
    }
    // Every role's later turns read the conversation so far from the provider's cache.
    for r in ["code_agent", "debugger", "evolve"] {
        assert!(n(r, "cached_input_tokens") > 0, "{api} {r}: {roles}");
        if api == "anthropic" {
            assert!(n(r, "cache_write_input_tokens") > 0, "{api} {r}: {roles}");
        }
    }
    eprintln!("{api}: scores.json meta.roles of iteration 1: {roles}");
    // The key reached the stand-ins only in headers, never the run directory.
    let hits = Command::new("grep")
        .args(["-rl", "sk-frontier-test-key"])
        .arg(&run)
        .output()
        .unwrap();
    assert!(
        hits.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&hits.stdout)
    );
}

#[test]
fn evolve_over_strict_chat_completions_with_a_reasoning_model() {
    evolve_over("chat");
}

#[test]
fn evolve_over_strict_responses_api() {
    evolve_over("responses");
}

#[test]
fn evolve_over_strict_anthropic_with_caching_and_thinking() {
    evolve_over("anthropic");
}
