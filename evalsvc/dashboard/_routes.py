"""Routes of the web dashboard (HTML pages, report downloads, the live-status JSON).

Contract: every page needs the ``read`` scope (see the package docstring); an unauthenticated
browser is redirected to ``/login``. The two forms (``POST /login``, ``POST /logout``) are
protected against cross-site requests: an ``Origin`` (or, without one, ``Referer``) naming
another host is refused, and the form must carry the double-submit token that every page sets
in the ``evalsvc_csrf`` cookie (SameSite=Strict, HttpOnly) and in its forms (OWASP CSRF
Prevention Cheat Sheet: "Verifying Origin with standard headers", "Double Submit Cookie").
Unknown runs, suites or candidates answer 404 pages; bad
filter values are reported on the page and ignored. Responses carry a CSP that only allows
scripts from ``/static``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import jinja2
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse
from markdown_it import MarkdownIt
from markupsafe import Markup
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from evalsvc import __version__
from evalsvc.endpoints import redact_urls_in
from evalsvc.reports import to_junit, to_markdown
from evalsvc.services import alerts as alert_svc
from evalsvc.services import baselines, sweep_views
from evalsvc.services import dashboard as svc
from evalsvc.services.tokens import ANONYMOUS, Principal
from evalsvc.web.auth import StateDep, StoreDep, principal_for_token
from evalsvc.web.static import CachedStatic

_HERE = Path(__file__).resolve().parent
COOKIE_NAME = "evalsvc_token"
CSRF_COOKIE = "evalsvc_csrf"

#: Scripts only from this server; styles may be set inline by the chart library's tooltips.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'self'"
)

def _kind_source(name: str) -> tuple[str, None, Callable[[], bool]] | None:
    """``kinds/<kind>``: the template a suite kind ships beside its module."""
    kind = name.removeprefix("kinds/")
    if kind == name:
        return None
    source = svc.kind_template(kind)
    return None if source is None else (source, None, lambda: True)


_env = jinja2.Environment(
    loader=jinja2.ChoiceLoader([
        jinja2.FileSystemLoader(str(_HERE / "templates")),
        jinja2.FunctionLoader(_kind_source),
    ]),
    autoescape=True,  # every {{ }} is HTML-escaped: model output is untrusted text
    # A report of a partly failed run lacks keys: they render as "—", never as a 500.
    undefined=jinja2.ChainableUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or isinstance(value, jinja2.Undefined):
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _pct(value: Any) -> str:
    return "—" if not isinstance(value, (int, float)) else f"{100 * value:.0f}%"


def _short(value: Any, n: int = 10) -> str:
    return str(value)[:n]


# CommonMark with GitHub tables; raw HTML is disabled (it is shown as text), so a finding that
# quotes model output cannot inject markup, and link targets like javascript: are refused.
_md = MarkdownIt("commonmark", {"html": False}).enable("table")


def _markdown(text: Any) -> Markup:
    """A finding's Markdown as HTML (escaped: raw HTML in the source stays text)."""
    return Markup(_md.render(str(text or "")))  # noqa: S704 - markdown-it escapes, html off


_env.filters.update(fmt=_fmt, pct=_pct, short=_short, urlq=lambda v: quote(str(v), safe=""),
                    markdown=_markdown)
_env.globals.update(version=__version__, urlencode=urlencode)


class LoginRequired(Exception):
    """Raised by the auth dependency; answered with a redirect to the login page."""

    def __init__(self, next_url: str, message: str | None = None) -> None:
        super().__init__(message or "login required")
        self.next_url, self.message = next_url, message


def _principal(request: Request, state: StateDep, store: StoreDep) -> Principal:
    if not state.auth:
        return ANONYMOUS
    token = request.cookies.get(COOKIE_NAME)
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        token = header[7:].strip() or token
    next_url = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    if not token:
        raise LoginRequired(next_url)
    try:
        principal = principal_for_token(store, token)
    except HTTPException as exc:
        raise LoginRequired(next_url, str(exc.detail)) from None
    if "read" not in principal.scopes:
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"token {principal.name!r} lacks 'read'")
    return principal


