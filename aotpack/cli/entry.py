"""The `aotpack` command's entry point (console script and `python -m aotpack`).

`aotpack build` runs with PYTHONHASHSEED=0 unless the caller set it: Python salts string hashes
per process, so a model whose code iterates a set of strings (transformers' per-layer-type
rotary tables: `for t in set(config.layer_types)`, Gemma-3 and 17 other families) is traced in
another order in every process, and two builds of it would differ in bytes. A fixed seed keeps
builds byte-reproducible. The command re-executes itself once, before anything heavy is
imported; a caller's own PYTHONHASHSEED is kept.
"""
from __future__ import annotations

import os
import sys

_REPRODUCIBLE = ("build",)  # commands whose output bytes must not depend on the process


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in _REPRODUCIBLE:
        _fixed_hash_seed()
    from aotpack.cli.main import app

    app(prog_name="aotpack")


def _fixed_hash_seed() -> None:
    if "PYTHONHASHSEED" in os.environ or not sys.executable:
        return
    os.environ["PYTHONHASHSEED"] = "0"
    # the child imports this very aotpack, wherever it runs (`-m` puts the working folder
    # first on sys.path: another checkout there would otherwise shadow it)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    try:
        os.execv(sys.executable, [sys.executable, "-m", "aotpack", *sys.argv[1:]])
    except OSError:  # the build is right either way; only its bytes may vary for such models
        pass
