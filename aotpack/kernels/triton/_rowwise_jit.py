"""Device helpers shared by the row-wise reduction kernels (layernorm, softmax, reduce): which
rows a program owns, and masked f32 loads / casting stores of a [ROWS, BLOCK_C] column chunk.
Triton inlines @jit helpers, so these cost nothing over writing the code in each kernel."""
import triton
import triton.language as tl


@triton.jit
def row_block(n_rows, ROWS: tl.constexpr):
    """This program's rows (as int64, for addressing) and the mask of those that exist."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    return rows.to(tl.int64), rows < n_rows


@triton.jit
def load_chunk(x_row, x_stride_c, row_mask, c, n_cols):
    """x[rows, c] as f32 (0 outside the view) and the mask of the elements inside it."""
    mask = row_mask[:, None] & (c[None, :] < n_cols)
    x = tl.load(x_row + c[None, :] * x_stride_c, mask=mask, other=0.0).to(tl.float32)
    return x, mask


@triton.jit
def load_vector(ptr, c, stride, n_cols):
    """A per-column vector (weight, bias) at columns c as f32, 0 past n_cols."""
    return tl.load(ptr + c * stride, mask=c < n_cols, other=0.0).to(tl.float32)


@triton.jit
def store_chunk(out_row, out_stride_c, c, y, mask):
    """out[rows, c] = y, cast to the output's element type."""
    tl.store(out_row + c[None, :] * out_stride_c, y.to(out_row.dtype.element_ty), mask=mask)
