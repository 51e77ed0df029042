/* aclprof.request's hot path (issue 25): the request object's construction, enter and exit,
 * and the bounded ring of window events the agent drains, in C.
 *
 *   RequestCore(id, traceparent=None, **attrs)   the base of aclprof.api.requests.Request
 *   configure(validate, current, on_first_mark, markers, tx_range)
 *   take(limit) -> [(kind, key, tid, t_ns, request or None), ...]   oldest first
 *   stats() -> (started, ended, dropped, queued, capacity)
 *   set_capacity(events)
 *
 * Why C: in Python a `with aclprof.request("id"):` pair cost ~1.5-3.5 us (an object, two
 * Python frames, a tuple per event, a ContextVar set/reset, a gettid cache in a
 * threading.local), against a budget of 1 us (annotate's ~0.2 us is the model). Here it is
 * three C calls. Why a plain CPython extension and not the cffi helper: a cffi call alone
 * costs ~0.15-0.25 us and releases the GIL around the call; this module never releases the
 * GIL, which also serialises every ring access (the counters need no atomics: the GIL is the
 * lock; the extension is not built for free-threaded Python).
 *
 * The ring holds fixed-size entries: kind, the request's key, the kernel tid (cached per
 * thread; a forked child's threads get theirs afresh), CLOCK_MONOTONIC ns, and on a request's
 * first START a strong reference to the request (its id, attributes and traceparent stay
 * Python-side, once per request). A full ring drops the newest event and counts it. No table
 * of open requests exists: an open request is only the caller's object. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifdef Py_GIL_DISABLED
#error "aclprof.api._reqring relies on the GIL to serialise its ring"
#endif

#define START 0
#define END 1
#define DEFAULT_CAPACITY (1u << 16)
#define MAX_CAPACITY (1u << 24)
#define FAST_ID_CHARS 64 /* an id this short is <= 256 bytes in UTF-8: no encode needed */
#define MAX_ATTRS 16     /* requests._MAX_ATTRS */

typedef struct {
    uint64_t key;
    int64_t t;
    PyObject *req; /* strong, on the request's first START; else NULL */
    uint32_t tid;
    uint32_t kind;
} entry;

static entry *ring;
static uint32_t cap = DEFAULT_CAPACITY, head, held; /* events at ring[(head + i) % cap] */
static uint64_t started, ended, dropped, next_key;
static int marked;
static PyObject *validate_fn, *current_var, *on_first_mark, *markers_mod, *tx_range;
static PyObject *s_active, *s_start, *s_end, *s_traceparent, *empty_attrs;

static unsigned fork_gen = 1;
static _Thread_local unsigned t_gen;
static _Thread_local uint32_t t_tid;

static void after_fork_child(void) { fork_gen++; }

static inline uint32_t this_tid(void)
{
    if (t_gen != fork_gen) { /* first use on this thread, or a forked child: gettid once */
        t_tid = (uint32_t)syscall(SYS_gettid);
        t_gen = fork_gen;
    }
    return t_tid;
}

static inline int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* 1 if the event went in; 0 if the ring was full (counted). req: borrowed, taken if kept. */
static int push(uint32_t kind, uint64_t key, uint32_t tid, PyObject *req)
{
    if (held >= cap || !ring) {
        dropped++;
        return 0;
    }
    entry *e = &ring[(head + held) % cap];
    e->kind = kind;
    e->key = key;
    e->tid = tid;
    e->t = now_ns();
    e->req = req;
    Py_XINCREF(req);
    held++;
    return 1;
}

typedef struct {
    PyObject_HEAD
    PyObject *id;
    PyObject *traceparent;
    PyObject *attrs;
    PyObject *token; /* the ContextVar token while entered */
    PyObject *range; /* the msproftx range handle while entered in a session */
    uint64_t key;
    uint32_t tid;
    int announced;
} RequestCore;

static int core_traverse(RequestCore *self, visitproc visit, void *arg)
{
    Py_VISIT(self->id);
    Py_VISIT(self->traceparent);
    Py_VISIT(self->attrs);
    Py_VISIT(self->token);
    Py_VISIT(self->range);
    return 0;
}

static int core_clear(RequestCore *self)
{
    Py_CLEAR(self->id);
    Py_CLEAR(self->traceparent);
    Py_CLEAR(self->attrs);
    Py_CLEAR(self->token);
    Py_CLEAR(self->range);
    return 0;
}

