// The names of a network's arrays (floor 5): every parameter array and
// running statistic of any network gets a stable name and a shape, derived
// at compile time from the network's type list, so that weights files and
// exported graphs can say which array is which.
//
// The rule, from the outside in, parts joined by dots:
//   blocks.<i>    the block's index in the network, from 0 (a repeated<...>
//                 or block_sequence<...> counts each of its blocks);
//   <part>        the block's function: f for the one of a stem, a coupling
//                 or a head; f and g for the two of a revnet_coupling or a
//                 downsample (a block states its part_names);
//   <j>           for a chain, the index of the layer in chain<...> as the
//                 user wrote it, from 0, parameter-free layers (relu)
//                 counted; again for a chain inside a chain; nothing for a
//                 function that is a single layer;
//   <array>       the layer's array (layers/named_arrays.hpp): weight, bias,
//                 running_mean, running_var, or parameters and state for a
//                 layer that names nothing.
// So the second convolution of the first coupling of the reference network
// is blocks.1.f.3.weight, of shape [16, 16, 3, 3], and its batch norm's
// running mean blocks.1.f.4.running_mean: the keys of the same model's
// PyTorch state_dict (bench/peer/networks.py).
//
//   constexpr auto& names = net::parameter_names();  // std::array<named_array, N>
//   for (const named_array& array : names) std::cout << array.name.view() << '\n';
#pragma once

#include <array>
#include <cstddef>
#include <string_view>
#include <type_traits>

#include <petra/layers/named_arrays.hpp>
#include <petra/type_list.hpp>

namespace petra {

// Called only where a name outgrows array_name's capacity: not constexpr, so
// that such a network fails to compile with this function's name in the
// message.
inline void array_name_longer_than_its_capacity() {}

// A name built at compile time: at most `capacity` characters.
class array_name {
public:
    static constexpr std::size_t capacity = 95;

    constexpr std::string_view view() const { return {text_.data(), length_}; }
    constexpr std::size_t size() const { return length_; }

    constexpr array_name& append(std::string_view part)
    {
        if (length_ + part.size() > capacity) array_name_longer_than_its_capacity();
        for (char c : part) text_[length_++] = c;
        return *this;
    }
    constexpr array_name& append(std::size_t number)
    {
        std::array<char, 20> digits{};
        std::size_t count = 0;
        do {
            digits[count++] = static_cast<char>('0' + number % 10);
            number /= 10;
        } while (number > 0);
        while (count > 0) append(std::string_view(&digits[--count], 1));
        return *this;
    }

    friend constexpr bool operator==(const array_name& a, const array_name& b) { return a.view() == b.view(); }

private:
    std::array<char, capacity + 1> text_{};
    std::size_t length_ = 0;
};

// One array of a network: its full name, which of the network's arrays holds
// it (values() for a parameter, state() for a running statistic), where its
// first value lies there, and its shape (row-major, as PyTorch lays out the
// same tensor).
struct named_array {
    array_name name;
    array_role role = array_role::parameter;
    std::size_t offset = 0;
    std::size_t rank = 0;
    std::array<std::size_t, 4> extents{};

