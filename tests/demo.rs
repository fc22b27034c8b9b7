// The main job (scripts/demo.sh runs examples/demo.rs): two processes, every
// frame received and, with a GPU, checked on the GPU.

use std::process::Command;

#[test]
fn the_two_process_demo_delivers_every_frame() {
    // target/<profile>/examples/demo as cargo builds it for `cargo test`, or
    // beside this binary where the GPU host's staging puts both.
    let exe = std::env::current_exe().unwrap();
    let here = exe.parent().unwrap();
    let demo = [
        here.parent().unwrap().join("examples/demo"),
        here.join("demo"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .expect("the demo example is built (cargo test builds every example)");
    let dir = std::env::temp_dir().join(format!("cudaipc-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(&demo)
        .arg("40")
        .current_dir(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("received 40 frames"), "{stdout}");
    assert!(stdout.contains("published 40 frames"), "{stdout}");
    if gstcudaipc::cuda::is_available() {
        assert!(
            stdout.contains("40 verified, 0 corrupt, 0 missing"),
            "{stdout}"
        );
    }
    let png = std::fs::read(dir.join("demo-frame.png")).expect("the demo saves a frame");
    assert_eq!(&png[1..4], b"PNG");
    let _ = std::fs::remove_dir_all(&dir);
}
