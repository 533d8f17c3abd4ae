"""aotpack's CuTeDSL kernels for Hopper (sm_90a), compiled ahead of time on a host with no GPU.

- gemm.py        the warp-specialized persistent TMA + wgmma GEMM with fused epilogues (device code)
- epilogue.py    its register epilogue: step kinds, scale, the SwiGLU register pairing
- build.py       cute.compile for sm_90a -> cubin, PTX entry and parameter list (import_cutlass)
- compile.py     GemmOp -> [Launch] with manifest slots; candidates(op) for tuning
- slots.py       bytes of the value slots (fastdivmod, {i32,i32} structs lowered to u64)

Nothing here imports cutlass at import time; docs/cutedsl.md describes the launch ABI. The
tests' tools live in tests/support/: cutedsl_hostcapture.py (CuTeDSL's own host launch function
run on the CPU: the slots are compared with it), cutedsl_fragments.py (the kernel's register
coordinates evaluated on the host), cutedsl_checks.py (the pipeline-state checks) and
cutedsl_gpucheck.py (driver-only correctness / speed check on the GPU machine).
"""
