/* graphmem.orderloops: the order searches of passes/reorder.py, compiled.
 *
 * Their specification is the Python of tests/reference_reorder.py (tests/
 * test_reorder_reference.py runs both on the same schedules and wants the same orders
 * and peaks):
 *
 *   exact_*(): ExactSearch, the dynamic programming over executed-node sets, layer by
 *     layer, resumable (a run gives up past its budget of sets and a later run goes on
 *     from there) and tightened at a lower bound between runs. A layer's sets are kept
 *     in the order they were first reached, and a set reached again at a lower peak keeps
 *     its place, as the Python dict does: ties resolve the same way.
 *   local_search(): the single-node moves from an order, each costed over the span it
 *     moves through from the order's profile (prefix and suffix peaks and areas).
 *
 * schedule() compiles a Schedule (passes/reorder.py) once: its masks (Python ints of
 * node bits) become sparse lists of 64-bit words. Every mask must be a non-negative
 * int under 2^n, every node id in range, every byte count non-negative, and the bytes of
 * the whole schedule, times its steps, must fit in 63 bits (so no peak, live total or
 * summed area can overflow); anything else is refused with ValueError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t start; /* into the schedule's word pool */
    int32_t len;
} smask_t;

typedef struct {
    int32_t n, nw;
    int64_t base;
    int64_t *new_bytes;  /* n */
    smask_t *preds;      /* n */
    int32_t *succ_start; /* n + 1 */
    int32_t *succs;
    int32_t *free_start; /* n + 1: node v's frees are [free_start[v], free_start[v + 1]) */
    smask_t *free_mask;
    int64_t *free_bytes;
    int32_t *write_start; /* n + 1: the reader masks of the units node v may write over */
    smask_t *write_mask;
    int64_t *write_bytes; /* n */
    uint32_t *wi;         /* word pool: word index, word bits */
    uint64_t *wb;
    int32_t pool_len, pool_cap;
} sched_t;

static void sched_free(sched_t *s)
{
    if (!s)
        return;
    free(s->new_bytes);
    free(s->preds);
    free(s->succ_start);
    free(s->succs);
    free(s->free_start);
    free(s->free_mask);
    free(s->free_bytes);
    free(s->write_start);
    free(s->write_mask);
    free(s->write_bytes);
    free(s->wi);
    free(s->wb);
    free(s);
}

static void sched_capsule_free(PyObject *cap)
{
    sched_free((sched_t *)PyCapsule_GetPointer(cap, "graphmem.orderloops.schedule"));
}

/* A Python int mask (0 <= mask < 2^n) into the pool, its non-zero words only. */
static int put_mask(sched_t *s, PyObject *obj, uint64_t *scratch, unsigned char *bytes,
                    smask_t *out, const char *what)
{
    Py_ssize_t nbytes = (Py_ssize_t)s->nw * 8;
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_ValueError, "orderloops.schedule: %s is not an int", what);
        return -1;
    }
    if (nbytes == 0) {
        if (PyObject_IsTrue(obj)) {
            PyErr_Format(PyExc_ValueError, "orderloops.schedule: %s names no node", what);
            return -1;
        }
        out->start = s->pool_len;
        out->len = 0;
        return 0;
    }
#if PY_VERSION_HEX >= 0x030D0000
    Py_ssize_t need = PyLong_AsNativeBytes(obj, bytes, nbytes,
                                           Py_ASNATIVEBYTES_LITTLE_ENDIAN |
                                               Py_ASNATIVEBYTES_UNSIGNED_BUFFER |
                                               Py_ASNATIVEBYTES_REJECT_NEGATIVE);
    if (need < 0 || need > nbytes) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "orderloops.schedule: %s is negative or names a node "
                     "past the last", what);
        return -1;
    }
#else
    if (_PyLong_AsByteArray((PyLongObject *)obj, bytes, (size_t)nbytes, 1, 0) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "orderloops.schedule: %s is negative or names a node "
                     "past the last", what);
        return -1;
    }
#endif
    int32_t count = 0;
    for (int32_t w = 0; w < s->nw; w++) {
        uint64_t word = 0;
        for (int b = 7; b >= 0; b--)
            word = (word << 8) | bytes[(Py_ssize_t)w * 8 + b];
        scratch[w] = word;
        if (word)
            count++;
    }
    if (s->n % 64 && (scratch[s->nw - 1] >> (s->n % 64))) {
        PyErr_Format(PyExc_ValueError, "orderloops.schedule: %s names a node past the last",
                     what);
        return -1;
    }
    if (s->pool_len > INT32_MAX - count) {
        PyErr_SetString(PyExc_ValueError, "orderloops.schedule: too many mask words");
        return -1;
    }
    if (s->pool_len + count > s->pool_cap) {
        int64_t cap = (int64_t)s->pool_cap * 2 + count + 64;
        if (cap > INT32_MAX)
            cap = INT32_MAX;
        uint32_t *wi = realloc(s->wi, (size_t)cap * sizeof(uint32_t));
        if (!wi) {
            PyErr_NoMemory();
            return -1;
        }
        s->wi = wi;
        uint64_t *wb = realloc(s->wb, (size_t)cap * sizeof(uint64_t));
        if (!wb) {
            PyErr_NoMemory();
            return -1;
        }
        s->wb = wb;
        s->pool_cap = (int32_t)cap;
    }
    out->start = s->pool_len;
    out->len = count;
    for (int32_t w = 0; w < s->nw; w++) {
        if (scratch[w]) {
            s->wi[s->pool_len] = (uint32_t)w;
            s->wb[s->pool_len] = scratch[w];
            s->pool_len++;
        }
    }
    return 0;
}

