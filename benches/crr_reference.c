/*
 * The physical limit for TCP_CRR on this machine (issue 20): a plain blocking loop of
 * connect -> send request -> receive response -> close, against a blocking
 * accept -> receive -> send -> close server. Nothing else runs on either side: no event loop,
 * no greeting, no key, no statistics beyond a counter and the summed round trips. The compare
 * bench compiles it with the system C compiler and runs it beside `xbench --crr` with the same
 * message sizes, so the ratio says what xbench's machinery costs per connection.
 *
 * The server closes first (as xbench's does), so the TIME_WAIT state lands on the server and
 * the client's ephemeral ports are reused at once.
 *
 *   crr_reference server PORT SIZE
 *   crr_reference client PORT SIZE SECS   -> "transactions N seconds S mean_us M"
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "reference.h"

/* Reads exactly n bytes; 0 on success. */
static int read_full(int fd, char *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

static int server(int port, size_t size, char *buf) {
    int one = 1;
    int l = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = loopback(port);
    if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1024)) {
        perror("crr_reference server");
        return 1;
    }
    for (;;) {
        int c = accept(l, NULL, NULL);
        if (c < 0) continue;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (read_full(c, buf, size) == 0) (void)!write(c, buf, size);
        close(c);
    }
}

static int client(int port, size_t size, double secs, char *buf) {
    int one = 1;
    struct sockaddr_in a = loopback(port);
    unsigned long n = 0;
    double total = 0;
    double start = now();
    double end = start + secs;
    for (;;) {
        double t0 = now();
        if (t0 >= end) break;
        int s = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(s, (struct sockaddr *)&a, sizeof a)) {
            perror("crr_reference connect");
            return 1;
        }
        if (write(s, buf, size) != (ssize_t)size || read_full(s, buf, size)) {
            perror("crr_reference transaction");
            return 1;
        }
        /* The server's close: wait for its FIN, as a client that reads to the end does. */
        char c;
        (void)!read(s, &c, 1);
        close(s);
        total += now() - t0;
        n++;
    }
    double elapsed = now() - start;
    printf("transactions %lu seconds %.6f mean_us %.3f\n", n, elapsed, n ? total / n * 1e6 : 0.0);
    return 0;
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    if (argc < 4) {
        fprintf(stderr, "usage: %s server PORT SIZE | client PORT SIZE SECS\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[2]);
    size_t size = (size_t)atoi(argv[3]);
    char *buf = calloc(size ? size : 1, 1);
    if (!strcmp(argv[1], "server")) return server(port, size, buf);
    if (!strcmp(argv[1], "client") && argc == 5) return client(port, size, atof(argv[4]), buf);
    fprintf(stderr, "usage: %s server PORT SIZE | client PORT SIZE SECS\n", argv[0]);
    return 2;
}
