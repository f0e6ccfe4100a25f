// Command-line helpers shared by the test programs in this folder (cuda_workload, data_worker):
// a usage error that names the program and prints its usage text, a strict number parser, and
// an interrupted-sleep-safe nanosleep. Header-only; each program defines kProgram and kUsage
// before including it.
#ifndef STALLWATCH_TOOL_CLI_H
#define STALLWATCH_TOOL_CLI_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__attribute__((format(printf, 1, 2), noreturn)) static void usage_error(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", kProgram);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n%s", kUsage);
  exit(2);
}

// Whole-string unsigned decimal in [0, max]; anything else is a usage error naming the flag.
static unsigned long parse_number(const char* text, unsigned long max, const char* what) {
  char* end = NULL;
  errno = 0;
  if (text[0] < '0' || text[0] > '9') usage_error("%s needs a non-negative whole number", what);
  unsigned long v = strtoul(text, &end, 10);
  if (errno != 0 || *end != '\0' || v > max)
    usage_error("%s: number out of range or malformed", what);
  return v;
}

static void sleep_ns(unsigned long long ns) {
  struct timespec left = {(time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL)};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

#endif  // STALLWATCH_TOOL_CLI_H
