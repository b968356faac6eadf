#define _GNU_SOURCE
#include "CWSBridgeLinux.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/inet_diag.h>

// The uid of the process that owns the far end of a loopback TCP connection, asked of the
// kernel with one exact sock_diag lookup (NETLINK_SOCK_DIAG, as ss(8) and identd do): the
// socket whose source is the connection's peer and whose destination is its local end.
int cwsb_tcp_peer_uid(const void *local, const void *peer, uint32_t *uid) {
    const struct sockaddr *l = local, *p = peer;
    if (l->sa_family != p->sa_family || (l->sa_family != AF_INET && l->sa_family != AF_INET6)) return -EAFNOSUPPORT;
    struct {
        struct nlmsghdr header;
        struct inet_diag_req_v2 request;
    } message = {0};
    message.header.nlmsg_len = sizeof(message);
    message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    message.header.nlmsg_flags = NLM_F_REQUEST;
    message.request.sdiag_family = (uint8_t)l->sa_family;
    message.request.sdiag_protocol = IPPROTO_TCP;
    message.request.idiag_states = ~0u;
    message.request.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
    message.request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    if (l->sa_family == AF_INET) {
        const struct sockaddr_in *l4 = local, *p4 = peer;
        message.request.id.idiag_sport = p4->sin_port;
        message.request.id.idiag_dport = l4->sin_port;
        memcpy(message.request.id.idiag_src, &p4->sin_addr, 4);
        memcpy(message.request.id.idiag_dst, &l4->sin_addr, 4);
    } else {
        const struct sockaddr_in6 *l6 = local, *p6 = peer;
        message.request.id.idiag_sport = p6->sin6_port;
        message.request.id.idiag_dport = l6->sin6_port;
        memcpy(message.request.id.idiag_src, &p6->sin6_addr, 16);
        memcpy(message.request.id.idiag_dst, &l6->sin6_addr, 16);
    }
    int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0) return -errno;
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    if (sendto(fd, &message, sizeof(message), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    long answer[2048 / sizeof(long)];
    ssize_t n = recv(fd, answer, sizeof(answer), 0);
    int e = errno;
    close(fd);
    if (n < 0) return -e;
    struct nlmsghdr *h = (struct nlmsghdr *)answer;
    if (!NLMSG_OK(h, (size_t)n)) return -EPROTO;
    if (h->nlmsg_type == NLMSG_ERROR) {
        struct nlmsgerr *err = NLMSG_DATA(h);
        return err->error != 0 ? err->error : -ENOENT;
    }
    if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg))) return -EPROTO;
    struct inet_diag_msg *found = NLMSG_DATA(h);
    *uid = found->idiag_uid;
    return 0;
}
