// ONNX export (interchange floor, above network.hpp): a network's inference
// graph as an ONNX model that another runtime (onnxruntime, OpenCV's dnn
// module, ...) runs with the logits of petra's predict.
//
//   const auto weights = net::make_parameters<float>(1);   // ... trained
//   petra::export_onnx(weights, "model.onnx");             // atomically
//   const std::string bytes = petra::onnx_model_bytes(weights);
//
// What is exported: the function predict computes (batch normalisation with
// its running statistics, nothing updated), as one graph in the default
// domain at opset 13 (onnx_opset), IR version 7, checked with onnx 1.12's
// full checker and run by OpenCV 4.6. Its input "images" is
// [batch, C, H, W] float32, the batch a symbolic dimension ("batch"); its
// output "logits" is [batch, K] float32, K = Network::output::size (the
// head's output, flattened). Parameters of type double are written as
// float32.
//
// The pair of halves (x, x~) between blocks (blocks/block.hpp) is two
// tensors of the graph. Each block and layer becomes standard operators:
//   stem<F>               F, then Split of the channels into (x, x~)
//   additive_coupling<F>  y = Add(x~, F(x)), y~ = x
//   revnet_coupling<F,G>  y1 = Add(x1, F(x2)), y2 = Add(x2, G(y1))
//   downsample<F,G>       y = F(x), y~ = Add(G(x~), y)
//   pixel_unshuffle       each half: Reshape to [N, C, H/2, 2, W/2, 2],
//                         Transpose to [N, C, 2, 2, H/2, W/2], Reshape to
//                         [N, 4C, H/2, W/2]: channel 4c + 2dy + dx, petra's
//                         order (ONNX's SpaceToDepth orders them otherwise)
//   head<F>               Concat of the halves' channels, then F
//   chain<L...>           its layers in order
//   conv2d                Conv (no bias)
//   batch_norm            BatchNormalization (inference, the layer's epsilon)
//   batch_norm_relu       BatchNormalization, Relu (a chain's fused pair)
//   relu                  Relu
//   global_average_pool   GlobalAveragePool
//   flatten               Flatten (axis 1)
//   dense                 Gemm (transB = 1, bias), behind a Flatten when its
//                         input has spatial dimensions
//
// Names: every initializer holding a parameter or a running statistic is
// named as Network::parameter_names() names it (blocks.1.f.0.weight,
// blocks.1.f.1.running_mean, ...; parameter_names.hpp), with its shape.
// Nodes are named after the layer or block they come from
// (blocks.1.f.0/Conv, blocks.1/Add), and so are their outputs; the constant
// shapes the graph needs are int64 initializers with a '/' in their names
// (blocks.0/split), which no array name has.
//
// What is refused, at compile time, with one sentence: a layer or a block
// that has no ONNX form here (a user's own layer or block; anything but the
// kinds above), and a network that ends in a pair of halves rather than a
// head.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <petra/blocks/additive_coupling.hpp>
#include <petra/blocks/downsample.hpp>
#include <petra/blocks/head.hpp>
#include <petra/blocks/pixel_unshuffle.hpp>
#include <petra/blocks/revnet_coupling.hpp>
#include <petra/blocks/stem.hpp>
#include <petra/error.hpp>
#include <petra/interchange/protobuf.hpp>
#include <petra/layers/batch_norm.hpp>
#include <petra/layers/conv2d.hpp>
#include <petra/layers/dense.hpp>
#include <petra/layers/flatten.hpp>
#include <petra/layers/pooling.hpp>
#include <petra/layers/relu.hpp>
#include <petra/network.hpp>
#include <petra/parameter_names.hpp>
#include <petra/replacing_file.hpp>
#include <petra/version.hpp>

