// Whether this test binary was built with AddressSanitizer or ThreadSanitizer. Their allocators
// keep freed memory in quarantine and their shadow memory grows, so resident-memory bounds are
// reported there but held only in the plain build (LeakSanitizer covers leaks under ASan).
#pragma once

namespace infer::testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace infer::testing
