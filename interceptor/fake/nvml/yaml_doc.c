/* Strict reading of YAML documents (libyaml): plain scalars are typed the way PyYAML's safe_load types
 * them, so the fake accepts and refuses the same node files as dra_driver/backends/sim_node.py, and every
 * error names the field as a path (`gpus[2].instances[0].start`) and what was expected. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

enum ytype { Y_NULL, Y_BOOL, Y_INT, Y_FLOAT, Y_STR, Y_MAP, Y_SEQ };

static char g_err[1024];

__attribute__((format(printf, 1, 2))) static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    return -1;
}

/* snprintf whose truncation is an answer, not a surprise: 0, or -1 when the text did not fit */
__attribute__((format(printf, 3, 4))) static int strf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    return n >= 0 && (size_t)n < len ? 0 : -1;
}

/* `where.name`, or `name` at the top */
static const char *field(char *buf, size_t len, const char *where, const char *name)
{
    strf(buf, len, "%s%s%s", where, *where ? "." : "", name);
    return buf;
}

static int y_load(const char *path, yaml_document_t *doc)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return fail("cannot read %s: %s", path, strerror(errno));
    yaml_parser_t p;
    yaml_parser_initialize(&p);
    yaml_parser_set_input_file(&p, f);
    int ok = yaml_parser_load(&p, doc);
    if (!ok)
        fail("%s is not valid YAML: %s (line %zu)", path, p.problem ? p.problem : "parse error",
             p.problem_mark.line + 1);
    yaml_parser_delete(&p);
    fclose(f);
    if (ok && !yaml_document_get_root_node(doc)) {
        yaml_document_delete(doc);
        return fail("%s is empty", path);
    }
    return ok ? 0 : -1;
}

static int all_match(const char *s, const char *set)
{
    return *s && strspn(s, set) == strlen(s);
}

/* YAML 1.1 integers as PyYAML reads them: 0x.. hex, 0b.. binary, 0.. octal, else decimal */
static int int_base(const char *s)
{
    if (*s == '+' || *s == '-')
        s++;
    if (!strncmp(s, "0x", 2))
        return all_match(s + 2, "0123456789abcdefABCDEF_") ? 16 : 0;
    if (!strncmp(s, "0b", 2))
        return all_match(s + 2, "01_") ? 2 : 0;
    if (s[0] == '0' && s[1])
        return all_match(s + 1, "01234567_") ? 8 : 0;
    return isdigit((unsigned char)*s) && all_match(s, "0123456789_") ? 10 : 0;
}

static int is_float_text(const char *s)
{
    static const char *special[] = { ".inf", ".Inf", ".INF", ".nan", ".NaN", ".NAN" };
    if (*s == '+' || *s == '-')
        s++;
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        if (!strcmp(s, special[i]))
            return 1;
    const char *dot = strchr(s, '.');
    if (!dot || strchr(dot + 1, '.'))
        return 0;
    char *end;
    errno = 0;
    strtod(s, &end);
    return *end == 0 && (isdigit((unsigned char)*s) || isdigit((unsigned char)dot[1]));
}

static enum ytype y_type(yaml_node_t *n)
{
    if (n->type == YAML_MAPPING_NODE)
        return Y_MAP;
    if (n->type == YAML_SEQUENCE_NODE)
        return Y_SEQ;
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return Y_STR;
    const char *s = (const char *)n->data.scalar.value;
    static const char *nulls[] = { "", "~", "null", "Null", "NULL" };
    static const char *bools[] = { "true", "True", "TRUE", "false", "False", "FALSE", "yes", "Yes", "YES",
                                   "no",   "No",   "NO",   "on",    "On",    "ON",    "off", "Off", "OFF" };
    for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++)
        if (!strcmp(s, nulls[i]))
            return Y_NULL;
    for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++)
        if (!strcmp(s, bools[i]))
            return Y_BOOL;
    if (int_base(s))
        return Y_INT;
    if (is_float_text(s))
        return Y_FLOAT;
    return Y_STR;
}

/* a Y_BOOL scalar's value */
static int y_truth(const char *text)
{
    return strchr("tTyY", *text) || !strcasecmp(text, "on");
}

static const char *y_type_name(enum ytype t)
{
    static const char *names[] = { "NoneType", "bool", "int", "float", "str", "dict", "list" };
    return names[t];
}

static const char *y_text(yaml_node_t *n)
{
    return n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : "...";
}

