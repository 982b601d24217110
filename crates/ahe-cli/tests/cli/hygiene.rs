//! Checks on the source (docs/codebase.md "Checks on the repository itself"): functions of
//! more than 80 lines in `src` (a ratchet: it fails when the count grows past the number
//! recorded here; when a change brings it down, lower the number with it), and run-directory
//! file names spelled outside the crates that own them (none). Each test lists what it finds
//! with file and line.

use std::path::{Path, PathBuf};

/// A function longer than this many lines (its `fn` line to its closing brace) is long.
const MAX_FN_LINES: usize = 80;

/// File names (and path pieces) of the run directory and of an evaluation directory, and
/// the `../` chains of report pages that climb back to the run directory.
const RUNDIR_NAMES: &[&str] = &[
    "run.toml",
    "journal.jsonl",
    "best.json",
    "final.json",
    "baseline.json",
    "evaluated.txt",
    "scores.json",
    "result.json",
    "trace.jsonl",
    "trace.clean.json",
    "agent.log",
    "judge.json",
    "change_evaluation.json",
    "evidence.json",
    "manifest.json",
    "proposed.json",
    "snapshots.json",
    "variants.json",
    "patterns.json",
    "debug.json",
    "overview.md",
    "diff.patch",
    "summary.md",
    "history.md",
    "pulls.jsonl",
    "report.html",
    "report.md",
    "report/trials",
    "iterations/",
    "analysis/",
    "model-cache",
    "../../../",
];

/// The repository checked: this one, or the checkout `AHE_CHECK_ROOT` names (to measure
/// another branch's tree with the same test binary).
pub(crate) fn root() -> PathBuf {
    std::env::var_os("AHE_CHECK_ROOT").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."),
        PathBuf::from,
    )
}

/// Every `.rs` file below `dir`, sorted.
pub(crate) fn rs_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The non-test source files of every crate: `crates/*/src/**/*.rs` minus the files that
/// hold only tests (`*_tests.rs`, `tests.rs`, `tests/` folders below `src`).
fn src_files() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for c in std::fs::read_dir(root().join("crates")).unwrap().flatten() {
        for f in rs_files(&c.path().join("src")) {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            let in_tests_dir = f.components().any(|c| c.as_os_str() == "tests");
            if !(name.ends_with("_tests.rs") || name == "tests.rs" || in_tests_dir) {
                v.push(f);
            }
        }
    }
    v.sort();
    v
}

fn rel(p: &Path) -> String {
    let r = root().canonicalize().unwrap();
    let p = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    p.strip_prefix(&r).unwrap_or(&p).display().to_string()
}

/// One lexed token of interest: a string literal (its text) at a line.
#[derive(Debug)]
struct StrLit {
    line: usize,
    text: String,
}

/// The code of a Rust file with comments blanked and string and char literals emptied
/// (newlines kept, so lines still count), plus the string literals themselves. A
/// `#[cfg(test)]` item with a body (`mod tests { … }`) and everything after it is cut.
fn lex(text: &str) -> (String, Vec<StrLit>) {
    let text = cut_tests(text);
    let b = text.as_bytes();
    let (mut code, mut lits) = (String::with_capacity(b.len()), Vec::new());
    let (mut i, mut line) = (0, 1);
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    while i < b.len() {
        let c = b[i];
        let prev_ident = i > 0 && ident(b[i - 1]);
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == b'\n' {
                        code.push('\n');
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if let Some((start, h)) = raw_string_at(b, i).filter(|_| !prev_ident) {
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', h))
                .collect();
            let end = find(&b[start..], &close).map_or(b.len(), |e| start + e);
            let body = &text[start..end];
            lits.push(StrLit {
                line,
                text: body.to_string(),
            });
            let nl = body.matches('\n').count();
            line += nl;
            code.push_str("\"\"");
            code.extend(std::iter::repeat_n('\n', nl));
            i = (end + close.len()).min(b.len());
        } else if c == b'"' {
            let start = i + 1;
            let mut j = start;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            let body = &text[start..j.min(b.len())];
            lits.push(StrLit {
                line,
                text: body.to_string(),
            });
            let nl = body.matches('\n').count();
            line += nl;
            code.push_str("\"\"");
            code.extend(std::iter::repeat_n('\n', nl));
            i = j + 1;
        } else if c == b'\'' {
            // a char literal ('x', '\n', '\u{1F600}', '"'), else a lifetime ('a)
            let len = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..].iter().position(|&x| x == b'\'').map(|p| p + 3)
            } else {
                let ch = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + ch) == Some(&b'\'')).then_some(ch + 2)
            };
            match len {
                Some(n) => {
                    code.push_str("' '");
                    i += n;
                }
                None => {
                    code.push('\'');
                    i += 1;
                }
            }
        } else {
            let ch = text[i..].chars().next().unwrap();
            if ch == '\n' {
                line += 1;
            }
            code.push(ch);
            i += ch.len_utf8();
        }
    }
    (code, lits)
}

