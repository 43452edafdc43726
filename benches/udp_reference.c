/*
 * The physical limit for unpaced UDP on this machine (issue 36): the fastest plain loop the
 * kernel offers on each end. The sender hands the kernel batches of datagrams with
 * segmentation offload (UDP_SEGMENT: one send of up to 64 datagrams, cut by the kernel), the
 * receiver takes them with receive offload (UDP_GRO: the kernel hands over runs of datagrams
 * in one buffer) and recvmmsg (many buffers per call), as the newest iperf3's --gsro does.
 * Datagrams are counted one by one from the GRO segment size, so the figure is datagrams the
 * receiving program got, comparable with xbench's and iperf3's receiver counts.
 *
 *   udp_reference server PORT            -> "datagrams N bytes B" (after 0.5 s of silence)
 *   udp_reference client PORT LEN SECS   -> "datagrams N seconds S"
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "reference.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#ifndef SOL_UDP
#define SOL_UDP 17
#endif

#define BATCH 64          /* buffers per recvmmsg, and most segments per GSO send */
#define BUF (64 * 1024)   /* a GRO run is at most 64 KiB */

static int server(int port) {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = loopback(port);
    int one = 1, big = 64 << 20;
    setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        perror("bind");
        return 1;
    }
    static char bufs[BATCH][BUF];
    static char ctrl[BATCH][CMSG_SPACE(sizeof(int))];
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    unsigned long long datagrams = 0, bytes = 0;
    int started = 0;
    for (;;) {
        for (int i = 0; i < BATCH; i++) {
            iov[i].iov_base = bufs[i];
            iov[i].iov_len = BUF;
            memset(&msgs[i], 0, sizeof msgs[i]);
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_hdr.msg_control = ctrl[i];
            msgs[i].msg_hdr.msg_controllen = sizeof ctrl[i];
        }
        /* The first datagram may be far off; after it, 0.5 s of silence ends the test. */
        struct timeval tv = {started ? 0 : 30, started ? 500000 : 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        int n = recvmmsg(fd, msgs, BATCH, MSG_WAITFORONE, NULL);
        if (n <= 0) break;
        started = 1;
        for (int i = 0; i < n; i++) {
            unsigned int len = msgs[i].msg_len;
            int seg = 0;
            for (struct cmsghdr *c = CMSG_FIRSTHDR(&msgs[i].msg_hdr); c;
                 c = CMSG_NXTHDR(&msgs[i].msg_hdr, c)) {
                if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO)
                    memcpy(&seg, CMSG_DATA(c), sizeof seg);
            }
            datagrams += seg > 0 ? (len + (unsigned)seg - 1) / (unsigned)seg : 1;
            bytes += len;
        }
    }
    printf("datagrams %llu bytes %llu\n", datagrams, bytes);
    return 0;
}

static int client(int port, int len, double secs) {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = loopback(port);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        perror("connect");
        return 1;
    }
    int segs = 60000 / len;
    if (segs > BATCH) segs = BATCH;
    if (segs < 1) segs = 1;
    if (segs > 1 && setsockopt(fd, SOL_UDP, UDP_SEGMENT, &len, sizeof len) < 0) segs = 1;
    size_t size = (size_t)len * (size_t)segs;
    char *buf = calloc(1, size);
    if (!buf) return 1;
    unsigned long long datagrams = 0;
    double start = now(), until = start + secs;
    while (now() < until) {
        ssize_t w = send(fd, buf, size, 0);
        if (w > 0) datagrams += (unsigned long long)w / (unsigned long long)len;
    }
    printf("datagrams %llu seconds %.6f\n", datagrams, now() - start);
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "server") == 0) return server(atoi(argv[2]));
    if (argc == 5 && strcmp(argv[1], "client") == 0) {
        int len = atoi(argv[3]);
        if (len < 1 || len > 65507) return 2;
        return client(atoi(argv[2]), len, atof(argv[4]));
    }
    fprintf(stderr,
            "usage: udp_reference server PORT\n"
            "       udp_reference client PORT LEN SECS\n");
    return 2;
}
