// The `native` binding on the GPU (native_ops.h): cuBLASLt GEMMs in the column-major convention, around the runtime's
// kernels of native_ops.cuh.
//
// Layouts: every h3c matrix is row-major. A row-major [R, C] matrix with row stride ld is, to cuBLASLt, the
// column-major C x R matrix with leading dimension ld. So a linear Y [M, N] = X [M, K] W [N, K]^T is the column-major
// Y^T (N x M, ld = the sums' row stride) = op(W) X^T with W stored K x N (ld K) and transposed, X^T stored K x M (ld
// = X's row stride); attention's S [rows, keys] = Q K^T is S^T = op(K) Q^T, and O [rows, d] = P V is O^T = V^T P^T.
#include "h3c/runtime/cuda/native_ops.h"

#include "h3c/runtime/cuda/cublaslt.h"
#include "h3c/runtime/cuda/runtime_kernel.h"
#include "h3c/support/error.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace h3c::rt::cuda_src {
extern const char *const detmath;
extern const char *const native_ops;
} // namespace h3c::rt::cuda_src

namespace h3c::runtime::cuda {

namespace plan = h3c::plan;
using h3c::DType;

namespace {

// cuBLASLt's workspace (the size NVIDIA recommends for Hopper).
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

int64_t roundUp(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// The alignment cuBLASLt may assume of a matrix: the largest power of two (at most 256) dividing its address and,
// batched, its batch stride in bytes.
uint32_t alignmentOf(CUdeviceptr p, int64_t strideBytes) {
  const uint64_t v = uint64_t(p) | 256u | uint64_t(strideBytes);
  return uint32_t(v & (~v + 1));
}

const void *asPtr(CUdeviceptr p) { return reinterpret_cast<const void *>(uintptr_t(p)); }

unsigned blocksFor(int64_t elements) { return unsigned(std::clamp<int64_t>((elements + 255) / 256, 1, 65536)); }

// The descriptors of one cublasLtMatmul, destroyed on every path out.
struct LtObjects {
  const CublasLtApi &lt;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtObjects() {
    if (pref) lt.cublasLtMatmulPreferenceDestroy(pref);
    for (cublasLtMatrixLayout_t l : {a, b, d})
      if (l) lt.cublasLtMatrixLayoutDestroy(l);
    if (desc) lt.cublasLtMatmulDescDestroy(desc);
  }
};

} // namespace

// One (batched) GEMM as cuBLASLt sees it, column-major: D [m x n] (F32) = op(A) [m x k] op(B) [k x n]. A is stored
// k x m when transposed, else m x k; B is stored n x k when transposed, else k x n. Strides in elements.
struct NativeOps::Gemm {
  int64_t m = 0, n = 0, k = 0;
  CUdeviceptr a = 0, b = 0, d = 0;
  bool transA = false, transB = false;
  int64_t lda = 0, ldb = 0, ldd = 0;
  int64_t strideA = 0, strideB = 0, strideD = 0;
  int batch = 1;
  DType ab = DType::BF16;  // A's and B's dtype
};

const std::vector<std::string> &nativeKernelEntries() {
  static const std::vector<std::string> entries = {"h3c_native_prologue", "h3c_native_linear_epilogue",
                                                   "h3c_native_softmax", "h3c_native_attention_out"};
  return entries;
}

const plan::Kernel &nativeKernel(const std::string &entry, const std::string &arch) {
  const auto &e = nativeKernelEntries();
  if (std::find(e.begin(), e.end(), entry) == e.end()) fail("native kernels", "no entry '{}'", entry);
  return runtimeKernel(entry, arch,
                       {"// h3c native-binding kernels (runtime/lib/cuda/native_ops.cuh)", h3c::rt::cuda_src::detmath,
                        h3c::rt::cuda_src::native_ops});
}

NativeOps::NativeOps(KernelRunner &runner, size_t attentionScratchBytes)
    : runner_(runner), attentionScratchBytes_(attentionScratchBytes) {}

NativeOps::~NativeOps() {
  if (handle_) lt_->cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

bool NativeOps::implements(plan::OpKind kind) {
  return kind == plan::OpKind::Linear || kind == plan::OpKind::AdalnTable || kind == plan::OpKind::QkvLinear ||
         kind == plan::OpKind::Attention;
}

bool NativeOps::implements(const plan::Op &op) {
  return implements(op.kind) && !(op.kind == plan::OpKind::QkvLinear && op.attrs.epilogue != plan::Epilogue::None);
}

void NativeOps::run(const NativeCall &c) {
  if (!c.op) fail("native", "no op");
  const plan::Op &op = *c.op;
  std::string node = op.nodes.size() > 1 ? "nodes " : "node ";  // what every message names
  for (size_t i = 0; i < op.nodes.size(); ++i) node += (i ? ", " : "") + op.nodes[i];
  node += " (bound native)";
  if (!implements(op)) fail(node, "a '{}' op has no native implementation", plan::opKindName(op.kind));
  if (!handle_) {
    std::string why;
    const CublasLtApi *lt = cublasLt(&why);
    if (!lt)
      fail(node, "needs cuBLASLt, which cannot be loaded ({}); install it, name it with H3C_CUBLASLT_LIBRARY, or "
                 "drop the native binding", why);
    device();  // the primary context is current: the handle belongs to it
    cublasLtHandle_t h = nullptr;
    checkLt(*lt, lt->cublasLtCreate(&h), node + ": cublasLtCreate");
    lt_ = lt;
    handle_ = h;
  }
  if (op.kind == plan::OpKind::Attention) attention(c, node);
  else linear(c, node);
}

void NativeOps::linear(const NativeCall &c, const std::string &node) {
  const plan::Op &op = *c.op;
  const plan::OpAttrs &at = op.attrs;
  const bool qkv = op.kind == plan::OpKind::QkvLinear, adaln = op.kind == plan::OpKind::AdalnTable;
  const plan::Epilogue epi = op.kind == plan::OpKind::Linear ? at.epilogue : plan::Epilogue::None;
  const size_t nw = qkv ? 3 : 1;
  if (at.swigluX) fail(node, "a linear that keeps the swiglu's x (a training plan's forward) has no native form");
  if (c.in.empty() || c.weights.size() != nw || c.out.size() != nw || c.biases.size() > (qkv ? 0u : 1u))
    fail(node, "expected {} weight(s), {} output(s) and at most {} bias, got {}, {} and {}", nw, nw, qkv ? 0 : 1,
         c.weights.size(), c.out.size(), c.biases.size());
  const NativeOperand &x = c.in[0];
  const DType wdt = c.weights[0].dtype;
  const int64_t M = x.rows, K = x.cols, N = c.weights[0].rows, nAll = N * int64_t(nw);
  if (wdt != DType::BF16 && wdt != DType::F32) fail(node, "weights are {}, expected BF16 or F32", dtypeName(wdt));
  if (x.dtype != DType::BF16 && x.dtype != DType::F32) fail(node, "the input is {}, expected BF16 or F32", dtypeName(x.dtype));
  for (const NativeOperand &w : c.weights)
    if (w.dtype != wdt || w.rows != N || w.cols != K)
      fail(node, "every weight must be [{}, {}] {} (the input has {} columns), got [{}, {}] {}", N, K,
           dtypeName(wdt), K, w.rows, w.cols, dtypeName(w.dtype));
  if (epi == plan::Epilogue::Swiglu && nAll % 2) fail(node, "swiglu needs an even weight row count, got {}", nAll);
  const int64_t outN = epi == plan::Epilogue::Swiglu ? nAll / 2 : N;
  // A plain linear's output is its [M, N] sums in any row shape of the same size (the AdaLN tables: [T, 18 H] sums are
  // the [3 T, 6 H] table); only it may be F32.
  const bool plain = epi == plan::Epilogue::None && !qkv;
  for (const NativeOperand &o : c.out)
    if ((plain ? o.rows * o.cols != M * outN : o.rows != M || o.cols != outN) ||
        !(o.dtype == DType::BF16 || (plain && o.dtype == DType::F32)))
      fail(node, "output must be [{}, {}] {}, got [{}, {}] {}", M, outN, plain ? "BF16 or F32" : "BF16", o.rows,
           o.cols, dtypeName(o.dtype));
  const NativeOperand *bias = c.biases.empty() ? nullptr : &c.biases[0];
  if (bias && (bias->rows * bias->cols != nAll || (bias->dtype != DType::BF16 && bias->dtype != DType::F32)))
    fail(node, "bias must hold {} BF16 or F32 values, got {} {}", nAll, bias->rows * bias->cols,
         dtypeName(bias->dtype));
  // The epilogue's other operands (residual at 1; gate_residual: table, ts_index and, per tag, tags at 2, 3, 4).
  const bool residual = epi == plan::Epilogue::Residual || epi == plan::Epilogue::GateResidual;
  const bool gate = epi == plan::Epilogue::GateResidual;
  const bool perTag = at.rowIndex == plan::RowIndex::Adaln;
  if (c.in.size() < size_t(gate ? (perTag ? 5 : 4) : residual ? 2 : 1))
    fail(node, "the {} epilogue misses operands ({} inputs)", plan::epilogueName(epi), c.in.size());
  if (residual && (c.in[1].rows != M || c.in[1].cols != N || c.in[1].dtype != DType::BF16))
    fail(node, "the residual must be [{}, {}] BF16", M, N);
  int64_t metaRows = 1;
  if (gate) {
    const NativeOperand &table = c.in[2], &ts = c.in[3];
    if (table.dtype != DType::BF16 || table.cols != at.numChunks * N || at.chunk < 0 || at.chunk >= at.numChunks)
      fail(node, "the AdaLN table must be BF16 with {} chunks of {} columns, chunk {} among them", at.numChunks, N,
           at.chunk);
    metaRows = ts.rows;
    if (ts.dtype != DType::I64 || metaRows < 1 || (perTag && (c.in[4].dtype != DType::I64 || c.in[4].rows != metaRows)))
      fail(node, "ts_index (and tags) must be I64 rows of metadata");
  }
  if (M == 0) return;  // a request without rows in this domain
  const CUstream stream = c.stream;

  // A: the input in the weight dtype (converted, and silu first for the AdaLN tables).
  CUdeviceptr xa = x.ptr;
  int64_t ldx = K;
  if (adaln || x.dtype != wdt) {
    const int64_t es = int64_t(dtypeSize(wdt));
    ldx = roundUp(K, 16 / es);  // 16-byte rows
    xa = scratch(Scratch::Input, size_t(M * ldx * es), stream);
    long long rows = M, cols = K, ld = ldx;
    int xBf16 = x.dtype == DType::BF16, silu = adaln, toBf16 = wdt == DType::BF16;
    CUdeviceptr src = x.ptr;
    void *params[] = {&src, &xa, &rows, &cols, &ld, &xBf16, &silu, &toBf16};
    launch("h3c_native_prologue", blocksFor(M * K), params, stream, node + ": input conversion");
  }
  // The F32 sums [M, nAll] (16-byte rows), one GEMM per weight (qkv: Wq, Wk, Wv side by side).
  const int64_t ldAcc = roundUp(nAll, 4);
  const CUdeviceptr acc = scratch(Scratch::Sums, size_t(M * ldAcc * 4), stream);
  for (size_t i = 0; i < nw; ++i) {
    Gemm g;
    g.m = N;
    g.n = M;
    g.k = K;
    g.a = c.weights[i].ptr;  // W [N, K] row-major = K x N column-major, transposed
    g.transA = true;
    g.lda = K;
    g.b = xa;  // X [M, K] row-major = K x M column-major
    g.ldb = ldx;
    g.d = acc + CUdeviceptr(int64_t(i) * N * 4);  // Y^T: N x M column-major, ld ldAcc
    g.ldd = ldAcc;
    g.ab = wdt;
    matmul(g, stream, node + ": GEMM" + (i < op.weights.size() ? " of " + op.weights[i] : std::string()));
  }
  int epiArg = 0;  // H3N_EPI_* of native_ops.cuh
  switch (epi) {
  case plan::Epilogue::None: epiArg = qkv ? 4 : 0; break;
  case plan::Epilogue::Residual: epiArg = 1; break;
  case plan::Epilogue::GateResidual: epiArg = 2; break;
  case plan::Epilogue::Swiglu: epiArg = 3; break;
  case plan::Epilogue::QkNormRope: fail(node, "qkv_linear's qk_norm_rope epilogue has no native form");
  }
  long long rows = M, nAllArg = nAll, ldAccArg = ldAcc, metaRowsArg = metaRows, tableWidth = at.numChunks * N,
            chunk = at.chunk;
  CUdeviceptr accArg = acc, biasPtr = bias ? bias->ptr : 0, y0 = c.out[0].ptr, y1 = nw > 1 ? c.out[1].ptr : 0,
              y2 = nw > 2 ? c.out[2].ptr : 0, res = residual ? c.in[1].ptr : 0, table = gate ? c.in[2].ptr : 0,
              ts = gate ? c.in[3].ptr : 0, tags = gate && perTag ? c.in[4].ptr : 0;
  int biasBf16 = bias && bias->dtype == DType::BF16, roundLinear = wdt == DType::BF16,
      outBf16 = c.out[0].dtype == DType::BF16, perTagArg = perTag;
  void *params[] = {&accArg, &rows,  &nAllArg, &ldAccArg, &epiArg,   &biasPtr,    &biasBf16,
                    &roundLinear, &y0, &y1,    &y2,       &outBf16,  &res,        &table,
                    &ts,      &tags,  &metaRowsArg, &perTagArg, &tableWidth, &chunk};
  launch("h3c_native_linear_epilogue", blocksFor(M * nAll), params, stream, node + ": epilogue");
}

void NativeOps::attention(const NativeCall &c, const std::string &node) {
  const plan::OpAttrs &at = c.op->attrs;
  if (c.in.size() < 3 || c.out.empty()) fail(node, "attention reads q, k, v and writes one output");
  const NativeOperand &q = c.in[0], &k = c.in[1], &v = c.in[2], &o = c.out[0];
  const int64_t heads = at.heads, d = at.headDim, ld = heads * d, B = c.batch;
  for (const NativeOperand *x : {&q, &k, &v, &o})
    if (x->dtype != DType::BF16 || x->cols != ld)
      fail(node, "q, k, v and the output must be BF16 with {} heads x {} columns", heads, d);
  if (heads < 1 || d < 1 || B < 1 || q.rows % B || k.rows % B || v.rows != k.rows || o.rows != q.rows)
    fail(node, "q [{} rows], k [{}], v [{}], output [{}] do not split into {} batch items", q.rows, k.rows, v.rows,
         o.rows, B);
  const int64_t n = q.rows / B, nk = k.rows / B;
  if (n == 0) return;
  if (nk == 0) fail(node, "{} query rows attend no key", n);
  const CUstream stream = c.stream;
  // Chunks of query rows and heads whose scores (F32), probabilities (bf16) and sums (F32) fit the scratch bound.
  const int64_t ldS = roundUp(nk, 8);  // 16-byte rows of probabilities
  const int64_t perRow = ldS * (4 + 2) + d * 4;
  const int64_t budget = int64_t(attentionScratchBytes_);
  const int64_t rowsPerChunk = std::clamp<int64_t>(budget / perRow, 1, n);
  const int64_t headsPerChunk = std::clamp<int64_t>(budget / (perRow * rowsPerChunk), 1, heads);
  const int64_t chunkRows = headsPerChunk * rowsPerChunk;
  const CUdeviceptr S = scratch(Scratch::Scores, size_t(chunkRows * ldS * 4), stream);
  const CUdeviceptr P = scratch(Scratch::Probs, size_t(chunkRows * ldS * 2), stream);
  const CUdeviceptr O = scratch(Scratch::Out, size_t(chunkRows * d * 4), stream);
  float scale = float(1.0 / std::sqrt(double(d)));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r0 = 0; r0 < n; r0 += rowsPerChunk)
      for (int64_t h0 = 0; h0 < heads; h0 += headsPerChunk) {
        const int64_t rn = std::min(rowsPerChunk, n - r0), hc = std::min(headsPerChunk, heads - h0);
        const std::string where = node + ": item " + std::to_string(b) + ", rows " + std::to_string(r0) + "+" +
                                  std::to_string(rn) + ", heads " + std::to_string(h0) + "+" + std::to_string(hc);
        const CUdeviceptr qb = q.ptr + CUdeviceptr(((b * n + r0) * ld + h0 * d) * 2);
        const CUdeviceptr kb = k.ptr + CUdeviceptr((b * nk * ld + h0 * d) * 2);
        const CUdeviceptr vb = v.ptr + CUdeviceptr((b * nk * ld + h0 * d) * 2);
        // Per head: S^T (nk x rn, ld ldS) = op(K) Q^T; K stored d x nk (ld ld), transposed; Q^T stored d x rn.
        Gemm s;
        s.m = nk;
        s.n = rn;
        s.k = d;
        s.a = kb;
        s.transA = true;
        s.lda = ld;
        s.strideA = d;
        s.b = qb;
        s.ldb = ld;
        s.strideB = d;
        s.d = S;
        s.ldd = ldS;
        s.strideD = rn * ldS;
        s.batch = int(hc);
        matmul(s, stream, where + ": S = Q K^T");
        long long rowsArg = hc * rn, nkArg = nk, ldArg = ldS;
        CUdeviceptr sArg = S, pArg = P;
        void *sp[] = {&sArg, &pArg, &rowsArg, &nkArg, &ldArg, &scale};
        launch("h3c_native_softmax", unsigned(std::min<int64_t>(hc * rn, 65536)), sp, stream, where + ": softmax");
        // Per head: O^T (d x rn, ld d) = V^T P^T; V^T stored d x nk (ld ld); P^T stored nk x rn (ld ldS).
        Gemm pv;
        pv.m = d;
        pv.n = rn;
        pv.k = nk;
        pv.a = vb;
        pv.lda = ld;
        pv.strideA = d;
        pv.b = P;
        pv.ldb = ldS;
        pv.strideB = rn * ldS;
        pv.d = O;
        pv.ldd = d;
        pv.strideD = rn * d;
        pv.batch = int(hc);
        matmul(pv, stream, where + ": O = P V");
        long long hArg = hc, rnArg = rn, dArg = d, ldOut = ld, h0Arg = h0, rowBase = b * n + r0;
        CUdeviceptr oArg = O, out = o.ptr;
        void *op[] = {&oArg, &out, &hArg, &rnArg, &dArg, &ldOut, &h0Arg, &rowBase};
        launch("h3c_native_attention_out", blocksFor(hc * rn * d), op, stream, where + ": output");
      }
}

void NativeOps::matmul(const Gemm &g, CUstream stream, const std::string &what) {
  const CublasLtApi &lt = *lt_;
  LtObjects o{lt};
  const cudaDataType ab = g.ab == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
  const int64_t abBytes = int64_t(dtypeSize(g.ab));
  checkLt(lt, lt.cublasLtMatmulDescCreate(&o.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), what + ": matmul descriptor");
  const cublasOperation_t ta = g.transA ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  checkLt(lt, lt.cublasLtMatmulDescSetAttribute(o.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), what + ": TRANSA");
  checkLt(lt, lt.cublasLtMatmulDescSetAttribute(o.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), what + ": TRANSB");
  auto layout = [&](cublasLtMatrixLayout_t &l, cudaDataType type, int64_t rows, int64_t cols, int64_t ld,
                    int64_t stride, const char *name) {
    if (rows < 1 || cols < 1 || ld < rows)
      fail(what, "matrix {} is {} x {} with leading dimension {}", name, rows, cols, ld);
    checkLt(lt, lt.cublasLtMatrixLayoutCreate(&l, type, uint64_t(rows), uint64_t(cols), ld),
            what + ": layout of " + name);
    if (g.batch > 1) {
      const int32_t count = g.batch;
      const int64_t offset = stride;
      checkLt(lt, lt.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
              what + ": batch count of " + name);
      checkLt(lt, lt.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &offset,
                                                      sizeof offset),
              what + ": batch stride of " + name);
    }
  };
  layout(o.a, ab, g.transA ? g.k : g.m, g.transA ? g.m : g.k, g.lda, g.strideA, "A");
  layout(o.b, ab, g.transB ? g.n : g.k, g.transB ? g.k : g.n, g.ldb, g.strideB, "B");
  layout(o.d, CUDA_R_32F, g.m, g.n, g.ldd, g.strideD, "D");  // also C (beta = 0, C = D)
  checkLt(lt, lt.cublasLtMatmulPreferenceCreate(&o.pref), what + ": preference");
  const uint64_t workspace = kWorkspaceBytes;
  checkLt(lt, lt.cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                      sizeof workspace),
          what + ": workspace preference");
  const int64_t batched = g.batch > 1 ? 1 : 0;
  const uint32_t alignA = alignmentOf(g.a, batched * g.strideA * abBytes),
                 alignB = alignmentOf(g.b, batched * g.strideB * abBytes),
                 alignD = alignmentOf(g.d, batched * g.strideD * 4);
  for (auto [attr, value] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignA},
                             std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignB},
                             std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignD},
                             std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignD}})
    checkLt(lt, lt.cublasLtMatmulPreferenceSetAttribute(o.pref, attr, &value, sizeof value),
            what + ": alignment preference");
  const cublasLtHandle_t handle = static_cast<cublasLtHandle_t>(handle_);
  cublasLtMatmulHeuristicResult_t h{};
  int found = 0;
  checkLt(lt, lt.cublasLtMatmulAlgoGetHeuristic(handle, o.desc, o.a, o.b, o.d, o.d, o.pref, 1, &h, &found),
          what + ": algorithm heuristic");
  if (found < 1 || h.state != CUBLAS_STATUS_SUCCESS)
    fail(what, "cuBLASLt offers no algorithm for D ({} x {}, F32) = op(A) op(B), k = {}, {} inputs, batch {}, "
               "alignments {}/{}/{} bytes", g.m, g.n, g.k, dtypeName(g.ab), g.batch, alignA, alignB, alignD);
  if (h.workspaceSize > kWorkspaceBytes)
    fail(what, "cuBLASLt's algorithm wants {} bytes of workspace, more than the {} allowed", h.workspaceSize,
         kWorkspaceBytes);
  const CUdeviceptr ws = scratch(Scratch::Workspace, kWorkspaceBytes, stream);
  const float alpha = 1.0f, beta = 0.0f;
  checkLt(lt, lt.cublasLtMatmul(handle, o.desc, &alpha, asPtr(g.a), o.a, asPtr(g.b), o.b, &beta, asPtr(g.d), o.d,
                                const_cast<void *>(asPtr(g.d)), o.d, &h.algo, const_cast<void *>(asPtr(ws)),
                                kWorkspaceBytes, stream),
          what + ": cublasLtMatmul");
}

CUdeviceptr NativeOps::scratch(Scratch which, size_t bytes, CUstream stream) {
  DeviceBuffer &b = scratch_[which];
  if (b.bytes() < bytes) {
    // Work queued before may still read the old buffer.
    check(driver().cuStreamSynchronize(stream), "native scratch: waiting before growing it");
    b = DeviceBuffer();
    b = DeviceBuffer(std::max<size_t>(bytes, 256));
  }
  return b.get();
}

const LoadedKernel &NativeOps::kernel(const std::string &entry) {
  return runner_.load(nativeKernel(entry, runner_.arch()));
}

void NativeOps::launch(const std::string &entry, unsigned blocks, void **params, CUstream stream,
                       const std::string &what) {
  check(driver().cuLaunchKernel(kernel(entry).fn, blocks, 1, 1, 256, 1, 1, 0, stream, params, nullptr), what);
}

} // namespace h3c::runtime::cuda
