"""How ``evalsvc api serve`` holds connections: deadlines, a connection cap, bounded error logs.

uvicorn closes an idle keep-alive connection, but not one that never finishes its request head:
an unauthenticated client holding 1,100 such connections exhausted a 1,024-descriptor process
(``/healthz`` timed out for 80 s) and every failed ``accept()`` logged a traceback (166 MB).

Contract:
- ``GuardedH11Protocol`` (uvicorn's h11 protocol, chosen explicitly whatever is installed)
  closes a connection whose request (head and body) is not fully received within
  ``EVALSVC_API_HEADER_TIMEOUT_S`` of its start (the connection's opening, or the end of the
  previous response); a request being answered is never cut. Idle keep-alive connections close
  after ``EVALSVC_API_KEEPALIVE_TIMEOUT_S`` (uvicorn's ``timeout_keep_alive``).
- At most ``max_connections`` connections are held. At the cap a new connection displaces the
  oldest connection that has not sent a complete request yet (slow or idle); if every held
  connection is busy with a request, the new one is closed at once. So a flood of slow
  connections cannot keep a quick client (a health probe) out.
- ``raise_nofile_limit()`` raises the soft RLIMIT_NOFILE to the hard limit;
  ``default_max_connections()`` keeps a reserve of descriptors under it for the database,
  logs and the worker threads, and room for the accept batches in flight: asyncio accepts up
  to ``backlog`` connections per loop iteration, and they reach the cap a few iterations
  later (``accept_backlog()``).
- ``BoundedAccessLog`` (a filter on uvicorn's access logger, added by ``guarded_protocol``)
  writes a method outside ``evalsvc.limits.HTTP_METHODS`` as ``other``, cuts a path past
  ``limits.MAX_LOGGED_PATH`` characters (with the count cut) and escapes control characters
  (a percent-encoded newline in a path cannot forge a log line): h11 accepts any token as a
  method, and 3,000 invented 8,000-character ones wrote 24 MB of access log.
- ``RateLimitedLoopErrors`` is the event loop's exception handler: ``accept()`` failures
  (EMFILE and kin) and other loop errors are logged at most once per ``interval`` seconds per
  kind, with the count of the ones left out.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from typing import Any

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from evalsvc import limits
from evalsvc.textsafe import visible_controls

_log = logging.getLogger("uvicorn.error")  # formatted and levelled with uvicorn's own lines

#: Descriptors kept free for everything that is not a client connection: database connections
#: (SQLAlchemy pool: 5 + 10 overflow), log files, the listening socket, the thread pool's files.
FD_RESERVE = 128
#: A floor, so a tiny descriptor limit still serves.
MIN_CONNECTIONS = 16
#: A ceiling for the derived default (a huge hard limit is no reason to hold a million sockets).
MAX_DEFAULT_CONNECTIONS = 4096


def raise_nofile_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; return the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # some sandboxes refuse; the soft limit then stands
            pass
    return soft


def accept_backlog(nofile_soft: int) -> int:
    """The listen backlog, which asyncio also uses as the number of connections it accepts in
    one go (one event-loop iteration): a sixteenth of the descriptors, between 64 and 2048."""
    return max(64, min(2048, nofile_soft // 16))


#: Accepted sockets reach the protocol (and its cap) two or three loop iterations after
#: accept(), and a flood fills a batch every iteration: room for this many batches stays free.
ACCEPT_BATCHES_IN_FLIGHT = 4


def default_max_connections(nofile_soft: int) -> int:
    """How many client connections fit under ``nofile_soft`` descriptors, leaving the reserve
    and the accept batches in flight (``accept_backlog``) free."""
    in_flight = ACCEPT_BATCHES_IN_FLIGHT * accept_backlog(nofile_soft)
    room = nofile_soft - FD_RESERVE - in_flight
    return max(MIN_CONNECTIONS, min(MAX_DEFAULT_CONNECTIONS, room))


class _RateLimit:
    """At most one record per ``interval`` seconds per key; counts what it left out."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._last: dict[str, float] = {}
        self._dropped: dict[str, int] = {}

    def allow(self, key: str) -> tuple[bool, int]:
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            self._dropped[key] = self._dropped.get(key, 0) + 1
            return False, 0
        self._last[key] = now
        return True, self._dropped.pop(key, 0)


