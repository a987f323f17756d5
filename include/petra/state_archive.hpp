// What a checkpoint archive offers the objects whose state it saves: one
// interface for writing and for reading, so that each object states its
// state once, in one function, and saving and loading cannot drift apart.
//
//   template <state_archive Archive>
//   void transfer_state(Archive& archive)
//   {
//       archive.section("optimizer");
//       archive.expect(velocity_.size(), "optimizer values");
//       archive.values(std::span(velocity_));   // written, or read back in place
//       archive.count(steps_, max_steps);        // read back: refused above the limit
//   }
//
// A writing archive (Archive::loading false) records what it is given; a
// reading one (loading true) overwrites the same objects with what it reads,
// and throws if the file disagrees: another section name, another length, a
// count above its limit, an expected figure that differs. Its errors name the
// file and the section. No floor includes a concrete archive: the checkpoint
// file format lives in train/checkpoint.hpp.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>

namespace petra {

template <class A>
concept state_archive = requires(A& archive, std::string_view name, std::size_t& count, std::size_t limit,
                                 std::span<float> floats, std::span<double> doubles, std::span<std::int32_t> integers,
                                 std::string& text)
{
    requires std::convertible_to<decltype(A::loading), bool>;
    archive.section(name);       // a named mark: sections must come back in the same order
    archive.count(count, limit); // a whole number; read back, it must not exceed limit
    archive.expect(limit, name); // a figure both sides must agree on (a size, a stage count)
    archive.values(floats);      // a run of values of exactly this length
    archive.values(doubles);
    archive.values(integers);
    archive.text(text); // bytes of any length
};

// The limit of a count that no figure of the saving side bounds (a step
// counter, a position).
inline constexpr std::size_t any_count = std::numeric_limits<std::size_t>::max();

// A flag, through count().
template <state_archive Archive>
void transfer_flag(Archive& archive, bool& flag)
{
    std::size_t value = flag ? 1 : 0;
    archive.count(value, 1);
    flag = value != 0;
}

} // namespace petra
