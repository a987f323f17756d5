// A consumer of petra::core alone: a kernel, a small network's inference and
// a checkpoint of its parameters, each checked. Built with xtensor and zlib
// made unfindable (consumer/run.cmake); the check below proves that no core
// header includes either.
#include <petra/core.hpp>

#if defined(XTENSOR_VERSION_MAJOR) || defined(ZLIB_VERSION)
#error "petra/core.hpp includes xtensor or zlib, which petra::core does not provide"
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

using namespace petra;

using small_network = network<input<1, 8, 8>, stem<chain<conv2d<1, 8>, batch_norm<8>, relu>>,
                              additive_coupling<residual_function<4>>, classifier_head<8, 3>>;

int main()
{
    const float a[4] = {1, 2, 3, 4}; // [[1, 2], [3, 4]]
    const float b[4] = {5, 6, 7, 8}; // [[5, 6], [7, 8]]
    float c[4] = {};
    kernels::gemm<float>({.op_a = kernels::transpose::no,
                          .op_b = kernels::transpose::no,
                          .m = 2,
                          .n = 2,
                          .k = 2,
                          .alpha = 1.0f,
                          .a = a,
                          .lda = 2,
                          .b = b,
                          .ldb = 2,
                          .beta = 0.0f,
                          .c = c,
                          .ldc = 2});
    if (!std::ranges::equal(c, std::vector<float>{19, 22, 43, 50})) {
        std::printf("consumer (core): wrong product\n");
        return 1;
    }

    const auto parameters = small_network::make_parameters<float>(/*seed=*/1);
    std::vector<float> images(2 * 64), logits(2 * 3);
    for (std::size_t i = 0; i < images.size(); ++i) images[i] = float(i % 7) / 7.0f - 0.5f;
    predict(parameters, 2, images.data(), logits.data());
    if (!std::ranges::all_of(logits, [](float x) { return std::isfinite(x); })) {
        std::printf("consumer (core): logits not finite\n");
        return 1;
    }

    // Checkpoints are core: their CRC-32 needs no zlib.
    const std::string path =
        (std::filesystem::temp_directory_path() / ("petra_consumer_core." + std::to_string(::getpid()) + ".checkpoint"))
            .string();
    {
        auto saved = parameters;
        checkpoint_writer out(path, small_network::signature);
        saved.transfer_state(out);
        out.commit();
    }
    auto loaded = small_network::make_parameters<float>(/*seed=*/2);
    checkpoint_reader in(path, small_network::signature);
    loaded.transfer_state(in);
    in.finish();
    std::filesystem::remove(path);
    if (!std::ranges::equal(loaded.values(), parameters.values())) {
        std::printf("consumer (core): parameters differ after a checkpoint\n");
        return 1;
    }
    std::printf("consumer (core): petra %s works without xtensor and zlib\n", PETRA_VERSION_STRING);
    return 0;
}