/// A raw string (`r"…"`, `r#"…"#`, `br"…"`) opening at `i`: where its text starts and how
/// many `#` close it.
fn raw_string_at(b: &[u8], i: usize) -> Option<(usize, usize)> {
    let s = match b.get(i..i + 2)? {
        [b'r', _] => i + 1,
        [b'b', b'r'] => i + 2,
        _ => return None,
    };
    let h = b[s..].iter().take_while(|&&x| x == b'#').count();
    (b.get(s + h) == Some(&b'"')).then_some((s + h + 1, h))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The text before the first `#[cfg(test)]` whose item has a body (`mod tests {`); a
/// `#[cfg(test)] mod x_tests;` (a file of its own) does not cut.
fn cut_tests(text: &str) -> &str {
    let mut off = 0;
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    for (n, l) in lines.iter().enumerate() {
        if l.trim() == "#[cfg(test)]" {
            let next = lines[n + 1..].iter().find(|x| !x.trim().is_empty());
            if next.is_some_and(|x| x.trim_end().ends_with('{')) {
                return &text[..off];
            }
        }
        off += l.len();
    }
    text
}

/// The functions of a file with more than `max` lines: `(name, first line, lines)`.
fn long_functions(text: &str, max: usize) -> Vec<(String, usize, usize)> {
    let (code, _) = lex(text);
    let fn_re = regex::Regex::new(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)").unwrap();
    let b = code.as_bytes();
    let line_at = |pos: usize| code[..pos].matches('\n').count() + 1;
    let mut out = Vec::new();
    for m in fn_re.captures_iter(&code) {
        let at = m.get(0).unwrap().end();
        // the body opens at the first `{` before any `;` (a declaration without a body)
        let Some(open) = b[at..]
            .iter()
            .position(|&c| c == b'{' || c == b';')
            .map(|p| at + p)
            .filter(|&p| b[p] == b'{')
        else {
            continue;
        };
        let mut depth = 0usize;
        let mut close = None;
        for (k, &c) in b[open..].iter().enumerate() {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(open + k);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(close) = close else { continue };
        let (first, last) = (line_at(m.get(0).unwrap().start()), line_at(close));
        let lines = last - first + 1;
        if lines > max {
            out.push((m[1].to_string(), first, lines));
        }
    }
    out
}

#[test]
fn the_function_counter_measures_bodies_not_comments_or_strings() {
    let body: String = (0..81).map(|i| format!("    let x{i} = {i};\n")).collect();
    let src = format!(
        "// fn commented() {{\nfn long() {{\n{body}}}\nfn short() {{ let s = \"{{ }} fn x() {{\"; let c = '{{'; }}\n\
         trait T {{ fn decl(&self); }}\n#[cfg(test)]\nmod tests {{\n    fn test_long() {{\n{body}    }}\n}}\n"
    );
    let found = long_functions(&src, MAX_FN_LINES);
    assert_eq!(found, vec![("long".to_string(), 2, 83)], "{src}");
    assert!(long_functions(&src, 83).is_empty());
}

/// No function in `crates/*/src` (tests excluded) is longer than [`MAX_FN_LINES`] lines: a
/// long one is split into named steps, each readable alone.
#[test]
fn no_function_in_src_is_over_80_lines() {
    let mut all = Vec::new();
    for f in src_files() {
        let text = std::fs::read_to_string(&f).unwrap();
        for (name, line, n) in long_functions(&text, MAX_FN_LINES) {
            all.push(format!("{}:{line}: fn {name}: {n} lines", rel(&f)));
        }
    }
    assert!(
        all.is_empty(),
        "{} functions have more than {MAX_FN_LINES} lines (split each into named steps):\n{}",
        all.len(),
        all.join("\n")
    );
}

/// Whether a file may spell run-directory names: the crates that own the layouts.
fn owns_layout(rel: &str) -> bool {
    rel.starts_with("crates/ahe-rundir/") || rel == "crates/ahe-bench/src/layout.rs"
}

/// String literals naming run-directory files in one file's code: `(line, literal)`. Template
/// names (`get_template`, `include_str!`) are not run-directory paths, and neither are
/// messages that mention a file (a literal with a space in it).
fn rundir_literals(text: &str) -> Vec<(usize, String)> {
    let (_, lits) = lex(text);
    let lines: Vec<&str> = text.lines().collect();
    lits.into_iter()
        .filter(|l| RUNDIR_NAMES.iter().any(|n| l.text.contains(n)))
        .filter(|l| !l.text.contains(char::is_whitespace))
        .filter(|l| {
            // the literal's line and the next (rustfmt puts `include_str!` under its name)
            let src = lines[l.line - 1..lines.len().min(l.line + 1)].concat();
            !(src.contains("get_template(")
                || src.contains("include_str!(")
                || src.contains("templates/"))
        })
        .map(|l| (l.line, l.text))
        .collect()
}

#[test]
fn the_literal_finder_sees_code_not_comments_or_templates() {
    let src = [
        "// \"scores.json\"",
        "fn f() {",
        "    let a = dir.join(\"scores.json\");",
        "    let n = 1;",
        "    let t = env.get_template(\"report.html\");",
        "    let b = r#\"../../../report.html\"#;",
        "    bail!(\"no scores.json here\");",
        "    let tmpl = [(\"report.md\",",
        "        include_str!(\"../templates/report.md\"))];",
        "}",
    ]
    .join("\n");
    assert_eq!(
        rundir_literals(&src),
        vec![
            (3, "scores.json".to_string()),
            (6, "../../../report.html".to_string())
        ]
    );
}

#[test]
fn run_directory_names_outside_ahe_rundir_do_not_grow() {
    let mut all = Vec::new();
    for f in src_files() {
        let r = rel(&f);
        if owns_layout(&r) {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for (line, lit) in rundir_literals(&text) {
            all.push(format!("{r}:{line}: {lit:?}"));
        }
    }
    println!(
        "{} run-directory literals outside ahe-rundir and ahe-bench/src/layout.rs:\n{}",
        all.len(),
        all.join("\n")
    );
    assert!(
        all.is_empty(),
        "{} string literals spell run-directory names outside ahe-rundir and \
         ahe-bench/src/layout.rs (none allowed: ask RunDir/IterationDir/EvalDir/TrialDir, or the \
         layout's constants, for the path instead):\n{}",
        all.len(),
        all.join("\n")
    );
}
