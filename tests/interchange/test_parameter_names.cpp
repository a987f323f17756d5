// The names of a network's arrays (parameter_names.hpp): the rule on the
// reference networks and on a network of every block kind, and that the
// named arrays tile the parameters and the state exactly.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <petra/core.hpp>

using namespace petra;

namespace {

// A layer of the user's that names no arrays: one parameter per channel and
// one value of state (what it saw last), to be named by the fallback.
struct channel_gain {
    template <class Input>
    struct bind {
        using input = Input;
        using output = Input;
        static constexpr std::size_t parameter_count = Input::channels;
        static constexpr std::size_t state_count = 1;
        static constexpr std::size_t workspace_size(std::size_t) { return 0; }
        static constexpr std::size_t forward_flops = Input::size;
        static constexpr std::size_t backward_flops = 2 * Input::size;
        template <class T>
        static void initialize(std::span<T, parameter_count> parameters, std::span<T, 1>, std::mt19937_64&)
        {
            std::fill(parameters.begin(), parameters.end(), T(1));
        }
        template <forward_pass Pass, class T>
        static void forward(Pass, parameters_view<T, parameter_count> gain, state_view<Pass, T, 1>,
                            const_batch<T, input> x, batch_view<T, output> y, std::span<T>)
        {
            for (std::size_t i = 0; i < x.size(); ++i)
                y.data()[i] = gain[(i / Input::pixels) % Input::channels] * x.data()[i];
        }
        template <class T>
        static void backward(parameters_view<T, parameter_count> gain, const_batch<T, input> x,
                             const_batch<T, output> grad_y, batch_view<T, input> grad_x,
                             std::span<T, parameter_count> grad_gain, std::span<T>)
        {
            for (std::size_t i = 0; i < x.size(); ++i) {
                const std::size_t c = (i / Input::pixels) % Input::channels;
                if (grad_x) grad_x.data()[i] = gain[c] * grad_y.data()[i];
                grad_gain[c] += x.data()[i] * grad_y.data()[i];
            }
        }
    };
};

// Every block kind; a chain in a chain; F a single layer; a user's layer
// that names nothing; relu before a batch norm (no fusion) and after one.
using every_kind =
    network<input<1, 4, 4>, stem<chain<conv2d<1, 8>, batch_norm<8>, relu>>, additive_coupling<conv2d<4, 4>>,
            revnet_coupling<chain<relu, batch_norm<4>, channel_gain>, chain<chain<conv2d<4, 4>, batch_norm<4>>, relu>>,
            pixel_unshuffle, downsampling<16>, classifier_head<64, 3>>;

template <class Network>
std::vector<std::string> names_of()
{
    std::vector<std::string> names;
    for (const named_array& array : Network::parameter_names()) names.emplace_back(array.name.view());
    return names;
}

// The named arrays of each role, sorted by offset, lie end to end from 0 to
// the network's count, with the sizes their shapes give.
template <class Network>
void check_tiling()
{
    for (const array_role role : {array_role::parameter, array_role::state}) {
        std::vector<named_array> arrays;
        for (const named_array& array : Network::parameter_names()) {
            if (array.role == role) arrays.push_back(array);
        }
        std::sort(arrays.begin(), arrays.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
        std::size_t next = 0;
        for (const named_array& array : arrays) {
            INFO(std::string(array.name.view()));
            CHECK(array.offset == next);
            CHECK(array.size() > 0);
            next += array.size();
        }
        CHECK(next == (role == array_role::parameter ? Network::parameter_count : Network::state_count));
    }
}

} // namespace

// Known at compile time.
static_assert(reference_network<>::parameter_names().size() == 87);
static_assert(reference_network<>::parameter_names()[0].name.view() == "blocks.0.f.0.weight");
static_assert(find_named_array(reference_network<>::parameter_names(), "blocks.9.f.1.bias") + 1 ==
              reference_network<>::parameter_names().size());

TEST_CASE("the reference network's arrays are named by block, part, the user's layer index and array")
{
    using net = reference_network<>;
    const std::vector<std::string> names = names_of<net>();
    REQUIRE(names.size() == 87);
    // The stem's chain: conv (0), batch norm (1), relu (2).
    CHECK(names[0] == "blocks.0.f.0.weight");
    CHECK(names[1] == "blocks.0.f.1.weight");
    CHECK(names[2] == "blocks.0.f.1.bias");
    CHECK(names[3] == "blocks.0.f.1.running_mean");
    CHECK(names[4] == "blocks.0.f.1.running_var");
    // A coupling: batch norm and relu run fused, the second conv keeps index 3.
    CHECK(names[5] == "blocks.1.f.0.weight");
    CHECK(names[10] == "blocks.1.f.3.weight");
    CHECK(names[11] == "blocks.1.f.4.weight");
    // The first downsampling, block 3: f then g.
    CHECK(std::count(names.begin(), names.end(), "blocks.3.f.0.weight") == 1);
    CHECK(std::count(names.begin(), names.end(), "blocks.3.g.1.running_var") == 1);
    // The head: pooling (0) and dense (1).
    CHECK(names[85] == "blocks.9.f.1.weight");
    CHECK(names[86] == "blocks.9.f.1.bias");

    const auto& arrays = net::parameter_names();
    const named_array& conv = arrays[find_named_array(arrays, "blocks.4.f.3.weight")];
    CHECK(conv.role == array_role::parameter);
    CHECK(conv.rank == 4);
    CHECK(conv.extents == std::array<std::size_t, 4>{32, 32, 3, 3});
    const named_array& shortcut = arrays[find_named_array(arrays, "blocks.6.g.0.weight")];
    CHECK(shortcut.extents == std::array<std::size_t, 4>{64, 32, 1, 1});
    const named_array& dense_weight = arrays[find_named_array(arrays, "blocks.9.f.1.weight")];
    CHECK(dense_weight.rank == 2);
    CHECK(dense_weight.extents[0] == 10);
    CHECK(dense_weight.extents[1] == 128);
    const named_array& mean = arrays[find_named_array(arrays, "blocks.8.f.4.running_mean")];
    CHECK(mean.role == array_role::state);
    CHECK(mean.rank == 1);
    CHECK(mean.extents[0] == 64);
    CHECK(find_named_array(arrays, "blocks.1.f.2.weight") == arrays.size()); // relu has no arrays

    // Where each array lies: block 1's first array starts block 1's
    // parameters, and the dense bias ends them.
    CHECK(arrays[5].offset == net::parameter_offsets[1]);
    CHECK(arrays[86].offset + arrays[86].size() == net::parameter_count);
    check_tiling<net>();
}

TEST_CASE("the reversible reference network: pixel_unshuffle names nothing, the head's batch norm is layer 0")
{
    using net = reversible_reference_network<>;
    const std::vector<std::string> names = names_of<net>();
    CHECK(std::none_of(names.begin(), names.end(), [](const std::string& name) {
        return name.rfind("blocks.3.", 0) == 0 || name.rfind("blocks.6.", 0) == 0;
    }));
    // Block 8, the last coupling at 7 x 7, narrows 256 channels to 16.
    const auto& arrays = net::parameter_names();
    CHECK(arrays[find_named_array(arrays, "blocks.8.f.0.weight")].extents == std::array<std::size_t, 4>{16, 256, 3, 3});
    // The head, block 9: batch norm (0), relu (1), pooling (2), dense (3).
    CHECK(std::count(names.begin(), names.end(), "blocks.9.f.0.running_var") == 1);
    CHECK(std::count(names.begin(), names.end(), "blocks.9.f.3.bias") == 1);
    CHECK(names.back() == "blocks.9.f.3.bias");
    check_tiling<net>();
}

TEST_CASE("every block kind: parts f and g, a chain in a chain, a single layer, a layer that names nothing")
{
    const std::vector<std::string> expected{
        "blocks.0.f.0.weight", "blocks.0.f.1.weight", "blocks.0.f.1.bias", "blocks.0.f.1.running_mean",
        "blocks.0.f.1.running_var",
        // additive_coupling<conv2d>: F is one layer, no index.
        "blocks.1.f.weight",
        // revnet_coupling: F = relu (0), batch norm (1, not fused: relu comes first), channel_gain (2).
        "blocks.2.f.1.weight", "blocks.2.f.1.bias", "blocks.2.f.1.running_mean", "blocks.2.f.1.running_var",
        "blocks.2.f.2.parameters", "blocks.2.f.2.state",
        // G = chain<chain<conv, bn>, relu>: the inner chain is layer 0.
        "blocks.2.g.0.0.weight", "blocks.2.g.0.1.weight", "blocks.2.g.0.1.bias", "blocks.2.g.0.1.running_mean",
        "blocks.2.g.0.1.running_var",
        // block 3, pixel_unshuffle: nothing. block 4, downsampling.
        "blocks.4.f.0.weight", "blocks.4.f.1.weight", "blocks.4.f.1.bias", "blocks.4.f.1.running_mean",
        "blocks.4.f.1.running_var", "blocks.4.g.0.weight", "blocks.4.g.1.weight", "blocks.4.g.1.bias",
        "blocks.4.g.1.running_mean", "blocks.4.g.1.running_var", "blocks.5.f.1.weight", "blocks.5.f.1.bias"};
    CHECK(names_of<every_kind>() == expected);
    const auto& arrays = every_kind::parameter_names();
    const named_array& gain = arrays[find_named_array(arrays, "blocks.2.f.2.parameters")];
    CHECK(gain.rank == 1);
    CHECK(gain.extents[0] == 4);
    CHECK(arrays[find_named_array(arrays, "blocks.2.f.2.state")].role == array_role::state);
    check_tiling<every_kind>();
}

TEST_CASE("array_name counts in decimal and joins its parts")
{
    array_name name;
    name.append("blocks.").append(std::size_t{0}).append(".").append(std::size_t{1234567890});
    CHECK(name.view() == "blocks.0.1234567890");
    CHECK(name.size() == 19);
}
