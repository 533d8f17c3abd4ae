"""The aten operators the frontend translates, one per line with its overloads:
`python -m aotpack.frontend.ops [SUBSTRING]` (an unsupported-operator error points here)."""
from __future__ import annotations

import sys


def supported() -> dict[str, list[str]]:
    """{operator: [overloads]} for every aten operator with a translation rule."""
    from aotpack.frontend.translate import RULES

    out: dict[str, list[str]] = {}
    for key in sorted(RULES):
        parts = key.split(".")
        if parts[0] == "aten" and len(parts) == 3:
            out.setdefault(parts[1], []).append(parts[2])
    return out


def main(argv: list[str]) -> int:
    needle = argv[0] if argv else ""
    for name, overloads in supported().items():
        if needle in name:
            print(f"{name:36} {', '.join(overloads)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
