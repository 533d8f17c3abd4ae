"""aotpack's CuTeDSL kernels for Hopper (sm_90a), compiled ahead of time on a host with no GPU.

- gemm.py        the warp-specialized persistent TMA + wgmma GEMM with fused epilogues (device code)
- epilogue.py    its register epilogue: step kinds, scale, the SwiGLU register pairing
- fragments.py   the kernel's register coordinates evaluated on the host (tests)
- build.py       cute.compile for sm_90a -> cubin, PTX entry and parameter list (imports cutlass with CUTE_DSL_* set)
- compile.py     GemmOp -> [Launch] with manifest slots; candidates(op) for tuning
- slots.py       bytes of the value slots (fastdivmod, {i32,i32} structs lowered to u64)
- hostcapture.py runs CuTeDSL's own host launch function on the CPU (tests compare slots with it)
- gpucheck.py    driver-only correctness / speed check on the GPU machine (no CuTeDSL there)

Nothing here imports cutlass at import time; docs/cutedsl.md describes the launch ABI.
"""
