/* The recorder's two hot wrappers in C (issue 36): ProcessGroup's op methods and
 * Work.wait. They take the steps of workloads/_trace.py's `_wrap_method.traced` and
 * `_wrap_wait.wait`, in the same order and with the same records, for the common call
 * (positional arguments, a known group, one tensor that needs no grad, no coalescing
 * block); every other call goes to the Python wrapper, which stays the reference. The
 * recorder's tables, counters and sink stay the Python module's own (read through its
 * globals and its classes' slots), so a record written here and one written there cannot
 * be told apart (tests/test_tracefast.py), and either path may take any op.
 *
 * Why: between two of gloo's ops a thread's caches are cold, and every µs the recorder
 * spends there is paid twice per pair in a ping-pong of p2p ops (docs/trace.md, "The C
 * fast path" has the steps' costs before and after).
 *
 * CPython 3.11 only (the interpreter's frames are read directly: no frame object is made
 * per frame walked), with the GIL; CPython's C API, no torch headers. setup.py builds it
 * as an optional extension: where it is not built (another Python, no C compiler: the
 * images), or LAB_TRACE_FAST=0, the Python wrappers take every call. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030C0000 || defined(Py_GIL_DISABLED)
#error "the recorder's fast path is written for CPython 3.11 with its GIL"
#endif
#ifndef Py_BUILD_CORE
#define Py_BUILD_CORE 1
#endif
#include "internal/pycore_frame.h"      /* _PyInterpreterFrame: 3.11's layout */
#undef Py_BUILD_CORE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <structmember.h>
#include <time.h>

/* The recorder module's state, set once by configure(). */
static PyObject *g_globals;          /* workloads._trace's globals (for _sink, _t0, ...) */
static PyObject *g_waiting, *g_ids, *g_names, *g_frames, *g_sites, *g_polled;
static PyObject *g_op_name, *g_classify, *g_site, *g_raised, *g_poll, *g_new_sink;
static PyObject *g_sweep, *g_ended, *g_where_int;
static PyObject *g_excluded, *g_exclude, *g_autograd, *g_tensor_type, *g_user, *g_plain;
static PyObject *g_gil_sink_type;    /* _GilFileSink: its records are copied into its mapping here */
static PyObject *g_red_op_type;      /* ReduceOp.RedOpType */
static PyObject *g_zero;             /* 0 */
static char g_marker[64];            /* the records' line prefix (records.TRACE) */
static Py_ssize_t g_marker_len;

static PyObject *s_reduce_op, *s_op, *s_segment, *s_sites_generation, *s_sink, *s_t0, *s_coalescing, *s_sweep_at, *s_write,
    *s_dtype, *s_shape, *s_requires_grad;

#ifdef LAB_PROF
/* benchmarks/trace_steps.py builds with -DLAB_PROF: TSC cycles per step, summed */
#include <x86intrin.h>
static unsigned long long prof_sum[16], prof_calls, prof_waits;
#define MARK(i) do { unsigned long long t_ = __rdtsc(); prof_sum[i] += t_ - prof_last; prof_last = t_; } while (0)
#else
#define MARK(i) do {} while (0)
#endif

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Slots of the recorder's classes, read at their offsets (a member descriptor's), not
 * through attribute lookup: _FileSink.pos/.mm, _Route.rid/.group/.count/.ranks,
 * _Count.counter/.issued. */
static PyTypeObject *t_route, *t_count;
static Py_ssize_t o_pos, o_mm, o_rid, o_group, o_count, o_ranks, o_counter, o_issued;

static Py_ssize_t slot_offset(PyObject *cls, const char *name) {
    PyObject *d = PyDict_GetItemString(((PyTypeObject *)cls)->tp_dict, name);
    if (d == NULL || Py_TYPE(d) != &PyMemberDescr_Type || ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "%s.%s: not a slot", ((PyTypeObject *)cls)->tp_name, name);
        return -1;
    }
    return ((PyMemberDescrObject *)d)->d_member->offset;
}

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

/* The mapping last written: held (and its buffer exported, so it cannot be closed under
 * us) until the sink moves on to another. */
static PyObject *c_mm;
static Py_buffer c_view;

/* id(code) -> what _trace's _frames / _names say of it, direct-mapped, values borrowed
 * from those tables (which keep them, and keep every code in _codes: no pointer here is
 * reused by another code). A miss asks the table, and the recorder's Python on a miss there. */
#define PCACHE_BITS 10
typedef struct { void *code; PyObject *value; } pentry;
static pentry frames_cache[1 << PCACHE_BITS], names_cache[1 << PCACHE_BITS];

static inline pentry *pslot(pentry *table, void *code) {
    return &table[(((uintptr_t)code >> 4) * 0x9E3779B97F4A7C15ULL) >> (64 - PCACHE_BITS)];
}

