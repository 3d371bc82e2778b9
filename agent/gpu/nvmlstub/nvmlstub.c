// nvmlstub: a test stand-in for the NVIDIA driver's libnvidia-ml.so.1.
//
// It is NOT NVML. It implements the few NVML entry points slurmscope's GPU
// collector calls, with the real ABI (it is compiled against the nvml.h that
// go-nvml ships, so every prototype is checked by the compiler), and answers
// from a JSON scenario file named by $FAKE_NVML_SCENARIO. The file is re-read
// whenever its inode, size or mtime changes, so a test can change the "hardware"
// between two polls. See README.md next to this file for the schema.
//
// Hostile scenarios are rejected with a message on stderr naming the field,
// never a crash: every array, string and number is bounded.

#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include "nvml.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

// Bounds. Real hardware has at most 16 GPUs per node and 7 MIG instances per
// GPU; the stub allows more so benchmarks can go wide, but not unboundedly.
enum {
    MAX_FILE = 4 << 20,
    MAX_DEPTH = 32,
    MAX_DEVICES = 64,
    MAX_MIG = 8,
    MAX_PROCS = 4096,
    MAX_STR = 95, // NVML's UUID and name buffers are 96 bytes with the NUL
};

/* ---------- a small JSON parser (DOM, bounded) ---------- */

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;

typedef struct jval {
    jtype t;
    double num;
    int b;
    char *str;            // J_STR
    struct jval **items;  // J_ARR values, J_OBJ values
    char **keys;          // J_OBJ keys
    size_t n;
} jval;

typedef struct {
    const char *s, *end;
    int line, col;
    char err[256];
} jparser;

static void jfree(jval *v) {
    if (!v) return;
    for (size_t i = 0; i < v->n; i++) {
        jfree(v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    free(v);
}

static void jerr(jparser *p, const char *fmt, ...) {
    if (p->err[0]) return; // keep the first error
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, sizeof p->err, "line %d col %d: %s", p->line, p->col, msg);
}

static void adv(jparser *p) {
    if (p->s >= p->end) return;
    if (*p->s == '\n') { p->line++; p->col = 1; } else p->col++;
    p->s++;
}

static void ws(jparser *p) {
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r')) adv(p);
}

static int lit(jparser *p, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(p->end - p->s) < n || memcmp(p->s, w, n) != 0) return 0;
    for (size_t i = 0; i < n; i++) adv(p);
    return 1;
}

static jval *jnew(jtype t) {
    jval *v = calloc(1, sizeof *v);
    if (v) v->t = t;
    return v;
}

static int push(jval *v, jval *item, char *key) {
    jval **it = realloc(v->items, (v->n + 1) * sizeof *it);
    if (!it) return 0;
    v->items = it;
    if (v->t == J_OBJ) {
        char **k = realloc(v->keys, (v->n + 1) * sizeof *k);
        if (!k) return 0;
        v->keys = k;
        v->keys[v->n] = key;
    }
    v->items[v->n++] = item;
    return 1;
}

// parse_string reads a JSON string. \u escapes outside ASCII are kept as
// UTF-8; the stub has no use for surrogate pairs and rejects them.
static char *parse_string(jparser *p) {
    if (p->s >= p->end || *p->s != '"') { jerr(p, "expected string"); return NULL; }
    adv(p);
    size_t cap = 32, n = 0;
    char *out = malloc(cap);
    if (!out) { jerr(p, "out of memory"); return NULL; }
    while (p->s < p->end && *p->s != '"') {
        unsigned char c = (unsigned char)*p->s;
        if (c < 0x20) { jerr(p, "control character in string"); free(out); return NULL; }
        char buf[4];
        size_t len = 1;
        buf[0] = (char)c;
        if (c == '\\') {
            adv(p);
            if (p->s >= p->end) break;
            char e = *p->s;
            switch (e) {
            case '"': case '\\': case '/': buf[0] = e; break;
            case 'b': buf[0] = '\b'; break;
            case 'f': buf[0] = '\f'; break;
            case 'n': buf[0] = '\n'; break;
            case 'r': buf[0] = '\r'; break;
            case 't': buf[0] = '\t'; break;
            case 'u': {
                unsigned cp = 0;
                for (int i = 0; i < 4; i++) {
                    adv(p);
                    if (p->s >= p->end) { jerr(p, "truncated \\u escape"); free(out); return NULL; }
                    char h = *p->s;
                    cp <<= 4;
                    if (h >= '0' && h <= '9') cp |= (unsigned)(h - '0');
                    else if (h >= 'a' && h <= 'f') cp |= (unsigned)(h - 'a' + 10);
                    else if (h >= 'A' && h <= 'F') cp |= (unsigned)(h - 'A' + 10);
                    else { jerr(p, "bad \\u escape"); free(out); return NULL; }
                }
                if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF)) { jerr(p, "unsupported \\u escape"); free(out); return NULL; }
                if (cp < 0x80) { buf[0] = (char)cp; }
                else if (cp < 0x800) { buf[0] = (char)(0xC0 | cp >> 6); buf[1] = (char)(0x80 | (cp & 0x3F)); len = 2; }
                else { buf[0] = (char)(0xE0 | cp >> 12); buf[1] = (char)(0x80 | (cp >> 6 & 0x3F)); buf[2] = (char)(0x80 | (cp & 0x3F)); len = 3; }
                break;
            }
            default: jerr(p, "bad escape \\%c", e); free(out); return NULL;
            }
        }
        adv(p);
        if (n + len + 1 > cap) {
            cap *= 2;
            char *o = realloc(out, cap);
            if (!o) { jerr(p, "out of memory"); free(out); return NULL; }
            out = o;
        }
        memcpy(out + n, buf, len);
        n += len;
    }
    if (p->s >= p->end) { jerr(p, "unterminated string"); free(out); return NULL; }
    adv(p);
    out[n] = 0;
    return out;
}

