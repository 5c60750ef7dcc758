"""The REST client of the CLI: ``evalsvc compare --server URL`` submits to ``POST /api/v1/runs``,
follows the run's progress and reads its report; ``evalsvc calibrate --server URL`` submits to
``POST /api/v1/calibrations``, follows its run the same way and reads the stored figures.

Contract: every answer that is not the evalsvc API's JSON (an SSO page, a redirect, a proxy's
error page) is ``NotTheApi`` and never quoted; Ctrl-C, SIGTERM and ``--wait-timeout`` cancel the
run on the server; every exit writes the report files asked for. Exit codes: the verdict's, the
HTTP status's (2 for a request the server refuses, 4 otherwise) or the exception's
(``_exit.exit_code``).
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.progress import Progress as RichProgress
from rich.progress import TaskID

from evalsvc.cli._safe import term
from evalsvc.domain import RunOptions
from evalsvc.settings import Settings

from ._common import err, raise_interrupt
from ._exit import EXIT_INFRA, EXIT_USAGE, exit_code
from ._report import (
    print_headlines,
    print_verdict,
    progress_columns,
    verdict_table,
    write_outputs,
)


def compare_remote(
    server: str,
    endpoints: list[str],
    suites: list[str],
    options: RunOptions,
    json_out: str | None,
    junit: Path | None,
    markdown: Path | None,
    wait_timeout: float | None = None,
    *,
    policy: Callable[[dict[str, Any]], bool] | None = None,
) -> int:
    """Submit to ``POST /api/v1/runs``, show the run's progress and wait for its gate.
    ``policy(report)`` True (it refused what the verdict rests on, and said why) turns a pass
    into exit 1.

    Every exit writes the report files asked for (an error report when there is no verdict).
    Ctrl-C, SIGTERM and ``--wait-timeout`` cancel the run on the server (``POST
    /runs/{id}/cancel``) so no worker spends hours on a run nobody waits for, then exit 4.
    """
    import httpx

    from evalsvc.domain import EndpointRef
    from evalsvc.reports import error_report
    from evalsvc.services.runs import exit_code as verdict_exit_code

    def ref(e: str) -> dict[str, str]:
        return {"url": e} if "://" in e else {"name": e}

    def report_ref(e: str) -> EndpointRef:
        # A registered name resolves on the server; the report names it and leaves the URL empty.
        return EndpointRef(url=e) if "://" in e else EndpointRef(url="", name=e)

    run_id: str | None = None

    def no_verdict(message: str, code: int = EXIT_INFRA) -> int:
        err.print(f"[bold red]error:[/] {term(message)}", highlight=False, soft_wrap=True)
        with contextlib.suppress(Exception):
            write_outputs(
                error_report(
                    baseline=report_ref(endpoints[0]),
                    candidates=[report_ref(e) for e in endpoints[1:]],
                    error=message,
                    run_id=run_id,
                    options=options,
                ),
                json_out,
                junit,
                markdown,
            )
        return code

    headers, token = _auth()
    body = {
        "baseline": ref(endpoints[0]),
        "candidates": [ref(e) for e in endpoints[1:]],
        "suites": suites,
        "options": options.model_dump(mode="json"),
    }
    server, problem = server_root(server)
    if problem:
        return no_verdict(problem, EXIT_USAGE)
    base = server + "/api/v1"
    signal.signal(signal.SIGTERM, raise_interrupt)
    with httpx.Client(headers=headers, timeout=30) as http:

        def cancel(reason: str) -> int:
            return no_verdict(f"{reason}; {_cancel(http, base, run_id, 'run', server)}")

        try:
            run_id = submit(http, f"{base}/runs", body, server, has_token=bool(token))
        except Refused as exc:
            return no_verdict(str(exc), exc.code)
        err.print(f"submitted run {term(run_id)} to {term(server)}")
        deadline = None if wait_timeout is None else time.monotonic() + wait_timeout
        try:
            labels = {"baseline": f"baseline {_label(endpoints[0])}"}
            labels.update({f"candidate:{i}": f"candidate {_label(e)}"
                           for i, e in enumerate(endpoints[1:])})
            status = follow_remote(http, f"{base}/runs/{run_id}", deadline, server, labels)
            if status is None:
                return cancel(f"no verdict within --wait-timeout {wait_timeout:g} s")
            report = (
                api_json(http.get(f"{base}/runs/{run_id}/report"), server, ok=True)
                if status["status"] == "completed"
                else None
            )
        except KeyboardInterrupt:
            return cancel("interrupted")
        except NotTheApi as exc:
            return no_verdict(f"{exc} (while waiting for run {run_id})", exit_code(exc))
        except httpx.HTTPError as exc:
            return no_verdict(
                f"lost contact with {server} while waiting for run {run_id}: {exc}", exit_code(exc)
            )
    if report is None:
        return no_verdict(f"run {run_id} ended {status.get('status')}: {status.get('error')}")
    write_outputs(report, json_out, junit, markdown)  # first: printing cannot lose them
    err.print(verdict_table(report))
    print_headlines(report)
    from ._policy import print_basis

    print_basis(report)  # what the verdict rests on (docs/report.md, Basis)
    verdict = report["verdict"]
    print_verdict(verdict, run_id)
    code = verdict_exit_code(verdict)
    # The pipeline's policy on what the verdict rests on (compare --max-reuse-age, ...).
    if policy is not None and policy(report) and code == 0:
        code = 1
    return code


def calibrate_remote(
    server: str,
    endpoint: str,
    suites: list[str],
    runs: int,
    options: RunOptions,
    wait_timeout: float | None = None,
) -> tuple[dict[str, Any] | None, int]:
    """Queue the A/A calibration with ``POST /api/v1/calibrations``, show its run's progress
    and return what ``GET /calibrations/{id}`` returns once it finished, with exit code 0;
    or ``(None, code)`` after saying why there are no figures (2: a bad ``--server`` or a
    request the server refuses; 4: unreachable, not the API, interrupted, timed out). Ctrl-C,
    SIGTERM and ``--wait-timeout`` cancel the calibration's run on the server."""
    import httpx

    def failed(message: str, code: int = EXIT_INFRA) -> tuple[None, int]:
        err.print(f"[bold red]error:[/] {term(message)}", highlight=False, soft_wrap=True)
        return None, code

    server, problem = server_root(server)
    if problem:
        return failed(problem, EXIT_USAGE)
    headers, token = _auth()
    base = server + "/api/v1"
    body = {
        "endpoint": {"url": endpoint} if "://" in endpoint else {"name": endpoint},
        "suites": suites,
        "runs": runs,
        "options": options.model_dump(mode="json"),
    }
    signal.signal(signal.SIGTERM, raise_interrupt)
    with httpx.Client(headers=headers, timeout=30) as http:
        try:
            cal_id = submit(http, f"{base}/calibrations", body, server, has_token=bool(token),
                            what="calibration", listing="/calibrations")
        except Refused as exc:
            return failed(str(exc), exc.code)
        err.print(f"submitted calibration {term(cal_id)} to {term(server)}")

        def cancel(reason: str) -> tuple[None, int]:
            return failed(f"{reason}; {_cancel(http, base, cal_id, 'calibration', server)}")

        deadline = None if wait_timeout is None else time.monotonic() + wait_timeout
        name = _label(endpoint)
        labels = {"baseline": f"baseline {name}"}
        labels.update({f"candidate:{i}": f"A/A pass {i + 1} {name}" for i in range(runs)})
        try:
            status = follow_remote(http, f"{base}/runs/{cal_id}", deadline, server, labels)
            if status is None:
                return cancel(f"no figures within --wait-timeout {wait_timeout:g} s")
            out = api_json(http.get(f"{base}/calibrations/{cal_id}"), server, ok=True)
        except KeyboardInterrupt:
            return cancel("interrupted")
        except NotTheApi as exc:
            return failed(f"{exc} (while waiting for calibration {cal_id})", exit_code(exc))
        except httpx.HTTPError as exc:
            return failed(f"lost contact with {server} while waiting for calibration {cal_id}: "
                          f"{exc}", exit_code(exc))
    if out.get("status") != "completed" and not out.get("error"):
        # Cancelled on the server (or by another client): no figures, and nothing else says so.
        out["error"] = f"calibration {cal_id} ended {out.get('status')}"
    return out, 0


