"""Built-in suite kinds. They register through the ``evalsvc.suites`` entry-point group (see
pyproject.toml), the same way outside packages add kinds, so the registry never imports them by
name and nothing here imports the registry."""
