// Checks ggml's GPU backend, built with audiocpp_gemm wired in, against ggml's CPU backend
// for MUL_MAT / OUT_PROD / SOLVE_TRI shapes that reach every BLAS entry point ggml uses, and
// asserts per case how many calls each entry point and each route of the library got (on
// sm_90 and RDNA many small products go to ggml's own kernels and never reach BLAS: the
// counts prove these shapes did). Every case runs twice: the Lt route, then with the
// library's own kernel forced.
//
// usage: audiocpp_gemm_ggml_test <folder holding libggml-cpu.so and libggml-cuda.so/-hip.so>
#include "audiocpp_gemm.h"

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"

#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

using counters_fn = void (*)(unsigned long long *);
using force_fn = void (*)(int);

struct Input {
    ggml_type type;
    int64_t ne[4];
    bool lower_triangular; // a well-conditioned lower-triangular matrix (solve_tri's A)
};

struct Expect {
    audiocpp_gemm_counter entry;
    unsigned long long entry_calls;
    unsigned long long lt;
    unsigned long long readback;
    unsigned long long fallback;
    unsigned long long trsm;
};

struct Case {
    std::string name;
    std::vector<Input> inputs;
    std::function<ggml_tensor *(ggml_context *, std::vector<ggml_tensor *> &)> build;
    double tolerance; // on ||gpu - cpu|| / ||cpu||
    Expect expect;
};

std::vector<float> random_values(const Input &in, uint32_t seed) {
    const int64_t n = in.ne[0] * in.ne[1] * in.ne[2] * in.ne[3];
    std::vector<float> v(n);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (auto &x : v) {
        x = dist(rng);
    }
    if (in.lower_triangular) {
        const int64_t cols = in.ne[0], rows = in.ne[1];
        for (int64_t m = 0; m < in.ne[2] * in.ne[3]; ++m) {
            for (int64_t i = 0; i < rows; ++i) {
                for (int64_t j = 0; j < cols; ++j) {
                    float &e = v[m * rows * cols + i * cols + j];
                    e = j > i ? 0.0f : (j == i ? 2.0f + std::fabs(e) : e * 0.5f / (float)cols);
                }
            }
        }
    }
    return v;
}

std::vector<uint8_t> encode(const std::vector<float> &v, ggml_type type) {
    std::vector<uint8_t> bytes(v.size() * ggml_type_size(type));
    if (type == GGML_TYPE_F32) {
        std::memcpy(bytes.data(), v.data(), bytes.size());
    } else if (type == GGML_TYPE_F16) {
        ggml_fp32_to_fp16_row(v.data(), reinterpret_cast<ggml_fp16_t *>(bytes.data()), (int64_t)v.size());
    } else {
        ggml_fp32_to_bf16_row(v.data(), reinterpret_cast<ggml_bf16_t *>(bytes.data()), (int64_t)v.size());
    }
    return bytes;
}

// Builds the case's graph on one backend, uploads the inputs, computes, returns the result.
std::vector<float> run(ggml_backend_t backend, const Case &c, const std::vector<std::vector<uint8_t>> &data) {
    ggml_init_params params = {ggml_tensor_overhead() * 64 + ggml_graph_overhead(), nullptr, true};
    ggml_context *ctx = ggml_init(params);
    std::vector<ggml_tensor *> leaves;
    for (const Input &in : c.inputs) {
        leaves.push_back(ggml_new_tensor_4d(ctx, in.type, in.ne[0], in.ne[1], in.ne[2], in.ne[3]));
    }
    ggml_tensor *out = c.build(ctx, leaves);
    ggml_cgraph *graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, out);
    ggml_backend_buffer_t buffer = ggml_backend_alloc_ctx_tensors(ctx, backend);
    if (buffer == nullptr) {
        std::fprintf(stderr, "%s: could not allocate the tensors\n", c.name.c_str());
        std::exit(1);
    }
    for (size_t i = 0; i < leaves.size(); ++i) {
        ggml_backend_tensor_set(leaves[i], data[i].data(), 0, data[i].size());
    }
    if (ggml_backend_graph_compute(backend, graph) != GGML_STATUS_SUCCESS) {
        std::fprintf(stderr, "%s: graph compute failed\n", c.name.c_str());
        std::exit(1);
    }
    std::vector<float> result(ggml_nelements(out));
    ggml_backend_tensor_get(out, result.data(), 0, result.size() * sizeof(float));
    ggml_backend_buffer_free(buffer);
    ggml_free(ctx);
    return result;
}

ggml_tensor *mul_mat(ggml_context *ctx, std::vector<ggml_tensor *> &t) { return ggml_mul_mat(ctx, t[0], t[1]); }

} // namespace