static yaml_node_t *y_get(yaml_document_t *d, yaml_node_t *map, const char *key)
{
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(d, p->key);
        if (k->type == YAML_SCALAR_NODE && !strcmp((const char *)k->data.scalar.value, key))
            return yaml_document_get_node(d, p->value);
    }
    return NULL;
}

static int y_expect(yaml_node_t *n, enum ytype want, const char *where)
{
    enum ytype t = y_type(n);
    if (t == want)
        return 0;
    if (want == Y_MAP)
        return fail("%s: expected a mapping with string keys, got %s", where, y_type_name(t));
    if (want == Y_SEQ)
        return fail("%s: expected a list, got %s", where, y_type_name(t));
    /* the value as Python's repr shows it */
    const char *text = y_text(n);
    if (t == Y_STR)
        return fail("%s: expected %s, got str '%s'", where, y_type_name(want), text);
    if (t == Y_BOOL)
        text = y_truth(text) ? "True" : "False";
    if (t == Y_NULL)
        text = "None";
    return fail("%s: expected %s, got %s %s", where, y_type_name(want), y_type_name(t), text);
}

static int in_list(const char *s, const char *const *list)
{
    for (; *list; list++)
        if (!strcmp(s, *list))
            return 1;
    return 0;
}

static int by_text(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Unknown fields first (the alphabetically first is named), then missing ones, as decoding.check_fields. */
static int y_check_fields(yaml_document_t *d, yaml_node_t *map, const char *where, const char *const *required,
                          const char *const *optional)
{
    const char *unknown = NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(d, p->key);
        if (k->type != YAML_SCALAR_NODE || y_type(k) != Y_STR)
            return fail("%s: expected a mapping with string keys", *where ? where : "node file");
        const char *key = (const char *)k->data.scalar.value;
        if (!in_list(key, required) && !in_list(key, optional) && (!unknown || strcmp(key, unknown) < 0))
            unknown = key;
    }
    if (unknown) {
        const char *names[32];
        size_t n = 0;
        const char *const *lists[] = { required, optional };
        for (int l = 0; l < 2; l++)
            for (const char *const *f = lists[l]; *f && n < 32; f++)
                names[n++] = *f;
        qsort(names, n, sizeof names[0], by_text);
        char allowed[512] = "";
        for (size_t i = 0; i < n; i++)
            strf(allowed + strlen(allowed), sizeof allowed - strlen(allowed), "%s%s", i ? ", " : "", names[i]);
        return fail("%s: unknown field '%s' (allowed fields: %s)", where, unknown, allowed);
    }
    for (const char *const *f = required; *f; f++)
        if (!y_get(d, map, *f))
            return fail("%s: missing required field '%s'", where, *f);
    return 0;
}

/* The scalar text of an optional field checked against `want`: NULL when absent (and *rc 0) or wrong (*rc -1) */
static const char *y_field(yaml_document_t *d, yaml_node_t *map, const char *name, const char *where,
                           enum ytype want, int *rc)
{
    char path[256];
    yaml_node_t *n = y_get(d, map, name);
    *rc = n && y_expect(n, want, field(path, sizeof path, where, name)) ? -1 : 0;
    return n && !*rc ? (const char *)n->data.scalar.value : NULL;
}

static int y_str(yaml_document_t *d, yaml_node_t *map, const char *name, const char *where, const char *def,
                 const char **out)
{
    int rc;
    const char *text = y_field(d, map, name, where, Y_STR, &rc);
    *out = text ? text : def;
    return rc;
}

static int y_long(yaml_document_t *d, yaml_node_t *map, const char *name, const char *where, long def, long *out)
{
    int rc;
    const char *text = y_field(d, map, name, where, Y_INT, &rc);
    *out = def;
    if (!text)
        return rc;
    char digits[64], *o = digits, path[256];
    for (; *text && o < digits + sizeof digits - 1; text++)
        if (*text != '_')
            *o++ = *text;
    *o = 0;
    const char *body = digits + (*digits == '+' || *digits == '-');
    int base = int_base(digits);
    errno = 0;
    long v = strtol(body + (base == 16 || base == 2 ? 2 : 0), NULL, base);
    if (errno)
        return fail("%s: %s is out of range", field(path, sizeof path, where, name), digits);
    *out = *digits == '-' ? -v : v;
    return 0;
}

static int y_bool(yaml_document_t *d, yaml_node_t *map, const char *name, const char *where, int def, int *out)
{
    int rc;
    const char *text = y_field(d, map, name, where, Y_BOOL, &rc);
    *out = text ? y_truth(text) : def;
    return rc;
}
