//! Model-facing text of the runtime: tool feedback, observations and middleware defaults
//! come from `templates/messages.toml`, rendered with values formatted for people
//! (`0.50`, `n/a`, `a, b`) — never Rust debug output. Also the template environment the
//! other crates render their prompts in.

use std::sync::LazyLock;

use minijinja::value::Value;

/// `templates/messages.toml`, by section and key.
static MESSAGES: LazyLock<toml::Table> = LazyLock::new(|| {
    toml::from_str(include_str!("../templates/messages.toml"))
        .expect("templates/messages.toml parses")
});

/// The environment every model-facing template renders in: trimmed blocks, and the
/// filters `num` (a number as `0.50`, none as `n/a`) and `names` (a list as `a, b`, empty
/// as `none`).
pub fn env() -> minijinja::Environment<'static> {
    let mut env = minijinja::Environment::new();
    env.set_trim_blocks(true);
    env.add_filter("num", num);
    env.add_filter("names", names);
    env
}

/// Renders a template; a template error is shown in place (the text still reaches the model).
pub fn render(tpl: &str, ctx: Value) -> String {
    env()
        .render_str(tpl, ctx)
        .unwrap_or_else(|e| format!("{tpl}\n[template error: {e}]"))
}

/// A number for people: `0.50`; none or undefined is `n/a`.
pub fn num(v: Value) -> String {
    if v.is_none() || v.is_undefined() {
        return "n/a".into();
    }
    match f64::try_from(v) {
        Ok(x) => format!("{x:.2}"),
        Err(_) => "n/a".into(),
    }
}

/// A list for people: `a, b`; empty is `none`.
pub fn names(v: Value) -> String {
    let items: Vec<String> = v
        .try_iter()
        .map(|it| it.map(|x| x.to_string()).collect())
        .unwrap_or_default();
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}

/// The raw template `section.key` of `messages.toml` (a missing key is a bug: panics).
pub fn template(section: &str, key: &str) -> &'static str {
    MESSAGES
        .get(section)
        .and_then(|s| s.get(key))
        .and_then(|v| v.as_str())
        .unwrap_or_else(|| panic!("templates/messages.toml has no {section}.{key}"))
}

/// The message `section.key`, rendered with `ctx`.
pub fn say(section: &str, key: &str, ctx: Value) -> String {
    render(template(section, key), ctx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use minijinja::context;

    #[test]
    fn values_are_formatted_for_people() {
        assert_eq!(render("{{ x | num }}", context! { x => 0.5 }), "0.50");
        assert_eq!(render("{{ x | num }}", context! { x => () }), "n/a");
        assert_eq!(render("{{ y | num }}", context! {}), "n/a");
        let empty: Vec<String> = vec![];
        assert_eq!(render("{{ x | names }}", context! { x => empty }), "none");
        assert_eq!(
            render("{{ x | names }}", context! { x => vec!["a", "b"] }),
            "a, b"
        );
    }

    #[test]
    fn every_message_renders_without_error() {
        for (section, keys) in MESSAGES.iter() {
            for (key, _) in keys.as_table().unwrap() {
                let out = say(section, key, context! {});
                assert!(!out.contains("[template error"), "{section}.{key}: {out}");
            }
        }
    }
}
