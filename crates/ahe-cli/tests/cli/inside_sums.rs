//! Content hashes of the in-sandbox walks, on a real container with ahe's busybox: on a
//! Docker container (no `CAP_SYS_TIME` or `CAP_SYS_RAWIO` in its bounding set) the default
//! takes none, since no edit there can keep a file's ctime; asked for, the baseline and the
//! hand-over take an MD5 of every regular file (and the hand-over's walk lists a deep tree of
//! long paths whole), an unchanged file's sums agree, an edited
//! one's differ, and a file whose sums differ although the walks saw no change of it (what
//! an edit with forged times leaves) is reported — one the change set holds is not. (Forging
//! a ctime needs the clock set back, which a container here cannot do: that part of the
//! threat is the comparison's input, simulated by leaving the edit out of the change set.)

use std::collections::HashSet;

use ahe_bench::inside::{forged, Inside, FORGE_CAPS};
use ahe_sandbox::docker::DockerBackend;
use ahe_sandbox::{handover_script, Backend, ExecOpts, LeftoverPolicy, SandboxSpec};

use crate::common;

#[test]
fn content_hashes_are_taken_where_times_can_be_forged_and_catch_a_kept_ctime() {
    if !common::docker_ready() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let backend = DockerBackend::connect().unwrap();
        let spec = SandboxSpec {
            task: "inside-sums".into(),
            trial_id: "sums".into(),
            run: "inside-sums-test".into(),
            docker_image: Some("ahe-base:bookworm".into()),
            ..Default::default()
        };
        let sb = backend.create(&spec).await.unwrap();
        // The default on Docker: none taken, and why (the bounding set read).
        let mut auto = Inside::new().unwrap();
        auto.sums_mode = "auto".into();
        let w = auto.walk(sb.as_ref(), None).await.unwrap();
        let caps = w.caps.expect("the walk reads CapBnd");
        assert_ne!(caps, 0, "a root container has capabilities");
        assert_eq!(caps & FORGE_CAPS, 0, "{caps:#x}");
        assert!(w.sums.is_none());

        // Asked for: the baseline's sums, an edit of the same size, the hand-over's sums.
        let mut inside = Inside::new().unwrap();
        inside.sums_mode = "always".into();
        let mut base = inside.walk(sb.as_ref(), None).await.unwrap();
        let base_sums = base.sums.take().expect("baseline sums");
        assert!(base_sums.len() > 1000, "{} files", base_sums.len());
        inside.base_sums = Some(base_sums.clone());
        let target = "/etc/debian_version";
        let before = base_sums[target].clone();
        let edit = format!("v=$(cat {target}); printf '%s' \"$v\" | tr 0-9 1-90 > {target}.new && cat {target}.new > {target}; echo >> {target}; rm {target}.new; wc -c < {target}");
        let o = sb.exec(&edit, ExecOpts::default()).await.unwrap();
        assert_eq!(o.exit_code, Some(0), "{o:?}");
        // A deep tree of long paths (a pip install's): the hand-over's walk lists every entry
        // (with the hand-over script in the walk's environment, find's full batches failed).
        let deep = "d=/opt/$(printf 'x%.0s' $(seq 120)); mkdir -p $d && cd $d && \
                    for i in $(seq 15000); do : > file-with-a-long-name-$i; done";
        let o = sb.exec(deep, ExecOpts::default()).await.unwrap();
        assert_eq!(o.exit_code, Some(0), "{o:?}");
        let ho = handover_script(LeftoverPolicy::Kill, 1, 0);
        let mut handed = inside.walk(sb.as_ref(), Some(ho)).await.unwrap();
        let (n0, n1) = (base.snapshot.len(), handed.snapshot.len());
        assert!(n1 >= n0 + 15001, "the hand-over's walk lost entries: {n1} after, {n0} before");
        let now = handed.sums.take().expect("hand-over sums (the baseline has them)");
        assert_ne!(now[target], before, "the edit changed the content");
        assert_eq!(now["/usr/bin/ls"], base_sums["/usr/bin/ls"], "an unchanged file");
        // The walk after the verifier takes none (nothing compares them).
        let after = inside.walk(sb.as_ref(), Some(handover_script(LeftoverPolicy::Kill, 1, 0)));
        assert!(after.await.unwrap().sums.is_none());

        // The edit in the change set (its ctime moved): nothing forged. Left out of it (the
        // walks saw the same inode, size and times): reported, and only it.
        let seen: HashSet<&str> = HashSet::from([target]);
        assert_eq!(forged(&base_sums, &now, &seen), Vec::<String>::new());
        assert_eq!(forged(&base_sums, &now, &HashSet::new()), vec![target.to_string()]);
        sb.destroy().await.unwrap();
    });
}
