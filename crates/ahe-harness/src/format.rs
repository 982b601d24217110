//! The harness directory format (docs/harness.md): loading every component and naming every problem.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::model::{Hook, ToolImpl};

pub use crate::model::{
    AgentToml, Harness, Limits, MiddlewareDef, Problem, Skill, SubagentDef, ToolDef,
};

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

/// Appends the index of enabled skills to the builtin `load_skill` tool's description and
/// that of enabled sub-agents to `delegate`'s (`[index]` of `templates/messages.toml`).
fn add_indexes(tools: &mut [ToolDef], skills: &[Skill], subagents: &[SubagentDef]) {
    use crate::model::BuiltinTool;
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
    check_agent(&mut cx, &agent, &all_tools);
    let middleware = agent
        .middleware
        .iter()
        .filter_map(|name| load_middleware(&mut cx, name))
        .collect();
    let skills: Vec<Skill> = agent
        .skills
        .iter()
        .filter_map(|name| load_skill(&mut cx, name))
        .collect();
    let subagents = load_subagents(&mut cx, &agent, &all_tools);
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

/// Checks `agent.toml`'s limits and that every tool it lists has a definition file.
fn check_agent(cx: &mut Ctx, agent: &AgentToml, all_tools: &[ToolDef]) {
    if agent.limits.max_turns == 0 {
        cx.err("agent.toml", Some("limits.max_turns"), "must be at least 1");
    }
    if agent.limits.timeout_sec.is_nan() || agent.limits.timeout_sec <= 0.0 {
        cx.err("agent.toml", Some("limits.timeout_sec"), "must be positive");
    }
    for name in &agent.tools {
        if !all_tools.iter().any(|t: &ToolDef| &t.name == name) {
            let file = format!("tools/{name}.toml");
            if !cx.root.join(&file).is_file() {
                cx.err(
                    "agent.toml",
                    Some("tools"),
                    format!("tool {name:?} is listed but {file} does not exist"),
                );
            }
        }
    }
}

/// Loads the subagents `agent.toml` lists, checking each has a prompt and only known tools.
fn load_subagents(cx: &mut Ctx, agent: &AgentToml, all_tools: &[ToolDef]) -> Vec<SubagentDef> {
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
    subagents
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
