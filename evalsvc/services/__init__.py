"""The service layer: one function per use case, called by both the CLI and the REST API.

Contract: services take domain objects and a ``Store``; they never format output or parse
arguments (that is the views' job) and never build SQL (that is ``evalsvc.db``'s job).
"""
