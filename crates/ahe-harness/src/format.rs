//! The harness directory format (DESIGN §2): loading every component and naming every problem.

use std::fmt;
use std::path::{Path, PathBuf};

use ahe_model::ToolProtocol;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::middleware::{Hook, MiddlewareKind};
use crate::tools::ToolImpl;

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTool {
    name: String,
    description: String,
    implementation: String,
    input_schema: toml::Value,
    #[serde(default)]
    params: Option<toml::Value>,
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMiddleware {
    #[serde(default)]
    name: Option<String>,
    hooks: Vec<Hook>,
    kind: String,
    #[serde(default)]
    params: Option<toml::Value>,
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

/// Appends the index of enabled skills to the builtin `load_skill` tool's description and
/// that of enabled sub-agents to `delegate`'s (`[index]` of `templates/messages.toml`).
fn add_indexes(tools: &mut [ToolDef], skills: &[Skill], subagents: &[SubagentDef]) {
    use crate::tools::{BuiltinTool, ToolImpl};
    let entry = |n: &str, d: &str| minijinja::context! { name => n, description => d };
    for t in tools.iter_mut() {
        let index = match t.implementation {
            ToolImpl::Builtin(BuiltinTool::LoadSkill) if !skills.is_empty() => {
                let list: Vec<_> = skills
                    .iter()
                    .map(|s| entry(&s.name, &s.description))
                    .collect();
                crate::text::say("index", "skills", minijinja::context! { skills => list })
            }
            ToolImpl::Builtin(BuiltinTool::Delegate) if !subagents.is_empty() => {
                let list: Vec<_> = subagents
                    .iter()
                    .map(|s| entry(&s.name, &s.description))
                    .collect();
                crate::text::say(
                    "index",
                    "subagents",
                    minijinja::context! { subagents => list },
                )
            }
            _ => continue,
        };
        t.description.push_str(&index);
    }
}

mod components;
use components::*;

struct Ctx<'a> {
    root: &'a Path,
    problems: Vec<Problem>,
    warnings: Vec<Problem>,
}

impl Ctx<'_> {
    fn err(&mut self, file: &str, field: Option<&str>, msg: impl Into<String>) {
        self.problems.push(Problem {
            file: file.into(),
            field: field.map(Into::into),
            message: msg.into(),
        });
    }
    fn warn(&mut self, file: &str, msg: impl Into<String>) {
        self.warnings.push(Problem {
            file: file.into(),
            field: None,
            message: msg.into(),
        });
    }
    fn read(&mut self, rel: &str) -> Option<String> {
        match std::fs::read_to_string(self.root.join(rel)) {
            Ok(s) => Some(s),
            Err(e) => {
                self.err(rel, None, format!("cannot read: {e}"));
                None
            }
        }
    }
    fn toml<T: for<'de> Deserialize<'de>>(&mut self, rel: &str) -> Option<T> {
        let text = self.read(rel)?;
        match toml::from_str::<T>(&text) {
            Ok(v) => Some(v),
            Err(e) => {
                let msg = e.message().to_string();
                let field = e
                    .span()
                    .map(|s| format!("line {}", text[..s.start].lines().count().max(1)));
                self.err(rel, field.as_deref(), msg);
                None
            }
        }
    }
}

/// Converts a TOML value to JSON.
pub fn toml_to_json(v: &toml::Value) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// A path inside the harness that is a plain relative path (no `..`, not absolute).
pub fn safe_rel(p: &str) -> bool {
    let path = Path::new(p);
    !p.is_empty()
        && path.is_relative()
        && path
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// Loads a harness directory, checking everything; returns every problem when any is fatal.
pub fn load(dir: &Path) -> Result<Harness, Vec<Problem>> {
    let mut cx = Ctx {
        root: dir,
        problems: Vec::new(),
        warnings: Vec::new(),
    };
    if !dir.is_dir() {
        cx.err(&dir.display().to_string(), None, "not a directory");
        return Err(cx.problems);
    }
    let agent: Option<AgentToml> = cx.toml("agent.toml");
    let system_prompt = cx.read("system_prompt.md").unwrap_or_default();

    let mut all_tools = Vec::new();
    for stem in list_stems(dir, "tools", "toml") {
        if let Some(t) = load_tool(&mut cx, &stem) {
            all_tools.push(t);
        }
    }
    let memory = load_memory(&mut cx);
    let Some(agent) = agent else {
        return Err(cx.problems);
    };
    if agent.limits.max_turns == 0 {
        cx.err("agent.toml", Some("limits.max_turns"), "must be at least 1");
    }
    if agent.limits.timeout_sec.is_nan() || agent.limits.timeout_sec <= 0.0 {
        cx.err("agent.toml", Some("limits.timeout_sec"), "must be positive");
    }
    for name in &agent.tools {
        if !all_tools.iter().any(|t: &ToolDef| &t.name == name) {
            let file = format!("tools/{name}.toml");
            if !dir.join(&file).is_file() {
                cx.err(
                    "agent.toml",
                    Some("tools"),
                    format!("tool {name:?} is listed but {file} does not exist"),
                );
            }
        }
    }
    let mut middleware = Vec::new();
    for name in &agent.middleware {
        if let Some(m) = load_middleware(&mut cx, name) {
            middleware.push(m);
        }
    }
    let mut skills = Vec::new();
    for name in &agent.skills {
        if let Some(s) = load_skill(&mut cx, name) {
            skills.push(s);
        }
    }
    let mut subagents = Vec::new();
    for name in &agent.subagents {
        let file = format!("subagents/{name}.toml");
        if let Some(s) = cx.toml::<SubagentDef>(&file) {
            if s.prompt.trim().is_empty() {
                cx.err(&file, Some("prompt"), "is empty");
            }
            for t in &s.tools {
                if !all_tools.iter().any(|d| &d.name == t) {
                    cx.err(
                        &file,
                        Some("tools"),
                        format!("unknown tool {t:?} (no tools/{t}.toml)"),
                    );
                }
            }
            subagents.push(s);
        }
    }
    registry_warnings(&mut cx, &agent, &all_tools);
    add_indexes(&mut all_tools, &skills, &subagents);
    let h = Harness {
        dir: dir.to_path_buf(),
        agent,
        system_prompt,
        all_tools,
        middleware,
        skills,
        subagents,
        memory,
        warnings: Vec::new(),
    };
    if let Err(e) = crate::prompt::check_templates(&h) {
        cx.problems.extend(e);
    }
    if cx.problems.is_empty() {
        Ok(Harness {
            warnings: cx.warnings,
            ..h
        })
    } else {
        Err(cx.problems)
    }
}

fn list_stems(dir: &Path, sub: &str, ext: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir.join(sub))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    v.sort();
    v
}
