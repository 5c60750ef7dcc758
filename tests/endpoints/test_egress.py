"""The egress policy: what server mode may connect to, checked statically and after DNS on real
sockets (a bare loopback listener counts every connection that got through)."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from evalsvc.domain import EndpointRef
from evalsvc.endpoints import (
    EgressPolicy,
    EgressRefused,
    EndpointClient,
    EndpointError,
    literal_address,
)
from tests.fixtures.faults import listener

LOOPBACK = ipaddress.ip_address("127.0.0.1")


@pytest.mark.parametrize(
    "spelling",
    ["127.0.0.1", "0x7f000001", "2130706433", "127.1", "0177.0.0.1", "0x7f.1",
     "::ffff:127.0.0.1", "[::ffff:7f00:1]", "127.0.0.1."],
)
def test_odd_ipv4_spellings_are_read_as_the_resolver_reads_them(spelling: str) -> None:
    assert literal_address(spelling) == LOOPBACK
    with pytest.raises(EgressRefused, match="loopback"):
        EgressPolicy.parse("").check_host(spelling)


@pytest.mark.parametrize("name", ["deadbeef", "cafe.face", "gpu-a", "1e100.net"])
def test_host_names_that_look_numeric_are_names(name: str) -> None:
    assert literal_address(name) is None


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://169.254.169.254/latest/meta-data", "metadata"),
        ("http://[fd00:ec2::254]/", "metadata"),
        ("http://100.100.100.200/", "metadata"),
        ("http://metadata.google.internal/computeMetadata/v1", "metadata"),
        ("http://169.254.10.1:8000/v1", "link-local"),
        ("http://[fe80::1]:8000/v1", "link-local"),
        ("http://0.0.0.0:8000/v1", "not a unicast"),
    ],
)
def test_link_local_and_metadata_are_refused_whatever_the_allowlist(url: str, reason: str) -> None:
    for allow in ("", "*", "169.254.0.0/16,fe80::/10,fd00::/8,0.0.0.0/0,100.64.0.0/10",
                  "metadata.google.internal"):
        with pytest.raises(EgressRefused, match=reason):
            EgressPolicy.parse(allow).check_url(url)


def test_private_and_loopback_only_when_allowed() -> None:
    empty = EgressPolicy.parse("")
    for url in ("http://127.0.0.1:5432/", "http://10.1.2.3:8000/v1", "http://192.168.0.9/v1",
                "http://[::1]:8000/v1", "http://localhost:8000/v1", "http://a.localhost/v1"):
        with pytest.raises(EgressRefused):
            empty.check_url(url)
    empty.check_url("http://8.8.8.8/v1")  # public: fine while no allowlist is set
    allow = EgressPolicy.parse("127.0.0.0/8, gpu-a, *.serving.internal, 10.0.0.5")
    allow.check_url("http://127.0.0.1:8000/v1")
    allow.check_url("http://localhost:8000/v1")  # localhost is 127.0.0.1, which is allowed
    allow.check_url("http://10.0.0.5:8000/v1")
    allow.check_address(ipaddress.ip_address("10.9.9.9"), host="a.serving.internal")
    with pytest.raises(EgressRefused, match="private"):
        allow.check_address(ipaddress.ip_address("10.9.9.9"), host="serving.internal")
    with pytest.raises(EgressRefused, match="not in EVALSVC_ALLOWED_ENDPOINTS"):
        allow.check_url("http://8.8.8.8/v1")  # a set allowlist is exhaustive ...
    EgressPolicy.parse("127.0.0.0/8,*").check_url("http://8.8.8.8/v1")  # ... unless "*"


def test_local_mode_restricts_nothing() -> None:
    local = EgressPolicy.local()
    local.check_url("http://127.0.0.1:8000/v1")
    local.check_key_env("AWS_SECRET_ACCESS_KEY")


@pytest.mark.parametrize("bad", ["not a host!", "10.0.0.0/33", "http://x/"])
def test_bad_allowlist_entries_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="EVALSVC_ALLOWED_ENDPOINTS"):
        EgressPolicy.parse(bad)


def test_key_names_outside_the_prefix_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = EgressPolicy.parse("")
    monkeypatch.setenv("EVALSVC_ENDPOINT_KEY_PROD", "k-123")
    assert policy.api_key("EVALSVC_ENDPOINT_KEY_PROD") == "k-123"
    for name in ("EVALSVC_DATABASE_URL", "AWS_SECRET_ACCESS_KEY", "EVALSVC_ENDPOINT_KEY_",
                 "evalsvc_endpoint_key_prod"):
        with pytest.raises(EgressRefused, match="api_key_env"):
            policy.api_key(name)


# ---- on real sockets --------------------------------------------------------------------------


def _loopback_hostname() -> str | None:
    """This machine's name when it resolves to loopback (a name the static check cannot judge)."""
    name = socket.gethostname()
    try:
        infos = socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)
    except OSError:
        return None
    ips = {ipaddress.ip_address(str(i[4][0]).split("%")[0]) for i in infos}
    return name if ips and all(ip.is_loopback for ip in ips) else None


async def _models(ref: EndpointRef, policy: EgressPolicy) -> str:
    async with EndpointClient(ref, retries=1, timeout_s=2.0, egress=policy) as c:
        with pytest.raises(EndpointError) as info:
            await c.models()
    return str(info.value)


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "0x7f000001", "127.1", "hostname"])
async def test_loopback_is_refused_before_any_connection(host: str) -> None:
    if host == "hostname":
        found = _loopback_hostname()
        if found is None:
            pytest.skip("this machine's host name does not resolve to loopback")
        host = found
    with listener() as lst:
        error = await _models(EndpointRef(url=lst.url(host)), EgressPolicy.parse(""))
    assert "loopback" in error and "refused" in error
    assert lst.connections == 0


async def test_dns_answer_is_checked_at_connect_time() -> None:
    """A name that passes the static check (no DNS) but resolves to loopback is refused by the
    connect-time check, after resolution (the DNS-rebinding defence); allowing loopback lets
    the very same request connect (so the refusal is the policy's, not a dead port's)."""
    name = _loopback_hostname()
    if name is None:
        pytest.skip("this machine's host name does not resolve to loopback")
    strict = EgressPolicy.parse("")
    strict.check_url(f"http://{name}:1/v1")  # the static check cannot know
    with listener() as lst:
        error = await _models(EndpointRef(url=lst.url(name)), strict)
        assert "refused by the egress policy" in error and "(127." in error
        assert lst.connections == 0
        await _models(EndpointRef(url=lst.url(name)), EgressPolicy.parse("127.0.0.0/8"))
        assert lst.connections >= 1


async def test_a_refused_key_sends_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSVC_DATABASE_URL", "postgresql://evalsvc:db-secret-41@db/evalsvc")
    with listener() as lst:
        ref = EndpointRef(url=lst.url(), api_key_env="EVALSVC_DATABASE_URL")
        error = await _models(ref, EgressPolicy.parse("127.0.0.0/8"))
    assert "api_key_env 'EVALSVC_DATABASE_URL' is refused" in error
    assert lst.connections == 0 and b"db-secret-41" not in lst.received
