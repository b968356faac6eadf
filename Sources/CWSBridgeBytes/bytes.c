// The message path's byte scans (CWSBridgeBytes.h). On x86-64: SSE2 compares and a movemask
// per sixteen bytes (SSE2 is part of the base instruction set), and AVX2 per thirty-two where
// the processor has it, chosen once at run time; a byte loop elsewhere. Long runs go sixty-four
// bytes per step: the blocks' results are or-ed into one test, and only the step that holds a
// hit looks at its blocks one by one.
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

// From `i` on: sixteen bytes per step, then byte by byte.
static inline size_t json_tail(const uint8_t *p, size_t i, size_t n) {
#if defined(__SSE2__)
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

size_t cwsb_json_plain_prefix_base(const uint8_t *p, size_t n) {
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
#endif
    return json_tail(p, i, n);
}

// From `i` on: sixteen bytes per step, then byte by byte.
static inline size_t ascii_tail(const uint8_t *p, size_t i, size_t n) {
#if defined(__SSE2__)
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

size_t cwsb_ascii_prefix_base(const uint8_t *p, size_t n) {
    size_t i = 0;
#if defined(__SSE2__)
    // A byte at or above 0x80 has its high bit set: the movemask's bit.
    for (; i + 64 <= n; i += 64) {
        __m128i b0 = load16(p + i), b1 = load16(p + i + 16), b2 = load16(p + i + 32), b3 = load16(p + i + 48);
        if (_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(b0, b1), _mm_or_si128(b2, b3))) != 0) return i + first_in_step(b0, b1, b2, b3);
    }
#endif
    return ascii_tail(p, i, n);
}

// The container end's state between blocks: the depth of brackets and whether the last byte
// looked at was inside a string.
typedef struct {
    size_t depth;
    int in_string;
} container_state;

// One byte of a container: 1 at the bracket that closes it, -1 at a backslash (the caller reads
// the container another way), 0 else.
static inline int container_byte(container_state *s, uint8_t c) {
    if (c == '\\') return -1;
    if (s->in_string) {
        if (c == '"') s->in_string = 0;
        return 0;
    }
    switch (c) {
    case '"': s->in_string = 1; return 0;
    case '{': case '[': s->depth++; return 0;
    case '}': case ']': return --s->depth == 0;
    default: return 0;
    }
}

// A block of a container as bit masks (bit k: its k-th byte; the first `width` bits matter): the
// offset past the container's closing bracket in it plus one (0: none), or -1 at a backslash
// before it.
static inline int container_masks(container_state *s, uint32_t quotes, uint32_t open, uint32_t close, uint32_t backslashes, unsigned width) {
    uint32_t keep = width >= 32 ? 0xFFFFFFFFu : (1u << width) - 1;
    quotes &= keep;
    backslashes &= keep;
    // Inside a string: each quote flips it (no backslash, so no escaped quote); a prefix xor of
    // the quotes' bits, from the state the last block ended in.
    uint32_t inside = quotes;
    inside ^= inside << 1;
    inside ^= inside << 2;
    inside ^= inside << 4;
    inside ^= inside << 8;
    inside ^= inside << 16;
    if (s->in_string) inside = ~inside;
    s->in_string = (int)(inside >> (width - 1) & 1);
    uint32_t brackets = (open | close) & ~inside & keep;
    // Up to the first backslash only (the end may come before it).
    if (backslashes != 0) brackets &= (1u << __builtin_ctz(backslashes)) - 1;
    while (brackets != 0) {
        unsigned bit = (unsigned)__builtin_ctz(brackets);
        if (open >> bit & 1) {
            s->depth++;
        } else if (--s->depth == 0) {
            return (int)bit + 1;
        }
        brackets &= brackets - 1;
    }
    return backslashes != 0 ? -1 : 0;
}

