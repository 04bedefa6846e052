"""Server CPU per request, client-seen p99 and new TLS connections per second:
`tailtrim serve -Z` against `memcached -Z`, interleaved and repeated (see README.md).

usage: python3 experiments/tls/cpu_per_request.py [REQUESTS] [TAILTRIM_BINARY]
One unpipelined Python client over TLS; the servers' CPU is read from /proc/PID/stat
(clock ticks: a few microseconds of resolution per request at 5000 requests).
"""
import os, socket, ssl, subprocess, sys, tempfile, time
N = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
TT = sys.argv[2] if len(sys.argv) > 2 else "target/release/tailtrim"
DIR = tempfile.mkdtemp(prefix="tailtrim-tls-bench-")
CERT, KEY = os.path.join(DIR, "cert.pem"), os.path.join(DIR, "key.pem")
subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", KEY,
                "-out", CERT, "-days", "2", "-subj", "/CN=localhost",
                "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
               check=True, capture_output=True)
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
def run(kind, port, size):
    tls = ["-Z", "-o", f"ssl_chain_cert={CERT},ssl_key={KEY}"]
    common = ["-p", str(port), "-U", "0", "-l", "127.0.0.1", "-t", "2", "-m", "256"]
    cmd = ([TT, "serve"] if kind == "tailtrim" else ["memcached", "-u", "root"]) + common + tls
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.4)  # both listen well within this on an idle host
    ctx = ssl.create_default_context(cafile=CERT)
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost")
    v = b"x" * size
    s.sendall(b"set k 0 0 %d\r\n" % size + v + b"\r\n"); s.recv(100)
    want = len(b"VALUE k 0 %d\r\n" % size) + size + 7
    c0 = cpu(p.pid); t0 = time.perf_counter(); lat = []
    for _ in range(N):
        a = time.perf_counter(); s.sendall(b"get k\r\n"); got = 0
        while got < want: got += len(s.recv(1 << 20))
        lat.append(time.perf_counter() - a)
    c1 = cpu(p.pid)
    # new connections per second (handshake + version)
    h0 = time.perf_counter(); hc = 0; hcpu0 = cpu(p.pid)
    while time.perf_counter() - h0 < 2:
        t = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost")
        t.sendall(b"version\r\n"); t.recv(100); t.close(); hc += 1
    hcpu = cpu(p.pid) - hcpu0
    p.kill(); p.wait()
    lat.sort()
    return (c1 - c0) / N * 1e6, lat[int(0.99 * N)] * 1e6, hc / (time.perf_counter() - h0), hcpu / hc * 1e6
port = 23000
print("load", open("/proc/loadavg").read().strip())
for rep in range(3):
    for size in (32, 100 * 1024):
        for kind in ("memcached", "tailtrim"):
            port += 1
            us, p99, cps, hus = run(kind, port, size)
            print(f"rep{rep} size={size} {kind:9s} cpu/req={us:7.1f}us p99={p99:7.0f}us conns/s={cps:6.0f} cpu/conn={hus:6.0f}us", flush=True)
print("load", open("/proc/loadavg").read().strip())
