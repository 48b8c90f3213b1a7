/*
 * rlstore._accel: compiled twin of the replay buffer's fast add path (_replay_fast.py).
 *
 * A Writer is bound to one RingStorage (packed records of obs, action, reward, terminated,
 * truncated, in that order). Writer.add(buffer, obs, action, reward, next_obs, terminated,
 * truncated) handles the common case only (Writer.gather, the read side, is documented there):
 *
 *   - every env column continues an open episode (buffer._prev_all is True) and the new obs
 *     equals, byte for byte, the pending next_obs stored at the cursor row;
 *   - no env ends its episode (terminated and truncated all False);
 *   - numpy arrays of exactly the stored dtype and shape, C-contiguous; a Python float,
 *     numpy.float64 or numpy.float32 reward for a single add;
 *   - every float value finite (reward also within float32 range).
 *
 * It returns True having written the transition(s) exactly as the Python path would, or False
 * having written nothing; the Python path then takes over (and raises any error).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAXDIM 8

typedef struct {
    Py_ssize_t off;    /* byte offset inside a record */
    Py_ssize_t nbytes; /* bytes of one item */
    int ndim;          /* item dims */
    npy_intp shape[MAXDIM];
    int type_num;      /* numpy dtype number */
    int kind;          /* 0: no finiteness check, 4: float32, 8: float64 */
} Field;

typedef struct {
    PyObject_HEAD
    PyObject *storage;  /* RingStorage */
    PyObject *records;  /* its records array (kept alive; a new storage gets a new writer) */
    Py_buffer rec;      /* writable view of the records */
    int have_rec;
    PyObject *f32;      /* numpy.float32 */
    PyObject *np_false; /* numpy.False_ */
    Py_ssize_t num_envs, cap, itemsize;
    Field obs, act;
    Py_ssize_t rew_off, te_off, tr_off;
} Writer;

static PyObject *s_prev_all, *s_cursor, *s_rows_written, *s_size;

/* ---------------------------------------------------------------- helpers */

/* finite_f32 / finite_f64: are all n values finite (exponent bits not all ones)? */
#define DEFINE_FINITE(name, T, EXP)                                    \
    static int name(const char *p, Py_ssize_t n)                       \
    {                                                                  \
        for (Py_ssize_t i = 0; i < n; i++) {                           \
            T u;                                                       \
            memcpy(&u, p + sizeof(T) * i, sizeof(T));                  \
            if ((u & (EXP)) == (EXP)) return 0;                        \
        }                                                              \
        return 1;                                                      \
    }
DEFINE_FINITE(finite_f32, uint32_t, 0x7f800000u)
DEFINE_FINITE(finite_f64, uint64_t, 0x7ff0000000000000ull)
#undef DEFINE_FINITE

static int finite_kind(int kind, const char *p, Py_ssize_t nbytes)
{
    if (kind == 4) return finite_f32(p, nbytes / 4);
    if (kind == 8) return finite_f64(p, nbytes / 8);
    return 1;
}

static int all_zero(const char *p, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

/* Is `o` exactly a numpy.ndarray of dtype number `type_num` (native byte order), C-contiguous,
 * of shape (lead, *shape) (lead -1: no leading axis)? */
static int arr_ok(PyObject *o, int type_num, Py_ssize_t lead, int ndim, const npy_intp *shape)
{
    if (Py_TYPE(o) != &PyArray_Type) return 0;
    PyArrayObject *a = (PyArrayObject *)o;
    int off = lead >= 0 ? 1 : 0;
    if (PyArray_TYPE(a) != type_num || !PyArray_ISNOTSWAPPED(a) || !PyArray_IS_C_CONTIGUOUS(a) ||
        PyArray_NDIM(a) != ndim + off)
        return 0;
    const npy_intp *d = PyArray_DIMS(a);
    if (lead >= 0 && d[0] != lead) return 0;
    for (int i = 0; i < ndim; i++)
        if (d[i + off] != shape[i]) return 0;
    return 1;
}

#define DATA(o) ((const char *)PyArray_DATA((PyArrayObject *)(o)))

static int get_ssize(PyObject *o, PyObject *name, Py_ssize_t *out)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) return -1;
    *out = PyLong_AsSsize_t(v);
    Py_DECREF(v);
    if (*out == -1 && PyErr_Occurred()) return -1;
    return 0;
}