namespace petra {

// The one operator set the exported graphs use (the default domain).
inline constexpr std::int64_t onnx_opset = 13;
// The IR version of that opset's release (ONNX 1.8).
inline constexpr std::int64_t onnx_ir_version = 7;

namespace detail::onnx {

// TensorProto.DataType.
inline constexpr std::int64_t float_type = 1;
inline constexpr std::int64_t int64_type = 7;

// A tensor of the graph: its name, and whether it is [N, K] (flat) rather
// than [N, C, H, W].
struct value {
    std::string name;
    bool flat = false;
};

// The state between blocks: one tensor (the images, the logits) or a pair of
// halves (second set).
struct block_state {
    value first;
    value second;
};

struct attribute {
    std::string name;
    std::int64_t type; // AttributeProto.AttributeType: FLOAT 1, INT 2, INTS 7
    float f = 0;
    std::vector<std::int64_t> ints;
};

inline attribute int_attribute(std::string name, std::int64_t i) { return {std::move(name), 2, 0, {i}}; }
inline attribute ints_attribute(std::string name, std::vector<std::int64_t> ints)
{
    return {std::move(name), 7, 0, std::move(ints)};
}
inline attribute float_attribute(std::string name, float f) { return {std::move(name), 1, f, {}}; }

struct node {
    std::string op;
    std::string name;
    std::vector<std::string> inputs;
    std::vector<std::string> outputs;
    std::vector<attribute> attributes;
};

// The graph as it is built: nodes in order, initializers already encoded.
// Every name given to a node output or an initializer must be new (a
// std::logic_error otherwise: a naming rule here is broken).
class graph {
public:
    // Adds a node named `name` with one output, also named `name`.
    value add(std::string op, const std::string& name, std::vector<std::string> inputs, bool flat,
              std::vector<attribute> attributes = {})
    {
        claim(name);
        nodes_.push_back({std::move(op), name, std::move(inputs), {name}, std::move(attributes)});
        return {name, flat};
    }
    // Adds a node whose outputs are named `outputs`.
    void add_multiple(std::string op, const std::string& name, std::vector<std::string> inputs,
                      std::vector<std::string> outputs, std::vector<attribute> attributes)
    {
        for (const std::string& output : outputs) claim(output);
        nodes_.push_back({std::move(op), name, std::move(inputs), std::move(outputs), std::move(attributes)});
    }

    // A float32 initializer of shape dims, converted from values.
    template <class T>
    void add_floats(const std::string& name, std::span<const std::size_t> dims, std::span<const T> values)
    {
        std::string raw;
        raw.reserve(4 * values.size());
        for (const T v : values)
            protobuf::message::append_little_endian(raw, std::bit_cast<std::uint32_t>(float(v)), 4);
        add_initializer(name, dims, float_type, raw);
    }
    // A one-dimensional int64 initializer (a shape, split sizes), unless one
    // of that name exists already (the same constant used twice).
    std::string add_int64s(const std::string& name, const std::vector<std::int64_t>& values)
    {
        if (used_.contains(name)) return name;
        std::string raw;
        for (const std::int64_t v : values) {
            protobuf::message::append_little_endian(raw, static_cast<std::uint64_t>(v), 8);
        }
        const std::size_t dims[] = {values.size()};
        add_initializer(name, dims, int64_type, raw);
        return name;
    }

    // Renames the tensor `from` to `to` wherever it appears; false if no node
    // gives it.
    bool rename(const std::string& from, const std::string& to)
    {
        bool produced = false;
        for (node& n : nodes_) {
            for (std::string& input : n.inputs) {
                if (input == from) input = to;
            }
            for (std::string& output : n.outputs) {
                if (output == from) output = to, produced = true;
            }
        }
        return produced;
    }

