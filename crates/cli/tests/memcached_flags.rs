//! Every flag of `memcached -h` starts `tailtrim serve`, or stops it with an error naming the
//! flag when the flag asks for protection tailtrim cannot give; the flags tailtrim implements
//! answer as memcached does; a `--memcached-conf` error names the file and the line.
//!
//! ```text
//!   memcached -h (the installed 1.6) ──parse──> -p, --port, ..., -o ssl_key, ...
//!     each ──> tailtrim serve FLAG [VALUE] -p 0 --print-config
//!              exit 0 (implemented or one warning) | exit 1 "… is not supported: FLAG"
//!   serve -F -X -C / memcached -F -X -C ──same script──> same bytes
//!   serve -A ──"shutdown"──> the process exits; -b N ──> the listening socket's backlog is N
//! ```

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{memcached_path, require_memcached, Program, Server};

/// One flag as `memcached -h` lists it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct HelpFlag {
    /// `-p` or `--port`.
    spelling: String,
    /// The help shows a value (`--port=<num>`, `-D <char>`).
    shows_value: bool,
}

/// The flags of `memcached -h`: every `-x` and `--long` that starts a line (`-W  --disable-watch`
/// too), and the extended options (`   - name:`) as `-o name`.
fn memcached_help_flags(help: &str) -> (Vec<HelpFlag>, Vec<String>) {
    let mut flags = BTreeSet::new();
    let mut extended = Vec::new();
    for line in help.lines() {
        if let Some(rest) = line.strip_prefix("   - ") {
            if let Some((name, _)) = rest.split_once(':') {
                if !name.contains(' ') {
                    extended.push(name.to_string());
                }
            }
            continue;
        }
        if !line.starts_with('-') {
            continue;
        }
        let tokens: Vec<&str> = line.split_whitespace().collect();
        let spellings: Vec<&str> = tokens
            .iter()
            .take_while(|token| token.starts_with('-'))
            .map(|token| token.trim_end_matches(','))
            .collect();
        let shows_value = spellings.iter().any(|flag| flag.contains('='))
            || tokens
                .get(spellings.len())
                .is_some_and(|next| next.starts_with('<'));
        for spelling in spellings {
            flags.insert(HelpFlag {
                spelling: spelling.split('=').next().unwrap_or_default().to_string(),
                shows_value,
            });
        }
    }
    (flags.into_iter().collect(), extended)
}

/// A value for each memcached flag that takes one (memcached's help does not show all of
/// them, `-R` for one).
fn sample_value(flag: &str, scratch: &std::path::Path) -> Option<String> {
    let file = |name: &str| scratch.join(name).display().to_string();
    let value = match flag.trim_start_matches('-') {
        "p" | "port" | "U" | "udp-port" => "0".to_string(),
        "s" | "unix-socket" => file("memcached.sock"),
        "a" | "unix-mask" => "700".to_string(),
        "l" | "listen" => "127.0.0.1".to_string(),
        "u" | "user" => "nobody".to_string(),
        "m" | "memory-limit" => "64".to_string(),
        "c" | "conn-limit" => "100".to_string(),
        "P" | "pidfile" => file("memcached.pid"),
        "f" | "slab-growth-factor" => "1.25".to_string(),
        "n" | "slab-min-size" => "48".to_string(),
        "D" => ":".to_string(),
        "t" | "threads" => "2".to_string(),
        "R" | "max-reqs-per-event" => "20".to_string(),
        "b" | "listen-backlog" => "1024".to_string(),
        "B" | "protocol" => "ascii".to_string(),
        "I" | "max-item-size" => "1m".to_string(),
        "Y" | "auth-file" => file("auth"),
        "e" | "memory-file" => file("memory"),
        "o" | "extended" => "modern".to_string(),
        "N" | "napi_ids" => "1".to_string(),
        _ => return None,
    };
    Some(value)
}

/// Flags that must stop the server: they ask for protection (SASL, a UNIX socket instead
/// of the network) tailtrim does not have. TLS (`-Z`, `-o ssl_*`) is served.
fn must_refuse(flag: &str) -> bool {
    matches!(flag, "-S" | "--enable-sasl" | "-s" | "--unix-socket")
}

/// Flags that print and exit, as memcached's do.
fn prints_and_exits(flag: &str) -> bool {
    matches!(
        flag,
        "-h" | "--help" | "-V" | "--version" | "-i" | "--license"
    )
}

