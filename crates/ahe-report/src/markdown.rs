//! `report.md`: the run's view (the one `report.html` renders) as Markdown tables, laid out
//! by `templates/report/report.md` and `iteration.md`, with the charts as SVG files under
//! `report/` (written by [`super::generate`]).

use std::sync::OnceLock;

use minijinja::Environment;

use super::format::verdict_class;
use super::href;
use super::model::RunReport;
use super::view::run_view;

/// Escapes text for a Markdown table cell or line: HTML specials, pipes, newlines,
/// backticks and emphasis markers (model-written text must not become markup).
pub fn md(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '|' => o.push_str("\\|"),
            '\n' | '\r' => o.push(' '),
            '`' | '*' | '_' | '[' | ']' | '#' | '\\' => {
                o.push('\\');
                o.push(c);
            }
            _ => o.push(c),
        }
    }
    o
}

fn list(v: Vec<String>) -> String {
    if v.is_empty() {
        "–".into()
    } else {
        v.iter().map(|s| md(s)).collect::<Vec<_>>().join(", ")
    }
}

fn emoji(class: String) -> &'static str {
    match class.as_str() {
        "c-pass" => "🟩",
        "c-partial" => "🟨",
        "c-fail" => "🟥",
        "c-infra" => "⬜",
        "c-running" => "🟦",
        _ => "·",
    }
}

fn verdict_mark(v: String) -> &'static str {
    match verdict_class(&v).as_str() {
        "v-effective" => "✅",
        "v-partially-effective" => "☑️",
        "v-mixed" => "⚠️",
        "v-harmful" => "❌",
        "v-ineffective" => "➖",
        _ => "…",
    }
}

/// The Markdown templates (`report.md`, `iteration.md`), with trimmed blocks (a block tag on
/// its own line writes nothing) and the filters `md`, `mdlist`, `emoji`, `verdict_mark`, `href`.
fn env() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut e = Environment::new();
        e.set_trim_blocks(true);
        e.set_lstrip_blocks(true);
        let t = [
            ("report.md", include_str!("../templates/report/report.md")),
            (
                "iteration.md",
                include_str!("../templates/report/iteration.md"),
            ),
        ];
        for (name, src) in t {
            e.add_template(name, src)
                .unwrap_or_else(|err| panic!("report template {name}: {err}"));
        }
        e.add_filter("md", |s: String| md(&s));
        e.add_filter("mdlist", list);
        e.add_filter("emoji", emoji);
        e.add_filter("verdict_mark", verdict_mark);
        e.add_filter("href", |s: String| href(&s));
        e
    })
}

/// Renders `report.md` from the run's view (`templates/report/report.md`). Chart images are
/// expected at `report/*.svg`.
pub fn render(run: &RunReport, pages: bool) -> String {
    let view = run_view(run, pages);
    env()
        .get_template("report.md")
        .and_then(|t| t.render(minijinja::Value::from_serialize(&view)))
        .unwrap_or_else(|e| format!("# report.md could not be rendered\n\n{e:#}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_escaping_neutralises_markup() {
        assert_eq!(
            md("a|b\n<script>`x`*y*"),
            "a\\|b &lt;script&gt;\\`x\\`\\*y\\*"
        );
        assert_eq!(md("[link](http://x)"), "\\[link\\](http://x)");
    }
}
