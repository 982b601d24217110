//! Tests of the `local` provider against the real default model (SmolLM2-135M-Instruct).
//!
//! Without the model file (scripts/fetch-model.sh fetches it) the tests print a note and
//! pass, except with `CI=true`, where a missing model is a failure.
#![cfg(feature = "local-model")]

use std::path::PathBuf;
use std::sync::Arc;

use ahe_model::local::{self, grammar, parse_reply, LocalProvider, Reply};
use ahe_model::{
    build_client, ChatRequest, Message, ModelConfig, ModelError, Provider, Role, ToolChoice,
    ToolProtocol, ToolSpec,
};
use serde_json::{json, Value};

/// The default model file, or `None` (with a note) when it is not there.
fn model_path() -> Option<PathBuf> {
    match local::resolve_model_path(None) {
        Ok(p) => Some(p),
        Err(e) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "the local model is required when CI=true: {e}"
            );
            eprintln!("note: {e}; skipping local model tests");
            None
        }
    }
}

fn config(path: PathBuf) -> ModelConfig {
    ModelConfig {
        provider: "local".into(),
        model: "local".into(),
        path: Some(path),
        context_tokens: Some(4096),
        ..ModelConfig::default()
    }
}

/// The seed harness's tools, plus host tools of the evolve agent (their schemas add optional
/// members, integers, several strings and an argument list that may be empty).
fn seed_tools() -> Vec<ToolSpec> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../harness-seed/tools");
    let mut tools = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    for f in files {
        let t: toml::Value = toml::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        tools.push(ToolSpec {
            name: t["name"].as_str().unwrap().into(),
            description: t["description"].as_str().unwrap().into(),
            input_schema: serde_json::to_value(&t["input_schema"]).unwrap(),
        });
    }
    assert!(tools.iter().any(|t| t.name == "run_shell"));
    let spec = |name: &str, desc: &str, schema: Value| ToolSpec {
        name: name.into(),
        description: desc.into(),
        input_schema: schema,
    };
    tools.push(spec(
        "read_file",
        "Read a file (optionally lines start_line..end_line, 1-based).",
        json!({"type": "object", "required": ["path"], "properties": {
            "path": {"type": "string"}, "start_line": {"type": "integer"},
            "end_line": {"type": "integer"}}}),
    ));
    tools.push(spec(
        "list_files",
        "List a directory (empty path = the roots).",
        json!({"type": "object", "required": [], "properties": {"path": {"type": "string"}}}),
    ));
    tools.push(spec(
        "edit_file",
        "Replace old_text (must occur exactly once) by new_text in a file.",
        json!({"type": "object", "required": ["path", "old_text", "new_text"], "properties": {
            "path": {"type": "string"}, "old_text": {"type": "string"},
            "new_text": {"type": "string"}}}),
    ));
    tools
}

const PROMPTS: [&str; 10] = [
    "List the files in the current directory.",
    "Show the first lines of README.md.",
    "What is in /app/sum.sh? Fix it so it prints the sum of its arguments.",
    "Count the lines containing ERROR in /app/log.txt.",
    "Create /app/hello.txt containing the word hello.",
    "Which port does /app/config.json set?",
    "Find every Python file under /src.",
    "Replace the word foo by bar in notes.md.",
    "Check whether git is installed.",
    "Report what you changed and why.",
];

fn request(tools: Vec<ToolSpec>, protocol: ToolProtocol, task: &str) -> ChatRequest {
    ChatRequest {
        role: Role::CodeAgent,
        messages: vec![
            Message::system("You solve tasks on a Linux machine. Act, do not ask."),
            Message::user(task),
        ],
        tools,
        protocol,
        temperature: Some(0.0),
        max_tokens: Some(80),
        tool_choice: Default::default(),
    }
}

