//! The ring must place every key where Debian's `nutcracker` (twemproxy) places it.
//!
//! For several pool configurations (hash functions, weights, named servers) this test starts
//! three memcached backends and a nutcracker in front of them, stores 1000 keys through
//! nutcracker, asks every backend directly which keys it holds, and compares each holder with
//! `Ring::server_for`. Without `memcached`/`nutcracker` installed the test prints why and
//! passes, unless `CI=true`, where a missing binary is a failure.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tailtrim_policy::ring::{ketama_name, HashFunction, Ring, RingOptions, RingServer};

const KEY_COUNT: usize = 1000;

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn binary_available(name: &str) -> bool {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {name}"))
        .stdout(Stdio::null())
        .status()
        .map(|status| status.success())
        .unwrap_or(false);
    if !found {
        if std::env::var("CI")
            .map(|value| value == "true")
            .unwrap_or(false)
        {
            panic!("{name} is not installed but CI=true: the test script must install it");
        }
        println!(
            "SKIP: {name} is not installed; install it (apt-get install {name}) to run this test"
        );
    }
    found
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|output| output.stdout.trim_ascii() == b"0")
        .unwrap_or(false)
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

fn wait_connectable(port: u16) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(stream) => {
                stream
                    .set_read_timeout(Some(Duration::from_secs(10)))
                    .expect("timeout");
                return stream;
            }
            Err(error) if Instant::now() > deadline => panic!("port {port} never opened: {error}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn start_memcached() -> (KillOnDrop, u16) {
    let port = free_port();
    let mut command = Command::new("memcached");
    command.args([
        "-l",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-U",
        "0",
        "-m",
        "64",
    ]);
    if running_as_root() {
        // memcached refuses to run as root unless told which user to stay.
        command.args(["-u", "root"]);
    }
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn memcached");
    let guard = KillOnDrop(child);
    drop(wait_connectable(port));
    (guard, port)
}

fn keys() -> Vec<Vec<u8>> {
    (0..KEY_COUNT)
        .map(|index| {
            if index % 10 == 0 {
                // Non-ASCII keys check the signed-char widening of the C hash functions.
                format!("ключ:{index}:é").into_bytes()
            } else {
                format!("user:{index}:profile").into_bytes()
            }
        })
        .collect()
}

/// Pipelines `set` for every key and reads the STORED replies.
fn store_all(stream: &mut TcpStream, keys: &[Vec<u8>]) {
    let mut request = Vec::new();
    for key in keys {
        request.extend_from_slice(b"set ");
        request.extend_from_slice(key);
        request.extend_from_slice(b" 0 0 1\r\nv\r\n");
    }
    stream.write_all(&request).expect("write sets");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    for key in keys {
        let mut line = String::new();
        reader.read_line(&mut line).expect("read reply");
        assert_eq!(
            line,
            "STORED\r\n",
            "set {:?} through nutcracker",
            String::from_utf8_lossy(key)
        );
    }
}

/// Returns which of `keys` the memcached at `port` holds.
fn held_keys(port: u16, keys: &[Vec<u8>]) -> Vec<bool> {
    let mut stream = wait_connectable(port);
    let mut held = vec![false; keys.len()];
    for (chunk_index, chunk) in keys.chunks(100).enumerate() {
        let mut request = b"get".to_vec();
        for key in chunk {
            request.push(b' ');
            request.extend_from_slice(key);
        }
        request.extend_from_slice(b"\r\n");
        stream.write_all(&request).expect("write get");
        let mut reader = BufReader::new(stream.try_clone().expect("clone"));
        loop {
            let mut line = Vec::new();
            reader.read_until(b'\n', &mut line).expect("read");
            if line == b"END\r\n" {
                break;
            }
            let header = line.strip_prefix(b"VALUE ").expect("VALUE line");
            let key_end = header.iter().position(|&b| b == b' ').expect("key");
            let key = &header[..key_end];
            let position = chunk
                .iter()
                .position(|candidate| candidate == key)
                .expect("asked key");
            held[chunk_index * 100 + position] = true;
            let mut data = [0u8; 3];
            reader.read_exact(&mut data).expect("data");
        }
    }
    held
}

fn flush(port: u16) {
    let mut stream = wait_connectable(port);
    stream.write_all(b"flush_all\r\n").expect("flush");
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .expect("flush reply");
    assert_eq!(line, "OK\r\n");
}

