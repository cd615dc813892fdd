/* graphmem.fitloops: the sequential loops of the passes, compiled.
 *
 * share() is the storage pool of passes/share.py (MXNet's free pool of blocks keyed by
 * size); its specification is the Python loop of tests/reference_share.py
 * (tests/test_share_reference.py runs both).
 *
 * run() is the best-fit loop of passes/placement/best_fit.py. It places items (plain
 * records and Tied sets, numbered as passes/placement/items.py's PartPairs numbers
 * them) in a given order, each at the best-fitting gap among the already placed parts
 * that overlap it in time. Its specification is best_fit in tests/reference_place.py
 * (tests/test_place_reference.py runs both on the same inputs):
 *
 *   plain record: among the earlier parts that overlap it, sorted by offset, the
 *     smallest gap [top, next offset) of at least its size, the lowest offset on
 *     ties (top: the largest end so far, from 0); else the aligned top.
 *   Tied set: the lowest aligned base at which no part of it meets an earlier part
 *     (a sweep over the forbidden base intervals sorted by start).
 *
 * All arrays are C-contiguous int64, but for the part owners and the overlapping
 * pairs (int32, as numpy builds them) and the Tied flags (one byte per item).
 *
 * Both entry points are importable (graphmem.fitloops), so they trust nothing they are
 * given: every index and count is checked before a loop uses it (a plain item has
 * exactly one part, each part's owner is the item whose range holds it), sizes and
 * relative offsets must not be negative, and every sum is computed with the compiler's
 * overflow builtins: a value near 2^63 is refused with ValueError, never wrapped. (A
 * planning context refuses graphs that large long before; best_fit refuses such
 * records too.)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t lo;
    int64_t hi;
} span_t;

static int cmp_span(const void *x, const void *y)
{
    const span_t *a = (const span_t *)x, *b = (const span_t *)y;
    if (a->lo != b->lo)
        return a->lo < b->lo ? -1 : 1;
    if (a->hi != b->hi)
        return a->hi < b->hi ? -1 : 1;
    return 0;
}

/* n rounded up to a multiple of alignment (n >= 0, alignment > 0); 0 on overflow */
static int align_up(int64_t n, int64_t alignment, int64_t *out)
{
    int64_t t;
    if (__builtin_add_overflow(n, alignment - 1, &t))
        return 0;
    *out = t / alignment * alignment;
    return 1;
}

/* Sort a short run by insertion (most neighbour lists are a few dozen spans). */
static void sort_spans(span_t *s, Py_ssize_t n)
{
    if (n > 32) {
        qsort(s, (size_t)n, sizeof(span_t), cmp_span);
        return;
    }
    for (Py_ssize_t i = 1; i < n; i++) {
        span_t v = s[i];
        Py_ssize_t j = i - 1;
        while (j >= 0 && cmp_span(&s[j], &v) > 0) {
            s[j + 1] = s[j];
            j--;
        }
        s[j + 1] = v;
    }
}

typedef struct {
    Py_buffer view;
    int held;
} buf_t;

static int get_buf(PyObject *obj, buf_t *b, Py_ssize_t itemsize, Py_ssize_t count,
                   int writable, const char *what)
{
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &b->view, flags) < 0)
        return -1;
    b->held = 1;
    if (b->view.itemsize != itemsize || (count >= 0 && b->view.len != count * itemsize)) {
        PyErr_Format(PyExc_ValueError, "fitloops.run: %s has the wrong item size or length", what);
        return -1;
    }
    return 0;
}

