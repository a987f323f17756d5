// Inference with the reference network on petra::core alone: parameters
// drawn from a fixed seed, a fixed batch of images, the logits printed one
// example per line. The images are made with integer arithmetic, so that
// every CPU sees the same input; the logits then differ between CPUs only
// by float rounding (fused multiply-adds, vector widths). scripts/test runs
// this program on x86-64 and, cross-built, on aarch64 under qemu-user, and
// compares the two with --check.
//
// Usage: inference                 prints the logits
//        inference --check FILE    compares them with FILE's (the same
//                                  program's output elsewhere); exit 1 if an
//                                  example's logits differ by more than 1e-5
//                                  of that example's largest logit
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <petra/core.hpp>

using namespace petra;

namespace {

using net = reference_network<>;
constexpr std::size_t batch = 8;
constexpr std::size_t classes = net::output::size;
constexpr double tolerance = 1e-5;

std::vector<float> logits_of_fixed_images()
{
    std::vector<float> images(batch * net::input::size);
    for (std::size_t i = 0; i < images.size(); ++i) images[i] = float((i * 131 + i / 28 * 7) % 256) / 255.0f - 0.5f;
    const auto parameters = net::make_parameters<float>(/*seed=*/1);
    std::vector<float> logits(batch * classes);
    predict(parameters, batch, images.data(), logits.data());
    return logits;
}

// The logits in a file written by this program: lines of numbers, comments
// after '#'.
std::vector<double> read_logits(const std::string& path)
{
    std::ifstream in(path);
    if (!in) throw std::runtime_error(path + ": cannot be opened");
    std::vector<double> values;
    for (std::string line; std::getline(in, line);) {
        std::istringstream numbers(line.substr(0, line.find('#')));
        for (double value; numbers >> value;) values.push_back(value);
    }
    if (values.size() != batch * classes) {
        throw std::runtime_error(path + ": " + std::to_string(values.size()) + " logits, expected " +
                                 std::to_string(batch * classes));
    }
    return values;
}

// Each example's largest difference relative to its largest logit; 0 when
// both agree exactly.
int check(const std::vector<float>& logits, const std::string& path)
{
    const std::vector<double> expected = read_logits(path);
    double worst = 0;
    for (std::size_t n = 0; n < batch; ++n) {
        double scale = 0, difference = 0;
        for (std::size_t k = 0; k < classes; ++k) {
            const std::size_t i = n * classes + k;
            scale = std::max({scale, std::abs(expected[i]), std::abs(double(logits[i]))});
            difference = std::max(difference, std::abs(expected[i] - double(logits[i])));
        }
        if (!std::isfinite(difference)) difference = INFINITY;
        worst = std::max(worst, scale > 0 ? difference / scale : difference);
    }
    const bool same = worst <= tolerance;
    std::printf("inference (%s vectors): the logits %s %s's: largest difference %.3g of an example's largest logit "
                "(tolerance %.0e)\n",
                xsimd::default_arch::name(), same ? "match" : "DIFFER from", path.c_str(), worst, tolerance);
    return same ? 0 : 1;
}

} // namespace

int main(int argc, char** argv)
{
    try {
        const std::vector<float> logits = logits_of_fixed_images();
        if (argc == 3 && std::string(argv[1]) == "--check") return check(logits, argv[2]);
        if (argc != 1) {
            std::fprintf(stderr, "usage: inference [--check FILE]\n");
            return 2;
        }
        std::printf("# the reference network's logits, seed 1, %zu fixed images, one example per line (%s vectors)\n",
                    batch, xsimd::default_arch::name());
        for (std::size_t n = 0; n < batch; ++n) {
            for (std::size_t k = 0; k < classes; ++k) std::printf("%s%.9g", k > 0 ? " " : "", logits[n * classes + k]);
            std::printf("\n");
        }
        return 0;
    } catch (const std::exception& error) {
        std::fprintf(stderr, "inference: %s\n", error.what());
        return 1;
    }
}
