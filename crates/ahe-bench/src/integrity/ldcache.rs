//! The dynamic loader's cache (`/etc/ld.so.cache`) judged by what it points to: `ldconfig`
//! rewrites it whenever a library is installed (every `apt-get install`, a library built and
//! registered by the task), so a changed cache is not tampering by itself. It is shadowing when
//! an entry makes a library name the image's cache resolves to one path resolve to a file the
//! phase created instead.

use std::collections::{HashMap, HashSet};

/// The magic of glibc's cache format (since glibc 2.32 the only one `ldconfig` writes; older
/// ones write it after the "ld.so-1.7.0" part, which names the same libraries).
const MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
/// Header: magic (20), nlibs, len_strings, flags + padding, extension offset, 3 unused.
const HEADER: usize = 20 + 4 + 4 + 4 + 4 + 12;
/// One entry: flags, key, value, osversion (4 each), hwcap (8).
const ENTRY: usize = 24;

/// Library name → the paths a cache resolves it to.
pub type Entries = HashMap<String, HashSet<String>>;

/// The entries of a cache file's bytes; `None` when the bytes are not a glibc cache.
pub fn parse(bytes: &[u8]) -> Option<Entries> {
    let start = bytes.windows(MAGIC.len()).position(|w| w == MAGIC)?;
    let data = &bytes[start..];
    let u32_at = |o: usize| -> Option<u32> {
        data.get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let nlibs = u32_at(20)? as usize;
    if nlibs > 1_000_000 {
        return None;
    }
    let string = |o: u32| -> Option<String> {
        let s = data.get(o as usize..)?;
        let end = s.iter().position(|b| *b == 0)?;
        std::str::from_utf8(&s[..end]).ok().map(str::to_string)
    };
    let mut out = Entries::new();
    for i in 0..nlibs {
        let e = HEADER + i * ENTRY;
        let (key, value) = (u32_at(e + 4)?, u32_at(e + 8)?);
        out.entry(string(key)?).or_default().insert(string(value)?);
    }
    Some(out)
}

/// Entries of `new` that make a name `old` resolves elsewhere resolve to a path for which
/// `created` holds: `(name, the image's paths, the new path)`.
pub fn shadowing<'a>(
    old: &'a Entries,
    new: &'a Entries,
    created: &dyn Fn(&str) -> bool,
) -> Vec<(&'a str, Vec<&'a str>, &'a str)> {
    let mut out = Vec::new();
    for (name, paths) in new {
        let Some(before) = old.get(name) else {
            continue;
        };
        for p in paths {
            if !before.contains(p) && created(p) {
                let mut was: Vec<&str> = before.iter().map(String::as_str).collect();
                was.sort();
                out.push((name.as_str(), was, p.as_str()));
            }
        }
    }
    out.sort();
    out
}

/// A cache file of `entries` in glibc's format (for tests: `ldconfig`'s layout, strings after
/// the entries).
#[cfg(test)]
pub fn write(entries: &[(&str, &str)]) -> Vec<u8> {
    let mut strings: Vec<u8> = Vec::new();
    let base = HEADER + entries.len() * ENTRY;
    let mut offs = Vec::new();
    for (k, v) in entries {
        let ko = base + strings.len();
        strings.extend_from_slice(k.as_bytes());
        strings.push(0);
        let vo = base + strings.len();
        strings.extend_from_slice(v.as_bytes());
        strings.push(0);
        offs.push((ko as u32, vo as u32));
    }
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    out.extend_from_slice(&(strings.len() as u32).to_le_bytes());
    out.extend_from_slice(&[2, 0, 0, 0]);
    out.extend_from_slice(&[0; 16]);
    for (k, v) in offs {
        out.extend_from_slice(&0x0303u32.to_le_bytes());
        out.extend_from_slice(&k.to_le_bytes());
        out.extend_from_slice(&v.to_le_bytes());
        out.extend_from_slice(&[0; 12]);
    }
    out.extend_from_slice(&strings);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_shadowing() {
        let old = parse(&write(&[
            ("libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1"),
            ("libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"),
        ]))
        .unwrap();
        assert_eq!(old.len(), 2);
        // A new library (its own name) and the same libz: not shadowing.
        let honest = parse(&write(&[
            ("libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1"),
            ("libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"),
            ("libmine.so.1", "/usr/local/lib/libmine.so.1"),
        ]))
        .unwrap();
        let created = |p: &str| p.starts_with("/usr/local/lib/");
        assert!(shadowing(&old, &honest, &created).is_empty());
        // The image's libz now resolves to a created copy first.
        let hack = parse(&write(&[
            ("libz.so.1", "/usr/local/lib/libz.so.1"),
            ("libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1"),
            ("libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"),
        ]))
        .unwrap();
        let s = shadowing(&old, &hack, &created);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].0, "libz.so.1");
        assert_eq!(s[0].2, "/usr/local/lib/libz.so.1");
        assert!(parse(b"not a cache").is_none());
    }

    /// The host's own cache (written by its `ldconfig`) parses and names libc.
    #[test]
    fn parses_the_hosts_cache() {
        let Ok(bytes) = std::fs::read("/etc/ld.so.cache") else {
            eprintln!("skipped: no /etc/ld.so.cache here");
            return;
        };
        let e = parse(&bytes).expect("the host's ld.so.cache parses");
        assert!(e.contains_key("libc.so.6"), "{:?}", e.keys().take(5));
    }
}
