// How petra reports an error (floor 1: the kernels use it, and it includes
// no other petra header). Every check of the floors a training step or an
// inference needs (kernels, layers, blocks, network, pipeline, trainers,
// optimizer) ends in raise_error(kind, message) when it fails:
//
// - compiled with exceptions (__cpp_exceptions defined, PETRA_EXCEPTIONS is
//   1), raise_error throws std::invalid_argument, std::logic_error or
//   std::runtime_error, as `kind` says, carrying `message`;
// - compiled without (-fno-exceptions, PETRA_EXCEPTIONS is 0), it calls the
//   error handler with the kind and the message. The handler must not
//   return: the default one prints "petra: <kind>: <message>" to stderr and
//   aborts; set_error_handler installs your own (log to a serial port, reset
//   a device...). Should a handler return anyway, the program aborts.
//
//   [[noreturn]] void on_error(petra::error_kind kind, const char* message)
//   {
//       log_line(petra::error_kind_name(kind), message);
//       reboot();
//   }
//   petra::set_error_handler(on_error);
//
// Checkpoint files and the data floor report with exceptions only: without
// exceptions their headers stop the build with #error.
#pragma once

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
#define PETRA_EXCEPTIONS 1
#include <stdexcept>
#else
#define PETRA_EXCEPTIONS 0
#endif

namespace petra {

// What went wrong, as the exception it is thrown as.
enum class error_kind {
    invalid_argument, // a caller's argument the function cannot take (std::invalid_argument)
    logic_error,      // a call out of order, a broken schedule (std::logic_error)
    runtime_error,    // a failure of the computation itself, such as a loss that is not finite (std::runtime_error)
};

// "invalid_argument", "logic_error" or "runtime_error".
constexpr const char* error_kind_name(error_kind kind)
{
    switch (kind) {
    case error_kind::invalid_argument: return "invalid_argument";
    case error_kind::logic_error: return "logic_error";
    case error_kind::runtime_error: return "runtime_error";
    }
    return "error";
}

// Called, without exceptions, with the kind and the message of the error;
// must not return.
using error_handler = void (*)(error_kind kind, const char* message);

// Prints "petra: <kind>: <message>" and a newline to stderr, then aborts.
[[noreturn]] inline void print_and_abort(error_kind kind, const char* message)
{
    std::fprintf(stderr, "petra: %s: %s\n", error_kind_name(kind), message);
    std::abort();
}

namespace detail {
// One handler for the whole program (an inline variable); atomic, so that a
// pipeline's stage threads read what the caller's thread set.
inline std::atomic<error_handler> current_error_handler{&print_and_abort};
} // namespace detail

// Installs handler (nullptr restores the default, print_and_abort) and
// returns the one it replaces. Used only without exceptions.
inline error_handler set_error_handler(error_handler handler) noexcept
{
    return detail::current_error_handler.exchange(handler != nullptr ? handler : &print_and_abort);
}

inline error_handler get_error_handler() noexcept { return detail::current_error_handler.load(); }

// Reports an error: throws the exception of `kind` with `message`, or, without
// exceptions, calls the error handler with them (see the top of the file).
[[noreturn]] inline void raise_error(error_kind kind, const char* message)
{
#if PETRA_EXCEPTIONS
    switch (kind) {
    case error_kind::invalid_argument: throw std::invalid_argument(message);
    case error_kind::logic_error: throw std::logic_error(message);
    case error_kind::runtime_error: throw std::runtime_error(message);
    }
    throw std::logic_error(message);
#else
    get_error_handler()(kind, message);
    std::abort(); // a handler that returns breaks its contract
#endif
}

[[noreturn]] inline void raise_error(error_kind kind, const std::string& message)
{
    raise_error(kind, message.c_str());
}

} // namespace petra
