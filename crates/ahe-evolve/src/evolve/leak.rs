//! Leak guard (docs/loop.md#leak-guard): a harness edit must not add a benchmark task's name or a verbatim
//! span of a task's instruction, tests or solution (anti-overfitting, enforced in code).
//!
//! Rules:
//! - **Names** match as whole tokens, ASCII case-insensitively. A token is a maximal run of
//!   `[A-Za-z0-9_-]`; every other character delimits. So `regex-log` matches in
//!   `` `regex-log`. `` or `/tasks/regex-log/x`, but not in `my-regex-logger` or `regex_log`.
//! - **Spans**: texts are normalised (every whitespace run becomes one space, ends trimmed);
//!   any [`SPAN`]-character window of the added text that also occurs in a task's
//!   `instruction.md`, `tests/` or `solution/` file is a hit. A window found in
//!   [`BOILERPLATE_TASKS`] or more different tasks is boilerplate (the standard test.sh
//!   preamble, `then echo 1 > /logs/verifier/reward.txt`, ...) and ignored, as is a window of
//!   fewer than [`MIN_DISTINCT`] distinct characters (separator lines, padding).
//! - Only what an edit **adds** is checked: the lines a diff against the evaluated harness
//!   marks as added, in runs of consecutive added lines (a span may cross their line breaks).
//!
//! Windows are indexed by a polynomial rolling hash (modulo 2^64, 50 bits kept) in one
//! radix-sorted vector (binary search per window of the added text).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use rayon::prelude::*;

/// A window shared by this many different tasks is boilerplate, not task-specific.
pub const BOILERPLATE_TASKS: usize = 3;
/// A window with fewer distinct characters than this carries no task information.
pub const MIN_DISTINCT: usize = 8;
/// Text files larger than this are indexed by their first this-many bytes.
const MAX_FILE_BYTES: usize = 2 << 20;

use ahe_rundir::leak::{LeakHit, LeakKind, EXCERPT_MAX, HELD_OUT, SPAN, SPAN_EXCERPT};

/// The texts of one task the guard protects.
#[derive(Debug, Clone)]
pub struct TaskText {
    /// Task name.
    pub name: String,
    /// Held out (its name and text never appear in a record).
    pub held_out: bool,
    /// Contents of instruction.md and of every text file under tests/ and solution/.
    pub texts: Vec<String>,
}

impl TaskText {
    /// Reads a task directory's instruction.md, tests/ and solution/ (files with a NUL
    /// byte are binary and skipped; invalid UTF-8 is decoded lossily).
    pub fn read(name: &str, dir: &Path, held_out: bool) -> TaskText {
        let mut files = vec![dir.join("instruction.md")];
        for sub in ["tests", "solution"] {
            walk(&dir.join(sub), &mut files);
        }
        let texts = files
            .iter()
            .filter_map(|p| {
                let mut b = std::fs::read(p).ok()?;
                b.truncate(MAX_FILE_BYTES);
                (!b.contains(&0)).then(|| String::from_utf8_lossy(&b).into_owned())
            })
            .collect();
        TaskText {
            name: name.to_string(),
            held_out,
            texts,
        }
    }
}

fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = rd.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// Consecutive lines an edit added, starting at 1-based line `line` of the new file.
#[derive(Debug, Clone, PartialEq)]
pub struct Added {
    /// First line number.
    pub line: u32,
    /// The lines, without their line ends.
    pub lines: Vec<String>,
}

/// The runs of added lines of `new` relative to `old` (a line diff; `old` = `None` when
/// the file is new: everything is added).
pub fn added_lines(old: Option<&[u8]>, new: &[u8]) -> Vec<Added> {
    let mut out: Vec<Added> = Vec::new();
    let mut opts = git2::DiffOptions::new();
    opts.context_lines(0).force_text(true);
    let patch = git2::Patch::from_buffers(old.unwrap_or(b""), None, new, None, Some(&mut opts));
    let Ok(patch) = patch else {
        // libgit2 could not diff: treat the whole file as added.
        return vec![Added {
            line: 1,
            lines: String::from_utf8_lossy(new)
                .lines()
                .map(String::from)
                .collect(),
        }];
    };
    for h in 0..patch.num_hunks() {
        for l in 0..patch.num_lines_in_hunk(h).unwrap_or(0) {
            let Ok(dl) = patch.line_in_hunk(h, l) else {
                continue;
            };
            let (Some(n), '+') = (dl.new_lineno(), dl.origin()) else {
                continue;
            };
            let text = String::from_utf8_lossy(dl.content());
            let text = text.trim_end_matches(['\n', '\r']).to_string();
            match out.last_mut() {
                Some(a) if a.line + a.lines.len() as u32 == n => a.lines.push(text),
                _ => out.push(Added {
                    line: n,
                    lines: vec![text],
                }),
            }
        }
    }
    out
}

/// Odd multiplier of the rolling hash (arithmetic modulo 2^64).
const BASE: u64 = 0x9e37_79b9_7f4a_7c15;