/* A non-negative int64 byte count, added to *total (overflow refused). */
static int get_bytes(PyObject *obj, int64_t *out, int64_t *total, const char *what)
{
    int overflow = 0;
    long long v = PyLong_Check(obj) ? PyLong_AsLongLongAndOverflow(obj, &overflow) : -1;
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (!PyLong_Check(obj) || overflow || v < 0 || __builtin_add_overflow(*total, v, total)) {
        PyErr_Format(PyExc_ValueError, "orderloops.schedule: %s is not a byte count under "
                     "2^63 (or the schedule's bytes are past it)", what);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

/* The items of a tuple or list (borrowed), or NULL with ValueError. */
static PyObject *items_of(PyObject *obj, Py_ssize_t want, const char *what)
{
    if (!PyTuple_Check(obj) && !PyList_Check(obj)) {
        PyErr_Format(PyExc_ValueError, "orderloops.schedule: %s is not a tuple", what);
        return NULL;
    }
    if (want >= 0 && PySequence_Fast_GET_SIZE(obj) != want) {
        PyErr_Format(PyExc_ValueError, "orderloops.schedule: %s has the wrong length", what);
        return NULL;
    }
    return obj;
}

static int node_id(PyObject *obj, int32_t n, int32_t *out, const char *what)
{
    long v = PyLong_Check(obj) ? PyLong_AsLong(obj) : -1;
    if (v == -1 && PyErr_Occurred())
        PyErr_Clear();
    if (v < 0 || v >= n) {
        PyErr_Format(PyExc_ValueError, "orderloops.schedule: %s is not a node id", what);
        return -1;
    }
    *out = (int32_t)v;
    return 0;
}

/* schedule(preds, succs, new_bytes, frees, writes, base) -> capsule */
static PyObject *ol_schedule(PyObject *self, PyObject *args)
{
    PyObject *o_preds, *o_succs, *o_new, *o_frees, *o_writes, *o_base;
    if (!PyArg_ParseTuple(args, "OOOOOO", &o_preds, &o_succs, &o_new, &o_frees, &o_writes,
                          &o_base))
        return NULL;
    if (!items_of(o_preds, -1, "preds"))
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(o_preds);
    if (n > 1000000) {
        PyErr_SetString(PyExc_ValueError, "orderloops.schedule: more than 10^6 nodes");
        return NULL;
    }
    if (!items_of(o_succs, n, "succs") || !items_of(o_new, n, "new_bytes") ||
        !items_of(o_frees, n, "frees") || !items_of(o_writes, n, "writes"))
        return NULL;
    sched_t *s = calloc(1, sizeof(sched_t));
    uint64_t *scratch = NULL;
    unsigned char *bytes = NULL;
    if (!s)
        return PyErr_NoMemory();
    s->n = (int32_t)n;
    s->nw = (int32_t)((n + 63) / 64);
    int64_t total = 0;
    scratch = calloc((size_t)s->nw + 1, sizeof(uint64_t));
    bytes = calloc((size_t)s->nw * 8 + 1, 1);
    s->new_bytes = calloc((size_t)n + 1, sizeof(int64_t));
    s->preds = calloc((size_t)n + 1, sizeof(smask_t));
    s->succ_start = calloc((size_t)n + 1, sizeof(int32_t));
    s->free_start = calloc((size_t)n + 1, sizeof(int32_t));
    s->write_start = calloc((size_t)n + 1, sizeof(int32_t));
    s->write_bytes = calloc((size_t)n + 1, sizeof(int64_t));
    if (!scratch || !bytes || !s->new_bytes || !s->preds || !s->succ_start ||
        !s->free_start || !s->write_start || !s->write_bytes) {
        PyErr_NoMemory();
        goto fail;
    }
    if (get_bytes(o_base, &s->base, &total, "base") < 0)
        goto fail;
    /* counts first, for the flat arrays */
    int64_t nsucc = 0, nfree = 0, nwrite = 0;
    for (Py_ssize_t v = 0; v < n; v++) {
        PyObject *sv = items_of(PySequence_Fast_GET_ITEM(o_succs, v), -1, "a node's succs");
        PyObject *fv = items_of(PySequence_Fast_GET_ITEM(o_frees, v), -1, "a node's frees");
        PyObject *wv = items_of(PySequence_Fast_GET_ITEM(o_writes, v), -1, "a node's write");
        if (!sv || !fv || !wv)
            goto fail;
        nsucc += PySequence_Fast_GET_SIZE(sv);
        nfree += PySequence_Fast_GET_SIZE(fv);
        Py_ssize_t wn = PySequence_Fast_GET_SIZE(wv);
        if (wn != 0 && wn != 2) {
            PyErr_SetString(PyExc_ValueError,
                            "orderloops.schedule: a node's write is not () or (bytes, readers)");
            goto fail;
        }
        if (wn == 2) {
            PyObject *rv = items_of(PySequence_Fast_GET_ITEM(wv, 1), -1, "a write's readers");
            if (!rv)
                goto fail;
            nwrite += PySequence_Fast_GET_SIZE(rv);
        }
    }
    if (nsucc > INT32_MAX || nfree > INT32_MAX || nwrite > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "orderloops.schedule: too many edges");
        goto fail;
    }
    s->succs = calloc((size_t)nsucc + 1, sizeof(int32_t));
    s->free_mask = calloc((size_t)nfree + 1, sizeof(smask_t));
    s->free_bytes = calloc((size_t)nfree + 1, sizeof(int64_t));
    s->write_mask = calloc((size_t)nwrite + 1, sizeof(smask_t));
    if (!s->succs || !s->free_mask || !s->free_bytes || !s->write_mask) {
        PyErr_NoMemory();
        goto fail;
    }
    int32_t ks = 0, kf = 0, kw = 0;
    for (Py_ssize_t v = 0; v < n; v++) {
        if (put_mask(s, PySequence_Fast_GET_ITEM(o_preds, v), scratch, bytes, &s->preds[v],
                     "a node's preds") < 0)
            goto fail;
        if (get_bytes(PySequence_Fast_GET_ITEM(o_new, v), &s->new_bytes[v], &total,
                      "new_bytes") < 0)
            goto fail;
        PyObject *sv = PySequence_Fast_GET_ITEM(o_succs, v);
        s->succ_start[v] = ks;
        for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(sv); j++)
            if (node_id(PySequence_Fast_GET_ITEM(sv, j), s->n, &s->succs[ks++], "a succ") < 0)
                goto fail;
        PyObject *fv = PySequence_Fast_GET_ITEM(o_frees, v);
        s->free_start[v] = kf;
        for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(fv); j++) {
            PyObject *pair = items_of(PySequence_Fast_GET_ITEM(fv, j), 2, "a free");
            if (!pair || put_mask(s, PySequence_Fast_GET_ITEM(pair, 0), scratch, bytes,
                                  &s->free_mask[kf], "a free's readers") < 0 ||
                get_bytes(PySequence_Fast_GET_ITEM(pair, 1), &s->free_bytes[kf], &total,
                          "a free's bytes") < 0)
                goto fail;
            kf++;
        }
        PyObject *wv = PySequence_Fast_GET_ITEM(o_writes, v);
        s->write_start[v] = kw;
        if (PySequence_Fast_GET_SIZE(wv) == 2) {
            if (get_bytes(PySequence_Fast_GET_ITEM(wv, 0), &s->write_bytes[v], &total,
                          "a write's bytes") < 0)
                goto fail;
            PyObject *rv = PySequence_Fast_GET_ITEM(wv, 1);
            for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(rv); j++)
                if (put_mask(s, PySequence_Fast_GET_ITEM(rv, j), scratch, bytes,
                             &s->write_mask[kw++], "a write's readers") < 0)
                    goto fail;
        }
    }
    s->succ_start[n] = ks;
    s->free_start[n] = kf;
    s->write_start[n] = kw;
    /* succs are the preds turned round: u in succs[v] once exactly where v is in
     * preds[u] (the searches step along succs and move nodes within preds' bounds) */
    int64_t pred_bits = 0;
    for (Py_ssize_t v = 0; v < n; v++)
        for (int32_t j = s->preds[v].start; j < s->preds[v].start + s->preds[v].len; j++)
            pred_bits += __builtin_popcountll(s->wb[j]);
    if (pred_bits != ks) {
        PyErr_SetString(PyExc_ValueError, "orderloops.schedule: the succs are not the preds "
                        "turned round");
        goto fail;
    }
    memset(scratch, 0, ((size_t)s->nw + 1) * sizeof(uint64_t));
    for (Py_ssize_t v = 0; v < n; v++) {
        for (int32_t k = s->succ_start[v]; k < s->succ_start[v + 1]; k++) {
            int32_t u = s->succs[k];
            uint64_t ub = (uint64_t)1 << (u & 63);
            smask_t m = s->preds[u];
            int listed = 0;
            for (int32_t j = m.start; j < m.start + m.len; j++)
                if (s->wi[j] == (uint32_t)v >> 6 && (s->wb[j] >> (v & 63)) & 1)
                    listed = 1;
            if (!listed || (scratch[u >> 6] & ub)) {
                PyErr_SetString(PyExc_ValueError, "orderloops.schedule: the succs are not the "
                                "preds turned round");
                goto fail;
            }
            scratch[u >> 6] |= ub;
        }
        for (int32_t k = s->succ_start[v]; k < s->succ_start[v + 1]; k++)
            scratch[s->succs[k] >> 6] &= ~((uint64_t)1 << (s->succs[k] & 63));
    }
    /* every live total, peak and summed area is within total * (n + 1) in magnitude */
    int64_t bound;
    if (__builtin_mul_overflow(total, (int64_t)n + 1, &bound)) {
        PyErr_SetString(PyExc_ValueError, "orderloops.schedule: the schedule's bytes times "
                        "its steps are past 2^63");
        goto fail;
    }
    free(scratch);
    free(bytes);
    PyObject *cap = PyCapsule_New(s, "graphmem.orderloops.schedule", sched_capsule_free);
    if (!cap)
        sched_free(s);
    return cap;
