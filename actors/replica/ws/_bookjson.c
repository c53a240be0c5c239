/* raydex.actors.replica.ws._bookjson: the order_book channel's update message, rendered in C
 * (actors/replica/ws/fanout.py, book_update_json).
 *
 * book_update(market, offset, bids, asks, begin_nonce, nonce, engine_us, now_us, price_decimals,
 * size_decimals) -> bytes | None renders exactly the bytes msgspec encodes for fanout.py's
 * book_update_body (the Python reference it is tested against):
 *
 *   {"channel":"order_book:M","offset":O,"order_book":{"code":0,"asks":[L,...],"bids":[L,...],
 *    "offset":O,"nonce":N,"begin_nonce":B},"timestamp":T,"engine_ts_us":E,"replica_ts_us":R,
 *    "type":"update/order_book"}
 *
 * with each level L = {"price":"P","size":"S"}, P and S the decimal strings of views.decimal_str
 * (ticks / 10**decimals, exactly: "3327.46", "0.0050", "12"), T = R // 1000. ``bids``/``asks`` are
 * BookDelta's ((price, size), ...) tuples. It returns None for what it does not render (a value
 * that is not an int in 0..2**64-1, a level that is not a pair of them, decimals outside 0..30):
 * the caller then renders in Python.
 *
 * What it saves: per message the nested dicts and level dicts the body is built of, the
 * f-string/str of every int and decimal, and the encode.
 *
 * Optional (setup.py): without a C compiler fanout.py renders in Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_DECIMALS 30
#define MAX_DIGITS 20 /* of a uint64 */

/* v's digits at out (no terminator); returns their count. */
static int
u64_digits(uint64_t v, char *out)
{
    char tmp[MAX_DIGITS];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (int i = 0; i < n; i++) {
        out[i] = tmp[n - 1 - i];
    }
    return n;
}

/* A signed int as JSON writes it. */
static char *
put_i64(char *p, long long v)
{
    if (v < 0) {
        *p++ = '-';
        return p + u64_digits(0 - (uint64_t)v, p);
    }
    return p + u64_digits((uint64_t)v, p);
}

/* views.decimal_str(v, decimals) for v >= 0: the digits with the point put in, "0." and zeros
 * before a value under 1, no point for 0 decimals. */
static char *
put_decimal(char *p, uint64_t v, int decimals)
{
    char d[MAX_DIGITS];
    int n = u64_digits(v, d);
    if (decimals == 0) {
        memcpy(p, d, n);
        return p + n;
    }
    if (n > decimals) { /* v >= 10**decimals */
        memcpy(p, d, n - decimals);
        p += n - decimals;
        *p++ = '.';
        memcpy(p, d + n - decimals, decimals);
        return p + decimals;
    }
    *p++ = '0';
    *p++ = '.';
    memset(p, '0', decimals - n);
    p += decimals - n;
    memcpy(p, d, n);
    return p + n;
}

static char *
put(char *p, const char *text)
{
    size_t n = strlen(text);
    memcpy(p, text, n);
    return p + n;
}

/* An int in 0..2**64-1 into *out; 0 when o is not one (no error set). */
static int
as_u64(PyObject *o, uint64_t *out)
{
    if (!PyLong_Check(o)) {
        return 0;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear(); /* negative or too large: rendered in Python */
        return 0;
    }
    *out = v;
    return 1;
}

/* The levels of one side; NULL (no error set) when one is not a pair of such ints. */
static char *
put_levels(char *p, PyObject *levels, int pd, int sd)
{
    Py_ssize_t n = PyTuple_GET_SIZE(levels);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *lv = PyTuple_GET_ITEM(levels, i);
        uint64_t price, size;
        if (!PyTuple_Check(lv) || PyTuple_GET_SIZE(lv) != 2
            || !as_u64(PyTuple_GET_ITEM(lv, 0), &price)
            || !as_u64(PyTuple_GET_ITEM(lv, 1), &size)) {
            return NULL;
        }
        if (i) {
            *p++ = ',';
        }
        p = put(p, "{\"price\":\"");
        p = put_decimal(p, price, pd);
        p = put(p, "\",\"size\":\"");
        p = put_decimal(p, size, sd);
        p = put(p, "\"}");
    }
    return p;
}