    // GraphProto: nodes (1), name (2), initializers (5), input (11), output (12).
    protobuf::message encode(const protobuf::message& input, const protobuf::message& output) const
    {
        protobuf::message out;
        for (const node& n : nodes_) out.nested(1, encode(n));
        out.string(2, "petra");
        for (const protobuf::message& initializer : initializers_) out.nested(5, initializer);
        out.nested(11, input).nested(12, output);
        return out;
    }

private:
    void claim(const std::string& name)
    {
        if (!used_.insert(name).second) {
            raise_error(error_kind::logic_error, ("export_onnx: the graph names two tensors " + name + ".").c_str());
        }
    }
    // TensorProto: dims (1), data_type (2), name (8), raw_data (9).
    void add_initializer(const std::string& name, std::span<const std::size_t> dims, std::int64_t type,
                         std::string_view raw)
    {
        claim(name);
        protobuf::message tensor;
        for (const std::size_t extent : dims) tensor.integer(1, static_cast<std::int64_t>(extent));
        tensor.integer(2, type).string(8, name).raw_bytes(9, raw);
        initializers_.push_back(std::move(tensor));
    }
    // AttributeProto: name (1), f (2), i (3), ints (8), type (20).
    static protobuf::message encode(const attribute& a)
    {
        protobuf::message out;
        out.string(1, a.name);
        if (a.type == 1) out.float32(2, a.f);
        if (a.type == 2) out.integer(3, a.ints[0]);
        if (a.type == 7) {
            for (const std::int64_t i : a.ints) out.integer(8, i);
        }
        out.integer(20, a.type);
        return out;
    }
    // NodeProto: input (1), output (2), name (3), op_type (4), attribute (5).
    static protobuf::message encode(const node& n)
    {
        protobuf::message out;
        for (const std::string& input : n.inputs) out.string(1, input);
        for (const std::string& output : n.outputs) out.string(2, output);
        out.string(3, n.name).string(4, n.op);
        for (const attribute& a : n.attributes) out.nested(5, encode(a));
        return out;
    }

    std::vector<node> nodes_;
    std::vector<protobuf::message> initializers_;
    std::set<std::string> used_;
};

// ValueInfoProto of a float32 tensor: name (1), type (2) = TypeProto with
// tensor_type (1) = {elem_type (1), shape (2) = {dim (1): dim_value (1) or
// dim_param (2)}}. The first dimension is the symbolic batch.
inline protobuf::message float_tensor_info(std::string_view name, std::span<const std::size_t> extents)
{
    protobuf::message shape;
    shape.nested(1, protobuf::message{}.string(2, "batch"));
    for (const std::size_t extent : extents) {
        shape.nested(1, protobuf::message{}.integer(1, static_cast<std::int64_t>(extent)));
    }
    protobuf::message tensor;
    tensor.integer(1, float_type).nested(2, shape);
    protobuf::message type;
    type.nested(1, tensor);
    protobuf::message info;
    info.string(1, name).nested(2, type);
    return info;
}

// The ONNX form of a layer or block type, as it was written before binding
// (Bound::unbound): specialisations below, one per kind that has one.
template <class Unbound>
struct layer_form {
    static constexpr bool defined = false;
};
template <class Unbound>
struct block_form {
    static constexpr bool defined = false;
};

// The checks: each names, in its template argument, the type refused. (No
// semicolon in the sentences: tests/compile_fail/check.cmake reads them as
// CMake strings.)
template <class Layer>
struct layer_has_form {
    static constexpr bool value = layer_form<Layer>::defined;
    static_assert(value, "export_onnx: this layer has no ONNX form (those that have one: conv2d, batch_norm, "
                         "relu, global_average_pool, flatten, dense and chains of them).");
};
template <class Block>
struct block_has_form {
    static constexpr bool value = block_form<Block>::defined;
    static_assert(value, "export_onnx: this block has no ONNX form (those that have one: stem, "
                         "additive_coupling, revnet_coupling, downsample, pixel_unshuffle and head).");
};
template <class Network>
struct ends_in_one_tensor {
    static constexpr bool value = !is_halves<typename Network::output>::value;
    static_assert(value, "export_onnx: the network ends in a pair of halves, not in a head that gives the logits.");
};

// The type a bound layer or block was bound from, or the bound type itself
// where it does not say (a user's layer).
template <class Bound>
struct unbound_of {
    using type = Bound;
};
template <class Bound>
    requires requires { typename Bound::unbound; }
struct unbound_of<Bound> {
    using type = typename Bound::unbound;
};

template <class Bound>
concept bound_chain_like = (requires {
    typename Bound::parts;
    Bound::layer_positions;
});

// Builds the graph of Network from its parameters, block after block.
template <class Network, class T>
class writer {
public:
    explicit writer(network_parameters_view<Network, const T> parameters) : parameters_(parameters) {}

