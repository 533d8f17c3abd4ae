"""The mixture-of-experts kernels (topk, stable sort, histc, inverse permutation, grouped GEMM)
in Triton's interpreter against their torch references, and compiled for sm_90a."""
import pytest
import torch

pytest.importorskip("triton")

from aotpack.dtypes import DType  # noqa: E402
from aotpack.kernels import run_reference as run_op_reference  # noqa: E402
from aotpack.kernels.spec import (  # noqa: E402
    GroupedMmOp, HistcOp, InversePermOp, SortOp, TensorArg, TopkOp, contiguous,
)
from support.interpret import run_interpreted_batch  # noqa: E402
from program_checks import rel_err, sass_or_skip  # noqa: E402


def _interpret(jobs):
    """[(op, env)] -> the references' outputs, after the kernels ran on the envs."""
    refs = []
    jobs = [job if len(job) == 3 else (*job, None) for job in jobs]
    for op, env, _ in jobs:
        ref = {k: v.clone() for k, v in env.items()}
        run_op_reference(op, ref)
        refs.append(ref[op.out.storage])
    run_interpreted_batch(jobs)
    return refs


def test_routing_kernels_in_the_interpreter():
    """topk k=1 and 2 with ties (the first index wins, as torch), a row of -inf; the stable
    sort of expert ids (many equal: the permutation keeps token order) over several blocks;
    histc with empty bins; the inverse of the sort's permutation."""
    g = torch.Generator().manual_seed(0)
    probs = torch.rand(37, 8, generator=g).softmax(-1)
    probs[0] = 0.125  # all equal
    probs[1, 3] = probs[1, 6] = 0.9  # a tie at the top
    probs[2] = float("-inf")
    x = contiguous("p", DType.F32, (37, 8))
    n = 300
    ids = torch.randint(0, 8, (n,), generator=g)
    ids[ids == 5] = 4  # expert 5 gets no token
    jobs = []
    for k in (1, 2):
        for indices in (False, True):
            out = contiguous("o", DType.I64 if indices else DType.BF16, (37, k))
            jobs.append((TopkOp(x, out, k, indices),
                         {"p": probs.reshape(-1).clone(),
                          "o": torch.zeros(37 * k, dtype=out.dtype.to_torch())}))
    v = contiguous("ids", DType.I64, (n,))
    for indices in (False, True):  # (one row of n: the routing's sort)
        jobs.append((SortOp(contiguous("ids", DType.I64, (1, n)),
                            contiguous("s", DType.I64, (1, n)), indices),
                     {"ids": ids.clone(), "s": torch.full((n,), -1, dtype=torch.int64)}))
    jobs.append((HistcOp(contiguous("f", DType.F32, (n,)), contiguous("h", DType.F32, (8,)),
                         0.0, 7.0), {"f": ids.float(), "h": torch.full((8,), -1.0)}))
    order = ids.sort(stable=True).indices
    jobs.append((InversePermOp(v, contiguous("inv", DType.I64, (n,))),
                 {"ids": order.clone(), "inv": torch.full((n,), -1, dtype=torch.int64)}))
    refs = _interpret(jobs)
    for (op, env), ref in zip(jobs, refs):
        assert torch.equal(env[op.out.storage], ref), op
    topk2 = jobs[3][1]["o"].reshape(37, 2)
    assert topk2[1].tolist() == [3, 6] and topk2[0].tolist() == [0, 1]
    assert torch.equal(jobs[5][1]["s"], order)  # stable: equal ids keep their order
    assert jobs[6][1]["h"][5] == 0 and jobs[6][1]["h"].sum() == n
    assert torch.equal(order[jobs[7][1]["inv"]], torch.arange(n))


