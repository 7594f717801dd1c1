// vsock-host-echo: the host's own floor for scripts/vsock-side-by-side.sh (its `host-echo` row).
//
// Serves the host side of Firecracker's hybrid-vsock protocol with no VM behind it: listens on
// a Unix socket, reads each client's `CONNECT <port>\n`, answers `OK 1\n` and echoes every byte
// back, one thread per connection that polls its socket (non-blocking reads in a loop, as a
// polling iothread watches its rings) or, with `--block`, sleeps in read. scripts/vsock-bench.c
// measured against it gives what a round trip and a bulk echo cost between two host processes
// on this machine: the part of a VMM's figures that no VMM can remove (the client's own wake-ups
// and socket calls), and with `--block`, what a sleeping server's wake-up adds.
//
// Usage: vsock-host-echo [--block] PATH   (runs until killed)
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int block_mode;

static int write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EAGAIN) {
            sched_yield();
            continue;
        }
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static void *serve(void *arg) {
    int c = (int)(long)arg;
    static __thread char buf[256 * 1024];
    // The CONNECT line, a byte at a time: nothing after it may be taken for the line.
    size_t n = 0;
    for (;;) {
        if (n == 64 || read(c, buf + n, 1) != 1)
            goto out;
        if (buf[n++] == '\n')
            break;
    }
    if (strncasecmp(buf, "CONNECT ", 8) != 0 || write_all(c, "OK 1\n", 5) != 0)
        goto out;
    if (!block_mode)
        fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK);
    for (;;) {
        ssize_t r = read(c, buf, sizeof buf);
        if (r < 0 && errno == EAGAIN)
            continue; // polling: the next byte is seen without a wake-up
        if (r <= 0 || write_all(c, buf, (size_t)r) != 0)
            break;
    }
out:
    close(c);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--block") == 0) {
        block_mode = 1;
        argv++;
        argc--;
    }
    if (argc != 2 || strlen(argv[1]) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
        fprintf(stderr, "usage: vsock-host-echo [--block] PATH (a Unix socket path)\n");
        return 2;
    }
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strcpy(a.sun_path, argv[1]);
    unlink(argv[1]);
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 128) != 0) {
        perror("vsock-host-echo: listen");
        return 1;
    }
    for (;;) {
        int c = accept(s, NULL, NULL);
        if (c < 0)
            continue;
        pthread_t t;
        if (pthread_create(&t, NULL, serve, (void *)(long)c) != 0) {
            close(c);
            continue;
        }
        pthread_detach(t);
    }
}
