"""carry: carries downstream patch series on moving upstream heads."""

from __future__ import annotations

import functools

FALLBACK_VERSION = "0.1.0+unknown"


@functools.cache
def _installed_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("carry")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return FALLBACK_VERSION


def __getattr__(name: str) -> str:
    # Looked up on first use only: reading the installed metadata costs a few milliseconds,
    # which every `carry` command would otherwise pay at import.
    if name == "__version__":
        return _installed_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