fn serve(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tailtrim"))
        .arg("serve")
        .args(args)
        .output()
        .expect("run tailtrim serve")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tailtrim-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

#[test]
fn every_flag_of_memcached_help_is_accepted_or_refused_by_name() {
    if !require_memcached("every_flag_of_memcached_help_is_accepted_or_refused_by_name") {
        return;
    }
    let help = Command::new(memcached_path().expect("memcached"))
        .arg("-h")
        .output()
        .expect("run memcached -h");
    let (flags, extended) = memcached_help_flags(&text(&help.stdout));
    assert!(
        flags.len() > 50 && extended.len() > 30,
        "memcached -h parsed into too few flags: {flags:?} {extended:?}"
    );
    let scratch = scratch_dir("memcached-flags");
    let mut failures = Vec::new();
    let mut cases: Vec<(String, Vec<String>)> = Vec::new();
    for flag in &flags {
        let mut args = vec![flag.spelling.clone()];
        match sample_value(&flag.spelling, &scratch) {
            Some(value) => args.push(value),
            None if flag.shows_value => {
                failures.push(format!("{}: the test has no value for it", flag.spelling));
                continue;
            }
            None => {}
        }
        cases.push((flag.spelling.clone(), args));
    }
    for option in &extended {
        cases.push((
            format!("-o {option}"),
            vec!["-o".into(), format!("{option}=1")],
        ));
    }
    for (name, mut args) in cases {
        let refuse = must_refuse(&name);
        if !prints_and_exits(&name) {
            args.extend(["-p".into(), "0".into(), "--print-config".into()]);
        }
        let output = serve(&args);
        let stderr = text(&output.stderr);
        if stderr.contains("unexpected argument") || stderr.contains("error: ") {
            failures.push(format!("{name}: clap refused it: {stderr}"));
        } else if refuse {
            let flag = name.trim_start_matches("-o ");
            if output.status.success() || !stderr.contains("not supported") {
                failures.push(format!(
                    "{name}: must stop the server with a clear error, got {:?} {stderr}",
                    output.status
                ));
            } else if !stderr.contains(flag) {
                failures.push(format!("{name}: the error does not name {flag}: {stderr}"));
            }
        } else if !output.status.success() {
            failures.push(format!("{name}: refused ({:?}): {stderr}", output.status));
        } else if prints_and_exits(&name) {
            if output.stdout.is_empty() {
                failures.push(format!("{name}: printed nothing"));
            }
        } else if stderr.lines().count() > 1 {
            failures.push(format!("{name}: more than a one-line warning: {stderr}"));
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn binary_protocol_is_refused_and_ascii_accepted() {
    let output = serve(&["-B".into(), "binary".into(), "--print-config".into()]);
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("-B binary: the binary protocol is not supported"),
        "{}",
        text(&output.stderr)
    );
    let output = serve(&["-B".into(), "ascii".into(), "--print-config".into()]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(output.stderr.is_empty(), "{}", text(&output.stderr));
}

#[test]
fn implemented_flags_reach_the_configuration() {
    let args: Vec<String> = [
        "-A",
        "-F",
        "-X",
        "-C",
        "-b",
        "77",
        "-Y",
        "/etc/tailtrim/auth",
        "--print-config",
    ]
    .map(String::from)
    .to_vec();
    let output = serve(&args);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let config = text(&output.stdout);
    for line in [
        "enable_shutdown = true",
        "disable_flush_all = true",
        "disable_dumping = true",
        "disable_cas = true",
        "listen_backlog = 77",
        "auth_file = \"/etc/tailtrim/auth\"",
    ] {
        assert!(config.contains(line), "{line} missing from\n{config}");
    }
}

/// `-F`, `-X`, `-C` and `-W` answer byte for byte as memcached's.
#[test]
fn restriction_flags_answer_as_memcached() {
    if !require_memcached("restriction_flags_answer_as_memcached") {
        return;
    }
    let script: &[u8] = b"set a 5 0 1\r\nx\r\ngets a\r\nflush_all\r\nflush_all noreply\r\n\
        stats cachedump 1 1\r\nmg a c v\r\ncas a 0 0 1 1\r\ny\r\nms a 1 C5 c\r\nz\r\n\
        cas missing 0 0 1 1\r\ny\r\nms a 1 C0\r\nw\r\nset n 0 0 1\r\n5\r\nma n c v\r\n\
        ma n C0\r\nma n C7\r\nmd n C3\r\nmd n C0\r\nmg n v\r\nwatch\r\nwatch fetchers\r\nmn\r\n";
    let replies: Vec<Vec<u8>> = [Program::Memcached, Program::Tailtrim]
        .into_iter()
        .map(|program| {
            let server = Server::start(program, &["-F", "-X", "-C", "-W"]);
            server.request(script, b"MN\r\n")
        })
        .collect();
    assert_eq!(
        text(&replies[1]),
        text(&replies[0]),
        "tailtrim (left) and memcached (right) answer differently"
    );
    assert!(text(&replies[0]).contains("CLIENT_ERROR flush_all not allowed"));
    assert!(text(&replies[0]).contains("CLIENT_ERROR watch commands not allowed"));
}

fn wait_for_exit(server: &mut Server) -> bool {
    let deadline = Instant::now() + Duration::from_secs(15);
    while server.is_running() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// With `-A`, `shutdown` stops the server as it stops memcached; without, it is refused.
#[test]
fn shutdown_command_needs_enable_shutdown() {
    let server = Server::start(Program::Tailtrim, &[]);
    assert_eq!(
        text(&server.request(b"shutdown\r\n", b"\r\n")),
        "ERROR: shutdown not enabled\r\n"
    );
    let mut server = Server::start(Program::Tailtrim, &["-A"]);
    let mut stream = server.connect();
    stream.write_all(b"shutdown\r\n").expect("send shutdown");
    assert!(wait_for_exit(&mut server), "serve -A ignored `shutdown`");
}

/// `-b N` is the listening socket's backlog, as `ss` shows it (Send-Q of a listener).
#[test]
fn listen_backlog_reaches_the_socket() {
    let server = Server::start(Program::Tailtrim, &["-b", "77"]);
    let output = match Command::new("ss")
        .args(["-ltnH", &format!("sport = :{}", server.port)])
        .output()
    {
        Ok(output) if output.status.success() => output,
        _ if common::in_ci() => panic!("ss (iproute2) is needed to read the backlog"),
        _ => {
            eprintln!("SKIPPED listen_backlog_reaches_the_socket: no ss (iproute2)");
            return;
        }
    };
    let listing = text(&output.stdout);
    let send_q = listing
        .split_whitespace()
        .nth(2)
        .unwrap_or_else(|| panic!("no listener in {listing:?}"));
    assert_eq!(send_q, "77", "{listing}");
}

fn conf_error(lines: &[&str]) -> (String, String) {
    let dir = scratch_dir("memcached-conf");
    let path = dir.join("memcached.conf");
    std::fs::write(&path, lines.join("\n")).expect("write conf");
    let path_text = path.display().to_string();
    let output = serve(&[
        "--memcached-conf".into(),
        path_text.clone(),
        "--print-config".into(),
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!output.status.success(), "{lines:?} was accepted");
    (path_text, text(&output.stderr))
}

/// An error in a `--memcached-conf` file names the file and the line, whether the parser of
/// the flags or the check of a value found it.
#[test]
fn memcached_conf_errors_name_file_and_line() {
    let header = [
        "# memcached.conf",
        "",
        "-m 64",
        "-p 11211",
        "",
        "-u memcache",
    ];
    for (bad_line, expected) in [
        ("-Q", "-Q: unknown flag"),
        ("-I lots", "-I: invalid size 'lots'"),
        ("-m many", "-m: invalid value 'many'"),
        (
            "-o ssl_verify_mode=9",
            "-o: Invalid ssl_verify_mode. Use help to see valid options.",
        ),
        (
            "cachesize 64",
            "\"cachesize 64\" is neither a flag nor `logfile PATH`",
        ),
    ] {
        let mut lines = header.to_vec();
        lines.push(bad_line);
        let (path, stderr) = conf_error(&lines);
        let line = lines.len();
        let wanted = format!("tailtrim: {path}:{line}: {expected}");
        assert!(
            stderr.starts_with(&wanted),
            "{bad_line}: wanted {wanted:?}, got {stderr:?}"
        );
    }
}

#[test]
fn proxy_item_size_takes_memcached_sizes() {
    let output = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
        .args(["proxy", "-I", "2m", "--print-config"])
        .output()
        .expect("run tailtrim proxy");
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).contains("item_size_max = 2097152"),
        "{}",
        text(&output.stdout)
    );
    let output = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
        .args(["proxy", "-I", "lots", "--print-config"])
        .output()
        .expect("run tailtrim proxy");
    assert!(!output.status.success());
    assert!(text(&output.stderr).contains("-I: invalid size 'lots'"));
}
