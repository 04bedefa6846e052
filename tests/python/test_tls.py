"""pymemcache over TLS (`serve -Z`): the whole pymemcache suite again, through a client with
`tls_context`, plus what a TLS client must see: a wrong host name and an untrusted
certificate refused, a plain client on the TLS port served nothing. scripts/test.sh also runs
it through `tailtrim proxy` (crates/proxy/scripts/proxy-as-server.sh hands `-Z` and the
`ssl_*` options to the proxy's client listener), so pymemcache's suite passes over TLS through
the proxy as well.

Certificates are made for the run with the openssl CLI (scripts/setup-deps.sh installs it):
a CA, and a server certificate it signed for localhost and 127.0.0.1.
"""

import socket
import ssl
import subprocess

import pytest
from pymemcache.client.base import Client

from conftest import free_port, server_command, serving
from test_pymemcache import *  # noqa: F401,F403 -- the suite, rerun here over TLS


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """Directory with ca.pem, server.pem and server.key."""
    d = tmp_path_factory.mktemp("tls")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
            "-out", "ca.pem", "-days", "2", "-subj", "/CN=tailtrim test CA", cwd=d)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
            "-out", "server.csr", "-subj", "/CN=localhost", cwd=d)
    (d / "san.cnf").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "san.cnf",
            cwd=d)
    return d


@pytest.fixture(scope="module")
def server(pki):
    """(host, port) of a server with TLS on its port; killed at the end of the module."""
    port = free_port()
    tls = ["-Z", "-o", f"ssl_chain_cert={pki / 'server.pem'},ssl_key={pki / 'server.key'}"]
    yield from serving(server_command(port) + tls, port)


def tls_context(pki):
    return ssl.create_default_context(cafile=str(pki / "ca.pem"))


@pytest.fixture
def client(server, pki):
    c = Client(server, connect_timeout=5, timeout=5, tls_context=tls_context(pki))
    yield c
    c.close()


def test_the_client_verifies_the_host_name(server, pki):
    context = tls_context(pki)
    with socket.create_connection(server, timeout=5) as raw:
        with pytest.raises(ssl.SSLCertVerificationError):
            context.wrap_socket(raw, server_hostname="cache.elsewhere.example")


def test_an_untrusted_certificate_is_refused(server):
    context = ssl.create_default_context()  # the system's CAs, not the test CA
    with socket.create_connection(server, timeout=5) as raw:
        with pytest.raises(ssl.SSLCertVerificationError):
            context.wrap_socket(raw, server_hostname="localhost")


def test_a_plain_client_on_the_tls_port_gets_no_reply(server, client, prefix):
    client.set(prefix + "k", b"v", noreply=False)
    with socket.create_connection(server, timeout=5) as raw:
        raw.sendall(f"get {prefix}k\r\n".encode())
        got = b""
        try:
            while True:
                chunk = raw.recv(4096)
                if not chunk:
                    break
                got += chunk
        except ConnectionResetError:
            pass
    assert b"VALUE" not in got
    # The TLS client is undisturbed.
    assert client.get(prefix + "k") == b"v"