Viewer = Annotated[Principal, Depends(_principal)]
router = APIRouter(include_in_schema=False)
#: Paths whose 404 stays JSON (REST clients, scripts and fetches parse it).
_JSON_PATHS = ("/api/", "/ui/", "/static/", "/openapi", "/metrics", "/healthz", "/docs/")


def _csrf_token(request: Request) -> str:
    """The browser's double-submit token: its cookie's value, or a new random one."""
    current = request.cookies.get(CSRF_COOKIE, "")
    if len(current) == 43 and current.replace("-", "").replace("_", "").isalnum():
        return current
    return secrets.token_urlsafe(32)  # 32 bytes: 43 URL-safe characters


def _page(request: Request, template: str, viewer: Principal | None, **context: Any) -> HTMLResponse:
    csrf = _csrf_token(request)
    # Every page shows stored URLs and errors: credentials stored before the userinfo rule (or
    # in ?password=-like parameters) are redacted here, once for every page.
    html = _env.get_template(template).render(
        request_path=request.url.path, viewer=viewer, auth=viewer is not ANONYMOUS, csrf=csrf,
        **redact_urls_in(context),
    )
    resp = HTMLResponse(html)
    if request.cookies.get(CSRF_COOKIE) != csrf:
        resp.set_cookie(CSRF_COOKIE, csrf, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https", path="/")
    return resp


class CrossSiteRequest(Exception):
    """A form post that did not come from this dashboard's own pages."""


def _check_same_origin(request: Request, form: dict[str, list[str]]) -> None:
    """Refuse (``CrossSiteRequest``) a form post from another site: its ``Origin`` (else its
    ``Referer``) must name this host, and its ``csrf`` field must equal the ``evalsvc_csrf``
    cookie. Browsers send Origin on every cross-site POST; the token covers clients that send
    neither header, and a SameSite=Strict cookie is never sent by another site's form."""
    host = request.headers.get("host", "").lower()
    origin = request.headers.get("origin")
    source = origin if origin is not None else request.headers.get("referer")
    # "null": a sandboxed frame, a data: URL or a redirect from another origin.
    if source is not None and (source == "null" or urlsplit(source).netloc.lower() != host):
        raise CrossSiteRequest("a form posted from another site is refused")
    sent = (form.get("csrf") or [""])[0]
    cookie = request.cookies.get(CSRF_COOKIE, "")
    if not sent or not cookie or not hmac.compare_digest(sent.encode(), cookie.encode()):
        raise CrossSiteRequest("form token missing or stale: reload the page and try again")


def _refused(request: Request, exc: CrossSiteRequest) -> HTMLResponse:
    resp = _page(request, "error.html", None, title="Refused", message=str(exc))
    resp.status_code = status.HTTP_403_FORBIDDEN
    return resp


def _not_found(request: Request, viewer: Principal | None, message: str) -> HTMLResponse:
    resp = _page(request, "error.html", viewer, title="Not found", message=message)
    resp.status_code = status.HTTP_404_NOT_FOUND
    return resp


# ------------------------------------------------------------------------------ login


def _safe_next(value: str | None) -> str:
    # Only local paths: an open redirect to another site would make the login page a phishing aid.
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value


async def _same_origin_form(request: Request) -> tuple[dict[str, list[str]], Response | None]:
    """Every dashboard form post's first step: the parsed form, and the refusal to answer with
    when it did not come from this dashboard's own page (``_check_same_origin``)."""
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    try:
        _check_same_origin(request, form)
    except CrossSiteRequest as exc:
        return form, _refused(request, exc)
    return form, None


def _not_done(request: Request, viewer: Principal, title: str, problem: str, code: int) -> Response:
    """The error page a refused dashboard action answers with, under its HTTP status."""
    resp = _page(request, "error.html", viewer, title=title, message=problem)
    resp.status_code = code
    return resp


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, state: StateDep, next: str = "/") -> HTMLResponse:
    return _page(request, "login.html", None, title="Sign in", next=_safe_next(next),
                 message=None, auth_off=not state.auth)


