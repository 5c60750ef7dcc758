"""The ``evalsvc`` command line (Typer): a view over ``evalsvc.services``.

Contract: commands parse arguments, call the service layer and format its answers; they never
build SQL or hold business logic. Every command follows one exit-code table (docs/cli.md):
0 pass/success, 1 a gate fails, 2 usage or configuration, 3 inconclusive, 4 infrastructure, 5 non-comparable.
May import: ``evalsvc.services``, ``evalsvc.domain``, ``evalsvc.db`` (the ``Store`` front and
its errors), ``evalsvc.reports`` (rendering), ``evalsvc.local``, ``evalsvc.settings``.
"""
