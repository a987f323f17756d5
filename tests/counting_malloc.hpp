// A counting malloc for the tests that must allocate nothing: it replaces
// malloc, calloc, realloc, posix_memalign and aligned_alloc (which operator
// new and petra's aligned buffers all reach) and counts every call, on every
// thread, in petra::test::allocations. Include it in exactly one translation
// unit of a program (it defines the replacements), never in a sanitizer
// build (sanitizers replace malloc themselves). glibc only: the replacements
// forward to glibc's own __libc_* entry points.
#pragma once

#include <atomic>
#include <cstddef>

extern "C" {
void* __libc_malloc(std::size_t size);
void* __libc_calloc(std::size_t count, std::size_t size);
void* __libc_realloc(void* memory, std::size_t size);
void* __libc_memalign(std::size_t alignment, std::size_t size);
}

namespace petra::test {
// Allocations counted since the program started.
inline std::atomic<std::size_t> allocations{0};
} // namespace petra::test

extern "C" void* malloc(std::size_t size)
{
    petra::test::allocations.fetch_add(1, std::memory_order_relaxed);
    return __libc_malloc(size);
}
extern "C" void* calloc(std::size_t count, std::size_t size)
{
    petra::test::allocations.fetch_add(1, std::memory_order_relaxed);
    return __libc_calloc(count, size);
}
extern "C" void* realloc(void* memory, std::size_t size)
{
    petra::test::allocations.fetch_add(1, std::memory_order_relaxed);
    return __libc_realloc(memory, size);
}
extern "C" int posix_memalign(void** memory, std::size_t alignment, std::size_t size)
{
    petra::test::allocations.fetch_add(1, std::memory_order_relaxed);
    *memory = __libc_memalign(alignment, size);
    return *memory == nullptr && size != 0 ? 12 /* ENOMEM */ : 0;
}
extern "C" void* aligned_alloc(std::size_t alignment, std::size_t size)
{
    petra::test::allocations.fetch_add(1, std::memory_order_relaxed);
    return __libc_memalign(alignment, size);
}
