/* raydex.observability._untrack: take immutable records out of the cyclic GC's lists.
 *
 * CPython untracks an *exact* tuple whose items cannot be in a cycle (ints, bytes, str, None,
 * untracked tuples) the first time a collection sees it, so such tuples cost a collection
 * nothing after that. A NamedTuple is a tuple subclass and is never untracked: every record a
 * replica keeps (tx results, trades, done orders, positions, the decoded block events it stores)
 * stays on the collector's lists, and each collection walks all of them, every field, while
 * none can ever be cyclic garbage. Measured on the replica's apply path (`raydex bench apply`
 * stream): ~80% of the objects a generation-0 collection walked were such records, and every
 * pause (12 ms per 50,000-object collection offline, 37 ms under load, 120 ms for the scheduled
 * full collections) was spent on them.
 *
 * untrack(obj) -> bool applies CPython's own rule (Objects/tupleobject.c,
 * _PyTuple_MaybeUntrack) to tuple subclasses too, with one more condition that keeps it sound:
 * the subclass adds no per-instance storage (no __dict__, no __slots__: a NamedTuple), so the
 * object is as immutable as a tuple. Items that are tuples (of any such type) are untracked
 * first, depth first; if any item is another container (a list, a dict, an object, even one
 * CPython untracked for now), the tuple stays tracked and False is returned. An untracked object is still reference-counted and freed
 * as usual; it only cannot be collected as part of a cycle, which an immutable tuple of atoms
 * cannot be.
 *
 * untrack_all(iterable) -> int applies it to each item (tuples only; others are skipped) and
 * returns how many are untracked afterwards.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* A tuple, or a tuple subclass without instance storage of its own. */
static int
immutable_tuple(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    if (tp == &PyTuple_Type) {
        return 1;
    }
    return PyTuple_Check(op) && tp->tp_dictoffset == 0 &&
           tp->tp_basicsize == PyTuple_Type.tp_basicsize;
}

static int
untrack_tuple(PyObject *op, int depth)
{
    if (!PyObject_GC_IsTracked(op)) {
        return 1;
    }
    if (depth > 32 || !immutable_tuple(op)) {
        return 0;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(op);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(op, i);
        if (item == NULL) {
            return 0; /* still being filled */
        }
        if (!PyObject_IS_GC(item)) {
            continue; /* an atom: int, bytes, str, float, None */
        }
        /* as CPython's rule: any other container blocks, tracked or not (an untracked dict
         * is tracked again when a container is put in it) */
        if (!immutable_tuple(item) || !untrack_tuple(item, depth + 1)) {
            return 0;
        }
    }
    PyObject_GC_UnTrack(op);
    return 1;
}

static PyObject *
untrack(PyObject *module, PyObject *obj)
{
    if (PyTuple_Check(obj) && untrack_tuple(obj, 0)) {
        Py_RETURN_TRUE;
    }
    Py_RETURN_FALSE;
}

static PyObject *
untrack_all(PyObject *module, PyObject *items)
{
    PyObject *seq = PySequence_Fast(items, "untrack_all() takes an iterable");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), done = 0;
    PyObject **objs = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyTuple_Check(objs[i]) && untrack_tuple(objs[i], 0)) {
            done++;
        }
    }
    Py_DECREF(seq);
    return PyLong_FromSsize_t(done);
}

static PyMethodDef methods[] = {
    {"untrack", untrack, METH_O,
     "untrack(obj) -> bool: take an immutable tuple (or NamedTuple) of atoms out of the "
     "cyclic GC's lists; False (and nothing changed) if it holds a tracked container."},
    {"untrack_all", untrack_all, METH_O,
     "untrack_all(iterable) -> int: untrack() each item; how many are untracked after."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "raydex.observability._untrack",
    "Immutable records out of the cyclic GC's lists (see observability/_untrack.c).", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__untrack(void)
{
    return PyModule_Create(&module);
}
