"""One model, many threads, many runs, on a real GPU (docs/testing.md): 8 threads each with its
own session and stream over one loaded model, 10,000 runs in all, every output bit-exact to a
single-threaded reference; then one session reused for 10,000 runs; the device's free memory
must not shrink across either (no per-run allocation, plans cached, nothing leaked).

    timeout 300 python3 -m pytest -q -m gpu tests/gpu/test_threads_gpu.py
"""
from __future__ import annotations

import threading

import pytest

import gpu_harness as h

pytestmark = pytest.mark.gpu

SPEC = f"{h.GPU_TESTS / 'template_cases.py'}:make_gemm_residual"  # x [R,256], extra [R,200]
THREADS, TOTAL_RUNS, INPUT_SETS = 8, 10_000, 4
# the caching allocator, CUDA graphs and the driver may round up; a leak of even 1 KiB a run
# would be 10 MB here
SLACK_BYTES = 4 << 20


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    import aotpack

    built = h.build_all({"residual": (SPEC, {})}, tmp_path_factory.mktemp("threads"))
    with aotpack.load(built["residual"].check()) as m:
        yield m


def _input_sets(rows_list):
    import torch

    sets = []
    for k, rows in enumerate(rows_list):
        g = torch.Generator(device="cuda").manual_seed(k)
        sets.append([torch.randn(rows, 256, generator=g, device="cuda").to(torch.bfloat16),
                     torch.randn(rows, 200, generator=g, device="cuda").to(torch.bfloat16)])
    return sets


def _free_bytes() -> int:
    """Device memory free, counting what torch's caching allocator holds as free: the test's
    own tensors come from there (cached per stream, so new threads' streams grow it), and it
    is aotpack's allocations (workspaces, graphs, tensor maps) that must not grow."""
    import torch

    torch.cuda.synchronize()
    return torch.cuda.mem_get_info()[0] + torch.cuda.memory_reserved()


def test_threads_share_one_model_bit_exact(model):
    import torch

    sets = _input_sets([1, 77, 512, 4096])
    with model.session() as s:
        want = [s.run(x)[0].clone() for x in sets]
    torch.cuda.synchronize()
    failures, errors = [], []

    def worker(t: int):
        try:
            stream = torch.cuda.Stream()
            outs = [[torch.empty_like(w)] for w in want]
            with model.session() as s, torch.cuda.stream(stream):
                for i in range(TOTAL_RUNS // THREADS):
                    k = (i + t) % INPUT_SETS
                    s.run(sets[k], outs[k], stream=stream)
                    if i % 25 == 0 or i >= TOTAL_RUNS // THREADS - INPUT_SETS:
                        stream.synchronize()
                        if not torch.equal(outs[k][0], want[k]):
                            failures.append((t, i, k))
                stream.synchronize()
        except Exception as e:  # surfaced below with the thread's number
            errors.append((t, repr(e)))

    # one round to create what every later round reuses, then measure a second round
    for round_ in range(2):
        free_before = _free_bytes()
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert errors == [] and failures == [], (errors, failures[:10])
        if round_ == 1:
            assert free_before - _free_bytes() <= SLACK_BYTES


def test_one_session_reused_no_growth(model):
    import torch

    sets = _input_sets([33, 1000])
    with model.session() as s:
        outs = [[torch.empty(x[0].shape[0], 200, dtype=torch.bfloat16, device="cuda")]
                for x in sets]
        want = [s.run(x)[0].clone() for x in sets]
        for k in range(2):
            s.run(sets[k], outs[k])
        free_before = _free_bytes()
        for i in range(TOTAL_RUNS):
            s.run(sets[i % 2], outs[i % 2])
        free_after = _free_bytes()
        assert all(torch.equal(outs[k][0], want[k]) for k in range(2))
    assert free_before - free_after <= SLACK_BYTES