/// Polynomial rolling hash of the last [`SPAN`] characters pushed.
struct Roller {
    ring: [u64; SPAN],
    n: usize,
    h: u64,
    top: u64,
}

impl Roller {
    fn new() -> Roller {
        Roller {
            ring: [0; SPAN],
            n: 0,
            h: 0,
            top: (1..SPAN).fold(1u64, |acc, _| acc.wrapping_mul(BASE)),
        }
    }

    /// Pushes a character; the hash of the window it completes, once [`SPAN`] are in.
    fn push(&mut self, c: char) -> Option<u64> {
        let v = c as u64 + 1;
        let slot = self.n % SPAN;
        let old = std::mem::replace(&mut self.ring[slot], v);
        self.h = self
            .h
            .wrapping_sub(old.wrapping_mul(self.top))
            .wrapping_mul(BASE)
            .wrapping_add(v);
        self.n += 1;
        (self.n >= SPAN).then_some(self.h)
    }
}

/// Calls `f(start, hash)` for every [`SPAN`]-character window of `chars`.
fn windows(chars: &[char], mut f: impl FnMut(usize, u64)) {
    let mut r = Roller::new();
    for (i, &c) in chars.iter().enumerate() {
        if let Some(h) = r.push(c) {
            f(i + 1 - SPAN, h);
        }
    }
}

/// Pushes the hash of every window of `text`, whitespace-normalised on the fly.
fn text_hashes(text: &str, out: &mut Vec<u64>) {
    let mut r = Roller::new();
    let (mut started, mut pending) = (false, false);
    for c in text.chars() {
        if c.is_whitespace() {
            pending = started;
            continue;
        }
        if pending {
            out.extend(r.push(' '));
            pending = false;
        }
        started = true;
        out.extend(r.push(c));
    }
}

/// Normalises whitespace (each run → one space, ends trimmed); `at[i]` is the index of the
/// input line (by `\n`) character `i` of the result came from.
pub fn normalise(text: &str) -> (Vec<char>, Vec<u32>) {
    let mut chars = Vec::with_capacity(text.len());
    let mut at = Vec::with_capacity(text.len());
    let (mut line, mut pending) = (0u32, false);
    for c in text.chars() {
        if c.is_whitespace() {
            pending = !chars.is_empty();
        } else {
            if pending {
                chars.push(' ');
                at.push(line);
                pending = false;
            }
            chars.push(c);
            at.push(line);
        }
        if c == '\n' {
            line += 1;
        }
    }
    (chars, at)
}

/// The guard's index over a benchmark's tasks: names and every task-text window.
pub struct LeakIndex {
    tasks: Vec<(String, bool)>,
    names: HashMap<String, u32>,
    /// Sorted by key (a window's hash without its [`TASK_BITS`] low bits), one entry per
    /// key: the first task that has it (`>> 8`) and in how many tasks it occurs (low 8
    /// bits, counting stops mattering at [`BOILERPLATE_TASKS`]).
    windows: Vec<(u64, u32)>,
}

/// Low bits of an index entry that hold the task index.
const TASK_BITS: u32 = 14;
const TASK_MASK: u64 = (1 << TASK_BITS) - 1;

/// LSD radix sort, 16 bits a pass (fast even in debug builds, unlike the generic sorts).
fn radix_sort(v: &mut Vec<u64>) {
    let mut tmp = vec![0u64; v.len()];
    for pass in 0..4 {
        let shift = pass * 16;
        let mut count = vec![0usize; 1 << 16];
        for &x in v.iter() {
            count[((x >> shift) & 0xffff) as usize] += 1;
        }
        let mut sum = 0;
        for c in count.iter_mut() {
            let n = *c;
            *c = sum;
            sum += n;
        }
        for &x in v.iter() {
            let d = ((x >> shift) & 0xffff) as usize;
            tmp[count[d]] = x;
            count[d] += 1;
        }
        std::mem::swap(v, &mut tmp);
    }
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Cuts `s` to at most `n` characters, marking the cut with `…`.
fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n - 1).collect::<String>())
    }
}

impl LeakIndex {
    /// Indexes the tasks' names and texts (in parallel over tasks).
    pub fn build(tasks: &[TaskText]) -> LeakIndex {
        assert!(
            tasks.len() < 1 << TASK_BITS,
            "more than 2^{TASK_BITS} tasks"
        );
        let per_task: Vec<Vec<u64>> = tasks
            .par_iter()
            .enumerate()
            .map(|(i, t)| {
                let mut hs = Vec::new();
                for text in &t.texts {
                    text_hashes(text, &mut hs);
                }
                // Key bits high, task index low: sorting groups a window's tasks together.
                hs.iter_mut()
                    .for_each(|h| *h = (*h & !TASK_MASK) | i as u64);
                hs
            })
            .collect();
        let mut all: Vec<u64> = per_task.concat();
        drop(per_task);
        radix_sort(&mut all);
        all.dedup();
        let mut windows: Vec<(u64, u32)> = Vec::new();
        for e in all {
            let (key, task) = (e & !TASK_MASK, (e & TASK_MASK) as u32);
            match windows.last_mut() {
                Some((k, n)) if *k == key => *n += u32::from(*n & 0xff < 0xff),
                _ => windows.push((key, task << 8 | 1)),
            }
        }
        LeakIndex {
            names: tasks
                .iter()
                .enumerate()
                .map(|(i, t)| (t.name.to_ascii_lowercase(), i as u32))
                .collect(),
            tasks: tasks.iter().map(|t| (t.name.clone(), t.held_out)).collect(),
            windows,
        }
    }