fail:
    free(scratch);
    free(bytes);
    sched_free(s);
    return NULL;
}

static sched_t *get_sched(PyObject *cap)
{
    return (sched_t *)PyCapsule_GetPointer(cap, "graphmem.orderloops.schedule");
}

/* Every bit of mask m is in done or is node v's. */
static inline int covered(const sched_t *s, smask_t m, const uint64_t *done, int32_t v)
{
    uint32_t vw = (uint32_t)v >> 6;
    uint64_t vb = (uint64_t)1 << (v & 63);
    for (int32_t j = m.start; j < m.start + m.len; j++) {
        uint64_t d = done[s->wi[j]];
        if (s->wi[j] == vw)
            d |= vb;
        if (s->wb[j] & ~d)
            return 0;
    }
    return 1;
}

/* Every bit of mask m is in done. */
static inline int within(const sched_t *s, smask_t m, const uint64_t *done)
{
    for (int32_t j = m.start; j < m.start + m.len; j++)
        if (s->wb[j] & ~done[s->wi[j]])
            return 0;
    return 1;
}

/* _step: the bytes live while v runs (*during) and after it (*after), from executed
 * set done with mem bytes live; returns the bytes v frees. */
static inline int64_t step(const sched_t *s, const uint64_t *done, int64_t mem, int32_t v,
                           int64_t *during, int64_t *after)
{
    int64_t made = mem + s->new_bytes[v];
    int64_t freed = 0;
    for (int32_t f = s->free_start[v]; f < s->free_start[v + 1]; f++)
        if (covered(s, s->free_mask[f], done, v))
            freed += s->free_bytes[f];
    *during = made;
    for (int32_t w = s->write_start[v]; w < s->write_start[v + 1]; w++)
        if (covered(s, s->write_mask[w], done, v)) {
            *during = made - s->write_bytes[v];
            break;
        }
    *after = made - freed;
    return freed;
}

/* ------------------------------------------------------------------ exact search */

typedef struct {
    size_t len, cap;
    uint64_t *done;  /* len * nw */
    uint64_t *ready; /* len * nw */
    int64_t *peak, *mem;
    int32_t *link;
} layer_t;

typedef struct {
    PyObject *sched_cap; /* keeps the schedule alive */
    sched_t *s;
    int64_t limit;
    layer_t layer;
    int64_t states;
    int32_t k;
    int exhausted;
    /* the links of the partial orders: (node, parent link), -1 for none */
    int32_t *lv, *lp;
    size_t nlinks, caplinks;
} exact_t;

static void layer_free(layer_t *l)
{
    free(l->done);
    free(l->ready);
    free(l->peak);
    free(l->mem);
    free(l->link);
    memset(l, 0, sizeof(*l));
}

static int layer_reserve(layer_t *l, size_t want, int32_t nw)
{
    if (want <= l->cap)
        return 0;
    size_t cap = l->cap ? l->cap : 64;
    while (cap < want)
        cap *= 2;
    size_t words = cap * (size_t)(nw ? nw : 1);
    uint64_t *done = realloc(l->done, words * sizeof(uint64_t));
    if (!done)
        return -1;
    l->done = done;
    uint64_t *ready = realloc(l->ready, words * sizeof(uint64_t));
    if (!ready)
        return -1;
    l->ready = ready;
    int64_t *peak = realloc(l->peak, cap * sizeof(int64_t));
    if (!peak)
        return -1;
    l->peak = peak;
    int64_t *mem = realloc(l->mem, cap * sizeof(int64_t));
    if (!mem)
        return -1;
    l->mem = mem;
    int32_t *link = realloc(l->link, cap * sizeof(int32_t));
    if (!link)
        return -1;
    l->link = link;
    l->cap = cap;
    return 0;
}

