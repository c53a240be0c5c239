/* raydex.codecs._blockdec: a block's events decoded in one C loop (codecs/_block.py).
 *
 * configure(entries, header_size) sets the layout table once per process: ``entries`` is a
 * sequence of (tag, class, format, unpacker), ``format`` the event's struct format after its tag
 * byte (little-endian, without the "<": the letters B H I i Q q and "Ns" only), ``unpacker``
 * None, or for a layout with text fields the Python ``unpack(buf, off)`` the pure decoder uses
 * (its values are then built into ``class`` here). decode_events(buf, count) -> list | None walks
 * ``count`` tagged events after the header and returns them as NamedTuples: the same classes
 * and values as ``tuple.__new__(cls, values)`` (tp_alloc, as tuple.__new__ does for a
 * subclass). An event of a struct layout (ints and bytes only) of a class without instance
 * storage of its own (a NamedTuple) leaves here untracked by the cyclic GC, as
 * observability/_untrack.c would leave it after checking each field (the replica untracks every
 * event it keeps; here the layout already says each field is an atom, so no check is needed:
 * ~5% of the replica's apply_block instructions); the others are tracked as tuple.__new__
 * leaves them. It returns None, building nothing that outlives the call,
 * whenever the bytes are not a well-formed body (an unknown tag, an event past the end,
 * trailing bytes, a count the body cannot hold): the caller then runs the pure decoder, which
 * raises the CodecError that names the problem. What it saves over the pure loop: per event a
 * table lookup, an ``unpack_from`` call and its temporary tuple, and the ``tuple.__new__``
 * call; ints come from PyLong_From* (the small-int cache as struct uses it).
 *
 * Optional (setup.py): without a C compiler codecs/_block.py decodes in Python; tests check the
 * two agree on every registered event type and on malformed bodies.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_FIELDS 32

typedef struct {
    PyTypeObject *cls;     /* NULL: unknown tag */
    PyObject *unpack;      /* a Python unpacker for text layouts, else NULL */
    Py_ssize_t step;       /* tag byte + layout size */
    int nfields;
    int untrack;           /* built untracked: a struct layout of a NamedTuple-like class */
    char kind[MAX_FIELDS]; /* B H I i Q q s */
    uint16_t len[MAX_FIELDS]; /* byte width of each field */
} entry_t;

static entry_t table[256];
static Py_ssize_t header_size = -1;

static uint64_t
rd_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

static void
clear_table(void)
{
    for (int t = 0; t < 256; t++) {
        Py_CLEAR(table[t].cls);
        Py_CLEAR(table[t].unpack);
        table[t].nfields = 0;
        table[t].step = 0;
        table[t].untrack = 0;
    }
}

static int
parse_format(entry_t *e, const char *fmt)
{
    Py_ssize_t size = 0;
    int n = 0;
    const char *p = fmt;
    while (*p) {
        long count = 0;
        while (*p >= '0' && *p <= '9') {
            count = count * 10 + (*p - '0');
            if (count > 65535) {
                goto bad;
            }
            p++;
        }
        char k = *p++;
        int width;
        switch (k) {
        case 'B': width = 1; break;
        case 'H': width = 2; break;
        case 'I': case 'i': width = 4; break;
        case 'Q': case 'q': width = 8; break;
        case 's': width = (int)count; break;
        default: goto bad;
        }
        if (k != 's' && count != 0) {
            goto bad; /* repeat counts other than for 's' are not used by the layouts */
        }
        if (n == MAX_FIELDS) {
            goto bad;
        }
        e->kind[n] = k;
        e->len[n] = (uint16_t)width;
        n++;
        size += width;
    }
    e->nfields = n;
    e->step = size + 1;
    return 0;
bad:
    PyErr_Format(PyExc_ValueError, "unsupported event format %s", fmt);
    return -1;
}