@router.post("/login")
async def login(request: Request, state: StateDep, store: StoreDep) -> Response:
    form, refused = await _same_origin_form(request)
    if refused is not None:
        return refused
    token = (form.get("token") or [""])[0].strip()
    next_url = _safe_next((form.get("next") or ["/"])[0])
    message = None
    if not token:
        message = "Paste an API token (evalsvc tokens create NAME --scope read)."
    else:
        try:
            principal = principal_for_token(store, token)
        except HTTPException as exc:
            message = str(exc.detail)
        else:
            if "read" not in principal.scopes:
                message = f"token {principal.name!r} lacks the 'read' scope"
    if message is not None:
        page = _page(request, "login.html", None, title="Sign in", next=next_url,
                     message=message, auth_off=not state.auth)
        page.status_code = status.HTTP_401_UNAUTHORIZED
        return page
    resp = RedirectResponse(next_url, status_code=status.HTTP_303_SEE_OTHER)
    resp.set_cookie(
        COOKIE_NAME,
        token,
        httponly=True,  # scripts (and any injected one) cannot read it
        samesite="strict",  # never sent on cross-site requests: no CSRF through the cookie
        secure=request.url.scheme == "https",
        path="/",
        max_age=12 * 3600,
    )
    return resp


@router.post("/logout")
async def logout(request: Request) -> Response:
    form, refused = await _same_origin_form(request)
    if refused is not None:
        return refused
    resp = RedirectResponse("/login", status_code=status.HTTP_303_SEE_OTHER)
    resp.delete_cookie(COOKIE_NAME, path="/", httponly=True, samesite="strict")
    return resp


# ------------------------------------------------------------------------------ pages


