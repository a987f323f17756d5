// The job's part of its checkpoint: the recipe, first in the file, so that a
// run resumes only under the same options and a command of other ones is told
// which (petra::training_loop saves and checks the rest).
#pragma once

#include <array>
#include <charconv>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include <petra/petra.hpp>

#include "options.hpp"

namespace fashion {

// The options a checkpoint's run must share with the command, in the order
// a mismatch is looked for, with their values as text (numbers in their
// shortest exact form).
inline std::array<std::pair<const char*, std::string>, 15> recipe_options(const training_recipe& recipe)
{
    const auto text = [](auto value) {
        std::array<char, 64> digits{};
        return std::string(digits.data(), std::to_chars(digits.data(), digits.data() + digits.size(), value).ptr);
    };
    return {{{"--method", std::string(name_of(recipe.method))},
             {"--stages", text(recipe.stages)},
             {"--accumulation", text(recipe.accumulation)},
             {"--epochs", text(recipe.epochs)},
             {"--batch", text(recipe.batch)},
             {"--max-steps", text(recipe.max_steps)},
             {"--seed", text(recipe.seed)},
             {"--augment", recipe.augment ? "on" : "off"},
             {"--schedule", std::string(name_of(recipe.schedule))},
             {"--lr", text(recipe.learning_rate)},
             {"--warmup", text(recipe.warmup_epochs)},
             {"--delay-rate-exponent", text(recipe.delay_rate_exponent)},
             {"--momentum", text(recipe.momentum)},
             {"--weight-decay", text(recipe.weight_decay)},
             {"--replicas", text(recipe.replicas)}}};
}

// The recipe and the data's micro-batches per epoch. Loading names the
// first that differs (std::invalid_argument).
template <petra::state_archive Archive>
void transfer_recipe(Archive& archive, const training_recipe& recipe, std::size_t batches_per_epoch)
{
    archive.section("job options");
    for (auto& [option, asked] : recipe_options(recipe)) {
        std::string saved = asked;
        archive.text(saved);
        if (saved != asked) {
            throw std::invalid_argument(std::string(option) + ": the checkpoint's run used " + saved +
                                        ", this command asks for " + asked +
                                        "; resume with the options the run started with.");
        }
    }
    std::size_t saved_batches_per_epoch = batches_per_epoch;
    archive.count(saved_batches_per_epoch, petra::any_count);
    if (saved_batches_per_epoch != batches_per_epoch) {
        throw std::invalid_argument("the training set gives " + std::to_string(batches_per_epoch) +
                                    " micro-batches per epoch here, " + std::to_string(saved_batches_per_epoch) +
                                    " in the checkpoint's run: resume on the same data.");
    }
}

} // namespace fashion
