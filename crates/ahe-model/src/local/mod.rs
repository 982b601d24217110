//! The `local` provider: a GGUF model run in-process by llama.cpp (cargo feature
//! `local-model`), for models without native tool calling.
//!
//! Tools are offered in the prompt (the caller's JSON-in-text protocol section, or this
//! provider's own `templates/local_protocol.md` for the native protocol) and every reply is
//! sampled under a grammar ([`grammar::action_grammar`]) that admits only a valid JSON
//! action for one of the offered tools, or the final answer `{"answer": "..."}`. Actions
//! come back in the form the caller's protocol expects: `tool_calls` for the native
//! protocol, the action's JSON text for the JSON-in-text protocol; a final answer comes back
//! as plain text with no tool call. One model instance per file serves all clients of a
//! process through a queue (see `engine`), and each conversation reuses the KV cache of
//! the prefix it shares with an earlier request.

pub mod grammar;
#[cfg(feature = "local-model")]
mod repeat;

#[cfg(feature = "local-model")]
mod engine;
#[cfg(feature = "local-model")]
mod provider;

use std::path::{Path, PathBuf};

use minijinja::{context, Environment};
use serde_json::Value;
use sha2::{Digest, Sha256};

pub use grammar::{format_action, format_answer, format_value, parse_reply, Reply};

use crate::config::ModelConfig;
use crate::types::{
    ChatRequest, ChatResponse, Message, Role, ToolCall, ToolChoice, ToolProtocol, ToolSpec, Usage,
};

#[cfg(feature = "local-model")]
pub use engine::{Engine, GenOutput, GenRequest};
#[cfg(feature = "local-model")]
pub use provider::LocalProvider;

const PROTOCOL: &str = include_str!("../../templates/local_protocol.md");
const OBSERVATION: &str = include_str!("../../templates/local_observation.md");

/// File name of the default model (fetched by `scripts/fetch-model.sh`).
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Whether this build can run local models (cargo feature `local-model`).
pub const AVAILABLE: bool = cfg!(feature = "local-model");

/// The default model directory: `$AHE_MODEL_DIR`, else `~/.cache/ahe/models`.
pub fn default_model_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("AHE_MODEL_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache/ahe/models")
}

