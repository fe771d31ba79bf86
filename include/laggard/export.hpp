#pragma once

// Symbols are hidden by default (see CMakeLists.txt); the public API is marked with LAGGARD_API.
#if defined(LAGGARD_STATIC_DEFINE)
#define LAGGARD_API
#elif defined(_WIN32)
#if defined(LAGGARD_BUILDING)
#define LAGGARD_API __declspec(dllexport)
#else
#define LAGGARD_API __declspec(dllimport)
#endif
#else
#define LAGGARD_API __attribute__((visibility("default")))
#endif

// LAGGARD_HOT: a function of the training thread's sampled step (the compiler keeps these
// together, .text.hot); LAGGARD_COLD: one that step does not run (kept apart, .text.unlikely).
#if defined(__GNUC__) || defined(__clang__)
#define LAGGARD_LIKELY(x) __builtin_expect(!!(x), 1)
#define LAGGARD_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define LAGGARD_HOT __attribute__((hot))
#define LAGGARD_COLD __attribute__((cold, noinline))
#else
#define LAGGARD_LIKELY(x) (x)
#define LAGGARD_UNLIKELY(x) (x)
#define LAGGARD_HOT
#define LAGGARD_COLD
#endif
