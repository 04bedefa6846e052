//! `tailtrim proxy --twemproxy FILE.yml` routes like nutcracker: the same YAML (only the
//! listen port differs) runs real nutcracker and the tailtrim proxy over the same three
//! memcached backends; every key stored through nutcracker is found through tailtrim, so
//! both picked the same backend for it, and the keys are spread over all backends.
//!
//! ```text
//!   set k0..k299 ──> nutcracker (fnv1a_64, ketama, hash_tag "{}") ──┐
//!                                                                   ├─> memcached x3
//!   get k0..k299 ──> tailtrim proxy --twemproxy (same YAML) ────────┘   (each: stats curr_items)
//! ```

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, read_until, require_memcached, Program, Server};

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn nutcracker_installed() -> bool {
    let found = Command::new("sh")
        .args(["-c", "command -v nutcracker"])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found && common::in_ci() {
        panic!("nutcracker is not installed but CI=true (run scripts/setup-deps.sh)");
    }
    found
}

fn connect(port: u16) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) {
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            return stream;
        }
        assert!(Instant::now() < deadline, "port {port} never accepted");
        std::thread::sleep(Duration::from_millis(30));
    }
}

fn yaml(port: u16, backends: &[&Server]) -> String {
    let mut text = format!(
        "# nutcracker's own syntax and keys\nmain:\n  listen: 127.0.0.1:{port}\n  hash: fnv1a_64\n  \
         hash_tag: \"{{}}\"\n  distribution: ketama\n  timeout: 2000\n  auto_eject_hosts: false\n  \
         server_retry_timeout: 2000\n  server_failure_limit: 3\n  server_connections: 1\n  \
         preconnect: false\n  servers:\n"
    );
    for (index, backend) in backends.iter().enumerate() {
        text.push_str(&format!(
            "   - 127.0.0.1:{}:1 server{index}\n",
            backend.port
        ));
    }
    text
}

#[test]
fn twemproxy_yaml_routes_like_nutcracker() {
    if !require_memcached("twemproxy_yaml_routes_like_nutcracker") || !nutcracker_installed() {
        return;
    }
    let backends: Vec<Server> = (0..3)
        .map(|_| Server::start(Program::Memcached, &["-m", "16", "-t", "1"]))
        .collect();
    let refs: Vec<&Server> = backends.iter().collect();
    let dir = std::env::temp_dir().join(format!("tailtrim-twem-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (nc_port, tt_port) = (free_port(), free_port());
    let nc_yaml = dir.join("nutcracker.yml");
    let tt_yaml = dir.join("tailtrim.yml");
    std::fs::write(&nc_yaml, yaml(nc_port, &refs)).expect("write");
    std::fs::write(&tt_yaml, yaml(tt_port, &refs)).expect("write");
    let stats_port = free_port().to_string();
    let _nutcracker = Killed(
        Command::new("nutcracker")
            .arg("-c")
            .arg(&nc_yaml)
            .args(["-s", &stats_port, "-a", "127.0.0.1", "-o"])
            .arg(dir.join("nutcracker.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nutcracker"),
    );
    let _proxy = Killed(
        Command::new(env!("CARGO_BIN_EXE_tailtrim"))
            .args(["proxy", "--admin", "off", "--twemproxy"])
            .arg(&tt_yaml)
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn tailtrim proxy"),
    );
    let keys: Vec<String> = (0..300)
        .map(|i| match i % 3 {
            0 => format!("user:{i}"),
            1 => format!("{{tag{}}}:item{i}", i % 7), // hashed on the tag only
            _ => format!("k{i}"),
        })
        .collect();
    let mut through_nutcracker = connect(nc_port);
    for key in &keys {
        through_nutcracker
            .write_all(format!("set {key} 0 0 {}\r\n{key}\r\n", key.len()).as_bytes())
            .expect("write");
        let reply = read_until(&mut through_nutcracker, b"\r\n", Duration::from_secs(5));
        assert_eq!(reply, b"STORED\r\n", "{key} via nutcracker");
    }
    let mut through_tailtrim = connect(tt_port);
    for key in &keys {
        through_tailtrim
            .write_all(format!("get {key}\r\n").as_bytes())
            .expect("write");
        let reply = read_until(&mut through_tailtrim, b"END\r\n", Duration::from_secs(5));
        let expected = format!("VALUE {key} 0 {}\r\n{key}\r\nEND\r\n", key.len());
        assert_eq!(
            String::from_utf8_lossy(&reply),
            expected,
            "tailtrim routed {key} to another backend than nutcracker"
        );
    }
    let counts: Vec<u64> = backends
        .iter()
        .map(|b| b.stats()["curr_items"].parse().expect("count"))
        .collect();
    assert_eq!(counts.iter().sum::<u64>(), keys.len() as u64);
    assert!(
        counts.iter().all(|&c| c > 20),
        "keys not spread: {counts:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