class RateLimitedLoopErrors:
    """An asyncio exception handler that logs each kind of error at most once per interval
    (one line with the exception, no traceback for ``OSError``s such as EMFILE)."""

    def __init__(self, interval: float = 10.0) -> None:
        self._limit = _RateLimit(interval)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message") or "event loop error")
        exc = context.get("exception")
        key = f"{message}|{type(exc).__name__}"
        ok, dropped = self._limit.allow(key)
        if not ok:
            return
        more = f" ({dropped} more since the last report)" if dropped else ""
        if isinstance(exc, OSError):
            _log.error("%s: %s%s", message, exc, more)
        else:
            _log.error("%s%s", message, more, exc_info=exc)


_EVICTIONS = _RateLimit(10.0)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a request deadline and a connection cap (module docstring)."""

    request_timeout: float = 10.0
    max_connections: int = 1000

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._cycle_started = time.monotonic()
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.max_connections and not self._displace_one():
            transport.abort()  # every held connection is busy with a request
            return
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self.transport is None:  # refused in connection_made: nothing was set up
            return
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()  # the next request on this connection gets its own deadline

    def waiting_for_request(self) -> bool:
        """No complete request received in this cycle (partial head, idle, or a slow body)."""
        if self.transport is None or self.transport.is_closing():
            return False
        if self.cycle is not None and not self.cycle.response_complete:
            return self.conn.their_state is h11.SEND_BODY  # a request body still arriving
        return self.conn.their_state is h11.IDLE

    def _arm(self) -> None:
        self._disarm()
        self._cycle_started = time.monotonic()
        self._deadline = self.loop.call_later(self.request_timeout, self._on_deadline)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _on_deadline(self) -> None:
        self._deadline = None
        if self.waiting_for_request():
            self.transport.abort()  # abort, not close: no lingering on an unread socket

    def _displace_one(self) -> bool:
        candidates = [
            c
            for c in self.connections
            if isinstance(c, GuardedH11Protocol) and c.waiting_for_request()
        ]
        if not candidates:
            return False
        oldest = min(candidates, key=lambda c: c._cycle_started)
        oldest.transport.abort()
        self.connections.discard(oldest)
        ok, dropped = _EVICTIONS.allow("evict")
        if ok:
            more = f" ({dropped} more since the last report)" if dropped else ""
            _log.warning(
                "connection limit (%d) reached: closed the oldest connection without a "
                "complete request%s", self.max_connections, more,
            )
        return True


class BoundedAccessLog(logging.Filter):
    """Bounds what one access-log line of uvicorn's h11 protocol can hold (module docstring).
    The line's arguments are ``(client, method, path, http_version, status)``."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5:
            client, method, path, version, status = args
            if method not in limits.HTTP_METHODS:
                method = f"other({len(str(method))} chars)"
            path = str(path)
            if len(path) > limits.MAX_LOGGED_PATH:
                cut = len(path) - limits.MAX_LOGGED_PATH
                path = f"{path[: limits.MAX_LOGGED_PATH]}…(+{cut} chars)"
            record.args = (client, method, visible_controls(path), version, status)
        return True


def bound_access_log() -> None:
    """Add ``BoundedAccessLog`` to uvicorn's access logger (once)."""
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, BoundedAccessLog) for f in access.filters):
        access.addFilter(BoundedAccessLog())


def guarded_protocol(*, request_timeout: float, max_connections: int) -> type[GuardedH11Protocol]:
    """The protocol class for uvicorn's ``http=`` with these limits (and the access log's
    bounds, ``bound_access_log``)."""
    bound_access_log()
    return type(
        "GuardedH11Protocol",
        (GuardedH11Protocol,),
        {"request_timeout": request_timeout, "max_connections": max_connections},
    )
