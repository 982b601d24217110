use ahe_sandbox::{ExecOpts, Sandbox, SandboxSpec};
use std::time::Instant;
#[tokio::main]
async fn main() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("tests")).unwrap();
    std::fs::write(
        root.path().join("tests/test.sh"),
        "echo 1 > $AHE_SANDBOX_FS/logs/verifier/reward.txt",
    )
    .unwrap();
    for b in [
        ahe_sandbox::local::LocalBackend::plain(),
        ahe_sandbox::local::LocalBackend::bubblewrap(),
    ] {
        for variant in 0..4 {
            let spec = SandboxSpec::default();
            let (mut rm, mut de) = (0.0, 0.0);
            for i in 0..30 {
                let sb = b.create_local(&spec).await.unwrap();
                if variant >= 1 {
                    sb.put(&root.path().join("tests"), "/tests").await.unwrap();
                }
                if variant >= 2 {
                    sb.exec(
                        "bash ${AHE_SANDBOX_FS:-}/tests/test.sh",
                        ExecOpts::default(),
                    )
                    .await
                    .unwrap();
                }
                if variant >= 3 {
                    sb.get(
                        "/logs/verifier",
                        &root.path().join(format!("o{variant}{i}")),
                    )
                    .await
                    .unwrap();
                }
                let t = Instant::now();
                std::fs::remove_dir_all(sb.dir().join("fs")).unwrap();
                rm += t.elapsed().as_secs_f64();
                let t = Instant::now();
                sb.destroy().await.unwrap();
                de += t.elapsed().as_secs_f64();
            }
            println!(
                "isolated={} variant {variant}: rm fs {:.2} ms, destroy rest {:.2} ms",
                b.isolated(),
                rm * 1000.0 / 30.0,
                de * 1000.0 / 30.0
            );
        }
    }
}
