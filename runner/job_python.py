"""The steps' own Python: a virtual environment made anew for each job, on top of the runner's.

The runner's Python and carry's code are read-only to steps (sandbox.runner_files), so a setup
step's `pip install -e .` cannot go there, and must not: what one job installs into the
runner's interpreter would run in the next job and in the runner itself. Each job (and each
A/B phase) gets a fresh virtual environment instead, first on the steps' PATH: `python` and
`pip` are its own, what they install lands in it, and it sees every package of the runner's
Python (carry's checks, torch, vLLM) below its own, through a .pth file that adds the
runner's site directories (their own .pth files included, so editable installs work).
"""

from __future__ import annotations

import os
import site
import sysconfig
import venv
from collections.abc import Mapping
from pathlib import Path

RUNNER_SITES_PTH = "_carry_runner_sites.pth"
PIP_SHIM = """#!{python}
# carry: pip from the runner's Python, installing into this job's environment
import runpy, sys
sys.argv[0] = "pip"
runpy.run_module("pip", run_name="__main__", alter_sys=True)
"""


def python_dir(clone: Path) -> Path:
    return clone.with_name(clone.name + ".python")


def runner_sites() -> list[str]:
    """The runner's site directories, in its own order (its user site excluded)."""
    paths = [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]
    paths.append(sysconfig.get_paths()["platlib"])
    return [p for i, p in enumerate(paths) if os.path.isdir(p) and p not in paths[:i]]


def make(path: Path) -> None:
    """A new virtual environment at `path` (which must not exist) on top of the runner's
    Python; raises OSError when it cannot be made."""
    venv.EnvBuilder(symlinks=True, with_pip=False).create(path)
    purelib = Path(sysconfig.get_paths(vars={"base": str(path), "platbase": str(path)})["purelib"])
    sites = ", ".join(repr(p) for p in runner_sites())
    (purelib / RUNNER_SITES_PTH).write_text(
        f"import site; list(map(site.addsitedir, ({sites},)))\n"
    )
    for name in ("pip", "pip3"):
        shim = path / "bin" / name
        shim.write_text(PIP_SHIM.format(python=path / "bin" / "python"))
        shim.chmod(0o755)


def step_env(path: Path, host: Mapping[str, str]) -> dict[str, str]:
    """What a step's environment says about its Python: this environment, first on PATH."""
    return {
        "VIRTUAL_ENV": str(path),
        "PATH": os.pathsep.join([str(path / "bin"), host.get("PATH", os.defpath)]),
    }
