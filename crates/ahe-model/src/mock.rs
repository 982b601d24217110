//! Deterministic, stateless mock provider: `oracle`, `nop` and TOML-`script` modes.
//!
//! The answer depends only on the request (role, system prompt, number of assistant
//! turns already in it, offered tools), so the mock is safe under concurrency and replay.
//!
//! Script format (`mock:script=FILE`): arrays of tables per role.
//!
//! ```toml
//! [[code_agent]]
//! when_system_contains = "python"     # optional filter on the system prompt
//! unless_system_contains = "rust"     # optional filter on the system prompt
//! content = "Let me look."            # optional text
//! tool = "$shell"                     # optional; "$shell" = the offered shell tool
//! args = { command = "ls -la" }       # optional arguments (any TOML value)
//!
//! [[code_agent]]
//! tool = "write_file"
//! args_raw = "{not json"              # raw argument text instead of `args`
//! ```
//!
//! For a request, the role's entries are filtered by their conditions and entry number
//! `assistant_turns` (0-based) is answered; past the end the answer is "done".

use std::path::Path;

use anyhow::{anyhow, bail, Context};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::config::ModelConfig;
use crate::openai::parse_arguments;
use crate::types::{
    ChatRequest, ChatResponse, ModelError, Provider, Role, ToolCall, ToolChoice, ToolProtocol,
    ToolSpec, Usage,
};

/// The command the oracle runs (the runner uploads the task's `solution/` to `/solution`).
pub const ORACLE_COMMAND: &str = "bash /solution/solve.sh";

/// Tool name in scripts meaning "the shell tool offered in the request".
pub const SHELL_ALIAS: &str = "$shell";

/// The text of a final answer.
pub const DONE: &str = "done";

/// The shell tool: the first offered tool whose schema has a `command` property.
pub fn find_shell_tool(tools: &[ToolSpec]) -> Option<&ToolSpec> {
    tools
        .iter()
        .find(|t| t.input_schema.pointer("/properties/command").is_some())
}

/// One scripted answer.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptEntry {
    /// Tool to call (`$shell` = the offered shell tool); none = a text-only answer.
    #[serde(default)]
    pub tool: Option<String>,
    /// Arguments of the call (any TOML value, converted to JSON).
    #[serde(default)]
    pub args: Option<toml::Value>,
    /// Raw argument text (possibly invalid JSON), instead of `args`.
    #[serde(default)]
    pub args_raw: Option<String>,
    /// Text of the answer.
    #[serde(default)]
    pub content: Option<String>,
    /// Only used when the system prompt contains this text.
    #[serde(default)]
    pub when_system_contains: Option<String>,
    /// Not used when the system prompt contains this text.
    #[serde(default)]
    pub unless_system_contains: Option<String>,
    /// Only used when the first user message (the task) contains this text.
    #[serde(default)]
    pub when_task_contains: Option<String>,
    /// Not used when the first user message (the task) contains this text.
    #[serde(default)]
    pub unless_task_contains: Option<String>,
}

impl ScriptEntry {
    /// Whether the entry's conditions accept this system prompt and task message.
    pub fn applies(&self, system: &str, task: &str) -> bool {
        let has = |cond: &Option<String>, text: &str| cond.as_deref().map(|c| text.contains(c));
        has(&self.when_system_contains, system).unwrap_or(true)
            && !has(&self.unless_system_contains, system).unwrap_or(false)
            && has(&self.when_task_contains, task).unwrap_or(true)
            && !has(&self.unless_task_contains, task).unwrap_or(false)
    }
}

/// A parsed mock script.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MockScript {
    /// Where the script came from (file path), for error messages.
    pub origin: String,
    /// Entries for the code agent.
    pub code_agent: Vec<ScriptEntry>,
    /// Entries for the debugger.
    pub debugger: Vec<ScriptEntry>,
    /// Entries for the evolve agent.
    pub evolve: Vec<ScriptEntry>,
    /// Entries for the trajectory judge.
    pub judge: Vec<ScriptEntry>,
}