/* The value of `table` (a dict keyed by id(code)) for `code`, borrowed; on a miss there,
 * `fill(code)` (which stores it) first. NULL with an error set on failure. */
static PyObject *by_code(pentry *cache, PyObject *table, PyObject *fill, PyObject *code) {
    pentry *e = pslot(cache, code);
    if (e->code == code) return e->value;
    PyObject *key = PyLong_FromVoidPtr(code);
    if (key == NULL) return NULL;
    PyObject *value = PyDict_GetItemWithError(table, key);
    if (value == NULL && !PyErr_Occurred()) {
        PyObject *r = PyObject_CallOneArg(fill, code);
        if (r != NULL) {
            Py_DECREF(r);
            value = PyDict_GetItemWithError(table, key);
            if (value == NULL && !PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "the recorder's table lost a code");
        }
    }
    Py_DECREF(key);
    if (value != NULL) {
        e->code = code;
        e->value = value;
    }
    return value;
}

/* A global of the recorder module (borrowed; NULL with no error when absent). */
static PyObject *global(PyObject *name) { return PyDict_GetItemWithError(g_globals, name); }

static long long global_ll(PyObject *name) {
    PyObject *v = global(name);
    return v ? PyLong_AsLongLong(v) : 0;
}

static int write_mapped(PyObject *sink, const char *buf, Py_ssize_t len);
static int write_python(PyObject *sink, const char *buf, Py_ssize_t len);

/* One record line (marker + text) into the process's sink. 0 on success. */
static int write_line(const char *text, int n) {
    char buf[192];
    if (g_marker_len + n > (Py_ssize_t)sizeof(buf)) return -1;
    memcpy(buf, g_marker, g_marker_len);
    memcpy(buf + g_marker_len, text, n);
    PyObject *sink = global(s_sink);
    if (sink == NULL && PyErr_Occurred()) return -1;
    if (sink != NULL && Py_TYPE(sink) == (PyTypeObject *)g_gil_sink_type) {
        /* _GilFileSink.write, here (held: the loop below may let other threads run) */
        Py_INCREF(sink);
        int done = write_mapped(sink, buf, g_marker_len + n);
        Py_DECREF(sink);
        if (done != 0) return done < 0 ? -1 : 0;
        sink = global(s_sink);          /* read again: other threads may have run */
        if (sink == NULL && PyErr_Occurred()) return -1;
    }
    return write_python(sink, buf, g_marker_len + n);
}

/* 1: written into the sink's current mapping; 0: it does not fit there (the sink's own
 * write makes the next segment); -1: an error. */
static int write_mapped(PyObject *sink, const char *buf, Py_ssize_t len) {
    PyObject *mm = SLOT(sink, o_mm);
    {
        while (mm != NULL && mm != c_mm) {
            /* the sink moved on to a new mapping: let go of the old one first, since an
             * mmap's deallocation runs without the GIL (another thread may write meanwhile),
             * and only then read where to write */
            if (c_mm != NULL) {
                PyObject *old = c_mm;
                c_mm = NULL;
                PyBuffer_Release(&c_view);
                Py_DECREF(old);
            }
            mm = SLOT(sink, o_mm);
            if (mm == NULL) break;
            if (PyObject_GetBuffer(mm, &c_view, PyBUF_WRITABLE) < 0) return -1;
            c_mm = Py_NewRef(mm);
            mm = SLOT(sink, o_mm);      /* the buffer is taken without releasing the GIL: still it */
        }
        /* from here to the copy nothing releases the GIL or runs Python code: no other
         * thread or signal handler writes between reserving the bytes and filling them */
        PyObject *pos_obj = SLOT(sink, o_pos);
        Py_ssize_t pos = (pos_obj && PyLong_CheckExact(pos_obj)) ? PyLong_AsSsize_t(pos_obj) : -1;
        if (pos == -1 && PyErr_Occurred()) return -1;
        Py_ssize_t end = pos + len;
        PyObject *segment = global(s_segment);      /* SEGMENT, as the sink's write reads it */
        Py_ssize_t limit = segment ? PyLong_AsSsize_t(segment) : -1;
        if (limit == -1 && PyErr_Occurred()) return -1;
        if (pos >= 0 && mm != NULL && mm == c_mm && end <= limit && c_view.len >= end) {
            PyObject *end_obj = PyLong_FromSsize_t(end);
            if (end_obj == NULL) return -1;
            memcpy((char *)c_view.buf + pos, buf, len);
            SLOT(sink, o_pos) = end_obj;
            Py_DECREF(pos_obj);
            return 1;
        }
    }
    return 0;
}

