"""traceaug's version, in a module of its own: writers stamp it without importing the package's API."""

__version__ = "0.1.0"