impl MockScript {
    /// Reads and parses a script file.
    pub fn load(path: &Path) -> anyhow::Result<MockScript> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading mock script {}", path.display()))?;
        MockScript::parse(&text, &path.display().to_string())
    }

    /// Parses script text; errors name `origin` and the entry (`#1` = first of its role).
    pub fn parse(text: &str, origin: &str) -> anyhow::Result<MockScript> {
        let table: toml::Table =
            toml::from_str(text).map_err(|e| anyhow!("mock script {origin}: {e}"))?;
        let mut script = MockScript {
            origin: origin.to_string(),
            ..MockScript::default()
        };
        for (key, value) in table {
            let role = match key.as_str() {
                "code_agent" => Role::CodeAgent,
                "debugger" => Role::Debugger,
                "evolve" => Role::Evolve,
                "judge" => Role::Judge,
                other => bail!(
                    "mock script {origin}: unknown table `{other}` \
                     (expected [[code_agent]], [[debugger]], [[evolve]] or [[judge]])"
                ),
            };
            let items = match value {
                toml::Value::Array(items) => items,
                _ => bail!("mock script {origin}: `{key}` must be an array of tables ([[{key}]])"),
            };
            let mut entries = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                let at = || format!("mock script {origin}: [[{key}]] entry #{}", i + 1);
                let entry: ScriptEntry = item.try_into().map_err(|e| anyhow!("{}: {e}", at()))?;
                if entry.args.is_some() && entry.args_raw.is_some() {
                    bail!("{}: set `args` or `args_raw`, not both", at());
                }
                if entry.tool.is_none() && (entry.args.is_some() || entry.args_raw.is_some()) {
                    bail!("{}: `args`/`args_raw` given without `tool`", at());
                }
                if entry.tool.as_deref().is_some_and(|t| t.trim().is_empty()) {
                    bail!("{}: `tool` is empty", at());
                }
                if let Some(a) = &entry.args {
                    serde_json::to_value(a).map_err(|e| anyhow!("{}: args: {e}", at()))?;
                }
                entries.push(entry);
            }
            *script.entries_mut(role) = entries;
        }
        Ok(script)
    }

    /// The entries of one role.
    pub fn entries(&self, role: Role) -> &[ScriptEntry] {
        match role {
            Role::CodeAgent => &self.code_agent,
            Role::Debugger => &self.debugger,
            Role::Evolve => &self.evolve,
            Role::Judge => &self.judge,
        }
    }

    fn entries_mut(&mut self, role: Role) -> &mut Vec<ScriptEntry> {
        match role {
            Role::CodeAgent => &mut self.code_agent,
            Role::Debugger => &mut self.debugger,
            Role::Evolve => &mut self.evolve,
            Role::Judge => &mut self.judge,
        }
    }
}

/// What the mock does.
#[derive(Debug, Clone, PartialEq)]
pub enum MockMode {
    /// Code agent runs `bash /solution/solve.sh` once, then says "done"; other roles say "done".
    Oracle,
    /// Always "done".
    Nop,
    /// Answers from a script.
    Script(MockScript),
}

/// The deterministic mock provider.
#[derive(Debug, Clone)]
pub struct MockProvider {
    mode: MockMode,
}

/// A planned tool call: name and either JSON arguments or raw argument text.
struct PlannedCall {
    name: String,
    args: Value,
    raw: Option<String>,
}

impl MockProvider {
    /// A mock in the given mode.
    pub fn new(mode: MockMode) -> MockProvider {
        MockProvider { mode }
    }

    /// Builds the mock a config names (`model` = oracle | nop | script; loads the script once).
    pub fn from_config(cfg: &ModelConfig) -> anyhow::Result<MockProvider> {
        let mode = match cfg.model.as_str() {
            "oracle" => MockMode::Oracle,
            "nop" => MockMode::Nop,
            "script" => {
                let path = cfg.script.as_deref().ok_or_else(|| {
                    anyhow!("mock model `script` needs `script = \"FILE.toml\"` (mock:script=FILE)")
                })?;
                MockMode::Script(MockScript::load(path)?)
            }
            other => bail!("mock model `{other}` is not one of oracle, nop, script"),
        };
        Ok(MockProvider::new(mode))
    }

    /// The mode.
    pub fn mode(&self) -> &MockMode {
        &self.mode
    }