#if defined(__SSE2__)
// Sixteen bytes of a container at once, of which the last `width` are still to read.
static inline int container_block(container_state *s, __m128i v, unsigned width) {
    unsigned drop = 16 - width;
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
    const __m128i open1 = _mm_set1_epi8('{'), open2 = _mm_set1_epi8('['), close1 = _mm_set1_epi8('}'), close2 = _mm_set1_epi8(']');
    uint32_t backslashes = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, backslash)) >> drop;
    uint32_t quotes = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, quote)) >> drop;
    uint32_t open = (uint32_t)_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, open1), _mm_cmpeq_epi8(v, open2))) >> drop;
    uint32_t close = (uint32_t)_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, close1), _mm_cmpeq_epi8(v, close2))) >> drop;
    return container_masks(s, quotes, open, close, backslashes, width);
}
#endif

// From `i` on, in state `s` (the container begins at p[0]).
static inline size_t container_end_from(const uint8_t *p, size_t n, size_t i, container_state s) {
#if defined(__SSE2__)
    for (; i + 16 <= n; i += 16) {
        int r = container_block(&s, load16(p + i), 16);
        if (r < 0) return 0;
        if (r > 0) return i + (size_t)r;
    }
    // The last bytes: the sixteen that end the text, those read already shifted out.
    if (i < n && n >= 16) {
        int r = container_block(&s, load16(p + n - 16), (unsigned)(n - i));
        return r > 0 ? i + (size_t)r : 0;
    }
#endif
    for (; i < n; i++) {
        int r = container_byte(&s, p[i]);
        if (r < 0) return 0;
        if (r > 0) return i + 1;
    }
    return 0;
}

size_t cwsb_json_container_end_base(const uint8_t *p, size_t n) {
    container_state s = {0, 0};
    return container_end_from(p, n, 0, s);
}

#if defined(__x86_64__) && defined(__SSE2__)
#include <cpuid.h>
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2")))

AVX2 static inline __m256i json_special32(__m256i v) {
    const __m256i quote = _mm256_set1_epi8('"');
    const __m256i backslash = _mm256_set1_epi8('\\');
    const __m256i control = _mm256_set1_epi8(0x1F);
    return _mm256_or_si256(_mm256_or_si256(_mm256_cmpeq_epi8(v, quote), _mm256_cmpeq_epi8(v, backslash)),
                           _mm256_cmpeq_epi8(_mm256_max_epu8(v, control), control));
}

AVX2 static inline __m256i load32(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)(const void *)p); }

AVX2 static inline size_t first_in_step32(__m256i m0, __m256i m1) {
    uint64_t mask = (uint64_t)(uint32_t)_mm256_movemask_epi8(m0) | (uint64_t)(uint32_t)_mm256_movemask_epi8(m1) << 32;
    return (size_t)__builtin_ctzll(mask);
}

AVX2 size_t cwsb_json_plain_prefix_avx2(const uint8_t *p, size_t n) {
    size_t i = 0;
    if (n >= 32) {
        uint32_t mask = (uint32_t)_mm256_movemask_epi8(json_special32(load32(p)));
        if (mask != 0) return (size_t)__builtin_ctz(mask);
        i = 32;
    }
    for (; i + 64 <= n; i += 64) {
        __m256i m0 = json_special32(load32(p + i)), m1 = json_special32(load32(p + i + 32));
        if (_mm256_movemask_epi8(_mm256_or_si256(m0, m1)) != 0) return i + first_in_step32(m0, m1);
    }
    return json_tail(p, i, n);
}

AVX2 size_t cwsb_ascii_prefix_avx2(const uint8_t *p, size_t n) {
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m256i b0 = load32(p + i), b1 = load32(p + i + 32);
        if (_mm256_movemask_epi8(_mm256_or_si256(b0, b1)) != 0) return i + first_in_step32(b0, b1);
    }
    return ascii_tail(p, i, n);
}

// Thirty-two bytes of a container at once.
AVX2 static inline int container_block32(container_state *s, __m256i v) {
    const __m256i quote = _mm256_set1_epi8('"'), backslash = _mm256_set1_epi8('\\');
    const __m256i open1 = _mm256_set1_epi8('{'), open2 = _mm256_set1_epi8('['), close1 = _mm256_set1_epi8('}'), close2 = _mm256_set1_epi8(']');
    uint32_t backslashes = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, backslash));
    uint32_t quotes = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, quote));
    uint32_t open = (uint32_t)_mm256_movemask_epi8(_mm256_or_si256(_mm256_cmpeq_epi8(v, open1), _mm256_cmpeq_epi8(v, open2)));
    uint32_t close = (uint32_t)_mm256_movemask_epi8(_mm256_or_si256(_mm256_cmpeq_epi8(v, close1), _mm256_cmpeq_epi8(v, close2)));
    return container_masks(s, quotes, open, close, backslashes, 32);
}

