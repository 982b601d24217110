//! Loading each component of a harness directory: tools, middleware, skills, memory, and
//! the registry warnings (files present but not listed in `agent.toml`).

use serde_json::Value;

use crate::middleware::MiddlewareKind;
use crate::tools::{self, ToolImpl};

use super::*;

pub(super) fn load_tool(cx: &mut Ctx, stem: &str) -> Option<ToolDef> {
    let file = format!("tools/{stem}.toml");
    let raw: RawTool = cx.toml(&file)?;
    let before = cx.problems.len();
    if raw.name != stem {
        cx.err(
            &file,
            Some("name"),
            format!(
                "is {:?} but the file is named {stem}.toml; they must match",
                raw.name
            ),
        );
    }
    if raw.description.trim().is_empty() {
        cx.err(&file, Some("description"), "is empty");
    }
    let schema = toml_to_json(&raw.input_schema);
    if let Err(e) = jsonschema::meta::validate(&schema) {
        cx.err(
            &file,
            Some("input_schema"),
            format!("is not a valid JSON Schema: {e}"),
        );
    } else if schema.get("type").and_then(Value::as_str) != Some("object") {
        cx.err(&file, Some("input_schema.type"), "must be \"object\"");
    }
    let params = raw
        .params
        .as_ref()
        .map(toml_to_json)
        .unwrap_or(Value::Object(Default::default()));
    let implementation = match ToolImpl::parse(&raw.implementation) {
        Ok(i) => i,
        Err(e) => {
            cx.err(&file, Some("implementation"), e);
            return None;
        }
    };
    match &implementation {
        ToolImpl::Script(p) => {
            if !safe_rel(p) {
                cx.err(
                    &file,
                    Some("implementation"),
                    format!("script path {p:?} must be relative to the harness, without .."),
                );
            } else if !cx.root.join(p).is_file() {
                cx.err(
                    &file,
                    Some("implementation"),
                    format!("script {p} does not exist"),
                );
            }
        }
        ToolImpl::Builtin(b) => {
            if let Err(e) = tools::check_params(*b, &params) {
                cx.err(&file, Some("params"), e);
            }
        }
    }
    (cx.problems.len() == before).then_some(ToolDef {
        name: raw.name,
        description: raw.description,
        input_schema: schema,
        implementation,
        params,
    })
}

pub(super) fn load_middleware(cx: &mut Ctx, name: &str) -> Option<MiddlewareDef> {
    let file = format!("middleware/{name}.toml");
    if !cx.root.join(&file).is_file() {
        cx.err(
            "agent.toml",
            Some("middleware"),
            format!("middleware {name:?} is listed but {file} does not exist"),
        );
        return None;
    }
    let raw: RawMiddleware = cx.toml(&file)?;
    if let Some(n) = &raw.name {
        if n != name {
            cx.err(
                &file,
                Some("name"),
                format!("is {n:?} but the file is named {name}.toml"),
            );
        }
    }
    if raw.hooks.is_empty() {
        cx.err(&file, Some("hooks"), "lists no hook point");
    }
    let params = raw
        .params
        .as_ref()
        .map(toml_to_json)
        .unwrap_or(Value::Object(Default::default()));
    let kind = match MiddlewareKind::parse(&raw.kind) {
        Ok(k) => k,
        Err(e) => {
            cx.err(&file, Some("kind"), e);
            return None;
        }
    };
    match &kind {
        MiddlewareKind::Script(p) => {
            if !safe_rel(p) {
                cx.err(
                    &file,
                    Some("kind"),
                    format!("script path {p:?} must be relative to the harness, without .."),
                );
            } else if !cx.root.join(p).is_file() {
                cx.err(&file, Some("kind"), format!("script {p} does not exist"));
            }
        }
        MiddlewareKind::Builtin(b) => {
            for h in &raw.hooks {
                if !b.hooks().contains(h) {
                    cx.err(
                        &file,
                        Some("hooks"),
                        format!(
                            "builtin {} cannot run at {}; it supports {}",
                            b.name(),
                            h.as_str(),
                            b.hooks()
                                .iter()
                                .map(|x| x.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    );
                }
            }
            if let Err(e) = crate::builtin_mw::check_params(*b, &params) {
                cx.err(&file, Some("params"), e);
            }
        }
    }
    Some(MiddlewareDef {
        name: name.to_string(),
        hooks: raw.hooks,
        kind,
        params,
    })
}

/// Splits `---\nkey: value\n---\nbody` front matter.
pub fn parse_front_matter(text: &str) -> Option<(Vec<(String, String)>, String)> {
    let rest = text.strip_prefix("---")?;
    let rest = rest
        .strip_prefix('\n')
        .or_else(|| rest.strip_prefix("\r\n"))?;
    let end = rest.find("\n---")?;
    let head = &rest[..end];
    let body = rest[end + 4..]
        .trim_start_matches(['-'])
        .trim_start()
        .to_string();
    let fields = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| {
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|x| x.strip_suffix('"'))
                .or_else(|| v.strip_prefix('\'').and_then(|x| x.strip_suffix('\'')))
                .unwrap_or(v);
            (k.trim().to_string(), v.to_string())
        })
        .collect();
    Some((fields, body))
}

