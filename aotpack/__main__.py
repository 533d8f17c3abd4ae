"""`python -m aotpack ...`: the `aotpack` command without its console script (on a machine
where the package is on PYTHONPATH but not installed, like the GPU machine)."""
from aotpack.cli.entry import main

main()
