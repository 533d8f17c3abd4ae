"""aotpack's own CuTeDSL GEMM for Hopper (sm_90a): out = epilogue(A @ B^T).

A[M, K] and B[N, K] are K-major (B in the nn.Linear weight layout), accumulation is f32, the
epilogue runs in registers before the TMA store. Shape of the kernel:
 - warp group 0 is the producer: one thread issues TMA loads of A/B into an `ab_stage`-deep ring
   of shared-memory buffers (multicast across the cluster when the cluster is 2x1 or 1x2);
 - the other 1 or 2 warp groups are consumers: wgmma from shared memory, then the epilogue;
 - persistent: `grid` CTAs loop over output tiles with CuTeDSL's static persistent scheduler
   (rasterised along M or N). The kernel reads gridDim at run time, so the grid (= the SM count of
   the GPU it runs on) is a launch parameter, never baked into the cubin.
M, N, K and leading dimensions are run-time values: one cubin serves every problem shape.
SwiGLU (cfg.swiglu_group): B holds gate/up rows interleaved in blocks of G; after the mainloop
the [tile_m, tile_n] accumulator is paired in registers into a [tile_m, tile_n / 2] output
fragment, which the rest of the epilogue, the smem staging and the TMA store (of C, [M, N/2])
work on as if the tile were tile_n / 2 wide.

Only device code lives here; `abi.py` turns the compiled kernel into manifest slots.
Importing this module imports cutlass (nvidia-cutlass-dsl); callers import it lazily.
"""
import math
from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.pipeline import pipeline_init_arrive, pipeline_init_wait

from aotpack.kernels.cutedsl import epilogue as epi
from aotpack.kernels.cutedsl.epilogue import EPI_KINDS  # noqa: F401  (re-exported)


@dataclass(frozen=True)
class GemmConfig:
    tile_m: int = 128  # 64 (one consumer warp group) or 128
    tile_n: int = 256  # 64, 128, 192, 224, 256 (224 = 14336 / 64: the Llama-3 FFN width)
    cluster_m: int = 1  # 2 -> B tiles multicast to both CTAs of a cluster
    cluster_n: int = 1  # 2 -> A tiles multicast
    raster_along_m: bool = True
    swizzle: int = 1  # scheduler swizzle (in clusters) for L2 locality
    epilogue: tuple[str, ...] = ()
    out_dtype: str = "bf16"  # bf16 | f16 | f32
    swiglu_group: int = 0  # > 0: SwiGLU of interleaved gate/up blocks first (epilogue.py)

    def check(self) -> None:
        if self.tile_m not in (64, 128) or self.tile_n not in (64, 128, 192, 224, 256):
            raise ValueError(f"unsupported tile {self.tile_m}x{self.tile_n}")
        g = self.swiglu_group
        if g and (g % 8 or self.tile_n % (2 * g)):
            raise ValueError(f"swiglu group {g} needs a multiple of 8 with tile_n "
                             f"({self.tile_n}) a multiple of {2 * g}")
        if (self.cluster_m, self.cluster_n) not in ((1, 1), (2, 1), (1, 2)):
            raise ValueError(f"unsupported cluster {self.cluster_m}x{self.cluster_n}")
        bad = [e for e in self.epilogue if e not in EPI_KINDS]
        if bad:
            raise ValueError(f"unsupported epilogue steps {bad}")

    @property
    def operand_steps(self) -> tuple[int, ...]:
        """Indices of epilogue steps that read a tensor, in kernel-parameter order."""
        return tuple(i for i, e in enumerate(self.epilogue) if e in epi.OPERAND_KINDS)

    @property
    def out_tile_n(self) -> int:
        """Output columns per tile (the C tile; the accumulator is tile_n wide)."""
        return self.tile_n // 2 if self.swiglu_group else self.tile_n


_CUTE_DTYPE = {"bf16": cutlass.BFloat16, "f16": cutlass.Float16, "f32": cutlass.Float32}


