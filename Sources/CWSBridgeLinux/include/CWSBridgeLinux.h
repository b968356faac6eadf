#ifndef CWSBRIDGE_LINUX_H
#define CWSBRIDGE_LINUX_H

// Only the C library's basic types: a system header included here (sys/socket.h, say) would
// make this module, not Glibc's, the owner of its declarations in the Clang module cache, and
// a Swift file importing only Glibc then fails to find them (SOCK_STREAM), depending on which
// module a parallel build happened to compile first.
#include <stdint.h>
#include <stddef.h>

/// Linux's `struct ucred` (which Glibc's Swift module does not export), for SO_PEERCRED
/// through getsockopt. linux.c checks at compile time that size and offsets match the C
/// library's own `struct ucred` on the architecture being built.
struct cwsb_ucred {
    int32_t pid;
    uint32_t uid;
    uint32_t gid;
};

/// glibc's memmem (a GNU extension Glibc's Swift module does not export): whether `needle`
/// occurs in `haystack`.
int cwsb_contains(const void *haystack, size_t haystack_length, const void *needle, size_t needle_length);

/// connect(2) of `fd` to the Unix socket at `path` (wsbridgectl, which does not link SwiftNIO;
/// the daemon, benchmarks and tests use NIO's `SocketAddress(unixDomainSocketPath:)`).
/// Returns 0, or -1 with errno set (ENAMETOOLONG when `path` does not fit in sun_path).
int cwsb_unix_connect(int fd, const char *path);

/// pipe2(fds, O_CLOEXEC) (a GNU call Glibc's Swift module does not export): a pipe whose ends
/// a process spawned meanwhile by another thread does not inherit. 0, or -1 with errno.
int cwsb_pipe_cloexec(int fds[2]);

/// A copy of process `pid`'s descriptor `fd` (pidfd_open + pidfd_getfd, Linux 5.6; needs ptrace
/// rights over it), or -1 with errno set. The tests read socket options off the daemon's own
/// sockets with it.
int cwsb_copy_fd_of(int pid, int fd);

/// The uid owning the far end of a loopback TCP connection whose ends are `local` and `peer`
/// (struct sockaddr_in or sockaddr_in6 each, of one family), asked of the kernel with one
/// sock_diag lookup. Returns 0 and sets `uid`, or -errno (-ENOENT: no such socket, as when the
/// peer is in another network namespace).
int cwsb_tcp_peer_uid(const void *local, const void *peer, uint32_t *uid);

/// SO_PEERCRED's value on this architecture (the C macro: 17 on x86 and arm, 21 on powerpc,
/// 18 on mips).
int cwsb_so_peercred(void);

/// Opens a non-blocking NETLINK_ROUTE socket subscribed to link, IPv4/IPv6 address and route
/// changes. Returns the fd or -errno.
int cwsb_rtnetlink_open(void);

/// Drains pending rtnetlink messages from `fd`. Returns the number of link/address/route
/// messages seen (0 when only noise arrived), or -errno (-EAGAIN when nothing was pending).
int cwsb_rtnetlink_drain(int fd);

/// Asks the kernel for the route it would use to reach `address` (4 or 16 bytes, `family`
/// AF_INET or AF_INET6) with RTM_GETROUTE. Returns 1 when a usable unicast route exists,
/// 0 when there is none (unreachable, no interface up), or -errno on failure.
int cwsb_route_exists(int family, const uint8_t *address);

/// cwsb_route_exists for the IPv4 or IPv6 address in `address` (a struct sockaddr_in or
/// sockaddr_in6, as getaddrinfo and SwiftNIO's SocketAddress give it); -EAFNOSUPPORT for any
/// other family.
int cwsb_route_exists_to(const void *address);

/// glibc's malloc_trim(0) (which Glibc's Swift module does not export): gives the free pages of
/// every malloc arena back to the kernel, not only the top of the main heap. 1 when it released
/// memory, else 0.
int cwsb_malloc_trim(void);

/// CLOCK_BOOTTIME and CLOCK_MONOTONIC in nanoseconds (their difference grows across suspend).
uint64_t cwsb_boottime_ns(void);
uint64_t cwsb_monotonic_ns(void);

/// CRC-32C (Castagnoli, the iSCSI polynomial 0x1EDC6F41 reflected), continuing from `crc`
/// (0 to start). The outbound spool checks each record with it. SSE4.2's crc32 instruction
/// where the CPU has it, else a table. cwsb_crc32c(0, "123456789", 9) == 0xE3069283.
uint32_t cwsb_crc32c(uint32_t crc, const void *data, size_t length);

/// systemd's notification protocol (sd_notify(3)) from a socket opened once: sd_notify opens
/// one per call, so a process out of file descriptors could not ping the watchdog or say so in
/// STATUS=. `address` is NOTIFY_SOCKET: a path, or @name in the abstract namespace. 0, or -1
/// with errno (EAFNOSUPPORT for another kind of address: sd_notify handles those).
int cwsb_notify_open(const char *address);

/// Sends `state` ("READY=1", "STATUS=...") to the address cwsb_notify_open was given; blocks
/// while the receiver's queue is full. 0, or -1 with errno.
int cwsb_notify_send(const char *state);

#endif
