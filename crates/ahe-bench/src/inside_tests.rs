//! Reading busybox's walk output, and the static-binary check.

use super::*;

#[test]
fn a_stat_line_reads_back_with_nanoseconds_and_kind() {
    let line = "E|81a4|123|42|1796449958|2026-12-05 05:52:38.584587629 +0000|1796449900|\
                2026-12-05 05:51:40.5 +0000|1796449901|2026-12-05 05:51:41 +0000|/app/a|b.py";
    let (p, s) = parse_entry(line).unwrap();
    assert_eq!(
        p, "/app/a|b.py",
        "the name is last and may hold the separator"
    );
    assert_eq!(s.kind, Kind::File);
    assert_eq!((s.ino, s.size, s.mode), (123, 42, 0o100644));
    assert_eq!(s.atime, (1796449958, 584587629));
    assert_eq!(s.mtime, (1796449900, 500000000));
    assert_eq!(s.ctime, (1796449901, 0));
    let link = line.replacen("81a4", "a1ff", 1);
    assert_eq!(parse_entry(&link).unwrap().1.kind, Kind::Symlink);
    // A name split by a newline leaves lines that do not read: counted, never guessed.
    let w = parse_walk("NOW|100\n", &format!("{line}\nsecond half of a name\n"));
    assert_eq!((w.snapshot.len(), w.unreadable, w.now.0), (1, 1, 100));
    assert!(parse_entry("E|zz|1|2|3|4|5|6|7|8|/x").is_none());
}

#[test]
fn only_a_static_elf_passes() {
    // The test binary itself is dynamically linked (it has a PT_INTERP).
    let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    assert!(me.starts_with(b"\x7fELF"));
    assert!(
        !is_static_elf(&me),
        "a dynamic executable was taken for static"
    );
    assert!(!is_static_elf(b"#!/bin/sh\n"));
    if let Ok(bb) = std::fs::read("/bin/busybox") {
        assert!(is_static_elf(&bb), "Debian's busybox-static is static");
    }
}

#[test]
fn the_walk_after_the_verifier_is_pruned_like_the_host_walk() {
    let raw = |kind| RawStat {
        kind,
        ino: 1,
        size: 0,
        mtime: (1, 0),
        ctime: (1, 0),
        atime: (1, 0),
        mode: 0,
    };
    let mut handed = Snapshot::default();
    handed.insert_raw("/usr".into(), raw(Kind::Dir));
    let mut after = handed.clone();
    for (p, k) in [
        ("/root/.cache", Kind::Dir),
        ("/root/.cache/uv", Kind::Dir),
        ("/root/.cache/uv/conftest.py", Kind::File),
        ("/app/new", Kind::Dir),
        ("/app/new/conftest.py", Kind::File),
        ("/usr/x.py", Kind::File),
    ] {
        after.insert_raw(p.into(), raw(k));
    }
    let layer = Layer {
        upper: Vec::new(),
        lower: vec!["/nonexistent".into()],
        lower_tops: None,
        overlay: false,
        path_env: String::new(),
        image_paths: Some(Arc::new(["/app".to_string(), "/root".to_string()].into())),
    };
    let keep = |p: &str| p.starts_with("/app/");
    after.prune_made(&handed, &layer, &keep);
    let mut left: Vec<&String> = after.paths().collect();
    left.sort();
    assert_eq!(
        left,
        [
            "/app/new",
            "/app/new/conftest.py",
            "/root/.cache",
            "/usr",
            "/usr/x.py"
        ]
    );
    assert_eq!(after.pruned, 1);
}
