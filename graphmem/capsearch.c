/* graphmem.capsearch: the complete placement search at a fixed capacity, compiled.
 *
 * solve() decides whether buffers fit in a capacity: it finds offsets (status 1),
 * proves that none exist (status 0), or stops after a number of search nodes (-1).
 * The problem (sections, overlaps, lifespan widths) is prepared by
 * passes/placement/capacity.py; the search is specified, line for line, by the plain
 * Python of tests/reference_capacity.py (read its docstring for the rules:
 * canonical solutions, dynamic ordering, section inference, dominance, the pruning
 * of buffers that meet no buffer left, and the split into independent time
 * partitions). tests/test_place_capacity.py runs both and asserts the same status,
 * offsets and node count.
 *
 * All arrays are C-contiguous int64. The entry point is importable, so it checks
 * what it is given: every index in range, sizes positive, and sums computed with the
 * compiler's overflow builtins (a value near 2^63 is refused with ValueError).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { FOUND = 1, NOT_FOUND = 0, ABORTED = -1, FAILED = -2 };

typedef struct {
    int64_t key;  /* minimum offset */
    int64_t rank;
    int64_t b;
} item_t;

typedef struct {
    int64_t n, nsec, capacity, align, node_limit, nodes;
    const int64_t *size, *slo, *shi, *adj_start, *adj, *sec_start, *sec, *width;
    const char *heuristic;  /* the preordering's letters: W, A, T */
    int64_t *area, *tkey;  /* per buffer: size * width; T when a partition is preordered */
    int64_t *off, *minoff, *sol, *floor_, *total, *cuts;
    int64_t *mark;  /* per section: the stamp of the last placement that touched it */
    int64_t stamp;
} state_t;

static int64_t search(state_t *st, const int64_t *bufs, int64_t nb, int64_t plo, int64_t phi,
                      int64_t min_off, int64_t min_rank, const item_t *prev, int64_t nprev);

static int item_cmp(const void *x, const void *y)
{
    const item_t *a = x, *b = y;
    if (a->key != b->key)
        return a->key < b->key ? -1 : 1;
    if (a->rank != b->rank)
        return a->rank < b->rank ? -1 : 1;
    return (a->b > b->b) - (a->b < b->b);
}

/* a before b in the heuristic's preorder: each key larger first, then the lower index */
static int before(const state_t *st, int64_t a, int64_t b)
{
    for (const char *c = st->heuristic; *c; c++) {
        int64_t x, y;
        if (*c == 'W') {
            x = st->width[a];
            y = st->width[b];
        } else if (*c == 'A') {
            x = st->area[a];
            y = st->area[b];
        } else {
            x = st->tkey[a];
            y = st->tkey[b];
        }
        if (x != y)
            return x > y;
    }
    return a < b;
}

/* merge sort of v[0..k) by before(), tmp of the same length */
static void preorder_sort(const state_t *st, int64_t *v, int64_t *tmp, int64_t k)
{
    if (k < 2)
        return;
    int64_t h = k / 2;
    preorder_sort(st, v, tmp, h);
    preorder_sort(st, v + h, tmp, k - h);
    int64_t i = 0, j = h, o = 0;
    while (i < h && j < k)
        tmp[o++] = before(st, v[j], v[i]) ? v[j++] : v[i++];
    while (i < h)
        tmp[o++] = v[i++];
    while (j < k)
        tmp[o++] = v[j++];
    memcpy(v, tmp, (size_t)k * sizeof(int64_t));
}

/* the parts between consecutive cutpoints, each preordered and solved apart */
static int64_t parts(state_t *st, const int64_t *bufs, int64_t nb, const int64_t *cut, int64_t ncut)
{
    int64_t *sub = malloc((size_t)(2 * nb + 1) * sizeof(int64_t));
    if (!sub)
        return FAILED;
    int64_t status = FOUND;
    for (int64_t c = 0; c + 1 < ncut && status == FOUND; c++) {
        int64_t lo = cut[c], hi = cut[c + 1], k = 0;
        for (int64_t i = 0; i < nb; i++) {
            int64_t o = bufs[i];
            if (st->off[o] < 0 && st->slo[o] < hi && lo < st->shi[o]) {
                sub[k++] = o;
                int64_t t = 0;
                for (int64_t s = st->slo[o]; s < st->shi[o]; s++)
                    if (st->total[s] > t)
                        t = st->total[s];
                st->tkey[o] = t;
            }
        }
        if (k) {
            preorder_sort(st, sub, sub + nb, k);
            status = search(st, sub, k, lo, hi, 0, -1, NULL, 0);
        }
    }
    free(sub);
    return status;
}

