/* Logging and small helpers that are safe in hooks: no malloc, no stdio, no locks. */
#include <errno.h>
#include <stdarg.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

static int g_loglevel = 1; /* 0 error, 1 warn, 2 info, 3 debug */

int log_level(void)
{
    return g_loglevel;
}

void log_set_level(int level)
{
    g_loglevel = level;
}

uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void sleep_ns(uint64_t ns)
{
    struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

struct outbuf {
    char *p;
    size_t n, cap;
};

static void ob_putc(struct outbuf *o, char c)
{
    if (o->n + 1 < o->cap)
        o->p[o->n++] = c;
}

static void ob_puts(struct outbuf *o, const char *s)
{
    if (!s)
        s = "(null)";
    while (*s)
        ob_putc(o, *s++);
}

static void ob_putu(struct outbuf *o, unsigned long long v, unsigned base)
{
    char tmp[24];
    int i = 0;
    do {
        tmp[i++] = "0123456789abcdef"[v % base];
        v /= base;
    } while (v && i < (int)sizeof tmp);
    while (i)
        ob_putc(o, tmp[--i]);
}

/* A tiny vsnprintf: %s %d %u %ld %lu %lld %llu %zu %x %lx %llx %%. */
static size_t fmt_v(char *buf, size_t cap, const char *fmt, va_list ap)
{
    struct outbuf o = { buf, 0, cap };
    for (; *fmt; fmt++) {
        if (*fmt != '%') {
            ob_putc(&o, *fmt);
            continue;
        }
        fmt++;
        int longs = 0, size = 0;
        while (*fmt == 'l') {
            longs++;
            fmt++;
        }
        if (*fmt == 'z') {
            size = 1;
            fmt++;
        }
        switch (*fmt) {
        case 's':
            ob_puts(&o, va_arg(ap, const char *));
            break;
        case 'd': {
            long long v = longs >= 2 ? va_arg(ap, long long) : longs ? va_arg(ap, long) : va_arg(ap, int);
            if (v < 0) {
                ob_putc(&o, '-');
                ob_putu(&o, 0ull - (unsigned long long)v, 10);
            } else {
                ob_putu(&o, (unsigned long long)v, 10);
            }
            break;
        }
        case 'u':
        case 'x': {
            unsigned long long v = size ? va_arg(ap, size_t)
                                 : longs >= 2 ? va_arg(ap, unsigned long long)
                                 : longs ? va_arg(ap, unsigned long)
                                         : va_arg(ap, unsigned int);
            ob_putu(&o, v, *fmt == 'x' ? 16 : 10);
            break;
        }
        case '%':
            ob_putc(&o, '%');
            break;
        case '\0':
            fmt--;
            break;
        default:
            ob_putc(&o, '?');
        }
    }
    if (cap)
        buf[o.n] = '\0';
    return o.n;
}

size_t fmt_s(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t n = fmt_v(buf, cap, fmt, ap);
    va_end(ap);
    return n;
}

void tlog(int level, const char *fmt, ...)
{
    static const char *const names[] = { "ERROR", "WARN", "INFO", "DEBUG" };
    if (level > g_loglevel)
        return;
    int saved = errno;
    char buf[512];
    size_t n = fmt_s(buf, sizeof buf, "[tessera %d] %s: ", (int)getpid(), names[level < 0 ? 0 : level > 3 ? 3 : level]);
    va_list ap;
    va_start(ap, fmt);
    n += fmt_v(buf + n, sizeof buf - n - 1, fmt, ap);
    va_end(ap);
    buf[n++] = '\n';
    ssize_t w = write(2, buf, n);
    (void)w;
    errno = saved;
}

/* Parses a byte size: digits with an optional k/m/g/t suffix (binary units,
 * optional trailing 'i'/'b'). Returns 0 on success. */
int parse_size(const char *s, uint64_t *out)
{
    if (!s || !*s)
        return -1;
    uint64_t v = 0;
    const char *p = s;
    if (*p < '0' || *p > '9')
        return -1;
    while (*p >= '0' && *p <= '9') {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
        p++;
    }
    unsigned shift = 0;
    switch (*p) {
    case 'k': case 'K': shift = 10; p++; break;
    case 'm': case 'M': shift = 20; p++; break;
    case 'g': case 'G': shift = 30; p++; break;
    case 't': case 'T': shift = 40; p++; break;
    default: break;
    }
    if (shift && (*p == 'i' || *p == 'I'))
        p++;
    if (shift && (*p == 'b' || *p == 'B'))
        p++;
    if (*p)
        return -1;
    if (shift && v > (UINT64_MAX >> shift))
        return -1;
    *out = v << shift;
    return 0;
}

int parse_int_range(const char *s, long lo, long hi, long *out)
{
    if (!s || !*s)
        return -1;
    int neg = 0;
    const char *p = s;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    if (!*p)
        return -1;
    long v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9' || v > 1000000000L)
            return -1;
        v = v * 10 + (*p - '0');
    }
    if (neg)
        v = -v;
    if (v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

size_t str_len(const char *s)
{
    size_t n = 0;
    while (s[n])
        n++;
    return n;
}

void str_copy(char *dst, size_t cap, const char *src)
{
    size_t i = 0;
    for (; src[i] && i + 1 < cap; i++)
        dst[i] = src[i];
    dst[i] = '\0';
}

/* CUDA returns 16 raw bytes; NVML and the limits file use "GPU-8-4-4-4-12". */
void uuid_format(const unsigned char b[16], char out[48])
{
    static const char hex[] = "0123456789abcdef";
    char *o = out;
    *o++ = 'G'; *o++ = 'P'; *o++ = 'U'; *o++ = '-';
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *o++ = '-';
        *o++ = hex[b[i] >> 4];
        *o++ = hex[b[i] & 15];
    }
    *o = '\0';
}

__thread int t_in_hook __attribute__((tls_model("initial-exec")));