    /// Computes the answer to `req` (pure function of the request).
    pub fn answer(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let turn = req.assistant_turns();
        let (content, call) = match &self.mode {
            MockMode::Nop => (Some(DONE.to_string()), None),
            MockMode::Oracle if req.role == Role::CodeAgent && turn == 0 => {
                let shell = find_shell_tool(&req.tools).ok_or_else(|| {
                    ModelError::Permanent(
                        "mock:oracle: no shell tool (a tool whose schema has a `command` \
                         property) is offered"
                            .to_string(),
                    )
                })?;
                let call = PlannedCall {
                    name: shell.name.clone(),
                    args: json!({ "command": ORACLE_COMMAND }),
                    raw: None,
                };
                (None, Some(call))
            }
            MockMode::Oracle => (Some(DONE.to_string()), None),
            MockMode::Script(script) => script_answer(script, req, turn)?,
        };
        // A turn that may not call a tool gets the entry's text (or "done"), as a real
        // provider would answer.
        let (content, call) = match req.tool_choice {
            ToolChoice::None => (content.or_else(|| Some(DONE.to_string())), None),
            ToolChoice::Auto => (content, call),
        };
        Ok(build_response(req, turn, content, call))
    }
}

fn script_answer(
    script: &MockScript,
    req: &ChatRequest,
    turn: usize,
) -> Result<(Option<String>, Option<PlannedCall>), ModelError> {
    let system = req.system_prompt();
    let task = req
        .messages
        .iter()
        .find_map(|m| match m {
            crate::Message::User { content } => Some(content.as_str()),
            _ => None,
        })
        .unwrap_or("");
    let key = req.role.as_str();
    let chosen = script
        .entries(req.role)
        .iter()
        .enumerate()
        .filter(|(_, e)| e.applies(system, task))
        .nth(turn);
    let Some((index, entry)) = chosen else {
        return Ok((Some(DONE.to_string()), None));
    };
    let call = match &entry.tool {
        None => None,
        Some(tool) => {
            let name = if tool == SHELL_ALIAS {
                match find_shell_tool(&req.tools) {
                    Some(t) => t.name.clone(),
                    None => {
                        return Err(ModelError::Permanent(format!(
                            "mock script {}: [[{key}]] entry #{}: `{SHELL_ALIAS}` but no shell \
                             tool (a tool whose schema has a `command` property) is offered",
                            script.origin,
                            index + 1
                        )))
                    }
                }
            } else {
                tool.clone()
            };
            let (args, raw) = match (&entry.args, &entry.args_raw) {
                (_, Some(raw)) => (parse_arguments(raw), Some(raw.clone())),
                (Some(a), None) => (serde_json::to_value(a).unwrap_or(Value::Null), None),
                (None, None) => (json!({}), None),
            };
            Some(PlannedCall { name, args, raw })
        }
    };
    Ok((entry.content.clone(), call))
}

fn build_response(
    req: &ChatRequest,
    turn: usize,
    content: Option<String>,
    call: Option<PlannedCall>,
) -> ChatResponse {
    let (content, tool_calls) = match (call, req.protocol) {
        (None, _) => (content, vec![]),
        (Some(c), ToolProtocol::Native) => {
            let tc = ToolCall {
                id: format!("call_{turn}_0"),
                name: c.name,
                arguments: c.args,
            };
            (content, vec![tc])
        }
        (Some(c), ToolProtocol::JsonInText) => {
            let args_text = c.raw.unwrap_or_else(|| c.args.to_string());
            let name = Value::String(c.name).to_string();
            let json_text = format!("{{\"tool\": {name}, \"args\": {args_text}}}");
            let text = match content {
                Some(pre) if !pre.is_empty() => format!("{pre}\n{json_text}"),
                _ => json_text,
            };
            (Some(text), vec![])
        }
    };
    let input_chars: usize = req.messages.iter().map(|m| m.text().chars().count()).sum();
    let mut output_chars = content.as_deref().map_or(0, |c| c.chars().count());
    for c in &tool_calls {
        output_chars += c.name.chars().count() + crate::openai::arguments_text(&c.arguments).len();
    }
    let finish = if tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    ChatResponse {
        content,
        tool_calls,
        usage: Usage {
            input_tokens: input_chars.div_ceil(4) as u64,
            cached_input_tokens: 0,
            output_tokens: output_chars.div_ceil(4) as u64,
            ..Default::default()
        },
        finish_reason: Some(finish.to_string()),
        cost_usd: 0.0,
        opaque: vec![],
    }
}