@router.get("/", response_class=HTMLResponse)
def runs_page(
    request: Request,
    store: StoreDep,
    viewer: Viewer,
    endpoint: str = "",
    suite: str = "",
    verdict: str = "",
    status_: Annotated[str, Query(alias="status")] = "",
    label: str = "",
    since: Annotated[str, Query(alias="from")] = "",
    until: Annotated[str, Query(alias="to")] = "",
    older: str = "",
    newer: str = "",
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> HTMLResponse:
    filters, problems = svc.parse_filters(
        endpoint=endpoint, suite=suite, verdict=verdict, status=status_, label=label,
        since=since, until=until,
    )
    data = svc.runs_list(store, filters, older=older or None, newer=newer or None, limit=limit)
    form = {"endpoint": endpoint, "suite": suite, "verdict": verdict, "status": status_,
            "label": label, "from": since, "to": until}
    kept = {k: v for k, v in form.items() if v}
    if limit != 50:
        kept["limit"] = str(limit)
    live = [r["id"] for r in data["rows"] if r["progress"] is not None]
    alerts_by_run = alert_svc.open_by_run(store, [r["id"] for r in data["rows"]])
    return _page(request, "runs.html", viewer, title="Runs", data=data, form=form, kept=kept,
                 problems=problems, live=live, alerts_by_run=alerts_by_run)


@router.get("/alerts", response_class=HTMLResponse)
def alerts_page(
    request: Request, store: StoreDep, viewer: Viewer,
    status_: Annotated[str, Query(alias="status")] = "", kind: str = "", run: str = "",
) -> HTMLResponse:
    """Alerts newest first (``evalsvc.services.alerts``), filtered by status, kind or run."""
    problems = []
    try:
        found = alert_svc.list_alerts(store, status=status_ or None, kind=kind or None,
                                      run_id=run or None, limit=500)
    except alert_svc.AlertConfigError as exc:
        problems.append(f"{exc}; showing every alert")
        found = alert_svc.list_alerts(store, run_id=run or None, limit=500)
    return _page(request, "alerts.html", viewer, title="Alerts", alerts=found,
                 kinds=alert_svc.KINDS, problems=problems, open_count=alert_svc.open_count(store),
                 can_ack="submit" in viewer.scopes,
                 form={"status": status_, "kind": kind, "run": run})


#: The alerts page's filters, which an acknowledgement keeps (and nothing else: no open redirect).
_ALERT_FILTERS = ("status", "kind", "run")


@router.post("/alerts/{alert_id}/acknowledge")
async def acknowledge_alert(request: Request, alert_id: str, store: StoreDep,
                            viewer: Viewer) -> Response:
    """The alerts page's "Acknowledge" button (``evalsvc alerts ack ID``,
    ``POST /api/v1/alerts/{id}/acknowledge``): a same-origin form with the page's token, from
    a token with the ``submit`` scope (the scope the REST acknowledgement needs), recorded as
    the acknowledging name. Answers with the alerts page under the filters it was sent from."""
    form, refused = await _same_origin_form(request)
    if refused is not None:
        return refused
    problem, code = None, status.HTTP_403_FORBIDDEN
    if "submit" not in viewer.scopes:
        problem = (f"token {viewer.name!r} lacks the 'submit' scope that acknowledging an alert "
                   "needs (evalsvc tokens create NAME --scope submit)")
    elif len(alert_id) > 64:
        return _not_found(request, viewer, f"no alert {alert_id[:64]!r}...")
    else:
        try:
            await asyncio.to_thread(alert_svc.acknowledge, store, alert_id, by=viewer.name)
        except alert_svc.AlertNotFound as exc:
            return _not_found(request, viewer, str(exc))
        except alert_svc.AlertNotOpen as exc:
            problem, code = str(exc), status.HTTP_409_CONFLICT
    if problem is not None:
        return _not_done(request, viewer, "Not acknowledged", problem, code)
    kept = {k: v for k in _ALERT_FILTERS if (v := (form.get(k) or [""])[0])}
    query = f"?{urlencode(kept)}" if kept else ""
    return RedirectResponse(f"/alerts{query}#alert-{quote(alert_id, safe='')}",
                            status_code=status.HTTP_303_SEE_OTHER)


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: str, store: StoreDep, viewer: Viewer) -> HTMLResponse:
    try:
        page = svc.run_page(store, run_id)
    except svc.NotFound as exc:
        return _not_found(request, viewer, str(exc))
    live = [run_id] if page["run"]["status"] in ("queued", "running") else []
    page["blessed"] = baselines.run_view(store, run_id, page["run"]["status"],
                                         store.get_report(run_id), admin="admin" in viewer.scopes)
    return _page(request, "run.html", viewer, title=f"Run {run_id[:10]}", page=page, live=live)


@router.post("/runs/{run_id}/bless")
async def bless_run(request: Request, run_id: str, store: StoreDep, viewer: Viewer) -> Response:
    """The run page's "bless baseline" / "refresh" button (``evalsvc baselines bless RUN``):
    a same-origin form with the page's token, from an ``admin`` token (it changes what later
    runs send, as endpoint and schedule writes do)."""
    form, refused = await _same_origin_form(request)
    if refused is not None:
        return refused
    problem, code = None, status.HTTP_403_FORBIDDEN
    if "admin" not in viewer.scopes:
        problem = (f"token {viewer.name!r} lacks the 'admin' scope that blessing a baseline "
                   "needs (evalsvc tokens create NAME --scope admin)")
    else:
        try:
            await asyncio.to_thread(baselines.bless, store, [run_id], by=viewer.name)
        except LookupError as exc:
            return _not_found(request, viewer, str(exc))
        except baselines.UsageError as exc:
            problem, code = str(exc), status.HTTP_422_UNPROCESSABLE_CONTENT
    if problem is not None:
        return _not_done(request, viewer, "Not blessed", problem, code)
    return RedirectResponse(f"/runs/{quote(run_id, safe='')}#baseline",
                            status_code=status.HTTP_303_SEE_OTHER)


