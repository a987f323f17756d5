// A network's weights as a NumPy .npz file (the interchange floor, above
// network.hpp): one array per named array of the network
// (parameter_names.hpp), keyed by its name and shaped as PyTorch shapes the
// same tensor, so that numpy.load reads it and a PyTorch state_dict of the
// same model has the same keys (scripts/torch_weights converts).
//
//   save_npz("weights.npz", parameters);     // float32 for float parameters
//   load_npz("weights.npz", parameters);     // or a network_parameters_view
//
// Loading refuses, with one sentence naming the array, a name the network
// does not have, a name of the network the file lacks, a wrong shape, a
// dtype other than float32 or float64 (float64 is rounded into float
// parameters, float32 widened into double ones), a truncated or corrupt
// file; the parameters and running statistics change only once the whole
// file has been checked, so a refused file changes nothing.
//
// The embedded path: load_npz of the file's bytes already in memory (a blob
// in flash, a buffer the caller filled) into a network_parameters_view of
// the caller's storage allocates nothing (except to report an error).
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include <petra/interchange/npz_format.hpp>
#include <petra/network.hpp>
#include <petra/parameter_names.hpp>

namespace petra {

// Writes every named array of the network to `path` (replaced whole).
template <network_parameters_like Parameters>
void save_npz(const std::string& path, const Parameters& parameters)
{
    using Network = typename Parameters::network_type;
    using T = typename Parameters::value_type;
    const network_parameters_view<Network, const T> view(parameters);
    npz_writer out(path);
    for (const named_array& array : Network::parameter_names()) {
        const std::span<const T> all =
            array.role == array_role::parameter ? std::span<const T>(view.values()) : std::span<const T>(view.state());
        out.add(array.name.view(), all.subspan(array.offset, array.size()),
                std::span<const std::size_t>(array.extents.data(), array.rank));
    }
    out.commit();
}

// Loads an archive already checked as an archive into the parameters: every
// array is first matched with the network's (name, shape), then copied.
template <class Network, class T>
void load_npz(const npz_archive_view& archive, network_parameters_view<Network, T> parameters)
{
    static_assert(!std::is_const_v<T>, "load_npz writes the parameters: it needs a writable view.");
    constexpr auto& names = Network::parameter_names();
    std::array<bool, names.size()> present{};
    archive.for_each([&](const npz_array& array) {
        const std::size_t i = find_named_array(names, array.name);
        if (i == names.size()) {
            archive.fail("holds an array '" + std::string(array.name) + "' that the network does not have");
        }
        const std::span<const std::size_t> expected(names[i].extents.data(), names[i].rank);
        if (!std::equal(expected.begin(), expected.end(), array.shape().begin(), array.shape().end())) {
            archive.fail("holds the array '" + std::string(array.name) + "' of shape " + shape_text(array.shape()) +
                         "; the network's is " + shape_text(expected));
        }
        present[i] = true;
    });
    for (std::size_t i = 0; i < names.size(); ++i) {
        if (!present[i]) {
            archive.fail("has no array '" + std::string(names[i].name.view()) + "' (shape " +
                         shape_text(std::span<const std::size_t>(names[i].extents.data(), names[i].rank)) +
                         "), which the network needs");
        }
    }
    archive.for_each([&](const npz_array& array) {
        const named_array& named = names[find_named_array(names, array.name)];
        const std::span<T> all =
            named.role == array_role::parameter ? std::span<T>(parameters.values()) : std::span<T>(parameters.state());
        copy_values(array, all.subspan(named.offset, named.size()));
    });
}

// From the file's bytes in memory; allocates nothing. `label` names the
// file in messages.
template <class Network, class T>
void load_npz(std::span<const std::byte> file, network_parameters_view<Network, T> parameters,
              std::string_view label = "the archive")
{
    load_npz(npz_archive_view(file, label), parameters);
}

// From a file.
template <class Network, class T>
void load_npz(const std::string& path, network_parameters_view<Network, T> parameters)
{
    const npz_file file(path);
    load_npz(file.archive(), parameters);
}
template <class Network, class T>
void load_npz(const std::string& path, network_parameters<Network, T>& parameters)
{
    load_npz(path, network_parameters_view<Network, T>(parameters));
}

} // namespace petra