static int set_ssize(PyObject *o, PyObject *name, Py_ssize_t value)
{
    PyObject *v = PyLong_FromSsize_t(value);
    if (v == NULL) return -1;
    int r = PyObject_SetAttr(o, name, v);
    Py_DECREF(v);
    return r;
}

/* A single add's scalar action: a Python int in the range of an int64 / int32 field, or a numpy
 * scalar of exactly the field's type (the values the Python fast path takes without a cast).
 * Writes its bytes to `out` (>= 16 bytes); 0: not such a value. */
static int scalar_action(const Field *fa, PyObject *a, char *out)
{
    if (fa->nbytes > 16) return 0;
    if (PyLong_CheckExact(a)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(a, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
        if (fa->type_num == NPY_INT64) {
            int64_t x = (int64_t)v;
            memcpy(out, &x, 8);
            return 1;
        }
        if (fa->type_num == NPY_INT32 && v >= INT32_MIN && v <= INT32_MAX) {
            int32_t x = (int32_t)v;
            memcpy(out, &x, 4);
            return 1;
        }
        return 0;
    }
    if (!PyArray_IsScalar(a, Generic)) return 0;
    PyArray_Descr *d = PyArray_DescrFromScalar(a);
    if (d == NULL) {
        PyErr_Clear();
        return 0;
    }
    int ok = d->type_num == fa->type_num && PyArray_ISNBO(d->byteorder) &&
             PyDataType_ELSIZE(d) == fa->nbytes;
    Py_DECREF(d);
    if (!ok) return 0;
    PyArray_ScalarAsCtype(a, out);
    if (fa->kind && !finite_kind(fa->kind, out, fa->nbytes)) return 0;
    return 1;
}

/* is a single add's flag exactly False (Python or numpy)? */
static int is_false(Writer *w, PyObject *o) { return o == Py_False || o == w->np_false; }

/* ---------------------------------------------------------------- Writer */

static void Writer_dealloc(Writer *w)
{
    if (w->have_rec) PyBuffer_Release(&w->rec);
    Py_XDECREF(w->storage);
    Py_XDECREF(w->records);
    Py_XDECREF(w->f32);
    Py_XDECREF(w->np_false);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static int parse_field(PyObject *spec, Field *f)
{
    /* spec: (offset, nbytes, shape tuple, dtype number, kind) */
    PyObject *shape;
    if (!PyArg_ParseTuple(spec, "nnO!ii", &f->off, &f->nbytes, &PyTuple_Type, &shape,
                          &f->type_num, &f->kind))
        return -1;
    Py_ssize_t nd = PyTuple_GET_SIZE(shape);
    if (nd > MAXDIM) {
        PyErr_SetString(PyExc_ValueError, "field layout not supported");
        return -1;
    }
    f->ndim = (int)nd;
    for (Py_ssize_t i = 0; i < nd; i++) {
        f->shape[i] = (npy_intp)PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i));
        if (f->shape[i] == -1 && PyErr_Occurred()) return -1;
    }
    return 0;
}

static int Writer_init(Writer *w, PyObject *args, PyObject *kwds)
{
    PyObject *storage, *records, *f32, *np_false, *obs_spec, *act_spec;
    Py_ssize_t num_envs, cap, itemsize, rew_off, te_off, tr_off;
    if (!PyArg_ParseTuple(args, "OOOOnnnOOnnn", &storage, &records, &f32, &np_false,
                          &num_envs, &cap, &itemsize, &obs_spec, &act_spec, &rew_off, &te_off,
                          &tr_off))
        return -1;
    if (parse_field(obs_spec, &w->obs) < 0 || parse_field(act_spec, &w->act) < 0) return -1;
    if (w->have_rec) {
        PyBuffer_Release(&w->rec);
        w->have_rec = 0;
    }
    if (PyObject_GetBuffer(records, &w->rec, PyBUF_SIMPLE | PyBUF_WRITABLE) < 0) return -1;
    w->have_rec = 1;
    if (num_envs <= 0 || cap <= 0 || itemsize <= 0 || w->rec.len != num_envs * cap * itemsize) {
        PyErr_SetString(PyExc_ValueError, "records size does not match the layout");
        return -1;
    }
    Py_INCREF(storage);
    Py_XSETREF(w->storage, storage);
    Py_INCREF(records);
    Py_XSETREF(w->records, records);
    Py_INCREF(f32);
    Py_XSETREF(w->f32, f32);
    Py_INCREF(np_false);
    Py_XSETREF(w->np_false, np_false);
    w->num_envs = num_envs;
    w->cap = cap;
    w->itemsize = itemsize;
    w->rew_off = rew_off;
    w->te_off = te_off;
    w->tr_off = tr_off;
    return 0;
}

