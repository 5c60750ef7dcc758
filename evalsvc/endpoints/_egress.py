"""Egress policy: which addresses a server-mode process may connect to, and which credentials
it may send (docs/security.md).

Contract:
- ``EgressPolicy.local()`` restricts nothing: in-process ``evalsvc compare`` calls URLs its own
  user typed, usually on loopback. ``EgressPolicy.from_settings()`` (server mode) is built from the settings
  (``EVALSVC_ALLOWED_ENDPOINTS``, ``EVALSVC_ENDPOINT_KEY_PREFIX``) and is what the API server
  checks at registration and submission and what workers connect through. Server mode is
  chosen by the code path (REST routes, ``execute_stored_run``), never by a setting, so a
  missing variable cannot switch it off.
- Server mode always refuses link-local (169.254.0.0/16, fe80::/10), cloud metadata
  (169.254.169.254, fd00:ec2::254, 100.100.100.200, metadata.google.internal), unspecified and
  multicast addresses; loopback, private and other non-global addresses only when the
  allowlist admits them (by host name, ``*.domain`` pattern or CIDR). A non-empty allowlist is
  exhaustive: public addresses then need an entry too (``*`` admits every public address).
- Odd IPv4 spellings (``0x7f000001``, ``2130706433``, ``127.1``, octal) are read the way the
  C resolver reads them (``inet_aton``) and IPv4-mapped IPv6 is unmapped before any check.
- ``check_url`` is the static check (no DNS): literal addresses and reserved names are judged
  at once, and for a literal address that judgement is final. ``GuardedResolver`` is the
  authoritative check of a host name: the endpoint client's connector resolves through it, it
  checks every address, and the socket opens to a checked address, so a DNS answer that
  changes between check and connect (rebinding) cannot steer the socket.
- ``check_key_env`` / ``api_key`` apply the credential rule: server mode honours only
  variable names under the prefix.
Errors are ``EgressRefused`` with a one-line reason.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import anyio
from aiohttp.abc import AbstractResolver, ResolveResult

from evalsvc.settings import Settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Instance-metadata services (AWS/Azure/GCP/OpenStack, AWS IPv6, Alibaba). The IPv4 one is
#: link-local anyway; the others are not, so they are listed by address.
METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
METADATA_NAMES = frozenset({"metadata.google.internal", "metadata.goog", "metadata"})
#: RFC 6761: "localhost" and its subdomains are loopback whatever DNS says.
_LOOPBACK_NAMES = ("localhost",)
_ALLOWLIST_ENV = "EVALSVC_ALLOWED_ENDPOINTS"
_KEY_NAME = re.compile(r"^[A-Z0-9_]+$")
# What inet_aton accepts: up to four dot-separated decimal, octal (0...) or hex (0x...) parts.
_INET_ATON = re.compile(r"^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+)){0,3}$")


class EgressRefused(Exception):
    """The policy refuses an address, host or credential; ``str()`` is the one-line reason."""


def literal_address(host: str) -> IPAddress | None:
    """The IP address ``host`` denotes literally (any spelling the resolver accepts), else None."""
    h = host.strip().strip("[]").lower().rstrip(".")
    try:
        return _unmap(ipaddress.ip_address(h.split("%", 1)[0]))  # drop an IPv6 zone id
    except ValueError:
        pass
    if _INET_ATON.match(h):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(h))
        except OSError:
            return None
    return None


def _unmap(ip: IPAddress) -> IPAddress:
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip.sixtofour is not None and not ip.sixtofour.is_global:
            return ip.sixtofour  # 2002:7f00:1::/48 routes to 127.0.0.1 on 6to4 hosts
    return ip


def _host_of(url: str) -> str:
    try:
        host = urlsplit(url.strip()).hostname
    except ValueError as exc:
        raise EgressRefused(f"invalid endpoint URL: {exc}") from None
    if not host:
        raise EgressRefused("endpoint URL has no host")
    return host.lower().rstrip(".")


@dataclass(frozen=True)
class EgressPolicy:
    """What one process may connect to and which credentials it may send."""

    server: bool
    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()
    networks: tuple[IPNetwork, ...] = ()
    any_public: bool = True
    key_prefix: str = "EVALSVC_ENDPOINT_KEY_"
    source: str = field(default="", compare=False)

    @classmethod
    def local(cls) -> EgressPolicy:
        """In-process CLI use: the user's own URLs and environment, nothing restricted."""
        return cls(server=False)

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> EgressPolicy:
        """The API server's and workers' policy, from the settings (read now)."""
        s = settings or Settings()
        return cls.parse(s.allowed_endpoints, key_prefix=s.endpoint_key_prefix)

    @classmethod
    def parse(cls, spec: str, *, key_prefix: str = "EVALSVC_ENDPOINT_KEY_") -> EgressPolicy:
        """A server policy from ``EVALSVC_ALLOWED_ENDPOINTS``' syntax; ``ValueError`` if bad."""
        names: set[str] = set()
        suffixes: list[str] = []
        networks: list[IPNetwork] = []
        entries = [e.strip().lower() for e in spec.split(",") if e.strip()]
        any_public = not entries
        for entry in entries:
            if entry == "*":
                any_public = True
            elif entry.startswith("*."):
                suffixes.append(entry[1:].rstrip("."))
            elif "/" in entry:
                try:
                    networks.append(ipaddress.ip_network(entry, strict=False))
                except ValueError as exc:
                    raise ValueError(f"{_ALLOWLIST_ENV}: bad CIDR {entry!r}: {exc}") from None
            elif (ip := literal_address(entry)) is not None:
                networks.append(ipaddress.ip_network(ip))
            elif re.fullmatch(r"[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?", entry):
                names.add(entry.rstrip("."))
            else:
                raise ValueError(
                    f"{_ALLOWLIST_ENV}: {entry!r} is not a host, *.domain pattern or CIDR"
                )
        return cls(
            server=True,
            names=frozenset(names),
            suffixes=tuple(suffixes),
            networks=tuple(networks),
            any_public=any_public,
            key_prefix=key_prefix,
            source=spec,
        )

    # ---- hosts and addresses ----------------------------------------------------------------

    def _name_allowed(self, host: str) -> bool:
        return host in self.names or any(
            host.endswith(sfx) and len(host) > len(sfx) for sfx in self.suffixes
        )

    def check_url(self, url: str) -> None:
        """Static check of an endpoint URL (registration, submission). No DNS."""
        if self.server:
            self.check_host(_host_of(url))

    def check_host(self, host: str) -> IPAddress | None:
        """Refuse ``host`` if its name or literal address is refused; return the address."""
        if not self.server:
            return literal_address(host)
        host = host.lower().rstrip(".")
        ip = literal_address(host)
        if ip is not None:
            self.check_address(ip, host=host)
            return ip
        if host in METADATA_NAMES:
            raise EgressRefused(f"{host} is a cloud metadata service: always refused")
        if any(host == n or host.endswith("." + n) for n in _LOOPBACK_NAMES):
            # RFC 6761: judged as the loopback address it is, before any DNS answer is seen
            self.check_address(ipaddress.IPv4Address("127.0.0.1"), host=host)
        return None

    def check_address(self, ip: IPAddress, *, host: str | None = None) -> None:
        """Refuse a resolved (or literal) address that this policy does not admit."""
        if not self.server:
            return
        ip = _unmap(ip)
        shown = f"{host} ({ip})" if host and host != str(ip) else str(ip)
        if ip in METADATA_ADDRESSES:
            raise EgressRefused(f"{shown} is a cloud metadata address: always refused")
        if ip.is_link_local:
            raise EgressRefused(f"{shown} is link-local: always refused")
        if ip.is_unspecified or ip.is_multicast:
            raise EgressRefused(f"{shown} is not a unicast address: always refused")
        if (host and self._name_allowed(host)) or any(ip in net for net in self.networks):
            return
        if not ip.is_global:
            kind = "loopback" if ip.is_loopback else "private or reserved"
            raise EgressRefused(f"{shown} is {kind}, which {self._allowlist_says()}")
        if not self.any_public:
            raise EgressRefused(f"{shown} is not in {_ALLOWLIST_ENV} ({self.source})")

    def _allowlist_says(self) -> str:
        if not self.source.strip():
            return f"server mode refuses unless {_ALLOWLIST_ENV} allows it (it is empty)"
        return f"{_ALLOWLIST_ENV} ({self.source}) does not allow"

    # ---- credentials --------------------------------------------------------------------------

    def check_key_env(self, name: str | None) -> None:
        """Refuse an ``api_key_env`` that server mode would not resolve."""
        if not self.server or name is None:
            return
        if not (
            _KEY_NAME.match(name) and name.startswith(self.key_prefix) and name != self.key_prefix
        ):
            raise EgressRefused(
                f"api_key_env {name!r} is refused: server mode only reads variables named "
                f"{self.key_prefix}<NAME> (EVALSVC_ENDPOINT_KEY_PREFIX), so that no run can send "
                "another of the worker's variables to an endpoint"
            )

    def api_key(self, name: str | None) -> str | None:
        """The key to send, read from the environment now; ``EgressRefused`` if not allowed."""
        if not name:
            return None
        self.check_key_env(name)
        return os.environ.get(name) or None


