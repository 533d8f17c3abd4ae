"""Code the tests (and scripts/gpu-check) use and the product does not: the Triton interpreter
harness, SASS listings, the CuTeDSL GEMM's host-capture, fragment and pipeline checks, and its
driver-only GPU check. Importable as `support.*` from tests (pytest puts tests/ on the path) and
as `tests.support.*` from the repository root (`python -m tests.support.cutedsl_gpucheck`)."""
