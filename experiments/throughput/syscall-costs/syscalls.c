// Per-call cost of a server's receive and send system calls on a TCP loopback connection,
// one thread: the client writes a 26-byte get, the server receives it, sends a 71-byte
// reply, the client reads it. Only the server's receive and send calls are timed (rdtsc,
// converted to ns); each variant runs ROUNDS rounds of CALLS calls on a fresh connection,
// the variants interleaved round by round, and a round's median is kept: preemption by
// other load lands in the tails, not the medians. Prints JSON.
//
//   cc -O2 -o syscalls syscalls.c && taskset -c 0 ./syscalls > results.json
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

enum { CALLS = 20000, ROUNDS = 15, VARIANTS = 6 };

static const char REQ[] = "get key:0000000000001234\r\n";
static const char REP[] = "VALUE key:0000000000001234 0 32\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\nEND\r\n";

// Receive variant v is timed on the same connection as send variant v.
static const char *RECV[VARIANTS] = {"read", "recv", "recvmsg", "recv_stamp_on",
                                     "recvmsg_stamp_cmsg", "recv_again"};
static const char *SEND[VARIANTS] = {"write", "send", "writev_1", "sendmsg_1", "writev_2",
                                     "send_again"};

static void check(int ok, const char *what) {
  if (!ok) { perror(what); exit(1); }
}

static void connect_pair(int *cli, int *srv, int stamp) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  check(bind(l, (void *)&a, sizeof a) == 0, "bind");
  check(listen(l, 1) == 0, "listen");
  check(getsockname(l, (void *)&a, &len) == 0, "getsockname");
  *cli = socket(AF_INET, SOCK_STREAM, 0);
  check(connect(*cli, (void *)&a, sizeof a) == 0, "connect");
  *srv = accept(l, 0, 0);
  check(*srv >= 0, "accept");
  close(l);
  int one = 1;
  setsockopt(*cli, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(*srv, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (stamp) check(setsockopt(*srv, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) == 0, "stamp");
}

static int by_value(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static int by_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static ssize_t receive(int v, int fd, char *buf, size_t cap) {
  static char control[64];
  struct iovec iov = {buf, cap};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  switch (v) {
  case 0: return read(fd, buf, cap);
  case 2: return recvmsg(fd, &m, 0);
  case 4: m.msg_control = control; m.msg_controllen = sizeof control; return recvmsg(fd, &m, 0);
  default: return recv(fd, buf, cap, 0);
  }
}

static ssize_t transmit(int v, int fd) {
  size_t n = sizeof REP - 1;
  struct iovec one = {(void *)REP, n};
  struct iovec two[2] = {{(void *)REP, 40}, {(void *)(REP + 40), n - 40}};
  struct msghdr m = {.msg_iov = &one, .msg_iovlen = 1};
  switch (v) {
  case 0: return write(fd, REP, n);
  case 2: return writev(fd, &one, 1);
  case 3: return sendmsg(fd, &m, MSG_NOSIGNAL);
  case 4: return writev(fd, two, 2);
  default: return send(fd, REP, n, MSG_NOSIGNAL);
  }
}

int main(void) {
  static uint64_t rt[CALLS], st[CALLS];
  static double rmed[VARIANTS][ROUNDS], smed[VARIANTS][ROUNDS];
  char buf[65536];
  struct timespec t0, t1;
  uint64_t c0 = __rdtsc();
  clock_gettime(CLOCK_MONOTONIC, &t0);
  usleep(200000);
  uint64_t c1 = __rdtsc();
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ns_per_tick =
      ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / (double)(c1 - c0);
  for (int r = 0; r < ROUNDS; r++) {
    for (int v = 0; v < VARIANTS; v++) {
      int cli, srv;
      connect_pair(&cli, &srv, v == 3 || v == 4);
      usleep(20000);  // the kernel turns stamping on from deferred work
      for (int i = 0; i < CALLS; i++) {
        check(write(cli, REQ, sizeof REQ - 1) == sizeof REQ - 1, "request");
        uint64_t a = __rdtsc();
        ssize_t n = receive(v, srv, buf, sizeof buf);
        uint64_t b = __rdtsc();
        check(n == sizeof REQ - 1, "receive");
        rt[i] = b - a;
        a = __rdtsc();
        n = transmit(v, srv);
        b = __rdtsc();
        check(n == sizeof REP - 1, "send");
        st[i] = b - a;
        check(read(cli, buf, sizeof buf) == sizeof REP - 1, "reply");
      }
      qsort(rt, CALLS, sizeof rt[0], by_value);
      qsort(st, CALLS, sizeof st[0], by_value);
      rmed[v][r] = rt[CALLS / 2] * ns_per_tick;
      smed[v][r] = st[CALLS / 2] * ns_per_tick;
      close(cli);
      close(srv);
    }
  }
  printf("{\n  \"calls_per_round\": %d,\n  \"rounds\": %d,\n", CALLS, ROUNDS);
  for (int side = 0; side < 2; side++) {
    printf("  \"%s\": {\n", side ? "send_ns" : "receive_ns");
    for (int v = 0; v < VARIANTS; v++) {
      double *m = side ? smed[v] : rmed[v];
      qsort(m, ROUNDS, sizeof m[0], by_double);
      printf("    \"%s\": {\"median\": %.0f, \"min\": %.0f, \"max\": %.0f}%s\n",
             side ? SEND[v] : RECV[v], m[ROUNDS / 2], m[0], m[ROUNDS - 1],
             v + 1 < VARIANTS ? "," : "");
    }
    printf("  }%s\n", side ? "" : ",");
  }
  printf("}\n");
  return 0;
}
