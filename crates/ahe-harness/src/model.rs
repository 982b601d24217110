//! The harness data model (docs/harness.md) apart from its loader: the registry, tool, middleware,
//! skill and sub-agent definitions, builtin kinds and hook points, and the loaded
//! [`Harness`]. `format` loads and validates it; the runtime runs it.

use std::fmt;
use std::path::PathBuf;

use ahe_model::ToolProtocol;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One problem found in a harness: file (relative to the harness), field, what is wrong.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Problem {
    /// File, relative to the harness root.
    pub file: String,
    /// Field or key inside the file, when known.
    pub field: Option<String>,
    /// What is wrong and what to do.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(k) => write!(f, "{}: {}: {}", self.file, k, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

/// `[limits]` of agent.toml.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Maximum model turns.
    pub max_turns: u32,
    /// Agent wall time in seconds (a task's own `[agent] timeout_sec` caps it further).
    pub timeout_sec: f64,
    /// Input + output token budget of one run.
    pub max_total_tokens: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_turns: 100,
            timeout_sec: 1800.0,
            max_total_tokens: 4_000_000,
        }
    }
}

/// `agent.toml`: the registry of what is on.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentToml {
    /// Harness name.
    #[serde(default)]
    pub name: String,
    /// `native` or `json_in_text`.
    #[serde(default)]
    pub tool_protocol: ToolProtocol,
    /// Enabled tools (file stems under `tools/`).
    pub tools: Vec<String>,
    /// Enabled middleware, in hook order (file stems under `middleware/`).
    #[serde(default)]
    pub middleware: Vec<String>,
    /// Enabled skills (directory names under `skills/`).
    #[serde(default)]
    pub skills: Vec<String>,
    /// Enabled sub-agents (file stems under `subagents/`).
    #[serde(default)]
    pub subagents: Vec<String>,
    /// Limits.
    #[serde(default)]
    pub limits: Limits,
}

/// A tool: description for the model plus its implementation.
#[derive(Debug, Clone)]
pub struct ToolDef {
    /// Tool name.
    pub name: String,
    /// Description shown to the model.
    pub description: String,
    /// JSON Schema of the arguments.
    pub input_schema: Value,
    /// Builtin kind or script.
    pub implementation: ToolImpl,
    /// Implementation parameters.
    pub params: Value,
}

/// A middleware: hook points plus builtin kind or script.
#[derive(Debug, Clone)]
pub struct MiddlewareDef {
    /// Name (file stem).
    pub name: String,
    /// Hook points it runs at.
    pub hooks: Vec<Hook>,
    /// Builtin kind or script.
    pub kind: MiddlewareKind,
    /// Parameters.
    pub params: Value,
}

/// A skill: front matter (name, description) plus the body, loaded on demand.
#[derive(Debug, Clone, Serialize)]
pub struct Skill {
    /// Skill name.
    pub name: String,
    /// One-line description shown in the skill index.
    pub description: String,
    /// Markdown body returned by `load_skill`.
    pub body: String,
}

/// A sub-agent, reachable through the `delegate` tool.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubagentDef {
    /// Name used in `delegate`.
    pub name: String,
    /// What it is for (shown to the parent agent).
    pub description: String,
    /// Its system prompt (a minijinja template like system_prompt.md).
    pub prompt: String,
    /// Tools it may use (names of harness tools).
    pub tools: Vec<String>,
    /// Turn limit.
    #[serde(default = "default_sub_turns")]
    pub max_turns: u32,
    /// Wall-time limit in seconds.
    #[serde(default = "default_sub_timeout")]
    pub timeout_sec: f64,
}

fn default_sub_turns() -> u32 {
    30
}
fn default_sub_timeout() -> f64 {
    600.0
}

/// A loaded, valid harness.
#[derive(Debug, Clone)]
pub struct Harness {
    /// Root directory.
    pub dir: PathBuf,
    /// agent.toml.
    pub agent: AgentToml,
    /// system_prompt.md source (a minijinja template).
    pub system_prompt: String,
    /// Every tool file that loaded (enabled or not; sub-agents may use disabled ones).
    pub all_tools: Vec<ToolDef>,
    /// Enabled middleware, in order.
    pub middleware: Vec<MiddlewareDef>,
    /// Enabled skills.
    pub skills: Vec<Skill>,
    /// Enabled sub-agents.
    pub subagents: Vec<SubagentDef>,
    /// memory/*.md, sorted by file name: (file name, text).
    pub memory: Vec<(String, String)>,
    /// Non-fatal findings (e.g. a skill file not registered in agent.toml).
    pub warnings: Vec<Problem>,
}

impl Harness {
    /// The enabled tools, in agent.toml order.
    pub fn tools(&self) -> Vec<&ToolDef> {
        self.agent
            .tools
            .iter()
            .filter_map(|n| self.tool(n))
            .collect()
    }
    /// A tool by name (enabled or not).
    pub fn tool(&self, name: &str) -> Option<&ToolDef> {
        self.all_tools.iter().find(|t| t.name == name)
    }
}

