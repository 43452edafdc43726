/*
 * The physical limit for bulk TCP on this machine (issue 36): a thread per stream, each a
 * plain blocking loop — the sender writes 128 KiB blocks until its time is up, the receiver
 * reads until the end of the stream, either copying into its buffer (`copy`, as iperf3 3.12
 * and `xbench --recv-copy` do) or letting the kernel discard the data (`trunc`: recv with
 * MSG_TRUNC, as xbench does by default and newer iperf3 does with --skip-rx-copy). No event
 * loop, no intervals, no TCP_INFO, no control connection: what is left is what any tool must
 * pay, so the compare bench's ratio says what xbench's machinery costs.
 *
 *   tcp_reference server PORT STREAMS copy|trunc   -> "bytes N"          (after every EOF)
 *   tcp_reference client PORT STREAMS SECS         -> "bytes N seconds S" (its sending time)
 *
 * Each end is its own process, so the bench reads each one's CPU from its rusage, as it does
 * for iperf3 and xbench.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "reference.h"

#define BLOCK (128 * 1024)
#define MAX_STREAMS 1024

struct stream {
    pthread_t thread;
    int fd;
    int trunc;
    double until;
    unsigned long long bytes;
};

static void *receive(void *arg) {
    struct stream *s = arg;
    char *buf = malloc(BLOCK);
    if (!buf) return NULL;
    int flags = s->trunc ? MSG_TRUNC : 0;
    for (;;) {
        ssize_t r = recv(s->fd, buf, BLOCK, flags);
        if (r <= 0) break;
        s->bytes += (unsigned long long)r;
    }
    free(buf);
    close(s->fd);
    return NULL;
}

static void *send_loop(void *arg) {
    struct stream *s = arg;
    char *buf = malloc(BLOCK);
    if (!buf) return NULL;
    memset(buf, 0x5a, BLOCK);
    while (now() < s->until) {
        ssize_t w = send(s->fd, buf, BLOCK, MSG_NOSIGNAL);
        if (w <= 0) break;
        s->bytes += (unsigned long long)w;
    }
    free(buf);
    shutdown(s->fd, SHUT_WR);
    /* Wait for the receiver's close, so every byte counted here has arrived. */
    char c;
    while (recv(s->fd, &c, 1, 0) > 0) {
    }
    close(s->fd);
    return NULL;
}

static int server(int port, int n, int trunc) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = loopback(port);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, MAX_STREAMS) < 0) {
        perror("listen");
        return 1;
    }
    static struct stream s[MAX_STREAMS];
    for (int i = 0; i < n; i++) {
        s[i].fd = accept(l, NULL, NULL);
        if (s[i].fd < 0) {
            perror("accept");
            return 1;
        }
        s[i].trunc = trunc;
        pthread_create(&s[i].thread, NULL, receive, &s[i]);
    }
    close(l);
    unsigned long long total = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(s[i].thread, NULL);
        total += s[i].bytes;
    }
    printf("bytes %llu\n", total);
    return 0;
}

static int client(int port, int n, double secs) {
    static struct stream s[MAX_STREAMS];
    struct sockaddr_in a = loopback(port);
    for (int i = 0; i < n; i++) {
        s[i].fd = socket(AF_INET, SOCK_STREAM, 0);
        if (s[i].fd < 0 || connect(s[i].fd, (struct sockaddr *)&a, sizeof a) < 0) {
            perror("connect");
            return 1;
        }
    }
    double start = now();
    for (int i = 0; i < n; i++) {
        s[i].until = start + secs;
        pthread_create(&s[i].thread, NULL, send_loop, &s[i]);
    }
    unsigned long long total = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(s[i].thread, NULL);
        total += s[i].bytes;
    }
    printf("bytes %llu seconds %.6f\n", total, now() - start);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "server") == 0) {
        int n = atoi(argv[3]);
        if (n < 1 || n > MAX_STREAMS) return 2;
        return server(atoi(argv[2]), n, strcmp(argv[4], "trunc") == 0);
    }
    if (argc == 5 && strcmp(argv[1], "client") == 0) {
        int n = atoi(argv[3]);
        if (n < 1 || n > MAX_STREAMS) return 2;
        return client(atoi(argv[2]), n, atof(argv[4]));
    }
    fprintf(stderr,
            "usage: tcp_reference server PORT STREAMS copy|trunc\n"
            "       tcp_reference client PORT STREAMS SECS\n");
    return 2;
}
