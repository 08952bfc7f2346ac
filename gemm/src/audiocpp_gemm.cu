// audiocpp_gemm over cuBLASLt / hipBLASLt (see ../README.md). Compiled as CUDA, or as HIP
// with AUDIOCPP_GEMM_HIP defined; every vendor name goes through vendor.h.
#include "vendor.h"

#include "audiocpp_gemm.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace {

std::atomic<unsigned long long> g_counters[AUDIOCPP_GEMM_COUNTER_COUNT];
// -1: not yet read from AUDIOCPP_GEMM_FORCE_FALLBACK.
std::atomic<int> g_force_fallback{-1};

void count(audiocpp_gemm_counter c, unsigned long long n = 1) {
    g_counters[c].fetch_add(n, std::memory_order_relaxed);
}

const char *const kCounterNames[AUDIOCPP_GEMM_COUNTER_COUNT] = {
    "sgemm", "gemm_ex", "gemm_strided_batched_ex", "gemm_batched_ex", "sgemm_strided_batched", "sgemm_batched",
    "strsm_batched", "route_lt", "route_array_readback", "route_fallback_kernel", "route_trsm_kernel"};

void print_counters() {
    std::fprintf(stderr, "audiocpp_gemm:");
    for (int i = 0; i < AUDIOCPP_GEMM_COUNTER_COUNT; ++i) {
        std::fprintf(stderr, " %s=%llu", kCounterNames[i], g_counters[i].load());
    }
    std::fprintf(stderr, "\n");
}

// AUDIOCPP_GEMM_STATS=1 prints the counters to stderr when the process exits.
void register_stats_once() {
    static std::once_flag once;
    std::call_once(once, [] {
        const char *env = std::getenv("AUDIOCPP_GEMM_STATS");
        if (env != nullptr && env[0] == '1') {
            std::atexit(print_counters);
        }
    });
}

bool force_fallback() {
    int v = g_force_fallback.load();
    if (v < 0) {
        const char *env = std::getenv("AUDIOCPP_GEMM_FORCE_FALLBACK");
        int expected = -1;
        g_force_fallback.compare_exchange_strong(expected, (env != nullptr && env[0] == '1') ? 1 : 0);
        v = g_force_fallback.load();
    }
    return v == 1;
}

// ggml gives cuBLAS 32 MiB on Hopper and sets none on HIP; the Lt heuristic is told this much.
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

size_t type_size(audiocpp_gemm_type t) {
    switch (t) {
    case AUDIOCPP_GEMM_F32: return 4;
    case AUDIOCPP_GEMM_F16:
    case AUDIOCPP_GEMM_BF16: return 2;
    default: return 0;
    }
}

agLtDataType_t lt_type(audiocpp_gemm_type t) {
    switch (t) {
    case AUDIOCPP_GEMM_F16: return AG_LT_R_16F;
    case AUDIOCPP_GEMM_BF16: return AG_LT_R_16BF;
    default: return AG_LT_R_32F;
    }
}

/// One product (or a strided batch of them), column-major, f32 scale factors.
struct Product {
    audiocpp_gemm_op op_a, op_b;
    long long m, n, k;
    float alpha, beta;
    audiocpp_gemm_type ta, tb, tc;
    const void *a;
    long long lda, sa;
    const void *b;
    long long ldb, sb;
    void *c;
    long long ldc, sc;
    long long batch;
};

/// What selects an Lt algorithm: shapes, types, strides and (cuBLASLt) operand alignment.
struct Key {
    long long v[17];
    bool operator==(const Key &o) const { return std::memcmp(v, o.v, sizeof(v)) == 0; }
};

struct KeyHash {
    size_t operator()(const Key &k) const {
        uint64_t h = 1469598103934665603ull;
        const unsigned char *p = reinterpret_cast<const unsigned char *>(k.v);
        for (size_t i = 0; i < sizeof(k.v); ++i) {
            h = (h ^ p[i]) * 1099511628211ull;
        }
        return size_t(h);
    }
};

struct Cached {
    bool ok;
    agLtMatmulAlgo_t algo;
};

// Largest power of two (at most 256) dividing every value: the alignment cuBLASLt may assume.
uint32_t alignment_of(std::initializer_list<unsigned long long> values) {
    uint32_t a = 256;
    for (unsigned long long v : values) {
        while (a > 1 && (v % a) != 0) {
            a >>= 1;
        }
    }
    return a;
}

} // namespace

struct audiocpp_gemm_context {
    agLtHandle_t lt = nullptr;
    agStream_t stream = nullptr;
    void *own_workspace = nullptr;
    void *workspace = nullptr;
    size_t workspace_bytes = 0;
    std::mutex mutex;
    std::unordered_map<Key, Cached, KeyHash> cache;
};

