// The message path's byte scans (CWSBridgeBytes.h): SSE2 compares and a movemask per sixteen
// bytes on x86-64, where SSE2 is part of the base instruction set; a byte loop elsewhere. Long
// runs go sixty-four bytes per step: the four blocks' results are or-ed into one test, and only
// the step that holds a hit looks at its blocks one by one.
#include "CWSBridgeBytes.h"

#if defined(__SSE2__)
#include <emmintrin.h>

// The bytes of `v` a JSON string cannot hold as they are: a quote, a backslash, below 0x20.
static inline __m128i json_special(__m128i v) {
    const __m128i quote = _mm_set1_epi8('"');
    const __m128i backslash = _mm_set1_epi8('\\');
    const __m128i control = _mm_set1_epi8(0x1F);
    // Below 0x20: max(v, 0x1F) is 0x1F only then (an unsigned compare SSE2 lacks).
    return _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                        _mm_cmpeq_epi8(_mm_max_epu8(v, control), control));
}

static inline __m128i load16(const uint8_t *p) { return _mm_loadu_si128((const __m128i *)(const void *)p); }

// The offset of the first set byte in the 64-byte step whose four block masks are `m`, known
// to hold one.
static inline size_t first_in_step(__m128i m0, __m128i m1, __m128i m2, __m128i m3) {
    uint64_t mask = (uint64_t)(unsigned)_mm_movemask_epi8(m0) | (uint64_t)(unsigned)_mm_movemask_epi8(m1) << 16 |
                    (uint64_t)(unsigned)_mm_movemask_epi8(m2) << 32 | (uint64_t)(unsigned)_mm_movemask_epi8(m3) << 48;
    return (size_t)__builtin_ctzll(mask);
}
#endif

size_t cwsb_json_plain_prefix(const uint8_t *p, size_t n) {
    size_t i = 0;
#if defined(__SSE2__)
    // The first sixteen bytes alone: escapes often come close together (a JSON payload's
    // quotes), and a step of sixty-four would look at all four blocks for a hit in the first.
    if (n >= 16) {
        int mask = _mm_movemask_epi8(json_special(load16(p)));
        if (mask != 0) return (size_t)__builtin_ctz((unsigned)mask);
        i = 16;
    }
    for (; i + 64 <= n; i += 64) {
        __m128i m0 = json_special(load16(p + i)), m1 = json_special(load16(p + i + 16));
        __m128i m2 = json_special(load16(p + i + 32)), m3 = json_special(load16(p + i + 48));
        if (_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(m0, m1), _mm_or_si128(m2, m3))) != 0) return i + first_in_step(m0, m1, m2, m3);
    }
    for (; i + 16 <= n; i += 16) {
        int mask = _mm_movemask_epi8(json_special(load16(p + i)));
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
    // A byte at or above 0x80 has its high bit set: the movemask's bit.
    for (; i + 64 <= n; i += 64) {
        __m128i b0 = load16(p + i), b1 = load16(p + i + 16), b2 = load16(p + i + 32), b3 = load16(p + i + 48);
        if (_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(b0, b1), _mm_or_si128(b2, b3))) != 0) return i + first_in_step(b0, b1, b2, b3);
    }
    for (; i + 16 <= n; i += 16) {
        int mask = _mm_movemask_epi8(load16(p + i));
        if (mask != 0) return i + (size_t)__builtin_ctz((unsigned)mask);
    }
#endif
    for (; i < n; i++) {
        if (p[i] >= 0x80) return i;
    }
    return n;
}