static void core_dealloc(RequestCore *self)
{
    PyObject_GC_UnTrack(self);
    core_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* No traceparent, at most MAX_ATTRS attributes, each a str of at most FAST_ID_CHARS
 * characters (<= 256 bytes): nothing for Python's checks to say. */
static int simple_attrs(PyObject *kwds)
{
    if (!kwds)
        return 1;
    if (PyDict_GET_SIZE(kwds) > MAX_ATTRS || PyDict_GetItemWithError(kwds, s_traceparent))
        return 0;
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(kwds, &pos, &k, &v))
        if (!PyUnicode_CheckExact(v) || PyUnicode_GET_LENGTH(v) > FAST_ID_CHARS)
            return 0;
    return 1;
}

static int core_init(RequestCore *self, PyObject *args, PyObject *kwds)
{
    PyObject *id, *tp = Py_None, *attrs = empty_attrs;
    if (!validate_fn) {
        PyErr_SetString(PyExc_RuntimeError, "aclprof.api._reqring: configure() was not called");
        return -1;
    }
    if (PyTuple_GET_SIZE(args) == 1 && PyUnicode_CheckExact(id = PyTuple_GET_ITEM(args, 0))
        && PyUnicode_GET_LENGTH(id) <= FAST_ID_CHARS && simple_attrs(kwds)) {
        Py_INCREF(id);
        Py_INCREF(tp);
        if (kwds && PyDict_GET_SIZE(kwds)) {
            attrs = PyDict_Copy(kwds); /* the caller's **dict may be passed through as is */
            if (!attrs) {
                Py_DECREF(id);
                Py_DECREF(tp);
                return -1;
            }
        } else {
            Py_INCREF(attrs);
        }
    } else { /* the checks and their messages live in Python (requests._validate) */
        PyObject *r = PyObject_Call(validate_fn, args, kwds);
        if (!r)
            return -1;
        if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 3) {
            Py_DECREF(r);
            PyErr_SetString(PyExc_SystemError, "aclprof.api._reqring: validate() must return (id, traceparent, attrs)");
            return -1;
        }
        id = PyTuple_GET_ITEM(r, 0);
        tp = PyTuple_GET_ITEM(r, 1);
        attrs = PyTuple_GET_ITEM(r, 2);
        Py_INCREF(id);
        Py_INCREF(tp);
        Py_INCREF(attrs);
        Py_DECREF(r);
    }
    Py_XSETREF(self->id, id);
    Py_XSETREF(self->traceparent, tp);
    Py_XSETREF(self->attrs, attrs);
    return 0;
}

/* The first window of the process: the agent's C tap starts keeping op columns. */
static int note_marked(void)
{
    marked = 1;
    if (on_first_mark) {
        PyObject *r = PyObject_CallNoArgs(on_first_mark);
        if (!r)
            return -1;
        Py_DECREF(r);
    }
    return 0;
}

/* Start a window of this request on the calling thread; returns the tid, 0 on error. */
static uint32_t start_window(RequestCore *self)
{
    if (!marked && note_marked() < 0)
        return 0;
    if (!self->key)
        self->key = ++next_key;
    uint32_t tid = this_tid();
    started++;
    if (push(START, self->key, tid, self->announced ? NULL : (PyObject *)self))
        self->announced = 1;
    return tid;
}