#[test]
fn every_action_under_the_grammar_validates_against_its_tool_schema() {
    let Some(path) = model_path() else { return };
    let provider = LocalProvider::new(&config(path)).unwrap();
    let tools = seed_tools();
    // The seed tool alone on all 10 prompts, each other tool alone on 3 (the grammar then
    // admits only its actions), and all tools offered at once on all 10.
    let mut cases: Vec<(Vec<ToolSpec>, &[&str])> = tools
        .iter()
        .map(|t| {
            let n = if t.name == "run_shell" { 10 } else { 3 };
            (vec![t.clone()], &PROMPTS[..n])
        })
        .collect();
    cases.push((tools.clone(), &PROMPTS[..]));
    let (mut actions, mut cut_off, mut report) = (0, Vec::new(), Vec::new());
    for (offered, prompts) in cases {
        for task in prompts {
            let req = request(offered.clone(), ToolProtocol::Native, task);
            let mut gen = provider.gen_request(&req);
            gen.grammar = Some(grammar::action_grammar(&offered, false));
            let out = provider.engine().generate_blocking(gen).unwrap();
            if out.cut_off {
                // Not an action yet: the token cap stopped it (greedy loops of a tiny model).
                cut_off.push(out.text);
                continue;
            }
            let Reply::Action { tool, args } = parse_reply(&out.text) else {
                panic!("not an action: {:?}", out.text);
            };
            let spec = offered
                .iter()
                .find(|t| t.name == tool)
                .unwrap_or_else(|| panic!("{tool} was not offered: {}", out.text));
            let v = jsonschema::validator_for(&spec.input_schema).unwrap();
            let errors: Vec<String> = v.iter_errors(&args).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{}: {errors:?}", out.text);
            // The text is in the canonical layout, so writing it back reproduces it.
            assert_eq!(grammar::format_action(&tool, &args), out.text.trim());
            actions += 1;
            report.push(format!("{:>12} <- {}", offered.len(), out.text));
        }
    }
    eprintln!("{}\ncut off: {cut_off:#?}", report.join("\n"));
    assert!(
        cut_off.len() * 10 <= actions,
        "more than 1 in 10 replies hit the token cap: {cut_off:#?}"
    );
}

#[test]
fn replies_reach_both_protocols_and_are_deterministic() {
    let Some(path) = model_path() else { return };
    let provider = LocalProvider::new(&config(path)).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tools = seed_tools()[..1].to_vec();
    let native = request(tools.clone(), ToolProtocol::Native, PROMPTS[0]);
    let a = rt.block_on(provider.chat(&native)).unwrap();
    let b = rt.block_on(provider.chat(&native)).unwrap();
    assert_eq!((&a.content, &a.tool_calls), (&b.content, &b.tool_calls));
    // The second, identical request reads everything but the last prompt token from cache.
    assert_eq!(b.usage.cached_input_tokens + 1, b.usage.input_tokens);
    let reply = if a.tool_calls.is_empty() {
        grammar::format_answer(a.content.as_deref().unwrap())
    } else {
        assert_eq!(a.tool_calls[0].name, "run_shell");
        grammar::format_action("run_shell", &a.tool_calls[0].arguments)
    };
    let json = request(tools, ToolProtocol::JsonInText, PROMPTS[0]);
    let j = rt.block_on(provider.chat(&json)).unwrap();
    assert!(j.tool_calls.is_empty());
    assert!(j.content.is_some());
    eprintln!("native: {reply}\njson-in-text: {:?}", j.content);
}

#[test]
fn a_later_turn_reuses_the_cached_prefix() {
    let Some(path) = model_path() else { return };
    let provider = LocalProvider::new(&config(path)).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut req = request(seed_tools()[..1].to_vec(), ToolProtocol::Native, PROMPTS[3]);
    let first = rt.block_on(provider.chat(&req)).unwrap();
    req.messages.push(first.to_message());
    for c in &first.tool_calls {
        req.messages.push(Message::Tool {
            tool_call_id: c.id.clone(),
            name: c.name.clone(),
            content: "3".into(),
        });
    }
    if first.tool_calls.is_empty() {
        req.messages.push(Message::user("Go on."));
    }
    let second = rt.block_on(provider.chat(&req)).unwrap();
    let u = second.usage;
    // Everything up to the first reply was cached; only its tail and the result are new.
    assert!(
        u.cached_input_tokens >= first.usage.input_tokens,
        "{u:?} after {:?}",
        first.usage
    );
    assert!(u.input_tokens - u.cached_input_tokens < 60, "{u:?}");
}