/* The layer of one set, nothing executed: the nodes with no preds ready, the graph
 * inputs' bytes live (ExactSearch's first layer and the beam's first state). */
static int layer_start(layer_t *l, const sched_t *s)
{
    size_t nw = (size_t)s->nw;
    if (layer_reserve(l, 1, s->nw) < 0)
        return -1;
    memset(l->done, 0, nw * sizeof(uint64_t));
    memset(l->ready, 0, nw * sizeof(uint64_t));
    for (int32_t v = 0; v < s->n; v++)
        if (s->preds[v].len == 0)
            l->ready[v >> 6] |= (uint64_t)1 << (v & 63);
    l->peak[0] = l->mem[0] = s->base;
    l->link[0] = -1;
    l->len = 1;
    return 0;
}

static void exact_capsule_free(PyObject *cap)
{
    exact_t *e = (exact_t *)PyCapsule_GetPointer(cap, "graphmem.orderloops.exact");
    if (!e)
        return;
    Py_XDECREF(e->sched_cap);
    layer_free(&e->layer);
    free(e->lv);
    free(e->lp);
    free(e);
}

static exact_t *get_exact(PyObject *cap)
{
    return (exact_t *)PyCapsule_GetPointer(cap, "graphmem.orderloops.exact");
}

static int add_link(exact_t *e, int32_t v, int32_t parent, int32_t *out)
{
    if (e->nlinks == e->caplinks) {
        size_t cap = e->caplinks ? e->caplinks * 2 : 1024;
        if (cap > INT32_MAX)
            return -1;
        int32_t *lv = realloc(e->lv, cap * sizeof(int32_t));
        if (!lv)
            return -1;
        e->lv = lv;
        int32_t *lp = realloc(e->lp, cap * sizeof(int32_t));
        if (!lp)
            return -1;
        e->lp = lp;
        e->caplinks = cap;
    }
    e->lv[e->nlinks] = v;
    e->lp[e->nlinks] = parent;
    *out = (int32_t)e->nlinks++;
    return 0;
}

static int64_t limit_of(PyObject *upper, int *err)
{
    *err = 0;
    if (upper == Py_None)
        return INT64_MAX;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(upper, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        *err = 1;
        return 0;
    }
    if (overflow > 0)
        return INT64_MAX;
    if (overflow < 0)
        return INT64_MIN;
    return (int64_t)v;
}

/* exact_new(schedule, upper or None) -> capsule: the empty set, nothing executed */
static PyObject *ol_exact_new(PyObject *self, PyObject *args)
{
    PyObject *o_sched, *o_upper;
    if (!PyArg_ParseTuple(args, "OO", &o_sched, &o_upper))
        return NULL;
    sched_t *s = get_sched(o_sched);
    if (!s)
        return NULL;
    int err;
    int64_t limit = limit_of(o_upper, &err);
    if (err)
        return NULL;
    exact_t *e = calloc(1, sizeof(exact_t));
    if (!e)
        return PyErr_NoMemory();
    e->s = s;
    e->limit = limit;
    e->states = 1;
    if (layer_start(&e->layer, s) < 0) {
        layer_free(&e->layer);
        free(e);
        return PyErr_NoMemory();
    }
    Py_INCREF(o_sched);
    e->sched_cap = o_sched;
    PyObject *cap = PyCapsule_New(e, "graphmem.orderloops.exact", exact_capsule_free);
    if (!cap) {
        Py_DECREF(o_sched);
        layer_free(&e->layer);
        free(e);
    }
    return cap;
}

#define HASH_SEED 0x9e3779b97f4a7c15ull

/* One word more into a set's hash (hash_words, and index_find's hash of done | v). */
static inline uint64_t hash_step(uint64_t h, uint64_t word)
{
    h ^= word + HASH_SEED + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 33);
}

static inline uint64_t hash_words(const uint64_t *w, int32_t nw)
{
    uint64_t h = HASH_SEED;
    for (int32_t i = 0; i < nw; i++)
        h = hash_step(h, w[i]);
    return h;
}

/* The steps tried from one set (ExactSearch and _next_steps): node, peak after, live
 * after; one only where a ready node frees at least what it makes under the peak. */
typedef struct {
    int32_t v;
    int64_t peak, after;
} stepc_t;

static Py_ssize_t next_steps(const sched_t *s, const uint64_t *done, int64_t mem, int64_t peak,
                             const uint64_t *ready, stepc_t *out)
{
    Py_ssize_t count = 0;
    for (int32_t w = 0; w < s->nw; w++) {
        uint64_t rest = ready[w];
        while (rest) {
            int32_t v = w * 64 + __builtin_ctzll(rest);
            rest &= rest - 1;
            int64_t during, after;
            int64_t freed = step(s, done, mem, v, &during, &after);
            if (during <= peak && freed >= s->new_bytes[v]) {
                out[0].v = v;
                out[0].peak = peak;
                out[0].after = after;
                return 1;
            }
            out[count].v = v;
            out[count].peak = peak >= during ? peak : during;
            out[count].after = after;
            count++;
        }
    }
    return count;
}

/* ready (of the set before v) less v, plus v's successors whose preds are all in d2 */
static void advance_ready(const sched_t *s, uint64_t *out, const uint64_t *ready,
                          const uint64_t *d2, int32_t v)
{
    memcpy(out, ready, (size_t)s->nw * sizeof(uint64_t));
    out[(size_t)v >> 6] &= ~((uint64_t)1 << (v & 63));
    for (int32_t k = s->succ_start[v]; k < s->succ_start[v + 1]; k++) {
        int32_t u = s->succs[k];
        if (within(s, s->preds[u], d2))
            out[u >> 6] |= (uint64_t)1 << (u & 63);
    }
}

/* The sets of the next layer, found by a hash of their words: slots hold entry
 * indices (-1 empty), at most half of them used. */
typedef struct {
    int32_t *slots;
    size_t nslots;
} index_t;

/* An empty index of at least 64 slots. */
static int index_clear(index_t *ix)
{
    if (ix->nslots < 64) {
        free(ix->slots);
        ix->slots = malloc(64 * sizeof(int32_t));
        if (!ix->slots)
            return -1;
        ix->nslots = 64;
    }
    memset(ix->slots, 0xff, ix->nslots * sizeof(int32_t));
    return 0;
}