namespace {

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(ag_half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(ag_bf16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ ag_half from_f<ag_half>(float x) { return __float2half(x); }
template <> __device__ __forceinline__ ag_bf16 from_f<ag_bf16>(float x) { return __float2bfloat16(x); }

// The plain GEMM for what the Lt library refuses: one thread per element of C, f32
// accumulation. Operands come either as base + z * stride or from device pointer arrays.
template <typename TA, typename TB, typename TC>
__global__ void k_gemm_fallback(int op_a, int op_b, long long m, long long n, long long k, float alpha, float beta,
                                const TA *a, long long lda, long long sa, const void *const *a_arr, const TB *b,
                                long long ldb, long long sb, const void *const *b_arr, TC *c, long long ldc,
                                long long sc, void *const *c_arr, long long batch) {
    for (long long z = blockIdx.z; z < batch; z += gridDim.z) {
        const TA *A = a_arr ? static_cast<const TA *>(a_arr[z]) : a + z * sa;
        const TB *B = b_arr ? static_cast<const TB *>(b_arr[z]) : b + z * sb;
        TC *C = c_arr ? static_cast<TC *>(c_arr[z]) : c + z * sc;
        for (long long j = blockIdx.y * (long long)blockDim.y + threadIdx.y; j < n;
             j += (long long)gridDim.y * blockDim.y) {
            for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < m;
                 i += (long long)gridDim.x * blockDim.x) {
                float acc = 0.0f;
                for (long long l = 0; l < k; ++l) {
                    const float x = to_f(op_a ? A[l + i * lda] : A[i + l * lda]);
                    const float y = to_f(op_b ? B[j + l * ldb] : B[l + j * ldb]);
                    acc += x * y;
                }
                float r = alpha * acc;
                if (beta != 0.0f) {
                    r += beta * to_f(C[i + j * ldc]);
                }
                C[i + j * ldc] = from_f<TC>(r);
            }
        }
    }
}

// X * op(A) = alpha * B for the right side, op N, in place of B: one thread per row of X.
__global__ void k_trsm_right(long long m, long long n, float alpha, const float *const *a_arr, long long lda,
                             float *const *b_arr, long long ldb, long long batch, int lower, int unit) {
    for (long long z = blockIdx.y; z < batch; z += gridDim.y) {
        const float *A = a_arr[z];
        float *X = b_arr[z];
        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < m;
             i += (long long)gridDim.x * blockDim.x) {
            for (long long t = 0; t < n; ++t) {
                const long long j = lower ? n - 1 - t : t;
                float s = alpha * X[i + j * ldb];
                if (lower) {
                    for (long long l = j + 1; l < n; ++l) {
                        s -= X[i + l * ldb] * A[l + j * lda];
                    }
                } else {
                    for (long long l = 0; l < j; ++l) {
                        s -= X[i + l * ldb] * A[l + j * lda];
                    }
                }
                X[i + j * ldb] = unit ? s : s / A[j + j * lda];
            }
        }
    }
}

unsigned int grid_dim(long long items, long long per_block, long long max_blocks) {
    long long blocks = (items + per_block - 1) / per_block;
    if (blocks < 1) {
        blocks = 1;
    }
    return (unsigned int)(blocks < max_blocks ? blocks : max_blocks);
}

template <typename TA, typename TB, typename TC>
audiocpp_gemm_status launch_fallback(audiocpp_gemm_context *h, const Product &p, const void *const *a_arr,
                                     const void *const *b_arr, void *const *c_arr) {
    const dim3 block(16, 16, 1);
    const dim3 grid(grid_dim(p.m, 16, 1 << 20), grid_dim(p.n, 16, 65535), grid_dim(p.batch, 1, 65535));
    k_gemm_fallback<TA, TB, TC><<<grid, block, 0, h->stream>>>(
        p.op_a == AUDIOCPP_GEMM_OP_T, p.op_b == AUDIOCPP_GEMM_OP_T, p.m, p.n, p.k, p.alpha, p.beta,
        static_cast<const TA *>(p.a), p.lda, p.sa, a_arr, static_cast<const TB *>(p.b), p.ldb, p.sb, b_arr,
        static_cast<TC *>(p.c), p.ldc, p.sc, c_arr, p.batch);
    return agGetLastError() == agSuccess ? AUDIOCPP_GEMM_OK : AUDIOCPP_GEMM_EXECUTION_FAILED;
}

audiocpp_gemm_status run_fallback(audiocpp_gemm_context *h, const Product &p, const void *const *a_arr = nullptr,
                                  const void *const *b_arr = nullptr, void *const *c_arr = nullptr) {
    count(AUDIOCPP_GEMM_ROUTE_FALLBACK_KERNEL);
    const auto F32 = AUDIOCPP_GEMM_F32, F16 = AUDIOCPP_GEMM_F16, BF16 = AUDIOCPP_GEMM_BF16;
    if (p.ta == F32 && p.tb == F32 && p.tc == F32) {
        return launch_fallback<float, float, float>(h, p, a_arr, b_arr, c_arr);
    }
    if (p.ta == F16 && p.tb == F16 && p.tc == F16) {
        return launch_fallback<ag_half, ag_half, ag_half>(h, p, a_arr, b_arr, c_arr);
    }
    if (p.ta == F16 && p.tb == F16 && p.tc == F32) {
        return launch_fallback<ag_half, ag_half, float>(h, p, a_arr, b_arr, c_arr);
    }
    if (p.ta == BF16 && p.tb == BF16 && p.tc == BF16) {
        return launch_fallback<ag_bf16, ag_bf16, ag_bf16>(h, p, a_arr, b_arr, c_arr);
    }
    if (p.ta == BF16 && p.tb == BF16 && p.tc == F32) {
        return launch_fallback<ag_bf16, ag_bf16, float>(h, p, a_arr, b_arr, c_arr);
    }
    return AUDIOCPP_GEMM_NOT_SUPPORTED;
}

bool make_layout(agLtMatrixLayout_t *out, audiocpp_gemm_type t, long long rows, long long cols, long long ld,
                 long long batch, long long stride) {
    if (agLtMatrixLayoutCreate(out, lt_type(t), (uint64_t)rows, (uint64_t)cols, (int64_t)ld) != AG_LT_SUCCESS) {
        *out = nullptr;
        return false;
    }
    if (batch > 1) {
        const int32_t count32 = (int32_t)batch;
        const int64_t stride64 = (int64_t)stride;
        if (agLtMatrixLayoutSetAttribute(*out, AG_LT_LAYOUT_BATCH_COUNT, &count32, sizeof(count32)) !=
                AG_LT_SUCCESS ||
            agLtMatrixLayoutSetAttribute(*out, AG_LT_LAYOUT_STRIDED_BATCH_OFFSET, &stride64, sizeof(stride64)) !=
                AG_LT_SUCCESS) {
            return false;
        }
    }
    return true;
}

// Looks the algorithm up (asking the heuristic once per key); false when Lt has none.
bool find_algo(audiocpp_gemm_context *h, const Product &p, agLtMatmulDesc_t desc, agLtMatrixLayout_t la,
               agLtMatrixLayout_t lb, agLtMatrixLayout_t lc, agLtMatmulAlgo_t *algo) {
    const uint32_t align_a = alignment_of({(unsigned long long)(uintptr_t)p.a,
                                           (unsigned long long)(p.sa * (long long)type_size(p.ta))});
    const uint32_t align_b = alignment_of({(unsigned long long)(uintptr_t)p.b,
                                           (unsigned long long)(p.sb * (long long)type_size(p.tb))});
    const uint32_t align_c = alignment_of({(unsigned long long)(uintptr_t)p.c,
                                           (unsigned long long)(p.sc * (long long)type_size(p.tc))});
    Key key;
    std::memset(&key, 0, sizeof(key));
    const long long fields[17] = {p.op_a, p.op_b, p.ta,  p.tb,  p.tc,    p.m,     p.n,     p.k,      p.lda,
                                  p.ldb,  p.ldc,  p.sa,  p.sb,  p.sc,    p.batch, align_a, align_b * 1000 + align_c};
    std::memcpy(key.v, fields, sizeof(fields));

    std::lock_guard<std::mutex> lock(h->mutex);
    auto it = h->cache.find(key);
    if (it != h->cache.end()) {
        *algo = it->second.algo;
        return it->second.ok;
    }
    Cached entry;
    std::memset(&entry, 0, sizeof(entry));
    entry.ok = false;
    agLtMatmulPreference_t pref = nullptr;
    if (agLtMatmulPreferenceCreate(&pref) == AG_LT_SUCCESS) {
        const uint64_t ws = h->workspace_bytes;
        bool prefs_ok =
            agLtMatmulPreferenceSetAttribute(pref, AG_LT_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)) == AG_LT_SUCCESS;
#if AG_LT_HAS_ALIGNMENT_PREFS
        prefs_ok = prefs_ok &&
                   agLtMatmulPreferenceSetAttribute(pref, AG_LT_PREF_MIN_ALIGNMENT_A, &align_a, sizeof(align_a)) ==
                       AG_LT_SUCCESS &&
                   agLtMatmulPreferenceSetAttribute(pref, AG_LT_PREF_MIN_ALIGNMENT_B, &align_b, sizeof(align_b)) ==
                       AG_LT_SUCCESS &&
                   agLtMatmulPreferenceSetAttribute(pref, AG_LT_PREF_MIN_ALIGNMENT_C, &align_c, sizeof(align_c)) ==
                       AG_LT_SUCCESS &&
                   agLtMatmulPreferenceSetAttribute(pref, AG_LT_PREF_MIN_ALIGNMENT_D, &align_c, sizeof(align_c)) ==
                       AG_LT_SUCCESS;
#endif
        agLtMatmulHeuristicResult_t result;
        std::memset(&result, 0, sizeof(result));
        int returned = 0;
        if (prefs_ok && agLtMatmulAlgoGetHeuristic(h->lt, desc, la, lb, lc, lc, pref, 1, &result, &returned) ==
                            AG_LT_SUCCESS &&
            returned > 0 && result.workspaceSize <= h->workspace_bytes) {
            entry.ok = true;
            entry.algo = result.algo;
        }
        agLtMatmulPreferenceDestroy(pref);
    }
    h->cache.emplace(key, entry);
    *algo = entry.algo;
    return entry.ok;
}

