// The command lines of the benchmark programs that are not Google
// Benchmark's: --help, and options that each take a positive count.
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace petra::bench {

// An option "--name N" and where its count goes.
struct count_option {
    const char* name;
    std::size_t* count;
};

// Reads argv: --help prints usage and ends the program with status 0; each
// count option takes a positive count; any other option goes to `flag`,
// which returns whether it took it (it may end the program itself). A bad
// option ends the program with status 2, after a sentence and the usage on
// stderr.
inline void read_command_line(int argc, char** argv, const char* program, const char* usage,
                              std::initializer_list<count_option> counts,
                              const std::function<bool(const std::string&)>& flag = {})
{
    try {
        for (int i = 1; i < argc; ++i) {
            const std::string name = argv[i];
            if (name == "--help") {
                std::fputs(usage, stdout);
                std::exit(0);
            }
            bool taken = false;
            for (const count_option& option : counts) {
                if (name != option.name) continue;
                if (i + 1 == argc) throw std::invalid_argument(name + " needs a positive count");
                char* end = nullptr;
                const char* text = argv[++i];
                const unsigned long long value = std::strtoull(text, &end, 10);
                if (end == text || *end != '\0' || value == 0) {
                    throw std::invalid_argument(name + " needs a positive count");
                }
                *option.count = std::size_t(value);
                taken = true;
            }
            if (!taken && !(flag && flag(name))) throw std::invalid_argument("unknown option " + name);
        }
    } catch (const std::invalid_argument& error) {
        std::fprintf(stderr, "%s: %s\n%s", program, error.what(), usage);
        std::exit(2);
    }
}

} // namespace petra::bench