/* The sink's own write(bytes) (a new segment, the stream sink, a sink made now). */
static int write_python(PyObject *sink, const char *buf, Py_ssize_t len) {
    PyObject *made = NULL;
    if (sink == NULL || sink == Py_None) {
        made = PyObject_CallNoArgs(g_new_sink);
        if (made == NULL) return -1;
        sink = made;
    }
    PyObject *data = PyBytes_FromStringAndSize(buf, len);
    PyObject *r = data ? PyObject_CallMethodOneArg(sink, s_write, data) : NULL;
    Py_XDECREF(data);
    Py_XDECREF(made);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* `v` in decimal at `p` (as %d writes it); the end. */
static char *fmt_ll(char *p, long long v) {
    char digits[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    if (v < 0) *p++ = '-';
    do { digits[n++] = (char)('0' + u % 10); u /= 10; } while (u);
    while (n) *p++ = digits[--n];
    return p;
}

static int write_end(long long ident, long long when) {
    char text[64], *p = text;
    *p++ = 'E'; *p++ = ' ';
    p = fmt_ll(p, ident); *p++ = ' ';
    p = fmt_ll(p, when - global_ll(s_t0)); *p++ = '\n';
    if (PyErr_Occurred()) return -1;
    return write_line(text, (int)(p - text));
}

/* ------------------------------------------------------------------ the op wrapper */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *dict;
    PyObject *original, *fallback, *routes, *kind;
    Py_ssize_t index;
    int returns_work, anysource, reducing, kind_peer;
    /* the last call's site, and what made it (a loop calls from one site again and again:
     * no key to build and hash then); valid while _sites_generation stays the same */
    PyObject *c_route, *c_code, *c_shape, *c_dtype, *c_where, *c_name, *c_api, *c_reduce;
    int c_lasti;
    long long c_site, c_generation;
} Traced;

static int same(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    if (a == NULL || b == NULL) return 0;
    int r = PyObject_RichCompareBool(a, b, Py_EQ);
    if (r < 0) PyErr_Clear();
    return r == 1;
}

static PyObject *call_fallback(Traced *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

/* The caller's frame: the interpreter's frame below this C call. */
static _PyInterpreterFrame *current_frame(void) {
    _PyInterpreterFrame *f = PyThreadState_Get()->cframe->current_frame;
    while (f != NULL && _PyFrame_IsIncomplete(f)) f = f->previous;
    return f;
}

/* (code, lasti, api) of the first frame outside torch and the recorder, as _trace._where
 * finds them (new references). */
static int where(_PyInterpreterFrame *f, PyObject **code_out, int *lasti_out, PyObject **api_out) {
    PyObject *api = Py_None;
    for (; f != NULL; f = f->previous) {
        if (_PyFrame_IsIncomplete(f)) continue;
        PyObject *code = (PyObject *)f->f_code;
        PyObject *kind = by_code(frames_cache, g_frames, g_classify, code);
        if (kind == NULL) return -1;
        if (kind == g_user) {
            *code_out = Py_NewRef(code);
            *lasti_out = _PyInterpreterFrame_LASTI(f) * (int)sizeof(_Py_CODEUNIT);
            *api_out = Py_NewRef(api);
            return 0;
        }
        if (kind != g_plain) api = kind;   /* borrowed from _frames, which keeps it */
    }
    *code_out = Py_NewRef(Py_None);
    *lasti_out = 0;
    *api_out = Py_NewRef(api);
    return 0;
}

/* c10's thread-local dispatch-key exclusion, called directly where use_c10() found and
 * checked it (torch's pybind functions cost 0.3-0.5 µs a call, three calls an op). */
static int (*c10_is_excluded)(uint16_t);
static void (*c10_set_excluded)(uint16_t, int);
static uint16_t c10_autograd;

static int is_excluded(void) {
    if (c10_is_excluded != NULL) return c10_is_excluded(c10_autograd) ? 1 : 0;
    PyObject *ex = PyObject_CallOneArg(g_excluded, g_autograd);
    if (ex == NULL) return -1;
    int excluded = ex == Py_True;
    Py_DECREF(ex);
    return excluded;
}

static int set_excluded(int on) {
    if (c10_set_excluded != NULL) {
        c10_set_excluded(c10_autograd, on);
        return 0;
    }
    PyObject *args[2] = {g_autograd, on ? Py_True : Py_False};
    PyObject *r = PyObject_Vectorcall(g_exclude, args, 2, NULL);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

static PyObject *traced_call(Traced *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if ((kwnames && PyTuple_GET_SIZE(kwnames)) || nargs < 1 || (self->index >= 0 && nargs <= self->index + 1))
        return call_fallback(self, args, nargsf, kwnames);
    long long entered = now_ns();
#ifdef LAB_PROF
    unsigned long long prof_last = __rdtsc(); prof_calls++;
#endif
    PyObject *group = args[0];
    PyObject *coalescing = global(s_coalescing);
    if (coalescing == NULL || !PyLong_CheckExact(coalescing) || PyLong_AsLong(coalescing) != 0) {
        if (PyErr_Occurred()) return NULL;
        return call_fallback(self, args, nargsf, kwnames);    /* a coalescing block, in Python */
    }

    /* the route: cached for this group, and still this group */
    PyObject *gid = PyLong_FromVoidPtr(group);
    if (gid == NULL) return NULL;
    PyObject *route = PyDict_GetItemWithError(self->routes, gid);
    Py_DECREF(gid);
    if (route == NULL) {
        if (PyErr_Occurred()) return NULL;
        return call_fallback(self, args, nargsf, kwnames);
    }
    if (Py_TYPE(route) != t_route) return call_fallback(self, args, nargsf, kwnames);
    Py_INCREF(route);
    PyObject *ref = SLOT(route, o_group);
    if (ref == NULL || !PyWeakref_CheckRef(ref) || PyWeakref_GetObject(ref) != group) {
        Py_DECREF(route);
        return call_fallback(self, args, nargsf, kwnames);
    }

    MARK(1);
    /* the input: one tensor (or a list of one) that needs no grad; bytes None (worked out
     * from dtype and shape at the site's S line), 0 for a method without one (barrier) */
    PyObject *nbytes = self->index >= 0 ? Py_None : g_zero;
    PyObject *dtype = Py_None, *shape = Py_None;
    Py_INCREF(dtype); Py_INCREF(shape);
    PyObject *value = NULL;
    if (self->index >= 0) {
        value = args[1 + self->index];
        PyObject *first = value;
        if (PyList_CheckExact(value) && PyList_GET_SIZE(value) == 1) first = PyList_GET_ITEM(value, 0);
        int is_tensor = Py_TYPE(first) == (PyTypeObject *)g_tensor_type ? 1 : PyObject_IsInstance(first, g_tensor_type);
        if (is_tensor <= 0) goto fallback_clean;
        PyObject *rg = PyObject_GetAttr(first, s_requires_grad);
        if (rg == NULL) goto error_clean;
        int grad = rg == Py_True;
        Py_DECREF(rg);
        if (grad) goto fallback_clean;
        Py_SETREF(dtype, PyObject_GetAttr(first, s_dtype));
        if (dtype == NULL) { dtype = Py_None; Py_INCREF(dtype); goto error_clean; }
        Py_SETREF(shape, PyObject_GetAttr(first, s_shape));
        if (shape == NULL) { shape = Py_None; Py_INCREF(shape); goto error_clean; }
    }

    MARK(2);
    /* peer or root, as a global rank */
    PyObject *where_rank = Py_None;
    Py_INCREF(where_rank);
    if (self->kind_peer) {
        if (nargs > 2 && PyLong_CheckExact(args[2])) Py_SETREF(where_rank, Py_NewRef(args[2]));
    } else if (self->kind != Py_None) {
        PyObject *rest = PyTuple_New(nargs - 1);
        if (rest == NULL) goto error_where;
        for (Py_ssize_t i = 1; i < nargs; i++) PyTuple_SET_ITEM(rest, i - 1, Py_NewRef(args[i]));
        PyObject *kw = PyDict_New();
        PyObject *call[3] = {rest, kw, self->kind};
        PyObject *w = kw ? PyObject_Vectorcall(g_where_int, call, 3, NULL) : NULL;
        Py_DECREF(rest);
        Py_XDECREF(kw);
        if (w == NULL) goto error_where;
        Py_SETREF(where_rank, w);
    }
    if (where_rank != Py_None) {
        PyObject *ranks = Py_XNewRef(SLOT(route, o_ranks));
        if (ranks == NULL) goto error_where;
        int overflow = 0;
        long w = PyLong_AsLongAndOverflow(where_rank, &overflow);   /* a huge int: no group rank, kept */
        if (w == -1 && PyErr_Occurred()) { Py_DECREF(ranks); goto error_where; }
        if (!overflow && PyList_Check(ranks) && w >= 0 && w < PyList_GET_SIZE(ranks))
            Py_SETREF(where_rank, Py_NewRef(PyList_GET_ITEM(ranks, w)));
        Py_DECREF(ranks);
    }
    PyObject *reduce = Py_None;
    Py_INCREF(reduce);
    if (self->reducing && nargs > 2) {
        /* _trace._reduce_op: the options' reduceOp (or a ReduceOp given directly), its .op */
        PyObject *red = args[2], *inner = NULL, *op = NULL;
        if (_PyObject_LookupAttr(red, s_reduce_op, &inner) < 0) goto error_reduce;
        if (inner != NULL) red = inner;
        if (_PyObject_LookupAttr(red, s_op, &op) < 0) { Py_XDECREF(inner); goto error_reduce; }
        if (op != NULL) red = op;
        if (Py_TYPE(red) == (PyTypeObject *)g_red_op_type) Py_SETREF(reduce, Py_NewRef(red));
        Py_XDECREF(op);
        Py_XDECREF(inner);
    }

    MARK(3);
    /* the op's name from its direct caller, and the call site's frame */
    _PyInterpreterFrame *caller = current_frame();
    PyObject *name = NULL, *code = NULL, *api = NULL;
    int lasti = 0;
    if (caller == NULL) goto fallback_names;
    {
        PyCodeObject *ccode = (PyCodeObject *)Py_NewRef(caller->f_code);
        name = Py_XNewRef(by_code(names_cache, g_names, g_op_name, (PyObject *)ccode));
        Py_DECREF(ccode);
        if (name == NULL) goto error_names;
    }
    if (where(caller, &code, &lasti, &api) < 0) goto error_names;

    MARK(4);
    /* numbers: the op's id, the group's count */
    PyObject *ident = PyIter_Next(g_ids);
    PyObject *count = ident ? SLOT(route, o_count) : NULL;
    PyObject *counter = (count && Py_TYPE(count) == t_count) ? SLOT(count, o_counter) : NULL;
    PyObject *seq = counter ? PyIter_Next(counter) : NULL;
    if (seq == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "the recorder's count is gone");
        Py_XDECREF(ident);
        goto error_names;
    }
    Py_XSETREF(SLOT(count, o_issued), Py_NewRef(seq));
    if (PyDict_Size(g_polled) > 0) {
        PyObject *r = PyObject_CallNoArgs(g_poll);
        if (r == NULL) goto error_numbers;
        Py_DECREF(r);
    }

    MARK(5);
    /* the site and the B line, before torch is called */
    long long generation = global_ll(s_sites_generation), site_ll;
    if (PyErr_Occurred()) goto error_numbers;
    if (self->c_route == route && self->c_code == code && self->c_lasti == lasti && self->c_dtype == dtype
            && self->c_name == name && self->c_api == api && self->c_reduce == reduce
            && self->c_generation == generation && same(where_rank, self->c_where) && same(shape, self->c_shape)) {
        site_ll = self->c_site;
        goto have_site;
    }
    PyObject *rid = Py_XNewRef(SLOT(route, o_rid));
    if (rid == NULL) goto error_numbers;
    PyObject *code_id = PyLong_FromVoidPtr(code);
    PyObject *lasti_obj = PyLong_FromLong(lasti);
    PyObject *key = (code_id && lasti_obj) ? PyTuple_Pack(10, rid, code_id, lasti_obj, shape, dtype, nbytes,
                                                          where_rank, name, api, reduce) : NULL;
    Py_DECREF(rid);
    Py_XDECREF(code_id);
    if (key == NULL) { Py_XDECREF(lasti_obj); goto error_numbers; }
    PyObject *site = PyDict_GetItemWithError(g_sites, key);
    Py_DECREF(key);
    if (site != NULL) {
        Py_INCREF(site);
    } else if (PyErr_Occurred()) {
        Py_DECREF(lasti_obj); goto error_numbers;
    } else {
        PyObject *call[10] = {route, dtype, shape, nbytes, where_rank, code, lasti_obj, name, api, reduce};
        site = PyObject_Vectorcall(g_site, call, 10, NULL);
        if (site == NULL) { Py_DECREF(lasti_obj); goto error_numbers; }
    }
    Py_DECREF(lasti_obj);
    site_ll = PyLong_AsLongLong(site);
    Py_DECREF(site);
    if (site_ll == -1 && PyErr_Occurred()) goto error_numbers;
    Py_XSETREF(self->c_route, Py_NewRef(route)); Py_XSETREF(self->c_code, Py_NewRef(code));
    Py_XSETREF(self->c_shape, Py_NewRef(shape)); Py_XSETREF(self->c_dtype, Py_NewRef(dtype));
    Py_XSETREF(self->c_where, Py_NewRef(where_rank)); Py_XSETREF(self->c_name, Py_NewRef(name));
    Py_XSETREF(self->c_api, Py_NewRef(api)); Py_XSETREF(self->c_reduce, Py_NewRef(reduce));
    self->c_lasti = lasti;
    self->c_site = site_ll;
    self->c_generation = generation;
have_site:;
    long long ident_ll = PyLong_AsLongLong(ident), seq_ll = PyLong_AsLongLong(seq);
    {
        char text[96], *p = text;
        *p++ = 'B'; *p++ = ' ';
        p = fmt_ll(p, ident_ll); *p++ = ' ';
        p = fmt_ll(p, site_ll); *p++ = ' ';
        p = fmt_ll(p, seq_ll); *p++ = ' ';
        p = fmt_ll(p, entered - global_ll(s_t0)); *p++ = '\n';
        if (PyErr_Occurred() || write_line(text, (int)(p - text)) < 0) goto error_numbers;
    }

    MARK(6);
    /* the op, below autograd */
    int excluded = is_excluded();
    if (excluded < 0) goto error_numbers;
    if (!excluded && set_excluded(1) < 0) goto error_numbers;
    MARK(7);
    PyObject *work = PyObject_Vectorcall(self->original, args, nargsf, kwnames);
    if (work == NULL) {
        PyObject *type, *val, *tb;
        PyErr_Fetch(&type, &val, &tb);
        PyErr_NormalizeException(&type, &val, &tb);
        if (tb != NULL) PyException_SetTraceback(val, tb);
        PyObject *call[4] = {ident, route, seq, val};
        PyObject *r = PyObject_Vectorcall(g_raised, call, 4, NULL);
        Py_XDECREF(r);
        PyErr_Clear();
        if (!excluded) { set_excluded(0); PyErr_Clear(); }
        PyErr_Restore(type, val, tb);
        goto error_numbers;
    }
    MARK(8);
    if (!excluded && set_excluded(0) < 0) { Py_DECREF(work); goto error_numbers; }
    MARK(9);

    if (!self->returns_work || work == Py_None) {
        if (write_end(ident_ll, now_ns()) < 0) { Py_DECREF(work); goto error_numbers; }
    } else {
        PyObject *wref = PyWeakref_NewRef(work, NULL);
        PyObject *entry = wref ? PyTuple_Pack(3, wref, ident, self->anysource ? route : Py_None) : NULL;
        PyObject *wid = entry ? PyLong_FromVoidPtr(work) : NULL;
        int bad = wid == NULL || PyDict_SetItem(g_waiting, wid, entry) < 0;
        Py_XDECREF(wref); Py_XDECREF(entry); Py_XDECREF(wid);
        if (bad) { Py_DECREF(work); goto error_numbers; }
        if (PyDict_Size(g_waiting) > global_ll(s_sweep_at)) {
            PyObject *r = PyObject_CallNoArgs(g_sweep);
            if (r == NULL) { Py_DECREF(work); goto error_numbers; }
            Py_DECREF(r);
        }
    }
    MARK(10);
    Py_DECREF(ident); Py_DECREF(seq);
    Py_DECREF(name); Py_DECREF(code); Py_DECREF(api);
    Py_DECREF(reduce); Py_DECREF(where_rank); Py_DECREF(dtype); Py_DECREF(shape); Py_DECREF(route);
    return work;

error_numbers:
    Py_DECREF(ident); Py_DECREF(seq);
error_names:
    Py_XDECREF(name); Py_XDECREF(code); Py_XDECREF(api);
error_reduce:
    Py_DECREF(reduce);
error_where:
    Py_DECREF(where_rank);
error_clean:
    Py_DECREF(dtype); Py_DECREF(shape); Py_DECREF(route);
    return NULL;
fallback_names:
    Py_DECREF(reduce); Py_DECREF(where_rank);
fallback_clean:
    Py_DECREF(dtype); Py_DECREF(shape); Py_DECREF(route);
    if (PyErr_Occurred()) return NULL;
    return call_fallback(self, args, nargsf, kwnames);
}

static PyObject *traced_new(PyTypeObject *type, PyObject *a, PyObject *kw) {
    PyObject *original, *fallback, *routes, *kind;
    Py_ssize_t index;
    int returns_work, anysource, reducing;
    if (!PyArg_ParseTuple(a, "OOOnOppp", &original, &fallback, &routes, &index, &kind, &returns_work,
                          &anysource, &reducing))
        return NULL;
    Traced *self = (Traced *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->vectorcall = (vectorcallfunc)traced_call;
    self->original = Py_NewRef(original);
    self->fallback = Py_NewRef(fallback);
    self->routes = Py_NewRef(routes);
    self->kind = Py_NewRef(kind);
    self->index = index;
    self->returns_work = returns_work;
    self->anysource = anysource;
    self->reducing = reducing;
    self->kind_peer = PyUnicode_Check(kind) && PyUnicode_CompareWithASCIIString(kind, "peer") == 0;
    return (PyObject *)self;
}

/* ------------------------------------------------------------------ Work.wait */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *dict;
    PyObject *original, *fallback;
} Wait;

static PyObject *wait_call(Wait *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1) return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
#ifdef LAB_PROF
    unsigned long long prof_last = __rdtsc(); prof_waits++;
#endif
    PyObject *result = PyObject_Vectorcall(self->original, args, nargsf, kwnames);
    MARK(11);
    if (result == NULL || PyDict_Size(g_waiting) == 0) return result;
    PyObject *work = args[0];
    PyObject *wid = PyLong_FromVoidPtr(work);
    if (wid == NULL) goto fail;
    PyObject *entry = PyDict_GetItemWithError(g_waiting, wid);
    if (entry == NULL) {
        Py_DECREF(wid);
        if (PyErr_Occurred()) goto fail;
        return result;
    }
    if (PyTuple_CheckExact(entry) && PyTuple_GET_SIZE(entry) == 3 && PyLong_CheckExact(PyTuple_GET_ITEM(entry, 1))
            && PyTuple_GET_ITEM(entry, 2) == Py_None && PyWeakref_CheckRef(PyTuple_GET_ITEM(entry, 0))
            && PyWeakref_GetObject(PyTuple_GET_ITEM(entry, 0)) == work) {
        long long ident = PyLong_AsLongLong(PyTuple_GET_ITEM(entry, 1));
        int bad = PyDict_DelItem(g_waiting, wid) < 0;
        Py_DECREF(wid);
        if (bad || write_end(ident, now_ns()) < 0) goto fail;
        MARK(12);
        return result;
    }
    Py_DECREF(wid);
    PyObject *r = PyObject_CallOneArg(g_ended, work);
    if (r == NULL) goto fail;
    Py_DECREF(r);
    return result;
fail:
    Py_DECREF(result);
    return NULL;
}

static PyObject *wait_new(PyTypeObject *type, PyObject *a, PyObject *kw) {
    PyObject *original, *fallback;
    if (!PyArg_ParseTuple(a, "OO", &original, &fallback)) return NULL;
    Wait *self = (Wait *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->vectorcall = (vectorcallfunc)wait_call;
    self->original = Py_NewRef(original);
    self->fallback = Py_NewRef(fallback);
    return (PyObject *)self;
}

/* Both are methods on a class: bound on attribute access, and called unbound with the
 * instance first by `obj.method(...)` (Py_TPFLAGS_METHOD_DESCRIPTOR: no bound method made). */
static PyObject *bind(PyObject *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None) return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyTypeObject TracedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "workloads._tracefast.Traced",
    .tp_basicsize = sizeof(Traced),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_vectorcall_offset = offsetof(Traced, vectorcall),
    .tp_dictoffset = offsetof(Traced, dict),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = bind,
    .tp_new = traced_new,
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_setattro = PyObject_GenericSetAttr,
};

static PyTypeObject WaitType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "workloads._tracefast.Wait",
    .tp_basicsize = sizeof(Wait),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_vectorcall_offset = offsetof(Wait, vectorcall),
    .tp_dictoffset = offsetof(Wait, dict),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = bind,
    .tp_new = wait_new,
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_setattro = PyObject_GenericSetAttr,
};