AVX2 size_t cwsb_json_container_end_avx2(const uint8_t *p, size_t n) {
    container_state s = {0, 0};
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        int r = container_block32(&s, load32(p + i));
        if (r < 0) return 0;
        if (r > 0) return i + (size_t)r;
    }
    // The rest sixteen bytes at a time.
    return container_end_from(p, n, i, s);
}

// AVX2 in the processor (CPUID leaf 7) and its 32-byte registers saved by the kernel (XCR0).
static int detect_avx2(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE) || !(c & bit_AVX)) return 0;
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 6) != 6) return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (b & bit_AVX2) != 0;
}

// 0: not looked yet; 1: no; 2: yes. Racing first calls all store the same answer.
static int avx2_state;

int cwsb_has_avx2(void) {
    int state = __atomic_load_n(&avx2_state, __ATOMIC_RELAXED);
    if (state == 0) {
        state = detect_avx2() ? 2 : 1;
        __atomic_store_n(&avx2_state, state, __ATOMIC_RELAXED);
    }
    return state == 2;
}

// Each scan's form, chosen at its first call (which the pointer starts at).
typedef size_t (*scan_fn)(const uint8_t *, size_t);
static size_t json_choose(const uint8_t *p, size_t n);
static size_t ascii_choose(const uint8_t *p, size_t n);
static scan_fn json_scan = json_choose;
static size_t container_choose(const uint8_t *p, size_t n);
static scan_fn container_scan = container_choose;

static size_t container_choose(const uint8_t *p, size_t n) {
    scan_fn chosen = cwsb_has_avx2() ? cwsb_json_container_end_avx2 : cwsb_json_container_end_base;
    __atomic_store_n(&container_scan, chosen, __ATOMIC_RELAXED);
    return chosen(p, n);
}

size_t cwsb_json_container_end(const uint8_t *p, size_t n) { return __atomic_load_n(&container_scan, __ATOMIC_RELAXED)(p, n); }
static scan_fn ascii_scan = ascii_choose;

static size_t json_choose(const uint8_t *p, size_t n) {
    scan_fn chosen = cwsb_has_avx2() ? cwsb_json_plain_prefix_avx2 : cwsb_json_plain_prefix_base;
    __atomic_store_n(&json_scan, chosen, __ATOMIC_RELAXED);
    return chosen(p, n);
}

static size_t ascii_choose(const uint8_t *p, size_t n) {
    scan_fn chosen = cwsb_has_avx2() ? cwsb_ascii_prefix_avx2 : cwsb_ascii_prefix_base;
    __atomic_store_n(&ascii_scan, chosen, __ATOMIC_RELAXED);
    return chosen(p, n);
}

size_t cwsb_json_plain_prefix(const uint8_t *p, size_t n) { return __atomic_load_n(&json_scan, __ATOMIC_RELAXED)(p, n); }

size_t cwsb_ascii_prefix(const uint8_t *p, size_t n) { return __atomic_load_n(&ascii_scan, __ATOMIC_RELAXED)(p, n); }
#else
int cwsb_has_avx2(void) { return 0; }
size_t cwsb_json_plain_prefix_avx2(const uint8_t *p, size_t n) { return cwsb_json_plain_prefix_base(p, n); }
size_t cwsb_ascii_prefix_avx2(const uint8_t *p, size_t n) { return cwsb_ascii_prefix_base(p, n); }
size_t cwsb_json_plain_prefix(const uint8_t *p, size_t n) { return cwsb_json_plain_prefix_base(p, n); }
size_t cwsb_json_container_end_avx2(const uint8_t *p, size_t n) { return cwsb_json_container_end_base(p, n); }
size_t cwsb_json_container_end(const uint8_t *p, size_t n) { return cwsb_json_container_end_base(p, n); }
size_t cwsb_ascii_prefix(const uint8_t *p, size_t n) { return cwsb_ascii_prefix_base(p, n); }
#endif