static PyObject *fit_run(PyObject *self, PyObject *args)
{
    PyObject *o_seq, *o_tied, *o_start, *o_rel, *o_nbytes, *o_owner, *o_a, *o_b, *o_base;
    long long alignment;
    if (!PyArg_ParseTuple(args, "OOOOOOOOLO", &o_seq, &o_tied, &o_start, &o_rel, &o_nbytes,
                          &o_owner, &o_a, &o_b, &alignment, &o_base))
        return NULL;
    if (alignment <= 0) {
        PyErr_SetString(PyExc_ValueError, "fitloops.run: alignment must be positive");
        return NULL;
    }
    buf_t bufs[9];
    memset(bufs, 0, sizeof(bufs));
    PyObject *result = NULL;
    int64_t *rank = NULL, *bound = NULL, *fill = NULL, *span_off = NULL, *span_end = NULL;
    int32_t *earlier = NULL;
    span_t *scratch = NULL;

    /* item and part counts come from the tied flags and the part sizes */
    if (get_buf(o_tied, &bufs[1], 1, -1, 0, "tied") < 0)
        goto done;
    Py_ssize_t n_items = bufs[1].view.len;
    if (get_buf(o_rel, &bufs[3], 8, -1, 0, "rel") < 0)
        goto done;
    Py_ssize_t n_parts = bufs[3].view.len / 8;
    if (get_buf(o_seq, &bufs[0], 8, n_items, 0, "seq") < 0 ||
        get_buf(o_start, &bufs[2], 8, n_items + 1, 0, "start") < 0 ||
        get_buf(o_nbytes, &bufs[4], 8, n_parts, 0, "nbytes") < 0 ||
        get_buf(o_owner, &bufs[5], 4, n_parts, 0, "owner") < 0 ||
        get_buf(o_a, &bufs[6], 4, -1, 0, "a") < 0)
        goto done;
    Py_ssize_t n_pairs = bufs[6].view.len / 4;
    if (get_buf(o_b, &bufs[7], 4, n_pairs, 0, "b") < 0 ||
        get_buf(o_base, &bufs[8], 8, n_items, 1, "base") < 0)
        goto done;
    const int64_t *seq = bufs[0].view.buf, *start = bufs[2].view.buf;
    const int64_t *rel = bufs[3].view.buf, *nbytes = bufs[4].view.buf;
    const uint8_t *tied = bufs[1].view.buf;
    const int32_t *owner = bufs[5].view.buf, *pa = bufs[6].view.buf, *pb = bufs[7].view.buf;
    int64_t *base_out = bufs[8].view.buf;

    /* check the indices once, so the loops below cannot read out of bounds */
    if (start[0] != 0 || start[n_items] != n_parts) {
        PyErr_SetString(PyExc_ValueError, "fitloops.run: start does not span the parts");
        goto done;
    }
    for (Py_ssize_t k = 0; k < n_items; k++)
        if (start[k + 1] < start[k]) {
            PyErr_SetString(PyExc_ValueError, "fitloops.run: start is not ascending");
            goto done;
        }
    for (Py_ssize_t k = 0; k < n_items; k++) {
        if (!tied[k] && start[k + 1] - start[k] != 1) {
            PyErr_SetString(PyExc_ValueError, "fitloops.run: a plain item has not exactly one part");
            goto done;
        }
        for (int64_t p = start[k]; p < start[k + 1]; p++)
            if (owner[p] != k) {
                PyErr_SetString(PyExc_ValueError,
                                "fitloops.run: a part's owner is not the item whose range holds it");
                goto done;
            }
    }
    for (Py_ssize_t p = 0; p < n_parts; p++)
        if (nbytes[p] < 0 || rel[p] < 0) {
            PyErr_SetString(PyExc_ValueError, "fitloops.run: a part size or offset is negative");
            goto done;
        }
    for (Py_ssize_t e = 0; e < n_pairs; e++)
        if (pa[e] < 0 || pa[e] >= n_parts || pb[e] < 0 || pb[e] >= n_parts) {
            PyErr_SetString(PyExc_ValueError, "fitloops.run: a pair is out of range");
            goto done;
        }

    Py_BEGIN_ALLOW_THREADS
    rank = malloc(sizeof(int64_t) * (size_t)(n_items ? n_items : 1));
    bound = calloc((size_t)n_parts + 1, sizeof(int64_t));
    fill = malloc(sizeof(int64_t) * (size_t)(n_parts ? n_parts : 1));
    earlier = malloc(sizeof(int32_t) * (size_t)(n_pairs ? n_pairs : 1));
    span_off = calloc((size_t)(n_parts ? n_parts : 1), sizeof(int64_t));
    span_end = calloc((size_t)(n_parts ? n_parts : 1), sizeof(int64_t));
    Py_END_ALLOW_THREADS
    if (!rank || !bound || !fill || !earlier || !span_off || !span_end) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n_items; k++)
        rank[k] = -1;
    for (Py_ssize_t i = 0; i < n_items; i++) {
        int64_t k = seq[i];
        if (k < 0 || k >= n_items || rank[k] >= 0) {
            PyErr_SetString(PyExc_ValueError, "fitloops.run: seq is not a permutation of the items");
            goto done;
        }
        rank[k] = i;
    }

    int64_t total = 0;
    int overflowed = 0;