/* ------------------------------------------------------------------ configure */

static PyObject *take(PyObject *globals, const char *name) {
    PyObject *v = PyDict_GetItemString(globals, name);
    if (v == NULL) {
        PyErr_Format(PyExc_KeyError, "workloads._trace has no %s", name);
        return NULL;
    }
    return Py_NewRef(v);
}

static PyObject *configure(PyObject *module, PyObject *globals) {
    if (!PyDict_Check(globals)) {
        PyErr_SetString(PyExc_TypeError, "configure(globals of workloads._trace)");
        return NULL;
    }
    Py_XSETREF(g_globals, Py_NewRef(globals));
#define TAKE(var, name) do { PyObject *v_ = take(globals, name); if (v_ == NULL) return NULL; Py_XSETREF(var, v_); } while (0)
    TAKE(g_waiting, "_waiting"); TAKE(g_ids, "_ids"); TAKE(g_names, "_names"); TAKE(g_frames, "_frames");
    TAKE(g_sites, "_sites"); TAKE(g_polled, "_polled"); TAKE(g_op_name, "_op_name"); TAKE(g_classify, "_classify");
    TAKE(g_site, "_site"); TAKE(g_raised, "_raised"); TAKE(g_poll, "_poll"); TAKE(g_new_sink, "_new_sink");
    TAKE(g_sweep, "_sweep_waiting"); TAKE(g_ended, "_ended"); TAKE(g_where_int, "_where_int");
    TAKE(g_excluded, "_excluded"); TAKE(g_exclude, "_exclude");
    TAKE(g_autograd, "_AUTOGRAD"); TAKE(g_tensor_type, "_tensor_class"); TAKE(g_user, "_USER");
    TAKE(g_plain, "_PLAIN"); TAKE(g_gil_sink_type, "_GilFileSink");
    TAKE(g_red_op_type, "_red_op_type");
#undef TAKE
    PyObject *marker = PyDict_GetItemString(globals, "_MARKER");
    if (marker == NULL || !PyBytes_Check(marker) || PyBytes_GET_SIZE(marker) >= (Py_ssize_t)sizeof(g_marker)) {
        PyErr_SetString(PyExc_ValueError, "workloads._trace._MARKER: the records' prefix, bytes");
        return NULL;
    }
    PyObject *file_sink = PyDict_GetItemString(globals, "_FileSink");
    PyObject *route_cls = PyDict_GetItemString(globals, "_Route");
    PyObject *count_cls = PyDict_GetItemString(globals, "_Count");
    if (!file_sink || !route_cls || !count_cls || !PyType_Check(file_sink) || !PyType_Check(route_cls)
            || !PyType_Check(count_cls)) {
        PyErr_SetString(PyExc_KeyError, "workloads._trace: _FileSink, _Route, _Count");
        return NULL;
    }
    if ((o_pos = slot_offset(file_sink, "pos")) < 0 || (o_mm = slot_offset(file_sink, "mm")) < 0
            || (o_rid = slot_offset(route_cls, "rid")) < 0 || (o_group = slot_offset(route_cls, "group")) < 0
            || (o_count = slot_offset(route_cls, "count")) < 0 || (o_ranks = slot_offset(route_cls, "ranks")) < 0
            || (o_counter = slot_offset(count_cls, "counter")) < 0 || (o_issued = slot_offset(count_cls, "issued")) < 0)
        return NULL;
    t_route = (PyTypeObject *)route_cls;
    t_count = (PyTypeObject *)count_cls;
    g_marker_len = PyBytes_GET_SIZE(marker);
    memcpy(g_marker, PyBytes_AS_STRING(marker), g_marker_len);
    Py_RETURN_NONE;
}

