// Reads a markdown file and sorts its C++ blocks (```cpp fences):
// - a block after a line saying it is an excerpt of a file under examples/
//   ("An excerpt of [`examples/two_spirals.cpp`](...):") must be a run of
//   consecutive lines of that file, verbatim (indentation of a list item
//   aside);
// - any other block that contains `int main(` is a complete program: it is
//   written to <output>/<prefix>_line_<N>.cpp (N the line of its opening
//   fence), after a #line directive so that a compiler's messages name the
//   markdown file and its lines;
// - any block that is neither is refused with a message naming its line.
// Shell blocks (```sh fences) after a line that ends "(the readme test runs
// these commands):" are written to <output>/<prefix>_line_<N>.sh, to be run
// in order from a directory where scripts/, bench/ and build/ stand for the
// source tree's and the build tree's (run.cmake); other shell blocks are
// illustrations and are left alone.
// A program after a line that ends "(the readme test interrupts it and
// resumes it):" is also listed in <output>/interrupted.txt: run.cmake stops
// it with SIGINT once its checkpoint exists, runs it again, and compares the
// digest it prints last with an uninterrupted run's (interrupt_and_resume.sh).
// Then writes <output>/CMakeLists.txt, one target per program against an
// installed petra (find_package, petra::petra) with warnings as errors,
// <output>/programs.txt, the targets one a line, and <output>/commands.txt,
// the shell scripts one a line.
//
// Usage: readme_extract MARKDOWN OUTPUT_DIRECTORY SOURCE_DIRECTORY [PREFIX]
// (excerpts are looked up from SOURCE_DIRECTORY; PREFIX, "readme" unless
// given, starts the names of the targets and scripts, so that the programs
// of several documents can be built in one project). Exit status 0 when every
// block is accounted for, 1 otherwise, after every problem is reported.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace {

struct code_block {
    std::size_t fence_line = 0;     // 1-based line of the opening fence
    std::vector<std::string> lines; // without the fence's indentation
    std::string preceding;          // the last non-blank line before the fence
    bool shell = false;             // a ```sh block, else C++
};

std::vector<std::string> read_lines(const std::filesystem::path& path)
{
    std::ifstream file(path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(file, line);) lines.push_back(line);
    return lines;
}

std::size_t indentation(const std::string& line)
{
    const std::size_t first = line.find_first_not_of(' ');
    return first == std::string::npos ? line.size() : first;
}

bool blank(const std::string& line) { return line.find_first_not_of(" \t") == std::string::npos; }

// The C++ and shell blocks of a markdown file; other fenced blocks are
// skipped.
std::vector<code_block> code_blocks(const std::vector<std::string>& lines, std::vector<std::string>& problems,
                                    const std::string& name)
{
    static const std::regex cpp_fence(R"(^( *)```\s*(cpp|c\+\+|cxx|cc|hpp|C\+\+)\s*$)");
    static const std::regex shell_fence(R"(^( *)```\s*(sh|bash|shell)\s*$)");
    static const std::regex any_fence(R"(^( *)```.*$)");
    std::vector<code_block> blocks;
    std::string last_text;
    for (std::size_t i = 0; i < lines.size(); ++i) {
        std::smatch match;
        const bool is_cpp = std::regex_match(lines[i], match, cpp_fence);
        const bool is_shell = !is_cpp && std::regex_match(lines[i], match, shell_fence);
        if (!is_cpp && !is_shell && !std::regex_match(lines[i], match, any_fence)) {
            if (!blank(lines[i])) last_text = lines[i];
            continue;
        }
        const std::size_t indent = std::size_t(match[1].length());
        code_block block{i + 1, {}, last_text, is_shell};
        std::size_t j = i + 1;
        for (; j < lines.size(); ++j) {
            const std::string& line = lines[j];
            if (line.compare(indentation(line), 3, "```") == 0) break;
            block.lines.push_back(line.substr(std::min(indent, indentation(line))));
        }
        if (j == lines.size()) problems.push_back(name + ":" + std::to_string(i + 1) + ": this fence is never closed.");
        if (is_cpp || is_shell) blocks.push_back(block);
        last_text.clear();
        i = j;
    }
    return blocks;
}

// Whether the line before a shell block says the readme test runs it.
bool runs_in_test(const std::string& preceding)
{
    static const std::regex marker(R"(\(the readme test runs these commands\):\s*$)");
    return std::regex_search(preceding, marker);
}

// Whether the line before a program says the readme test interrupts it.
bool interrupted_in_test(const std::string& preceding)
{
    static const std::regex marker(R"(\(the readme test interrupts it and resumes it\):\s*$)");
    return std::regex_search(preceding, marker);
}

bool contains_main(const code_block& block)
{
    static const std::regex main_function(R"(\bint\s+main\s*\()");
    return std::any_of(block.lines.begin(), block.lines.end(),
                       [](const std::string& line) { return std::regex_search(line, main_function); });
}

// The file an excerpt says it comes from ("excerpt of ... examples/x.cpp"),
// or empty.
std::string excerpt_source(const std::string& preceding)
{
    static const std::regex marker(R"([Ee]xcerpt of\b[^`\[]*[`\[]+(examples/[A-Za-z0-9_./-]+))");
    std::smatch match;
    return std::regex_search(preceding, match, marker) ? match[1].str() : std::string();
}

// Whether `part` appears in `whole` as a run of consecutive lines.
bool contiguous_in(const std::vector<std::string>& part, const std::vector<std::string>& whole)
{
    return !part.empty() && std::search(whole.begin(), whole.end(), part.begin(), part.end()) != whole.end();
}

