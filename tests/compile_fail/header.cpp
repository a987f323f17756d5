// The target that owns the compile-fail cases' precompiled petra/core.hpp
// (tests/CMakeLists.txt): it compiles, and nothing else is asked of it.