    constexpr std::size_t size() const
    {
        std::size_t values = 1;
        for (std::size_t axis = 0; axis < rank; ++axis) values *= extents[axis];
        return values;
    }
};

namespace detail {

template <class Bound>
concept names_its_arrays = (requires { Bound::named_arrays; });

template <class Bound>
concept made_of_parts = (requires { typename Bound::parts; });

template <class Bound>
constexpr std::size_t part_count()
{
    return Bound::parts::parameter_offsets.size() - 1;
}

// Whether a layer's named arrays add up to its parameters and its state.
template <class Bound>
constexpr bool named_arrays_cover_layer()
{
    std::size_t parameters = 0, state = 0;
    for (const layer_array& array : Bound::named_arrays) {
        (array.role == array_role::parameter ? parameters : state) += array.size();
    }
    return parameters == Bound::parameter_count && state == Bound::state_count;
}

// How many named arrays a bound layer or block has.
template <class Bound>
constexpr std::size_t named_array_count()
{
    if constexpr (names_its_arrays<Bound>) {
        return Bound::named_arrays.size();
    } else if constexpr (made_of_parts<Bound>) {
        return ([&]<std::size_t... K>(std::index_sequence<K...>) {
            return (std::size_t{0} + ... + named_array_count<typename Bound::parts::template function_at<K>>());
        })(std::make_index_sequence<part_count<Bound>()>{});
    } else {
        return std::size_t{Bound::parameter_count > 0} + std::size_t{Bound::state_count > 0};
    }
}

// The name of part K of a composite: its part name, the user's index of a
// chain's layer, or else its index.
template <class Bound>
constexpr void append_part(array_name& name, std::size_t k)
{
    if constexpr (requires { Bound::part_names; }) {
        name.append(Bound::part_names[k]);
    } else if constexpr (requires { Bound::layer_positions; }) {
        name.append(Bound::layer_positions[k]);
    } else {
        name.append(k);
    }
}

template <std::size_t N>
constexpr void add_array(std::array<named_array, N>& out, std::size_t& next, const array_name& prefix,
                         std::string_view last, array_role role, std::size_t offset, std::size_t rank,
                         std::array<std::size_t, 4> extents)
{
    named_array& entry = out[next++];
    entry.name = prefix;
    entry.name.append(last);
    entry.role = role;
    entry.offset = offset;
    entry.rank = rank;
    entry.extents = extents;
}

// Writes Bound's named arrays to out[next...], their names behind prefix,
// their offsets from those of Bound's first parameter and state value.
template <class Bound, std::size_t N>
constexpr void name_arrays(const array_name& prefix, std::size_t parameter_offset, std::size_t state_offset,
                           std::array<named_array, N>& out, std::size_t& next)
{
    if constexpr (names_its_arrays<Bound>) {
        static_assert(named_arrays_cover_layer<Bound>(),
                      "A layer's named_arrays do not add up to its parameter_count and state_count "
                      "(layers/named_arrays.hpp).");
        for (const layer_array& array : Bound::named_arrays) {
            std::size_t& offset = array.role == array_role::parameter ? parameter_offset : state_offset;
            add_array(out, next, prefix, array.name, array.role, offset, array.rank, array.extents);
            offset += array.size();
        }
    } else if constexpr (made_of_parts<Bound>) {
        using parts = typename Bound::parts;
        for_each_index<part_count<Bound>()>([&](auto k) {
            array_name name = prefix;
            append_part<Bound>(name, k);
            name.append(".");
            name_arrays<typename parts::template function_at<k>>(name, parameter_offset + parts::parameter_offsets[k],
                                                                 state_offset + parts::state_offsets[k], out, next);
        });
    } else {
        if constexpr (Bound::parameter_count > 0) {
            add_array(out, next, prefix, "parameters", array_role::parameter, parameter_offset, 1,
                      {Bound::parameter_count});
        }
        if constexpr (Bound::state_count > 0) {
            add_array(out, next, prefix, "state", array_role::state, state_offset, 1, {Bound::state_count});
        }
    }
}

template <class Network>
constexpr std::size_t network_named_array_count()
{
    return ([&]<std::size_t... I>(std::index_sequence<I...>) {
        return (std::size_t{0} + ... + named_array_count<typename Network::template block<I>>());
    })(std::make_index_sequence<Network::block_count>{});
}

template <class Network>
constexpr auto name_network_arrays()
{
    std::array<named_array, network_named_array_count<Network>()> arrays{};
    std::size_t next = 0;
    for_each_index<Network::block_count>([&](auto i) {
        array_name prefix;
        prefix.append("blocks.").append(std::size_t{i}).append(".");
        name_arrays<typename Network::template block<i>>(prefix, Network::parameter_offsets[i],
                                                         Network::state_offsets[i], arrays, next);
    });
    return arrays;
}

template <std::size_t N>
constexpr bool names_are_distinct(const std::array<named_array, N>& arrays)
{
    for (std::size_t i = 0; i < N; ++i) {
        for (std::size_t j = i + 1; j < N; ++j) {
            if (arrays[i].name == arrays[j].name) return false;
        }
    }
    return true;
}

} // namespace detail

// Every named array of Network, block after block, each block's parameters
// and state in the order they lie in memory. A constexpr std::array; also
// Network::parameter_names().
template <class Network>
inline constexpr auto parameter_names_of = detail::name_network_arrays<Network>();

// The index in `arrays` of the array named `name`, or arrays.size().
template <std::size_t N>
constexpr std::size_t find_named_array(const std::array<named_array, N>& arrays, std::string_view name)
{
    for (std::size_t i = 0; i < N; ++i) {
        if (arrays[i].name.view() == name) return i;
    }
    return N;
}

} // namespace petra
