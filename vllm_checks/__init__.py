"""Runner-side Verify checks, by name; each is also ``python -m vllm_checks.<module>``.

Modules are imported only when a check runs, so importing this package stays cheap.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

CHECKS: dict[str, str] = {
    "async-inputs": "vllm_checks.async_inputs",
    "ple-offload": "vllm_checks.ple_offload",
}


def run_check(name: str, argv: Sequence[str]) -> int:
    """Run a check's command line; exit-code contract in ``vllm_checks.report``."""
    if name not in CHECKS:
        print(f"unknown check {name!r}; known: {', '.join(sorted(CHECKS))}", file=sys.stderr)
        return 2
    main = importlib.import_module(CHECKS[name]).main
    return int(main(list(argv)))
