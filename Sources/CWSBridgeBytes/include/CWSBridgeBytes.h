#ifndef CWSBRIDGE_BYTES_H
#define CWSBRIDGE_BYTES_H

#include <stddef.h>
#include <stdint.h>

/// The message path's byte scans, sixty-four bytes per step with SSE2 on x86-64 (sixteen, then
/// the scalar loop, for the last bytes; the scalar loop elsewhere).

/// How many bytes at the start of `p[0..<n]` a JSON string holds as they are: none is below
/// 0x20, a quote or a backslash. `n` when all of them.
size_t cwsb_json_plain_prefix(const uint8_t *p, size_t n);

/// How many bytes at the start of `p[0..<n]` are ASCII (below 0x80). `n` when all of them.
size_t cwsb_ascii_prefix(const uint8_t *p, size_t n);

#endif
