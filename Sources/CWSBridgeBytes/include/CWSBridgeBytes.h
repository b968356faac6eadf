#ifndef CWSBRIDGE_BYTES_H
#define CWSBRIDGE_BYTES_H

#include <stddef.h>
#include <stdint.h>

/// The message path's byte scans, sixty-four bytes per step on x86-64: with AVX2 where the
/// processor has it (chosen once, at the first call), else with SSE2 (sixteen, then the scalar
/// loop, for the last bytes); the scalar loop elsewhere.

/// How many bytes at the start of `p[0..<n]` a JSON string holds as they are: none is below
/// 0x20, a quote or a backslash. `n` when all of them.
size_t cwsb_json_plain_prefix(const uint8_t *p, size_t n);

/// How many bytes at the start of `p[0..<n]` are ASCII (below 0x80). `n` when all of them.
size_t cwsb_ascii_prefix(const uint8_t *p, size_t n);

/// Where the JSON array or object at `p[0]` (`{` or `[`) ends: the offset past its closing
/// bracket, brackets in strings not counted; 0 when the bytes end first, or hold a backslash
/// before its end (a string with an escape: the caller reads the container another way).
/// Thirty-two bytes per step with AVX2, sixteen with SSE2.
size_t cwsb_json_container_end(const uint8_t *p, size_t n);

/// Each scan's two forms, for the tests: SSE2 (or the scalar loop), and AVX2, which may be
/// called only when `cwsb_has_avx2()` is 1 (elsewhere than x86-64 it is the first form).
size_t cwsb_json_plain_prefix_base(const uint8_t *p, size_t n);
size_t cwsb_json_plain_prefix_avx2(const uint8_t *p, size_t n);
size_t cwsb_ascii_prefix_base(const uint8_t *p, size_t n);
size_t cwsb_ascii_prefix_avx2(const uint8_t *p, size_t n);
size_t cwsb_json_container_end_base(const uint8_t *p, size_t n);
size_t cwsb_json_container_end_avx2(const uint8_t *p, size_t n);

/// 1 when the processor has AVX2 and the kernel saves its registers.
int cwsb_has_avx2(void);

#endif
