//! A null memcached endpoint for measuring the noise floor of the bench's own
//! path (schedule, sockets, loopback, parsing) in the same run as a real
//! server: GETs answer `END` (all misses), SETs answer `STORED`, nothing is
//! stored.
//!
//! ```text
//!   accept thread ──> one thread per connection:
//!                     read line ─> (skip data block) ─> END | STORED | ERROR
//!                     flush when no further request is buffered
//! ```

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::BenchError;

/// A running null server; stops when dropped.
#[derive(Debug)]
pub struct NullServer {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl NullServer {
    /// Starts a null server on `127.0.0.1` with an ephemeral port.
    pub fn start() -> Result<Self, BenchError> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|source| BenchError::Io {
            context: "binding the null server".into(),
            source,
        })?;
        let address = listener.local_addr().map_err(|source| BenchError::Io {
            context: "reading the null server address".into(),
            source,
        })?;
        let stop = Arc::new(AtomicBool::new(false));
        let accept_stop = Arc::clone(&stop);
        let acceptor = std::thread::Builder::new()
            .name("null-server".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    if accept_stop.load(Ordering::Acquire) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let _ = std::thread::Builder::new()
                        .name("null-conn".into())
                        .spawn(move || serve(stream));
                }
            })
            .map_err(|source| BenchError::Io {
                context: "spawning the null server".into(),
                source,
            })?;
        Ok(Self {
            address,
            stop,
            acceptor: Some(acceptor),
        })
    }

    /// `host:port` to point the bench at.
    #[must_use]
    pub fn address(&self) -> String {
        self.address.to_string()
    }
}

impl Drop for NullServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.address);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn serve(stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let mut writer = BufWriter::new(write_half);
    let mut reader = BufReader::new(stream);
    let mut line = Vec::with_capacity(512);
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let mut words = line
            .split(|byte| *byte == b' ' || *byte == b'\r' || *byte == b'\n')
            .filter(|word| !word.is_empty());
        let reply: &[u8] = match words.next() {
            Some(b"get") | Some(b"gets") => b"END\r\n",
            Some(b"set") => {
                let length = words
                    .nth(3)
                    .and_then(|word| std::str::from_utf8(word).ok())
                    .and_then(|word| word.parse::<u64>().ok())
                    .unwrap_or(0);
                if std::io::copy(&mut (&mut reader).take(length + 2), &mut std::io::sink()).is_err()
                {
                    return;
                }
                b"STORED\r\n"
            }
            _ => b"ERROR\r\n",
        };
        if writer.write_all(reply).is_err() {
            return;
        }
        if reader.buffer().is_empty() && writer.flush().is_err() {
            return;
        }
    }
}
