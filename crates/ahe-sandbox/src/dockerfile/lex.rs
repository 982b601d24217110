//! The Dockerfile's lexical layer: logical instructions (comments dropped, continuations
//! joined, heredocs kept), flags, JSON arrays, shell words and quotes.

/// One logical instruction line: start line, keyword, arguments, heredoc bodies.
pub(super) struct Logical {
    pub(super) line: usize,
    pub(super) keyword: String,
    pub(super) args: String,
}

/// Splits text into logical instructions (comments dropped, continuations joined, heredocs kept).
pub(super) fn split_logical(text: &str) -> Result<Vec<Logical>, (usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let start = i + 1;
        let trimmed = lines[i].trim();
        i += 1;
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let mut buf = String::new();
        let mut cur = trimmed.to_string();
        loop {
            let t = cur.trim_end();
            if let Some(stripped) = t.strip_suffix('\\') {
                buf.push_str(stripped);
                // Continuation: skip comment and blank lines like Docker does.
                loop {
                    if i >= lines.len() {
                        cur = String::new();
                        break;
                    }
                    let next = lines[i];
                    i += 1;
                    let nt = next.trim_start();
                    if nt.starts_with('#') || nt.trim().is_empty() {
                        continue;
                    }
                    cur = next.to_string();
                    break;
                }
                if cur.is_empty() {
                    break;
                }
            } else {
                buf.push_str(t);
                break;
            }
        }
        let (keyword, args) = match buf.trim().split_once(char::is_whitespace) {
            Some((k, a)) => (k.to_ascii_uppercase(), a.trim().to_string()),
            None => (buf.trim().to_ascii_uppercase(), String::new()),
        };
        let mut args = args;
        let heredocs = if matches!(keyword.as_str(), "RUN" | "COPY" | "ADD") {
            heredoc_terminators(&args)
        } else {
            Vec::new()
        };
        // Heredocs (`<<EOF`, `<<-EOF`, `<<"EOF"`): append their bodies verbatim.
        for term in heredocs {
            let mut body = String::new();
            loop {
                if i >= lines.len() {
                    return Err((start, format!("unterminated heredoc <<{term}")));
                }
                let l = lines[i];
                i += 1;
                body.push('\n');
                body.push_str(l);
                if l.trim_start_matches('\t') == term {
                    break;
                }
            }
            args.push_str(&body);
        }
        out.push(Logical {
            line: start,
            keyword,
            args,
        });
    }
    Ok(out)
}

/// The terminator words of the heredocs opened on a line.
pub(super) fn heredoc_terminators(args: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = args;
    while let Some(pos) = rest.find("<<") {
        let after = rest[pos + 2..].trim_start_matches('-');
        let after = after.trim_start_matches(['"', '\'']);
        let word: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let starts_alpha = word.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
        if starts_alpha && !rest[pos..].starts_with("<<<") {
            out.push(word);
        }
        rest = &rest[pos + 2..];
    }
    out
}

/// Separates leading `--flag[=value]` words from the rest.
pub(super) fn split_flags(args: &str) -> (Vec<String>, &str) {
    let mut flags = Vec::new();
    let mut rest = args.trim_start();
    while rest.starts_with("--") {
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        flags.push(rest[..end].to_string());
        rest = rest[end..].trim_start();
    }
    (flags, rest)
}

/// Parses a JSON array of strings (exec form), or `None` when the text is not one.
pub(super) fn parse_json_array(s: &str) -> Option<Vec<String>> {
    let t = s.trim();
    if !t.starts_with('[') {
        return None;
    }
    serde_json::from_str::<Vec<String>>(t).ok()
}

/// Splits on whitespace, keeping quoted parts together (quotes are kept for `unquote`).
pub(super) fn split_words(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (_, '\\') => {
                cur.push(c);
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            (None, '"' | '\'') => {
                quote = Some(c);
                cur.push(c);
            }
            (Some(q), _) if c == q => {
                quote = None;
                cur.push(c);
            }
            (None, _) if c.is_whitespace() => {
                if !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
            }
            _ => cur.push(c),
        }
    }
    if quote.is_some() {
        return Err(format!("unterminated quote in {s:?}"));
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    Ok(words)
}

/// Removes quotes and backslash escapes (`"a b"` -> `a b`, `a\ b` -> `a b`).
pub(super) fn unquote(s: &str) -> String {
    let mut out = String::new();
    let mut quote: Option<char> = None;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some('\''), '\'') => quote = None,
            (Some('\''), _) => out.push(c),
            (_, '\\') => match chars.next() {
                Some(n) if quote.is_none() || matches!(n, '"' | '\\' | '$') => out.push(n),
                Some(n) => {
                    out.push('\\');
                    out.push(n);
                }
                None => out.push('\\'),
            },
            (None, '"' | '\'') => quote = Some(c),
            (Some('"'), '"') => quote = None,
            _ => out.push(c),
        }
    }
    out
}
