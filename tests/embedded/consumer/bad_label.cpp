// Without exceptions, an error reaches the error handler with its message:
// a training step with a label outside the classes. `bad_label custom`
// installs a handler that prints "handler: <kind>: <message>" and exits
// with status 3; `bad_label default` keeps the default one, which prints
// "petra: <kind>: <message>" and aborts. Neither returns to main.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <petra/petra.hpp>

using namespace petra;

namespace {

[[noreturn]] void report_and_exit(error_kind kind, const char* message)
{
    std::fprintf(stderr, "handler: %s: %s\n", error_kind_name(kind), message);
    std::_Exit(3);
}

using net =
    network<input<4>, stem<chain<dense<4, 8>, relu>>, additive_coupling<chain<dense<4, 4>, relu>>, head<dense<8, 10>>>;

} // namespace

int main(int argc, char** argv)
{
    if (argc == 2 && std::strcmp(argv[1], "custom") == 0) set_error_handler(report_and_exit);
    auto parameters = net::make_parameters<float>(1);
    exact_backprop<net, float> trainer(4);
    const std::vector<float> images(4 * 4, 0.5f);
    const std::vector<std::int32_t> labels{0, 1, 12, 2};
    std::vector<float> gradient(net::parameter_count);
    trainer.accumulate_gradient(parameters, 4, images.data(), labels.data(), gradient);
    std::printf("the bad label was not reported\n");
    return 0;
}