    // A bound layer (a chain: its layers in order, named by the user's
    // indices) applied to x; prefix names it (blocks.1.f.0).
    template <class Bound>
    value layer(const std::string& prefix, value x)
    {
        if constexpr (bound_chain_like<Bound>) {
            using parts = typename Bound::parts;
            for_each_index<Bound::layer_positions.size() - 1>([&](auto k) {
                x = layer<typename parts::template function_at<k>>(
                    prefix + "." + std::to_string(Bound::layer_positions[k]), x);
            });
            return x;
        } else {
            using unbound = typename unbound_of<Bound>::type;
            if constexpr (!layer_has_form<unbound>::value) {
                return x;
            } else {
                return layer_form<unbound>::template emit<Bound>(*this, prefix, x);
            }
        }
    }

    // A bound block applied to the state; prefix names it (blocks.1).
    template <class Bound>
    block_state block(const std::string& prefix, block_state x)
    {
        using unbound = typename unbound_of<Bound>::type;
        if constexpr (!block_has_form<unbound>::value) {
            return x;
        } else {
            return block_form<unbound>::template emit<Bound>(*this, prefix, x);
        }
    }

    // The initializer of the array Network::parameter_names() names `name`,
    // from the parameters or the state; returns its name.
    std::string array(const std::string& name)
    {
        constexpr auto& names = Network::parameter_names();
        const std::size_t index = find_named_array(names, name);
        if (index == names.size()) {
            raise_error(error_kind::logic_error, ("export_onnx: the network has no array " + name + ".").c_str());
        }
        const named_array& array = names[index];
        const std::span<const T> source = array.role == array_role::parameter ? std::span<const T>(parameters_.values())
                                                                              : std::span<const T>(parameters_.state());
        graph_.add_floats(name, std::span<const std::size_t>(array.extents.data(), array.rank),
                          source.subspan(array.offset, array.size()));
        return name;
    }

    // x as [N, channels, 1, 1] if it is flat, else x.
    value as_image(const std::string& prefix, value x, std::size_t channels)
    {
        if (!x.flat) return x;
        const std::string shape =
            graph_.add_int64s(prefix + "/image_shape", {-1, static_cast<std::int64_t>(channels), 1, 1});
        return graph_.add("Reshape", prefix + "/Reshape", {x.name, shape}, false);
    }
    // x as [N, K].
    value as_flat(const std::string& prefix, value x)
    {
        if (x.flat) return x;
        return graph_.add("Flatten", prefix + "/Flatten", {x.name}, true, {int_attribute("axis", 1)});
    }

    onnx::graph& graph() { return graph_; }

