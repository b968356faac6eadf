// The message path's byte scans (CWSBridgeBytes.h): SSE2 compares and a movemask per sixteen
// bytes on x86-64, where SSE2 is part of the base instruction set; a byte loop elsewhere.
#include "CWSBridgeBytes.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

size_t cwsb_json_plain_prefix(const uint8_t *p, size_t n) {
    size_t i = 0;
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"');
    const __m128i backslash = _mm_set1_epi8('\\');
    const __m128i control = _mm_set1_epi8(0x1F);
    for (; i + 16 <= n; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + i));
        // Below 0x20: max(v, 0x1F) is 0x1F only then (an unsigned compare SSE2 lacks).
        __m128i bad = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                                   _mm_cmpeq_epi8(_mm_max_epu8(v, control), control));
        int mask = _mm_movemask_epi8(bad);
        if (mask != 0) return i + (size_t)__builtin_ctz((unsigned)mask);
    }
#endif
    for (; i < n; i++) {
        uint8_t c = p[i];
        if (c < 0x20 || c == '"' || c == '\\') return i;
    }
    return n;
}

size_t cwsb_ascii_prefix(const uint8_t *p, size_t n) {
    size_t i = 0;
#if defined(__SSE2__)
    for (; i + 16 <= n; i += 16) {
        int mask = _mm_movemask_epi8(_mm_loadu_si128((const __m128i *)(const void *)(p + i)));
        if (mask != 0) return i + (size_t)__builtin_ctz((unsigned)mask);
    }
#endif
    for (; i < n; i++) {
        if (p[i] >= 0x80) return i;
    }
    return n;
}