static PyObject *core_enter(RequestCore *self, PyObject *Py_UNUSED(ignored))
{
    if (self->token) {
        PyErr_Format(PyExc_RuntimeError,
                     "aclprof.request(%R) is already entered; use on_this_thread() for another thread's window",
                     self->id);
        return NULL;
    }
    /* msproftx first: if its range cannot start, nothing was recorded yet */
    PyObject *active = PyObject_GetAttr(markers_mod, s_active);
    if (!active)
        return NULL;
    int on = PyObject_IsTrue(active);
    Py_DECREF(active);
    if (on < 0)
        return NULL;
    PyObject *range = NULL;
    if (on && !(range = PyObject_CallMethodNoArgs(tx_range, s_start)))
        return NULL;
    PyObject *token = PyContextVar_Set(current_var, (PyObject *)self);
    if (!token) {
        Py_XDECREF(range);
        return NULL;
    }
    uint32_t tid = start_window(self);
    if (!tid) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (PyContextVar_Reset(current_var, token) < 0)
            PyErr_Clear();
        Py_DECREF(token);
        Py_XDECREF(range);
        PyErr_Restore(et, ev, tb);
        return NULL;
    }
    self->tid = tid;
    self->token = token;
    self->range = range;
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *core_exit(RequestCore *self, PyObject *const *Py_UNUSED(args), Py_ssize_t Py_UNUSED(n))
{
    PyObject *token = self->token;
    if (!token)
        Py_RETURN_NONE;
    ended++;
    push(END, self->key, self->tid, NULL);
    self->token = NULL;
    if (PyContextVar_Reset(current_var, token) < 0) {
        /* exited in another context (a generator moved across tasks): nothing to restore */
        PyErr_Clear();
        PyObject *t = PyContextVar_Set(current_var, Py_None);
        if (!t) {
            Py_DECREF(token);
            return NULL;
        }
        Py_DECREF(t);
    }
    Py_DECREF(token);
    PyObject *range = self->range;
    if (range) {
        self->range = NULL;
        PyObject *r = PyObject_CallMethodNoArgs(range, s_end);
        Py_DECREF(range);
        if (!r)
            return NULL;
        Py_DECREF(r);
    }
    Py_RETURN_NONE;
}

static PyObject *core_start_window(RequestCore *self, PyObject *Py_UNUSED(ignored))
{
    uint32_t tid = start_window(self);
    return tid ? PyLong_FromUnsignedLong(tid) : NULL;
}

static PyObject *core_end_window(RequestCore *self, PyObject *arg)
{
    unsigned long tid = PyLong_AsUnsignedLong(arg);
    if (tid == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    ended++;
    push(END, self->key, (uint32_t)tid, NULL);
    Py_RETURN_NONE;
}

static PyObject *core_get_key(RequestCore *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(self->key);
}

static PyObject *core_get(RequestCore *self, void *closure)
{
    PyObject *v = *(PyObject **)((char *)self + (size_t)closure);
    if (!v)
        v = Py_None;
    Py_INCREF(v);
    return v;
}

static PyGetSetDef core_getset[] = {
    {"key", (getter)core_get_key, NULL, "The process-unique key of this request (0 before it first starts).", NULL},
    {"id", (getter)core_get, NULL, "The request's id.", (void *)offsetof(RequestCore, id)},
    {"traceparent", (getter)core_get, NULL, "The W3C trace context given, or None.",
     (void *)offsetof(RequestCore, traceparent)},
    {"attrs", (getter)core_get, NULL, "The attributes given (a read-only mapping when none).",
     (void *)offsetof(RequestCore, attrs)},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef core_methods[] = {
    {"__enter__", (PyCFunction)core_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))core_exit, METH_FASTCALL, NULL},
    {"_start_window", (PyCFunction)core_start_window, METH_NOARGS,
     "Start a window of this request on the calling thread; returns the thread's tid."},
    {"_end_window", (PyCFunction)core_end_window, METH_O, "End the window started on thread `tid`."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RequestCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aclprof.api._reqring.RequestCore",
    .tp_basicsize = sizeof(RequestCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The C half of aclprof.api.requests.Request.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)core_init,
    .tp_dealloc = (destructor)core_dealloc,
    .tp_traverse = (traverseproc)core_traverse,
    .tp_clear = (inquiry)core_clear,
    .tp_methods = core_methods,
    .tp_getset = core_getset,
};

static PyObject *mod_configure(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *v, *c, *f, *mk, *tx;
    if (!PyArg_ParseTuple(args, "OOOOO:configure", &v, &c, &f, &mk, &tx))
        return NULL;
    if (!PyContextVar_CheckExact(c)) {
        PyErr_SetString(PyExc_TypeError, "configure: current must be a contextvars.ContextVar");
        return NULL;
    }
    Py_INCREF(v);
    Py_XSETREF(validate_fn, v);
    Py_INCREF(c);
    Py_XSETREF(current_var, c);
    Py_INCREF(f);
    Py_XSETREF(on_first_mark, f);
    Py_INCREF(mk);
    Py_XSETREF(markers_mod, mk);
    Py_INCREF(tx);
    Py_XSETREF(tx_range, tx);
    Py_RETURN_NONE;
}

static PyObject *mod_take(PyObject *Py_UNUSED(m), PyObject *arg)
{
    Py_ssize_t limit = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
    if (limit == -1 && PyErr_Occurred())
        return NULL;
    uint32_t n = limit < 0 || (uint64_t)limit > held ? held : (uint32_t)limit;
    PyObject *out = PyList_New(n);
    if (!out)
        return NULL;
    for (uint32_t i = 0; i < n; i++) {
        const entry *e = &ring[(head + i) % cap];
        PyObject *t = Py_BuildValue("(IKILO)", e->kind, (unsigned long long)e->key, e->tid, (long long)e->t,
                                    e->req ? e->req : Py_None);
        if (!t) {
            Py_DECREF(out);
            return NULL; /* nothing taken: the ring is unchanged */
        }
        PyList_SET_ITEM(out, i, t);
    }
    for (uint32_t i = 0; i < n; i++) {
        entry *e = &ring[(head + i) % cap];
        Py_CLEAR(e->req);
    }
    head = (head + n) % cap;
    held -= n;
    return out;
}

static PyObject *mod_stats(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored))
{
    return Py_BuildValue("(KKKII)", (unsigned long long)started, (unsigned long long)ended,
                         (unsigned long long)dropped, held, cap);
}