/// The GGUF file a config names: `path` (a file, or a directory holding the default model
/// or exactly one `.gguf`), else the default model in [`default_model_dir`].
pub fn resolve_model_path(path: Option<&Path>) -> anyhow::Result<PathBuf> {
    let p = path
        .map(Path::to_path_buf)
        .unwrap_or_else(default_model_dir);
    let fetch = "run scripts/fetch-model.sh to download the default model, or set [model] path to a GGUF file";
    if p.is_file() {
        return Ok(p);
    }
    if !p.is_dir() {
        anyhow::bail!("local model: {} does not exist; {fetch}", p.display());
    }
    let default = p.join(DEFAULT_MODEL_FILE);
    if default.is_file() {
        return Ok(default);
    }
    let mut ggufs: Vec<PathBuf> = std::fs::read_dir(&p)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|f| f.extension().is_some_and(|x| x == "gguf") && f.is_file())
        .collect();
    ggufs.sort();
    match ggufs.len() {
        1 => Ok(ggufs.remove(0)),
        0 => anyhow::bail!("local model: no .gguf file in {}; {fetch}", p.display()),
        _ => anyhow::bail!(
            "local model: {} holds several .gguf files ({}); set [model] path to one of them",
            p.display(),
            ggufs
                .iter()
                .filter_map(|f| f.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// How the local engine of a config runs (the engine is shared by configs that agree).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LocalSettings {
    /// The GGUF file.
    pub path: PathBuf,
    /// Context of one conversation, in tokens (0 = the model's, at most 8192).
    pub context_tokens: u32,
    /// CPU threads of one decoding conversation (0 = cores / `concurrency`).
    pub threads: usize,
    /// Conversations decoded at once; further requests wait in the queue.
    pub concurrency: usize,
    /// Conversations whose KV cache each decoding slot keeps for prefix reuse.
    pub kv_slots: usize,
}

impl LocalSettings {
    /// The settings of a `provider = "local"` config (resolves the model file).
    pub fn from_config(cfg: &ModelConfig) -> anyhow::Result<LocalSettings> {
        Ok(LocalSettings {
            path: resolve_model_path(cfg.path.as_deref())?,
            context_tokens: cfg.context_tokens.unwrap_or(0),
            threads: cfg.threads.unwrap_or(0),
            concurrency: cfg.local_concurrency.unwrap_or(1).max(1),
            kv_slots: cfg.kv_slots.unwrap_or(4).max(1),
        })
    }
}

/// Example task and arguments for the example turn of a protocol prompt, from the first
/// tool's schema (a shell-like tool gets `ls -la`).
pub fn example_turn(schema: &Value) -> (String, Value) {
    let mut m = serde_json::Map::new();
    let props = schema.get("properties").and_then(Value::as_object);
    let req: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for k in req {
        let ty = props
            .and_then(|p| p.get(k))
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("string");
        let v = match (k, ty) {
            ("command", _) => Value::from("ls -la"),
            ("path", _) => Value::from("README.md"),
            (_, "integer") | (_, "number") => Value::from(1),
            (_, "boolean") => Value::from(false),
            (_, "array") => Value::Array(vec![]),
            (_, "object") => Value::Object(Default::default()),
            _ => Value::from("..."),
        };
        m.insert(k.to_string(), v);
    }
    let task = if m.contains_key("command") {
        "List the files in the working directory."
    } else if m.contains_key("path") {
        "Show me README.md."
    } else {
        "(a task)"
    };
    (task.to_string(), Value::Object(m))
}

fn env() -> Environment<'static> {
    let mut e = Environment::new();
    e.set_trim_blocks(true);
    e
}

/// Whether a reply may be the final answer instead of an action: not for the evolve agent,
/// whose run ends when a tool accepts its manifest (so a tiny model cannot skip editing).
pub fn allows_answer(req: &ChatRequest) -> bool {
    req.role != Role::Evolve
}

/// Whether the grammar of this reply admits the final answer: as [`allows_answer`], and only
/// after the model's first reply, which must be an action (a tiny model otherwise "answers"
/// a task it has not touched; measured: SmolLM2-135M did so on 8 of 8 smoke trials). The
/// prompt's protocol section does not change, so the cached system prompt stays valid.
pub fn answer_admitted(req: &ChatRequest) -> bool {
    allows_answer(req) && req.assistant_turns() > 0
}

/// The grammar of one reply: none without tools; only the final answer when the request
/// forbids tool calls ([`ToolChoice::None`]); else an action for one of the tools, or the
/// answer when [`answer_admitted`].
pub fn reply_grammar(req: &ChatRequest) -> Option<String> {
    if req.tools.is_empty() {
        return None;
    }
    Some(match req.tool_choice {
        ToolChoice::None => grammar::action_grammar(&[], true),
        ToolChoice::Auto => grammar::action_grammar(&req.tools, answer_admitted(req)),
    })
}

/// SHA-256 of a rendered conversation and its grammar (what decides the reply).
pub fn conversation_hash(turns: &[(String, String)], grammar: Option<&str>) -> [u8; 32] {
    let mut h = Sha256::new();
    for (role, text) in turns {
        for part in [role.as_str(), text.as_str()] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
    }
    h.update(grammar.unwrap_or("").as_bytes());
    h.finalize().into()
}

/// The sampling seed of the `n`-th (0-based) request with this conversation hash: the
/// configured seed mixed with the hash and `n`, so identical requests sample differently and
/// a rerun reproduces them.
pub fn sample_seed(seed: u32, hash: &[u8; 32], n: u32) -> u32 {
    let mut h = Sha256::new();
    h.update(seed.to_le_bytes());
    h.update(hash);
    h.update(n.to_le_bytes());
    let d = h.finalize();
    u32::from_le_bytes([d[0], d[1], d[2], d[3]])
}

/// The protocol section this provider adds to the system prompt for the native protocol.
pub fn protocol_section(tools: &[ToolSpec], allow_answer: bool) -> String {
    let first = tools.first();
    let (task, args) = example_turn(first.map(|t| &t.input_schema).unwrap_or(&Value::Null));
    let name = first.map(|t| t.name.as_str()).unwrap_or("tool");
    let views: Vec<Value> = tools
        .iter()
        .map(|t| {
            serde_json::json!({"name": t.name, "description": t.description,
                               "schema": t.input_schema.to_string()})
        })
        .collect();
    env()
        .render_str(
            PROTOCOL,
            context! {
                tools => views,
                example_task => task,
                example_tool => name,
                example_action => format_action(name, &args),
                allow_answer,
            },
        )
        .unwrap_or_default()
}

/// A tool result shown to the model as a user turn (native protocol).
pub fn observation(name: &str, content: &str) -> String {
    env()
        .render_str(OBSERVATION, context! { name, observation => content })
        .unwrap_or_default()
}

/// The conversation as (role, text) turns for the model's chat template: the protocol
/// section added to the system prompt (native protocol), earlier actions and answers
/// written back in the grammar's layout, tool results as user turns.
pub fn render_conversation(req: &ChatRequest) -> Vec<(String, String)> {
    let add_protocol = req.protocol == ToolProtocol::Native && !req.tools.is_empty();
    let mut out: Vec<(String, String)> = Vec::new();
    let mut system_done = false;
    let mut last_was_tool = false;
    for m in &req.messages {
        let is_tool = matches!(m, Message::Tool { .. });
        match m {
            Message::System { content } if !system_done => {
                let mut s = content.clone();
                if add_protocol {
                    s = format!(
                        "{}\n\n{}",
                        s.trim_end(),
                        protocol_section(&req.tools, allows_answer(req)).trim_start()
                    );
                }
                out.push(("system".into(), s));
                system_done = true;
            }
            Message::System { content } | Message::User { content } => {
                out.push(("user".into(), content.clone()))
            }
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                let text = match (tool_calls.first(), content.as_deref()) {
                    (Some(c), _) => format_action(&c.name, &c.arguments),
                    (None, Some(t)) if t.trim_start().starts_with('{') => t.to_string(),
                    (None, t) => format_answer(t.unwrap_or("")),
                };
                out.push(("assistant".into(), text));
            }
            Message::Tool { name, content, .. } => {
                let obs = observation(name, content);
                match out.last_mut() {
                    Some((_, prev)) if last_was_tool => {
                        prev.push_str("\n\n");
                        prev.push_str(&obs);
                    }
                    _ => out.push(("user".into(), obs)),
                }
            }
        }
        last_was_tool = is_tool;
    }
    if add_protocol && !system_done {
        let section = protocol_section(&req.tools, allows_answer(req))
            .trim()
            .to_string();
        out.insert(0, ("system".into(), section));
    }
    out
}