static jval *parse_value(jparser *p, int depth) {
    ws(p);
    if (depth > MAX_DEPTH) { jerr(p, "nested deeper than %d", MAX_DEPTH); return NULL; }
    if (p->s >= p->end) { jerr(p, "unexpected end of input"); return NULL; }
    char c = *p->s;
    jval *v = NULL;
    if (c == '{' || c == '[') {
        int obj = c == '{';
        v = jnew(obj ? J_OBJ : J_ARR);
        if (!v) { jerr(p, "out of memory"); return NULL; }
        adv(p);
        ws(p);
        if (p->s < p->end && *p->s == (obj ? '}' : ']')) { adv(p); return v; }
        for (;;) {
            char *key = NULL;
            if (obj) {
                ws(p);
                if (!(key = parse_string(p))) goto fail;
                ws(p);
                if (p->s >= p->end || *p->s != ':') { free(key); jerr(p, "expected ':'"); goto fail; }
                adv(p);
            }
            jval *item = parse_value(p, depth + 1);
            if (!item || !push(v, item, key)) { free(key); jfree(item); jerr(p, "out of memory"); goto fail; }
            ws(p);
            if (p->s < p->end && *p->s == ',') { adv(p); continue; }
            if (p->s < p->end && *p->s == (obj ? '}' : ']')) { adv(p); return v; }
            jerr(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
            goto fail;
        }
    }
    if (c == '"') {
        char *s = parse_string(p);
        if (!s) return NULL;
        if (!(v = jnew(J_STR))) { free(s); jerr(p, "out of memory"); return NULL; }
        v->str = s;
        return v;
    }
    if (lit(p, "true") || lit(p, "false")) {
        if ((v = jnew(J_BOOL))) v->b = p->s[-1] == 'e' && p->s[-2] == 'u';
        return v;
    }
    if (lit(p, "null")) return jnew(J_NULL);
    if (c == '-' || (c >= '0' && c <= '9')) {
        char buf[64];
        size_t n = 0;
        while (p->s < p->end && n < sizeof buf - 1 && strchr("+-0123456789.eE", *p->s)) { buf[n++] = *p->s; adv(p); }
        buf[n] = 0;
        char *end;
        errno = 0;
        double d = strtod(buf, &end);
        if (*end || errno || !isfinite(d)) { jerr(p, "bad number %s", buf); return NULL; }
        if ((v = jnew(J_NUM))) v->num = d;
        return v;
    }
    jerr(p, "unexpected character '%c'", c);
    return NULL;
fail:
    jfree(v);
    return NULL;
}

/* ---------- the scenario ---------- */

typedef struct {
    int has; // the whole block is present; absent means NOT_SUPPORTED
    double sm, occ, tensor;
} gpm_vals;

typedef struct {
    char uuid[MAX_STR + 1], profile[MAX_STR + 1];
    unsigned gi, ci;
    int has_mem;
    unsigned long long mem_total, mem_used;
    gpm_vals gpm;
} mig_inst;

typedef struct {
    unsigned pid, gi, ci;
    unsigned long long used;
    int has_util;
    unsigned sm, mem;
} proc_info;

typedef struct {
    char uuid[MAX_STR + 1], name[MAX_STR + 1], bus[32];
    unsigned minor;
    int lost;
    int has_util;
    unsigned util_gpu, util_mem;
    int has_mem;
    unsigned long long mem_total, mem_used;
    int has_power, has_temp, has_clock;
    unsigned power_mw, temp_c, clock_mhz;
    gpm_vals gpm;
    int mig_mode; // MIG is enabled (a "mig" array is present)
    mig_inst mig[MAX_MIG];
    unsigned nmig;
    proc_info *procs;
    unsigned nprocs;
} device;

typedef struct {
    char driver[81];
    device dev[MAX_DEVICES];
    unsigned ndev;
} scenario;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static scenario *cur;
static int refcount;
static int bad; // the current file version is invalid
static struct { dev_t dev; ino_t ino; off_t size; struct timespec mtime; int valid; } seen;

static void free_scenario(scenario *s) {
    if (!s) return;
    for (unsigned i = 0; i < s->ndev; i++) free(s->dev[i].procs);
    free(s);
}

typedef struct {
    char path[128];
    char err[320];
} vctx;

static void verr(vctx *c, const char *fmt, ...) {
    if (c->err[0]) return;
    char msg[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->path[0]) snprintf(c->err, sizeof c->err, "%s: %s", c->path, msg);
    else snprintf(c->err, sizeof c->err, "%s", msg);
}

static jval *get(jval *o, const char *k) {
    if (!o || o->t != J_OBJ) return NULL;
    for (size_t i = 0; i < o->n; i++)
        if (strcmp(o->keys[i], k) == 0) return o->items[i];
    return NULL;
}

// Field readers: each sets *present and validates type and range.
static int get_str(vctx *c, jval *o, const char *k, char *dst, size_t cap, int required) {
    jval *v = get(o, k);
    size_t base = strlen(c->path);
    if (!v) {
        if (required) { snprintf(c->path + base, sizeof c->path - base, ".%s", k); verr(c, "missing"); c->path[base] = 0; }
        return 0;
    }
    if (v->t != J_STR || strlen(v->str) >= cap) {
        snprintf(c->path + base, sizeof c->path - base, ".%s", k);
        verr(c, v->t != J_STR ? "want a string" : "string longer than %zu bytes", cap - 1);
        c->path[base] = 0;
        return 0;
    }
    memcpy(dst, v->str, strlen(v->str) + 1);
    return 1;
}

static int get_num(vctx *c, jval *o, const char *k, double lo, double hi, int integer, double *dst) {
    jval *v = get(o, k);
    if (!v) return 0;
    if (v->t != J_NUM || v->num < lo || v->num > hi || (integer && v->num != floor(v->num))) {
        size_t base = strlen(c->path);
        snprintf(c->path + base, sizeof c->path - base, ".%s", k);
        verr(c, "want %s in [%.0f, %.0f]", integer ? "an integer" : "a number", lo, hi);
        c->path[base] = 0;
        return 0;
    }
    *dst = v->num;
    return 1;
}

static void read_gpm(vctx *c, jval *o, gpm_vals *g) {
    jval *v = get(o, "gpm");
    if (!v) return;
    if (v->t != J_OBJ) { verr(c, "gpm: want an object"); return; }
    size_t base = strlen(c->path);
    snprintf(c->path + base, sizeof c->path - base, ".gpm");
    g->has = 1;
    get_num(c, v, "sm_active", 0, 100, 0, &g->sm);
    get_num(c, v, "sm_occupancy", 0, 100, 0, &g->occ);
    get_num(c, v, "tensor_active", 0, 100, 0, &g->tensor);
    c->path[base] = 0;
}


static void read_mem(vctx *c, jval *o, int *has, unsigned long long *total, unsigned long long *used) {
    jval *v = get(o, "memory");
    if (!v) return;
    if (v->t != J_OBJ) { verr(c, "memory: want an object"); return; }
    size_t base = strlen(c->path);
    snprintf(c->path + base, sizeof c->path - base, ".memory");
    double t = 0, u = 0;
    // 2^53: the largest integer a JSON number carries exactly.
    if (!get_num(c, v, "total", 0, 9007199254740992.0, 1, &t)) verr(c, "total: missing");
    get_num(c, v, "used", 0, 9007199254740992.0, 1, &u);
    if (u > t) verr(c, "used exceeds total");
    c->path[base] = 0;
    *has = 1;
    *total = (unsigned long long)t;
    *used = (unsigned long long)u;
}

static void read_device(vctx *c, jval *o, device *d, unsigned idx) {
    if (o->t != J_OBJ) { verr(c, "want an object"); return; }
    double x;
    get_str(c, o, "uuid", d->uuid, sizeof d->uuid, 1);
    if (!get_str(c, o, "name", d->name, sizeof d->name, 0)) snprintf(d->name, sizeof d->name, "NVIDIA H100 80GB HBM3");
    if (!get_str(c, o, "pci_bus_id", d->bus, sizeof d->bus, 0))
        snprintf(d->bus, sizeof d->bus, "00000000:%02X:00.0", 0x18 + idx);
    d->minor = idx;
    if (get_num(c, o, "minor", 0, 255, 1, &x)) d->minor = (unsigned)x;
    jval *lost = get(o, "lost");
    if (lost) {
        if (lost->t != J_BOOL) verr(c, "lost: want true or false");
        else d->lost = lost->b;
    }
    jval *u = get(o, "utilization");
    if (u) {
        if (u->t != J_OBJ) verr(c, "utilization: want an object");
        size_t base = strlen(c->path);
        snprintf(c->path + base, sizeof c->path - base, ".utilization");
        d->has_util = 1;
        if (get_num(c, u, "gpu", 0, 100, 1, &x)) d->util_gpu = (unsigned)x;
        if (get_num(c, u, "memory", 0, 100, 1, &x)) d->util_mem = (unsigned)x;
        c->path[base] = 0;
    }
    read_mem(c, o, &d->has_mem, &d->mem_total, &d->mem_used);
    if ((d->has_power = get_num(c, o, "power_mw", 0, 10000000, 1, &x))) d->power_mw = (unsigned)x;
    if ((d->has_temp = get_num(c, o, "temperature_c", 0, 200, 1, &x))) d->temp_c = (unsigned)x;
    if ((d->has_clock = get_num(c, o, "sm_clock_mhz", 0, 100000, 1, &x))) d->clock_mhz = (unsigned)x;
    read_gpm(c, o, &d->gpm);

    size_t base = strlen(c->path);
    jval *mig = get(o, "mig");
    if (mig) {
        if (mig->t != J_ARR) { verr(c, "mig: want an array"); return; }
        if (mig->n > MAX_MIG) { verr(c, "mig: more than %d instances", MAX_MIG); return; }
        d->mig_mode = 1;
        d->nmig = (unsigned)mig->n;
        for (size_t i = 0; i < mig->n; i++) {
            mig_inst *m = &d->mig[i];
            jval *mo = mig->items[i];
            snprintf(c->path + base, sizeof c->path - base, ".mig[%zu]", i);
            if (mo->t != J_OBJ) { verr(c, "want an object"); break; }
            get_str(c, mo, "uuid", m->uuid, sizeof m->uuid, 1);
            get_str(c, mo, "profile", m->profile, sizeof m->profile, 1);
            if (!get_num(c, mo, "gpu_instance_id", 0, 64, 1, &x)) verr(c, "gpu_instance_id: missing");
            m->gi = (unsigned)x;
            x = 0;
            get_num(c, mo, "compute_instance_id", 0, 64, 1, &x);
            m->ci = (unsigned)x;
            for (size_t j = 0; j < i; j++)
                if (d->mig[j].gi == m->gi) verr(c, "gpu_instance_id %u used twice", m->gi);
            read_mem(c, mo, &m->has_mem, &m->mem_total, &m->mem_used);
            read_gpm(c, mo, &m->gpm);
            c->path[base] = 0;
        }
    }
    jval *ps = get(o, "processes");
    if (ps) {
        if (ps->t != J_ARR) { verr(c, "processes: want an array"); return; }
        if (ps->n > MAX_PROCS) { verr(c, "processes: more than %d", MAX_PROCS); return; }
        d->procs = calloc(ps->n ? ps->n : 1, sizeof *d->procs);
        if (!d->procs) { verr(c, "out of memory"); return; }
        d->nprocs = (unsigned)ps->n;
        for (size_t i = 0; i < ps->n; i++) {
            proc_info *p = &d->procs[i];
            jval *po = ps->items[i];
            snprintf(c->path + base, sizeof c->path - base, ".processes[%zu]", i);
            if (po->t != J_OBJ) { verr(c, "want an object"); break; }
            if (!get_num(c, po, "pid", 1, 4194304, 1, &x)) verr(c, "pid: missing");
            p->pid = (unsigned)x;
            x = 0;
            get_num(c, po, "used_memory", 0, 9007199254740992.0, 1, &x);
            p->used = (unsigned long long)x;
            p->gi = p->ci = 0xFFFFFFFFu; // what NVML reports without MIG
            if (get_num(c, po, "gpu_instance_id", 0, 64, 1, &x)) {
                p->gi = (unsigned)x;
                int found = 0;
                for (unsigned j = 0; j < d->nmig; j++) found |= d->mig[j].gi == p->gi;
                if (!found) verr(c, "gpu_instance_id %u: no such MIG instance on this device", p->gi);
                x = 0;
                get_num(c, po, "compute_instance_id", 0, 64, 1, &x);
                p->ci = (unsigned)x;
            } else if (d->mig_mode) {
                verr(c, "gpu_instance_id: required on a MIG-enabled device");
            }
            if (get_num(c, po, "sm_util", 0, 100, 1, &x)) { p->has_util = 1; p->sm = (unsigned)x; }
            if (get_num(c, po, "mem_util", 0, 100, 1, &x)) { p->has_util = 1; p->mem = (unsigned)x; }
        }
        c->path[base] = 0;
    }
}

static scenario *parse_scenario(const char *buf, size_t len, char *err, size_t errcap) {
    jparser p = {buf, buf + len, 1, 1, {0}};
    jval *root = parse_value(&p, 0);
    if (root) {
        ws(&p);
        if (p.s != p.end) jerr(&p, "trailing data after the top-level value");
    }
    if (p.err[0]) {
        snprintf(err, errcap, "%s", p.err);
        jfree(root);
        return NULL;
    }
    vctx c = {{0}, {0}};
    scenario *s = calloc(1, sizeof *s);
    if (!s) { snprintf(err, errcap, "out of memory"); jfree(root); return NULL; }
    snprintf(s->driver, sizeof s->driver, "580.95.05");
    if (root->t != J_OBJ) verr(&c, "top level: want an object");
    else if (!get(root, "devices")) verr(&c, "devices: missing");
    get_str(&c, root, "driver_version", s->driver, sizeof s->driver, 0);
    jval *devs = get(root, "devices");
    if (!devs || devs->t != J_ARR) verr(&c, "devices: want an array");
    else if (devs->n > MAX_DEVICES) verr(&c, "devices: more than %d", MAX_DEVICES);
    else {
        s->ndev = (unsigned)devs->n;
        for (size_t i = 0; i < devs->n && !c.err[0]; i++) {
            snprintf(c.path, sizeof c.path, "devices[%zu]", i);
            read_device(&c, devs->items[i], &s->dev[i], (unsigned)i);
            for (size_t j = 0; j < i; j++)
                if (strcmp(s->dev[j].uuid, s->dev[i].uuid) == 0) verr(&c, "uuid %s used twice", s->dev[i].uuid);
        }
    }
    jfree(root);
    if (c.err[0]) {
        snprintf(err, errcap, "%s", c.err);
        free_scenario(s);
        return NULL;
    }
    return s;
}

// refresh re-reads the scenario when the file changed. Called with mu held.
// An invalid new version makes every call fail (ERROR_UNKNOWN) until fixed,
// rather than silently serving the old one: a test should see its mistake.
static nvmlReturn_t refresh(void) {
    const char *path = getenv("FAKE_NVML_SCENARIO");
    if (!path || !*path) {
        fprintf(stderr, "nvmlstub: FAKE_NVML_SCENARIO is not set\n");
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "nvmlstub: %s: %s\n", path, strerror(errno));
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    if (seen.valid && seen.dev == st.st_dev && seen.ino == st.st_ino && seen.size == st.st_size &&
        seen.mtime.tv_sec == st.st_mtim.tv_sec && seen.mtime.tv_nsec == st.st_mtim.tv_nsec)
        return bad ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
    seen.valid = 1;
    seen.dev = st.st_dev;
    seen.ino = st.st_ino;
    seen.size = st.st_size;
    seen.mtime = st.st_mtim;
    bad = 1;
    if (st.st_size > MAX_FILE) {
        fprintf(stderr, "nvmlstub: %s: larger than %d bytes\n", path, MAX_FILE);
        return NVML_ERROR_UNKNOWN;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "nvmlstub: %s: %s\n", path, strerror(errno));
        return NVML_ERROR_UNKNOWN;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    size_t n = buf ? fread(buf, 1, (size_t)st.st_size, f) : 0;
    fclose(f);
    if (!buf) return NVML_ERROR_MEMORY;
    char err[400];
    scenario *s = parse_scenario(buf, n, err, sizeof err);
    free(buf);
    if (!s) {
        fprintf(stderr, "nvmlstub: invalid scenario %s: %s\n", path, err);
        return NVML_ERROR_UNKNOWN;
    }
    free_scenario(cur);
    cur = s;
    bad = 0;
    return NVML_SUCCESS;
}

/* ---------- handles ---------- */

// A handle names a position (device, MIG slot), not data, so it stays valid
// across scenario reloads; the data is looked up on every call.
struct nvmlDevice_st {
    unsigned dev;
    int mig; // -1: the physical device
};
static struct nvmlDevice_st handles[MAX_DEVICES][MAX_MIG + 1];

static nvmlDevice_t handle(unsigned dev, int mig) {
    struct nvmlDevice_st *h = &handles[dev][mig + 1];
    h->dev = dev;
    h->mig = mig;
    nvmlDevice_t out = {h};
    return out;
}

// enter locks, refreshes and resolves a handle. On success the caller holds mu
// and must leave().
static nvmlReturn_t enter(void) {
    pthread_mutex_lock(&mu);
    if (refcount == 0) { pthread_mutex_unlock(&mu); return NVML_ERROR_UNINITIALIZED; }
    nvmlReturn_t r = refresh();
    if (r != NVML_SUCCESS) pthread_mutex_unlock(&mu);
    return r;
}

static void leave(void) { pthread_mutex_unlock(&mu); }

static int valid_handle(nvmlDevice_t h) {
    uintptr_t p = (uintptr_t)h.handle, lo = (uintptr_t)&handles[0][0], hi = lo + sizeof handles;
    return p >= lo && p < hi && (p - lo) % sizeof(struct nvmlDevice_st) == 0;
}

// lookup resolves h against the current scenario: the device, and the MIG
// instance for a MIG handle. A handle whose device or instance vanished in a
// reload reads as lost, which is what NVML reports for a GPU that is gone.
static nvmlReturn_t lookup(nvmlDevice_t h, device **d, mig_inst **m) {
    if (!valid_handle(h)) return NVML_ERROR_INVALID_ARGUMENT;
    struct nvmlDevice_st *s = h.handle;
    if (s->dev >= cur->ndev) return NVML_ERROR_GPU_IS_LOST;
    *d = &cur->dev[s->dev];
    if ((*d)->lost) return NVML_ERROR_GPU_IS_LOST;
    *m = NULL;
    if (s->mig >= 0) {
        if ((unsigned)s->mig >= (*d)->nmig) return NVML_ERROR_GPU_IS_LOST;
        *m = &(*d)->mig[s->mig];
    }
    return NVML_SUCCESS;
}

#define BEGIN(h)                                  \
    device *d;                                    \
    mig_inst *m;                                  \
    nvmlReturn_t r_ = enter();                    \
    if (r_ != NVML_SUCCESS) return r_;            \
    r_ = lookup((h), &d, &m);                     \
    if (r_ != NVML_SUCCESS) { leave(); return r_; } \
    (void)m

#define END(r) do { leave(); return (r); } while (0)

static nvmlReturn_t copy_str(const char *s, char *dst, unsigned length) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

/* ---------- the NVML API ---------- */

EXPORT nvmlReturn_t nvmlInit_v2(void) {
    pthread_mutex_lock(&mu);
    nvmlReturn_t r = refresh();
    if (r == NVML_SUCCESS) refcount++;
    pthread_mutex_unlock(&mu);
    return r;
}

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return nvmlInit_v2();
}

