//! Rendering prompts: the harness's system prompt template and the runtime's protocol texts.

use minijinja::{context, Environment, UndefinedBehavior};
use serde::Serialize;
use serde_json::Value;

use crate::model::{Harness, Problem};

const JSON_PROTOCOL: &str = include_str!("../templates/json_protocol.md");
const JSON_FORMAT_ERROR: &str = include_str!("../templates/json_format_error.md");
const JSON_OBSERVATION: &str = include_str!("../templates/json_observation.md");

/// A tool as shown in prompts.
#[derive(Debug, Clone, Serialize)]
pub struct ToolView {
    /// Tool name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Arguments schema as compact JSON.
    pub schema: String,
}

/// What a system prompt template may use.
#[derive(Debug, Clone, Serialize)]
pub struct PromptVars {
    /// The task's working directory.
    pub working_dir: String,
    /// Today's date (YYYY-MM-DD).
    pub date: String,
    /// Tools offered.
    pub tools: Vec<ToolView>,
    /// Skill index: name and description only.
    pub skills: Vec<(String, String)>,
    /// Sub-agents: name and description.
    pub subagents: Vec<(String, String)>,
    /// Long-term memory, all memory/*.md joined.
    pub memory: String,
    /// The agent's wall-time limit in whole seconds (the task's limit and the harness's,
    /// whichever is lower; a sub-agent's own when it is lower still).
    pub timeout_sec: u64,
    /// The agent's turn limit (after `[agent] max_turns` of the run config).
    pub max_turns: u32,
}

fn env() -> Environment<'static> {
    let mut e = Environment::new();
    e.set_undefined_behavior(UndefinedBehavior::Strict);
    e.set_trim_blocks(true);
    e
}

fn pairs(v: &[(String, String)]) -> Vec<Value> {
    v.iter()
        .map(|(n, d)| serde_json::json!({"name": n, "description": d}))
        .collect()
}

/// Renders a prompt template (system_prompt.md or a sub-agent prompt) with the variables.
pub fn render(template: &str, vars: &PromptVars) -> Result<String, String> {
    env()
        .render_str(
            template,
            context! {
                working_dir => vars.working_dir,
                date => vars.date,
                tools => vars.tools,
                skills => pairs(&vars.skills),
                subagents => pairs(&vars.subagents),
                memory => vars.memory,
                timeout_sec => vars.timeout_sec,
                max_turns => vars.max_turns,
            },
        )
        .map_err(|e| {
            let mut s = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(c) = src {
                s.push_str(&format!(": {c}"));
                src = c.source();
            }
            s
        })
}

/// The protocol section appended to the system prompt for the JSON-in-text protocol.
pub fn json_protocol(tools: &[ToolView]) -> String {
    let schema = tools
        .first()
        .map(|t| serde_json::from_str(&t.schema).unwrap_or(Value::Null))
        .unwrap_or(Value::Null);
    let (task, args) = ahe_model::local::example_turn(&schema);
    env()
        .render_str(
            JSON_PROTOCOL,
            context! {
                tools => tools,
                example_task => task,
                example_args => ahe_model::local::format_value(&args),
            },
        )
        .unwrap_or_default()
}

/// Feedback for a reply that had no readable JSON action.
pub fn json_format_error(error: &str, tool_names: &[String]) -> String {
    env()
        .render_str(
            JSON_FORMAT_ERROR,
            context! { error => error, tool_names => tool_names.join(", ") },
        )
        .unwrap_or_default()
}

/// A tool observation as a user message, for the JSON-in-text protocol.
pub fn json_observation(name: &str, observation: &str) -> String {
    env()
        .render_str(
            JSON_OBSERVATION,
            context! { name => name, observation => observation },
        )
        .unwrap_or_default()
}

/// Sample variables for checking that templates render.
pub fn sample_vars(h: &Harness) -> PromptVars {
    PromptVars {
        working_dir: "/app".into(),
        date: "2026-01-01".into(),
        tools: h
            .tools()
            .iter()
            .map(|t| ToolView {
                name: t.name.clone(),
                description: t.description.clone(),
                schema: t.input_schema.to_string(),
            })
            .collect(),
        skills: h
            .skills
            .iter()
            .map(|s| (s.name.clone(), s.description.clone()))
            .collect(),
        subagents: h
            .subagents
            .iter()
            .map(|s| (s.name.clone(), s.description.clone()))
            .collect(),
        memory: h
            .memory
            .iter()
            .map(|(_, t)| t.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        timeout_sec: h.agent.limits.timeout_sec.max(0.0) as u64,
        max_turns: h.agent.limits.max_turns,
    }
}

/// Renders every template of a harness with sample variables; names each one that fails.
pub fn check_templates(h: &Harness) -> Result<(), Vec<Problem>> {
    let vars = sample_vars(h);
    let mut problems = Vec::new();
    if h.system_prompt.trim().is_empty() {
        problems.push(Problem {
            file: "system_prompt.md".into(),
            field: None,
            message: "is empty".into(),
        });
    } else if let Err(e) = render(&h.system_prompt, &vars) {
        problems.push(Problem {
            file: "system_prompt.md".into(),
            field: None,
            message: format!("does not render: {e} (variables: working_dir, date, tools, skills, subagents, memory, timeout_sec, max_turns)"),
        });
    }
    for s in &h.subagents {
        if let Err(e) = render(&s.prompt, &vars) {
            problems.push(Problem {
                file: format!("subagents/{}.toml", s.name),
                field: Some("prompt".into()),
                message: format!("does not render: {e}"),
            });
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}
