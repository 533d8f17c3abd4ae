"""Memory planner: overlapping lifetimes never share bytes; dead regions are reused; in place
only where the kernel reads and writes the same elements; scratch gets its own region."""
from aotpack.dtypes import DType
from aotpack.kernels.spec import (
    CompiledKernel, GemmOp, EpAdd, Launch, PointwiseOp, PtrSlot, PwExpr, PwInput, ScratchSlot,
    contiguous,
)
from aotpack.passes.plan_memory import plan_memory
from aotpack.program import Program, Storage

K = CompiledKernel(entry="k", cubin=b"\0", block=(128, 1, 1), smem=0)


def _program(kinds: dict[str, str], ops, shape=(64, 64)):
    st = {n: Storage(n, k, DType.BF16, shape) for n, k in kinds.items()}
    ins = [n for n, k in kinds.items() if k == "input"]
    outs = [n for n, k in kinds.items() if k == "output"]
    return Program(ins, outs, st, ops)


def _neg(src, dst, shape=(64, 64)):
    return PointwiseOp((contiguous(src, DType.BF16, shape),),
                       PwExpr("neg", (PwInput(0),)), contiguous(dst, DType.BF16, shape))


def _overlaps(plan, a, b):
    oa, ob = plan.offsets[a], plan.offsets[b]
    return oa < ob + plan.nbytes[b] and ob < oa + plan.nbytes[a]


def test_chain_reuses_dead_buffers_and_never_overlaps_live_ones():
    kinds = {"x": "input", "t0": "intermediate", "t1": "intermediate", "t2": "intermediate",
             "y": "output"}
    # x -> t0 -> t1 -> t2 -> y, each op also reads x so lifetimes are known; but a pointwise
    # chain would alias in place: use a two-input op that reads a *different* view to block it.
    ops = [_neg("x", "t0"), _neg("t0", "t1"), _neg("t1", "t2"), _neg("t2", "y")]
    prog = _program(kinds, ops)
    plan = plan_memory(prog, [[Launch(K, (1, 1, 1), ())] for _ in ops])
    one = 64 * 64 * 2
    assert plan.naive_bytes == 3 * one
    # in place: each negation may write over its dying input -> a single region suffices
    assert plan.arena_bytes == one
    assert plan.offsets["t0"] == plan.offsets["t1"] == plan.offsets["t2"]


def test_live_regions_do_not_overlap_without_inplace():
    kinds = {"x": "input", "a": "intermediate", "b": "intermediate", "c": "intermediate",
             "y": "output"}
    add = lambda p, q, o: PointwiseOp(
        (contiguous(p, DType.BF16, (64, 64)), contiguous(q, DType.BF16, (64, 64))),
        PwExpr("add", (PwInput(0), PwInput(1))), contiguous(o, DType.BF16, (64, 64)))
    ops = [_neg("x", "a"), _neg("x", "b"), add("a", "b", "c"), add("c", "x", "y")]
    prog = _program(kinds, ops)
    plan = plan_memory(prog, [[Launch(K, (1, 1, 1), ())] for _ in ops])
    assert not _overlaps(plan, "a", "b")  # both live at op 2
    assert plan.offsets["c"] in (plan.offsets["a"], plan.offsets["b"])  # in place over a dying input
    assert plan.arena_bytes == 2 * 64 * 64 * 2


def test_gemm_output_never_aliases_its_matmul_operand():
    kinds = {"x": "input", "h": "intermediate", "w": "weight", "y": "output", "r": "intermediate"}
    sh = (64, 64)
    ops = [_neg("x", "h"), _neg("x", "r"),
           GemmOp(contiguous("h", DType.BF16, sh), contiguous("w", DType.BF16, sh),
                  contiguous("y", DType.BF16, sh), (EpAdd(contiguous("r", DType.BF16, sh)),))]
    prog = _program(kinds, ops)
    plan = plan_memory(prog, [[Launch(K, (1, 1, 1), ())] for _ in ops])
    assert not _overlaps(plan, "h", "r")


def test_scratch_slots_become_private_arena_regions():
    kinds = {"x": "input", "t": "intermediate", "y": "output"}
    ops = [_neg("x", "t"), _neg("t", "y")]
    prog = _program(kinds, ops)
    launches = [[Launch(K, (4, 1, 1), (PtrSlot("x"), ScratchSlot(4 * 384)))],
                [Launch(K, (1, 1, 1), (PtrSlot("t"),))]]
    plan = plan_memory(prog, launches)
    slot = plan.launches[0].args[1]
    assert isinstance(slot, PtrSlot) and slot.storage == "__scratch.0.1"
    assert plan.nbytes["__scratch.0.1"] == 4 * 384
    assert not _overlaps(plan, "t", "__scratch.0.1")  # both live during step 0
    assert plan.arena_bytes >= plan.offsets["__scratch.0.1"] + 4 * 384


def test_shared_scratch_is_one_region_per_op_and_key():
    """ScratchSlot(shared=key): the launches of one op with the same key share one region
    (e.g. split-K partials written by one launch, reduced by the next), as large as the largest
    request and live from the first to the last of those launches; other ops get their own."""
    kinds = {"x": "input", "t": "intermediate", "u": "intermediate", "y": "output"}
    ops = [_neg("x", "t"), _neg("t", "u"), _neg("u", "y")]
    prog = _program(kinds, ops)
    two = [Launch(K, (4, 1, 1), (PtrSlot("t"), ScratchSlot(3000, shared="partials"))),
           Launch(K, (1, 1, 1), (ScratchSlot(5000, shared="partials"), PtrSlot("u"))),
           Launch(K, (1, 1, 1), (ScratchSlot(100),))]
    launches = [[Launch(K, (1, 1, 1), (PtrSlot("x"),))], two,
                [Launch(K, (2, 1, 1), (PtrSlot("u"), ScratchSlot(64, shared="partials")))]]
    plan = plan_memory(prog, launches)
    first, second, private = plan.launches[1].args[1], plan.launches[2].args[0], \
        plan.launches[3].args[0]
    assert first == second and first.storage == "__scratch.1.partials"
    assert plan.nbytes[first.storage] == 5000
    assert private.storage == "__scratch.3.0"  # unshared slots stay private to their launch
    third = plan.launches[4].args[1]
    assert third.storage == "__scratch.4.partials"  # same key, other op: another region
    # live across steps 1..2 (its users): never overlaps what op 1 reads or writes; after its
    # last user its bytes are free again (the third launch's private scratch may reuse them)
    for other in ("t", "u"):
        assert not _overlaps(plan, first.storage, other)
    assert plan.arena_bytes >= plan.offsets[first.storage] + 5000