/// The response for a generated reply: an action as a tool call (native) or as its JSON
/// text (JSON-in-text), a final answer as plain text, a cut-off reply as it is.
pub fn interpret(req: &ChatRequest, text: &str, cut_off: bool, usage: Usage) -> ChatResponse {
    let mut resp = ChatResponse {
        content: Some(text.to_string()),
        tool_calls: vec![],
        usage,
        finish_reason: Some(if cut_off { "length" } else { "stop" }.into()),
        cost_usd: 0.0,
        opaque: vec![],
    };
    if req.tools.is_empty() {
        return resp;
    }
    if cut_off {
        // A cut-off answer still says something: keep its text without the JSON opening.
        if let Some(rest) = text.strip_prefix(&format!("{{\"{}\": \"", grammar::ANSWER_KEY)) {
            resp.content = Some(rest.to_string());
        }
        return resp;
    }
    match parse_reply(text) {
        Reply::Action { tool, args } if req.protocol == ToolProtocol::Native => {
            resp.content = None;
            resp.finish_reason = Some("tool_calls".into());
            resp.tool_calls = vec![ToolCall {
                id: format!("local_{}", req.assistant_turns()),
                name: tool,
                arguments: args,
            }];
        }
        Reply::Action { .. } => {}
        Reply::Answer(a) => resp.content = Some(a),
        Reply::Other => resp.finish_reason = Some("length".into()),
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(protocol: ToolProtocol, messages: Vec<Message>) -> ChatRequest {
        ChatRequest {
            role: Role::CodeAgent,
            messages,
            tools: vec![ToolSpec {
                name: "run_shell".into(),
                description: "Run a command.".into(),
                input_schema: json!({"type": "object", "required": ["command"],
                    "properties": {"command": {"type": "string"}}}),
            }],
            protocol,
            temperature: None,
            max_tokens: None,
            tool_choice: Default::default(),
        }
    }

    #[test]
    fn native_conversation_renders_protocol_actions_and_results() {
        let call = ToolCall {
            id: "local_0".into(),
            name: "run_shell".into(),
            arguments: json!({"command": "ls"}),
        };
        let r = req(
            ToolProtocol::Native,
            vec![
                Message::system("Be brief."),
                Message::user("Do it."),
                Message::Assistant {
                    content: None,
                    tool_calls: vec![call],
                    opaque: vec![],
                },
                Message::Tool {
                    tool_call_id: "local_0".into(),
                    name: "run_shell".into(),
                    content: "a.txt".into(),
                },
                Message::Assistant {
                    content: Some("done".into()),
                    tool_calls: vec![],
                    opaque: vec![],
                },
            ],
        );
        let turns = render_conversation(&r);
        let roles: Vec<&str> = turns.iter().map(|(r, _)| r.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "user", "assistant"]);
        assert!(
            turns[0].1.starts_with("Be brief.\n\n## How to act"),
            "{}",
            turns[0].1
        );
        assert!(
            turns[0]
                .1
                .contains(r#"Assistant: {"tool": "run_shell", "args": {"command": "ls -la"}}"#),
            "{}",
            turns[0].1
        );
        assert_eq!(
            turns[2].1,
            r#"{"tool": "run_shell", "args": {"command": "ls"}}"#
        );
        assert_eq!(turns[3].1, "Result of `run_shell`:\na.txt");
        assert_eq!(turns[4].1, r#"{"answer": "done"}"#);
        // The JSON-in-text protocol brings its own section: nothing is added.
        let j = req(ToolProtocol::JsonInText, vec![Message::system("S")]);
        assert_eq!(render_conversation(&j)[0].1, "S");
    }

    #[test]
    fn replies_come_back_in_the_callers_protocol() {
        let action = r#"{"tool": "run_shell", "args": {"command": "ls"}}"#;
        let n = interpret(
            &req(ToolProtocol::Native, vec![]),
            action,
            false,
            Usage::default(),
        );
        assert_eq!(n.content, None);
        assert_eq!(n.tool_calls[0].name, "run_shell");
        assert_eq!(n.tool_calls[0].arguments, json!({"command": "ls"}));
        let j = interpret(
            &req(ToolProtocol::JsonInText, vec![]),
            action,
            false,
            Usage::default(),
        );
        assert_eq!(j.content.as_deref(), Some(action));
        assert!(j.tool_calls.is_empty());
        let a = interpret(
            &req(ToolProtocol::Native, vec![]),
            r#"{"answer": "ok"}"#,
            false,
            Usage::default(),
        );
        assert_eq!((a.content.as_deref(), a.tool_calls.len()), (Some("ok"), 0));
        let cut = interpret(
            &req(ToolProtocol::Native, vec![]),
            r#"{"tool": "run_"#,
            true,
            Usage::default(),
        );
        assert_eq!(cut.finish_reason.as_deref(), Some("length"));
        let cut = interpret(
            &req(ToolProtocol::Native, vec![]),
            r#"{"answer": "partly do"#,
            true,
            Usage::default(),
        );
        assert_eq!(cut.content.as_deref(), Some("partly do"));
        // The evolve agent ends through a tool: it is not offered the final answer.
        let mut ev = req(ToolProtocol::Native, vec![Message::system("S")]);
        ev.role = Role::Evolve;
        assert!(!render_conversation(&ev)[0].1.contains("answer"));
        assert!(cut.tool_calls.is_empty());
    }

    #[test]
    fn model_path_resolution() {
        let d = tempfile::tempdir().unwrap();
        let e = resolve_model_path(Some(d.path())).unwrap_err().to_string();
        assert!(
            e.contains("no .gguf") && e.contains("fetch-model.sh"),
            "{e}"
        );
        std::fs::write(d.path().join("a.gguf"), b"x").unwrap();
        assert_eq!(
            resolve_model_path(Some(d.path())).unwrap(),
            d.path().join("a.gguf")
        );
        std::fs::write(d.path().join("b.gguf"), b"x").unwrap();
        let e = resolve_model_path(Some(d.path())).unwrap_err().to_string();
        assert!(e.contains("several"), "{e}");
        std::fs::write(d.path().join(DEFAULT_MODEL_FILE), b"x").unwrap();
        assert!(resolve_model_path(Some(d.path()))
            .unwrap()
            .ends_with(DEFAULT_MODEL_FILE));
        let e = resolve_model_path(Some(&d.path().join("nope.gguf"))).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
    }

    #[test]
    fn identical_requests_get_different_seeds_reproducibly() {
        let turns = vec![("user".to_string(), "hi".to_string())];
        let a = conversation_hash(&turns, None);
        assert_eq!(a, conversation_hash(&turns, None));
        assert_ne!(a, conversation_hash(&turns, Some("root ::= \"x\"")));
        // Role and text boundaries count: ("us", "erhi") is another conversation.
        let shifted = vec![("us".to_string(), "erhi".to_string())];
        assert_ne!(a, conversation_hash(&shifted, None));
        let seeds: Vec<u32> = (0..4).map(|n| sample_seed(7, &a, n)).collect();
        for (i, s) in seeds.iter().enumerate() {
            assert!(!seeds[..i].contains(s), "{seeds:?}");
        }
        assert_eq!(seeds[2], sample_seed(7, &a, 2));
        assert_ne!(
            seeds[0],
            sample_seed(8, &a, 0),
            "the configured seed counts"
        );
    }

    #[test]
    fn the_first_reply_must_be_an_action_and_the_evolve_agent_never_answers() {
        let user = Message::User {
            content: "Create hello.txt".into(),
        };
        let first = req(ToolProtocol::Native, vec![user.clone()]);
        assert!(
            allows_answer(&first),
            "the prompt still explains the answer"
        );
        assert!(!answer_admitted(&first));
        let g = grammar::action_grammar(&first.tools, answer_admitted(&first));
        assert!(!g.contains("answer"), "{g}");
        let later = req(
            ToolProtocol::Native,
            vec![
                user,
                Message::Assistant {
                    content: Some("{\"tool\": \"run_shell\"}".into()),
                    tool_calls: vec![],
                    opaque: vec![],
                },
            ],
        );
        assert!(answer_admitted(&later));
        let evolve = ChatRequest {
            role: Role::Evolve,
            ..later
        };
        assert!(!answer_admitted(&evolve));
        let forced = ChatRequest {
            tool_choice: ToolChoice::None,
            ..first.clone()
        };
        let g = reply_grammar(&forced).unwrap();
        assert!(g.contains("answer") && !g.contains("run_shell"), "{g}");
        assert!(reply_grammar(&first).unwrap().contains("run_shell"));
        let no_tools = ChatRequest {
            tools: vec![],
            ..first
        };
        assert_eq!(reply_grammar(&no_tools), None);
    }
}
