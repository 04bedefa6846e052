"""pymemcache against `tailtrim serve`: every common client operation, values up to 1 MB."""

import os
import time

import pytest
from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheServerError


@pytest.fixture
def client(server):
    c = Client(server, connect_timeout=5, timeout=5)
    yield c
    c.close()


def pattern(key: str, n: int) -> bytes:
    """A value of n bytes that embeds its key, so a wrong value can never look right."""
    unit = (key + "|").encode()
    return (unit * (n // len(unit) + 1))[:n]


def test_set_get(client, prefix):
    assert client.set(prefix + "a", b"hello", noreply=False) is True
    assert client.get(prefix + "a") == b"hello"
    assert client.get(prefix + "missing") is None


def test_flags_round_trip(client, prefix):
    client.set(prefix + "f", b"x", noreply=False, flags=12345)
    # pymemcache hides flags behind its serde; read them on the raw protocol.
    reply = client.raw_command(f"get {prefix}f".encode(), b"END")
    assert reply == f"VALUE {prefix}f 12345 1\r\nx\r\n".encode()


def test_get_many(client, prefix):
    keys = [f"{prefix}{i}" for i in range(200)]
    for i, k in enumerate(keys):
        if i % 4:
            client.set(k, k.encode(), noreply=False)
    got = client.get_many(keys)
    assert set(got) == {k for i, k in enumerate(keys) if i % 4}
    assert all(got[k] == k.encode() for k in got)


def test_gets_cas(client, prefix):
    k = prefix + "c"
    client.set(k, b"one", noreply=False)
    value, token = client.gets(k)
    assert value == b"one"
    assert client.cas(k, b"two", token, noreply=False) is True
    # A stale token must be refused and leave the value alone.
    assert client.cas(k, b"three", token, noreply=False) is False
    assert client.get(k) == b"two"
    _, new_token = client.gets(k)
    assert new_token != token
    client.delete(k, noreply=False)
    assert client.cas(k, b"four", new_token, noreply=False) is None


def test_incr_decr(client, prefix):
    k = prefix + "n"
    assert client.incr(k, 1, noreply=False) is None
    client.set(k, b"10", noreply=False)
    assert client.incr(k, 5, noreply=False) == 15
    assert client.decr(k, 100, noreply=False) == 0
    client.set(k, b"18446744073709551615", noreply=False)
    assert client.incr(k, 2, noreply=False) == 1
    client.set(k, b"abc", noreply=False)
    with pytest.raises(Exception) as err:
        client.incr(k, 1, noreply=False)
    assert "non-numeric" in str(err.value) or "invalid" in str(err.value)


def test_delete(client, prefix):
    k = prefix + "d"
    assert client.delete(k, noreply=False) is False
    client.set(k, b"x", noreply=False)
    assert client.delete(k, noreply=False) is True
    assert client.get(k) is None


def test_touch(client, prefix):
    k = prefix + "t"
    assert client.touch(k, 10, noreply=False) is False
    client.set(k, b"x", expire=1, noreply=False)
    assert client.touch(k, 100, noreply=False) is True
    time.sleep(2.1)
    assert client.get(k) == b"x"
    assert client.touch(k, -1, noreply=False) is True
    assert client.get(k) is None


def test_expiry(client, prefix):
    client.set(prefix + "e", b"x", expire=1, noreply=False)
    client.set(prefix + "keep", b"y", expire=0, noreply=False)
    time.sleep(2.1)
    assert client.get(prefix + "e") is None
    assert client.get(prefix + "keep") == b"y"


def test_add_replace_append_prepend(client, prefix):
    k = prefix + "ar"
    assert client.replace(k, b"r", noreply=False) is False
    assert client.add(k, b"a", noreply=False) is True
    assert client.add(k, b"b", noreply=False) is False
    assert client.replace(k, b"c", noreply=False) is True
    assert client.append(k, b">", noreply=False) is True
    assert client.prepend(k, b"<", noreply=False) is True
    assert client.get(k) == b"<c>"
    assert client.append(prefix + "none", b"x", noreply=False) is False
    assert client.prepend(prefix + "none", b"x", noreply=False) is False


def test_noreply(client, prefix):
    k = prefix + "q"
    client.set(k, b"1", noreply=True)
    client.add(prefix + "q2", b"2", noreply=True)
    client.append(k, b"0", noreply=True)
    client.incr(k, 5, noreply=True)
    client.delete(prefix + "q2", noreply=True)
    # Replies to noreply commands must not leak into the next reply.
    assert client.get(k) == b"15"
    assert client.get(prefix + "q2") is None


@pytest.mark.parametrize("size", [0, 1, 1400, 65536, 500_000, 1_000_000])
def test_large_values(client, prefix, size):
    k = f"{prefix}big{size}"
    value = pattern(k, size)
    assert client.set(k, value, noreply=False) is True
    assert client.get(k) == value


def test_over_item_limit_rejected(client, prefix):
    k = prefix + "huge"
    with pytest.raises(MemcacheServerError) as err:
        client.set(k, pattern(k, 1_100_000), noreply=False)
    assert "too large" in str(err.value)
    # The same connection stays usable.
    assert client.set(k, b"small", noreply=False) is True
    assert client.get(k) == b"small"


def test_many_keys(client, prefix):
    keys = [f"{prefix}m{i}" for i in range(3000)]
    client.set_many({k: k.encode() for k in keys}, noreply=False)
    for start in range(0, len(keys), 100):
        batch = keys[start : start + 100]
        got = client.get_many(batch)
        assert got == {k: k.encode() for k in batch}


def test_stats_and_version(client):
    stats = client.stats()
    for name in (b"pid", b"uptime", b"curr_connections", b"cmd_get", b"cmd_set", b"curr_items", b"limit_maxbytes", b"evictions", b"threads"):
        assert name in stats, name
    asked = 64 * 1024 * 1024
    if os.environ.get("TAILTRIM_PROXY_CHURN"):
        # Through a proxy whose pool gains and loses one more backend of the same size
        # (crates/proxy/scripts/proxy-as-server.sh), the pool's memory follows its members.
        backends = int(os.environ.get("TAILTRIM_PROXY_BACKENDS", "2"))
        assert stats[b"limit_maxbytes"] in (asked, asked + asked // backends)
    else:
        assert stats[b"limit_maxbytes"] == asked
    assert client.version()