static PyObject *
book_update(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError,
                        "book_update(market, offset, bids, asks, begin_nonce, nonce, engine_us, "
                        "now_us, price_decimals, size_decimals)");
        return NULL;
    }
    PyObject *bids = args[2], *asks = args[3];
    if (!PyTuple_Check(bids) || !PyTuple_Check(asks)) {
        Py_RETURN_NONE;
    }
    long long ints[6]; /* market, offset, begin_nonce, nonce, engine_us, now_us */
    const int at[6] = {0, 1, 4, 5, 6, 7};
    for (int i = 0; i < 6; i++) {
        int overflow = 0;
        ints[i] = PyLong_Check(args[at[i]]) ? PyLong_AsLongLongAndOverflow(args[at[i]], &overflow)
                                            : -1;
        if (!PyLong_Check(args[at[i]]) || overflow || (ints[i] == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
    }
    long pd = PyLong_Check(args[8]) ? PyLong_AsLong(args[8]) : -1;
    long sd = PyLong_Check(args[9]) ? PyLong_AsLong(args[9]) : -1;
    if (PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (pd < 0 || pd > MAX_DECIMALS || sd < 0 || sd > MAX_DECIMALS || ints[5] < 0) {
        Py_RETURN_NONE; /* now_us >= 0: the timestamp below is its floor division */
    }
    /* an upper bound: the fixed text and 6 ints, and per level its text and two decimals of at
     * most MAX_DIGITS + MAX_DECIMALS + 2 characters */
    Py_ssize_t levels = PyTuple_GET_SIZE(bids) + PyTuple_GET_SIZE(asks);
    Py_ssize_t cap = 512 + levels * (32 + 2 * (MAX_DIGITS + MAX_DECIMALS + 2));
    PyObject *out = PyBytes_FromStringAndSize(NULL, cap);
    if (out == NULL) {
        return NULL;
    }
    char *start = PyBytes_AS_STRING(out), *p = start;
    p = put(p, "{\"channel\":\"order_book:");
    p = put_i64(p, ints[0]);
    p = put(p, "\",\"offset\":");
    p = put_i64(p, ints[1]);
    p = put(p, ",\"order_book\":{\"code\":0,\"asks\":[");
    p = put_levels(p, asks, (int)pd, (int)sd);
    if (p != NULL) {
        p = put(p, "],\"bids\":[");
        p = put_levels(p, bids, (int)pd, (int)sd);
    }
    if (p == NULL) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    p = put(p, "],\"offset\":");
    p = put_i64(p, ints[1]);
    p = put(p, ",\"nonce\":");
    p = put_i64(p, ints[3]);
    p = put(p, ",\"begin_nonce\":");
    p = put_i64(p, ints[2]);
    p = put(p, "},\"timestamp\":");
    p = put_i64(p, ints[5] / 1000);
    p = put(p, ",\"engine_ts_us\":");
    p = put_i64(p, ints[4]);
    p = put(p, ",\"replica_ts_us\":");
    p = put_i64(p, ints[5]);
    p = put(p, ",\"type\":\"update/order_book\"}");
    if (_PyBytes_Resize(&out, p - start) < 0) {
        return NULL;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"book_update", (PyCFunction)(void (*)(void))book_update, METH_FASTCALL,
     "book_update(market, offset, bids, asks, begin_nonce, nonce, engine_us, now_us, "
     "price_decimals, size_decimals) -> bytes | None: see the module docstring."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "raydex.actors.replica.ws._bookjson", NULL, 0, methods,
};

PyMODINIT_FUNC
PyInit__bookjson(void)
{
    return PyModule_Create(&module);
}