class Sm90Gemm:
    """Host-side (`__call__`, traced by cute.compile) and device-side (`kernel`) code."""

    threads_per_wg = 128

    def __init__(self, cfg: GemmConfig):
        cfg.check()
        self.cfg = cfg
        self.cluster_mn = (cfg.cluster_m, cfg.cluster_n)
        # Two consumer warp groups split M for 128xN tiles with N > 128: one warp group
        # would need 256 accumulator registers per thread (spills).
        self.atom_layout = (2, 1, 1) if cfg.tile_m > 64 and cfg.tile_n > 128 else (1, 1, 1)
        self.num_mma_wg = math.prod(self.atom_layout)
        self.num_mma_threads = self.num_mma_wg * self.threads_per_wg
        self.threads = (1 + self.num_mma_wg) * self.threads_per_wg
        self.epi_store_warp = 4  # first warp of the first consumer warp group
        self.smem_capacity = utils.get_smem_capacity_in_bytes("sm_90")
        self.epi_barrier = pipeline.NamedBarrier(barrier_id=1, num_threads=self.num_mma_threads)

    # ------------------------------------------------------------------ host (traced)
    @cute.jit
    def __call__(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, p0: cute.Pointer,
                 p1: cute.Pointer, p2: cute.Pointer, ld0: cutlass.Int32, ld1: cutlass.Int32,
                 ld2: cutlass.Int32, max_clusters: cutlass.Constexpr, stream: cuda.CUstream):
        """Epilogue operands: pointers p0..p2 and row strides ld0..ld2 (elements), in the order
        of cfg.operand_steps; unused ones are ignored (any value). Fixed arity because
        cute.compile takes no tuples of dynamic values."""
        self.a_dtype, self.c_dtype = a.element_type, c.element_type
        self._setup(a, b, c)
        tma_a, mA = self._tma_load(a, self.a_smem_staged, (self.tile[0], self.tile[2]),
                                   self.cluster_mn[1])
        tma_b, mB = self._tma_load(b, self.b_smem_staged, (self.tile[1], self.tile[2]),
                                   self.cluster_mn[0])
        epi_smem = cute.slice_(self.c_smem_staged, (None, None, 0))
        tma_c, mC = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(), c, epi_smem, self.epi_tile)
        # What CuTeDSL built each descriptor from, as text, for the slots (compile.py): the TMA
        # atom's type (box as tma_gbasis, element format) and the smem layout (swizzle).
        self.traced = {
            "a": (_atom_type(tma_a), str(cute.slice_(self.a_smem_staged, (None, None, 0)))),
            "b": (_atom_type(tma_b), str(cute.slice_(self.b_smem_staged, (None, None, 0)))),
            "c": (_atom_type(tma_c), str(epi_smem)),
        }
        sched, grid = self._scheduler(c, max_clusters)
        self.shared_storage = self._shared_storage()
        self.kernel(tma_a, mA, tma_b, mB, tma_c, mC, p0, p1, p2, ld0, ld1, ld2, sched).launch(
            grid=grid, block=[self.threads, 1, 1], cluster=(*self.cluster_mn, 1),
            min_blocks_per_mp=1, stream=stream)

    def _setup(self, a, b, c):
        k = 64 * 16 // self.a_dtype.width  # 4 wgmma K-steps (16 bf16 each) per stage
        self.tile = (self.cfg.tile_m, self.cfg.tile_n, k)
        self.mcast_a, self.mcast_b = self.cluster_mn[1] > 1, self.cluster_mn[0] > 1
        # Epilogue sub-tile: each warp group stores 64 (or 128) rows x 32 columns at a time.
        self.out_tile = (self.tile[0], self.cfg.out_tile_n)  # the C tile (SwiGLU: half)
        self.epi_tile = (min(128 if self.num_mma_wg == 2 else 64, self.tile[0]),
                         min(32, self.out_tile[1]))
        self.epi_stage = 4
        ab_bytes = (self.tile[0] + self.tile[1]) * self.tile[2] * self.a_dtype.width // 8
        epi_bytes = self.epi_tile[0] * self.epi_tile[1] * self.c_dtype.width // 8 * self.epi_stage
        self.ab_stage = (self.smem_capacity - 1024 - epi_bytes) // ab_bytes
        self._make_layouts()

    def _make_layouts(self):
        """MMA and layout objects. Called on the host and again at the top of the kernel:
        CuTe IR values cannot cross from the host function into the kernel's region (only
        kernel arguments can), and these are all static, so rebuilding them costs nothing."""
        self.tiled_mma = self._make_tiled_mma()
        # The output fragment's layout: the accumulator's own, or (SwiGLU) that of a wgmma half
        # as wide with the same thread layout. It only shapes registers; it never runs.
        self.out_mma = (self._make_tiled_mma(self.cfg.out_tile_n) if self.cfg.swiglu_group
                        else self.tiled_mma)
        self.cta_layout = cute.make_layout((*self.cluster_mn, 1))
        self.a_smem_staged = self._smem_staged(self.a_dtype, (self.tile[0], self.tile[2]),
                                               self.ab_stage)
        self.b_smem_staged = self._smem_staged(self.a_dtype, (self.tile[1], self.tile[2]),
                                               self.ab_stage)
        self.c_smem_staged = self._smem_staged(self.c_dtype, self.epi_tile, self.epi_stage)

    def _make_tiled_mma(self, tile_n: int | None = None):
        k_major = cute.nvgpu.warpgroup.OperandMajorMode.K
        return sm90_utils.make_trivial_tiled_mma(
            self.a_dtype, self.a_dtype, k_major, k_major, cutlass.Float32, self.atom_layout,
            tiler_mn=(64, tile_n or self.cfg.tile_n))

    @staticmethod
    def _smem_staged(dtype, shape_rc, stages):
        """Swizzled smem layout for `stages` copies of a row-major (rows, cols) tile."""
        atom = cute.nvgpu.warpgroup.make_smem_layout_atom(
            sm90_utils.get_smem_layout_atom(utils.LayoutEnum.ROW_MAJOR, dtype, shape_rc[1]),
            dtype)
        return cute.tile_to_shape(atom, cute.append(shape_rc, stages), order=(0, 1, 2))

    @staticmethod
    def _tma_load(t, smem_staged, tile_rc, mcast):
        op = (cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp() if mcast == 1
              else cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp())
        smem = cute.slice_(smem_staged, (None, None, 0))
        return cute.nvgpu.cpasync.make_tiled_tma_atom(op, t, smem, tile_rc, num_multicast=mcast)

    def _scheduler(self, c, max_clusters):
        gc = cute.zipped_divide(c, tiler=self.out_tile)  # = the accumulator tiles over B's rows
        tiles_mnl = gc[(0, (None, None, None))].shape
        params = utils.PersistentTileSchedulerParams(
            tiles_mnl, (*self.cluster_mn, 1), self.cfg.swizzle, self.cfg.raster_along_m)
        grid = utils.StaticPersistentTileScheduler.get_grid_shape(params, max_clusters)
        return params, grid

    def _shared_storage(self):
        stages, ad, cd = self.ab_stage, self.a_dtype, self.c_dtype

        @cute.struct
        class SharedStorage:
            ab_barriers: cute.struct.MemRange[cutlass.Int64, stages * 2]
            sA: cute.struct.Align[cute.struct.MemRange[ad, cute.cosize(self.a_smem_staged)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[ad, cute.cosize(self.b_smem_staged)], 1024]
            sC: cute.struct.Align[cute.struct.MemRange[cd, cute.cosize(self.c_smem_staged)], 1024]

        return SharedStorage

    # ------------------------------------------------------------------ device
    @cute.kernel
    def kernel(self, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom,
               mB: cute.Tensor, tma_c: cute.CopyAtom, mC: cute.Tensor, p0: cute.Pointer,
               p1: cute.Pointer, p2: cute.Pointer, ld0: cutlass.Int32, ld1: cutlass.Int32,
               ld2: cutlass.Int32, sched_params: utils.PersistentTileSchedulerParams):
        self._make_layouts()
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp == 0:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_b)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_c)
        rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cluster_crd = self.cta_layout.get_flat_coord(rank)
        storage = utils.SmemAllocator().allocate(self.shared_storage)
        ab_pipe = self._ab_pipeline(storage)
        pipeline_init_arrive(cluster_shape_mn=self.cluster_mn, is_relaxed=True)
        sA = storage.sA.get_tensor(self.a_smem_staged.outer, swizzle=self.a_smem_staged.inner)
        sB = storage.sB.get_tensor(self.b_smem_staged.outer, swizzle=self.b_smem_staged.inner)
        sC = storage.sC.get_tensor(self.c_smem_staged.outer, swizzle=self.c_smem_staged.inner)
        gA = cute.local_tile(mA, (self.tile[0], self.tile[2]), (None, None, None))
        gB = cute.local_tile(mB, (self.tile[1], self.tile[2]), (None, None, None))
        k_tiles = cute.size(gA, mode=[3])
        pipeline_init_wait(cluster_shape_mn=self.cluster_mn)
        wg = cute.arch.make_warp_uniform(tidx // self.threads_per_wg)
        if wg == 0:
            cute.arch.setmaxregister_decrease(40)
            if warp == 0:
                self._producer(tma_a, tma_b, gA, gB, sA, sB, ab_pipe, cluster_crd, k_tiles,
                               sched_params)
        else:
            cute.arch.setmaxregister_increase(232)
            self._consumer(tidx, warp, wg, mC, tma_c, sA, sB, sC, ab_pipe, k_tiles,
                           (p0, p1, p2), (ld0, ld1, ld2), sched_params)

    @cute.jit
    def _ab_pipeline(self, storage):
        a_bytes = cute.size_in_bytes(self.a_dtype, cute.slice_(self.a_smem_staged, (None, None, 0)))
        b_bytes = cute.size_in_bytes(self.a_dtype, cute.slice_(self.b_smem_staged, (None, None, 0)))
        # Every consumer warp releases a stage to each CTA that multicast into it.
        mcast = self.cluster_mn[0] + self.cluster_mn[1] - 1
        consumers = pipeline.CooperativeGroup(pipeline.Agent.Thread, mcast * self.num_mma_wg * 4)
        return pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.ab_barriers.data_ptr(), num_stages=self.ab_stage,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=consumers, tx_count=a_bytes + b_bytes,
            cta_layout_vmnk=cute.make_layout((1, *self.cta_layout.shape)), defer_sync=True)

    @cute.jit
    def _producer(self, tma_a, tma_b, gA, gB, sA, sB, ab_pipe, cluster_crd, k_tiles,
                  sched_params):
        a_mask = cute.make_layout_image_mask(self.cta_layout, cluster_crd, mode=1)
        b_mask = cute.make_layout_image_mask(self.cta_layout, cluster_crd, mode=0)
        a_mask = a_mask if self.mcast_a else 0
        b_mask = b_mask if self.mcast_b else 0
        a_cta = cute.make_layout(cute.slice_(self.cta_layout, (0, None, 0)).shape)
        b_cta = cute.make_layout(cute.slice_(self.cta_layout, (None, 0, 0)).shape)
        tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
            tma_a, cluster_crd[1], a_cta, cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2))
        tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
            tma_b, cluster_crd[0], b_cta, cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2))
        sched = utils.StaticPersistentTileScheduler.create(
            sched_params, cute.arch.block_idx(), cute.arch.grid_dim())
        work = sched.initial_work_tile_info()
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.ab_stage)
        while work.is_valid_tile:
            crd = work.tile_idx
            tAgA_t = tAgA[(None, crd[0], None, crd[2])]
            tBgB_t = tBgB[(None, crd[1], None, crd[2])]
            state.reset_count()
            for _k in range(k_tiles):
                ab_pipe.producer_acquire(state)
                bar = ab_pipe.producer_get_barrier(state)
                cute.copy(tma_a, tAgA_t[(None, state.count)], tAsA[(None, state.index)],
                          tma_bar_ptr=bar, mcast_mask=a_mask)
                cute.copy(tma_b, tBgB_t[(None, state.count)], tBsB[(None, state.index)],
                          tma_bar_ptr=bar, mcast_mask=b_mask)
                ab_pipe.producer_commit(state)
                state.advance()
            sched.advance_to_next_work()
            work = sched.get_current_work()
        ab_pipe.producer_tail(state)

    @cute.jit
    def _consumer(self, tidx, warp, wg, mC, tma_c, sA, sB, sC, ab_pipe, k_tiles, operands,
                  ld_operands, sched_params):
        tiled_mma = self.tiled_mma
        wg_layout = cute.make_layout(self.num_mma_wg, stride=self.threads_per_wg)
        thr_mma = tiled_mma.get_slice(wg_layout(wg - 1))
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        gC = cute.local_tile(mC, self.out_tile, (None, None, None))
        acc = cute.make_rmem_tensor(tiled_mma.partition_shape_C(self.tile[:2]), cutlass.Float32)
        # The fragment the epilogue steps and the store work on (SwiGLU: half of acc's width).
        acc_out = acc
        if cutlass.const_expr(self.cfg.swiglu_group > 0):
            acc_out = cute.make_rmem_tensor(self.out_mma.partition_shape_C(self.out_tile),
                                            cutlass.Float32)
        # Coordinates (m, n, l) of each output element, for the epilogue operands.
        cC = cute.local_tile(cute.make_identity_tensor(mC.shape), self.out_tile,
                             (None, None, None))
        tCcC = acc_coords(self.out_mma, tidx - self.threads_per_wg, cC)
        store = self._store_parts(tidx, self.out_mma, sC, acc_out)
        store_pipe = pipeline.PipelineTmaStore.create(
            num_stages=self.epi_stage,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.num_mma_threads))
        sched = utils.StaticPersistentTileScheduler.create(
            sched_params, cute.arch.block_idx(), cute.arch.grid_dim())
        work = sched.initial_work_tile_info()
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.ab_stage)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.ab_stage)
        while work.is_valid_tile:
            crd = work.tile_idx
            # The states MUST be reassigned here: CuTeDSL carries a value through a dynamic
            # loop only if the loop body assigns it (or calls a method on it). Mutated inside
            # the helper and not reassigned, they restarted at (stage 0, phase 0) on every tile
            # while the producer's state ran on: a deadlock on a CTA's second tile unless
            # k_tiles is a multiple of 2 * ab_stage (tests/support/cutedsl_checks catches it).
            read, release = self._mainloop(tiled_mma, acc, tCrA, tCrB, ab_pipe, read, release,
                                           k_tiles)
            if cutlass.const_expr(self.cfg.swiglu_group > 0):
                epi.swiglu(acc, acc_out, self._swiglu_pairs(acc))
            self._apply_epilogue(acc_out, tCcC[(None, None, None, *crd)], mC, operands,
                                 ld_operands)
            self._store_tile(warp, tma_c, sC, gC[(None, None, *crd)], store, store_pipe,
                             sched.num_tiles_executed)
            sched.advance_to_next_work()
            work = sched.get_current_work()
        store_pipe.producer_tail()

    @cute.jit
    def _mainloop(self, tiled_mma, acc, tCrA, tCrB, ab_pipe, read, release, k_tiles):
        """K loop; keeps one wgmma batch in flight and frees a stage once its batch retired.
        Returns the advanced pipeline states (the caller must reassign them, see _consumer)."""
        read.reset_count()
        release.reset_count()
        acc.fill(0.0)
        tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
        cute.nvgpu.warpgroup.fence()
        k_blocks = cute.size(tCrA, mode=[2])
        for k in range(k_tiles):
            ab_pipe.consumer_wait(read)
            for kb in cutlass.range_constexpr(k_blocks):
                blk = (None, None, kb, read.index)
                cute.gemm(tiled_mma, acc, tCrA[blk], tCrB[blk], acc)
            cute.nvgpu.warpgroup.commit_group()
            read.advance()
            if k > 0:
                cute.nvgpu.warpgroup.wait_group(1)
                ab_pipe.consumer_release(release)
                release.advance()
        cute.nvgpu.warpgroup.wait_group(0)
        if k_tiles > 0:
            ab_pipe.consumer_release(release)
            release.advance()
        return read, release

    def _swiglu_pairs(self, acc) -> list:
        """Static (output, gate, up) register coordinates (epilogue.swiglu_pairs)."""
        shape = acc.shape  # ((2, 2, tile_n / 8), MMA_M, MMA_N)
        if shape[0][:2] != (2, 2) or shape[2] != 1:
            raise RuntimeError(f"unexpected wgmma accumulator fragment {shape}")
        return epi.swiglu_pairs(self.cfg.tile_n, shape[1], self.cfg.swiglu_group)

    @cute.jit
    def _apply_epilogue(self, acc, tCcC, mC, operands, ld_operands):
        """Runs the static step sequence on every output element, in f32 (epilogue.py).
        Operand reads clamp their coordinates into the matrix: rows/columns past M/N are
        computed on duplicates and then dropped by the bounds-checked TMA store."""
        steps, operand_steps = self.cfg.epilogue, self.cfg.operand_steps
        m_max = cute.size(mC, mode=[0]) - 1
        n_max = cute.size(mC, mode=[1]) - 1
        views = epi.operand_views(steps, operand_steps, operands, ld_operands, m_max, n_max)
        scalars = []  # per-tensor scales: one load per tile, not one per element
        for j in cutlass.range_constexpr(len(operand_steps)):
            if cutlass.const_expr(steps[operand_steps[j]] == "scale"):
                scalars.append(views[j][0].to(cutlass.Float32))
            else:
                scalars.append(None)
        for i in cutlass.range_constexpr(cute.size(acc)):
            crd = tCcC[i]
            m = cutlass.min(crd[0], m_max)
            n = cutlass.min(crd[1], n_max)
            acc[i] = epi.apply_steps(steps, acc[i], m, n, views, scalars)

    @cute.jit
    def _store_parts(self, tidx, tiled_mma, sC, acc):
        atom_r2s = sm90_utils.sm90_get_smem_store_op(
            utils.LayoutEnum.ROW_MAJOR, elem_ty_d=self.c_dtype, elem_ty_acc=cutlass.Float32)
        stmatrix = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), self.c_dtype)
        r2s = cute.make_tiled_copy_S(atom_r2s, cute.make_tiled_copy_C_atom(stmatrix, tiled_mma))
        thr = r2s.get_slice(tidx - self.threads_per_wg)
        tRS_sD = thr.partition_D(sC)
        rD_shape = cute.shape(thr.partition_S(sC))[:3]
        return (r2s, tRS_sD, r2s.retile(acc), cute.make_rmem_tensor(rD_shape, cutlass.Float32),
                cute.make_rmem_tensor(rD_shape, self.c_dtype))

    @cute.jit
    def _store_tile(self, warp, tma_c, sC, gC_tile, store, store_pipe, tiles_done):
        r2s, tRS_sD, tRS_acc, rD, rD_out = store
        gC_epi = cute.zipped_divide(gC_tile, self.epi_tile)
        bSG_sD, bSG_gD = cute.nvgpu.cpasync.tma_partition(
            tma_c, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2), gC_epi)
        n_epi = cute.size(gC_epi, mode=[1])
        epi_shape = gC_epi.shape[1]
        epi_order = cute.make_layout(epi_shape, stride=(epi_shape[1], 1))
        for e in cutlass.range_constexpr(n_epi):
            for v in cutlass.range_constexpr(cute.size(rD)):
                rD[v] = tRS_acc[e * cute.size(rD) + v]
            rD_out.store(rD.load().to(self.c_dtype))
            buf = (tiles_done * n_epi + e) % self.epi_stage
            cute.copy(r2s, rD_out, tRS_sD[(None, None, None, buf)])
            # Make the smem writes visible to the TMA (async proxy) before the store.
            cute.arch.fence_proxy("async.shared", space="cta")
            self.epi_barrier.arrive_and_wait()
            if warp == self.epi_store_warp:
                cute.copy(tma_c, bSG_sD[(None, buf)], bSG_gD[(None, epi_order.get_hier_coord(e))])
                store_pipe.producer_commit()
                store_pipe.producer_acquire()
            self.epi_barrier.arrive_and_wait()


def acc_coords(tiled_mma, mma_thread, cC):
    """Coordinates of this thread's accumulator registers in `cC` (an identity tensor tiled like
    the output), register for register in the order of the accumulator fragment.

    Must be sliced with the thread's own index among the consumer threads. `thr_mma` in the
    kernel is sliced per *warp group* (thread 0 / 128 of each): right for partition_A/B (wgmma
    reads shared memory for the whole warp group) but partition_C with it gives every thread
    the coordinates of the warp group's thread 0 -- that was the epilogue-operand bug."""
    return tiled_mma.get_slice(mma_thread).partition_C(cC)


def _atom_type(atom) -> str:
    """The MLIR type of a TMA copy atom, e.g. `!cute_nvgpu.atom.non_exec_tiled_tma_load<sm_90,
    bf16, copy_bits = 131072, tma_gbasis = <"(64,128):(1@1,1@0)">, ...>`: the box CuTeDSL encodes
    into the descriptor. (Reads a private attribute: CuTeDSL has no public accessor.)"""
    return str(atom._trait.value.type)
