"""evalsvc: quality evaluation and release gates for quantized LLM serving endpoints.

Data flows one way: suite spec → seeded items → runner → endpoint client → score → store →
stats → gate → views (CLI, REST, dashboard, reports). See docs/architecture.md.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