// One Lt matmul for a (strided batch of) product(s); false when Lt refuses it.
bool run_lt(audiocpp_gemm_context *h, const Product &p) {
    if (p.k == 0 || h->lt == nullptr) {
        return false;
    }
    agLtMatmulDesc_t desc = nullptr;
    agLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    bool ok = false;
    if (agLtMatmulDescCreate(&desc, AG_LT_COMPUTE_32F, AG_LT_R_32F) == AG_LT_SUCCESS) {
        const agLtOperation_t op_a = p.op_a == AUDIOCPP_GEMM_OP_T ? AG_LT_OP_T : AG_LT_OP_N;
        const agLtOperation_t op_b = p.op_b == AUDIOCPP_GEMM_OP_T ? AG_LT_OP_T : AG_LT_OP_N;
        const bool a_t = p.op_a == AUDIOCPP_GEMM_OP_T, b_t = p.op_b == AUDIOCPP_GEMM_OP_T;
        agLtMatmulAlgo_t algo;
        ok = agLtMatmulDescSetAttribute(desc, AG_LT_DESC_TRANSA, &op_a, sizeof(op_a)) == AG_LT_SUCCESS &&
             agLtMatmulDescSetAttribute(desc, AG_LT_DESC_TRANSB, &op_b, sizeof(op_b)) == AG_LT_SUCCESS &&
             make_layout(&la, p.ta, a_t ? p.k : p.m, a_t ? p.m : p.k, p.lda, p.batch, p.sa) &&
             make_layout(&lb, p.tb, b_t ? p.n : p.k, b_t ? p.k : p.n, p.ldb, p.batch, p.sb) &&
             make_layout(&lc, p.tc, p.m, p.n, p.ldc, p.batch, p.sc) && find_algo(h, p, desc, la, lb, lc, &algo) &&
             agLtMatmul(h->lt, desc, &p.alpha, p.a, la, p.b, lb, &p.beta, p.c, lc, p.c, lc, &algo, h->workspace,
                        h->workspace_bytes, h->stream) == AG_LT_SUCCESS;
    }
    if (la != nullptr) agLtMatrixLayoutDestroy(la);
    if (lb != nullptr) agLtMatrixLayoutDestroy(lb);
    if (lc != nullptr) agLtMatrixLayoutDestroy(lc);
    if (desc != nullptr) agLtMatmulDescDestroy(desc);
    if (ok) {
        count(AUDIOCPP_GEMM_ROUTE_LT);
    }
    return ok;
}