pub(super) fn load_skill(cx: &mut Ctx, name: &str) -> Option<Skill> {
    let file = format!("skills/{name}/SKILL.md");
    if !cx.root.join(&file).is_file() {
        cx.err(
            "agent.toml",
            Some("skills"),
            format!("skill {name:?} is listed but {file} does not exist"),
        );
        return None;
    }
    let text = cx.read(&file)?;
    let Some((fields, body)) = parse_front_matter(&text) else {
        cx.err(
            &file,
            None,
            "must start with front matter: ---\\nname: ...\\ndescription: ...\\n---",
        );
        return None;
    };
    let get = |k: &str| fields.iter().find(|(a, _)| a == k).map(|(_, v)| v.clone());
    let (Some(n), Some(d)) = (get("name"), get("description")) else {
        cx.err(
            &file,
            Some("front matter"),
            "needs both `name:` and `description:`",
        );
        return None;
    };
    if n != name {
        cx.err(
            &file,
            Some("name"),
            format!("is {n:?} but the directory is skills/{name}/"),
        );
    }
    Some(Skill {
        name: n,
        description: d,
        body,
    })
}

pub(super) fn load_memory(cx: &mut Ctx) -> Vec<(String, String)> {
    list_stems(cx.root, "memory", "md")
        .into_iter()
        .filter_map(|s| {
            let rel = format!("memory/{s}.md");
            cx.read(&rel).map(|t| (format!("{s}.md"), t))
        })
        .collect()
}

pub(super) fn registry_warnings(cx: &mut Ctx, agent: &AgentToml, tools: &[ToolDef]) {
    let root = cx.root.to_path_buf();
    for t in tools {
        let used_by_sub = agent.subagents.iter().any(|s| {
            std::fs::read_to_string(root.join(format!("subagents/{s}.toml")))
                .is_ok_and(|x| x.contains(&t.name))
        });
        if !agent.tools.contains(&t.name) && !used_by_sub {
            cx.warn(
                &format!("tools/{}.toml", t.name),
                "not listed in agent.toml tools: the agent cannot use it",
            );
        }
    }
    for m in list_stems(&root, "middleware", "toml") {
        if !agent.middleware.contains(&m) {
            cx.warn(
                &format!("middleware/{m}.toml"),
                "not listed in agent.toml middleware: it never runs",
            );
        }
    }
    let skill_dirs: Vec<String> = std::fs::read_dir(root.join("skills"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("SKILL.md").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    for s in skill_dirs {
        if !agent.skills.contains(&s) {
            cx.warn(
                &format!("skills/{s}/SKILL.md"),
                "not listed in agent.toml skills: the agent never sees it",
            );
        }
    }
    for s in list_stems(&root, "subagents", "toml") {
        if !agent.subagents.contains(&s) {
            cx.warn(
                &format!("subagents/{s}.toml"),
                "not listed in agent.toml subagents: it cannot be delegated to",
            );
        }
    }
    let has = |k: tools::BuiltinTool| {
        agent.tools.iter().any(|n| {
            tools
                .iter()
                .any(|t| &t.name == n && t.implementation == ToolImpl::Builtin(k))
        })
    };
    if !agent.skills.is_empty() && !has(tools::BuiltinTool::LoadSkill) {
        cx.warn(
            "agent.toml",
            "skills are enabled but no builtin:load_skill tool is: the agent cannot load them",
        );
    }
    if !agent.subagents.is_empty() && !has(tools::BuiltinTool::Delegate) {
        cx.warn(
            "agent.toml",
            "sub-agents are enabled but no builtin:delegate tool is: the agent cannot call them",
        );
    }
}