#ifdef LAB_PROF
static PyObject *prof(PyObject *m, PyObject *unused) {
    /* (op calls, waits, cycles summed per step, TSC cycles per µs over 50 ms) */
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    unsigned long long t0 = __rdtsc(), t1;
    do { clock_gettime(CLOCK_MONOTONIC, &b); }
    while ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec) < 5e7);
    t1 = __rdtsc();
    double us = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e3;
    PyObject *sums = PyList_New(16);
    if (sums == NULL) return NULL;
    for (int i = 0; i < 16; i++) PyList_SET_ITEM(sums, i, PyLong_FromUnsignedLongLong(prof_sum[i]));
    return Py_BuildValue("(KKNd)", prof_calls, prof_waits, sums, (double)(t1 - t0) / us);
}
#endif

/* use_c10(path of libc10.so, the key's number): take c10's two functions from the
 * loaded library by their C++ names, and keep them only if they agree with torch's own
 * Python functions (_excluded/_exclude) in both directions. True when in use. */
static PyObject *use_c10(PyObject *m, PyObject *args) {
    const char *path;
    int key;
    if (!PyArg_ParseTuple(args, "si", &path, &key)) return NULL;
    c10_is_excluded = NULL;
    c10_set_excluded = NULL;
    void *lib = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
    if (lib == NULL) Py_RETURN_FALSE;
    void *is = dlsym(lib, "_ZN3c104impl28tls_is_dispatch_key_excludedENS_11DispatchKeyE");
    void *set = dlsym(lib, "_ZN3c104impl29tls_set_dispatch_key_excludedENS_11DispatchKeyEb");
    if (is == NULL || set == NULL) Py_RETURN_FALSE;
    int (*c_is)(uint16_t) = (int (*)(uint16_t))is;
    void (*c_set)(uint16_t, int) = (void (*)(uint16_t, int))set;
    uint16_t k = (uint16_t)key;
    int before = is_excluded();         /* torch's own (the C functions are not in use yet) */
    if (before < 0) return NULL;
    int agree = 1;
    for (int on = 0; on <= 1 && agree; on++) {
        c_set(k, on);
        int seen = is_excluded();
        if (seen < 0) { c_set(k, before); return NULL; }
        agree = seen == on && (c_is(k) ? 1 : 0) == on;
    }
    c_set(k, before);
    if (!agree || is_excluded() != before) Py_RETURN_FALSE;
    c10_is_excluded = c_is;
    c10_set_excluded = c_set;
    c10_autograd = k;
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"use_c10", use_c10, METH_VARARGS, "Call c10's dispatch-key exclusion directly (checked against torch's)."},
#ifdef LAB_PROF
    {"prof", prof, METH_NOARGS, "(op calls, waits, TSC cycles per step, cycles per µs)"},
#endif
    {"configure", configure, METH_O, "Bind the fast path to workloads._trace's tables (its globals)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_tracefast", NULL, -1, methods};

PyMODINIT_FUNC PyInit__tracefast(void) {
    if (PyType_Ready(&TracedType) < 0 || PyType_Ready(&WaitType) < 0) return NULL;
#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(s_sink, "_sink"); INTERN(s_segment, "SEGMENT"); INTERN(s_sites_generation, "_sites_generation");
    INTERN(s_t0, "_t0"); INTERN(s_coalescing, "_coalescing"); INTERN(s_sweep_at, "_sweep_at");
    INTERN(s_write, "write"); INTERN(s_reduce_op, "reduceOp"); INTERN(s_op, "op"); INTERN(s_dtype, "dtype"); INTERN(s_shape, "shape");
    INTERN(s_requires_grad, "requires_grad");
#undef INTERN
    if ((g_zero = PyLong_FromLong(0)) == NULL) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Traced", (PyObject *)&TracedType) < 0
            || PyModule_AddObjectRef(m, "Wait", (PyObject *)&WaitType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