/* The state checks shared by both modes; 1: go on, 0: fall back, -1: error. */
static int state_ok(Writer *w, PyObject *buffer, Py_ssize_t *c, Py_ssize_t *rows_written,
                    Py_ssize_t *size)
{
    PyObject *v = PyObject_GetAttr(buffer, s_prev_all);
    if (v == NULL) return -1;
    int open = v == Py_True;
    Py_DECREF(v);
    if (!open) return 0;
    if (get_ssize(w->storage, s_cursor, c) < 0 || get_ssize(w->storage, s_rows_written, rows_written) < 0 ||
        get_ssize(w->storage, s_size, size) < 0)
        return -1;
    if (*c < 0 || *c >= w->cap) return 0;
    return 1;
}

static int advance(Writer *w, Py_ssize_t c2, Py_ssize_t rows_written,
                   Py_ssize_t size)
{
    if (set_ssize(w->storage, s_cursor, c2) < 0 ||
        set_ssize(w->storage, s_rows_written, rows_written + 1) < 0 ||
        set_ssize(w->storage, s_size, size < w->cap ? size + 1 : size) < 0)
        return -1;
    return 0;
}

static PyObject *Writer_add(Writer *w, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "add(buffer, obs, action, reward, next_obs, terminated, truncated)");
        return NULL;
    }
    PyObject *buffer = args[0], *obs = args[1], *action = args[2], *reward = args[3],
             *next_obs = args[4], *term = args[5], *trunc = args[6];
    const Py_ssize_t n = w->num_envs, isz = w->itemsize;
    const Field *fo = &w->obs, *fa = &w->act;
    float rew32 = 0.0f;
    const char *rb = NULL, *ab = NULL;
    char abuf[16]; /* a scalar action's bytes */
    Py_ssize_t c, rows_written, size;
    if (Py_TYPE(obs) != &PyArray_Type) Py_RETURN_FALSE;
    int single = n == 1 && PyArray_NDIM((PyArrayObject *)obs) == fo->ndim; /* no env axis */
    if (single) {
        if (!is_false(w, term) || !is_false(w, trunc)) Py_RETURN_FALSE;
        if (!(PyFloat_Check(reward) || (PyObject *)Py_TYPE(reward) == w->f32)) Py_RETURN_FALSE;
        double r = PyFloat_AsDouble(reward);
        if (r == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            Py_RETURN_FALSE;
        }
        if (!(fabs(r) <= (double)FLT_MAX)) Py_RETURN_FALSE; /* NaN, inf, float32 overflow */
        rew32 = (float)r;
        if (!arr_ok(obs, fo->type_num, -1, fo->ndim, fo->shape) ||
            !arr_ok(next_obs, fo->type_num, -1, fo->ndim, fo->shape))
            Py_RETURN_FALSE;
        if (fa->ndim == 0 && Py_TYPE(action) != &PyArray_Type) {
            if (!scalar_action(fa, action, abuf)) Py_RETURN_FALSE;
            ab = abuf;
        }
        else if (!arr_ok(action, fa->type_num, -1, fa->ndim, fa->shape))
            Py_RETURN_FALSE;
    }
    else {
        if (!arr_ok(obs, fo->type_num, n, fo->ndim, fo->shape) ||
            !arr_ok(next_obs, fo->type_num, n, fo->ndim, fo->shape) ||
            !arr_ok(action, fa->type_num, n, fa->ndim, fa->shape) ||
            !arr_ok(reward, NPY_FLOAT32, n, 0, NULL) || !arr_ok(term, NPY_BOOL, n, 0, NULL) ||
            !arr_ok(trunc, NPY_BOOL, n, 0, NULL))
            Py_RETURN_FALSE;
        rb = DATA(reward);
        if (!all_zero(DATA(term), n) || !all_zero(DATA(trunc), n) || !finite_f32(rb, n))
            Py_RETURN_FALSE;
    }
    const Py_ssize_t on = fo->nbytes, an = fa->nbytes;
    const char *ob = DATA(obs), *nb = DATA(next_obs);
    if (ab == NULL) ab = DATA(action);
    if (!finite_kind(fo->kind, nb, n * on) || !finite_kind(fa->kind, ab, n * an))
        Py_RETURN_FALSE;
    int st = state_ok(w, buffer, &c, &rows_written, &size);
    if (st < 0) return NULL;
    if (st == 0) Py_RETURN_FALSE;
    char *base = (char *)w->rec.buf;
    char *row = base + c * n * isz;
    for (Py_ssize_t j = 0; j < n; j++) /* continuity: obs is the pending next_obs */
        if (memcmp(row + j * isz + fo->off, ob + j * on, on) != 0) Py_RETURN_FALSE;
    /* ---- nothing can fail below: write */
    Py_ssize_t c2 = c + 1 < w->cap ? c + 1 : 0;
    char *row2 = base + c2 * n * isz;
    for (Py_ssize_t j = 0; j < n; j++) {
        char *r = row + j * isz;
        memmove(r + fa->off, ab + j * an, an);
        if (!single) memcpy(&rew32, rb + 4 * j, 4);
        memcpy(r + w->rew_off, &rew32, 4);
        r[w->te_off] = 0;
        r[w->tr_off] = 0;
        memmove(row2 + j * isz + fo->off, nb + j * on, on);
    }
    if (advance(w, c2, rows_written, size) < 0) return NULL;
    Py_RETURN_TRUE;
}