void write_program(const code_block& block, const std::filesystem::path& markdown, const std::filesystem::path& to)
{
    std::ofstream out(to);
    out << "#line " << block.fence_line + 1 << " \"" << markdown.string() << "\"\n";
    for (const std::string& line : block.lines) out << line << '\n';
}

// Whether a program includes Google Benchmark (petra/benchmark.hpp's users):
// it then links it too, and runs with a short minimum time.
bool uses_benchmark(const code_block& block)
{
    return std::any_of(block.lines.begin(), block.lines.end(), [](const std::string& line) {
        return line.find("#include <benchmark/benchmark.h>") != std::string::npos;
    });
}

void write_commands(const code_block& block, const std::filesystem::path& markdown, const std::filesystem::path& to)
{
    std::ofstream out(to);
    out << "# " << markdown.string() << ", line " << block.fence_line + 1 << " on\n";
    for (const std::string& line : block.lines) out << line << '\n';
}

void write_project(const std::vector<std::string>& targets, const std::vector<std::string>& benchmark_targets,
                   const std::vector<std::string>& interrupted_targets, const std::vector<std::string>& scripts,
                   const std::filesystem::path& directory)
{
    std::ofstream interrupted(directory / "interrupted.txt");
    for (const std::string& target : interrupted_targets) interrupted << target << '\n';
    std::ofstream commands(directory / "commands.txt");
    for (const std::string& script : scripts) commands << script << '\n';
    std::ofstream cmake(directory / "CMakeLists.txt");
    cmake << "# Generated by readme_extract: a document's complete programs, built as a user's project would.\n"
             "cmake_minimum_required(VERSION 3.25)\n"
             "project(petra_readme_programs LANGUAGES CXX)\n"
             "find_package(petra 0.2 REQUIRED CONFIG)\n";
    if (!benchmark_targets.empty()) cmake << "find_package(benchmark REQUIRED)\n";
    for (const std::string& target : targets) {
        const bool benchmark =
            std::find(benchmark_targets.begin(), benchmark_targets.end(), target) != benchmark_targets.end();
        cmake << "add_executable(" << target << ' ' << target << ".cpp)\n"
              << "target_link_libraries(" << target << " PRIVATE petra::petra"
              << (benchmark ? " benchmark::benchmark" : "") << ")\n"
              << "target_compile_options(" << target << " PRIVATE -Wall -Wextra -Wpedantic -Werror)\n";
    }
    std::ofstream list(directory / "programs.txt");
    for (const std::string& target : targets) list << target << '\n';
    std::ofstream benchmarks(directory / "benchmarks.txt");
    for (const std::string& target : benchmark_targets) benchmarks << target << '\n';
}

} // namespace

int main(int argc, char** argv)
{
    if (argc != 4 && argc != 5) {
        std::fprintf(stderr, "usage: readme_extract MARKDOWN OUTPUT_DIRECTORY SOURCE_DIRECTORY [PREFIX]\n");
        return 2;
    }
    const std::string prefix = argc == 5 ? std::string(argv[4]) + "_line_" : std::string("readme_line_");
    const std::filesystem::path markdown = std::filesystem::absolute(argv[1]), output = argv[2], source = argv[3];
    const std::vector<std::string> lines = read_lines(markdown);
    if (lines.empty()) {
        std::fprintf(stderr, "readme_extract: %s is missing or empty.\n", markdown.c_str());
        return 1;
    }
    const std::string name = markdown.filename().string();
    std::vector<std::string> problems;
    const std::vector<code_block> blocks = code_blocks(lines, problems, name);
    std::filesystem::create_directories(output);

    std::vector<std::string> targets, benchmark_targets, interrupted_targets, scripts;
    std::size_t excerpts = 0, cpp_count = 0;
    for (const code_block& block : blocks) {
        const std::string at = name + ":" + std::to_string(block.fence_line) + ": ";
        if (block.shell) {
            if (runs_in_test(block.preceding)) {
                scripts.push_back(prefix + std::to_string(block.fence_line) + ".sh");
                write_commands(block, markdown, output / scripts.back());
            }
            continue;
        }
        ++cpp_count;
        const std::string file = excerpt_source(block.preceding);
        if (file.empty() && contains_main(block)) {
            const std::string target = prefix + std::to_string(block.fence_line);
            write_program(block, markdown, output / (target + ".cpp"));
            targets.push_back(target);
            if (uses_benchmark(block)) benchmark_targets.push_back(target);
            if (interrupted_in_test(block.preceding)) interrupted_targets.push_back(target);
        } else if (file.empty()) {
            problems.push_back(at + "this ```cpp block is neither a complete program (with int main) nor marked as "
                                    "an excerpt (a line before it: \"An excerpt of `examples/<file>`:\").");
        } else if (!std::filesystem::is_regular_file(source / file)) {
            problems.push_back(at + "this block is marked as an excerpt of " + file + ", which does not exist.");
        } else if (!contiguous_in(block.lines, read_lines(source / file))) {
            problems.push_back(at + "this block is marked as an excerpt of " + file +
                               ", but its lines are not a contiguous run of that file's lines.");
        } else {
            ++excerpts;
        }
    }
    write_project(targets, benchmark_targets, interrupted_targets, scripts, output);
    for (const std::string& problem : problems) std::fprintf(stderr, "%s\n", problem.c_str());
    std::printf("%s: %zu C++ blocks, %zu complete programs (%zu interrupted and resumed), %zu checked excerpts, %zu "
                "shell blocks run\n",
                name.c_str(), cpp_count, targets.size(), interrupted_targets.size(), excerpts, scripts.size());
    return problems.empty() ? 0 : 1;
}
