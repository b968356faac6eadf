#ifndef CNATS_H
#define CNATS_H
// The NATS C client (libnats, Debian's libnats-dev 3.4) for `[fleet]` (docs/fleet.md), loaded
// at run time with dlopen, never linked: a daemon without `[fleet]` needs no libnats, and the
// package does not depend on it (it suggests libnats3.4). The build needs only its header.
#include <nats/nats.h>

// Every function of the client the daemon calls, each a field of `wsb_nats_api` (a pointer of
// the function's own type, taken from its declaration), filled by `wsb_nats_load`.
#define WSB_NATS_FUNCTIONS(X) \
    X(natsOptions_Create) \
    X(natsOptions_Destroy) \
    X(natsOptions_SetServers) \
    X(natsOptions_SetName) \
    X(natsOptions_SetUserInfo) \
    X(natsOptions_SetToken) \
    X(natsOptions_SetUserCredentialsFromFiles) \
    X(natsOptions_SetSecure) \
    X(natsOptions_LoadCATrustedCertificates) \
    X(natsOptions_LoadCertificatesChain) \
    X(natsOptions_SetMaxReconnect) \
    X(natsOptions_SetReconnectWait) \
    X(natsOptions_SetRetryOnFailedConnect) \
    X(natsOptions_SetTimeout) \
    X(natsOptions_SetDisconnectedCB) \
    X(natsOptions_SetReconnectedCB) \
    X(natsOptions_SetClosedCB) \
    X(natsConnection_Connect) \
    X(natsConnection_Close) \
    X(natsConnection_Destroy) \
    X(natsConnection_Status) \
    X(natsConnection_GetConnectedUrl) \
    X(natsConnection_GetLastError) \
    X(natsConnection_JetStream) \
    X(jsCtx_Destroy) \
    X(jsOptions_Init) \
    X(js_GetStreamInfo) \
    X(jsStreamConfig_Init) \
    X(js_AddStream) \
    X(js_GetMsg) \
    X(js_GetLastMsg) \
    X(natsMsg_GetSequence) \
    X(jsStreamInfo_Destroy) \
    X(js_PublishMsgAsync) \
    X(natsMsg_Create) \
    X(natsMsg_Destroy) \
    X(natsMsgHeader_Set) \
    X(natsMsgHeader_Get) \
    X(natsStatus_GetText) \
    X(natsMsg_GetData) \
    X(natsMsg_GetDataLength) \
    X(natsMsg_GetReply) \
    X(natsMsg_GetSubject) \
    X(natsMsg_GetMetaData) \
    X(jsMsgMetaData_Destroy) \
    X(natsConnection_Subscribe) \
    X(natsConnection_Publish) \
    X(natsConnection_PublishMsg) \
    X(natsSubscription_Unsubscribe) \
    X(natsSubscription_Destroy) \
    X(natsSubscription_SetPendingLimits) \
    X(natsInbox_Create) \
    X(natsInbox_Destroy) \
    X(jsSubOptions_Init) \
    X(js_Subscribe) \
    X(js_PublishMsg) \
    X(jsPubAck_Destroy) \
    X(kvConfig_Init) \
    X(js_KeyValue) \
    X(js_CreateKeyValue) \
    X(kvStore_Destroy) \
    X(kvStore_Create) \
    X(kvStore_Update) \
    X(kvStore_Delete) \
    X(kvStore_Status) \
    X(kvStatus_TTL) \
    X(kvStatus_Replicas) \
    X(kvStatus_History) \
    X(kvStatus_Destroy)

#define WSB_NATS_FIELD(name) __typeof__(name) *name;
typedef struct wsb_nats_api {
    WSB_NATS_FUNCTIONS(WSB_NATS_FIELD)
} wsb_nats_api;
#undef WSB_NATS_FIELD

/// Loads the client from `file` (a library name dlopen finds, e.g. "libnats.so.3.4") once:
/// the table of its functions, or NULL with `*error` set to why not (dlopen's or dlsym's text,
/// valid until the next call).
const wsb_nats_api *wsb_nats_load(const char *file, const char **error);

#endif