async def resolve_checked(
    policy: EgressPolicy, host: str, port: int, timeout: float | None = None
) -> list[IPAddress]:
    """Every address ``host`` resolves to, each checked by ``policy`` (``EgressRefused``)."""
    ip = policy.check_host(host)
    if ip is not None:
        return [ip]
    with anyio.fail_after(timeout):
        infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = list(
        dict.fromkeys(ipaddress.ip_address(str(i[4][0]).split("%", 1)[0]) for i in infos)
    )
    if not addresses:
        raise EgressRefused(f"{host} resolved to no address")
    for address in addresses:  # every answer must pass: one bad answer refuses the host
        policy.check_address(address, host=host)
    return addresses


class GuardedResolver(AbstractResolver):
    """An aiohttp resolver that resolves, checks every address and hands the connector only the
    checked addresses, so the socket opens to an address the policy admitted.

    aiohttp asks no resolver for a host that is already a literal IP address: the client's
    static check (``EgressPolicy.check_url`` when it is built) judges those, and for a literal
    that check is final (there is no DNS answer to change). TLS still verifies the URL's host
    name: aiohttp passes the request's host as SNI and for certificate matching, independently
    of the address the socket was opened to.
    """

    def __init__(self, policy: EgressPolicy) -> None:
        self.policy = policy

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = await resolve_checked(self.policy, host, port)
        out: list[ResolveResult] = []
        for address in addresses:
            fam = socket.AF_INET6 if address.version == 6 else socket.AF_INET
            if family not in (socket.AF_UNSPEC, fam):
                continue
            out.append(
                {
                    "hostname": host,
                    "host": str(address),
                    "port": port,
                    "family": fam,
                    "proto": 0,
                    "flags": socket.AI_NUMERICHOST,
                }
            )
        if not out:
            raise EgressRefused(f"{host} resolved to no address of the family asked for")
        return out

    async def close(self) -> None:
        pass