audiocpp_gemm_status run_strided(audiocpp_gemm_context *h, const Product &p) {
    if (p.m == 0 || p.n == 0 || p.batch == 0) {
        return AUDIOCPP_GEMM_OK;
    }
    if (force_fallback()) {
        return run_fallback(h, p);
    }
    if (p.batch > 1 && (p.sa == 0 || p.sb == 0)) {
        // A broadcast operand: one product at a time (a zero batch stride is not promised
        // to work in every Lt library).
        for (long long z = 0; z < p.batch; ++z) {
            Product q = p;
            q.a = static_cast<const char *>(p.a) + z * p.sa * (long long)type_size(p.ta);
            q.b = static_cast<const char *>(p.b) + z * p.sb * (long long)type_size(p.tb);
            q.c = static_cast<char *>(p.c) + z * p.sc * (long long)type_size(p.tc);
            q.batch = 1;
            if (!run_lt(h, q)) {
                const audiocpp_gemm_status s = run_fallback(h, q);
                if (s != AUDIOCPP_GEMM_OK) {
                    return s;
                }
            }
        }
        return AUDIOCPP_GEMM_OK;
    }
    if (run_lt(h, p)) {
        return AUDIOCPP_GEMM_OK;
    }
    return run_fallback(h, p);
}

// The byte step between entries z and z+1 of a pointer array, when it is a positive whole
// number of elements; 0 otherwise.
long long element_step(const std::vector<uintptr_t> &ptrs, long long z, size_t esize) {
    const long long d = (long long)ptrs[z + 1] - (long long)ptrs[z];
    return (d > 0 && d % (long long)esize == 0) ? d / (long long)esize : 0;
}