int main(int argc, char **argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s <folder with the ggml backend modules>\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[1];
    const std::string gpu_path = dir + "/libggml-cuda.so";
    if (ggml_backend_load((dir + "/libggml-cpu.so").c_str()) == nullptr ||
        ggml_backend_load(gpu_path.c_str()) == nullptr) {
        std::fprintf(stderr, "could not load libggml-cpu.so / libggml-cuda.so from %s\n", dir.c_str());
        return 1;
    }
    void *gpu_lib = dlopen(gpu_path.c_str(), RTLD_NOW | RTLD_NOLOAD);
    auto counters = gpu_lib ? reinterpret_cast<counters_fn>(dlsym(gpu_lib, "audiocpp_gemm_counters")) : nullptr;
    auto force = gpu_lib ? reinterpret_cast<force_fn>(dlsym(gpu_lib, "audiocpp_gemm_force_fallback")) : nullptr;
    if (counters == nullptr || force == nullptr) {
        std::fprintf(stderr, "%s does not export audiocpp_gemm_counters: built without audiocpp_gemm?\n",
                     gpu_path.c_str());
        return 1;
    }
    ggml_backend_dev_t cpu_dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    ggml_backend_dev_t gpu_dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_GPU);
    if (cpu_dev == nullptr || gpu_dev == nullptr) {
        std::fprintf(stderr, "no CPU or no GPU device\n");
        return 1;
    }
    ggml_backend_t cpu = ggml_backend_dev_init(cpu_dev, nullptr);
    ggml_backend_t gpu = ggml_backend_dev_init(gpu_dev, nullptr);
    std::printf("GPU: %s (%s)\n", ggml_backend_dev_name(gpu_dev), ggml_backend_dev_description(gpu_dev));

    const auto F32 = GGML_TYPE_F32, F16 = GGML_TYPE_F16, BF16 = GGML_TYPE_BF16;
    const double f32_tol = 1e-5, half_tol = 5e-3;
    std::vector<Case> cases = {
        // ggml_mul_mat(a [K, M, ...], b [K, N, ...]) -> [M, N, ...]; N > 16 keeps mmf/mmvf out.
        {"mul_mat f32 2d odd (Sgemm)", {{F32, {75, 67, 1, 1}}, {F32, {75, 33, 1, 1}}}, mul_mat, f32_tol,
         {AUDIOCPP_GEMM_CALL_SGEMM, 1, 1, 0, 0, 0}},
        {"mul_mat f16 2d odd K (GemmEx, 16F compute)", {{F16, {77, 130, 1, 1}}, {F32, {77, 40, 1, 1}}}, mul_mat,
         half_tol, {AUDIOCPP_GEMM_CALL_GEMM_EX, 1, 1, 0, 0, 0}},
        {"mul_mat f16 2d large (GemmEx)", {{F16, {384, 1536, 1, 1}}, {F32, {384, 150, 1, 1}}}, mul_mat, half_tol,
         {AUDIOCPP_GEMM_CALL_GEMM_EX, 1, 1, 0, 0, 0}},
        {"mul_mat bf16 2d (GemmEx)", {{BF16, {64, 96, 1, 1}}, {F32, {64, 24, 1, 1}}}, mul_mat, half_tol,
         {AUDIOCPP_GEMM_CALL_GEMM_EX, 1, 1, 0, 0, 0}},
        {"mul_mat f32 batched 3x2 (GemmStridedBatchedEx)", {{F32, {48, 40, 3, 2}}, {F32, {48, 20, 3, 2}}}, mul_mat,
         f32_tol, {AUDIOCPP_GEMM_CALL_GEMM_STRIDED_BATCHED_EX, 1, 1, 0, 0, 0}},
        {"mul_mat f16 batched 4 (GemmStridedBatchedEx)", {{F16, {64, 72, 4, 1}}, {F32, {64, 30, 4, 1}}}, mul_mat,
         half_tol, {AUDIOCPP_GEMM_CALL_GEMM_STRIDED_BATCHED_EX, 1, 1, 0, 0, 0}},
        // Broadcast over dim 2: A's pointers repeat (step 0), so runs are short: [0] [1] [2,3] [4] [5].
        {"mul_mat f16 broadcast r2=3 (GemmBatchedEx, 5 runs)", {{F16, {64, 50, 2, 1}}, {F32, {64, 25, 6, 1}}},
         mul_mat, half_tol, {AUDIOCPP_GEMM_CALL_GEMM_BATCHED_EX, 1, 5, 1, 0, 0}},
        // Broadcast over dim 3: A's pointers go a0 a1 a0 a1 a0 a1: runs [0,1] [2,3] [4,5].
        {"mul_mat f32 broadcast r3=3 (GemmBatchedEx, 3 runs)", {{F32, {48, 40, 2, 1}}, {F32, {48, 20, 2, 3}}},
         mul_mat, f32_tol, {AUDIOCPP_GEMM_CALL_GEMM_BATCHED_EX, 1, 3, 1, 0, 0}},
        // Dims 2 and 3 of src0 swapped: not contiguous over dims 2-3, no broadcast; A's
        // pointers advance by one stride within each i13: runs [0,1,2] [3,4,5].
        {"mul_mat f16 src0 dims 2/3 swapped (GemmBatchedEx, 2 runs)", {{F16, {64, 40, 2, 3}}, {F32, {64, 24, 3, 2}}},
         [](ggml_context *ctx, std::vector<ggml_tensor *> &t) {
             return ggml_mul_mat(ctx, ggml_permute(ctx, t[0], 0, 1, 3, 2), t[1]);
         },
         half_tol, {AUDIOCPP_GEMM_CALL_GEMM_BATCHED_EX, 1, 2, 1, 0, 0}},
        // A [0, 2, 1, 3] permutation stays contiguous over dims 2-3: ggml takes the strided call.
        {"mul_mat f32 permuted src0 (GemmStridedBatchedEx)", {{F32, {32, 4, 45, 1}}, {F32, {32, 20, 4, 1}}},
         [](ggml_context *ctx, std::vector<ggml_tensor *> &t) {
             return ggml_mul_mat(ctx, ggml_permute(ctx, t[0], 0, 2, 1, 3), t[1]);
         },
         f32_tol, {AUDIOCPP_GEMM_CALL_GEMM_STRIDED_BATCHED_EX, 1, 1, 0, 0, 0}},
        {"mul_mat f16 permuted src0 and src1 (GemmStridedBatchedEx)", {{F16, {64, 3, 40, 1}}, {F32, {64, 3, 24, 1}}},
         [](ggml_context *ctx, std::vector<ggml_tensor *> &t) {
             return ggml_mul_mat(ctx, ggml_permute(ctx, t[0], 0, 2, 1, 3), ggml_permute(ctx, t[1], 0, 2, 1, 3));
         },
         half_tol, {AUDIOCPP_GEMM_CALL_GEMM_STRIDED_BATCHED_EX, 1, 1, 0, 0, 0}},
        // ggml_out_prod(a [M, K, ...], b [N, K, ...]) -> [M, N, ...].
        {"out_prod 2d (Sgemm N,T)", {{F32, {37, 29, 1, 1}}, {F32, {41, 29, 1, 1}}},
         [](ggml_context *ctx, std::vector<ggml_tensor *> &t) { return ggml_out_prod(ctx, t[0], t[1]); }, f32_tol,
         {AUDIOCPP_GEMM_CALL_SGEMM, 1, 1, 0, 0, 0}},
        {"out_prod transposed src1 (Sgemm N,N)", {{F32, {37, 29, 1, 1}}, {F32, {29, 41, 1, 1}}},
         [](ggml_context *ctx, std::vector<ggml_tensor *> &t) {
             return ggml_out_prod(ctx, t[0], ggml_transpose(ctx, t[1]));
         },
         f32_tol, {AUDIOCPP_GEMM_CALL_SGEMM, 1, 1, 0, 0, 0}},
        {"out_prod batched 3x2 (SgemmStridedBatched x2)", {{F32, {37, 29, 3, 2}}, {F32, {41, 29, 3, 2}}},
         [](ggml_context *ctx, std::vector<ggml_tensor *> &t) { return ggml_out_prod(ctx, t[0], t[1]); }, f32_tol,
         {AUDIOCPP_GEMM_CALL_SGEMM_STRIDED_BATCHED, 2, 2, 0, 0, 0}},
        {"out_prod broadcast dps2=3 (SgemmBatched, 3 runs)", {{F32, {37, 29, 1, 1}}, {F32, {41, 29, 3, 1}}},
         [](ggml_context *ctx, std::vector<ggml_tensor *> &t) { return ggml_out_prod(ctx, t[0], t[1]); }, f32_tol,
         {AUDIOCPP_GEMM_CALL_SGEMM_BATCHED, 1, 3, 1, 0, 0}},
        {"out_prod ne3=2 (SgemmBatched, 1 regular run)", {{F32, {37, 29, 1, 2}}, {F32, {41, 29, 1, 2}}},
         [](ggml_context *ctx, std::vector<ggml_tensor *> &t) { return ggml_out_prod(ctx, t[0], t[1]); }, f32_tol,
         {AUDIOCPP_GEMM_CALL_SGEMM_BATCHED, 1, 1, 1, 0, 0}},
        // solve_tri(a [n, n, ...] lower, b [k, n, ...]): n > 64 or k > 32 takes cuBLAS/hipBLAS TRSM.
        {"solve_tri n=80 k=40 batch 2x3 (StrsmBatched)",
         {{F32, {80, 80, 2, 3}, true}, {F32, {40, 80, 2, 3}}},
         [](ggml_context *ctx, std::vector<ggml_tensor *> &t) {
             return ggml_solve_tri(ctx, t[0], t[1], true, true, false);
         },
         1e-4, {AUDIOCPP_GEMM_CALL_STRSM_BATCHED, 1, 0, 0, 0, 1}},
    };

    int failures = 0;
    std::printf("%-58s %-8s %10s %10s %6s %6s %6s %6s %6s\n", "case", "route", "max_abs", "rel", "entry", "lt",
                "rdback", "fallbk", "trsm");
    for (int forced = 0; forced < 2; ++forced) {
        force(forced);
        uint32_t seed = 1234 + forced;
        for (const Case &c : cases) {
            std::vector<std::vector<uint8_t>> data;
            for (const Input &in : c.inputs) {
                data.push_back(encode(random_values(in, seed++), in.type));
            }
            const std::vector<float> ref = run(cpu, c, data);
            std::vector<unsigned long long> before(AUDIOCPP_GEMM_COUNTER_COUNT), after(AUDIOCPP_GEMM_COUNTER_COUNT);
            counters(before.data());
            const std::vector<float> got = run(gpu, c, data);
            counters(after.data());
            auto delta = [&](audiocpp_gemm_counter k) { return after[k] - before[k]; };

            double num = 0, den = 0, max_abs = 0;
            bool finite = true;
            for (size_t i = 0; i < ref.size(); ++i) {
                const double d = (double)got[i] - (double)ref[i];
                finite = finite && std::isfinite(got[i]);
                num += d * d;
                den += (double)ref[i] * ref[i];
                max_abs = std::fmax(max_abs, std::fabs(d));
            }
            const double rel = std::sqrt(num / (den > 0 ? den : 1));

            Expect e = c.expect;
            if (forced) {
                // Forced: every product goes to the library's kernel, one launch per call.
                e.fallback = e.trsm > 0 ? 0 : e.entry_calls;
                e.lt = 0;
                e.readback = 0;
            }
            const bool counts_ok = delta(e.entry) == e.entry_calls && delta(AUDIOCPP_GEMM_ROUTE_LT) == e.lt &&
                                   delta(AUDIOCPP_GEMM_ROUTE_ARRAY_READBACK) == e.readback &&
                                   delta(AUDIOCPP_GEMM_ROUTE_FALLBACK_KERNEL) == e.fallback &&
                                   delta(AUDIOCPP_GEMM_ROUTE_TRSM_KERNEL) == e.trsm;
            const bool ok = finite && den > 0 && rel <= c.tolerance && counts_ok;
            std::printf("%-58s %-8s %10.3g %10.3g %6llu %6llu %6llu %6llu %6llu %s\n", c.name.c_str(),
                        forced ? "kernel" : "lt", max_abs, rel, delta(e.entry), delta(AUDIOCPP_GEMM_ROUTE_LT),
                        delta(AUDIOCPP_GEMM_ROUTE_ARRAY_READBACK), delta(AUDIOCPP_GEMM_ROUTE_FALLBACK_KERNEL),
                        delta(AUDIOCPP_GEMM_ROUTE_TRSM_KERNEL), ok ? "ok" : "FAIL");
            if (!ok) {
                std::printf("    expected entry %llu lt %llu readback %llu fallback %llu trsm %llu, tolerance %g\n",
                            e.entry_calls, e.lt, e.readback, e.fallback, e.trsm, c.tolerance);
                ++failures;
            }
        }
    }
    std::vector<unsigned long long> total(AUDIOCPP_GEMM_COUNTER_COUNT);
    counters(total.data());
    std::printf("totals: sgemm %llu gemm_ex %llu strided_ex %llu batched_ex %llu sgemm_strided %llu "
                "sgemm_batched %llu strsm %llu | lt %llu readback %llu fallback %llu trsm_kernel %llu\n",
                total[0], total[1], total[2], total[3], total[4], total[5], total[6], total[7], total[8], total[9],
                total[10]);
    ggml_backend_free(gpu);
    ggml_backend_free(cpu);
    std::printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