/* The entry of layer l whose set is done | v, or -1 with *slot where it would go. */
static int32_t index_find(const index_t *ix, const layer_t *l, const uint64_t *done, int32_t v,
                          size_t nw, size_t *slot)
{
    uint64_t vb = (uint64_t)1 << (v & 63);
    size_t vw = (size_t)v >> 6;
    uint64_t h = HASH_SEED;
    for (size_t w = 0; w < nw; w++)
        h = hash_step(h, done[w] | (w == vw ? vb : 0));
    size_t at = (size_t)h & (ix->nslots - 1);
    while (ix->slots[at] >= 0) {
        const uint64_t *d = l->done + (size_t)ix->slots[at] * nw;
        size_t w = 0;
        while (w < nw && d[w] == (done[w] | (w == vw ? vb : 0)))
            w++;
        if (w == nw)
            return ix->slots[at];
        at = (at + 1) & (ix->nslots - 1);
    }
    *slot = at;
    return -1;
}

/* Entry e of layer l put at slot; the index grows (rehashed) past half full. */
static int index_put(index_t *ix, const layer_t *l, size_t slot, size_t e, size_t nw)
{
    ix->slots[slot] = (int32_t)e;
    if ((e + 1) * 2 <= ix->nslots)
        return 0;
    size_t grown = ix->nslots * 4;
    int32_t *fresh = malloc(grown * sizeof(int32_t));
    if (!fresh)
        return -1;
    memset(fresh, 0xff, grown * sizeof(int32_t));
    for (size_t q = 0; q <= e; q++) {
        size_t at = (size_t)hash_words(l->done + q * nw, (int32_t)nw) & (grown - 1);
        while (fresh[at] >= 0)
            at = (at + 1) & (grown - 1);
        fresh[at] = (int32_t)q;
    }
    free(ix->slots);
    ix->slots = fresh;
    ix->nslots = grown;
    return 0;
}

/* exact_tighten(search, upper): prune at upper from here on, dropping the kept sets above */
static PyObject *ol_exact_tighten(PyObject *self, PyObject *args)
{
    PyObject *o_e, *o_upper;
    if (!PyArg_ParseTuple(args, "OO", &o_e, &o_upper))
        return NULL;
    exact_t *e = get_exact(o_e);
    if (!e)
        return NULL;
    int err;
    int64_t upper = limit_of(o_upper, &err);
    if (err)
        return NULL;
    if (upper < e->limit) {
        e->limit = upper;
        layer_t *l = &e->layer;
        size_t nw = (size_t)e->s->nw, kept = 0;
        for (size_t i = 0; i < l->len; i++) {
            if (l->peak[i] > upper)
                continue;
            if (kept != i) {
                memmove(l->done + kept * nw, l->done + i * nw, nw * sizeof(uint64_t));
                memmove(l->ready + kept * nw, l->ready + i * nw, nw * sizeof(uint64_t));
                l->peak[kept] = l->peak[i];
                l->mem[kept] = l->mem[i];
                l->link[kept] = l->link[i];
            }
            kept++;
        }
        l->len = kept;
        e->exhausted = e->exhausted || kept == 0;
    }
    Py_RETURN_NONE;
}

/* exact_state(search) -> (sets made, layer, exhausted) */
static PyObject *ol_exact_state(PyObject *self, PyObject *o_e)
{
    exact_t *e = get_exact(o_e);
    if (!e)
        return NULL;
    return Py_BuildValue("(LiO)", (long long)e->states, (int)e->k,
                         e->exhausted ? Py_True : Py_False);
}

static PyObject *unwind(exact_t *e, int32_t link, Py_ssize_t n)
{
    PyObject *order = PyList_New(n);
    if (!order)
        return NULL;
    Py_ssize_t i = n;
    while (link >= 0 && i > 0) {
        PyObject *v = PyLong_FromLong(e->lv[link]);
        if (!v) {
            Py_DECREF(order);
            return NULL;
        }
        PyList_SET_ITEM(order, --i, v);
        link = e->lp[link];
    }
    if (i != 0 || link >= 0) {
        Py_DECREF(order);
        PyErr_SetString(PyExc_RuntimeError, "orderloops: an order of the wrong length");
        return NULL;
    }
    return order;
}

/* exact_run(search, max_states, pace) -> (order, peak) or None (ExactSearch.run, paced
 * past pace sets where pace >= 0; -1: not paced) */
static PyObject *ol_exact_run(PyObject *self, PyObject *args)
{
    PyObject *o_e;
    long long max_states, pace;
    if (!PyArg_ParseTuple(args, "OLL", &o_e, &max_states, &pace))
        return NULL;
    exact_t *e = get_exact(o_e);
    if (!e)
        return NULL;
    const sched_t *s = e->s;
    const int32_t n = s->n;
    const size_t nw = (size_t)s->nw;
    /* past 2^40 sets a budget is no budget; the pace test stays within 63 bits */
    if (max_states > ((long long)1 << 40))
        max_states = (long long)1 << 40;
    layer_t nxt = {0};
    index_t ix = {0};
    stepc_t *steps = malloc(((size_t)n + 1) * sizeof(stepc_t));
    if (!steps)
        return PyErr_NoMemory();
    while (e->k < n && !e->exhausted) {
        if (e->states > max_states ||
            (pace >= 0 && e->states > pace &&
             e->states * (int64_t)n > 2 * (int64_t)max_states * e->k)) {
            free(steps);
            free(ix.slots);
            layer_free(&nxt);
            Py_RETURN_NONE;
        }
        layer_t *cur = &e->layer;
        nxt.len = 0;
        if (index_clear(&ix) < 0)
            goto nomem;
        for (size_t i = 0; i < cur->len; i++) {
            const uint64_t *done = cur->done + i * nw;
            const uint64_t *ready = cur->ready + i * nw;
            Py_ssize_t ns = next_steps(s, done, cur->mem[i], cur->peak[i], ready, steps);
            for (Py_ssize_t j = 0; j < ns; j++) {
                int64_t p2 = steps[j].peak;
                if (p2 > e->limit)
                    continue;
                int32_t v = steps[j].v;
                size_t slot = 0;
                int32_t found = index_find(&ix, &nxt, done, v, nw, &slot);
                if (found >= 0 && p2 >= nxt.peak[found])
                    continue; /* no better way to this set */
                int32_t link;
                if (add_link(e, v, cur->link[i], &link) < 0)
                    goto nomem;
                if (found >= 0) { /* it keeps its place in the layer, as in a dict */
                    nxt.peak[found] = p2;
                    nxt.mem[found] = steps[j].after;
                    nxt.link[found] = link;
                    continue;
                }
                if (nxt.len >= ((size_t)1 << 29) || layer_reserve(&nxt, nxt.len + 1, s->nw) < 0)
                    goto nomem;
                size_t at = nxt.len++;
                uint64_t *d2 = nxt.done + at * nw;
                uint64_t *r2 = nxt.ready + at * nw;
                memcpy(d2, done, nw * sizeof(uint64_t));
                d2[(size_t)v >> 6] |= (uint64_t)1 << (v & 63);
                /* _advance_ready: the ready set depends only on the executed set */
                advance_ready(s, r2, ready, d2, v);
                nxt.peak[at] = p2;
                nxt.mem[at] = steps[j].after;
                nxt.link[at] = link;
                if (index_put(&ix, &nxt, slot, at, nw) < 0)
                    goto nomem;
            }
        }
        e->states += (int64_t)nxt.len;
        layer_t old = e->layer;
        e->layer = nxt;
        nxt = old;
        e->k++;
        e->exhausted = e->layer.len == 0;
    }
    free(steps);
    free(ix.slots);
    layer_free(&nxt);
    if (e->exhausted)
        Py_RETURN_NONE;
    if (e->layer.len != 1) {
        PyErr_SetString(PyExc_RuntimeError, "orderloops: the last layer holds more than one set");
        return NULL;
    }
    PyObject *order = unwind(e, e->layer.link[0], n);
    if (!order)
        return NULL;
    return Py_BuildValue("(NL)", order, (long long)e->layer.peak[0]);
nomem:
    free(steps);
    free(ix.slots);
    layer_free(&nxt);
    return PyErr_NoMemory();
}

