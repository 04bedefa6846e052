//! A client that pipelines more requests than the server buffers and does not
//! read its replies must cost the server nothing while it waits, under every
//! dispatch policy, and be served again when it reads. (A test binary of its
//! own: it measures this process's CPU time, which other tests would add to.)

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use socket2::{Domain, Socket, Type};
use tailtrim_server::config::DispatchPolicy;
use tailtrim_server::{start, ServerConfig};

const VALUE_LEN: usize = 1_000_000;

/// CPU time (user + system) this process has used.
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .expect("comm field")
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_millis(ticks * 1000 / per_second)
}

#[test]
fn a_client_that_does_not_read_its_replies_does_not_keep_the_server_busy() {
    for policy in DispatchPolicy::ALL {
        let mut config = ServerConfig::default();
        config.server.listen = "127.0.0.1".into();
        config.server.port = 0;
        config.workers.threads = 2;
        config.workers.dispatch = policy;
        let handle = start(config).expect("server starts");
        let address = handle.local_addr();

        let mut writer = TcpStream::connect(address).expect("connect");
        let mut set = format!("set big 0 0 {VALUE_LEN}\r\n").into_bytes();
        set.extend(vec![b'v'; VALUE_LEN]);
        set.extend_from_slice(b"\r\n");
        writer.write_all(&set).expect("write");
        let mut stored = [0u8; 8];
        writer.read_exact(&mut stored).expect("read");
        assert_eq!(&stored, b"STORED\r\n");

        // Far more requests than one read takes, for far more output than the
        // server holds per connection (4 MiB): its input stays unread in the
        // socket while the output waits for the client.
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
        socket.connect(&address.into()).expect("connect");
        let mut greedy: TcpStream = socket.into();
        greedy
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        greedy
            .write_all(&b"get big\r\n".repeat(20_000))
            .expect("write");
        std::thread::sleep(Duration::from_millis(500));

        let before = process_cpu();
        std::thread::sleep(Duration::from_secs(2));
        let used = process_cpu() - before;
        // Before the fix the event loop spun on the unread input: 70-94 % of a
        // core (1.4-1.9 s here). Waiting costs next to nothing.
        assert!(
            used < Duration::from_millis(400),
            "{policy:?}: the server used {used:?} of CPU in 2 s waiting for a client to read"
        );

        // Reading resumes the output, in order.
        let header = format!("VALUE big 0 {VALUE_LEN}\r\n");
        let mut reply = vec![0u8; header.len() + VALUE_LEN + 7];
        for _ in 0..8 {
            greedy.read_exact(&mut reply).expect("a reply");
            assert!(
                reply.starts_with(header.as_bytes()),
                "{policy:?}: out of step"
            );
            assert!(reply.ends_with(b"\r\nEND\r\n"), "{policy:?}: out of step");
        }
        drop(greedy);
        handle.shutdown();
    }
}
