//! The install story: man pages and shell completions generated from the command-line
//! definitions, and `packaging/install.sh` putting them and the systemd unit in place.
//!
//! ```text
//!   tailtrim man DIR ──> tailtrim.1, tailtrim-serve.1, ...      completions SHELL ──> script
//!   install.sh (PREFIX, DESTDIR in a scratch dir) ──> bin, man1, completions, unit → bin
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tailtrim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tailtrim"))
        .args(args)
        .output()
        .expect("run tailtrim")
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tailtrim-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn man_pages_are_generated_for_every_subcommand() {
    let dir = scratch_dir("man");
    let output = tailtrim(&["man", dir.to_str().expect("utf-8 path")]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let main_page = read(&dir.join("tailtrim.1"));
    assert!(main_page.contains("serve"), "{main_page}");
    let serve_page = read(&dir.join("tailtrim-serve.1"));
    for flag in ["memory\\-limit", "enable\\-shutdown", "memcached\\-conf"] {
        assert!(serve_page.contains(flag), "tailtrim-serve.1 lacks {flag}");
    }
    for subcommand in ["bench", "proxy", "model", "sim", "experiment"] {
        let page = dir.join(format!("tailtrim-{subcommand}.1"));
        assert!(page.is_file(), "no {}", page.display());
    }
    assert!(
        !dir.join("tailtrim-man.1").exists(),
        "hidden commands get no page"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn completions_cover_the_subcommands_and_their_flags() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let output = tailtrim(&["completions", shell]);
        assert!(output.status.success(), "{shell}");
        let script = String::from_utf8_lossy(&output.stdout);
        assert!(
            script.contains("serve") && script.contains("memory-limit"),
            "{shell} completion lacks serve or its flags"
        );
    }
    let output = tailtrim(&["completions", "tcsh"]);
    assert!(!output.status.success(), "an unknown shell is refused");
}

#[test]
fn install_script_puts_everything_in_place() {
    let root = scratch_dir("install");
    let output = Command::new("bash")
        .arg(repository().join("packaging/install.sh"))
        .env("TAILTRIM_BIN", env!("CARGO_BIN_EXE_tailtrim"))
        .env("PREFIX", "/opt/tailtrim")
        .env("DESTDIR", &root)
        .env("UNIT_DIR", "/etc/systemd/system")
        .output()
        .expect("run packaging/install.sh");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let prefix = root.join("opt/tailtrim");
    let installed = prefix.join("bin/tailtrim");
    let version = Command::new(&installed)
        .arg("--version")
        .output()
        .expect("run the installed binary");
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("tailtrim "));
    assert!(read(&prefix.join("share/man/man1/tailtrim-serve.1")).contains("serve"));
    for completion in [
        "share/bash-completion/completions/tailtrim",
        "share/zsh/site-functions/_tailtrim",
        "share/fish/vendor_completions.d/tailtrim.fish",
    ] {
        assert!(
            read(&prefix.join(completion)).contains("serve"),
            "{completion}"
        );
    }
    let unit = read(&root.join("etc/systemd/system/tailtrim.service"));
    assert!(
        unit.contains(
            "ExecStart=/opt/tailtrim/bin/tailtrim serve --memcached-conf /etc/memcached.conf"
        ),
        "{unit}"
    );
    assert!(!unit.contains("/usr/bin/tailtrim"), "{unit}");
    let _ = std::fs::remove_dir_all(&root);
}
