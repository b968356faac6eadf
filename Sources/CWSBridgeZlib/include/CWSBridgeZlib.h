#ifndef CWSBRIDGE_ZLIB_H
#define CWSBRIDGE_ZLIB_H

#include <stddef.h>
#include <stdint.h>

/// A raw-deflate stream (RFC 1951, no zlib header) for permessage-deflate (RFC 7692).
typedef struct cwsb_zstream cwsb_zstream;

/// `window_bits` 9...15. Returns NULL when out of memory.
cwsb_zstream *cwsb_inflater_new(int window_bits);
cwsb_zstream *cwsb_deflater_new(int window_bits, int level);
void cwsb_zstream_free(cwsb_zstream *stream);
/// Forgets the sliding window (no context takeover).
int cwsb_zstream_reset(cwsb_zstream *stream);

/// Feeds `input` and writes up to `output_capacity` bytes with Z_SYNC_FLUSH.
/// Sets the bytes consumed and produced. Returns 0 on progress, 1 when the stream ended
/// (Z_STREAM_END), 2 when no progress was possible (Z_BUF_ERROR), or a negative zlib error.
int cwsb_zstream_process(cwsb_zstream *stream, const uint8_t *input, size_t input_length,
                         uint8_t *output, size_t output_capacity, size_t *consumed, size_t *produced);

#endif
