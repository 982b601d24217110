//! `ahe validate` logic: the seed is valid; each kind of broken harness names file and field.

use std::path::{Path, PathBuf};

fn seed() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harness-seed")
}

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), to).unwrap();
        }
    }
}

/// Problems of the seed with some files replaced (an empty text deletes the file).
fn problems(files: &[(&str, &str)]) -> Vec<String> {
    let d = tempfile::tempdir().unwrap();
    copy_dir(&seed(), d.path());
    for (rel, text) in files {
        let p = d.path().join(rel);
        if text.is_empty() {
            std::fs::remove_file(&p).unwrap();
        } else {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
    }
    match ahe_harness::load(d.path()) {
        Ok(_) => vec![],
        Err(ps) => ps.iter().map(|p| p.to_string()).collect(),
    }
}

fn agent_with(from: &str, to: &str) -> String {
    std::fs::read_to_string(seed().join("agent.toml"))
        .unwrap()
        .replace(from, to)
}

#[test]
fn the_seed_is_valid_and_renders() {
    let h = ahe_harness::load(&seed()).unwrap();
    assert_eq!(h.agent.tools, vec!["run_shell"]);
    assert!(h.warnings.is_empty(), "{:?}", h.warnings);
    let vars = ahe_harness::prompt::sample_vars(&h);
    let text = ahe_harness::prompt::render(&h.system_prompt, &vars).unwrap();
    assert!(
        text.contains("/app") && text.contains("`run_shell`"),
        "{text}"
    );
}

#[test]
fn the_seed_prompt_tells_the_agent_its_time_and_turn_limits() {
    let h = ahe_harness::load(&seed()).unwrap();
    let mut vars = ahe_harness::prompt::sample_vars(&h);
    (vars.timeout_sec, vars.max_turns) = (1830, 40);
    let text = ahe_harness::prompt::render(&h.system_prompt, &vars).unwrap();
    assert!(
        text.contains("30 min 30 s of wall-clock time and 40 turns"),
        "{text}"
    );
    (vars.timeout_sec, vars.max_turns) = (0, 12);
    let text = ahe_harness::prompt::render(&h.system_prompt, &vars).unwrap();
    assert!(text.contains("Your limits: 12 turns."), "{text}");
    assert!(!text.contains("wall-clock"), "{text}");
}

#[test]
fn invalid_toml_names_file_and_line() {
    let p = problems(&[(
        "tools/run_shell.toml",
        "name = \"run_shell\"\ndescription = [oops\n",
    )]);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].starts_with("tools/run_shell.toml: line 2"), "{p:?}");
}

#[test]
fn unknown_key_and_bad_value_name_the_field() {
    let p = problems(&[(
        "agent.toml",
        &agent_with("max_turns = 100", "max_turns = 100\nmax_turnz = 3"),
    )]);
    assert!(
        p.iter()
            .any(|x| x.starts_with("agent.toml") && x.contains("max_turnz")),
        "{p:?}"
    );
    let p = problems(&[(
        "agent.toml",
        &agent_with("tool_protocol = \"native\"", "tool_protocol = \"xml\""),
    )]);
    assert!(
        p.iter()
            .any(|x| x.contains("agent.toml") && x.contains("xml")),
        "{p:?}"
    );
}

#[test]
fn missing_referenced_files_are_named() {
    let p = problems(&[(
        "agent.toml",
        &agent_with(
            "tools = [\"run_shell\"]",
            "tools = [\"run_shell\", \"grep\"]",
        ),
    )]);
    assert_eq!(
        p,
        vec!["agent.toml: tools: tool \"grep\" is listed but tools/grep.toml does not exist"]
    );

    let p = problems(&[("system_prompt.md", "")]);
    assert!(
        p.iter()
            .any(|x| x.starts_with("system_prompt.md: cannot read")),
        "{p:?}"
    );

    let script_tool = "name = \"fmt\"\ndescription = \"format\"\nimplementation = \"script:tools/fmt.py\"\n[input_schema]\ntype = \"object\"\n";
    let p = problems(&[
        (
            "agent.toml",
            &agent_with(
                "tools = [\"run_shell\"]",
                "tools = [\"run_shell\", \"fmt\"]",
            ),
        ),
        ("tools/fmt.toml", script_tool),
    ]);
    assert_eq!(
        p,
        vec!["tools/fmt.toml: implementation: script tools/fmt.py does not exist"]
    );

    let p = problems(&[
        (
            "agent.toml",
            &agent_with("skills = []", "skills = [\"git\"]"),
        ),
        ("skills/git/SKILL.md", "no front matter"),
    ]);
    assert!(
        p[0].starts_with("skills/git/SKILL.md") && p[0].contains("front matter"),
        "{p:?}"
    );

    let p = problems(&[(
        "agent.toml",
        &agent_with("middleware = []", "middleware = [\"guard\"]"),
    )]);
    assert!(
        p[0].contains("middleware/guard.toml does not exist"),
        "{p:?}"
    );
}

#[test]
fn invalid_schema_is_named() {
    let bad = std::fs::read_to_string(seed().join("tools/run_shell.toml"))
        .unwrap()
        .replace("type = \"string\"", "type = \"strnig\"");
    let p = problems(&[("tools/run_shell.toml", &bad)]);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].starts_with("tools/run_shell.toml: input_schema: is not a valid JSON Schema"),
        "{p:?}"
    );
}

#[test]
fn template_and_middleware_errors_are_named() {
    let p = problems(&[("system_prompt.md", "Hello {{ no_such_var }}")]);
    assert!(
        p[0].starts_with("system_prompt.md: does not render"),
        "{p:?}"
    );
    let guard = "hooks = [\"after_tool\"]\nkind = \"builtin:command_guard\"\n[params]\npatterns = [\"(\"]\n";
    let p = problems(&[
        (
            "agent.toml",
            &agent_with("middleware = []", "middleware = [\"guard\"]"),
        ),
        ("middleware/guard.toml", guard),
    ]);
    assert!(
        p.iter()
            .any(|x| x.starts_with("middleware/guard.toml: hooks:")
                && x.contains("cannot run at after_tool; it supports before_tool")),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|x| x.starts_with("middleware/guard.toml: params:") && x.contains("regex")),
        "{p:?}"
    );
}

#[test]
fn unregistered_components_are_warnings() {
    let d = tempfile::tempdir().unwrap();
    copy_dir(&seed(), d.path());
    std::fs::create_dir_all(d.path().join("skills/x")).unwrap();
    std::fs::write(
        d.path().join("skills/x/SKILL.md"),
        "---\nname: x\ndescription: y\n---\nbody",
    )
    .unwrap();
    let h = ahe_harness::load(d.path()).unwrap();
    assert_eq!(h.warnings.len(), 1);
    assert!(h.warnings[0]
        .to_string()
        .contains("skills/x/SKILL.md: not listed"));
}