@router.get("/runs/{run_id}/suites/{suite}", response_class=HTMLResponse)
def suite_page(
    request: Request, run_id: str, suite: str, store: StoreDep, viewer: Viewer,
    candidate: str = "candidate:0",
) -> HTMLResponse:
    try:
        view = svc.suite_view(store, run_id, suite, candidate)
    except svc.NotFound as exc:
        return _not_found(request, viewer, str(exc))
    return _page(request, "suite.html", viewer, title=f"{suite} · {view['candidate']}",
                 view=view)


@router.get("/runs/{run_id}/suites/{suite}/samples", response_class=HTMLResponse)
def samples_page(
    request: Request, run_id: str, suite: str, store: StoreDep, viewer: Viewer,
    candidate: str = "", slice: str = "", outcome: str = "",
    q: Annotated[str, Query(max_length=200)] = "",
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=svc.SAMPLES_PAGE_MAX)] = 50,
) -> HTMLResponse:
    try:
        view = svc.samples_view(store, run_id, suite, role=candidate or None,
                                slice_=slice or None, outcome=outcome or None,
                                query=q or None, offset=offset, limit=limit)
    except svc.NotFound as exc:
        return _not_found(request, viewer, str(exc))
    return _page(request, "samples.html", viewer, title=f"Samples · {suite}", view=view)


@router.get("/runs/{run_id}/flips", response_class=HTMLResponse)
def flips_page(
    request: Request, run_id: str, store: StoreDep, viewer: Viewer,
    suite: str = "", candidate: str = "", slice: str = "", direction: str = "",
    q: Annotated[str, Query(max_length=200)] = "",
    limit: Annotated[int, Query(ge=1, le=5000)] = 200,
) -> HTMLResponse:
    try:
        view = svc.flips_view(store, run_id, suite=suite or None, role=candidate or None,
                              slice_=slice or None, direction=direction or None,
                              query=q or None, limit=limit)
    except svc.NotFound as exc:
        return _not_found(request, viewer, str(exc))
    return _page(request, "flips.html", viewer, title=f"Flips · run {run_id[:10]}", view=view)


@router.get("/runs/{run_id}/report.{fmt}")
def report_download(run_id: str, fmt: str, store: StoreDep, viewer: Viewer) -> Response:
    """The stored JSON report, or JUnit XML / Markdown rendered from it (what ``compare``
    writes with ``--json``/``--junit``/``--markdown``)."""
    report = store.get_report(run_id)
    if report is None:
        return PlainTextResponse(f"run {run_id!r} has no report (yet)", status_code=404)
    name = f"evalsvc-{run_id[:12]}"
    if fmt == "json":
        body, ctype = json.dumps(redact_urls_in(report), indent=2), "application/json"
    elif fmt == "xml":
        body, ctype = to_junit(report), "application/xml"
    elif fmt == "md":
        body, ctype = to_markdown(report), "text/markdown; charset=utf-8"
    else:
        return PlainTextResponse("formats: json, xml (JUnit), md", status_code=404)
    return Response(body, media_type=ctype,
                    headers={"Content-Disposition": f'attachment; filename="{name}.{fmt}"'})


@router.get("/trends", response_class=HTMLResponse)
def trends_page(
    request: Request, store: StoreDep, viewer: Viewer,
    baseline: str = "", candidate: str = "", suite: str = "", scheduled: str = "",
) -> HTMLResponse:
    pairs = svc.trend_pairs(store)
    chosen = None
    only = scheduled not in ("", "0", "false", "off")
    if baseline and candidate and suite:
        chosen = svc.trend(store, baseline_url=baseline, candidate_url=candidate, suite=suite,
                           scheduled_only=only)
    elif pairs:
        p = pairs[0]
        chosen = svc.trend(store, baseline_url=p["baseline_url"],
                           candidate_url=p["candidate_url"], suite=p["suite"],
                           scheduled_only=only)
    return _page(request, "trends.html", viewer, title="Trends", pairs=pairs, chosen=chosen)


