"""carry: carries downstream patch series on moving upstream heads."""

from __future__ import annotations

FALLBACK_VERSION = "0.1.0+unknown"
# Read once. Not functools.cache: importing functools (and collections) costs the resident
# engine's client (bot.resident), which imports this package and nothing else, a few ms.
_VERSION: list[str] = []


def _installed_version() -> str:
    if not _VERSION:
        from importlib import metadata

        try:
            _VERSION.append(metadata.version("carry"))
        except metadata.PackageNotFoundError:  # run from a checkout that was never installed
            _VERSION.append(FALLBACK_VERSION)
    return _VERSION[0]


def __getattr__(name: str) -> str:
    # Looked up on first use only: reading the installed metadata costs a few milliseconds,
    # which every `carry` command would otherwise pay at import.
    if name == "__version__":
        return _installed_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
