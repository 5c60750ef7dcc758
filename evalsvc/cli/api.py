"""``evalsvc api serve``: run the REST API (``evalsvc.api``) with uvicorn.

The server starts even when the database is unreachable or not at head (``/healthz`` answers
503 until it is fixed), so it can come up before its database; this command warns about it.
It refuses to start (exit 2, one line) with authentication off on an interface other than
loopback, or with an ``EVALSVC_ALLOWED_ENDPOINTS`` it cannot parse (docs/security.md). A port that is taken or an
address that cannot be bound exits 4 with one line; a malformed database URL exits 2.
FastAPI and uvicorn are imported only when the command runs, to keep CLI start-up light.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Annotated

import typer

from evalsvc.db import StoreError

from ._dbcommon import DatabaseUrlOption, fail, fail_store
from ._exit import EXIT_INFRA

app = typer.Typer(name="api", help="The REST API server.", no_args_is_help=True)


def is_loopback_host(host: str) -> bool:
    """Whether binding ``host`` exposes the server to this machine only.

    A literal address must be loopback. A name must be ``localhost`` or ``*.localhost`` *and*
    every address it resolves to must be loopback: a hosts file (or a resolver) may map
    ``x.localhost`` to ``0.0.0.0``, which binds every interface. Other names are refused."""
    from evalsvc.endpoints import literal_address

    name = host.strip().lower().rstrip(".")
    ip = literal_address(name)
    if ip is not None:
        return ip.is_loopback
    if name != "localhost" and not name.endswith(".localhost"):
        return False
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError):
        return False
    addresses = [literal_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    return bool(addresses) and all(a is not None and a.is_loopback for a in addresses)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port.")] = 8080,
    database_url: DatabaseUrlOption = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Serve the REST API under /api/v1 (OpenAPI at /docs). Auth: EVALSVC_API_AUTH=off disables it."""
    import uvicorn

    from evalsvc.api._server import (
        RateLimitedLoopErrors,
        accept_backlog,
        default_max_connections,
        guarded_protocol,
        raise_nofile_limit,
    )
    from evalsvc.endpoints import EgressPolicy
    from evalsvc.web.auth import auth_enabled_from_env
    from evalsvc.webapp import create_app

    if not auth_enabled_from_env() and not is_loopback_host(host):
        typer.echo(
            f"error: EVALSVC_API_AUTH=off is only allowed on loopback, not --host {host} "
            "(anyone who reaches it could register endpoints and submit runs)",
            err=True,
        )
        raise typer.Exit(2)
    try:
        EgressPolicy.from_settings()
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    from evalsvc.db import Store

    try:
        store = Store.from_url(database_url)
    except StoreError as err:  # a malformed URL or a missing driver
        fail_store(err)
    with store:
        try:
            store.ensure_ready(upgrade_fresh_sqlite=True)
        except StoreError as err:
            typer.echo(f"warning: {err} (serving 503 until it is fixed)", err=True)
        shown = store.display_url
    if not auth_enabled_from_env():
        typer.echo("warning: authentication is OFF (EVALSVC_API_AUTH=off), loopback only", err=True)
    typer.echo(
        f"evalsvc API on http://{host}:{port}/api/v1 (docs /docs; dashboard at /), "
        f"database {shown}",
        err=True,
    )
    from evalsvc.settings import Settings

    settings = Settings()
    nofile = raise_nofile_limit()
    max_connections = settings.api_max_connections or default_max_connections(nofile)
    sock = _bind(host, port)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(database_url),
            host=host,
            port=port,
            log_level=log_level,
            # security: deadlines and a connection cap against slow clients (docs/security.md)
            http=guarded_protocol(
                request_timeout=settings.api_request_timeout_s, max_connections=max_connections
            ),
            timeout_keep_alive=max(1, round(settings.api_keepalive_timeout_s)),
            backlog=accept_backlog(nofile),
            loop="asyncio",
        )
    )

    async def run() -> None:
        # accept() failures (EMFILE) repeat every second while they last: log them bounded
        asyncio.get_running_loop().set_exception_handler(RateLimitedLoopErrors())
        await server.serve(sockets=[sock])

    try:
        asyncio.run(run())
    finally:
        sock.close()


def _bind(host: str, port: int) -> socket.socket:
    """Bind the listening socket here, so a busy port or a bad address is one line and exit 4
    (infrastructure), not uvicorn's startup-failure exit 3 (which means *inconclusive*)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
            sock.listen(2048)
        except OSError:
            sock.close()
            raise
    except OSError as err:
        fail(f"cannot listen on {host}:{port}: {err.strerror or err}", EXIT_INFRA)
    sock.set_inheritable(True)
    return sock


if __name__ == "__main__":
    app()
