//! The access-time probe without resetting every file: which files need a reset, and that a
//! read after the hand-over shows either way (on this host's file system, as the layer is).

use std::path::Path;
use std::time::{Duration, Instant};

use super::*;

fn layer(upper: &Path, lower: &Path) -> Layer {
    Layer {
        upper: vec![("/".into(), upper.to_path_buf())],
        lower: vec![lower.to_path_buf()],
        lower_tops: None,
        overlay: true,
        path_env: "/usr/bin:/bin".into(),
        image_paths: None,
    }
}

/// Sets a file's access and modification times (seconds since the epoch).
fn set_times(p: &Path, atime: i64, mtime: i64) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let t = [
        libc::timespec {
            tv_sec: atime as libc::time_t,
            tv_nsec: 0,
        },
        libc::timespec {
            tv_sec: mtime as libc::time_t,
            tv_nsec: 0,
        },
    ];
    // SAFETY: a NUL-terminated path and two valid timespecs.
    assert_eq!(
        unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), t.as_ptr(), 0) },
        0
    );
}

fn atime(p: &Path) -> (i64, i64) {
    let m = std::fs::metadata(p).unwrap();
    (m.atime(), m.atime_nsec())
}

struct Fixture {
    _dir: tempfile::TempDir,
    upper: PathBuf,
    layer: Layer,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let (upper, lower) = (dir.path().join("upper"), dir.path().join("lower"));
    std::fs::create_dir_all(upper.join("app")).unwrap();
    std::fs::create_dir_all(&lower).unwrap();
    let layer = layer(&upper, &lower);
    Fixture {
        _dir: dir,
        upper,
        layer,
    }
}

#[test]
fn a_file_not_read_since_written_needs_no_reset_and_its_next_read_shows() {
    let f = fixture();
    let (unread, read) = (f.upper.join("app/a.py"), f.upper.join("app/b.py"));
    for p in [&unread, &read] {
        std::fs::write(p, "x = 1\n").unwrap();
        let old = now().0 - 100;
        set_times(p, old, old);
    }
    let handed = Snapshot::take(&f.layer);
    let t = now();
    assert!(!handed.needs_reset("/app/a.py", t));
    assert!(!handed.needs_reset("/app/b.py", t));
    std::fs::read(&read).unwrap();
    let after = Snapshot::take(&f.layer);
    assert!(
        after.read_since(&handed, "/app/b.py"),
        "a read after the hand-over shows"
    );
    assert!(
        !after.read_since(&handed, "/app/a.py"),
        "an unread file stays unread"
    );
}

#[test]
fn a_file_read_since_written_or_dated_ahead_needs_a_reset_that_makes_its_next_read_show() {
    let f = fixture();
    let (served, ahead) = (f.upper.join("app/served.py"), f.upper.join("app/ahead.py"));
    std::fs::write(&served, "x = 1\n").unwrap();
    std::fs::write(&ahead, "x = 2\n").unwrap();
    // Read after written: wait (a condition, not a fixed sleep) until the read's access time
    // is later than the write's change time, which relatime then keeps until the next day.
    let ctime = |p: &Path| {
        let m = std::fs::metadata(p).unwrap();
        (m.ctime(), m.ctime_nsec())
    };
    let start = Instant::now();
    while atime(&served) <= ctime(&served) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the access time never moved on"
        );
        std::thread::sleep(Duration::from_millis(5));
        std::fs::read(&served).unwrap();
    }
    // Dated ahead by the agent (touch -a -d 2100 ...): a later read could not pass it.
    let future = now().0 + 3600 * 24 * 365 * 50;
    set_times(&ahead, future, future);
    let mut handed = Snapshot::take(&f.layer);
    let t = now();
    assert!(
        handed.needs_reset("/app/served.py", t),
        "read since written"
    );
    assert!(
        handed.needs_reset("/app/ahead.py", t),
        "access time in the future"
    );
    // What the guard does at the arm: reset those, stamp them anew.
    let changed = handed.changes_since(&Snapshot::default(), &f.layer);
    for c in &changed {
        reset_atime(&c.host).unwrap();
    }
    handed.refresh(&changed);
    let settled = Snapshot::take(&f.layer);
    assert!(
        settled.changes_since(&handed, &f.layer).is_empty(),
        "a reset is not a change"
    );
    assert!(!settled.read_since(&handed, "/app/served.py"));
    std::fs::read(&served).unwrap();
    std::fs::read(&ahead).unwrap();
    let after = Snapshot::take(&f.layer);
    assert!(after.read_since(&handed, "/app/served.py"));
    assert!(after.read_since(&handed, "/app/ahead.py"));
}

#[test]
fn a_file_gone_after_the_hand_over_counts_as_read() {
    let f = fixture();
    let p = f.upper.join("conftest.py");
    std::fs::write(&p, "import os\n").unwrap();
    let old = now().0 - 100;
    set_times(&p, old, old);
    let handed = Snapshot::take(&f.layer);
    std::fs::remove_file(&p).unwrap();
    let after = Snapshot::take(&f.layer);
    assert!(after.read_since(&handed, "/conftest.py"));
}

