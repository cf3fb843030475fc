"""twopc.faultinject.FaultProxy against a real Redis server: forwarding, resets, latency,
blackholes (proxy-wide and per connection, per direction) and swallowed replies."""

from __future__ import annotations

import socket
import urllib.parse
import uuid
from collections.abc import Iterator

import pytest
import redis
import redis.exceptions as rex
from redis.backoff import NoBackoff
from redis.retry import Retry

from twopc.faultinject import FaultProxy

NO_RETRY = Retry(NoBackoff(), 0)


@pytest.fixture
def proxy(redis_url: str) -> Iterator[FaultProxy]:
    u = urllib.parse.urlsplit(redis_url)
    with FaultProxy(u.hostname or "127.0.0.1", u.port or 6379) as p:
        yield p


def _client(proxy: FaultProxy, redis_url: str, timeout: float = 0.5) -> redis.Redis:
    """A client through *proxy*, which gives up on a reply after *timeout* and never retries."""
    u = urllib.parse.urlsplit(redis_url)
    return redis.Redis(host=proxy.listen_host, port=proxy.port, db=int((u.path or "/0")[1:] or 0),
                       socket_timeout=timeout, socket_connect_timeout=timeout, retry=NO_RETRY)


def _key() -> str:
    return f"proxy-test:{uuid.uuid4().hex}"


def test_forwards_both_ways(proxy: FaultProxy, redis_url: str) -> None:
    client = _client(proxy, redis_url)
    key = _key()
    assert client.set(key, "v")
    assert client.get(key) == b"v"
    [conn] = proxy.connections()
    assert conn.bytes_up > 0 and conn.bytes_down > 0
    client.close()


def test_swallowed_reply_is_applied_but_never_answered(proxy: FaultProxy, redis_url: str) -> None:
    direct = redis.Redis.from_url(redis_url)
    key = _key()
    proxy.swallow_reply(b"applied", times=1)  # the value: SET alone also matches CLIENT SETINFO
    client = _client(proxy, redis_url)
    with pytest.raises(rex.TimeoutError):
        client.set(key, "applied")
    assert proxy.swallowed == 1
    assert direct.get(key) == b"applied"  # the request reached the server
    client.close()
    again = _client(proxy, redis_url)  # times=1: the next request is answered
    assert again.set(key, "second")
    assert direct.get(key) == b"second"
    again.close()


def test_swallow_until_healed(proxy: FaultProxy, redis_url: str) -> None:
    key = _key()
    proxy.swallow_reply("swallowed-value", times=None)
    for _ in range(2):
        client = _client(proxy, redis_url)
        with pytest.raises(rex.TimeoutError):
            client.set(key, "swallowed-value")
        client.close()
    assert proxy.swallowed == 2
    proxy.heal()
    client = _client(proxy, redis_url)
    assert client.set(key, "swallowed-value")
    client.close()


def test_upstream_blackhole_drops_requests(proxy: FaultProxy, redis_url: str) -> None:
    direct = redis.Redis.from_url(redis_url)
    key = _key()
    proxy.blackhole("upstream")
    client = _client(proxy, redis_url)
    with pytest.raises(rex.TimeoutError):
        client.set(key, "never")
    assert direct.get(key) is None  # the request never reached the server
    proxy.heal()
    client.close()
    client = _client(proxy, redis_url)
    assert client.set(key, "now")
    client.close()


def test_blackhole_for_a_while_ends_by_itself(proxy: FaultProxy, redis_url: str) -> None:
    proxy.blackhole("downstream", seconds=0.0)  # already over: nothing is dropped
    client = _client(proxy, redis_url)
    assert client.ping()
    proxy.blackhole("downstream", seconds=60)
    with pytest.raises(rex.TimeoutError):
        client.ping()
    client.close()


def test_per_connection_faults(proxy: FaultProxy, redis_url: str) -> None:
    first, second = _client(proxy, redis_url), _client(proxy, redis_url)
    assert first.ping() and second.ping()
    conns = proxy.connections()
    assert [c.id for c in conns] == [1, 2]
    conns[0].blackhole("downstream")
    with pytest.raises(rex.TimeoutError):
        first.ping()
    assert second.ping()  # the other connection is untouched
    first.close()
    second.close()


def test_reset_closes_connections(proxy: FaultProxy, redis_url: str) -> None:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    sock.sendall(b"PING\r\n")
    assert sock.recv(64) == b"+PONG\r\n"
    assert proxy.reset() == 1
    with pytest.raises(ConnectionResetError):  # an RST, not an orderly close
        sock.recv(64)
    sock.close()
    assert proxy.resets == 1
    assert _client(proxy, redis_url).ping()  # new connections go through


def test_latency_delays_replies(proxy: FaultProxy, redis_url: str) -> None:
    client = _client(proxy, redis_url, timeout=0.2)
    assert client.ping()
    proxy.add_latency(1.0, "downstream")  # longer than the client waits
    with pytest.raises(rex.TimeoutError):
        client.ping()
    client.close()
    proxy.heal()
    assert _client(proxy, redis_url, timeout=5).ping()


def test_arm_by_name(proxy: FaultProxy, redis_url: str) -> None:
    proxy.arm("swallow_reply", pattern="PING", times=1)
    client = _client(proxy, redis_url)
    with pytest.raises(rex.TimeoutError):
        client.ping()
    client.close()
    with pytest.raises(ValueError, match="unknown proxy fault"):
        proxy.arm("explode")
    with pytest.raises(ValueError, match="direction"):
        proxy.blackhole("sideways")  # type: ignore[arg-type]  # the wrong value is the point


def test_unreachable_upstream_resets_the_client() -> None:
    with FaultProxy("127.0.0.1", 1) as p:
        client = redis.Redis(host="127.0.0.1", port=p.port, socket_timeout=2, retry=NO_RETRY)
        with pytest.raises(rex.ConnectionError):
            client.ping()
