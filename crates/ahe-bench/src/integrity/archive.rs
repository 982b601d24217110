//! Python modules inside a zip archive. Python imports from a zip on its search path (the
//! standard library's own `python3XY.zip` slot, a `PYTHONPATH` entry, a `.pth` line) by its
//! content, whatever the file is called, so a created archive is judged by the modules it
//! holds, not by its name.

/// Whether `bytes` start like a zip archive (a local file header).
pub fn is_zip(bytes: &[u8]) -> bool {
    bytes.starts_with(b"PK\x03\x04")
}

/// The top-level modules of the `.py`/`.pyc` members a zip's central directory lists
/// (`json` for `json.py` and for `json/decoder.py`), each once, in archive order.
pub fn modules(bytes: &[u8]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while let Some(p) = find(&bytes[i..], b"PK\x01\x02") {
        let h = i + p;
        let Some(hdr) = bytes.get(h..h + 46) else {
            break;
        };
        let n = u16::from_le_bytes([hdr[28], hdr[29]]) as usize;
        let Some(name) = bytes.get(h + 46..h + 46 + n) else {
            break;
        };
        if let Some(m) = top_module(&String::from_utf8_lossy(name)) {
            if !out.contains(&m) {
                out.push(m);
            }
        }
        i = h + 46 + n;
    }
    out
}

/// The module a member named `name` is imported under, when it is Python code.
fn top_module(name: &str) -> Option<String> {
    if !(name.ends_with(".py") || name.ends_with(".pyc")) {
        return None;
    }
    let first = name.split('/').next()?;
    let stem = first
        .strip_suffix(".py")
        .or_else(|| first.strip_suffix(".pyc"))
        .unwrap_or(first);
    let ok = !stem.is_empty() && stem.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    ok.then(|| stem.to_string())
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
/// A zip (stored, no compression) with members `names`, made by the `zip` layout rules.
pub(crate) fn zip_of(names: &[&str]) -> Vec<u8> {
    use std::io::Write;
    let mut out = Vec::new();
    let mut central = Vec::new();
    for n in names {
        let off = out.len() as u32;
        let body = b"x = 1\n";
        let mut local = b"PK\x03\x04".to_vec();
        local.extend([20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        local.extend(0u32.to_le_bytes()); // crc (not checked here)
        local.extend((body.len() as u32).to_le_bytes());
        local.extend((body.len() as u32).to_le_bytes());
        local.extend((n.len() as u16).to_le_bytes());
        local.extend(0u16.to_le_bytes());
        local.write_all(n.as_bytes()).unwrap();
        local.extend(body);
        out.extend(&local);
        let mut c = b"PK\x01\x02".to_vec();
        c.extend([20, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        c.extend(0u32.to_le_bytes());
        c.extend((body.len() as u32).to_le_bytes());
        c.extend((body.len() as u32).to_le_bytes());
        c.extend((n.len() as u16).to_le_bytes());
        c.extend([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        c.extend(off.to_le_bytes());
        c.write_all(n.as_bytes()).unwrap();
        central.extend(c);
    }
    out.extend(central);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archives_python_members_name_their_top_level_modules() {
        let z = zip_of(&[
            "hashlib.py",
            "json/decoder.py",
            "json/__init__.py",
            "README.txt",
            "_x.pyc",
        ]);
        assert!(is_zip(&z));
        assert_eq!(modules(&z), ["hashlib", "json", "_x"]);
        assert!(modules(&zip_of(&["data/a.csv", "bad-name.py"])).is_empty());
        assert!(!is_zip(b"#!/bin/sh\n"));
        assert!(
            modules(&z[..z.len() - 3]).len() <= 3,
            "a cut archive is read as far as it goes"
        );
    }
}