static inline int less(int64_t p1, int64_t a1, int64_t p2, int64_t a2)
{
    return p1 < p2 || (p1 == p2 && a1 < a2);
}

/* ------------------------------------------------------------------ beam search */

typedef struct {
    const uint64_t *done; /* nw words */
    int64_t a, b;         /* the ranking's first two keys */
    int32_t nw;
} rankc_t;

/* (a, b, done as an integer): done's words compared from the most significant */
static int cmp_rank(const void *x, const void *y)
{
    const rankc_t *p = (const rankc_t *)x, *q = (const rankc_t *)y;
    if (p->a != q->a)
        return p->a < q->a ? -1 : 1;
    if (p->b != q->b)
        return p->b < q->b ? -1 : 1;
    for (int32_t w = p->nw - 1; w >= 0; w--)
        if (p->done[w] != q->done[w])
            return p->done[w] < q->done[w] ? -1 : 1;
    return 0;
}

/* beam(schedule, width, by_live) -> (order, peak): _beam of tests/reference_reorder.py.
 * Each step keeps the width best partial orders, ranked by (peak, live bytes, executed
 * set) or, by_live, (live bytes, peak, executed set); of those reaching one set, the
 * lowest (peak, live bytes). */
static PyObject *ol_beam(PyObject *self, PyObject *args)
{
    PyObject *o_sched;
    Py_ssize_t width;
    int by_live;
    if (!PyArg_ParseTuple(args, "Onp", &o_sched, &width, &by_live))
        return NULL;
    sched_t *s = get_sched(o_sched);
    if (!s)
        return NULL;
    if (width < 1 || width > 1000000) {
        PyErr_SetString(PyExc_ValueError, "orderloops.beam: the width is not in 1..10^6");
        return NULL;
    }
    const int32_t n = s->n;
    const size_t nw = (size_t)s->nw;
    PyObject *result = NULL;
    exact_t links = {0}; /* its link pool alone */
    layer_t cur = {0}, nxt = {0};
    int32_t *parent = NULL, *vs = NULL;
    index_t ix = {0};
    rankc_t *ranks = NULL;
    stepc_t *steps = malloc(((size_t)n + 1) * sizeof(stepc_t));
    size_t cap = 0;
    if (!steps || layer_start(&cur, s) < 0)
        goto nomem;
    for (int32_t k = 0; k < n; k++) {
        nxt.len = 0;
        if (index_clear(&ix) < 0)
            goto nomem;
        for (size_t i = 0; i < cur.len; i++) {
            const uint64_t *done = cur.done + i * nw;
            Py_ssize_t ns = next_steps(s, done, cur.mem[i], cur.peak[i], cur.ready + i * nw, steps);
            for (Py_ssize_t j = 0; j < ns; j++) {
                int32_t v = steps[j].v;
                size_t slot = 0;
                int32_t found = index_find(&ix, &nxt, done, v, nw, &slot);
                if (found >= 0) {
                    if (less(steps[j].peak, steps[j].after, nxt.peak[found], nxt.mem[found])) {
                        nxt.peak[found] = steps[j].peak;
                        nxt.mem[found] = steps[j].after;
                        parent[found] = (int32_t)i;
                        vs[found] = v;
                    }
                    continue;
                }
                if (nxt.len >= ((size_t)1 << 29) || layer_reserve(&nxt, nxt.len + 1, s->nw) < 0)
                    goto nomem;
                if (nxt.len + 1 > cap) {
                    size_t c = cap ? cap * 2 : 256;
                    int32_t *pp = realloc(parent, c * sizeof(int32_t));
                    if (!pp)
                        goto nomem;
                    parent = pp;
                    int32_t *vv = realloc(vs, c * sizeof(int32_t));
                    if (!vv)
                        goto nomem;
                    vs = vv;
                    cap = c;
                }
                size_t at = nxt.len++;
                uint64_t *d2 = nxt.done + at * nw;
                memcpy(d2, done, nw * sizeof(uint64_t));
                d2[(size_t)v >> 6] |= (uint64_t)1 << (v & 63);
                nxt.peak[at] = steps[j].peak;
                nxt.mem[at] = steps[j].after;
                parent[at] = (int32_t)i;
                vs[at] = v;
                if (index_put(&ix, &nxt, slot, at, nw) < 0)
                    goto nomem;
            }
        }
        if (nxt.len == 0) {
            PyErr_SetString(PyExc_RuntimeError, "orderloops.beam: no node is ready");
            goto out;
        }
        rankc_t *r = realloc(ranks, nxt.len * sizeof(rankc_t));
        if (!r)
            goto nomem;
        ranks = r;
        for (size_t q = 0; q < nxt.len; q++) {
            ranks[q].done = nxt.done + q * nw;
            ranks[q].a = by_live ? nxt.mem[q] : nxt.peak[q];
            ranks[q].b = by_live ? nxt.peak[q] : nxt.mem[q];
            ranks[q].nw = (int32_t)nw;
        }
        qsort(ranks, nxt.len, sizeof(rankc_t), cmp_rank);
        size_t keep = nxt.len < (size_t)width ? nxt.len : (size_t)width;
        /* the kept states: the ready set after v, and the link (v, the parent's link) */
        layer_t made = {0};
        if (layer_reserve(&made, keep, s->nw) < 0) {
            layer_free(&made);
            goto nomem;
        }
        for (size_t q = 0; q < keep; q++) {
            size_t at = (size_t)(ranks[q].done - nxt.done) / nw;
            int32_t v = vs[at];
            size_t from = (size_t)parent[at];
            uint64_t *d2 = made.done + q * nw;
            memcpy(d2, nxt.done + at * nw, nw * sizeof(uint64_t));
            advance_ready(s, made.ready + q * nw, cur.ready + from * nw, d2, v);
            made.peak[q] = nxt.peak[at];
            made.mem[q] = nxt.mem[at];
            if (add_link(&links, v, cur.link[from], &made.link[q]) < 0) {
                layer_free(&made);
                goto nomem;
            }
        }
        made.len = keep;
        layer_free(&cur);
        cur = made;
    }
    /* the best of the last beam by (peak, live bytes, executed set) */
    size_t best = 0;
    for (size_t q = 1; q < cur.len; q++) {
        rankc_t x = {cur.done + q * nw, cur.peak[q], cur.mem[q], (int32_t)nw};
        rankc_t y = {cur.done + best * nw, cur.peak[best], cur.mem[best], (int32_t)nw};
        if (cmp_rank(&x, &y) < 0)
            best = q;
    }
    PyObject *order = unwind(&links, cur.link[best], n);
    if (order)
        result = Py_BuildValue("(NL)", order, (long long)cur.peak[best]);
    goto out;
nomem:
    PyErr_NoMemory();
out:
    free(steps);
    free(ix.slots);
    free(parent);
    free(vs);
    free(ranks);
    free(links.lv);
    free(links.lp);
    layer_free(&cur);
    layer_free(&nxt);
    return result;
}

