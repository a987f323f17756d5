// A fingerprint of the trained network, to tell two runs' ends apart.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

#include <petra/petra.hpp>

#include "model.hpp"

namespace fashion {

// FNV-1a of the parameters' and running statistics' bytes, 16 hex digits:
// two runs that end with equal digests ended with equal networks.
inline std::string parameter_digest(const petra::network_parameters<net, float>& parameters)
{
    std::uint64_t hash = 14695981039346656037ull;
    auto mix = [&](std::span<const float> values) {
        const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
        for (std::size_t i = 0; i < values.size_bytes(); ++i) {
            hash ^= bytes[i];
            hash *= 1099511628211ull;
        }
    };
    mix(parameters.values());
    mix(parameters.state());
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
    return text;
}

} // namespace fashion
