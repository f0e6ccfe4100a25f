// tcp_peer: the two ends of one TCP transfer for the network tests (a training job's gradient
// traffic, without NCCL). The receiver reads until end of file; the sender sends a known number
// of bytes, waits until the receiver has them all, and reports its socket's own retransmit
// count (TCP_INFO), the ground truth a test compares the daemon with. IPv4 or IPv6.
#define _GNU_SOURCE

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char kUsage[] =
    "usage: tcp_peer --listen PORT [--ready-fd FD] [--timeout-s T]\n"
    "       tcp_peer --send HOST:PORT --bytes N [--timeout-s T]\n"
    "       tcp_peer --udp-flood PORT [--timeout-s T]\n"
    "  --listen PORT   accept one connection on PORT (any address, IPv6 socket that also takes\n"
    "                  IPv4), write one byte 'r' to FD once listening, read until end of file,\n"
    "                  close, print 'received=<bytes>'\n"
    "  --send H:P      connect to H:P (retrying until the timeout; H may be [v6]), send N\n"
    "                  bytes, shut down writing, wait for the receiver to close, print\n"
    "                  'sent=<bytes> retransmits=<tcpi_total_retrans> pid=<pid>'\n"
    "  --udp-flood P   bind a UDP socket on 127.0.0.1:P that is never read (its queue fills,\n"
    "                  later datagrams are dropped on arrival) and send it 64-byte datagrams\n"
    "                  as fast as the CPU allows until the limit: the receive path's softirq\n"
    "                  work for a test (steered to another CPU with RPS)\n"
    "  --timeout-s T   the whole run's limit (default 60): then SIGALRM ends it\n"
    "Exit 0 when every byte went across; 1: a system call failed (or connect timed out);\n"
    "2: bad usage; killed by SIGALRM: the run passed its limit.\n";

__attribute__((noreturn)) static void fail(const char* what) {
  fprintf(stderr, "tcp_peer: %s: %s\n", what, strerror(errno));
  exit(1);
}

__attribute__((noreturn)) static void usage(const char* why) {
  fprintf(stderr, "tcp_peer: %s\n%s", why, kUsage);
  exit(2);
}

static int receive(const char* port_text, long ready_fd) {
  int port = atoi(port_text);
  if (port <= 0 || port > 65535) usage("--listen needs a port number");
  int s = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) fail("socket");
  int zero = 0, one = 1;
  setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  struct sockaddr_in6 a;
  memset(&a, 0, sizeof(a));
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_any;
  a.sin6_port = htons((unsigned short)port);
  if (bind(s, (struct sockaddr*)&a, sizeof(a)) != 0) fail("bind");
  if (listen(s, 1) != 0) fail("listen");
  if (ready_fd >= 0 && write((int)ready_fd, "r", 1) != 1) fail("write --ready-fd");
  int c = accept(s, NULL, NULL);
  if (c < 0) fail("accept");
  static char buf[1 << 16];
  unsigned long long total = 0;
  for (;;) {
    ssize_t n = read(c, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("read");
    if (n == 0) break;
    total += (unsigned long long)n;
  }
  close(c);
  close(s);
  printf("received=%llu\n", total);
  return 0;
}

static int connect_to(const char* target, int timeout_s) {
  char host[256];
  const char* colon = strrchr(target, ':');
  if (colon == NULL || colon == target || (size_t)(colon - target) >= sizeof(host))
    usage("--send needs HOST:PORT");
  memcpy(host, target, (size_t)(colon - target));
  host[colon - target] = '\0';
  char* h = host;
  if (h[0] == '[' && h[strlen(h) - 1] == ']') {
    h[strlen(h) - 1] = '\0';
    ++h;
  }
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  int rc = getaddrinfo(h, colon + 1, &hints, &res);
  if (rc != 0) {
    fprintf(stderr, "tcp_peer: %s: %s\n", target, gai_strerror(rc));
    exit(2);
  }
  time_t end = time(NULL) + timeout_s;
  for (;;) {
    int s = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) fail("socket");
    if (connect(s, res->ai_addr, res->ai_addrlen) == 0) {
      freeaddrinfo(res);
      return s;
    }
    if (errno != ECONNREFUSED && errno != EINTR) fail("connect");
    close(s);
    if (time(NULL) >= end) fail("connect (timed out)");
    usleep(20000);
  }
}