#[async_trait::async_trait]
impl Provider for MockProvider {
    fn describe(&self) -> String {
        match &self.mode {
            MockMode::Oracle => "mock:oracle".to_string(),
            MockMode::Nop => "mock:nop".to_string(),
            MockMode::Script(s) => format!("mock:script={}", s.origin),
        }
    }

    async fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        self.answer(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Message;

    fn tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "read_file".into(),
                description: "r".into(),
                input_schema: json!({"type": "object", "properties": {"path": {}}}),
            },
            ToolSpec {
                name: "bash".into(),
                description: "b".into(),
                input_schema: json!({"type": "object", "properties": {"command": {}}}),
            },
        ]
    }

    fn req(role: Role, system: &str, turns: usize) -> ChatRequest {
        let mut messages = vec![Message::system(system), Message::user("task")];
        for _ in 0..turns {
            messages.push(Message::Assistant {
                content: Some("x".into()),
                tool_calls: vec![],
                opaque: vec![],
            });
            messages.push(Message::user("obs"));
        }
        ChatRequest {
            role,
            messages,
            tools: tools(),
            protocol: ToolProtocol::Native,
            temperature: None,
            max_tokens: None,
            tool_choice: Default::default(),
        }
    }

    #[test]
    fn oracle_calls_shell_then_done() {
        let m = MockProvider::new(MockMode::Oracle);
        let r = m.answer(&req(Role::CodeAgent, "sys", 0)).unwrap();
        assert_eq!(r.content, None);
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].name, "bash");
        assert_eq!(r.tool_calls[0].id, "call_0_0");
        assert_eq!(
            r.tool_calls[0].arguments,
            json!({"command": ORACLE_COMMAND})
        );
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
        let r = m.answer(&req(Role::CodeAgent, "sys", 1)).unwrap();
        assert_eq!(
            (r.content.as_deref(), r.tool_calls.len()),
            (Some("done"), 0)
        );
        let r = m.answer(&req(Role::Evolve, "sys", 0)).unwrap();
        assert_eq!(r.content.as_deref(), Some("done"));
        // A turn that may not call a tool is answered in text.
        let mut no_tools = req(Role::CodeAgent, "sys", 0);
        no_tools.tool_choice = ToolChoice::None;
        let r = m.answer(&no_tools).unwrap();
        assert_eq!(
            (r.content.as_deref(), r.tool_calls.len()),
            (Some("done"), 0)
        );
        let mut no_shell = req(Role::CodeAgent, "sys", 0);
        no_shell.tools.truncate(1);
        assert_eq!(m.answer(&no_shell).unwrap_err().class(), "permanent");
    }

    #[test]
    fn nop_and_usage_estimate() {
        let m = MockProvider::new(MockMode::Nop);
        let mut r = req(Role::CodeAgent, "12345", 0);
        r.messages[1] = Message::user("abc"); // 5 + 3 chars
        let a = m.answer(&r).unwrap();
        assert_eq!(a.content.as_deref(), Some("done"));
        assert_eq!(a.usage.input_tokens, 2);
        assert_eq!(a.usage.output_tokens, 1);
        assert_eq!(m.describe(), "mock:nop");
    }

    const SCRIPT: &str = r#"
[[code_agent]]
when_system_contains = "PYTHON"
tool = "$shell"
args = { command = "python -V" }

[[code_agent]]
unless_system_contains = "PYTHON"
content = "Looking around."
tool = "$shell"
args = { command = "ls", timeout = 5 }

[[code_agent]]
tool = "write_file"
args_raw = "{\"path\": oops"