/* gather(indices, offset, obs, action, reward, terminated, truncated, next_obs) -> int
 *
 * Copies the stored transitions at logical flat indices `indices` (int64, (B,); index
 * i = row * num_envs + env, row 0 the oldest stored row) into the preallocated C-contiguous
 * outputs ((B, *obs), (B, *action), (B,) float32, (B,) bool, (B,) bool, (B, *obs)); physical
 * row = (row + offset) mod capacity, offset = rows_written - stored rows. next_obs is read from
 * the following row of the same env column (the caller patches ended episodes and
 * discontinuities from its side stores). Returns how many gathered transitions are done
 * (terminated or truncated). Raises IndexError for an index outside [0, limit). */
static PyObject *Writer_gather(Writer *w, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError,
                        "gather(indices, limit, offset, obs, action, reward, terminated, "
                        "truncated, next_obs)");
        return NULL;
    }
    PyObject *idx = args[0];
    Py_ssize_t limit = PyLong_AsSsize_t(args[1]);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t offset = PyLong_AsSsize_t(args[2]);
    if (offset == -1 && PyErr_Occurred()) return NULL;
    const Field *fo = &w->obs, *fa = &w->act;
    if (Py_TYPE(idx) != &PyArray_Type || PyArray_NDIM((PyArrayObject *)idx) != 1 ||
        !arr_ok(idx, NPY_INT64, -1, 1, PyArray_DIMS((PyArrayObject *)idx))) {
        PyErr_SetString(PyExc_TypeError, "gather: indices must be a contiguous int64 (B,) array");
        return NULL;
    }
    const npy_intp B = PyArray_DIM((PyArrayObject *)idx, 0);
    PyObject *oo = args[3], *oa = args[4], *orw = args[5], *ot = args[6], *ou = args[7],
             *on_ = args[8];
    if (!arr_ok(oo, fo->type_num, B, fo->ndim, fo->shape) ||
        !arr_ok(on_, fo->type_num, B, fo->ndim, fo->shape) ||
        !arr_ok(oa, fa->type_num, B, fa->ndim, fa->shape) || !arr_ok(orw, NPY_FLOAT32, B, 0, NULL) ||
        !arr_ok(ot, NPY_BOOL, B, 0, NULL) || !arr_ok(ou, NPY_BOOL, B, 0, NULL)) {
        PyErr_SetString(PyExc_TypeError, "gather: outputs of the wrong dtype, shape or layout");
        return NULL;
    }
    PyArrayObject *outs[6] = {(PyArrayObject *)oo, (PyArrayObject *)oa, (PyArrayObject *)orw,
                              (PyArrayObject *)ot, (PyArrayObject *)ou, (PyArrayObject *)on_};
    for (int k = 0; k < 6; k++)
        if (!PyArray_ISWRITEABLE(outs[k])) {
            PyErr_SetString(PyExc_ValueError, "gather: read-only output");
            return NULL;
        }
    const Py_ssize_t n = w->num_envs, isz = w->itemsize, cap = w->cap;
    if (limit < 0 || limit > n * cap || offset < 0) {
        PyErr_SetString(PyExc_ValueError, "gather: limit / offset out of range");
        return NULL;
    }
    const int64_t *ix = (const int64_t *)PyArray_DATA((PyArrayObject *)idx);
    for (npy_intp b = 0; b < B; b++)
        if (ix[b] < 0 || ix[b] >= limit) {
            PyErr_Format(PyExc_IndexError, "indices: expected values in [0, %zd), got %lld",
                         limit, (long long)ix[b]);
            return NULL;
        }
    const char *base = (const char *)w->rec.buf;
    char *po = PyArray_DATA(outs[0]), *pa = PyArray_DATA(outs[1]), *pr = PyArray_DATA(outs[2]),
         *pt = PyArray_DATA(outs[3]), *pu = PyArray_DATA(outs[4]), *pn = PyArray_DATA(outs[5]);
    const Py_ssize_t on = fo->nbytes, an = fa->nbytes;
    /* pass 1: record addresses (no memory traffic); pass 2: copy, prefetching PREFETCH
     * records ahead so that the random reads overlap (the gather is bound by memory latency) */
    const char **rec = PyMem_Malloc(2 * (size_t)(B > 0 ? B : 1) * sizeof(char *));
    if (rec == NULL) return PyErr_NoMemory();
    const char **succ = rec + B;
    const Py_ssize_t off = offset % cap;
    for (npy_intp b = 0; b < B; b++) {
        Py_ssize_t i = (Py_ssize_t)ix[b];
        Py_ssize_t col = n == 1 ? 0 : i % n, phys = (n == 1 ? i : i / n) + off;
        if (phys >= cap) phys -= cap;
        Py_ssize_t nxt = phys + 1 < cap ? phys + 1 : 0;
        rec[b] = base + (phys * n + col) * isz;
        succ[b] = base + (nxt * n + col) * isz + fo->off;
    }