static PyObject *
configure(PyObject *module, PyObject *args)
{
    PyObject *entries;
    Py_ssize_t hsize;
    if (!PyArg_ParseTuple(args, "On", &entries, &hsize)) {
        return NULL;
    }
    if (hsize < 0) {
        PyErr_SetString(PyExc_ValueError, "header_size must be >= 0");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(entries, "entries must be a sequence");
    if (seq == NULL) {
        return NULL;
    }
    clear_table();
    header_size = -1;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < m; i++) {
        int tag;
        PyObject *cls, *unpack;
        const char *fmt;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "iOsO", &tag, &cls, &fmt,
                              &unpack)) {
            goto fail;
        }
        if (tag < 0 || tag > 255 || !PyType_Check(cls) ||
            !PyType_FastSubclass((PyTypeObject *)cls, Py_TPFLAGS_TUPLE_SUBCLASS)) {
            PyErr_SetString(PyExc_ValueError, "entry: tag 0..255 and a tuple type");
            goto fail;
        }
        entry_t *e = &table[tag];
        if (parse_format(e, fmt) < 0) {
            goto fail;
        }
        Py_INCREF(cls);
        Py_XSETREF(e->cls, (PyTypeObject *)cls);
        if (unpack != Py_None) {
            Py_INCREF(unpack);
            Py_XSETREF(e->unpack, unpack);
        }
        /* no __dict__ and no __slots__ of its own: as immutable as a tuple (_untrack.c's rule) */
        PyTypeObject *tp = (PyTypeObject *)cls;
        e->untrack = unpack == Py_None && tp->tp_dictoffset == 0
                     && tp->tp_basicsize == PyTuple_Type.tp_basicsize;
    }
    Py_DECREF(seq);
    header_size = hsize;
    Py_RETURN_NONE;
fail:
    Py_DECREF(seq);
    clear_table();
    return NULL;
}

/* One event at p (its tag byte skipped) into a new instance of e->cls; NULL on error. */
static PyObject *
build(const entry_t *e, const unsigned char *p)
{
    PyTypeObject *tp = e->cls;
    PyObject *t = tp->tp_alloc(tp, e->nfields);
    if (t == NULL) {
        return NULL;
    }
    for (int i = 0; i < e->nfields; i++) {
        int w = e->len[i];
        PyObject *v;
        switch (e->kind[i]) {
        case 'B': case 'H': case 'I': case 'Q':
            v = PyLong_FromUnsignedLongLong(rd_le(p, w));
            break;
        case 'i':
            v = PyLong_FromLong((long)(int32_t)(uint32_t)rd_le(p, 4));
            break;
        case 'q':
            v = PyLong_FromLongLong((long long)(int64_t)rd_le(p, 8));
            break;
        default: /* 's' */
            v = PyBytes_FromStringAndSize((const char *)p, w);
            break;
        }
        if (v == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
        p += w;
    }
    if (e->untrack) {
        PyObject_GC_UnTrack(t); /* every field an int or bytes: never part of a cycle */
    }
    return t;
}

/* An event of a text layout: the Python unpacker's values built into e->cls. */
static PyObject *
build_py(const entry_t *e, PyObject *buf, Py_ssize_t off)
{
    PyObject *vals = PyObject_CallFunction(e->unpack, "On", buf, off);
    if (vals == NULL) {
        return NULL;
    }
    PyObject *fast = PySequence_Fast(vals, "unpacker must return a sequence");
    Py_DECREF(vals);
    if (fast == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyTypeObject *tp = e->cls;
    PyObject *t = tp->tp_alloc(tp, n);
    if (t != NULL) {
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *x = PySequence_Fast_GET_ITEM(fast, i);
            Py_INCREF(x);
            PyTuple_SET_ITEM(t, i, x);
        }
    }
    Py_DECREF(fast);
    return t;
}

static PyObject *
decode_events(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "decode_events(buf, count)");
        return NULL;
    }
    if (header_size < 0) {
        PyErr_SetString(PyExc_RuntimeError, "decode_events before configure");
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    if (count == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *base = (const unsigned char *)view.buf;
    Py_ssize_t end = view.len, off = header_size;
    PyObject *out = NULL;
    /* every event is at least 2 bytes (tag + a field): a count the body cannot hold is refused
     * before the list is sized by it */
    if (count < 0 || off > end || count > (end - off) / 2) {
        goto malformed;
    }
    out = PyList_New(count);
    if (out == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (off >= end) {
            goto malformed;
        }
        const entry_t *e = &table[base[off]];
        if (e->cls == NULL || e->step > end - off) {
            goto malformed;
        }
        PyObject *ev = e->unpack == NULL ? build(e, base + off + 1) : build_py(e, args[0], off);
        if (ev == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, ev);
        off += e->step;
    }
    if (off != end) {
        goto malformed;
    }
    goto done;
malformed:
    Py_XDECREF(out);
    out = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)configure, METH_VARARGS,
     "configure(entries, header_size): the layout table, (tag, class, format, unpacker) each."},
    {"decode_events", (PyCFunction)(void (*)(void))decode_events, METH_FASTCALL,
     "decode_events(buf, count) -> list of events, or None if the body is malformed."},
    {NULL, NULL, 0, NULL},
};

static void
module_free(void *m)
{
    clear_table();
}

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "raydex.codecs._blockdec", NULL, 0, methods,
    NULL, NULL, NULL, module_free,
};

PyMODINIT_FUNC
PyInit__blockdec(void)
{
    return PyModule_Create(&module);
}