@router.get("/compare", response_class=HTMLResponse)
def compare_page(
    request: Request, store: StoreDep, viewer: Viewer, a: str = "", b: str = ""
) -> HTMLResponse:
    view = None
    message = None
    if a and b:
        try:
            view = svc.compare_runs(store, a.strip(), b.strip())
        except svc.NotFound as exc:
            message = str(exc)
    return _page(request, "compare.html", viewer, title="Compare runs", view=view, a=a, b=b,
                 message=message)


@router.get("/ui/live")
def live(store: StoreDep, viewer: Viewer, ids: str = "") -> JSONResponse:
    """Status and progress of the given runs (comma-separated ids); the pages poll this."""
    wanted = [i for i in ids.split(",") if i and len(i) <= 64 and i.isalnum()]
    return JSONResponse(redact_urls_in(svc.live_status(store, wanted)),
                        headers={"Cache-Control": "no-store"})


# ------------------------------------------------------------------------------ sweeps


@router.get("/sweeps", response_class=HTMLResponse)
def sweeps_page(request: Request, store: StoreDep, viewer: Viewer) -> HTMLResponse:
    """Stored sweeps (``POST /api/v1/sweeps``, sweep schedules), newest first."""
    return _page(request, "sweeps.html", viewer, title="Sweeps",
                 sweeps=sweep_views.listing(store))


@router.get("/sweeps/{sweep_id}", response_class=HTMLResponse)
def sweep_page(request: Request, sweep_id: str, store: StoreDep, viewer: Viewer) -> HTMLResponse:
    """One sweep: per-configuration table, the quality Δ vs capacity scatter, the
    recommendation."""
    view = sweep_views.page(store, sweep_id) if len(sweep_id) <= 64 else None
    if view is None:
        return _not_found(request, viewer, f"There is no sweep {sweep_id!r}.")
    # The template inlines ``svg`` unescaped: scatter_svg escapes every text it writes.
    return _page(request, "sweep.html", viewer, title=f"Sweep {view['id'][:10]}", sweep=view,
                 svg=view.pop("svg"))


# ------------------------------------------------------------------------------ install


def install(app: FastAPI) -> None:
    """Add the dashboard to the web app (``evalsvc.webapp``): pages, static files, login
    redirect, CSP header."""

    async def login_required(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, LoginRequired)
        if request.url.path.startswith("/ui/"):
            return JSONResponse({"detail": exc.message or "login required"}, status_code=401)
        return RedirectResponse(f"/login?next={quote(exc.next_url, safe='')}",
                                status_code=status.HTTP_303_SEE_OTHER)

    app.add_exception_handler(LoginRequired, login_required)
    app.include_router(router)
    # Compressed, cacheable static files (vendor/: a week; evalsvc's own: revalidated).
    app.mount("/static", CachedStatic(directory=_HERE / "static", vendored=("vendor/",)),
              name="dashboard-static")

    async def not_found(request: Request, exc: Exception) -> Response:
        # Unknown HTML paths get the dashboard's 404 page; the API, the docs' assets and the
        # dashboard's JSON keep FastAPI's {"detail": ...} answer.
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code != status.HTTP_404_NOT_FOUND or request.url.path.startswith(_JSON_PATHS):
            return await http_exception_handler(request, exc)
        return _not_found(request, None, f"There is no page at {request.url.path}.")

    app.add_exception_handler(StarletteHTTPException, not_found)

    @app.middleware("http")
    async def security_headers(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await call_next(request)
        if not request.url.path.startswith(("/api/", "/docs", "/redoc", "/openapi")):
            response.headers.setdefault("Content-Security-Policy", CSP)
            response.headers.setdefault("X-Content-Type-Options", "nosniff")
            response.headers.setdefault("Referrer-Policy", "same-origin")
        return response
