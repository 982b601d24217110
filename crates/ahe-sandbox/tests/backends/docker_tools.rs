//! ahe's busybox on a read-only volume (`docker::tools`, what a remote engine of the pool
//! gets): mounted in each container, byte for byte this host's busybox, and nothing the agent
//! runs as root can write, remove, rename, remount or cover it.

use crate::docker_support::*;

use ahe_sandbox::Backend;

#[tokio::test]
async fn the_tools_volume_is_ahes_busybox_and_read_only() {
    let Some(b) = backend() else { return };
    let Ok(path) = ahe_sandbox::busybox::busybox() else {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI has busybox-static"
        );
        return;
    };
    let b = b.with_tools();
    let ctx = base_context();
    let sb = b.create(&spec("tools", ctx.path())).await.unwrap();
    let dir = sb.tools_dir().expect("the volume is mounted");
    let host = tempfile::tempdir().unwrap();
    sb.get(&format!("{dir}/busybox"), &host.path().join("bb"))
        .await
        .unwrap();
    let got = std::fs::read(host.path().join("bb")).unwrap();
    assert!(
        got == std::fs::read(&path).unwrap(),
        "not this host's busybox"
    );
    for attack in [
        format!("echo x > {dir}/busybox"),
        format!("rm -f {dir}/busybox"),
        format!("mv {dir} /.elsewhere"),
        format!("mount -o remount,rw {dir}"),
        format!("umount {dir}"),
        format!("mount -t tmpfs none {dir}"),
        format!("chmod 777 {dir}/busybox"),
    ] {
        let o = sh(sb.as_ref(), &format!("{attack} 2>&1; echo rc=$?")).await;
        assert!(!o.stdout.ends_with("rc=0\n"), "{attack}: {o:?}");
    }
    let o = sh(
        sb.as_ref(),
        &format!("{dir}/busybox echo ok; {dir}/busybox md5sum {dir}/busybox"),
    )
    .await;
    assert!(o.stdout.starts_with("ok\n"), "{o:?}");
    sb.destroy().await.unwrap();
}
