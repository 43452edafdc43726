/*
 * What the C reference loops (crr_reference.c, tcp_reference.c, udp_reference.c) share: the
 * clock their rates are timed with, and the loopback address both ends use. Included, not
 * linked: each loop stays one file that the compare bench compiles alone.
 */

#ifndef XBENCH_REFERENCE_H
#define XBENCH_REFERENCE_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <time.h>

/* Seconds on the monotonic clock. */
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* 127.0.0.1 at `port`. */
static struct sockaddr_in loopback(int port) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

#endif
