/* util.c: hook-safe logging (write(2), no stdio), clocks, number and UUID
 * parsing/formatting, and the per-thread re-entry guard. No state besides the
 * log level (set once at load) and the guard. */
#ifndef TESSERA_UTIL_H
#define TESSERA_UTIL_H

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

#define LOG_ERROR 0
#define LOG_WARN 1
#define LOG_INFO 2
#define LOG_DEBUG 3

void tlog(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int log_level(void);
void log_set_level(int level); /* 0 error … 3 debug; larger values are clamped when logging */

/* snprintf for hooks: %s %d %u %ld %lu %lld %llu %zu %x %lx %llx %%; returns the length written */
size_t fmt_s(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

uint64_t mono_ns(void);
void sleep_ns(uint64_t ns);

/* 0 on success: digits with an optional k/m/g/t binary suffix */
int parse_size(const char *s, uint64_t *out);
/* 0 on success: an integer in [lo, hi] */
int parse_int_range(const char *s, long lo, long hi, long *out);
size_t str_len(const char *s);
void str_copy(char *dst, size_t cap, const char *src);
/* CUDA's 16 raw bytes as NVML prints them: "GPU-8-4-4-4-12" */
void uuid_format(const unsigned char b[16], char out[48]);

/* A per-thread re-entry guard: the real driver may call exported cu* symbols
 * internally, which the dynamic linker would bind to our hooks. Non-zero while
 * this thread runs our code around a driver call. */
extern __thread int t_in_hook __attribute__((tls_model("initial-exec")));

#pragma GCC visibility pop

#endif
