#include "CWSBridgeZlib.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

struct cwsb_zstream {
    z_stream z;
    int deflating;
};

cwsb_zstream *cwsb_inflater_new(int window_bits) {
    cwsb_zstream *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    if (inflateInit2(&s->z, -window_bits) != Z_OK) {
        free(s);
        return NULL;
    }
    return s;
}

cwsb_zstream *cwsb_deflater_new(int window_bits, int level) {
    cwsb_zstream *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->deflating = 1;
    if (deflateInit2(&s->z, level, Z_DEFLATED, -window_bits, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
        free(s);
        return NULL;
    }
    return s;
}

void cwsb_zstream_free(cwsb_zstream *s) {
    if (!s) return;
    if (s->deflating) deflateEnd(&s->z); else inflateEnd(&s->z);
    free(s);
}

int cwsb_zstream_reset(cwsb_zstream *s) {
    return s->deflating ? deflateReset(&s->z) : inflateReset(&s->z);
}

int cwsb_zstream_process(cwsb_zstream *s, const uint8_t *input, size_t input_length,
                         uint8_t *output, size_t output_capacity, size_t *consumed, size_t *produced) {
    s->z.next_in = (Bytef *)input;
    s->z.avail_in = (uInt)input_length;
    s->z.next_out = output;
    s->z.avail_out = (uInt)output_capacity;
    int rc = s->deflating ? deflate(&s->z, Z_SYNC_FLUSH) : inflate(&s->z, Z_SYNC_FLUSH);
    *consumed = input_length - s->z.avail_in;
    *produced = output_capacity - s->z.avail_out;
    if (rc == Z_OK) return 0;
    if (rc == Z_STREAM_END) return 1;
    if (rc == Z_BUF_ERROR) return 2;
    return rc < 0 ? rc : -100;
}
