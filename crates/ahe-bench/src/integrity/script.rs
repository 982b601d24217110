//! What a verifier script runs as code by path: the files its shell sources (`source F`,
//! `. F`), the scripts it hands to an interpreter (`bash F`, `python3 F`, …) and the programs
//! it runs by path (`/opt/tool`, `$HOME/.local/bin/uvx`). The script is ahe's own copy of the
//! task's `tests/test.sh` (the agent never wrote it), so a file it names there is one the
//! verifier will run: put there by the agent, it is code the agent gave the verifier. Only
//! absolute paths count (after `$HOME`, `${HOME}` and `~` become `home`): a relative one is
//! the working directory's, i.e. the task's deliverables.

/// Interpreters whose first argument that is not an option is a script they run.
const INTERPRETERS: &[&str] = &[
    "bash", "sh", "dash", "zsh", "ksh", "python", "python3", "perl", "ruby", "node", "php",
    "Rscript", "lua", "tclsh",
];

/// Shell keywords a command may follow (`if F; then`, `! F`).
const KEYWORDS: &[&str] = &[
    "if", "then", "else", "elif", "while", "until", "do", "!", "{",
];

/// Words that run the command after them (`exec F`, `sudo F`, `env F`, `timeout 60 F`).
const WRAPPERS: &[&str] = &["exec", "command", "sudo", "env", "nohup", "time", "timeout"];

/// The absolute paths `script` runs as code, each with the (trimmed) line that names it;
/// `home` is the verifier's home directory.
pub fn code_paths(script: &str, home: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in script.lines() {
        let code = line.split(" #").next().unwrap_or("").trim();
        if code.starts_with('#') || code.is_empty() {
            continue;
        }
        for cmd in code.split(['&', '|', ';', '(', ')', '`']) {
            let words: Vec<String> = cmd.split_whitespace().map(unquote).collect();
            if let Some(p) = runs(&words).and_then(|w| absolute(w, home)) {
                if !out.iter().any(|(q, _)| *q == p) {
                    out.push((p, code.to_string()));
                }
            }
        }
    }
    out
}

/// The word of one simple command that names code it runs, if any.
fn runs(words: &[String]) -> Option<&str> {
    let mut i = 0;
    // Assignments before the command (`FOO=1 cmd`), then wrappers and their numbers/options.
    while i < words.len() && (is_assignment(&words[i]) || KEYWORDS.contains(&words[i].as_str())) {
        i += 1;
    }
    while i < words.len() && WRAPPERS.contains(&words[i].as_str()) {
        i += 1;
        while i < words.len() && (words[i].starts_with('-') || is_number(&words[i])) {
            i += 1;
        }
        while i < words.len() && is_assignment(&words[i]) {
            i += 1;
        }
    }
    let first = words.get(i)?.as_str();
    let name = first.rsplit('/').next().unwrap_or(first);
    if first == "source" || first == "." {
        return words.get(i + 1).map(|s| s.as_str());
    }
    if INTERPRETERS.contains(&name) || name.starts_with("python3.") {
        // `bash -c '…'` and `python -m mod` run no file.
        let rest = &words[i + 1..];
        if rest.iter().any(|w| w == "-c" || w == "-m" || w == "-e") {
            return None;
        }
        return rest
            .iter()
            .find(|w| !w.starts_with('-'))
            .map(|s| s.as_str());
    }
    Some(first)
}

/// `word` as an absolute path, with `$HOME`, `${HOME}` and a leading `~` replaced; `None` for
/// a relative path, a bare command name or one naming another variable.
fn absolute(word: &str, home: &str) -> Option<String> {
    let home = home.trim_end_matches('/');
    let w = if let Some(r) = word.strip_prefix("~/") {
        format!("{home}/{r}")
    } else {
        word.replace("${HOME}", home).replace("$HOME", home)
    };
    (w.starts_with('/') && !w.contains('$') && !w.contains('*')).then_some(w)
}

/// `word` without one pair of surrounding quotes.
fn unquote(word: &str) -> String {
    let w = word.trim_matches(|c| c == '"' || c == '\'');
    w.to_string()
}

fn is_assignment(w: &str) -> bool {
    w.split_once('=').is_some_and(|(k, _)| {
        !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

fn is_number(w: &str) -> bool {
    !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_digit() || c == '.' || c == 's' || c == 'm')
}
