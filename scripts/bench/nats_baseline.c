// The fleet benchmark's baseline (wsbridge-bench suite --only fleet): the same messages as the
// generator's flood, published into the same JetStream stream through the same NATS C client
// (asynchronous publishes, at most 1024 waiting for their acknowledgement, as `[fleet]`'s
// default max_in_flight) and read back by an ordered consumer, as a follower reads them, in one
// process with no WebSocket, no bridge and no Unix socket: what JetStream itself costs here.
//
//   nats_baseline URL create STREAM SUBJECT      makes the stream (file storage), if missing
//   nats_baseline URL run STREAM SUBJECT COUNT SIZE RATE [ids|expect]
//                                                publishes COUNT messages of SIZE bytes (RATE a
//                                                second; 0: flat out) and reads them back; prints
//                                                the reader's result line (wsbridge-reader's
//                                                fields): messages, first_ns, last_ns, p50_us...
//                                                `ids`: each with a Nats-Msg-Id and expecting the
//                                                one before it last, as a bridge publishes;
//                                                `expect`: each expecting the stream's last seq to
//                                                be the one before it (tried for bridges, not kept)
//
// Each message is `{"t":<10^19 + CLOCK_MONOTONIC ns>,"i":<10^10 + index>,"pad":"xx…"}`, the
// flood's shape, so the latency is from the publish to the consumer's callback.
#include <nats/nats.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int64_t expected, received;
    uint64_t first_ns, last_ns;
    uint32_t *latencies_us;
} Reader;

static void on_message(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure) {
    Reader *r = closure;
    uint64_t now = now_ns();
    const char *data = natsMsg_GetData(msg);
    uint64_t sent = 0;
    if (natsMsg_GetDataLength(msg) > 26 && strncmp(data, "{\"t\":", 5) == 0) sent = strtoull(data + 5, NULL, 10) - 10000000000000000000ull;
    pthread_mutex_lock(&r->mu);
    if (r->received == 0) r->first_ns = now;
    r->last_ns = now;
    if (r->received < r->expected) r->latencies_us[r->received] = sent && now > sent ? (uint32_t)((now - sent) / 1000) : 0;
    r->received++;
    if (r->received >= r->expected) pthread_cond_signal(&r->cond);
    pthread_mutex_unlock(&r->mu);
    natsMsg_Destroy(msg);
}