// Pointer arrays built on the device (ggml's broadcast and permuted products): read them
// back, split the batch into runs whose pointers advance by constant strides, and send
// each run to Lt as one strided product. During graph capture (no readback possible) or
// when forced, the fallback kernel reads the arrays on the device.
audiocpp_gemm_status run_arrays(audiocpp_gemm_context *h, Product p, const void *const *a_arr,
                                const void *const *b_arr, void *const *c_arr) {
    if (p.m == 0 || p.n == 0 || p.batch == 0) {
        return AUDIOCPP_GEMM_OK;
    }
    agStreamCaptureStatus capture = agStreamCaptureStatusNone;
    if (force_fallback() || agStreamIsCapturing(h->stream, &capture) != agSuccess ||
        capture != agStreamCaptureStatusNone) {
        return run_fallback(h, p, a_arr, b_arr, c_arr);
    }
    const long long batch = p.batch;
    std::vector<uintptr_t> pa(batch), pb(batch), pc(batch);
    const size_t bytes = sizeof(uintptr_t) * (size_t)batch;
    if (agMemcpyAsync(pa.data(), a_arr, bytes, agMemcpyDeviceToHost, h->stream) != agSuccess ||
        agMemcpyAsync(pb.data(), b_arr, bytes, agMemcpyDeviceToHost, h->stream) != agSuccess ||
        agMemcpyAsync(pc.data(), c_arr, bytes, agMemcpyDeviceToHost, h->stream) != agSuccess ||
        agStreamSynchronize(h->stream) != agSuccess) {
        return run_fallback(h, p, a_arr, b_arr, c_arr);
    }
    count(AUDIOCPP_GEMM_ROUTE_ARRAY_READBACK);
    const size_t ea = type_size(p.ta), eb = type_size(p.tb), ec = type_size(p.tc);
    long long z = 0;
    while (z < batch) {
        long long run = 1;
        long long sa = 0, sb = 0, sc = 0;
        if (z + 1 < batch) {
            sa = element_step(pa, z, ea);
            sb = element_step(pb, z, eb);
            sc = element_step(pc, z, ec);
            if (sa > 0 && sb > 0 && sc > 0) {
                run = 2;
                while (z + run < batch) {
                    const long long prev = z + run - 1;
                    if (element_step(pa, prev, ea) != sa || element_step(pb, prev, eb) != sb ||
                        element_step(pc, prev, ec) != sc) {
                        break;
                    }
                    ++run;
                }
            }
        }
        Product q = p;
        q.a = reinterpret_cast<const void *>(pa[z]);
        q.b = reinterpret_cast<const void *>(pb[z]);
        q.c = reinterpret_cast<void *>(pc[z]);
        q.sa = run > 1 ? sa : 0;
        q.sb = run > 1 ? sb : 0;
        q.sc = run > 1 ? sc : 0;
        q.batch = run;
        if (!run_lt(h, q)) {
            const audiocpp_gemm_status s = run_fallback(h, q);
            if (s != AUDIOCPP_GEMM_OK) {
                return s;
            }
        }
        z += run;
    }
    return AUDIOCPP_GEMM_OK;
}

bool valid_dims(audiocpp_gemm_handle h, audiocpp_gemm_op op_a, audiocpp_gemm_op op_b, int m, int n, int k,
                int batch) {
    return h != nullptr && op_a != AUDIOCPP_GEMM_OP_UNSUPPORTED && op_b != AUDIOCPP_GEMM_OP_UNSUPPORTED && m >= 0 &&
           n >= 0 && k >= 0 && batch >= 0;
}

