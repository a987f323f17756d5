// A fingerprint of the trained network, to tell two runs' ends apart.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

#include <petra/petra.hpp>

namespace fashion {

// FNV-1a, from its offset basis, over values' bytes; chained calls hash the
// concatenation, so that pieces held by several processes hash as one.
inline constexpr std::uint64_t digest_basis = 14695981039346656037ull;
inline std::uint64_t digest_of(std::uint64_t hash, std::span<const float> values)
{
    const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
    for (std::size_t i = 0; i < values.size_bytes(); ++i) {
        hash ^= bytes[i];
        hash *= 1099511628211ull;
    }
    return hash;
}

// 16 hex digits.
inline std::string digest_text(std::uint64_t hash)
{
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
    return text;
}

// FNV-1a of the parameters' and running statistics' bytes, 16 hex digits:
// two runs that end with equal digests ended with equal networks.
template <class Net>
std::string parameter_digest(const petra::network_parameters<Net, float>& parameters)
{
    return digest_text(digest_of(digest_of(digest_basis, parameters.values()), parameters.state()));
}

} // namespace fashion
