//! The documentation in the repository holds together (docs/codebase.md "Checks on the
//! repository itself"): every relative link of `README.md` and `docs/` names a file that
//! exists (and a heading of a Markdown file, for a `#anchor`), `docs/SUMMARY.md` lists every
//! page, the README stays short, and no comment cites the design notes that live outside the
//! repository.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::hygiene::root;

/// The README's length, at most (the manual is in `docs/`).
const README_MAX_LINES: usize = 250;

/// The Markdown files whose links are checked: `README.md` and everything below `docs/`.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut v = vec![root.join("README.md")];
    let mut stack = vec![root.join("docs")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                v.push(p);
            }
        }
    }
    v.sort();
    v
}

/// The lines of a Markdown file outside fenced code blocks and one-line HTML comments (a
/// page that is not there yet, in SUMMARY.md), with inline code spans removed: `(line
/// number, text)`.
fn prose_lines(text: &str) -> Vec<(usize, String)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (n, l) in text.lines().enumerate() {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced && !l.trim_start().starts_with("<!--") {
            let mut s = String::new();
            for (k, part) in l.split('`').enumerate() {
                if k % 2 == 0 {
                    s.push_str(part);
                }
            }
            out.push((n + 1, s));
        }
    }
    out
}

/// The anchor a heading gets (GitHub's and mdBook's rule): lower case, spaces to `-`,
/// everything but letters, digits, `-` and `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings (a repeated heading gets `-1`, `-2`, ...).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut set = BTreeSet::new();
    let mut fenced = false;
    for l in text.lines() {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !l.starts_with('#') {
            continue;
        }
        let h = l.trim_start_matches('#');
        if !h.starts_with(' ') {
            continue;
        }
        let h: String = h.chars().filter(|&c| c != '`').collect();
        let base = slug(&h);
        let mut s = base.clone();
        let mut n = 0;
        while set.contains(&s) {
            n += 1;
            s = format!("{base}-{n}");
        }
        set.insert(s);
    }
    set
}

/// The broken relative links of one Markdown file: `file:line: target (why)`.
fn broken_links(root: &Path, file: &Path) -> Vec<String> {
    let link = regex::Regex::new(r"\]\(([^)\s]+)(?:\s+[^)]*)?\)").unwrap();
    let text = std::fs::read_to_string(file).unwrap();
    let name = file
        .strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string();
    let mut out = Vec::new();
    for (n, l) in prose_lines(&text) {
        for c in link.captures_iter(&l) {
            let target = &c[1];
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
            let dest = if path.is_empty() {
                file.to_path_buf()
            } else {
                file.parent().unwrap().join(path)
            };
            let why = if !dest.exists() {
                Some("no such file".to_string())
            } else if !anchor.is_empty() && dest.extension().is_some_and(|x| x == "md") {
                let text = std::fs::read_to_string(&dest).unwrap_or_default();
                (!anchors(&text).contains(anchor)).then(|| "no such heading".to_string())
            } else {
                None
            };
            if let Some(why) = why {
                out.push(format!("{name}:{n}: {target} ({why})"));
            }
        }
    }
    out
}

#[test]
fn every_relative_link_in_readme_and_docs_resolves() {
    let root = root();
    let files = markdown_files(&root);
    assert!(files.len() > 10, "the docs are missing: {files:?}");
    let broken: Vec<String> = files.iter().flat_map(|f| broken_links(&root, f)).collect();
    assert!(
        broken.is_empty(),
        "broken links (fix the path, or the heading the anchor names):\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_link_check_finds_a_missing_file_and_a_missing_heading() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("docs")).unwrap();
    std::fs::write(
        d.path().join("docs/a.md"),
        "# A page\n## The `ahe eval` command, in short\n[ok](#the-ahe-eval-command-in-short) \
         [ok](../README.md#top) `[not a link](x.md)`\n```\n[not a link](y.md)\n```\n\
         [gone](b.md) [bad anchor](a.md#nowhere) [web](https://example.com/x)\n",
    )
    .unwrap();
    std::fs::write(
        d.path().join("README.md"),
        "# Top\n[page](docs/a.md#a-page)\n",
    )
    .unwrap();
    let found: Vec<String> = markdown_files(d.path())
        .iter()
        .flat_map(|f| broken_links(d.path(), f))
        .collect();
    assert_eq!(
        found,
        vec![
            "docs/a.md:7: b.md (no such file)".to_string(),
            "docs/a.md:7: a.md#nowhere (no such heading)".to_string(),
        ]
    );
}

#[test]
fn summary_lists_every_page_of_docs() {
    let root = root();
    let summary: String = std::fs::read_to_string(root.join("docs/SUMMARY.md"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim_start().starts_with("<!--"))
        .collect();
    let missing: Vec<String> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md") && n != "SUMMARY.md")
        .filter(|n| !summary.contains(&format!("({n})")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/SUMMARY.md does not list {missing:?} (add a `- [Title](page.md)` line)"
    );
}

#[test]
fn readme_is_short_and_keeps_the_test_command_in_its_quick_start() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let n = readme.lines().count();
    assert!(
        n <= README_MAX_LINES,
        "README.md has {n} lines (at most {README_MAX_LINES}): move the manual part into docs/"
    );
    let quick = readme
        .split("\n## ")
        .find(|s| s.starts_with("Quick start"))
        .expect("README.md has a \"Quick start\" section");
    assert!(
        quick.contains("\ncargo test --workspace\n"),
        ".ci/run runs the Quick start's test command; it must stay there"
    );
}

/// Files of the repository that may cite the design: sources, docs, configs, scripts.
fn text_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            let skip = name.starts_with('.') && name != ".ci";
            if !(skip || ["target", "vendor", "runs"].contains(&name.as_str())) {
                text_files(&p, out);
            }
        } else if ["rs", "md", "toml", "sh", "py", "html", "txt", "j2"]
            .iter()
            .any(|x| name.ends_with(&format!(".{x}")))
            || name == "run"
        {
            out.push(p);
        }
    }
}

#[test]
fn no_citation_points_outside_the_repository() {
    let root = root();
    // The design notes are not in a clone; their place is docs/. Spelled in two pieces so
    // this file does not cite them itself.
    let cite = regex::Regex::new(&format!(r"{}\s*§\s*[0-9]|{}\.md", "DESIGN", "DESIGN")).unwrap();
    let has_design = root.join(format!("{}.md", "DESIGN")).exists();
    let mut files = Vec::new();
    text_files(&root, &mut files);
    let mut found = Vec::new();
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        for (n, l) in text.lines().enumerate() {
            if cite.is_match(l) && !has_design {
                let name = f.strip_prefix(&root).unwrap_or(&f).display().to_string();
                found.push(format!("{name}:{}: {}", n + 1, l.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "citations of design notes that are not in the repository (cite the docs/ page, \
         e.g. docs/attribution.md#verdicts):\n{}",
        found.join("\n")
    );
}