#[test]
fn the_walk_after_the_verifier_skips_what_its_run_made_but_sees_what_it_altered() {
    let dir = tempfile::tempdir().unwrap();
    let (upper, lower) = (dir.path().join("upper"), dir.path().join("lower"));
    std::fs::create_dir_all(upper.join("app")).unwrap();
    std::fs::create_dir_all(lower.join("usr/lib/python3/dist-packages/pkg")).unwrap();
    std::fs::write(
        lower.join("usr/lib/python3/dist-packages/pkg/mod.py"),
        "x = 1\n",
    )
    .unwrap();
    let layer = layer(&upper, &lower);
    let handed = Snapshot::take(&layer);
    // The verifier's run: a new cache tree, a new dir under the working directory, and an
    // image file altered in place (overlay copies its directories up: new in the upper dir).
    let cache = upper.join("root/.cache/uv/archive/lib");
    std::fs::create_dir_all(&cache).unwrap();
    for i in 0..50 {
        std::fs::write(cache.join(format!("m{i}.py")), "y = 2\n").unwrap();
    }
    std::fs::create_dir_all(upper.join("app/sub")).unwrap();
    std::fs::write(upper.join("app/sub/conftest.py"), "").unwrap();
    let copied = upper.join("usr/lib/python3/dist-packages/pkg");
    std::fs::create_dir_all(&copied).unwrap();
    std::fs::write(copied.join("mod.py"), "x = 'patched'\n").unwrap();
    // pip's record of that install, in a dist-info the run made: walked (it vouches).
    let dist = upper.join("usr/lib/python3/dist-packages/pkg-2.0.dist-info");
    std::fs::create_dir_all(&dist).unwrap();
    std::fs::write(dist.join("RECORD"), "pkg/mod.py,sha256=x,14\n").unwrap();
    let keep = |p: &str| crate::guard::walked_when_made(p, "/app");
    let after = Snapshot::take_after(&layer, &handed, &keep);
    let paths: Vec<String> = after
        .changes_since(&handed, &layer)
        .into_iter()
        .map(|c| format!("{}{}", c.path, if c.existed { " (altered)" } else { "" }))
        .collect();
    assert!(
        paths.contains(&"/usr/lib/python3/dist-packages/pkg/mod.py (altered)".into()),
        "{paths:?}"
    );
    assert!(paths.contains(&"/app/sub/conftest.py".into()), "{paths:?}");
    assert!(
        paths.contains(&"/usr/lib/python3/dist-packages/pkg-2.0.dist-info/RECORD".into()),
        "{paths:?}"
    );
    assert!(!paths.iter().any(|p| p.contains("/.cache/")), "{paths:?}");
    assert_eq!(
        after.pruned, 1,
        "the cache's top dir (/root) is seen, not walked into"
    );
    // The full walk sees the cache's files: the pruning is what left them out.
    let full = Snapshot::take(&layer).changes_since(&handed, &layer);
    assert_eq!(
        full.iter().filter(|c| c.path.contains("/.cache/")).count(),
        50
    );
}

#[test]
fn the_walk_sees_every_entry_of_a_wide_deep_tree_and_a_file_rewritten_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let (upper, lower) = (dir.path().join("upper"), dir.path().join("lower"));
    std::fs::create_dir_all(&lower).unwrap();
    // 100 packages, each two levels deep, 10 files a level: 100 * (2 dirs + 20 files), past
    // what a walk records on its own thread (the rest is walked on rayon's threads).
    for p in 0..100 {
        let d = upper.join(format!("opt/site/pkg{p}"));
        std::fs::create_dir_all(d.join("sub")).unwrap();
        for i in 0..10 {
            std::fs::write(d.join(format!("m{i}.py")), "x = 1\n").unwrap();
            std::fs::write(d.join(format!("sub/n{i}.py")), "y = 1\n").unwrap();
        }
    }
    let layer = layer(&upper, &lower);
    let handed = Snapshot::take(&layer);
    assert_eq!(
        handed.len(),
        2 + 100 * 22,
        "/opt, /opt/site and every package"
    );
    assert!(
        handed.len() > PARALLEL_PAST,
        "the threads' part is tested too"
    );
    assert!(!handed.truncated);
    // Rewritten in place (same inode, same size, its directory's mtime unmoved): it shows.
    let f = upper.join("opt/site/pkg17/sub/n3.py");
    let dir_mtime = std::fs::metadata(f.parent().unwrap())
        .unwrap()
        .modified()
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .and_then(|mut h| std::io::Write::write_all(&mut h, b"y = 2\n"))
        .unwrap();
    let now_mtime = std::fs::metadata(f.parent().unwrap())
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(dir_mtime, now_mtime);
    let after = Snapshot::take_after(&layer, &handed, &|_| false);
    let changed: Vec<String> = (after.changes_since(&handed, &layer).into_iter())
        .map(|c| c.path)
        .collect();
    assert_eq!(changed, vec!["/opt/site/pkg17/sub/n3.py".to_string()]);
}
