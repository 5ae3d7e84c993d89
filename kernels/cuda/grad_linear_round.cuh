// Phase 0 of both tensor-core forms of a bf16 linear's gradients (grad_linear_mma.cuh, grad_linear_sm90.cuh,
// docs/contract.md section 14): g (F32 [rows][N]) rounded to bf16 into the scratch `gb` ([rows][N], the GEMM's
// operand bf(g)), and with GL_DW && GR_BIAS the bias's gradient (row_units over the items' rows of g, the add chains
// of grad_common.cuh) in grid row 1. N is a multiple of 8.
// Defined by the emitter: GL_ENTRY H3C_PARAMS GL_DW GR_N GR_BIAS. Parameters: g, gb; dX: rows; dW: items,
// item_rows (dbias with GR_BIAS). 8 elements of gb per thread and step.
extern "C" __global__ void __launch_bounds__(256) GL_ENTRY(H3C_PARAMS) {
  h3c_grid_dependency_wait();  // (common.cuh) before any global memory access
#if GL_DW
  const long long nRows = items * item_rows;
#else
  const long long nRows = rows;
#endif
  if (blockIdx.y == 0) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < nRows * (GR_N / 8);
         i += (long long)gridDim.x * blockDim.x) {
      const float4 lo = ((const float4 *)g)[2 * i], hi = ((const float4 *)g)[2 * i + 1];
      uint4 q;
      q.x = pack_bf2(lo.x, lo.y);
      q.y = pack_bf2(lo.z, lo.w);
      q.z = pack_bf2(hi.x, hi.y);
      q.w = pack_bf2(hi.z, hi.w);
      ((uint4 *)gb)[i] = q;
    }
  }
#if GL_DW && GR_BIAS
  if (blockIdx.y == 1) {
    for (long long n = (long long)blockIdx.x * blockDim.x + threadIdx.x; n < GR_N; n += (long long)gridDim.x * blockDim.x)
      ((float *)dbias)[n] = gr_fold_units(items, item_rows, [&](long long u, long long u1) {
        float acc = 0.f;
        for (long long r = u; r < u1; ++r) acc = __fadd_rn(acc, ((const float *)g)[r * GR_N + n]);
        return acc;
      });
  }
#endif
}