#define FAIL_OVERFLOW                                                                        \
    do {                                                                                     \
        overflowed = 1;                                                                      \
        goto loop_end;                                                                       \
    } while (0)
    Py_BEGIN_ALLOW_THREADS
    /* each pair, oriented (later part, earlier part) by placement rank, grouped by the
       later part with a counting sort: part p sees earlier[bound[p]:bound[p + 1]] */
    for (Py_ssize_t e = 0; e < n_pairs; e++) {
        int32_t later = rank[owner[pa[e]]] > rank[owner[pb[e]]] ? pa[e] : pb[e];
        bound[later + 1]++;
    }
    Py_ssize_t widest = 0;
    for (Py_ssize_t p = 0; p < n_parts; p++) {
        bound[p + 1] += bound[p];
    }
    memcpy(fill, bound, sizeof(int64_t) * (size_t)n_parts);
    for (Py_ssize_t e = 0; e < n_pairs; e++) {
        int later_a = rank[owner[pa[e]]] > rank[owner[pb[e]]];
        int32_t later = later_a ? pa[e] : pb[e], other = later_a ? pb[e] : pa[e];
        earlier[fill[later]++] = other;
    }
    for (Py_ssize_t k = 0; k < n_items; k++) {
        Py_ssize_t w = (Py_ssize_t)(bound[start[k + 1]] - bound[start[k]]);
        if (w > widest)
            widest = w;
    }
    scratch = malloc(sizeof(span_t) * (size_t)(widest ? widest : 1));
    if (scratch) {
        for (Py_ssize_t i = 0; i < n_items; i++) {
            int64_t k = seq[i], p0 = start[k], p1 = start[k + 1];
            if (tied[k]) { /* the lowest base where every part fits */
                Py_ssize_t m = 0;
                for (int64_t p = p0; p < p1; p++) {
                    int64_t r = rel[p], reach;
                    if (__builtin_add_overflow(r, nbytes[p] - 1, &reach))
                        FAIL_OVERFLOW;
                    for (int64_t e = bound[p]; e < bound[p + 1]; e++) {
                        int32_t q = earlier[e];
                        if (__builtin_sub_overflow(span_off[q], reach, &scratch[m].lo) ||
                            __builtin_sub_overflow(span_end[q], r, &scratch[m].hi))
                            FAIL_OVERFLOW;
                        m++;
                    }
                }
                sort_spans(scratch, m);
                int64_t base = 0;
                for (Py_ssize_t j = 0; j < m; j++) {
                    if (scratch[j].lo > base)
                        break; /* every later interval starts above base too */
                    if (scratch[j].hi > base && !align_up(scratch[j].hi, alignment, &base))
                        FAIL_OVERFLOW;
                }
                for (int64_t p = p0; p < p1; p++) {
                    if (__builtin_add_overflow(base, rel[p], &span_off[p]) ||
                        __builtin_add_overflow(span_off[p], nbytes[p], &span_end[p]))
                        FAIL_OVERFLOW;
                    if (span_end[p] > total)
                        total = span_end[p];
                }
                base_out[k] = base;
                continue;
            }
            int64_t size = nbytes[p0];
            Py_ssize_t m = 0;
            for (int64_t e = bound[p0]; e < bound[p0 + 1]; e++) {
                int32_t q = earlier[e];
                scratch[m].lo = span_off[q];
                scratch[m].hi = span_end[q];
                m++;
            }
            sort_spans(scratch, m);
            int64_t best_gap = -1, best_off = 0, top = 0;
            for (Py_ssize_t j = 0; j < m; j++) {
                int64_t gap = scratch[j].lo - top; /* both in [0, 2^63): no overflow */
                if (gap >= size && (best_gap < 0 || gap < best_gap)) {
                    best_gap = gap;
                    best_off = top;
                }
                if (scratch[j].hi > top)
                    top = scratch[j].hi;
            }
            int64_t offset = best_off;
            if (best_gap < 0 && !align_up(top, alignment, &offset))
                FAIL_OVERFLOW;
            base_out[k] = offset;
            span_off[p0] = offset;
            if (__builtin_add_overflow(offset, size, &span_end[p0]))
                FAIL_OVERFLOW;
            if (span_end[p0] > total)
                total = span_end[p0];
        }
    }