static int compare(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void check(natsStatus s, const char *what) {
    if (s == NATS_OK) return;
    fprintf(stderr, "nats_baseline: %s: %s\n", what, natsStatus_GetText(s));
    exit(1);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: nats_baseline URL create STREAM SUBJECT | URL run STREAM SUBJECT COUNT SIZE RATE [ids|expect]\n");
        return 64;
    }
    const char *url = argv[1], *mode = argv[2], *stream = argv[3], *subject = argv[4];
    natsConnection *nc = NULL;
    check(natsConnection_ConnectTo(&nc, url), "connecting");
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.PublishAsync.MaxPending = 1024;
    jsCtx *js = NULL;
    check(natsConnection_JetStream(&js, nc, &jo), "JetStream");
    if (strcmp(mode, "create") == 0) {
        jsStreamConfig sc;
        jsStreamConfig_Init(&sc);
        sc.Name = stream;
        const char *subjects[] = {subject};
        sc.Subjects = subjects;
        sc.SubjectsLen = 1;
        sc.Storage = js_FileStorage;
        jsErrCode code = 0;
        natsStatus s = js_AddStream(NULL, js, &sc, NULL, &code);
        if (s != NATS_OK && code != JSStreamNameExistErr) check(s, "making the stream");
        printf("{\"stream\":\"%s\"}\n", stream);
        return 0;
    }
    if (argc < 8) return 64;
    int64_t count = atoll(argv[5]);
    int size = atoi(argv[6]);
    int64_t rate = atoll(argv[7]);
    int ids = argc > 8 && strcmp(argv[8], "ids") == 0;
    int expect = argc > 8 && strcmp(argv[8], "expect") == 0;

    Reader r = {0};
    r.expected = count;
    r.latencies_us = calloc((size_t)count, sizeof(uint32_t));
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cond, NULL);
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = stream;
    so.Ordered = true;
    so.Config.DeliverPolicy = js_DeliverNew;
    natsSubscription *sub = NULL;
    jsErrCode code = 0;
    check(js_Subscribe(&sub, js, subject, on_message, &r, NULL, &so, &code), "the ordered consumer");
    natsSubscription_SetPendingLimits(sub, -1, -1);

    // With `expect`: where the stream stands, so that each message expects the one before it.
    uint64_t last = 0;
    if (expect) {
        jsStreamInfo *si = NULL;
        check(js_GetStreamInfo(&si, js, stream, NULL, &code), "the stream's info");
        last = si->State.LastSeq;
        jsStreamInfo_Destroy(si);
    }
    char *text = malloc((size_t)size + 64);
    uint64_t start = now_ns();
    for (int64_t i = 0; i < count; i++) {
        if (rate > 0) {
            uint64_t due = start + (uint64_t)(i * 1000000000ll / rate);
            while (now_ns() < due) {
                struct timespec pause = {0, 50000};
                nanosleep(&pause, NULL);
            }
        }
        int n = snprintf(text, (size_t)size + 64, "{\"t\":%020llu,\"i\":%011lld,\"pad\":\"",
                         (unsigned long long)(now_ns() + 10000000000000000000ull), (long long)(i + 10000000000ll));
        while (n < size - 2) text[n++] = 'x';
        text[n++] = '"';
        text[n++] = '}';
        natsStatus s;
        // With `ids`, what a bridge asks of JetStream for each message: store it once (its id)
        // and only right after the one before it (that one's id the stream's last).
        char id[48], previous[48];
        jsPubOptions po;
        jsPubOptions_Init(&po);
        if (ids) {
            // This run's own ids (the stream keeps earlier runs' within its duplicate window).
            snprintf(id, sizeof id, "baseline%d-%lld", (int)getpid(), (long long)(i + 1));
            snprintf(previous, sizeof previous, "baseline%d-%lld", (int)getpid(), (long long)i);
            po.MsgId = id;
            if (i > 0) po.ExpectLastMsgId = previous;
        }
        if (expect) po.ExpectLastSeq = last + (uint64_t)i;
        // Past MaxPending the call waits (StallWait) and may say so: then again.
        while ((s = js_PublishAsync(js, subject, text, n, &po)) == NATS_TIMEOUT) {}
        check(s, "publishing");
    }
    check(js_PublishAsyncComplete(js, NULL), "the acknowledgements");
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 120;
    pthread_mutex_lock(&r.mu);
    while (r.received < r.expected) {
        if (pthread_cond_timedwait(&r.cond, &r.mu, &deadline) != 0) break;
    }
    int64_t got = r.received;
    pthread_mutex_unlock(&r.mu);
    int64_t n = got < count ? got : count;
    qsort(r.latencies_us, (size_t)n, sizeof(uint32_t), compare);
    uint32_t p50 = n ? r.latencies_us[n * 50 / 100] : 0, p99 = n ? r.latencies_us[n * 99 / 100] : 0;
    printf("{\"connections\":1,\"messages\":%lld,\"lost\":%lld,\"gaps\":0,\"ended\":1,\"first_ns\":%llu,\"last_ns\":%llu,"
           "\"latency_count\":%lld,\"p50_us\":%u,\"p99_us\":%u}\n",
           (long long)got, (long long)(count - n), (unsigned long long)r.first_ns, (unsigned long long)r.last_ns, (long long)n, p50, p99);
    fflush(stdout);
    natsSubscription_Unsubscribe(sub);
    natsSubscription_Destroy(sub);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    return 0;
}