/* after placing b: search on, or solve apart the parts no buffer left spans */
static int64_t split(state_t *st, const int64_t *bufs, int64_t nb, int64_t plo, int64_t phi,
                     int64_t m, int64_t r, int64_t b, const item_t *order, int64_t norder)
{
    st->sol[b] = st->off[b];
    int64_t span = st->shi[b] - st->slo[b];
    int64_t *cut = malloc((size_t)(span + 2) * sizeof(int64_t));
    if (!cut)
        return FAILED;
    int64_t ncut = 0;
    cut[ncut++] = plo;
    for (int64_t s = st->slo[b]; s < st->shi[b] - 1; s++)
        if (--st->cuts[s] == 0)
            cut[ncut++] = s + 1;
    int64_t status;
    if (ncut == 1) {
        status = search(st, bufs, nb, plo, phi, m, r, order, norder);
    } else {
        cut[ncut++] = phi;
        status = parts(st, bufs, nb, cut, ncut);
    }
    for (int64_t s = st->slo[b]; s < st->shi[b] - 1; s++)
        st->cuts[s]++;
    free(cut);
    return status;
}

/* prev: the order of the node above in the same partition (NULL at its first node):
 * filtered and re-sorted, it is nearly sorted already (minimum offsets only grow) */
static int64_t search(state_t *st, const int64_t *bufs, int64_t nb, int64_t plo, int64_t phi,
                      int64_t min_off, int64_t min_rank, const item_t *prev, int64_t nprev)
{
    if (st->nodes >= st->node_limit)
        return ABORTED;
    st->nodes++;
    item_t *order = malloc((size_t)(nb > 0 ? nb : 1) * sizeof(item_t));
    if (!order)
        return FAILED;
    int64_t k = 0;
    if (prev) {
        for (int64_t i = 0; i < nprev; i++) {
            int64_t b = prev[i].b;
            if (st->off[b] < 0) {
                order[k].key = st->minoff[b];
                order[k].rank = prev[i].rank;
                order[k].b = b;
                k++;
            }
        }
        for (int64_t x = 1; x < k; x++) {  /* insertion sort: few items move */
            item_t v = order[x];
            int64_t y = x - 1;
            while (y >= 0 && item_cmp(&order[y], &v) > 0) {
                order[y + 1] = order[y];
                y--;
            }
            order[y + 1] = v;
        }
    } else {
        for (int64_t i = 0; i < nb; i++) {
            int64_t b = bufs[i];
            if (st->off[b] < 0) {
                order[k].key = st->minoff[b];
                order[k].rank = i;  /* its place in the partition's preorder */
                order[k].b = b;
                k++;
            }
        }
        qsort(order, (size_t)k, sizeof(item_t), item_cmp);
    }
    if (!k) {
        free(order);
        return FOUND;
    }
    int64_t min_height = INT64_MAX;
    for (int64_t i = 0; i < k; i++) {
        int64_t h = order[i].key + st->size[order[i].b];
        if (h < min_height)
            min_height = h;
    }
    int64_t status = NOT_FOUND;
    const int64_t cap = st->capacity, al = st->align;
    for (int64_t i = 0; i < k; i++) {
        int64_t m = order[i].key, r = order[i].rank, b = order[i].b;
        if (m < min_off || (m == min_off && r < min_rank))
            continue;  /* not canonical */
        if (m >= min_height)
            continue;  /* dominated */
        int64_t sz = st->size[b], height = m + sz;
        int64_t top = (height + al - 1) / al * al;
        st->off[b] = m;
        int hatless = 1;
        int64_t deg = st->adj_start[b + 1] - st->adj_start[b];
        int64_t span = st->shi[b] - st->slo[b];
        /* undo logs: (buffer, old minimum offset) and (section, old floor) */
        int64_t *bumped = malloc((size_t)(2 * deg + 1) * sizeof(int64_t));
        int64_t *affected = NULL, naff = 0, nbump = 0;
        if (!bumped) {
            st->off[b] = -1;
            status = FAILED;
            break;
        }
        int64_t stamp = ++st->stamp;
        /* the sections the bumped buffers live in, each once (stamped) */
        int64_t aff_cap = 0;
        for (int64_t j = st->adj_start[b]; j < st->adj_start[b + 1]; j++) {
            int64_t o = st->adj[j];
            if (st->off[o] >= 0)
                continue;
            hatless = 0;
            if (st->minoff[o] >= top)
                continue;
            bumped[2 * nbump] = o;
            bumped[2 * nbump + 1] = st->minoff[o];
            nbump++;
            st->minoff[o] = top;
            aff_cap += st->shi[o] - st->slo[o];
        }
        affected = malloc((size_t)(aff_cap + 1) * sizeof(int64_t));
        int64_t *floors = malloc((size_t)(2 * (span + aff_cap) + 1) * sizeof(int64_t));
        if (!affected || !floors) {
            free(affected);
            free(floors);
            for (int64_t q = nbump - 1; q >= 0; q--)
                st->minoff[bumped[2 * q]] = bumped[2 * q + 1];
            free(bumped);
            st->off[b] = -1;
            status = FAILED;
            break;
        }
        for (int64_t q = 0; q < nbump; q++) {
            int64_t o = bumped[2 * q];
            for (int64_t s = st->slo[o]; s < st->shi[o]; s++)
                if (st->mark[s] != stamp) {
                    st->mark[s] = stamp;
                    affected[naff++] = s;
                }
        }
        int64_t nfl = 0;
        for (int64_t s = st->slo[b]; s < st->shi[b]; s++) {
            floors[2 * nfl] = s;
            floors[2 * nfl + 1] = st->floor_[s];
            nfl++;
            st->floor_[s] = height;
            st->total[s] -= sz;
        }
        /* (the specification visits them in increasing order: each is updated at most
         * once and the log is undone in reverse, so the order changes nothing) */
        for (int64_t q = 0; q < naff; q++) {
            int64_t s = affected[q], low = INT64_MAX;
            for (int64_t j = st->sec_start[s]; j < st->sec_start[s + 1]; j++) {
                int64_t o = st->sec[j];
                if (st->off[o] < 0 && st->minoff[o] < low) {
                    low = st->minoff[o];
                    if (low <= st->floor_[s])
                        break;  /* the floor stays: no need for the exact minimum */
                }
            }
            if (low != INT64_MAX && st->floor_[s] < low) {
                floors[2 * nfl] = s;
                floors[2 * nfl + 1] = st->floor_[s];
                nfl++;
                st->floor_[s] = low;
            }
        }
        int ok = 1;
        for (int64_t s = plo; s < phi && ok; s++) {
            int64_t f = st->floor_[s] > m ? st->floor_[s] : m;
            ok = f + st->total[s] <= cap;  /* both at most the sum of all sizes: no overflow */
        }
        int64_t got = NOT_FOUND;
        if (ok)
            got = split(st, bufs, nb, plo, phi, m, r, b, order, k);
        for (int64_t q = nfl - 1; q >= 0; q--)
            st->floor_[floors[2 * q]] = floors[2 * q + 1];
        for (int64_t s = st->slo[b]; s < st->shi[b]; s++)
            st->total[s] += sz;
        for (int64_t q = nbump - 1; q >= 0; q--)
            st->minoff[bumped[2 * q]] = bumped[2 * q + 1];
        st->off[b] = -1;
        free(bumped);
        free(affected);
        free(floors);
        if (got != NOT_FOUND) {
            status = got;
            break;
        }
        if (hatless)
            break;
    }
    free(order);
    return status;
}