loop_end:
    Py_END_ALLOW_THREADS
    if (overflowed) {
        PyErr_SetString(PyExc_ValueError,
                        "fitloops.run: an offset does not fit in 64 bits (records too large)");
        goto done;
    }
    if (!scratch) {
        PyErr_NoMemory();
        goto done;
    }
    result = PyLong_FromLongLong(total);

done:
    for (int i = 0; i < 9; i++)
        if (bufs[i].held)
            PyBuffer_Release(&bufs[i].view);
    free(rank);
    free(bound);
    free(fill);
    free(earlier);
    free(span_off);
    free(span_end);
    free(scratch);
    return result;
}

/* ---- share(): the storage pool of passes/share.py ----------------------------- */

typedef struct {
    int64_t bytes;
    int64_t seq;
    int64_t block;
} free_t; /* a free block, ordered by (bytes, seq, block) as share.py's free list */

typedef struct {
    int64_t last;
    int64_t block;
} release_t; /* a block in use, released after its owner's last step */

static int release_less(const release_t *a, const release_t *b)
{
    return a->last < b->last || (a->last == b->last && a->block < b->block);
}

static void heap_push(release_t *h, Py_ssize_t *n, release_t v)
{
    Py_ssize_t i = (*n)++;
    while (i > 0) {
        Py_ssize_t up = (i - 1) / 2;
        if (!release_less(&v, &h[up]))
            break;
        h[i] = h[up];
        i = up;
    }
    h[i] = v;
}

static release_t heap_pop(release_t *h, Py_ssize_t *n)
{
    release_t top = h[0], v = h[--(*n)];
    Py_ssize_t i = 0;
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && release_less(&h[c + 1], &h[c]))
            c++;
        if (!release_less(&h[c], &v))
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}