static PyObject *mod_set_capacity(PyObject *Py_UNUSED(m), PyObject *arg)
{
    unsigned long want = PyLong_AsUnsignedLong(arg);
    if (want == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    if (want < 2 || want > MAX_CAPACITY) {
        PyErr_Format(PyExc_ValueError, "set_ring_capacity: events must be an int in [2, %u], got %lu",
                     MAX_CAPACITY, want);
        return NULL;
    }
    entry *fresh = calloc(want, sizeof *fresh);
    if (!fresh)
        return PyErr_NoMemory();
    /* keep the oldest that fit (the newest beyond are dropped, counted, as a full ring does) */
    uint32_t keep = held < want ? held : (uint32_t)want;
    for (uint32_t i = 0; i < held; i++) {
        entry *e = &ring[(head + i) % cap];
        if (i < keep) {
            fresh[i] = *e;
        } else {
            Py_CLEAR(e->req);
            dropped++;
        }
    }
    free(ring);
    ring = fresh;
    cap = (uint32_t)want;
    head = 0;
    held = keep;
    Py_RETURN_NONE;
}

static PyMethodDef mod_methods[] = {
    {"configure", mod_configure, METH_VARARGS,
     "configure(validate, current, on_first_mark, markers, tx_range): the Python halves."},
    {"take", mod_take, METH_O, "take(limit) -> the oldest `limit` events (all for a negative limit)."},
    {"stats", mod_stats, METH_NOARGS, "stats() -> (started, ended, dropped, queued, capacity)."},
    {"set_capacity", mod_set_capacity, METH_O, "set_capacity(events): bound the ring."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "aclprof.api._reqring",
    "aclprof.request's enter/exit and its event ring in C (issue 25).", -1, mod_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__reqring(void)
{
    if (PyType_Ready(&RequestCoreType) < 0)
        return NULL;
    ring = calloc(cap, sizeof *ring);
    if (!ring)
        return PyErr_NoMemory();
    s_active = PyUnicode_InternFromString("_active");
    s_start = PyUnicode_InternFromString("start");
    s_end = PyUnicode_InternFromString("end");
    s_traceparent = PyUnicode_InternFromString("traceparent");
    PyObject *d = PyDict_New();
    empty_attrs = d ? PyDictProxy_New(d) : NULL;
    Py_XDECREF(d);
    if (!s_active || !s_start || !s_end || !s_traceparent || !empty_attrs)
        return NULL;
    if (pthread_atfork(NULL, NULL, after_fork_child) != 0) {
        PyErr_SetString(PyExc_OSError, "aclprof.api._reqring: pthread_atfork failed");
        return NULL;
    }
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    Py_INCREF(&RequestCoreType);
    if (PyModule_AddObject(m, "RequestCore", (PyObject *)&RequestCoreType) < 0
        || PyModule_AddIntConstant(m, "START", START) < 0 || PyModule_AddIntConstant(m, "END", END) < 0
        || PyModule_AddIntConstant(m, "DEFAULT_CAPACITY", DEFAULT_CAPACITY) < 0) {
        Py_DECREF(&RequestCoreType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
