//! README.md's runnable examples run as written: `scripts/readme-examples.sh` runs every
//! ```` ```sh runnable ```` block with this build as `tailtrim` on PATH and compares what it
//! prints with the ```` ```text output ```` block that follows.

mod common;

use std::path::Path;
use std::process::Command;

/// `scripts/readme-examples.sh` runs README.md's runnable blocks and checks their output.
#[test]
fn readme_examples_run_as_written() {
    let missing: Vec<&str> = ["nc", "memcached"]
        .into_iter()
        .filter(|tool| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|output| output.status.success())
        })
        .collect();
    if !missing.is_empty() {
        assert!(
            !common::in_ci(),
            "{missing:?} missing: run scripts/setup-deps.sh"
        );
        eprintln!("SKIPPED readme_examples_run_as_written: {missing:?} missing");
        return;
    }
    let output = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/readme-examples.sh"))
        .env("TAILTRIM_BIN", env!("CARGO_BIN_EXE_tailtrim"))
        .output()
        .expect("run scripts/readme-examples.sh");
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