#define PREFETCH 16
    for (npy_intp b = 0; b < B && b < PREFETCH; b++) {
        __builtin_prefetch(rec[b]);
        __builtin_prefetch(succ[b]);
    }
    Py_ssize_t done = 0;
    /* the GIL is held throughout: an add from another thread cannot tear a sample */
    for (npy_intp b = 0; b < B; b++) {
        if (b + PREFETCH < B) {
            __builtin_prefetch(rec[b + PREFETCH]);
            __builtin_prefetch(rec[b + PREFETCH] + isz - 1);
            __builtin_prefetch(succ[b + PREFETCH]);
        }
        const char *r = rec[b];
        memcpy(po + b * on, r + fo->off, on);
        memcpy(pa + b * an, r + fa->off, an);
        memcpy(pr + b * 4, r + w->rew_off, 4);
        char te = r[w->te_off], tr = r[w->tr_off];
        pt[b] = te;
        pu[b] = tr;
        done += (te | tr) != 0;
        memcpy(pn + b * on, succ[b], on);
    }
#undef PREFETCH
    PyMem_Free(rec);
    return PyLong_FromSsize_t(done);
}

static PyMethodDef Writer_methods[] = {
    {"add", (PyCFunction)(void (*)(void))Writer_add, METH_FASTCALL,
     "add(buffer, obs, action, reward, next_obs, terminated, truncated) -> bool: write the "
     "common case (see the module doc) and return True, or write nothing and return False."},
    {"gather", (PyCFunction)(void (*)(void))Writer_gather, METH_FASTCALL,
     "gather(indices, limit, offset, obs, action, reward, terminated, truncated, next_obs) -> "
     "number of done transitions: copy stored transitions into preallocated outputs."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rlstore._accel.Writer",
    .tp_basicsize = sizeof(Writer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Compiled common-case add of a packed replay ring (see rlstore._replay_fast).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Writer_init,
    .tp_dealloc = (destructor)Writer_dealloc,
    .tp_methods = Writer_methods,
};

static struct PyModuleDef accel_module = {
    PyModuleDef_HEAD_INIT, "rlstore._accel",
    "Compiled twin of the replay buffer's fast add path (optional; pure-Python fallback).", -1,
    NULL,
};

PyMODINIT_FUNC PyInit__accel(void)
{
    import_array();
    if (PyType_Ready(&WriterType) < 0) return NULL;
#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL;
    INTERN(s_prev_all, "_prev_all");
    INTERN(s_cursor, "cursor");
    INTERN(s_rows_written, "rows_written");
    INTERN(s_size, "size");
#undef INTERN
    PyObject *m = PyModule_Create(&accel_module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "MAX_DIMS", MAXDIM) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&WriterType);
    if (PyModule_AddObject(m, "Writer", (PyObject *)&WriterType) < 0) {
        Py_DECREF(&WriterType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