/* ------------------------------------------------------------------ local search */

typedef struct {
    const sched_t *s;
    int32_t n;
    size_t nw;
    uint64_t *done; /* (n + 1) * nw: the executed set before each step */
    int64_t *mem;   /* n + 1 */
    int64_t *during, *peak, *area, *tail_peak, *tail_area;
    int64_t cost_peak, cost_area;
} profile_t;

/* Become the profile of order, equal to the profiled one outside a..b (_Profile.move_to) */
static void profile_move(profile_t *p, const int32_t *order, int32_t a, int32_t b)
{
    const sched_t *s = p->s;
    size_t nw = p->nw;
    int32_t n = p->n;
    for (int32_t k = a; k <= b; k++) {
        int64_t after;
        step(s, p->done + (size_t)k * nw, p->mem[k], order[k], &p->during[k], &after);
        p->mem[k + 1] = after;
        memcpy(p->done + (size_t)(k + 1) * nw, p->done + (size_t)k * nw, nw * sizeof(uint64_t));
        p->done[(size_t)(k + 1) * nw + ((size_t)order[k] >> 6)] |= (uint64_t)1 << (order[k] & 63);
    }
    p->peak[0] = s->base;
    p->area[0] = 0;
    for (int32_t k = 0; k < n; k++) {
        p->peak[k + 1] = p->peak[k] >= p->during[k] ? p->peak[k] : p->during[k];
        p->area[k + 1] = p->area[k] + p->during[k];
    }
    p->tail_peak[n] = 0;
    p->tail_area[n] = 0;
    for (int32_t k = n - 1; k >= 0; k--) {
        p->tail_peak[k] = p->tail_peak[k + 1] >= p->during[k] ? p->tail_peak[k + 1] : p->during[k];
        p->tail_area[k] = p->tail_area[k + 1] + p->during[k];
    }
    p->cost_peak = p->peak[n];
    p->cost_area = p->area[n];
}

/* (peak, area) of the profiled order with steps a..a+len-1 replaced by span */
static void span_cost(const profile_t *p, const int32_t *span, int32_t len, int32_t a,
                      uint64_t *scratch, int64_t *out_peak, int64_t *out_area)
{
    const sched_t *s = p->s;
    size_t nw = p->nw;
    int32_t b = a + len - 1;
    memcpy(scratch, p->done + (size_t)a * nw, nw * sizeof(uint64_t));
    int64_t mem = p->mem[a], peak = p->peak[a], area = p->area[a];
    for (int32_t i = 0; i < len; i++) {
        int32_t v = span[i];
        int64_t during;
        step(s, scratch, mem, v, &during, &mem);
        if (during > peak)
            peak = during;
        area += during;
        scratch[(size_t)v >> 6] |= (uint64_t)1 << (v & 63);
    }
    *out_peak = peak >= p->tail_peak[b + 1] ? peak : p->tail_peak[b + 1];
    *out_area = area + p->tail_area[b + 1];
}

