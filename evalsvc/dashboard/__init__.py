"""The web dashboard: server-rendered pages over the service layer, at ``/`` of the API app.

Contract: ``install(app)`` adds the pages (``_routes``), the static files (``/static``, the
vendored chart library included: no CDN) and the login redirect to the FastAPI app built by
``evalsvc.webapp.create_app``; static files are gzipped and cached (``evalsvc.web.static``),
and an unknown
HTML path answers the dashboard's 404 page (API paths keep their JSON). Pages read only through
``evalsvc.services.dashboard`` (the sweeps pages: ``evalsvc.services.sweep_views``).
Templates are Jinja2 with autoescape on; page data reaches the scripts as JSON inside
``<script type="application/json">`` (escaped by ``tojson``, so ``</script>`` in model output
cannot end the element), and every response carries a Content-Security-Policy that allows
scripts from this server only. Access follows the API's auth: the ``read`` scope, from a bearer
header or the HttpOnly, SameSite=Strict cookie the login page sets; with auth off (loopback
development) the pages are open.
"""

from ._routes import COOKIE_NAME, install

__all__ = ["COOKIE_NAME", "install"]