[[debugger]]
content = "the agent forgot tests"
"#;

    #[test]
    fn script_selects_by_system_prompt_and_turn() {
        let m = MockProvider::new(MockMode::Script(
            MockScript::parse(SCRIPT, "s.toml").unwrap(),
        ));
        let r = m.answer(&req(Role::CodeAgent, "use PYTHON", 0)).unwrap();
        assert_eq!(r.tool_calls[0].arguments, json!({"command": "python -V"}));
        assert_eq!(r.tool_calls[0].name, "bash");
        let r = m.answer(&req(Role::CodeAgent, "use rust", 0)).unwrap();
        assert_eq!(r.content.as_deref(), Some("Looking around."));
        assert_eq!(
            r.tool_calls[0].arguments,
            json!({"command": "ls", "timeout": 5})
        );
        let r = m.answer(&req(Role::CodeAgent, "use rust", 1)).unwrap();
        assert_eq!(r.tool_calls[0].name, "write_file");
        assert_eq!(r.tool_calls[0].id, "call_1_0");
        assert_eq!(
            r.tool_calls[0].arguments,
            Value::String("{\"path\": oops".into())
        );
        let r = m.answer(&req(Role::CodeAgent, "use rust", 2)).unwrap();
        assert_eq!(
            (r.content.as_deref(), r.tool_calls.len()),
            (Some("done"), 0)
        );
        let r = m.answer(&req(Role::Debugger, "", 0)).unwrap();
        assert_eq!(r.content.as_deref(), Some("the agent forgot tests"));
        let r = m.answer(&req(Role::Evolve, "", 0)).unwrap();
        assert_eq!(r.content.as_deref(), Some("done"));
        assert_eq!(m.describe(), "mock:script=s.toml");
    }

    #[test]
    fn json_in_text_protocol() {
        let m = MockProvider::new(MockMode::Script(
            MockScript::parse(SCRIPT, "s.toml").unwrap(),
        ));
        let mut r = req(Role::CodeAgent, "rust", 0);
        r.protocol = ToolProtocol::JsonInText;
        let a = m.answer(&r).unwrap();
        assert!(a.tool_calls.is_empty());
        let text = a.content.unwrap();
        let (pre, json_line) = text.split_once('\n').unwrap();
        assert_eq!(pre, "Looking around.");
        let v: Value = serde_json::from_str(json_line).unwrap();
        assert_eq!(
            v,
            json!({"tool": "bash", "args": {"command": "ls", "timeout": 5}})
        );
        let mut r = req(Role::CodeAgent, "rust", 1);
        r.protocol = ToolProtocol::JsonInText;
        let a = m.answer(&r).unwrap();
        assert_eq!(
            a.content.as_deref(),
            Some("{\"tool\": \"write_file\", \"args\": {\"path\": oops}")
        );
        let o = MockProvider::new(MockMode::Oracle);
        let mut r = req(Role::CodeAgent, "", 0);
        r.protocol = ToolProtocol::JsonInText;
        let v: Value = serde_json::from_str(&o.answer(&r).unwrap().content.unwrap()).unwrap();
        assert_eq!(v["args"]["command"], ORACLE_COMMAND);
    }

    #[test]
    fn script_errors_name_file_and_entry() {
        let cases = [
            (
                "[[code_agent]]\ncontent = \"a\"\n[[code_agent]]\ntol = \"x\"\n",
                "entry #2",
            ),
            (
                "[[code_agent]]\ntool = \"x\"\nargs = {}\nargs_raw = \"{}\"\n",
                "entry #1",
            ),
            ("[[code_agent]]\nargs = {}\n", "entry #1"),
            ("[[coder]]\ntool = \"x\"\n", "unknown table `coder`"),
            ("[[code_agent]\n", "my.toml"),
        ];
        for (text, want) in cases {
            let e = MockScript::parse(text, "my.toml").unwrap_err().to_string();
            assert!(e.contains("my.toml") && e.contains(want), "{e}");
        }
        let s = MockScript::parse("[[evolve]]\ntool = \"$shell\"\n", "ev.toml").unwrap();
        let m = MockProvider::new(MockMode::Script(s));
        let mut r = req(Role::Evolve, "", 0);
        r.tools.clear();
        let e = m.answer(&r).unwrap_err().to_string();
        assert!(e.contains("ev.toml") && e.contains("entry #1"), "{e}");
    }

    #[test]
    fn from_config_loads_script_file() {
        let dir = std::env::temp_dir().join(format!("ahe-model-mock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.toml");
        std::fs::write(&path, SCRIPT).unwrap();
        let cfg = ModelConfig::from_spec(&format!("mock:script={}", path.display())).unwrap();
        let m = MockProvider::from_config(&cfg).unwrap();
        assert!(matches!(m.mode(), MockMode::Script(s) if s.code_agent.len() == 3));
        let missing = ModelConfig::from_spec("mock:script=/nonexistent/x.toml").unwrap();
        let e = format!("{:#}", MockProvider::from_config(&missing).unwrap_err());
        assert!(e.contains("/nonexistent/x.toml"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