    /// Number of distinct windows indexed (boilerplate included).
    pub fn len(&self) -> usize {
        self.windows.len()
    }

    /// Whether nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty() && self.names.is_empty()
    }

    fn task_label(&self, i: u32) -> String {
        let (name, held) = &self.tasks[i as usize];
        if *held {
            HELD_OUT.to_string()
        } else {
            name.clone()
        }
    }

    fn span_task(&self, h: u64) -> Option<u32> {
        let key = h & !TASK_MASK;
        let i = self.windows.binary_search_by_key(&key, |e| e.0).ok()?;
        let e = self.windows[i].1;
        (((e & 0xff) as usize) < BOILERPLATE_TASKS).then_some(e >> 8)
    }

    /// The hits in the lines `file` adds: at most one per (task, kind), the first.
    pub fn scan(&self, file: &str, added: &[Added]) -> Vec<LeakHit> {
        let mut found: BTreeMap<(u32, u8), LeakHit> = BTreeMap::new();
        for a in added {
            for (k, line) in a.lines.iter().enumerate() {
                let n = a.line + k as u32;
                for (pos, tok) in tokens(line) {
                    let Some(&t) = self.names.get(&tok.to_ascii_lowercase()) else {
                        continue;
                    };
                    found.entry((t, 0)).or_insert_with(|| LeakHit {
                        file: file.to_string(),
                        line: n,
                        task: self.task_label(t),
                        kind: LeakKind::Name,
                        excerpt: self.name_excerpt(line, pos),
                    });
                }
            }
            let (chars, at) = normalise(&a.lines.join("\n"));
            windows(&chars, |i, h| {
                let Some(t) = self.span_task(h) else {
                    return;
                };
                let w = &chars[i..i + SPAN];
                let mut distinct: Vec<char> = w.to_vec();
                distinct.sort_unstable();
                distinct.dedup();
                if distinct.len() < MIN_DISTINCT {
                    return;
                }
                found.entry((t, 1)).or_insert_with(|| LeakHit {
                    file: file.to_string(),
                    line: a.line + at[i],
                    task: self.task_label(t),
                    kind: LeakKind::Span,
                    excerpt: if self.tasks[t as usize].1 {
                        String::new()
                    } else {
                        cut(w.iter().collect::<String>().trim(), SPAN_EXCERPT)
                    },
                });
            });
        }
        let mut v: Vec<LeakHit> = found.into_values().collect();
        v.sort_by(|a, b| (a.line, &a.task).cmp(&(b.line, &b.task)));
        v
    }

    /// ≤ [`EXCERPT_MAX`] characters of `line` around the name at byte `pos`, every
    /// held-out name masked.
    fn name_excerpt(&self, line: &str, pos: usize) -> String {
        let (mut masked, mut last, mut at) = (String::new(), 0, 0);
        for (p, tok) in tokens(line) {
            if p == pos {
                at = masked.len() + (p - last);
            }
            let held = self
                .names
                .get(&tok.to_ascii_lowercase())
                .is_some_and(|&t| self.tasks[t as usize].1);
            if held {
                masked.push_str(&line[last..p]);
                masked.push_str(HELD_OUT);
                last = p + tok.len();
            }
        }
        masked.push_str(&line[last..]);
        // Start up to a third of the budget before the name.
        let skip = masked[..at].chars().count().saturating_sub(EXCERPT_MAX / 3);
        let rest: String = masked.chars().skip(skip).collect();
        if skip > 0 {
            format!("…{}", cut(rest.trim_end(), EXCERPT_MAX - 1))
        } else {
            cut(rest.trim(), EXCERPT_MAX)
        }
    }
}

/// The tokens of a line with their byte offsets (maximal runs of `[A-Za-z0-9_-]`).
fn tokens(line: &str) -> Vec<(usize, &str)> {
    let mut start = None;
    let mut out = Vec::new();
    for (i, c) in line
        .char_indices()
        .chain(std::iter::once((line.len(), ' ')))
    {
        match (is_token_char(c), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push((s, &line[s..i]));
                start = None;
            }
            _ => {}
        }
    }
    out
}

mod guard;
pub use guard::{refusal, Guard, LeakSettings};

#[cfg(test)]
#[path = "leak_tests.rs"]
mod tests;
