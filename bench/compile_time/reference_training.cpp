// The translation unit whose compile time petra tracks (scripts/compile_time):
// the reference network, both baseline trainers and inference, instantiated
// for float. BLOCKS_PER_RESOLUTION (default 2) deepens the network to show how
// the compile time grows with the length of the block list; HEADERS_ONLY
// leaves only the includes, the fixed cost.
#include <cstdint>
#include <cstdio>
#include <vector>

#include <petra/petra.hpp>

#ifndef BLOCKS_PER_RESOLUTION
#define BLOCKS_PER_RESOLUTION 2
#endif

int main()
{
#ifndef HEADERS_ONLY
    using net = petra::reference_network<16, BLOCKS_PER_RESOLUTION>;
    const std::size_t batch = 4;
    auto parameters = net::make_parameters<float>(1);
    std::vector<float> images(batch * net::input::size, 0.5f), gradient(net::parameter_count),
        logits(batch * net::output::size);
    std::vector<std::int32_t> labels(batch, 1);
    petra::exact_backprop<net, float> exact(batch);
    petra::reversible_backprop<net, float> reversible(batch);
    const float exact_loss = exact.accumulate_gradient(parameters, batch, images.data(), labels.data(), gradient);
    const float reversible_loss =
        reversible.accumulate_gradient(parameters, batch, images.data(), labels.data(), gradient);
    petra::predict(parameters, batch, images.data(), logits.data());
    std::printf("%zu blocks: losses %.6f %.6f\n", net::block_count, exact_loss, reversible_loss);
#endif
    return 0;
}
