#define _GNU_SOURCE
#include "CWSBridgeLinux.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <stddef.h>

_Static_assert(sizeof(struct cwsb_ucred) == sizeof(struct ucred), "struct ucred size");
_Static_assert(offsetof(struct cwsb_ucred, pid) == offsetof(struct ucred, pid), "ucred.pid offset");
_Static_assert(offsetof(struct cwsb_ucred, uid) == offsetof(struct ucred, uid), "ucred.uid offset");
_Static_assert(offsetof(struct cwsb_ucred, gid) == offsetof(struct ucred, gid), "ucred.gid offset");
_Static_assert(sizeof(((struct ucred *)0)->uid) == sizeof(uint32_t), "uid_t is 32 bits");

int cwsb_so_peercred(void) { return SO_PEERCRED; }

int cwsb_pipe_cloexec(int fds[2]) { return pipe2(fds, O_CLOEXEC); }

int cwsb_malloc_trim(void) { return malloc_trim(0); }

int cwsb_unix_connect(int fd, const char *path) {
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    size_t length = strlen(path);
    if (length >= sizeof(address.sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(address.sun_path, path, length + 1);
    return connect(fd, (const struct sockaddr *)&address, sizeof(address));
}

int cwsb_contains(const void *haystack, size_t haystack_length, const void *needle, size_t needle_length) {
    return memmem(haystack, haystack_length, needle, needle_length) != NULL;
}

int cwsb_rtnetlink_open(void) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
    if (fd < 0) {
        return -errno;
    }
    struct sockaddr_nl addr;
    memset(&addr, 0, sizeof(addr));
    addr.nl_family = AF_NETLINK;
    addr.nl_groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_IPV4_ROUTE
        | RTMGRP_IPV6_ROUTE;
    if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
        int err = errno;
        close(fd);
        return -err;
    }
    return fd;
}

int cwsb_rtnetlink_drain(int fd) {
    char buf[16384];
    int relevant = 0;
    int readAny = 0;
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            /* ENOBUFS: the kernel dropped events; treat as "something changed". */
            if (errno == ENOBUFS) { relevant++; readAny = 1; continue; }
            return -errno;
        }
        if (n == 0) break;
        readAny = 1;
        int len = (int)n;
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (unsigned int)len); h = NLMSG_NEXT(h, len)) {
            switch (h->nlmsg_type) {
            case RTM_NEWLINK: case RTM_DELLINK:
            case RTM_NEWADDR: case RTM_DELADDR:
            case RTM_NEWROUTE: case RTM_DELROUTE:
                relevant++;
                break;
            default:
                break;
            }
        }
    }
    if (!readAny) return -EAGAIN;
    return relevant;
}

int cwsb_route_exists(int family, const uint8_t *address) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0) return -errno;
    struct timeval tv = { .tv_sec = 1, .tv_usec = 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

    struct {
        struct nlmsghdr nh;
        struct rtmsg rt;
        char attrs[64];
    } req;
    memset(&req, 0, sizeof(req));
    int alen = family == AF_INET6 ? 16 : 4;
    req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(struct rtmsg));
    req.nh.nlmsg_type = RTM_GETROUTE;
    req.nh.nlmsg_flags = NLM_F_REQUEST;
    req.nh.nlmsg_seq = 1;
    req.rt.rtm_family = (unsigned char)family;
    req.rt.rtm_dst_len = (unsigned char)(alen * 8);
    struct rtattr *rta = (struct rtattr *)(((char *)&req) + NLMSG_ALIGN(req.nh.nlmsg_len));
    rta->rta_type = RTA_DST;
    rta->rta_len = RTA_LENGTH(alen);
    memcpy(RTA_DATA(rta), address, alen);
    req.nh.nlmsg_len = NLMSG_ALIGN(req.nh.nlmsg_len) + RTA_LENGTH(alen);

    struct sockaddr_nl kernel;
    memset(&kernel, 0, sizeof(kernel));
    kernel.nl_family = AF_NETLINK;
    if (sendto(fd, &req, req.nh.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0) {
        int err = errno;
        close(fd);
        return -err;
    }
    char buf[8192];
    ssize_t n;
    do {
        n = recv(fd, buf, sizeof(buf), 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        int err = errno;
        close(fd);
        return -err;
    }
    close(fd);
    int len = (int)n;
    for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (unsigned int)len); h = NLMSG_NEXT(h, len)) {
        if (h->nlmsg_type == NLMSG_ERROR) {
            struct nlmsgerr *e = (struct nlmsgerr *)NLMSG_DATA(h);
            /* ENETUNREACH / EHOSTUNREACH: no route. */
            if (e->error == 0) continue;
            if (e->error == -ENETUNREACH || e->error == -EHOSTUNREACH || e->error == -ENETDOWN) return 0;
            return e->error;
        }
        if (h->nlmsg_type == RTM_NEWROUTE) {
            struct rtmsg *rt = (struct rtmsg *)NLMSG_DATA(h);
            if (rt->rtm_type == RTN_UNICAST || rt->rtm_type == RTN_LOCAL) return 1;
            return 0;
        }
    }
    return 0;
}

static uint64_t clock_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t cwsb_boottime_ns(void) { return clock_ns(CLOCK_BOOTTIME); }
uint64_t cwsb_monotonic_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

int cwsb_route_exists_to(const void *sockaddr) {
    const struct sockaddr *address = sockaddr;
    switch (address->sa_family) {
    case AF_INET:
        return cwsb_route_exists(AF_INET, (const uint8_t *)&((const struct sockaddr_in *)address)->sin_addr);
    case AF_INET6:
        return cwsb_route_exists(AF_INET6, (const uint8_t *)&((const struct sockaddr_in6 *)address)->sin6_addr);
    default:
        return -EAFNOSUPPORT;
    }
}

#include <sys/syscall.h>

int cwsb_copy_fd_of(int pid, int fd) {
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_getfd)
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0) return -1;
    int copy = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
    int saved = errno;
    close(pidfd);
    errno = saved;
    return copy;
#else
    (void)pid;
    (void)fd;
    errno = ENOSYS;
    return -1;
#endif
}

// systemd's notification protocol (sd_notify(3)): one datagram per notification to the
// address in NOTIFY_SOCKET, sent from a socket opened once, at start.
static int notify_fd = -1;
static struct sockaddr_un notify_address;
static socklen_t notify_length;

int cwsb_notify_open(const char *address) {
    size_t length = strlen(address);
    if (length < 2 || (address[0] != '/' && address[0] != '@')) {
        errno = EAFNOSUPPORT;
        return -1;
    }
    if (length >= sizeof(notify_address.sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    memset(&notify_address, 0, sizeof(notify_address));
    notify_address.sun_family = AF_UNIX;
    memcpy(notify_address.sun_path, address, length);
    // "@name" is the abstract namespace: a leading NUL, and the length says where it ends.
    if (address[0] == '@') notify_address.sun_path[0] = 0;
    notify_length = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + length + (address[0] == '/' ? 1 : 0));
    notify_fd = fd;
    return 0;
}

int cwsb_notify_send(const char *state) {
    if (notify_fd < 0) {
        errno = EBADF;
        return -1;
    }
    ssize_t n;
    do {
        n = sendto(notify_fd, state, strlen(state), MSG_NOSIGNAL, (const struct sockaddr *)&notify_address, notify_length);
    } while (n < 0 && errno == EINTR);
    return n < 0 ? -1 : 0;
}