def _auth() -> tuple[dict[str, str], str | None]:
    """The request headers with ``$EVALSVC_TOKEN`` (``EVALSVC_TOKEN=``, empty, is no token)."""
    secret = Settings().token
    token = secret.get_secret_value() if secret is not None else None
    return ({"Authorization": f"Bearer {token}"} if token else {}), token or None


class Refused(Exception):
    """A submission the server did not queue; ``str()`` says why, ``code`` is the exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def submit(http: Any, url: str, body: dict[str, Any], server: str, *, has_token: bool,
           what: str = "run", listing: str = "/runs") -> str:
    """POST ``body`` to ``url`` and return the id of the ``what`` the server queued, or raise
    ``Refused``: 4 when the server is unreachable or answers as something else than the API,
    when the submission was interrupted (whether it was queued is unknown: ``listing`` says
    where to look); 2 for a request the server refuses (its detail, and the token's fix)."""
    import httpx

    try:
        resp = http.post(url, json=body)
    except httpx.HTTPError as exc:
        raise Refused(f"server {server} unreachable: {exc}", exit_code(exc)) from exc
    except KeyboardInterrupt as exc:
        # Whether the server queued it is unknown: say so rather than guess.
        raise Refused(f"interrupted while submitting to {server}; check `GET {listing}`",
                      exit_code(exc)) from exc
    if resp.status_code >= 400:
        try:
            detail = api_json(resp, server).get("detail", "")
        except NotTheApi as exc:
            # A proxy's or SSO's page, not the API's answer: never quote it (an internal page
            # could be read back this way), and it is infrastructure, not a bad request.
            raise Refused(str(exc), exit_code(exc)) from exc
        # An HTTP status, not an exception: the server said what was wrong with the request (2),
        # or could not do it (4). A missing or weak token (401, 403) is configuration.
        code = EXIT_USAGE if resp.status_code in (400, 401, 403, 404, 409, 413, 422) else 4
        raise Refused(f"server refused the {what}: HTTP {resp.status_code} {str(detail)[:300]}"
                      f"{_token_fix(resp.status_code, has_token)}", code)
    try:
        answer = api_json(resp, server)
        if resp.status_code not in (200, 201, 202) or not isinstance(answer.get("id"), str):
            raise NotTheApi(not_the_api(resp, server, f"no {what} id"))
    except NotTheApi as exc:
        raise Refused(str(exc), exit_code(exc)) from exc
    return str(answer["id"])


class NotTheApi(Exception):
    """The ``--server`` answer is not the evalsvc API's JSON (an SSO page, a redirect, a proxy's
    error page): an infrastructure error (exit 4); ``str()`` says what came back."""


def not_the_api(resp: Any, server: str, why: str) -> str:
    ctype = resp.headers.get("content-type", "").split(";")[0].strip() or "no content type"
    where = " (redirect; give the API's own base URL)" if resp.is_redirect else ""
    return (
        f"{server} did not answer as the evalsvc API: HTTP {resp.status_code} "
        f"{resp.reason_phrase} with {ctype}, {why}{where}"
    )


def api_json(resp: Any, server: str, *, ok: bool = False) -> dict[str, Any]:
    """The JSON object of an API answer, or ``NotTheApi`` (the body is never quoted). ``ok``:
    anything but 2xx is refused too (a 4xx/5xx JSON error says why in one line)."""
    if ok and not 200 <= resp.status_code < 300:
        detail = ""
        with contextlib.suppress(ValueError, AttributeError):
            detail = str(resp.json().get("detail") or "")[:300]
        if detail:
            raise NotTheApi(f"{server} answered HTTP {resp.status_code}: {detail}")
        raise NotTheApi(not_the_api(resp, server, "not an API answer"))
    try:
        value = resp.json()
    except ValueError:
        raise NotTheApi(not_the_api(resp, server, "not JSON")) from None
    if not isinstance(value, dict):
        raise NotTheApi(not_the_api(resp, server, "not a JSON object"))
    return value


def server_root(server: str) -> tuple[str, str | None]:
    """The server's root URL from what ``--server`` was given, and what is wrong with it (None
    when nothing is): a URL without its scheme names the one it meant (exit 2, as an endpoint
    URL's does); the API's base path, which ``evalsvc api serve`` prints (``…/api/v1``), is
    taken for the root it is under."""
    root = server.strip().rstrip("/")
    if "://" not in root:
        return root, f"--server {server!r} is not a URL: did you mean http://{root}?"
    return root.removesuffix("/api/v1"), None


def _token_fix(status: int, has_token: bool) -> str:
    """What to do about a 401/403 from ``POST /runs`` or ``/calibrations`` (docs/api.md,
    "Tokens")."""
    create = "`evalsvc tokens create NAME --scope submit` on the server"
    if status == 401 and not has_token:
        return f"; set EVALSVC_TOKEN to a token with the submit scope ({create})"
    if status == 401:
        return f"; the token in EVALSVC_TOKEN is unknown or revoked: set a valid one ({create})"
    if status == 403:
        return f"; the token in EVALSVC_TOKEN lacks the submit scope ({create})"
    return ""


def _label(endpoint: str) -> str:
    """What the bars call an endpoint given as a URL or a registered name (the reports' label
    before the probe: name, else host:port)."""
    from evalsvc.endpoints import redact_url
    from evalsvc.reports import endpoint_label

    if "://" in endpoint:
        return endpoint_label({"name": None, "url": redact_url(endpoint), "model": None})
    return endpoint


def follow_remote(
    http: Any,
    url: str,
    deadline: float | None,
    server: str = "",
    labels: dict[str, str] | None = None,
) -> dict[str, Any] | None:
    """Poll the run until it is finished, drawing one bar per (suite, endpoint) from its
    progress, each endpoint by its label (``labels``: role → label); None when ``deadline``
    (monotonic) passes first."""
    columns = progress_columns(err.width)
    with RichProgress(*columns, console=err, transient=False) as bar:
        state = bar.add_task("queued", total=None)
        tasks: dict[tuple[str, str], TaskID] = {}
        while True:
            run = api_json(http.get(url), server, ok=True)
            # A queued run says how many workers are alive and, with none, how to start one.
            note = run.get("queue_note") if run.get("status") == "queued" else None
            bar.update(state, description=f"run {term(note or run['status'])}")
            progress = run.get("progress") or {}
            items, done = progress.get("items") or {}, progress.get("done") or {}
            for suite, roles in sorted(done.items()):
                for role, n in sorted(roles.items()):
                    key = (suite, role)
                    if key not in tasks:
                        who = (labels or {}).get(role, role)
                        tasks[key] = bar.add_task(f"{term(suite)} · {term(who)}",
                                                  total=items.get(suite))
                    bar.update(tasks[key], completed=n, total=items.get(suite))
            if run.get("status") in ("completed", "error", "cancelled"):
                return dict(run)
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(2.0)


def _cancel(http: Any, base: str, run_id: str | None, what: str, server: str) -> str:
    """Cancel a queued or running run (a calibration is one) on the server (``http``, an
    ``httpx.Client``); what happened, for the message the interrupted command exits with."""
    import httpx  # the CLI imports httpx only for a command that talks to a server

    try:
        http.post(f"{base}/runs/{run_id}/cancel", timeout=10)
        return f"{what} {run_id} cancelled on {server}"
    except httpx.HTTPError as exc:
        return f"could not cancel {what} {run_id} on {server} ({type(exc).__name__})"
