// Whether this test runs under AddressSanitizer or ThreadSanitizer (g++ defines
// __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__, clang answers __has_feature): their shadow memory
// and quarantine make address-space limits and resident-size checks meaningless there.
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LAGGARD_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define LAGGARD_TEST_SANITIZED 1
#endif
#endif