float scale_value(const void *p, audiocpp_gemm_compute compute) {
    if (compute == AUDIOCPP_GEMM_COMPUTE_16F) {
        return __half2float(*static_cast<const ag_half *>(p));
    }
    return *static_cast<const float *>(p);
}

Product make_product(audiocpp_gemm_op op_a, audiocpp_gemm_op op_b, int m, int n, int k, float alpha, float beta,
                     audiocpp_gemm_type ta, const void *a, int lda, long long sa, audiocpp_gemm_type tb,
                     const void *b, int ldb, long long sb, audiocpp_gemm_type tc, void *c, int ldc, long long sc,
                     int batch) {
    Product p;
    p.op_a = op_a;
    p.op_b = op_b;
    p.m = m;
    p.n = n;
    p.k = k;
    p.alpha = alpha;
    p.beta = beta;
    p.ta = ta;
    p.tb = tb;
    p.tc = tc;
    p.a = a;
    p.lda = lda;
    p.sa = sa;
    p.b = b;
    p.ldb = ldb;
    p.sb = sb;
    p.c = c;
    p.ldc = ldc;
    p.sc = sc;
    p.batch = batch;
    return p;
}

bool valid_types(audiocpp_gemm_type ta, audiocpp_gemm_type tb, audiocpp_gemm_type tc,
                 audiocpp_gemm_compute compute) {
    return type_size(ta) != 0 && type_size(tb) != 0 && type_size(tc) != 0 &&
           compute != AUDIOCPP_GEMM_COMPUTE_UNSUPPORTED;
}

template <typename F> audiocpp_gemm_status guarded(F &&body) {
    try {
        return body();
    } catch (const std::bad_alloc &) {
        return AUDIOCPP_GEMM_ALLOC_FAILED;
    } catch (...) {
        return AUDIOCPP_GEMM_EXECUTION_FAILED;
    }
}

} // namespace