def _grouped(t, sizes, k, n, dt, b_strides=None, swiglu=0):
    e = len(sizes)
    a = contiguous("a", dt, (t, k))
    b = TensorArg("b", dt, (e, k, n), b_strides or (k * n, n, 1))
    offs = contiguous("offs", DType.I32, (e,))
    return GroupedMmOp(a, b, offs, contiguous("out", dt, (t, n // 2 if swiglu else n)), swiglu)


# The TMA kernel at small tiles: 32-column tiles over N = 48 read the next expert's weight rows
# (never stored); 16-row tiles split every group; 5 programs walk all the tiles (persistent).
_TMA_SMALL = {"TMA": True, "BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2,
              "num_warps": 4, "num_stages": 2, "PROGRAMS": 0}
_RAGGED = [0, 37, 5, 0, 90, 1]
_TAIL = [3, 0, 20]
# case: (group sizes, extra rows past the last group, K, N, dtype, config, SwiGLU group)
_GROUPED_CASES = {
    "ragged": (_RAGGED, 0, 72, 48, DType.BF16, None, 0),
    "decode": ([0, 0, 1, 0, 0, 1, 0, 0], 0, 64, 96, DType.BF16, None, 0),
    "tail": (_TAIL, 7, 40, 24, DType.F32, None, 0),
    "tma": (_RAGGED, 0, 72, 48, DType.BF16, _TMA_SMALL, 0),
    "tma_persistent": (_RAGGED, 0, 72, 48, DType.BF16, dict(_TMA_SMALL, PROGRAMS=5), 0),
    "tma_tail": (_TAIL, 7, 40, 24, DType.BF16, _TMA_SMALL, 0),
    "swiglu": (_RAGGED, 5, 72, 96, DType.BF16, None, 8),
    # 80 accumulator columns in 32-column tiles: the last reads the next expert's rows
    "tma_swiglu": (_RAGGED, 5, 72, 80, DType.BF16, dict(_TMA_SMALL, PROGRAMS=3), 8),
}


@pytest.mark.parametrize("case", list(_GROUPED_CASES))
def test_grouped_mm_in_the_interpreter(case):
    """Ragged groups with empty ones, more rows than a tile, the expert weights as a permuted
    view ([E, N, K] memory, as transformers stores them); decode (2 rows, 8 experts); rows past
    the last offset come out zero; f32 in full precision; the TMA kernel (one program per tile,
    and persistent) on the ragged groups and the tail; the SwiGLU of interleaved gate/up
    columns (out [T, N/2]) in both kernels."""
    g = torch.Generator().manual_seed(1)
    sizes, extra, k, n, dt, config, swiglu = _GROUPED_CASES[case]
    t = sum(sizes) + extra
    e = len(sizes)
    op = _grouped(t, sizes, k, n, dt, b_strides=(n * k, 1, k), swiglu=swiglu)  # b[e] = W[e].T
    n_out = op.out.shape[1]
    torch_dt = dt.to_torch()
    env = {"a": torch.randn(t * k, generator=g).to(torch_dt),
           "b": torch.randn(e * n * k, generator=g).to(torch_dt),
           "offs": torch.tensor(sizes).cumsum(0).to(torch.int32),
           "out": torch.full((t * n_out,), float("nan")).to(torch_dt)}
    (ref,) = _interpret([(op, env, config)])
    assert not torch.isnan(env["out"]).any()
    assert rel_err(env["out"], ref) < (1e-5 if dt == DType.F32 else 1e-2)
    if extra:
        assert (env["out"].reshape(t, n_out)[sum(sizes):] == 0).all()


def test_moe_kernels_compile_for_sm90a():
    """Symbolic token counts (T a dim): the grid and sizes are expressions; the grouped GEMM
    runs on tensor cores (HGMMA or HMMA)."""
    from aotpack.ir.sym import symbol
    from aotpack.kernels.triton import grouped_mm, routing

    t = symbol("T", 1, 8192)
    e, k, d, f = 8, 2, 256, 512
    ops = [TopkOp(contiguous("p", DType.F32, (t, e)), contiguous("o", DType.I64, (t, k)), k,
                  True),
           SortOp(contiguous("ids", DType.I64, (1, t * k)),
                  contiguous("s", DType.I64, (1, t * k)), True),
           HistcOp(contiguous("f", DType.F32, (t * k,)), contiguous("h", DType.F32, (e,)),
                   0.0, float(e - 1)),
           InversePermOp(contiguous("s", DType.I64, (t * k,)),
                         contiguous("inv", DType.I64, (t * k,)))]
    for op in ops:
        (launch,) = routing.compile(op)
        assert launch.kernel.cubin
    gmm = _grouped(t * k, [0] * e, d, f, DType.BF16, b_strides=(f * d, 1, d))
    decode = grouped_mm.default_config(_grouped(2, [0] * e, d, f, DType.BF16))
    assert decode["BLOCK_M"] == 16 and grouped_mm.default_config(gmm)["BLOCK_M"] == 128
    assert grouped_mm.default_config(gmm).get("TMA")  # nn.Linear-layout weights: TMA
    for config, tma in ((None, True), (decode, False), ({"TMA": False}, False),
                        ({"TMA": True, "PROGRAMS": 132}, True)):
        (launch,) = grouped_mm.compile(gmm, config=config)
        sass = sass_or_skip(launch.kernel.cubin)
        assert "HGMMA" in sass or "HMMA" in sass
        assert ("UTMALDG" in sass) == tma, config
    swiglu = _grouped(t * k, [0] * e, d, f, DType.BF16, b_strides=(f * d, 1, d), swiglu=32)
    assert swiglu.out.shape[1] == f // 2
    for config in (None, decode):  # silu(gate) * up paired in registers, both kernels
        (launch,) = grouped_mm.compile(swiglu, config=config)
        assert "swiglu" in launch.kernel.fused_ops
        assert "HGMMA" in sass_or_skip(launch.kernel.cubin) or config is decode
    with pytest.raises(ValueError, match="multiple of 64"):
        grouped_mm.plan(swiglu, dict(decode, BLOCK_N=32))


def test_grouped_mm_tma_needs_the_linear_layout():
    """Weights [E, K, N] with N contiguous, or a's rows misaligned, keep the pointer kernel
    (the default says so) and a TMA config for them is refused with the reason."""
    from aotpack.kernels.triton import grouped_mm

    n_major = _grouped(4096, [0] * 8, 256, 512, DType.BF16)  # b strides (K*N, N, 1)
    assert not grouped_mm.default_config(n_major).get("TMA")
    assert "strides" in grouped_mm.tma_problem(n_major)
    with pytest.raises(ValueError, match="TMA config"):
        grouped_mm.plan(n_major, {"TMA": True})
    odd = _grouped(4096, [0] * 8, 100, 512, DType.BF16, b_strides=(512 * 100, 1, 100))
    assert "aligned" in grouped_mm.tma_problem(odd)
    assert grouped_mm.tma_problem(_grouped(64, [0] * 2, 64, 64, DType.F32,
                                           b_strides=(64 * 64, 1, 64))) is not None


def test_floor_division_of_integers_rounds_down():
    """order // k (a token's row from its routed slot): int64, exact past 2**24, negatives
    round toward -inf as torch's; floats take the floor of the quotient."""
    from aotpack.kernels import compile as compile_op
    from aotpack.kernels.spec import PointwiseOp, PwConst, PwExpr, PwInput

    expr = PwExpr("floordiv", (PwInput(0), PwConst(3.0)))
    ops = [PointwiseOp((contiguous("i", DType.I64, (40,)),), expr,
                       contiguous("q", DType.I64, (40,))),
           PointwiseOp((contiguous("f", DType.F32, (40,)),), expr,
                       contiguous("fq", DType.F32, (40,)))]
    ints = torch.arange(-20, 20) + torch.tensor([0] * 39 + [2**40])
    envs = [{"i": ints.clone(), "q": torch.zeros(40, dtype=torch.int64)},
            {"f": torch.linspace(-7, 7, 40), "fq": torch.zeros(40)}]
    refs = _interpret(list(zip(ops, envs)))
    assert torch.equal(envs[0]["q"], torch.div(ints, 3, rounding_mode="floor"))
    assert torch.equal(envs[0]["q"], refs[0]) and torch.equal(envs[1]["fq"], refs[1])
    for op in ops:
        assert compile_op(op)[0].kernel.cubin