/// Builtin tool kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuiltinTool {
    /// `bash -c` in the task's working directory.
    Shell,
    /// Read a file (optionally a line range).
    ReadFile,
    /// Write a whole file.
    WriteFile,
    /// Exact-match replace inside a file.
    EditFile,
    /// End the run.
    Finish,
    /// Return a skill's body.
    LoadSkill,
    /// Run a sub-agent.
    Delegate,
}

/// How a tool is implemented.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolImpl {
    /// `builtin:<kind>`.
    Builtin(BuiltinTool),
    /// `script:<path>` relative to the harness.
    Script(String),
}

impl ToolImpl {
    /// Parses `builtin:<kind>` or `script:<path>`.
    pub fn parse(s: &str) -> Result<ToolImpl, String> {
        if let Some(k) = s.strip_prefix("builtin:") {
            let b = match k {
                "shell" => BuiltinTool::Shell,
                "read_file" => BuiltinTool::ReadFile,
                "write_file" => BuiltinTool::WriteFile,
                "edit_file" => BuiltinTool::EditFile,
                "finish" => BuiltinTool::Finish,
                "load_skill" => BuiltinTool::LoadSkill,
                "delegate" => BuiltinTool::Delegate,
                _ => return Err(format!("unknown builtin {k:?}; use one of shell, read_file, write_file, edit_file, finish, load_skill, delegate")),
            };
            Ok(ToolImpl::Builtin(b))
        } else if let Some(p) = s.strip_prefix("script:") {
            Ok(ToolImpl::Script(p.to_string()))
        } else {
            Err(format!("{s:?} must be `builtin:<kind>` or `script:<path>`"))
        }
    }
}

/// Where a middleware runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hook {
    /// Before each model call (may rewrite the messages).
    BeforeModel,
    /// After each model answer (may block it with feedback).
    AfterModel,
    /// Before a tool runs (may change args or block).
    BeforeTool,
    /// After a tool ran (may change its output).
    AfterTool,
    /// When the agent wants to finish (may reject).
    OnFinish,
}

impl Hook {
    /// snake_case name, as written in middleware files.
    pub fn as_str(self) -> &'static str {
        match self {
            Hook::BeforeModel => "before_model",
            Hook::AfterModel => "after_model",
            Hook::BeforeTool => "before_tool",
            Hook::AfterTool => "after_tool",
            Hook::OnFinish => "on_finish",
        }
    }
}

/// Builtin middleware kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuiltinMiddleware {
    /// Cut long tool outputs (head + tail).
    OutputTruncation,
    /// Block the same call repeated too often in a row.
    LoopDetection,
    /// Block commands matching a regex list.
    CommandGuard,
    /// Run a check command before accepting finish.
    FinishVerification,
    /// Elide old tool outputs when the conversation grows too large.
    Compaction,
}

impl BuiltinMiddleware {
    /// Name as written after `builtin:`.
    pub fn name(self) -> &'static str {
        match self {
            Self::OutputTruncation => "output_truncation",
            Self::LoopDetection => "loop_detection",
            Self::CommandGuard => "command_guard",
            Self::FinishVerification => "finish_verification",
            Self::Compaction => "compaction",
        }
    }
    /// Hook points this kind supports.
    pub fn hooks(self) -> &'static [Hook] {
        match self {
            Self::OutputTruncation => &[Hook::AfterTool],
            Self::LoopDetection | Self::CommandGuard => &[Hook::BeforeTool],
            Self::FinishVerification => &[Hook::OnFinish],
            Self::Compaction => &[Hook::BeforeModel],
        }
    }
}

/// How a middleware is implemented.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MiddlewareKind {
    /// `builtin:<kind>`.
    Builtin(BuiltinMiddleware),
    /// `script:<path>` relative to the harness, run inside the sandbox.
    Script(String),
}

impl MiddlewareKind {
    /// Parses `builtin:<kind>` or `script:<path>`.
    pub fn parse(s: &str) -> Result<Self, String> {
        use BuiltinMiddleware::*;
        if let Some(k) = s.strip_prefix("builtin:") {
            let all = [
                OutputTruncation,
                LoopDetection,
                CommandGuard,
                FinishVerification,
                Compaction,
            ];
            all.into_iter()
                .find(|b| b.name() == k)
                .map(MiddlewareKind::Builtin)
                .ok_or_else(|| {
                    let names: Vec<&str> = all.iter().map(|b| b.name()).collect();
                    format!(
                        "unknown builtin middleware {k:?}; use one of {}",
                        names.join(", ")
                    )
                })
        } else if let Some(p) = s.strip_prefix("script:") {
            Ok(MiddlewareKind::Script(p.into()))
        } else {
            Err(format!("{s:?} must be `builtin:<kind>` or `script:<path>`"))
        }
    }
}