EXPORT nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&mu);
    nvmlReturn_t r = NVML_ERROR_UNINITIALIZED;
    if (refcount > 0) {
        r = NVML_SUCCESS;
        if (--refcount == 0) {
            free_scenario(cur);
            cur = NULL;
            seen.valid = 0;
        }
    }
    pthread_mutex_unlock(&mu);
    return r;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    default: return "Unknown Error";
    }
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    nvmlReturn_t r = enter();
    if (r != NVML_SUCCESS) return r;
    END(copy_str(cur->driver, version, length));
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = enter();
    if (r != NVML_SUCCESS) return r;
    *count = cur->ndev;
    END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!device) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = enter();
    if (r != NVML_SUCCESS) return r;
    if (index >= cur->ndev) END(NVML_ERROR_INVALID_ARGUMENT);
    // Real NVML fails here too for a GPU that fell off the bus.
    if (cur->dev[index].lost) END(NVML_ERROR_GPU_IS_LOST);
    *device = handle(index, -1);
    END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *name, unsigned int length) {
    BEGIN(h);
    if (!m) END(copy_str(d->name, name, length));
    char buf[2 * (MAX_STR + 1) + 8];
    snprintf(buf, sizeof buf, "%s MIG %s", d->name, m->profile); // what the driver reports
    END(copy_str(buf, name, length));
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *uuid, unsigned int length) {
    BEGIN(h);
    END(copy_str(m ? m->uuid : d->uuid, uuid, length));
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t h, unsigned int *index) {
    BEGIN(h);
    if (m || !index) END(m ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT);
    *index = h.handle->dev;
    END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t h, unsigned int *minor) {
    BEGIN(h);
    if (m || !minor) END(m ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT);
    *minor = d->minor;
    END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, nvmlPciInfo_t *pci) {
    BEGIN(h);
    if (!pci) END(NVML_ERROR_INVALID_ARGUMENT);
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "%s", d->bus);
    // The legacy field is shorter; like the driver, keep its leading part.
    memcpy(pci->busIdLegacy, d->bus, sizeof pci->busIdLegacy - 1);
    pci->pciDeviceId = 0x233010DE;
    END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, nvmlUtilization_t *u) {
    BEGIN(h);
    if (!u) END(NVML_ERROR_INVALID_ARGUMENT);
    // NVML has no utilisation for MIG instances, nor for a MIG-enabled GPU.
    if (m || d->mig_mode || !d->has_util) END(NVML_ERROR_NOT_SUPPORTED);
    u->gpu = d->util_gpu;
    u->memory = d->util_mem;
    END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *mem) {
    BEGIN(h);
    if (!mem) END(NVML_ERROR_INVALID_ARGUMENT);
    int has = m ? m->has_mem : d->has_mem;
    if (!has) END(NVML_ERROR_NOT_SUPPORTED);
    mem->total = m ? m->mem_total : d->mem_total;
    mem->used = m ? m->mem_used : d->mem_used;
    mem->free = mem->total - mem->used;
    END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t h, unsigned int *mw) {
    BEGIN(h);
    if (!mw) END(NVML_ERROR_INVALID_ARGUMENT);
    if (m || !d->has_power) END(NVML_ERROR_NOT_SUPPORTED);
    *mw = d->power_mw;
    END(NVML_SUCCESS);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t h, nvmlTemperatureSensors_t sensor, unsigned int *t) {
    BEGIN(h);
    if (!t || sensor != NVML_TEMPERATURE_GPU) END(NVML_ERROR_INVALID_ARGUMENT);
    if (m || !d->has_temp) END(NVML_ERROR_NOT_SUPPORTED);
    *t = d->temp_c;
    END(NVML_SUCCESS);
}
#pragma GCC diagnostic pop

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t h, nvmlClockType_t type, unsigned int *clock) {
    BEGIN(h);
    if (!clock) END(NVML_ERROR_INVALID_ARGUMENT);
    if (m || type != NVML_CLOCK_SM || !d->has_clock) END(NVML_ERROR_NOT_SUPPORTED);
    *clock = d->clock_mhz;
    END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t h, unsigned int *current, unsigned int *pending) {
    BEGIN(h);
    if (!current || !pending) END(NVML_ERROR_INVALID_ARGUMENT);
    if (m) END(NVML_ERROR_NOT_SUPPORTED);
    *current = *pending = d->mig_mode ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t h, unsigned int *count) {
    BEGIN(h);
    if (!count) END(NVML_ERROR_INVALID_ARGUMENT);
    if (m) END(NVML_ERROR_NOT_SUPPORTED);
    *count = d->mig_mode ? 7 : 0; // what an A100/H100 reports; slots beyond nmig are empty
    if (d->mig_mode && d->nmig > 7) *count = d->nmig;
    END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t h, unsigned int index, nvmlDevice_t *mig) {
    BEGIN(h);
    if (!mig || m) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!d->mig_mode) END(NVML_ERROR_NOT_SUPPORTED);
    if (index >= d->nmig) END(index < 7 ? NVML_ERROR_NOT_FOUND : NVML_ERROR_INVALID_ARGUMENT);
    *mig = handle(h.handle->dev, (int)index);
    END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t h, unsigned int *id) {
    BEGIN(h);
    if (!id) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!m) END(NVML_ERROR_NOT_SUPPORTED);
    *id = m->gi;
    END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t h, unsigned int *id) {
    BEGIN(h);
    if (!id) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!m) END(NVML_ERROR_NOT_SUPPORTED);
    *id = m->ci;
    END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int *count, nvmlProcessInfo_t *infos) {
    BEGIN(h);
    if (!count) END(NVML_ERROR_INVALID_ARGUMENT);
    // A MIG handle sees its own instance's processes; the parent sees all.
    unsigned n = 0;
    for (unsigned i = 0; i < d->nprocs; i++) n += !m || d->procs[i].gi == m->gi;
    if (*count < n) {
        *count = n;
        END(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    if (n && !infos) END(NVML_ERROR_INVALID_ARGUMENT);
    unsigned k = 0;
    for (unsigned i = 0; i < d->nprocs; i++) {
        proc_info *p = &d->procs[i];
        if (m && p->gi != m->gi) continue;
        infos[k].pid = p->pid;
        infos[k].usedGpuMemory = p->used;
        infos[k].gpuInstanceId = p->gi;
        infos[k].computeInstanceId = p->ci;
        k++;
    }
    *count = n;
    END(NVML_SUCCESS);
}

static unsigned long long now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000;
}

EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t h, nvmlProcessUtilizationSample_t *samples,
                                                   unsigned int *count, unsigned long long lastSeen) {
    BEGIN(h);
    if (!count) END(NVML_ERROR_INVALID_ARGUMENT);
    // Not available per process on MIG (the driver says NOT_SUPPORTED).
    if (m || d->mig_mode) END(NVML_ERROR_NOT_SUPPORTED);
    unsigned long long ts = now_us();
    unsigned n = 0;
    for (unsigned i = 0; i < d->nprocs; i++) n += d->procs[i].has_util;
    if (n == 0 || lastSeen >= ts) END(NVML_ERROR_NOT_FOUND); // no samples newer than lastSeen
    if (!samples || *count < n) {
        *count = n;
        END(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    unsigned k = 0;
    for (unsigned i = 0; i < d->nprocs; i++) {
        proc_info *p = &d->procs[i];
        if (!p->has_util) continue;
        samples[k].pid = p->pid;
        samples[k].timeStamp = ts;
        samples[k].smUtil = p->sm;
        samples[k].memUtil = p->mem;
        samples[k].encUtil = samples[k].decUtil = 0;
        k++;
    }
    *count = n;
    END(NVML_SUCCESS);
}

/* ---------- GPM ---------- */

#define GPM_MAGIC 0x67706d31u
struct nvmlGpmSample_st {
    unsigned magic;
    int filled;
    unsigned dev;
    int gi; // -1: whole device
    unsigned long long seq;
    gpm_vals v;
};
static unsigned long long gpm_seq;

EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t h, nvmlGpmSupport_t *sup) {
    BEGIN(h);
    if (!sup) END(NVML_ERROR_INVALID_ARGUMENT);
    if (sup->version != NVML_GPM_SUPPORT_VERSION) END(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    sup->isSupportedDevice = !m && d->gpm.has;
    END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *s) {
    if (!s) return NVML_ERROR_INVALID_ARGUMENT;
    struct nvmlGpmSample_st *p = calloc(1, sizeof *p);
    if (!p) return NVML_ERROR_MEMORY;
    p->magic = GPM_MAGIC;
    s->handle = p;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t s) {
    if (!s.handle || s.handle->magic != GPM_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    s.handle->magic = 0;
    free(s.handle);
    return NVML_SUCCESS;
}

static nvmlReturn_t gpm_fill(nvmlDevice_t h, int gi, nvmlGpmSample_t s) {
    BEGIN(h);
    if (m || !s.handle || s.handle->magic != GPM_MAGIC) END(NVML_ERROR_INVALID_ARGUMENT);
    gpm_vals *v = &d->gpm;
    if (gi >= 0) {
        v = NULL;
        for (unsigned i = 0; i < d->nmig; i++)
            if ((int)d->mig[i].gi == gi) v = &d->mig[i].gpm;
        if (!v) END(NVML_ERROR_NOT_FOUND);
    }
    if (!d->gpm.has || !v->has) END(NVML_ERROR_NOT_SUPPORTED);
    struct nvmlGpmSample_st *p = s.handle;
    p->filled = 1;
    p->dev = h.handle->dev;
    p->gi = gi;
    p->seq = ++gpm_seq;
    p->v = *v;
    END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t h, nvmlGpmSample_t s) { return gpm_fill(h, -1, s); }

EXPORT nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t h, unsigned int gi, nvmlGpmSample_t s) {
    if (gi > 64) return NVML_ERROR_INVALID_ARGUMENT;
    return gpm_fill(h, (int)gi, s);
}

// nvmlGpmMetricsGet reports the activity between two samples of one device
// (or one MIG instance), the second taken after the first. The stand-in
// reports the scenario's value as of the second sample.
EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *g) {
    if (!g) return NVML_ERROR_INVALID_ARGUMENT;
    if (g->version != NVML_GPM_METRICS_GET_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    struct nvmlGpmSample_st *a = g->sample1.handle, *b = g->sample2.handle;
    if (g->numMetrics > NVML_GPM_METRIC_MAX || !a || !b || a->magic != GPM_MAGIC || b->magic != GPM_MAGIC ||
        !a->filled || !b->filled || a->dev != b->dev || a->gi != b->gi || b->seq <= a->seq)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < g->numMetrics; i++) {
        nvmlGpmMetric_t *mt = &g->metrics[i];
        mt->nvmlReturn = NVML_SUCCESS;
        memset(&mt->metricInfo, 0, sizeof mt->metricInfo);
        switch (mt->metricId) {
        case NVML_GPM_METRIC_SM_UTIL: mt->value = b->v.sm; break;
        case NVML_GPM_METRIC_SM_OCCUPANCY: mt->value = b->v.occ; break;
        case NVML_GPM_METRIC_ANY_TENSOR_UTIL: mt->value = b->v.tensor; break;
        default: mt->nvmlReturn = NVML_ERROR_NOT_SUPPORTED; mt->value = 0;
        }
    }
    return NVML_SUCCESS;
}
