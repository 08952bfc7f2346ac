// The one function ggml's graph evaluation calls (the line cmake/patch.cmake adds before
// ggml_cuda_try_fuse): it offers nodes i.. to each kernel of ours in turn.

#include "fusion.cuh"

#include <cstdlib>
#include <cstring>

namespace {

// Which of our kernels run. GGML_CUDA_DISABLE_FUSION=1 (ggml's switch for its fusions)
// turns all of them off; so does AUDIOCPP_DISABLE_FUSION=1, and AUDIOCPP_DISABLE_FUSION
// set to names separated by commas (layer_norm, mat_vec_f16, mat_vec_q8_0) turns off
// those: each is compared with ggml's own kernels by turning it off alone.
struct Enabled {
    bool layer_norm = true;
    bool mat_vec_f16 = true;
    bool mat_vec_q8_0 = true;
};

static bool set_to_nonzero(const char * name) {
    const char * v = std::getenv(name);
    return v != nullptr && std::atoi(v) != 0;
}

static Enabled read_switches() {
    Enabled on;
    const char * names = std::getenv("AUDIOCPP_DISABLE_FUSION");
    if (set_to_nonzero("GGML_CUDA_DISABLE_FUSION") || set_to_nonzero("AUDIOCPP_DISABLE_FUSION")) {
        return Enabled{ false, false, false };
    }
    if (names == nullptr) {
        return on;
    }
    const std::pair<const char *, bool *> kernels[] = {
        { "layer_norm", &on.layer_norm },
        { "mat_vec_f16", &on.mat_vec_f16 },
        { "mat_vec_q8_0", &on.mat_vec_q8_0 },
    };
    for (const char * p = names; *p != '\0';) {
        const char * end = std::strchr(p, ',');
        const size_t len = end != nullptr ? (size_t) (end - p) : std::strlen(p);
        for (const auto & [name, flag] : kernels) {
            if (std::strlen(name) == len && std::strncmp(p, name, len) == 0) {
                *flag = false;
            }
        }
        p += len + (end != nullptr ? 1 : 0);
    }
    return on;
}

}  // namespace

int audiocpp_run_nodes(ggml_backend_cuda_context & ctx, ggml_cgraph * cgraph, int i) {
    static const Enabled on = read_switches();
    // ggml's concurrent streams pick up fused chains where they start; ours stay out of
    // graphs that use them.
    if (i >= cgraph->n_nodes || !ctx.stream_context().concurrent_events.empty()) {
        return 0;
    }
    if (on.layer_norm) {
        if (const int ran = audiocpp_layer_norm(ctx, cgraph, i)) {
            return ran;
        }
    }
    if (on.mat_vec_f16 || on.mat_vec_q8_0) {
        return audiocpp_mat_vec(ctx, cgraph, i, on.mat_vec_f16, on.mat_vec_q8_0);
    }
    return 0;
}
