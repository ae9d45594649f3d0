"""Outbound HTTP to addresses people choose (webhook receivers): one client that cannot
be turned against the network it runs in.

- ``http`` and ``https`` only, no credentials in the URL, no redirects followed;
- the name is resolved when the connection is made, every address it resolves to is
  checked (loopback, private, link-local, multicast, reserved, unspecified, shared and
  IPv4-mapped IPv6 ranges are refused) and the connection goes to the checked address, so a
  second answer from DNS (rebinding) cannot swap it;
- ``MEMORYUI_OUTBOUND_ALLOW`` names hosts or address ranges that are allowed anyway (an
  on-premises receiver);
- one deadline for the whole exchange (connect, send, headers, body: a receiver that
  drips its answer is cut there) and at most ``max_response_bytes`` of the body are read.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any
from urllib.parse import SplitResult, urlsplit

import httpcore2
import httpx2
from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class Refused(ValueError):
    """A target this client will not call; the message says why, for the person who
    chose it."""


class DeadlinePassed(httpcore2.ReadTimeout):
    pass


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes  # at most max_response_bytes of it
    truncated: bool


def origin(url: str) -> str:
    """``scheme://host[:port]`` of a URL: what pages and the audit log show of a
    receiver (its path and query often carry a secret; credentials are refused anyway)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "(invalid URL)"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{port}" if port else "")


def check_url(url: str) -> SplitResult:
    """The URL's parts, or Refused for a scheme, credentials or host this client refuses
    whatever the host resolves to."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused(f"not a valid URL ({exc})") from exc
    if parts.scheme not in ("http", "https"):
        raise Refused(f"only http:// and https:// receivers are allowed, not {parts.scheme}://")
    if parts.username is not None or parts.password is not None:
        raise Refused(
            "the URL must not hold credentials (user:password@); "
            "verify deliveries by their signature instead"
        )
    if not parts.hostname:
        raise Refused("the URL has no host")
    if port == 0:
        raise Refused("port 0 is not a port a receiver listens on")
    return parts


# IPv6 ranges whose addresses carry an IPv4 address that a gateway or relay may deliver
# to (an internal one as easily as any): refused whole, whatever the inner address is.
# IPv4-mapped addresses (::ffff:0:0/96) are judged by the address they map instead.
EMBEDDING_IPV4 = (
    (ipaddress.IPv6Network("2002::/16"), "6to4"),
    (ipaddress.IPv6Network("2001::/32"), "Teredo"),
    (ipaddress.IPv6Network("64:ff9b::/96"), "NAT64"),
    (ipaddress.IPv6Network("64:ff9b:1::/48"), "local-use NAT64"),
    (ipaddress.IPv6Network("::ffff:0:0:0/96"), "IPv4-translated"),
    (ipaddress.IPv6Network("::/96"), "IPv4-compatible"),
)


def address_problem(address: IPAddress) -> str:
    """Why a connection to ``address`` is refused (``""``: it is not)."""
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        problem = address_problem(mapped)
        return f"{problem} (IPv4-mapped)" if problem else ""
    if address.version == 6 and not address.is_unspecified and not address.is_loopback:
        for network, name in EMBEDDING_IPV4:
            if address in network:
                return f"an IPv6 address that embeds an IPv4 address ({name}, {network})"
    for flag, what in (
        ("is_unspecified", "an unspecified address"),
        ("is_loopback", "a loopback address"),
        ("is_link_local", "a link-local address (cloud metadata lives there)"),
        ("is_multicast", "a multicast address"),
        ("is_reserved", "a reserved address"),
        ("is_private", "a private address"),
    ):
        if getattr(address, flag):
            return what
    if not address.is_global:
        return "not a public address"
    return ""


@cache
def _allowed(entries: tuple[str, ...]) -> tuple[frozenset[str], tuple[IPNetwork, ...]]:
    hosts, networks = set(), []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            hosts.add(entry.lower().rstrip("."))
    return frozenset(hosts), tuple(networks)


def allowed_anyway(host: str, address: IPAddress) -> bool:
    """``MEMORYUI_OUTBOUND_ALLOW`` lets this host name, or this address's range, through."""
    hosts, networks = _allowed(tuple(settings.MEMORYUI_OUTBOUND_ALLOW))
    return host.lower().rstrip(".") in hosts or any(address in n for n in networks)


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to (a literal: itself)."""
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise Refused(f"{host} does not resolve ({exc})") from exc
    found = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if address not in found:
            found.append(address)
    return found


def checked_addresses(host: str, port: int) -> list[IPAddress]:
    """The addresses to connect to; Refused unless every one the name resolves to is
    allowed (one bad answer among good ones is refused too: the next lookup may give
    only it)."""
    addresses = resolve(host, port)
    if not addresses:
        raise Refused(f"{host} does not resolve")
    for address in addresses:
        problem = address_problem(address)
        if problem and not allowed_anyway(host, address):
            literal = host.strip("[]") == str(address)
            shown = f"{host} is" if literal else f"{host} resolves to {address},"
            raise Refused(
                f"{shown} {problem}; receivers must be reachable on the internet "
                "(an operator can allow on-premises ones with MEMORYUI_OUTBOUND_ALLOW)"
            )
    return addresses


def validate_target(url: str) -> None:
    """Refused when a receiver at ``url`` would be refused now (registration)."""
    parts = check_url(url)
    checked_addresses(parts.hostname or "", parts.port or _default_port(parts.scheme))


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


class _DeadlineStream(httpcore2.NetworkStream):
    """A connection whose every read and write ends by the deadline."""

    def __init__(self, inner: httpcore2.NetworkStream, deadline: float) -> None:
        self.inner, self.deadline = inner, deadline

    def _left(self, timeout: float | None) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise DeadlinePassed("the deadline passed")
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, self._left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, self._left(timeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.NetworkStream:
        tls = self.inner.start_tls(ssl_context, server_hostname, self._left(timeout))
        return _DeadlineStream(tls, self.deadline)

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class _CheckedBackend(httpcore2.NetworkBackend):
    """Resolves and checks at connect time, then connects to the checked address (TLS
    still verifies the certificate against the name)."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.inner = httpcore2.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        address = checked_addresses(host, port)[0]
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise DeadlinePassed("the deadline passed")
        stream = self.inner.connect_tcp(
            str(address),
            port,
            timeout=left if timeout is None else min(timeout, left),
            local_address=local_address,
            socket_options=socket_options,
        )
        return _DeadlineStream(stream, self.deadline)

    def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore2.NetworkStream:
        raise Refused("unix sockets are not receivers")