static int send_bytes(const char* target, unsigned long long bytes, int timeout_s) {
  int s = connect_to(target, timeout_s);
  static char buf[1 << 16];
  memset(buf, 0x42, sizeof(buf));
  unsigned long long sent = 0;
  while (sent < bytes) {
    size_t len = bytes - sent < sizeof(buf) ? (size_t)(bytes - sent) : sizeof(buf);
    ssize_t n = write(s, buf, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("write");
    sent += (unsigned long long)n;
  }
  if (shutdown(s, SHUT_WR) != 0) fail("shutdown");
  // The receiver closes after reading everything: end of file here means all bytes arrived.
  char b;
  ssize_t n;
  while ((n = read(s, &b, 1)) < 0 && errno == EINTR) {
  }
  if (n < 0) fail("read (waiting for the receiver to close)");
  struct tcp_info info;
  socklen_t len = sizeof(info);
  memset(&info, 0, sizeof(info));
  if (getsockopt(s, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) fail("getsockopt TCP_INFO");
  close(s);
  printf("sent=%llu retransmits=%u pid=%ld\n", sent, info.tcpi_total_retrans, (long)getpid());
  return 0;
}

// --udp-flood: never returns (SIGALRM ends it at the limit).
static int udp_flood(const char* port_text) {
  const int port = atoi(port_text);
  if (port <= 0 || port > 65535) usage("--udp-flood needs a port from 1 to 65535");
  struct sockaddr_in to;
  memset(&to, 0, sizeof(to));
  to.sin_family = AF_INET;
  to.sin_port = htons((unsigned short)port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int sink = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sink < 0) fail("socket");
  int small = 4096;
  setsockopt(sink, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  if (bind(sink, (struct sockaddr*)&to, sizeof(to)) != 0) fail("bind");
  const int out = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (out < 0) fail("socket");
  char payload[64];
  memset(payload, 'x', sizeof(payload));
  for (;;) {
    if (sendto(out, payload, sizeof(payload), 0, (struct sockaddr*)&to, sizeof(to)) < 0 &&
        errno != ENOBUFS && errno != EAGAIN && errno != EINTR) {
      fail("sendto");
    }
  }
}

int main(int argc, char** argv) {
  const char* flood_port = NULL;
  const char* listen_port = NULL;
  const char* target = NULL;
  unsigned long long bytes = 0;
  long ready_fd = -1;
  int timeout_s = 60;
  static const struct option kOptions[] = {
      {"listen", required_argument, NULL, 'l'},
      {"send", required_argument, NULL, 's'},
      {"bytes", required_argument, NULL, 'b'},
      {"ready-fd", required_argument, NULL, 'R'},
      {"timeout-s", required_argument, NULL, 't'},
      {"udp-flood", required_argument, NULL, 'u'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  int opt;
  while ((opt = getopt_long(argc, argv, "h", kOptions, NULL)) != -1) {
    switch (opt) {
      case 'l':
        listen_port = optarg;
        break;
      case 's':
        target = optarg;
        break;
      case 'b':
        bytes = strtoull(optarg, NULL, 10);
        break;
      case 'R':
        ready_fd = atol(optarg);
        break;
      case 't':
        timeout_s = atoi(optarg);
        break;
      case 'u':
        flood_port = optarg;
        break;
      case 'h':
        fputs(kUsage, stdout);
        return 0;
      default:
        fputs(kUsage, stderr);
        return 2;
    }
  }
  if (optind != argc) usage("unexpected argument");
  if (flood_port != NULL) {
    if (timeout_s <= 0) usage("--timeout-s must be positive");
    alarm((unsigned)timeout_s);
    return udp_flood(flood_port);
  }
  if ((listen_port == NULL) == (target == NULL)) usage("give exactly one of --listen, --send");
  if (target != NULL && bytes == 0) usage("--send needs --bytes N (N > 0)");
  if (timeout_s <= 0) usage("--timeout-s must be positive");
  alarm((unsigned)timeout_s);  // SIGALRM ends a run stuck in the network: exit by signal
  return listen_port != NULL ? receive(listen_port, ready_fd)
                             : send_bytes(target, bytes, timeout_s);
}