extern "C" {

audiocpp_gemm_status audiocpp_gemm_create(audiocpp_gemm_handle *out) {
    if (out == nullptr) {
        return AUDIOCPP_GEMM_INVALID_VALUE;
    }
    return guarded([&] {
        force_fallback();
        register_stats_once();
        auto *h = new audiocpp_gemm_context();
        // Without an Lt handle every product takes the fallback kernel: slower, never an error.
        if (agLtCreate(&h->lt) != AG_LT_SUCCESS) {
            h->lt = nullptr;
        }
        if (agMalloc(&h->own_workspace, kWorkspaceBytes) == agSuccess) {
            h->workspace = h->own_workspace;
            h->workspace_bytes = kWorkspaceBytes;
        } else {
            h->own_workspace = nullptr;
            (void)agGetLastError();
        }
        *out = h;
        return AUDIOCPP_GEMM_OK;
    });
}

audiocpp_gemm_status audiocpp_gemm_destroy(audiocpp_gemm_handle h) {
    if (h == nullptr) {
        return AUDIOCPP_GEMM_INVALID_VALUE;
    }
    if (h->lt != nullptr) {
        agLtDestroy(h->lt);
    }
    if (h->own_workspace != nullptr) {
        (void)agFree(h->own_workspace);
    }
    delete h;
    return AUDIOCPP_GEMM_OK;
}

audiocpp_gemm_status audiocpp_gemm_set_stream(audiocpp_gemm_handle h, void *stream) {
    if (h == nullptr) {
        return AUDIOCPP_GEMM_INVALID_VALUE;
    }
    h->stream = static_cast<agStream_t>(stream);
    return AUDIOCPP_GEMM_OK;
}

audiocpp_gemm_status audiocpp_gemm_set_workspace(audiocpp_gemm_handle h, void *ptr, size_t bytes) {
    if (h == nullptr) {
        return AUDIOCPP_GEMM_INVALID_VALUE;
    }
    std::lock_guard<std::mutex> lock(h->mutex);
    if (h->own_workspace != nullptr) {
        (void)agFree(h->own_workspace);
        h->own_workspace = nullptr;
    }
    h->workspace = ptr;
    h->workspace_bytes = ptr != nullptr ? bytes : 0;
    h->cache.clear();
    return AUDIOCPP_GEMM_OK;
}

const char *audiocpp_gemm_status_string(audiocpp_gemm_status s) {
    switch (s) {
    case AUDIOCPP_GEMM_OK: return "AUDIOCPP_GEMM_OK";
    case AUDIOCPP_GEMM_INVALID_VALUE: return "AUDIOCPP_GEMM_INVALID_VALUE";
    case AUDIOCPP_GEMM_NOT_SUPPORTED: return "AUDIOCPP_GEMM_NOT_SUPPORTED";
    case AUDIOCPP_GEMM_ALLOC_FAILED: return "AUDIOCPP_GEMM_ALLOC_FAILED";
    default: return "AUDIOCPP_GEMM_EXECUTION_FAILED";
    }
}

audiocpp_gemm_status audiocpp_gemm_sgemm(audiocpp_gemm_handle h, audiocpp_gemm_op op_a, audiocpp_gemm_op op_b,
                                         int m, int n, int k, const float *alpha, const float *a, int lda,
                                         const float *b, int ldb, const float *beta, float *c, int ldc) {
    count(AUDIOCPP_GEMM_CALL_SGEMM);
    if (!valid_dims(h, op_a, op_b, m, n, k, 1) || alpha == nullptr || beta == nullptr) {
        return AUDIOCPP_GEMM_INVALID_VALUE;
    }
    return guarded([&] {
        return run_strided(h, make_product(op_a, op_b, m, n, k, *alpha, *beta, AUDIOCPP_GEMM_F32, a, lda, 0,
                                           AUDIOCPP_GEMM_F32, b, ldb, 0, AUDIOCPP_GEMM_F32, c, ldc, 0, 1));
    });
}

audiocpp_gemm_status audiocpp_gemm_gemm_ex(audiocpp_gemm_handle h, audiocpp_gemm_op op_a, audiocpp_gemm_op op_b,
                                           int m, int n, int k, const void *alpha, const void *a,
                                           audiocpp_gemm_type type_a, int lda, const void *b,
                                           audiocpp_gemm_type type_b, int ldb, const void *beta, void *c,
                                           audiocpp_gemm_type type_c, int ldc, audiocpp_gemm_compute compute) {
    count(AUDIOCPP_GEMM_CALL_GEMM_EX);
    if (!valid_dims(h, op_a, op_b, m, n, k, 1) || !valid_types(type_a, type_b, type_c, compute) ||
        alpha == nullptr || beta == nullptr) {
        return AUDIOCPP_GEMM_INVALID_VALUE;
    }
    return guarded([&] {
        return run_strided(h, make_product(op_a, op_b, m, n, k, scale_value(alpha, compute),
                                           scale_value(beta, compute), type_a, a, lda, 0, type_b, b, ldb, 0,
                                           type_c, c, ldc, 0, 1));
    });
}

audiocpp_gemm_status audiocpp_gemm_gemm_strided_batched_ex(
    audiocpp_gemm_handle h, audiocpp_gemm_op op_a, audiocpp_gemm_op op_b, int m, int n, int k, const void *alpha,
    const void *a, audiocpp_gemm_type type_a, int lda, long long stride_a, const void *b, audiocpp_gemm_type type_b,
    int ldb, long long stride_b, const void *beta, void *c, audiocpp_gemm_type type_c, int ldc, long long stride_c,
    int batch, audiocpp_gemm_compute compute) {
    count(AUDIOCPP_GEMM_CALL_GEMM_STRIDED_BATCHED_EX);
    if (!valid_dims(h, op_a, op_b, m, n, k, batch) || !valid_types(type_a, type_b, type_c, compute) ||
        alpha == nullptr || beta == nullptr) {
        return AUDIOCPP_GEMM_INVALID_VALUE;
    }
    return guarded([&] {
        return run_strided(h, make_product(op_a, op_b, m, n, k, scale_value(alpha, compute),
                                           scale_value(beta, compute), type_a, a, lda, stride_a, type_b, b, ldb,
                                           stride_b, type_c, c, ldc, stride_c, batch));
    });
}

audiocpp_gemm_status audiocpp_gemm_gemm_batched_ex(audiocpp_gemm_handle h, audiocpp_gemm_op op_a,
                                                   audiocpp_gemm_op op_b, int m, int n, int k, const void *alpha,
                                                   const void *const *a, audiocpp_gemm_type type_a, int lda,
                                                   const void *const *b, audiocpp_gemm_type type_b, int ldb,
                                                   const void *beta, void *const *c, audiocpp_gemm_type type_c,
                                                   int ldc, int batch, audiocpp_gemm_compute compute) {
    count(AUDIOCPP_GEMM_CALL_GEMM_BATCHED_EX);
    if (!valid_dims(h, op_a, op_b, m, n, k, batch) || !valid_types(type_a, type_b, type_c, compute) ||
        alpha == nullptr || beta == nullptr || (batch > 0 && (a == nullptr || b == nullptr || c == nullptr))) {
        return AUDIOCPP_GEMM_INVALID_VALUE;
    }
    return guarded([&] {
        return run_arrays(h,
                          make_product(op_a, op_b, m, n, k, scale_value(alpha, compute), scale_value(beta, compute),
                                       type_a, nullptr, lda, 0, type_b, nullptr, ldb, 0, type_c, nullptr, ldc, 0,
                                       batch),
                          a, b, c);
    });
}

audiocpp_gemm_status audiocpp_gemm_sgemm_strided_batched(audiocpp_gemm_handle h, audiocpp_gemm_op op_a,
                                                         audiocpp_gemm_op op_b, int m, int n, int k,
                                                         const float *alpha, const float *a, int lda,
                                                         long long stride_a, const float *b, int ldb,
                                                         long long stride_b, const float *beta, float *c, int ldc,
                                                         long long stride_c, int batch) {
    count(AUDIOCPP_GEMM_CALL_SGEMM_STRIDED_BATCHED);
    if (!valid_dims(h, op_a, op_b, m, n, k, batch) || alpha == nullptr || beta == nullptr) {
        return AUDIOCPP_GEMM_INVALID_VALUE;
    }
    return guarded([&] {
        return run_strided(h, make_product(op_a, op_b, m, n, k, *alpha, *beta, AUDIOCPP_GEMM_F32, a, lda, stride_a,
                                           AUDIOCPP_GEMM_F32, b, ldb, stride_b, AUDIOCPP_GEMM_F32, c, ldc, stride_c,
                                           batch));
    });
}

audiocpp_gemm_status audiocpp_gemm_sgemm_batched(audiocpp_gemm_handle h, audiocpp_gemm_op op_a,
                                                 audiocpp_gemm_op op_b, int m, int n, int k, const float *alpha,
                                                 const float *const *a, int lda, const float *const *b, int ldb,
                                                 const float *beta, float *const *c, int ldc, int batch) {
    count(AUDIOCPP_GEMM_CALL_SGEMM_BATCHED);
    if (!valid_dims(h, op_a, op_b, m, n, k, batch) || alpha == nullptr || beta == nullptr ||
        (batch > 0 && (a == nullptr || b == nullptr || c == nullptr))) {
        return AUDIOCPP_GEMM_INVALID_VALUE;
    }
    return guarded([&] {
        return run_arrays(h,
                          make_product(op_a, op_b, m, n, k, *alpha, *beta, AUDIOCPP_GEMM_F32, nullptr, lda, 0,
                                       AUDIOCPP_GEMM_F32, nullptr, ldb, 0, AUDIOCPP_GEMM_F32, nullptr, ldc, 0, batch),
                          reinterpret_cast<const void *const *>(a), reinterpret_cast<const void *const *>(b),
                          reinterpret_cast<void *const *>(c));
    });
}

audiocpp_gemm_status audiocpp_gemm_strsm_batched(audiocpp_gemm_handle h, audiocpp_gemm_side side,
                                                 audiocpp_gemm_fill fill, audiocpp_gemm_op op,
                                                 audiocpp_gemm_diag diag, int m, int n, const float *alpha,
                                                 const float *const *a, int lda, float *const *b, int ldb,
                                                 int batch) {
    count(AUDIOCPP_GEMM_CALL_STRSM_BATCHED);
    if (h == nullptr || alpha == nullptr || m < 0 || n < 0 || batch < 0) {
        return AUDIOCPP_GEMM_INVALID_VALUE;
    }
    if (side != AUDIOCPP_GEMM_SIDE_RIGHT || op != AUDIOCPP_GEMM_OP_N) {
        return AUDIOCPP_GEMM_NOT_SUPPORTED;
    }
    if (m == 0 || n == 0 || batch == 0) {
        return AUDIOCPP_GEMM_OK;
    }
    count(AUDIOCPP_GEMM_ROUTE_TRSM_KERNEL);
    const dim3 block(128, 1, 1);
    const dim3 grid(grid_dim(m, 128, 1 << 20), grid_dim(batch, 1, 65535), 1);
    k_trsm_right<<<grid, block, 0, h->stream>>>(m, n, *alpha, a, lda, b, ldb, batch, fill == AUDIOCPP_GEMM_LOWER,
                                                diag == AUDIOCPP_GEMM_UNIT);
    return agGetLastError() == agSuccess ? AUDIOCPP_GEMM_OK : AUDIOCPP_GEMM_EXECUTION_FAILED;
}

void audiocpp_gemm_counters(unsigned long long *out) {
    for (int i = 0; i < AUDIOCPP_GEMM_COUNTER_COUNT; ++i) {
        out[i] = g_counters[i].load(std::memory_order_relaxed);
    }
}

void audiocpp_gemm_force_fallback(int on) { g_force_fallback.store(on ? 1 : 0); }

} // extern "C"
