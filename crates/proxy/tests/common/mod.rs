//! Shared harness: memcached backends + an in-process proxy, and a blocking text client.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tailtrim_client::testkit::{start_memcached, ChildGuard};
use tailtrim_proxy::frontend::Shared;
use tailtrim_proxy::{Proxy, ProxyConfig};

/// A running proxy over memcached backends; everything stops on drop.
pub struct Harness {
    pub backends: Vec<ChildGuard>,
    pub address: SocketAddr,
    pub admin: Option<SocketAddr>,
    pub shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

pub struct Options {
    pub backends: usize,
    pub replicas: usize,
    pub timeout_ms: u64,
    pub failure_limit: u32,
    pub retry_ms: u64,
    /// `[pool] planner`.
    pub planner: &'static str,
    /// `[pool] chisel_fixed` ("" = online analyzer).
    pub chisel_fixed: &'static str,
    /// `[pool] inject_overhead_us`.
    pub inject_overhead_us: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            backends: 3,
            replicas: 1,
            timeout_ms: 300,
            failure_limit: 2,
            retry_ms: 400,
            planner: "batch",
            chisel_fixed: "",
            inject_overhead_us: 0,
        }
    }
}

pub fn config_for(ports: &[u16], options: &Options) -> ProxyConfig {
    let mut config = ProxyConfig::default();
    config.proxy.listen = "127.0.0.1:0".to_string();
    config.proxy.admin_listen = "127.0.0.1:0".to_string();
    config.pool.servers = ports
        .iter()
        .map(|port| format!("127.0.0.1:{port}:1"))
        .collect();
    config.pool.replicas = options.replicas;
    config.pool.timeout_ms = options.timeout_ms;
    config.pool.connect_timeout_ms = 200;
    config.pool.server_failure_limit = options.failure_limit;
    config.pool.server_retry_timeout_ms = options.retry_ms;
    config.pool.planner = options.planner.to_string();
    config.pool.chisel_fixed = options.chisel_fixed.to_string();
    config.pool.inject_overhead_us = options.inject_overhead_us;
    config
}

pub fn start(options: Options) -> Harness {
    start_with(options, |_| {})
}

/// [`start`] with `edit` applied to the configuration before the proxy binds.
pub fn start_with(options: Options, edit: impl FnOnce(&mut ProxyConfig)) -> Harness {
    let backends: Vec<ChildGuard> = (0..options.backends).map(|_| start_memcached()).collect();
    let ports: Vec<u16> = backends.iter().map(|backend| backend.port).collect();
    let mut config = config_for(&ports, &options);
    edit(&mut config);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let proxy = runtime.block_on(Proxy::bind(&config)).expect("bind proxy");
    let address = proxy.local_addr().expect("address");
    let admin = proxy.admin_addr();
    let shared = proxy.shared();
    runtime.spawn(proxy.serve());
    Harness {
        backends,
        address,
        admin,
        shared,
        runtime: Some(runtime),
    }
}

/// Which backend index owns `key` (replica 0).
pub fn owner(harness: &Harness, key: &str) -> usize {
    harness
        .shared
        .pool
        .current()
        .ring()
        .server_for(key.as_bytes())
}

pub fn connect(address: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream
}

/// Sends `bytes` followed by `mn\r\n` and returns everything before `MN\r\n` (or until EOF).
pub fn exchange(stream: &mut TcpStream, bytes: &[u8]) -> Vec<u8> {
    let mut request = bytes.to_vec();
    request.extend_from_slice(b"mn\r\n");
    stream.write_all(&request).expect("write");
    let mut reply = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        if reply.ends_with(b"MN\r\n") {
            reply.truncate(reply.len() - 4);
            return reply;
        }
        match stream.read(&mut chunk) {
            Ok(0) => return reply,
            Ok(n) => reply.extend_from_slice(&chunk[..n]),
            // A read on a socket with a receive timeout is never restarted: a handled signal,
            // or this process being stopped and continued, ends it with EINTR (signal(7)).
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => panic!(
                "read failed after {:?}: {error}",
                String::from_utf8_lossy(&reply)
            ),
        }
    }
}

/// One request on a fresh connection; returns the reply and how long it took.
pub fn once(address: SocketAddr, bytes: &[u8]) -> (Vec<u8>, Duration) {
    let mut stream = connect(address);
    let started = Instant::now();
    let reply = exchange(&mut stream, bytes);
    (reply, started.elapsed())
}

pub fn value_for(key: &str) -> String {
    format!("[{key}]{}", "v".repeat(key.len() % 23))
}

pub fn set_command(key: &str) -> Vec<u8> {
    let value = value_for(key);
    format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()).into_bytes()
}

/// Parses a `get` reply into (key, data) pairs, checking framing; `None` if it is not
/// `VALUE…END` (e.g. a SERVER_ERROR line).
pub fn parse_values(reply: &[u8]) -> Option<Vec<(String, Vec<u8>)>> {
    let mut values = Vec::new();
    let mut rest = reply;
    loop {
        if rest == b"END\r\n" {
            return Some(values);
        }
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let line = std::str::from_utf8(&rest[..line_end]).ok()?;
        let mut words = line.split(' ');
        if words.next()? != "VALUE" {
            return None;
        }
        let key = words.next()?.to_string();
        let _flags = words.next()?;
        let length: usize = words.next()?.parse().ok()?;
        let data_start = line_end + 2;
        let data = rest.get(data_start..data_start + length)?.to_vec();
        if rest.get(data_start + length..data_start + length + 2)? != b"\r\n" {
            return None;
        }
        values.push((key, data));
        rest = &rest[data_start + length + 2..];
    }
}

pub fn backend_requests(harness: &Harness) -> u64 {
    harness
        .shared
        .pool
        .current()
        .backends()
        .iter()
        .map(|backend| backend.stats().requests.get())
        .sum()
}

/// One HTTP request to the admin listener; returns (status code, body).
pub fn admin(harness: &Harness, method: &str, target: &str) -> (u16, String) {
    let address = harness.admin.expect("admin listener");
    let mut stream = TcpStream::connect(address).expect("connect admin");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    write!(stream, "{method} {target} HTTP/1.1\r\nHost: x\r\n\r\n").expect("write");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("read admin reply");
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = text
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    (status, body)
}
