"""What the two web views share: the app's state, store and auth dependencies (``auth``) and
cached, compressed static files (``static``).

Contract: ``evalsvc.webapp.create_app`` is the one composition module: it opens the store, owns
the app's state and auth mode, and mounts the API (``evalsvc.api.install``) and the dashboard
(``evalsvc.dashboard.install``). The views import only this package below them, never the
composition or each other; this package imports no view (import-linter contracts in
pyproject.toml).
"""