struct PoolCase {
    hash: HashFunction,
    weights: [u32; 3],
    names: Option<[&'static str; 3]>,
}

fn check_case(case: &PoolCase, ports: &[u16; 3]) {
    for port in ports {
        flush(*port);
    }
    let listen_port = free_port();
    let stats_port = free_port();
    let dir = std::env::temp_dir().join(format!(
        "tailtrim-ketama-{}-{listen_port}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut yaml = format!(
        "pool:\n  listen: 127.0.0.1:{listen_port}\n  hash: {}\n  distribution: ketama\n  timeout: 5000\n  auto_eject_hosts: false\n  servers:\n",
        case.hash.name()
    );
    let mut ring_servers = Vec::new();
    for (index, port) in ports.iter().enumerate() {
        let weight = case.weights[index];
        match case.names {
            Some(names) => yaml.push_str(&format!(
                "   - 127.0.0.1:{port}:{weight} {}\n",
                names[index]
            )),
            None => yaml.push_str(&format!("   - 127.0.0.1:{port}:{weight}\n")),
        }
        ring_servers.push(RingServer {
            name: ketama_name("127.0.0.1", *port, case.names.map(|names| names[index])),
            weight,
        });
    }
    let config = dir.join("nutcracker.yml");
    std::fs::write(&config, &yaml).expect("write config");
    let child = Command::new("nutcracker")
        .arg("-c")
        .arg(&config)
        .args(["-s", &stats_port.to_string(), "-a", "127.0.0.1"])
        .arg("-o")
        .arg(dir.join("nutcracker.log"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn nutcracker");
    let _nutcracker = KillOnDrop(child);
    let mut stream = wait_connectable(listen_port);
    let keys = keys();
    store_all(&mut stream, &keys);

    let holdings: Vec<Vec<bool>> = ports.iter().map(|port| held_keys(*port, &keys)).collect();
    let ring = Ring::new(
        &ring_servers,
        RingOptions {
            hash: case.hash,
            ..RingOptions::default()
        },
    )
    .expect("ring");
    let mut per_server = [0usize; 3];
    for (index, key) in keys.iter().enumerate() {
        let holders: Vec<usize> = (0..3).filter(|server| holdings[*server][index]).collect();
        assert_eq!(
            holders.len(),
            1,
            "key {:?} held by {holders:?}",
            String::from_utf8_lossy(key)
        );
        assert_eq!(
            ring.server_for(key),
            holders[0],
            "hash {} weights {:?}: key {:?}",
            case.hash.name(),
            case.weights,
            String::from_utf8_lossy(key)
        );
        per_server[holders[0]] += 1;
    }
    // libmemcached's crc32 yields only 15 bits, so under ketama every key lands near the start
    // of the circle; nutcracker does the same (checked above), so only other hashes must spread.
    if case.hash != HashFunction::Crc32 {
        assert!(
            per_server.iter().all(|&count| count > 0),
            "hash {}: degenerate spread {per_server:?}",
            case.hash.name()
        );
    }
    println!(
        "hash {} weights {:?}: {per_server:?} keys per server, all agree",
        case.hash.name(),
        case.weights
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ring_agrees_with_nutcracker_for_every_key() {
    if !binary_available("memcached") || !binary_available("nutcracker") {
        return;
    }
    let backends: Vec<(KillOnDrop, u16)> = (0..3).map(|_| start_memcached()).collect();
    let ports = [backends[0].1, backends[1].1, backends[2].1];
    let mut cases: Vec<PoolCase> = HashFunction::NAMES
        .iter()
        .map(|name| PoolCase {
            hash: HashFunction::from_name(name).expect("known hash"),
            weights: [1, 1, 1],
            names: None,
        })
        .collect();
    cases.push(PoolCase {
        hash: HashFunction::Fnv1a64,
        weights: [1, 3, 2],
        names: None,
    });
    cases.push(PoolCase {
        hash: HashFunction::Md5,
        weights: [5, 1, 1],
        names: None,
    });
    cases.push(PoolCase {
        hash: HashFunction::Fnv1a64,
        weights: [1, 1, 2],
        names: Some(["alpha", "beta", "gamma"]),
    });
    for case in &cases {
        check_case(case, &ports);
    }
}