    // ModelProto: ir_version (1), producer_name (2), producer_version (3),
    // graph (7), opset_import (8) = {domain (1), version (2)}.
    std::string model()
    {
        [[maybe_unused]] constexpr bool checked = ends_in_one_tensor<Network>::value;
        block_state state{{"images", false}, {}};
        Network::for_each_block([&](auto i) {
            state = block<typename Network::template block<i>>("blocks." + std::to_string(std::size_t{i}), state);
        });
        const value logits = as_flat("output", state.first);
        if (!graph_.rename(logits.name, "logits")) graph_.add("Identity", "logits", {logits.name}, true);

        using in = typename Network::input;
        const std::size_t image_extents[] = {in::channels, in::height, in::width};
        const std::size_t logit_extents[] = {Network::output::size};
        protobuf::message opset;
        opset.string(1, "").integer(2, onnx_opset);
        protobuf::message model;
        model.integer(1, onnx_ir_version).string(2, "petra").string(3, PETRA_VERSION_STRING);
        model.nested(
            7, graph_.encode(float_tensor_info("images", image_extents), float_tensor_info("logits", logit_extents)));
        model.nested(8, opset);
        return std::move(model.bytes());
    }

private:
    network_parameters_view<Network, const T> parameters_;
    onnx::graph graph_;
};

// The part names of a block (blocks.1.f), as parameter_names.hpp spells them.
template <class Bound>
std::string part(const std::string& prefix, std::size_t k)
{
    return prefix + "." + std::string(Bound::part_names[k]);
}

// ---- Layers.

template <std::size_t In, std::size_t Out, std::size_t Kernel, std::size_t Stride, std::size_t Padding>
struct layer_form<conv2d<In, Out, Kernel, Stride, Padding>> {
    static constexpr bool defined = true;
    template <class Bound, class Writer>
    static value emit(Writer& w, const std::string& prefix, value x)
    {
        x = w.as_image(prefix, x, In);
        constexpr auto k = static_cast<std::int64_t>(Kernel), s = static_cast<std::int64_t>(Stride),
                       p = static_cast<std::int64_t>(Padding);
        return w.graph().add(
            "Conv", prefix + "/Conv", {x.name, w.array(prefix + ".weight")}, false,
            {ints_attribute("kernel_shape", {k, k}), ints_attribute("strides", {s, s}),
             ints_attribute("pads", {p, p, p, p}), ints_attribute("dilations", {1, 1}), int_attribute("group", 1)});
    }
};

template <class Bound, class Writer>
value batch_normalization(Writer& w, const std::string& prefix, value x)
{
    return w.graph().add("BatchNormalization", prefix + "/BatchNormalization",
                         {x.name, w.array(prefix + ".weight"), w.array(prefix + ".bias"),
                          w.array(prefix + ".running_mean"), w.array(prefix + ".running_var")},
                         x.flat, {float_attribute("epsilon", static_cast<float>(Bound::epsilon))});
}

template <std::size_t Channels>
struct layer_form<batch_norm<Channels>> {
    static constexpr bool defined = true;
    template <class Bound, class Writer>
    static value emit(Writer& w, const std::string& prefix, value x)
    {
        return batch_normalization<Bound>(w, prefix, x);
    }
};

template <std::size_t Channels>
struct layer_form<batch_norm_relu<Channels>> {
    static constexpr bool defined = true;
    template <class Bound, class Writer>
    static value emit(Writer& w, const std::string& prefix, value x)
    {
        x = batch_normalization<Bound>(w, prefix, x);
        return w.graph().add("Relu", prefix + "/Relu", {x.name}, x.flat);
    }
};

template <>
struct layer_form<relu> {
    static constexpr bool defined = true;
    template <class Bound, class Writer>
    static value emit(Writer& w, const std::string& prefix, value x)
    {
        return w.graph().add("Relu", prefix + "/Relu", {x.name}, x.flat);
    }
};

template <>
struct layer_form<global_average_pool> {
    static constexpr bool defined = true;
    template <class Bound, class Writer>
    static value emit(Writer& w, const std::string& prefix, value x)
    {
        x = w.as_image(prefix, x, Bound::input::channels);
        return w.graph().add("GlobalAveragePool", prefix + "/GlobalAveragePool", {x.name}, false);
    }
};

template <>
struct layer_form<flatten> {
    static constexpr bool defined = true;
    template <class Bound, class Writer>
    static value emit(Writer& w, const std::string& prefix, value x)
    {
        return w.as_flat(prefix, x);
    }
};

template <std::size_t Inputs, std::size_t Outputs>
struct layer_form<dense<Inputs, Outputs>> {
    static constexpr bool defined = true;
    template <class Bound, class Writer>
    static value emit(Writer& w, const std::string& prefix, value x)
    {
        x = w.as_flat(prefix, x);
        return w.graph().add("Gemm", prefix + "/Gemm", {x.name, w.array(prefix + ".weight"), w.array(prefix + ".bias")},
                             true, {int_attribute("transB", 1)});
    }
};

// ---- Blocks.

template <class F>
struct block_form<stem<F>> {
    static constexpr bool defined = true;
    template <class Bound, class Writer>
    static block_state emit(Writer& w, const std::string& prefix, block_state x)
    {
        const value whole = w.template layer<typename Bound::function>(part<Bound>(prefix, 0), x.first);
        const auto half = static_cast<std::int64_t>(Bound::output::half::channels);
        const std::string sizes = w.graph().add_int64s(prefix + "/split", {half, half});
        const std::string first = prefix + "/Split_0", second = prefix + "/Split_1";
        w.graph().add_multiple("Split", prefix + "/Split", {whole.name, sizes}, {first, second},
                               {int_attribute("axis", 1)});
        return {{first, false}, {second, false}};
    }
};

template <class F>
struct block_form<additive_coupling<F>> {
    static constexpr bool defined = true;
    template <class Bound, class Writer>
    static block_state emit(Writer& w, const std::string& prefix, block_state x)
    {
        const value f = w.template layer<typename Bound::function>(part<Bound>(prefix, 0), x.first);
        const value y = w.graph().add("Add", prefix + "/Add", {x.second.name, f.name}, false);
        return {y, x.first};
    }
};

template <class F, class G>
struct block_form<revnet_coupling<F, G>> {
    static constexpr bool defined = true;
    template <class Bound, class Writer>
    static block_state emit(Writer& w, const std::string& prefix, block_state x)
    {
        const std::string f_prefix = part<Bound>(prefix, 0), g_prefix = part<Bound>(prefix, 1);
        const value f = w.template layer<typename Bound::first>(f_prefix, x.second);
        const value y1 = w.graph().add("Add", f_prefix + "/Add", {x.first.name, f.name}, false);
        const value g = w.template layer<typename Bound::second>(g_prefix, y1);
        const value y2 = w.graph().add("Add", g_prefix + "/Add", {x.second.name, g.name}, false);
        return {y1, y2};
    }
};

template <class F, class G>
struct block_form<downsample<F, G>> {
    static constexpr bool defined = true;
    template <class Bound, class Writer>
    static block_state emit(Writer& w, const std::string& prefix, block_state x)
    {
        const value y = w.template layer<typename Bound::first>(part<Bound>(prefix, 0), x.first);
        const value g = w.template layer<typename Bound::second>(part<Bound>(prefix, 1), x.second);
        const value y_tilde = w.graph().add("Add", prefix + "/Add", {g.name, y.name}, false);
        return {y, y_tilde};
    }
};

template <>
struct block_form<pixel_unshuffle> {
    static constexpr bool defined = true;
    // y[4c + 2dy + dx][i][j] = x[c][2i + dy][2j + dx] (blocks/pixel_unshuffle.hpp).
    template <class Bound, class Writer>
    static block_state emit(Writer& w, const std::string& prefix, block_state x)
    {
        using half = typename Bound::half;
        constexpr auto c = static_cast<std::int64_t>(half::channels), h = static_cast<std::int64_t>(half::height),
                       wd = static_cast<std::int64_t>(half::width);
        const std::string split = w.graph().add_int64s(prefix + "/blocks_shape", {-1, c, h / 2, 2, wd / 2, 2});
        const std::string merged = w.graph().add_int64s(prefix + "/channels_shape", {-1, 4 * c, h / 2, wd / 2});
        const auto unshuffle = [&](const value& v, const std::string& name) {
            const value blocks = w.graph().add("Reshape", prefix + "/" + name + "/Reshape", {v.name, split}, false);
            const value moved = w.graph().add("Transpose", prefix + "/" + name + "/Transpose", {blocks.name}, false,
                                              {ints_attribute("perm", {0, 1, 3, 5, 2, 4})});
            return w.graph().add("Reshape", prefix + "/" + name + "/Reshape_channels", {moved.name, merged}, false);
        };
        return {unshuffle(x.first, "first"), unshuffle(x.second, "second")};
    }
};

template <class F>
struct block_form<head<F>> {
    static constexpr bool defined = true;
    template <class Bound, class Writer>
    static block_state emit(Writer& w, const std::string& prefix, block_state x)
    {
        const value whole = w.graph().add("Concat", prefix + "/Concat", {x.first.name, x.second.name}, false,
                                          {int_attribute("axis", 1)});
        return {w.template layer<typename Bound::function>(part<Bound>(prefix, 0), whole), {}};
    }
};

} // namespace detail::onnx

// The ONNX model of the network's inference graph with these parameters
// and running statistics, as the bytes of an .onnx file (see the top of the
// file). parameters: a network_parameters or a network_parameters_view.
template <network_parameters_like Parameters>
std::string onnx_model_bytes(const Parameters& parameters)
{
    using Network = typename Parameters::network_type;
    using T = typename Parameters::value_type;
    return detail::onnx::writer<Network, T>(network_parameters_view<Network, const T>(parameters)).model();
}

// Writes that model to path, replaced whole (replacing_file.hpp): a crash
// leaves either the old file or the new one. Raises a runtime_error naming
// the file if it cannot be written.
template <network_parameters_like Parameters>
void export_onnx(const Parameters& parameters, const std::string& path)
{
    const std::string bytes = onnx_model_bytes(parameters);
    replacing_file file(path, "export_onnx");
    file.write(bytes.data(), bytes.size());
    file.commit();
}

} // namespace petra