def _client(deadline: float) -> httpx2.Client:
    transport = httpx2.HTTPTransport(trust_env=False, retries=0)
    # The pool the transport made, again with the checking backend (HTTPTransport has no
    # parameter for it); no proxy from the environment: it would connect on our behalf.
    transport._pool = httpcore2.ConnectionPool(
        ssl_context=httpx2.create_ssl_context(trust_env=False),
        max_connections=1,
        network_backend=_CheckedBackend(deadline),
    )
    return httpx2.Client(transport=transport, follow_redirects=False, trust_env=False, timeout=None)


def post(
    url: str,
    *,
    content: bytes,
    headers: dict[str, str],
    deadline_seconds: float,
    max_response_bytes: int,
) -> Answer:
    """POST ``content`` to ``url`` and return the answer (a redirect is an answer, not
    followed). Raises Refused for a refused target, httpx2.TimeoutException when the
    deadline passes and httpx2.HTTPError when the receiver cannot be reached."""
    check_url(url)
    deadline = time.monotonic() + deadline_seconds
    with (
        _client(deadline) as client,
        client.stream("POST", url, content=content, headers=headers) as response,
    ):
        body, truncated = bytearray(), False
        for chunk in response.iter_raw():
            body += chunk
            if len(body) > max_response_bytes:
                truncated = True
                break
        return Answer(response.status_code, bytes(body[:max_response_bytes]), truncated)