#[test]
fn a_prompt_longer_than_the_context_is_a_context_length_error() {
    let Some(path) = model_path() else { return };
    let mut cfg = config(path);
    cfg.context_tokens = Some(512);
    let provider = LocalProvider::new(&cfg).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let long = "word ".repeat(2000);
    let e = rt
        .block_on(provider.chat(&request(vec![], ToolProtocol::Native, &long)))
        .unwrap_err();
    assert!(matches!(e, ModelError::ContextLength(_)), "{e}");
}

#[test]
fn one_model_serves_concurrent_clients_through_its_queue() {
    let Some(path) = model_path() else { return };
    let cfg = config(path);
    let a = build_client(&cfg).unwrap();
    let b = build_client(&cfg).unwrap();
    let pa = LocalProvider::new(&cfg).unwrap();
    let pb = LocalProvider::new(&cfg).unwrap();
    assert!(
        Arc::ptr_eq(pa.engine(), pb.engine()),
        "one engine per model and settings"
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tools = seed_tools()[..1].to_vec();
    let results = rt.block_on(async {
        let futs = PROMPTS[..4].iter().enumerate().map(|(i, p)| {
            let c = if i % 2 == 0 { a.clone() } else { b.clone() };
            let req = request(tools.clone(), ToolProtocol::Native, p);
            async move { c.chat(&req).await }
        });
        futures::future::join_all(futs).await
    });
    for r in results {
        let r = r.unwrap();
        assert!(r.usage.output_tokens > 0);
    }
}

#[test]
fn a_turn_that_may_not_call_a_tool_is_answered_in_text() {
    let Some(path) = model_path() else { return };
    let provider = LocalProvider::new(&config(path)).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    // The debugger's last turn: its tools stay described, the reply must be its report.
    let mut req = request(seed_tools(), ToolProtocol::Native, PROMPTS[2]);
    req.role = Role::Debugger;
    req.tool_choice = ToolChoice::None;
    let r = rt.block_on(provider.chat(&req)).unwrap();
    assert!(r.tool_calls.is_empty(), "{r:?}");
    let text = r.content.unwrap_or_default();
    assert!(!text.trim().is_empty(), "an empty answer");
    assert!(
        !text.contains("\"tool\""),
        "an action in the answer: {text}"
    );
}

#[test]
fn repeats_of_a_request_are_different_samples_and_a_rerun_reproduces_them() {
    let Some(path) = model_path() else { return };
    let mut cfg = config(path);
    cfg.seed = Some(11);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut req = request(
        vec![],
        ToolProtocol::Native,
        "Write a short poem about the sea.",
    );
    req.temperature = Some(1.0);
    req.max_tokens = Some(24);
    let sample = |p: &LocalProvider| -> Vec<String> {
        (0..3)
            .map(|_| {
                rt.block_on(p.chat(&req))
                    .unwrap()
                    .content
                    .unwrap_or_default()
            })
            .collect()
    };
    // Engines of their own (other tests share the default one, and what its KV cache holds
    // depends on their timing): a rerun is a new process with a cold engine too.
    let fresh = |slots: usize| {
        let mut c = cfg.clone();
        c.kv_slots = Some(slots);
        LocalProvider::new(&c).unwrap()
    };
    // The k trials of a task send identical first requests: each must be its own sample.
    let first = sample(&fresh(2));
    assert!(first[0] != first[1] || first[1] != first[2], "{first:?}");
    // A new provider (a rerun) asks the same requests in the same order: the same replies.
    assert_eq!(first, sample(&fresh(3)));
}