/* local_search(schedule, order, evals) -> (order, peak) */
static PyObject *ol_local_search(PyObject *self, PyObject *args)
{
    PyObject *o_sched, *o_order;
    long long evals;
    if (!PyArg_ParseTuple(args, "OOL", &o_sched, &o_order, &evals))
        return NULL;
    sched_t *s = get_sched(o_sched);
    if (!s)
        return NULL;
    PyObject *fast = PySequence_Fast(o_order, "orderloops.local_search: the order is not a sequence");
    if (!fast)
        return NULL;
    int32_t n = s->n;
    size_t nw = (size_t)s->nw;
    if (PySequence_Fast_GET_SIZE(fast) != n) {
        Py_DECREF(fast);
        PyErr_SetString(PyExc_ValueError, "orderloops.local_search: the order is not of every node");
        return NULL;
    }
    profile_t p = {.s = s, .n = n, .nw = nw};
    int32_t *best = malloc(((size_t)n + 1) * sizeof(int32_t));
    int32_t *snap = malloc(((size_t)n + 1) * sizeof(int32_t));
    int32_t *at = malloc(((size_t)n + 1) * sizeof(int32_t));
    int32_t *span = malloc(((size_t)n + 1) * sizeof(int32_t));
    uint64_t *scratch = calloc(nw + 1, sizeof(uint64_t));
    p.done = calloc(((size_t)n + 1) * nw + 1, sizeof(uint64_t));
    p.mem = calloc((size_t)n + 1, sizeof(int64_t));
    p.during = calloc((size_t)n + 1, sizeof(int64_t));
    p.peak = calloc((size_t)n + 1, sizeof(int64_t));
    p.area = calloc((size_t)n + 1, sizeof(int64_t));
    p.tail_peak = calloc((size_t)n + 1, sizeof(int64_t));
    p.tail_area = calloc((size_t)n + 1, sizeof(int64_t));
    PyObject *result = NULL;
    if (!best || !snap || !at || !span || !scratch || !p.done || !p.mem || !p.during ||
        !p.peak || !p.area || !p.tail_peak || !p.tail_area) {
        PyErr_NoMemory();
        goto out;
    }
    for (int32_t i = 0; i < n; i++)
        at[i] = -1;
    for (int32_t i = 0; i < n; i++) {
        int32_t v;
        if (node_id(PySequence_Fast_GET_ITEM(fast, i), n, &v, "an order's node") < 0)
            goto out;
        if (at[v] >= 0) {
            PyErr_SetString(PyExc_ValueError, "orderloops.local_search: a node twice in the order");
            goto out;
        }
        best[i] = v;
        at[v] = i;
    }
    /* an order that runs a node before one it depends on is refused: moves assume it */
    for (int32_t i = 0; i < n; i++) {
        smask_t m = s->preds[best[i]];
        for (int32_t j = m.start; j < m.start + m.len; j++) {
            uint64_t bits = s->wb[j];
            while (bits) {
                int32_t u = (int32_t)s->wi[j] * 64 + __builtin_ctzll(bits);
                bits &= bits - 1;
                if (at[u] >= i) {
                    PyErr_SetString(PyExc_ValueError, "orderloops.local_search: the order runs "
                                    "a node before one it depends on");
                    goto out;
                }
            }
        }
    }
    p.mem[0] = s->base;
    if (n > 0)
        profile_move(&p, best, 0, n - 1);
    else {
        p.cost_peak = s->base;
        p.cost_area = 0;
    }
    int improved = 1;
    while (improved && evals > 0) {
        improved = 0;
        memcpy(snap, best, (size_t)n * sizeof(int32_t));
        for (int32_t i = 0; i < n; i++) {
            if (evals <= 0)
                break;
            int32_t v = snap[i], pos = at[v];
            /* v's place without it: after its last predecessor, before its first successor */
            int32_t lo = 0, hi = n - 1;
            smask_t m = s->preds[v];
            for (int32_t j = m.start; j < m.start + m.len; j++) {
                uint64_t bits = s->wb[j];
                while (bits) {
                    int32_t u = (int32_t)s->wi[j] * 64 + __builtin_ctzll(bits);
                    bits &= bits - 1;
                    if (at[u] + 1 > lo)
                        lo = at[u] + 1;
                }
            }
            for (int32_t k = s->succ_start[v]; k < s->succ_start[v + 1]; k++)
                if (at[s->succs[k]] - 1 < hi)
                    hi = at[s->succs[k]] - 1;
            if (lo > pos || hi < pos) { /* cannot be, the order and schedule checked */
                PyErr_SetString(PyExc_RuntimeError, "orderloops.local_search: a node outside "
                                "its dependencies' bounds");
                goto out;
            }
            int32_t targets[2] = {lo, hi};
            int ntargets = lo == hi ? 1 : 2;
            for (int t = 0; t < ntargets; t++) {
                int32_t target = targets[t];
                if (target == pos)
                    continue;
                evals--;
                int32_t a, b, len = 0;
                if (target < pos) {
                    a = target;
                    b = pos;
                    span[len++] = v;
                    for (int32_t q = target; q < pos; q++)
                        span[len++] = best[q];
                } else {
                    a = pos;
                    b = target;
                    for (int32_t q = pos + 1; q <= target; q++)
                        span[len++] = best[q];
                    span[len++] = v;
                }
                int64_t cp, ca;
                span_cost(&p, span, len, a, scratch, &cp, &ca);
                if (less(cp, ca, p.cost_peak, p.cost_area)) {
                    memcpy(best + a, span, (size_t)len * sizeof(int32_t));
                    improved = 1;
                    profile_move(&p, best, a, b);
                    for (int32_t q = a; q <= b; q++)
                        at[best[q]] = q;
                    break;
                }
            }
        }
    }
    PyObject *order = PyList_New(n);
    if (!order)
        goto out;
    for (int32_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLong(best[i]);
        if (!v) {
            Py_DECREF(order);
            goto out;
        }
        PyList_SET_ITEM(order, i, v);
    }
    result = Py_BuildValue("(NL)", order, (long long)p.cost_peak);
out:
    Py_DECREF(fast);
    free(best);
    free(snap);
    free(at);
    free(span);
    free(scratch);
    free(p.done);
    free(p.mem);
    free(p.during);
    free(p.peak);
    free(p.area);
    free(p.tail_peak);
    free(p.tail_area);
    return result;
}

static PyMethodDef ol_methods[] = {
    {"schedule", ol_schedule, METH_VARARGS,
     "schedule(preds, succs, new_bytes, frees, writes, base) -> schedule\n\n"
     "A Schedule of passes/reorder.py compiled for the searches below."},
    {"exact_new", ol_exact_new, METH_VARARGS,
     "exact_new(schedule, upper) -> search: an exact search pruned at upper (None: none)"},
    {"exact_run", ol_exact_run, METH_VARARGS,
     "exact_run(search, max_states, pace) -> (order, peak) or None (ExactSearch.run;\n"
     "paced past pace sets where pace >= 0; -1: not paced)"},
    {"exact_tighten", ol_exact_tighten, METH_VARARGS,
     "exact_tighten(search, upper): prune at upper, dropping the kept sets above it"},
    {"exact_state", ol_exact_state, METH_O,
     "exact_state(search) -> (sets made, executed nodes per set, exhausted)"},
    {"beam", ol_beam, METH_VARARGS,
     "beam(schedule, width, by_live) -> (order, peak): one beam search (passes/reorder.py)"},
    {"local_search", ol_local_search, METH_VARARGS,
     "local_search(schedule, order, evals) -> (order, peak) (passes/reorder.py)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef ol_module = {
    PyModuleDef_HEAD_INIT, "graphmem.orderloops",
    "The order searches of passes/reorder.py, compiled (graphmem/orderloops.c).", -1,
    ol_methods,
};

PyMODINIT_FUNC PyInit_orderloops(void) { return PyModule_Create(&ol_module); }