typedef struct {
    Py_buffer view;
    int held;
} buf_t;

static int get_buf(PyObject *obj, buf_t *b, Py_ssize_t count, int writable, const char *what)
{
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &b->view, flags) < 0)
        return -1;
    b->held = 1;
    if (b->view.itemsize != 8 || (count >= 0 && b->view.len != count * 8)) {
        PyErr_Format(PyExc_ValueError, "capsearch.solve: %s has the wrong item size or length",
                     what);
        return -1;
    }
    return 0;
}

static PyObject *cap_solve(PyObject *self, PyObject *args)
{
    PyObject *o[9], *o_out;
    long long nsec, capacity, align, node_limit;
    const char *heuristic;
    if (!PyArg_ParseTuple(args, "OOOLOOOOOsLLLO", &o[0], &o[1], &o[2], &nsec, &o[3], &o[4],
                          &o[5], &o[6], &o[7], &heuristic, &capacity, &align, &node_limit,
                          &o_out))
        return NULL;
    for (const char *c = heuristic; *c; c++)
        if (*c != 'W' && *c != 'A' && *c != 'T') {
            PyErr_SetString(PyExc_ValueError, "capsearch.solve: the heuristic's letters are W, A, T");
            return NULL;
        }
    buf_t bufs[9];
    memset(bufs, 0, sizeof(bufs));
    PyObject *result = NULL;
    state_t st;
    memset(&st, 0, sizeof(st));
    int64_t *work = NULL, *everyone = NULL, *cut = NULL;
    if (align <= 0 || nsec < 0 || capacity < 0) {
        PyErr_SetString(PyExc_ValueError,
                        "capsearch.solve: alignment must be positive, sections and capacity not negative");
        return NULL;
    }
    if (get_buf(o[0], &bufs[0], -1, 0, "size") < 0)
        goto done;
    int64_t n = bufs[0].view.len / 8;
    if (get_buf(o[1], &bufs[1], n, 0, "slo") < 0 || get_buf(o[2], &bufs[2], n, 0, "shi") < 0 ||
        get_buf(o[3], &bufs[3], n + 1, 0, "adj_start") < 0 ||
        get_buf(o[4], &bufs[4], -1, 0, "adj") < 0 ||
        get_buf(o[5], &bufs[5], nsec + 1, 0, "sec_start") < 0 ||
        get_buf(o[6], &bufs[6], -1, 0, "sec") < 0 || get_buf(o[7], &bufs[7], n, 0, "width") < 0 ||
        get_buf(o_out, &bufs[8], n, 1, "offsets") < 0)
        goto done;
    st.n = n;
    st.nsec = nsec;
    st.capacity = capacity;
    st.align = align;
    st.node_limit = node_limit;
    st.size = bufs[0].view.buf;
    st.slo = bufs[1].view.buf;
    st.shi = bufs[2].view.buf;
    st.adj_start = bufs[3].view.buf;
    st.adj = bufs[4].view.buf;
    st.sec_start = bufs[5].view.buf;
    st.sec = bufs[6].view.buf;
    st.width = bufs[7].view.buf;
    st.heuristic = heuristic;
    int64_t n_adj = bufs[4].view.len / 8, n_sec = bufs[6].view.len / 8;
    /* check every index and count before a loop uses it */
    int64_t sum = 0, area_b;
    for (int64_t b = 0; b < n; b++) {
        if (st.size[b] <= 0 || st.slo[b] < 0 || st.slo[b] >= st.shi[b] || st.shi[b] > nsec ||
            st.width[b] < 0 || __builtin_mul_overflow(st.size[b], st.width[b], &area_b) ||
            __builtin_add_overflow(sum, st.size[b], &sum) ||
            st.adj_start[b] < 0 || st.adj_start[b] > st.adj_start[b + 1]) {
            PyErr_SetString(PyExc_ValueError, "capsearch.solve: a buffer's size, sections, width "
                                              "or overlaps are out of range");
            goto done;
        }
    }
    if (st.adj_start[0] != 0 || st.adj_start[n] != n_adj || st.sec_start[0] != 0 ||
        st.sec_start[nsec] != n_sec ||
        __builtin_add_overflow(sum, capacity, &sum) || __builtin_add_overflow(sum, align, &sum)) {
        PyErr_SetString(PyExc_ValueError, "capsearch.solve: the index bounds do not match, or the "
                                          "sizes are too large for 64-bit offsets");
        goto done;
    }
    for (int64_t j = 0; j < n_adj; j++)
        if (st.adj[j] < 0 || st.adj[j] >= n) {
            PyErr_SetString(PyExc_ValueError, "capsearch.solve: an overlap is out of range");
            goto done;
        }
    for (int64_t s = 0; s < nsec; s++)
        if (st.sec_start[s] > st.sec_start[s + 1]) {
            PyErr_SetString(PyExc_ValueError, "capsearch.solve: section bounds decrease");
            goto done;
        }
    for (int64_t j = 0; j < n_sec; j++)
        if (st.sec[j] < 0 || st.sec[j] >= n) {
            PyErr_SetString(PyExc_ValueError, "capsearch.solve: a section member is out of range");
            goto done;
        }
    /* off, minoff, sol, area, tkey by buffer; floor, total, cuts, mark by section */
    work = calloc((size_t)(5 * n + 4 * nsec + 1), sizeof(int64_t));
    everyone = malloc((size_t)(n + 1) * sizeof(int64_t));
    cut = malloc((size_t)(nsec + 2) * sizeof(int64_t));
    if (!work || !everyone || !cut) {
        PyErr_NoMemory();
        goto done;
    }
    st.off = work;
    st.minoff = work + n;
    st.sol = work + 2 * n;
    st.area = work + 3 * n;
    st.tkey = work + 4 * n;
    st.floor_ = work + 5 * n;
    st.total = st.floor_ + nsec;
    st.cuts = st.total + nsec;
    st.mark = st.cuts + nsec;
    for (int64_t b = 0; b < n; b++) {
        st.off[b] = -1;
        st.area[b] = st.size[b] * st.width[b];
        everyone[b] = b;
        for (int64_t s = st.slo[b]; s < st.shi[b]; s++)
            st.total[s] += st.size[b];
        for (int64_t s = st.slo[b]; s < st.shi[b] - 1; s++)
            st.cuts[s]++;
    }
    for (int64_t s = 0; s < nsec; s++)
        st.mark[s] = -1;
    int64_t ncut = 0;
    cut[ncut++] = 0;
    for (int64_t s = 0; s + 1 < nsec; s++)
        if (st.cuts[s] == 0)
            cut[ncut++] = s + 1;
    cut[ncut++] = nsec;
    int64_t status;
    Py_BEGIN_ALLOW_THREADS
    status = parts(&st, everyone, n, cut, ncut);
    Py_END_ALLOW_THREADS
    if (status == FAILED) {
        PyErr_NoMemory();
        goto done;
    }
    if (status == FOUND)
        memcpy(bufs[8].view.buf, st.sol, (size_t)n * sizeof(int64_t));
    result = Py_BuildValue("(LL)", (long long)status, (long long)st.nodes);
done:
    for (int i = 0; i < 9; i++)
        if (bufs[i].held)
            PyBuffer_Release(&bufs[i].view);
    free(work);
    free(everyone);
    free(cut);
    return result;
}

static PyMethodDef cap_methods[] = {
    {"solve", cap_solve, METH_VARARGS,
     "solve(size, slo, shi, nsec, adj_start, adj, sec_start, sec, width, heuristic, capacity,\n"
     "      alignment,"
     " node_limit, offsets) -> (status, nodes)\n\n"
     "The complete placement search at a fixed capacity (tests/reference_capacity.py):\n"
     "status 1 found (offsets written), 0 proven not to fit, -1 node limit reached."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef cap_module = {
    PyModuleDef_HEAD_INIT, "capsearch",
    "The complete placement search of passes/placement/capacity.py, compiled.", -1,
    cap_methods};

PyMODINIT_FUNC PyInit_capsearch(void) { return PyModule_Create(&cap_module); }
