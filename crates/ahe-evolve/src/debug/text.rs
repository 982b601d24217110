//! Model-facing text of the debugger and evolve agents: prompts, tool descriptions and
//! tool feedback all come from the template files under `templates/`, rendered here with
//! values formatted for people (`0.50`, `n/a`, `a, b`), never Rust debug output.

use std::sync::LazyLock;

use minijinja::value::Value;

/// `templates/tools.toml`: tool descriptions and answers, by agent and tool.
static TOOLS: LazyLock<toml::Table> = LazyLock::new(|| {
    toml::from_str(include_str!("../../templates/tools.toml")).expect("templates/tools.toml parses")
});

use ahe_harness::text::render;

/// The template at `section.tool.key` of `tools.toml` (e.g. `evolve`, `edit_file`, `edited`).
fn entry(path: &[&str]) -> &'static str {
    let mut v: Option<&toml::Value> = None;
    for (i, p) in path.iter().enumerate() {
        v = if i == 0 {
            TOOLS.get(*p)
        } else {
            v.and_then(|x| x.get(*p))
        };
    }
    v.and_then(|x| x.as_str())
        .unwrap_or_else(|| panic!("templates/tools.toml has no {}", path.join(".")))
}

/// The description of an agent's tool (`agent`: `debugger` or `evolve`).
pub fn describe(agent: &str, tool: &str) -> String {
    entry(&[agent, tool, "description"]).to_string()
}

/// A tool's answer `key`, rendered with `ctx`.
pub fn say(agent: &str, tool: &str, key: &str, ctx: Value) -> String {
    render(entry(&[agent, tool, key]), ctx)
}

/// A message of the host agent loop (`[agent]` of `tools.toml`).
pub fn agent_says(key: &str, ctx: Value) -> String {
    render(entry(&["agent", key]), ctx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_a_description() {
        for (agent, tools) in TOOLS.iter().filter(|(k, _)| *k != "agent") {
            for (tool, t) in tools.as_table().unwrap() {
                let d = t.get("description").and_then(|d| d.as_str());
                assert!(d.is_some_and(|d| d.len() > 10), "{agent}.{tool}");
            }
        }
    }
}