/* the first free entry with bytes >= size (entries are sorted by bytes first) */
static Py_ssize_t free_lower(const free_t *f, Py_ssize_t n, int64_t size)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (f[mid].bytes < size)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* the first free entry with bytes > size */
static Py_ssize_t free_upper(const free_t *f, Py_ssize_t n, int64_t size)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (f[mid].bytes <= size)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static PyObject *fit_share(PyObject *self, PyObject *args)
{
    PyObject *o_first, *o_last, *o_nbytes, *o_block, *o_block_bytes;
    long long match_range;
    if (!PyArg_ParseTuple(args, "OOOLOO", &o_first, &o_last, &o_nbytes, &match_range,
                          &o_block, &o_block_bytes))
        return NULL;
    if (match_range < 0) {
        PyErr_SetString(PyExc_ValueError, "fitloops.share: match_range must not be negative");
        return NULL;
    }
    buf_t bufs[5];
    memset(bufs, 0, sizeof(bufs));
    PyObject *result = NULL;
    release_t *heap = NULL;
    free_t *pool = NULL;
    if (get_buf(o_first, &bufs[0], 8, -1, 0, "first") < 0)
        goto done;
    Py_ssize_t n = bufs[0].view.len / 8;
    if (get_buf(o_last, &bufs[1], 8, n, 0, "last") < 0 ||
        get_buf(o_nbytes, &bufs[2], 8, n, 0, "nbytes") < 0 ||
        get_buf(o_block, &bufs[3], 8, n, 1, "block") < 0 ||
        get_buf(o_block_bytes, &bufs[4], 8, n, 1, "block_bytes") < 0)
        goto done;
    const int64_t *first = bufs[0].view.buf, *last = bufs[1].view.buf;
    const int64_t *nbytes = bufs[2].view.buf;
    int64_t *block_of = bufs[3].view.buf, *block_bytes = bufs[4].view.buf;
    for (Py_ssize_t i = 0; i < n; i++)
        if (nbytes[i] < 0 || (i && first[i] < first[i - 1])) {
            PyErr_SetString(PyExc_ValueError,
                            "fitloops.share: records must be sorted by first step, sizes >= 0");
            goto done;
        }
    heap = malloc(sizeof(release_t) * (size_t)(n ? n : 1));
    pool = malloc(sizeof(free_t) * (size_t)(n ? n : 1));
    if (!heap || !pool) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t blocks = 0;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t n_heap = 0, n_free = 0;
    int64_t seq = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t size = nbytes[i];
        /* release every block whose owner died before this record is produced */
        while (n_heap && heap[0].last < first[i]) {
            release_t r = heap_pop(heap, &n_heap);
            free_t e = {block_bytes[r.block], seq++, r.block};
            /* after every entry <= e: entries of e's bytes have smaller seq */
            Py_ssize_t at = free_upper(pool, n_free, e.bytes);
            memmove(&pool[at + 1], &pool[at], sizeof(free_t) * (size_t)(n_free - at));
            pool[at] = e;
            n_free++;
        }
        Py_ssize_t take = -1;
        if (match_range > 0 && n_free) {
            Py_ssize_t mid = free_lower(pool, n_free, size);
            int64_t cap = size > INT64_MAX / match_range ? INT64_MAX : size * match_range;
            Py_ssize_t hi = free_upper(pool, n_free, cap);
            if (mid < hi) /* the smallest block that is large enough */
                take = mid;
            else if (free_lower(pool, n_free, size / match_range) < mid)
                take = mid - 1; /* the largest of the smaller blocks; it grows to fit */
        }
        int64_t block;
        if (take < 0) {
            block = blocks++;
            block_bytes[block] = size;
        } else {
            block = pool[take].block;
            memmove(&pool[take], &pool[take + 1], sizeof(free_t) * (size_t)(n_free - take - 1));
            n_free--;
            if (size > block_bytes[block])
                block_bytes[block] = size;
        }
        block_of[i] = block;
        release_t r = {last[i], block};
        heap_push(heap, &n_heap, r);
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(blocks);

done:
    for (int i = 0; i < 5; i++)
        if (bufs[i].held)
            PyBuffer_Release(&bufs[i].view);
    free(heap);
    free(pool);
    return result;
}

static PyMethodDef fit_methods[] = {
    {"share", fit_share, METH_VARARGS,
     "share(first, last, nbytes, match_range, block, block_bytes) -> blocks\\n\\n"
     "The storage pool of passes/share.py over records sorted by (first step, id): writes\\n"
     "each record's block and each block's bytes; returns the number of blocks."},
    {"run", fit_run, METH_VARARGS,
     "run(seq, tied, start, rel, nbytes, owner, a, b, alignment, base) -> arena bytes\n\n"
     "Best fit of passes/placement/best_fit.py over PartPairs arrays; writes each item's\n"
     "base offset."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef fit_module = {
    PyModuleDef_HEAD_INIT, "fitloops",
    "The sequential loops of passes/share.py and passes/placement/best_fit.py, compiled.", -1,
    fit_methods};

PyMODINIT_FUNC PyInit_fitloops(void) { return PyModule_Create(&fit_module); }
