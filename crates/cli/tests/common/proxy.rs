//! A `tailtrim proxy` child process for the integration tests: started on a free port (again
//! on another one if a test started at the same moment took it), killed and reaped on drop.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, listener_owner};

/// Upper bound on the wait for the proxy's listener (bounds a hang, asserts no timing).
const START_LIMIT: Duration = Duration::from_secs(20);

/// A running `tailtrim proxy`.
pub struct Proxy {
    child: Child,
    /// The client listener.
    pub listen: SocketAddr,
}

impl Proxy {
    /// Starts `tailtrim proxy` with the arguments `args_for(listen)` returns for a free
    /// client address (the closure puts it on the command line or in a config file), its
    /// stderr captured (see [`Proxy::stderr`]), and waits until that address accepts
    /// connections from this proxy.
    pub fn launch(args_for: impl Fn(SocketAddr) -> Vec<String>) -> Proxy {
        const ATTEMPTS: usize = 5;
        let mut last = String::new();
        for _ in 0..ATTEMPTS {
            let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
            let child = Command::new(env!("CARGO_BIN_EXE_tailtrim"))
                .arg("proxy")
                .args(args_for(listen))
                .env_remove("TAILTRIM_ADMIN_TOKEN")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start tailtrim proxy");
            let mut proxy = Proxy { child, listen };
            match proxy.wait_listening() {
                Ok(()) => return proxy,
                Err(why) => last = why,
            }
        }
        panic!("{last}")
    }

    /// `tailtrim proxy --listen ADDR --admin off ARGS…`.
    pub fn start(args: &[&str]) -> Proxy {
        Proxy::launch(|listen| {
            let mut all = vec![
                "--listen".to_string(),
                listen.to_string(),
                "--admin".to_string(),
                "off".to_string(),
            ];
            all.extend(args.iter().map(|arg| arg.to_string()));
            all
        })
    }

    fn wait_listening(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_LIMIT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "tailtrim proxy exited early: {status}: {}",
                    self.stderr()
                ));
            }
            if TcpStream::connect_timeout(&self.listen, Duration::from_millis(200)).is_ok() {
                match listener_owner(self.listen.port()) {
                    Some(owner) if owner == self.child.id() => return Ok(()),
                    Some(owner) => {
                        let _ = self.stderr();
                        return Err(format!("port {} is held by process {owner}", self.listen));
                    }
                    None => {}
                }
            }
            assert!(Instant::now() < deadline, "the proxy never accepted");
            std::thread::sleep(Duration::from_millis(30));
        }
    }

    /// A new connection to the client listener, with `Nagle` off and a read timeout.
    pub fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(self.listen).expect("connect to the proxy");
        stream.set_nodelay(true).expect("nodelay");
        stream
            .set_read_timeout(Some(START_LIMIT))
            .expect("read timeout");
        stream
    }

    /// Sends signal `name` (e.g. `HUP`) to the proxy.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} failed");
    }

    /// Stops the proxy and returns what it wrote to stderr.
    pub fn stderr(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut text = String::new();
        if let Some(mut stderr) = self.child.stderr.take() {
            let _ = stderr.read_to_string(&mut text);
        }
        text
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
