/* raydex.actors.replica.cache._cacheloop: a block's per-tx events into the replica's caches in
 * one C loop (actors/replica/cache/state.py, ReplicaState.apply_block).
 *
 * configure(classes, active, untrack, account_class) sets, once per process, the fifteen
 * NamedTuple classes (OrderUpdated, LevelChanged, TxExecuted, NonceUpdated, BalanceChanged,
 * PositionChanged, TradeExecuted, MarketStatsChanged, OrderRecord, TxRecord, ApiKeyRecord,
 * PositionRecord, TradeRow, MarketRecord, BookDelta), the ACTIVE_LIMIT order status, the
 * ``untrack`` function the records go through (observability/gcstats.py) and AccountCache (its
 * slots are read at their offsets).
 *
 * apply_events(state, events, seq, ts_ms, changed, trades, touched, txs, rare, nonces) does
 * exactly what ReplicaState._apply_events does, the Python loop this is tested against
 * (``changed`` ends as market -> BookDelta, ``nonces``, the books' nonces, at seq for each
 * market in it; the records it keeps, the events and the tx results untracked by the GC as the
 * Python loop and its caller leave them): the eight kinds of event a block is made of
 * (OrderUpdated with _put_order / _drop_order / AccountCache.index, LevelChanged, TxExecuted
 * with _clear_pending, NonceUpdated, BalanceChanged, PositionChanged, and per fill
 * TradeExecuted and MarketStatsChanged as _apply_rare applies them) are applied here, any other
 * event is handed to ``rare(ev, tx_hash, seq, ts_ms, trades, touched)`` in block order. It reads the caches from ``state``'s attributes on every call (a resync swaps them).
 * Records are built with tp_alloc as tuple.__new__ builds them for a subclass. On an error (a
 * missing market or order a block refers to: KeyError, as the Python loop raises) it returns
 * NULL with the caches changed half-way, as the Python loop leaves them; the replica resyncs.
 *
 * What it saves over the Python loop, per event: the bytecode dispatch of the type tests and
 * branches, the unpacking into locals, the bound-method calls of _put_order / AccountCache.index
 * / _apply_rare, and the temporary tuples of the record constructors.
 *
 * Optional (setup.py): without a C compiler state.py runs the Python loop.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h> /* T_OBJECT_EX: AccountCache's slots */

enum {
    C_ORDER_UPDATED,
    C_LEVEL_CHANGED,
    C_TX_EXECUTED,
    C_NONCE_UPDATED,
    C_BALANCE_CHANGED,
    C_POSITION_CHANGED,
    C_TRADE_EXECUTED,
    C_MARKET_STATS_CHANGED,
    C_ORDER_RECORD,
    C_TX_RECORD,
    C_API_KEY_RECORD,
    C_POSITION_RECORD,
    C_TRADE_ROW,
    C_MARKET_RECORD,
    C_BOOK_DELTA,
    N_CLASSES
};
#define N_EVENTS (C_MARKET_STATS_CHANGED + 1) /* the event kinds handled here */
#define MARKET_FIELDS 18                      /* MarketRecord's */

static PyTypeObject *cls[N_CLASSES];
static PyObject *active;     /* OrderStatus.ACTIVE_LIMIT as an int */
static PyObject *untrack_fn;
/* untrack_fn's C function when it is a builtin taking one argument (observability/_untrack.c):
 * called directly, without the vectorcall (~6% of the loop's instructions when called). */
static PyCFunction untrack_c;
static PyObject *untrack_self;

/* AccountCache's attributes the loop reads and writes, by name; read and written at their slot
 * offsets when the object is exactly AccountCache (a slots dataclass: member descriptors of
 * type T_OBJECT_EX), else through getattr/setattr. Saves the type lookup and descriptor call of
 * ~6 attribute reads per order update (~7% of the loop's instructions). */
enum { A_COLLATERAL, A_POSITIONS, A_ORDERS, A_OPEN_LOTS, A_COIS, A_ORDER_COUNTS, N_ACCT };
static const char *acct_names[N_ACCT] = {
    "collateral", "positions", "orders", "open_lots", "cois", "order_counts",
};
static PyObject *acct_name[N_ACCT];  /* interned */
static PyTypeObject *acct_cls;
static Py_ssize_t acct_off[N_ACCT]; /* -1: through getattr */

/* acct.<field>: a new reference. */
static PyObject *
acct_get(PyObject *acct, int field)
{
    if (Py_TYPE(acct) == acct_cls && acct_off[field] >= 0) {
        PyObject *v = *(PyObject **)((char *)acct + acct_off[field]);
        if (v != NULL) {
            return Py_NewRef(v);
        }
    }
    return PyObject_GetAttr(acct, acct_name[field]); /* also raises for an unset slot */
}

/* acct.<field> = v. */
static int
acct_set(PyObject *acct, int field, PyObject *v)
{
    if (Py_TYPE(acct) == acct_cls && acct_off[field] >= 0) {
        PyObject **slot = (PyObject **)((char *)acct + acct_off[field]);
        Py_XSETREF(*slot, Py_NewRef(v));
        return 0;
    }
    return PyObject_SetAttr(acct, acct_name[field], v);
}

/* interned attribute names */
static PyObject *s_bids, *s_asks, *s_prices, *s_accounts, *s_api_keys, *s_pending, *s_txs,
    *s_orders, *s_level_orders, *s_account, *s_tx_results, *s_trades, *s_markets, *s_append,
    *s_tx_order, *s_popleft;

#define LV_MARKETS 64
typedef struct {
    PyObject *book[2], *prices[2], *changed; /* strong references; changed NULL: not looked up */
} lv_t;

typedef struct {
    PyObject *state;
    PyObject *bids, *asks, *bid_prices, *ask_prices, *accounts, *api_keys, *pending, *remember,
        *tx_order, /* state._tx_order: remember's keys, oldest first */
        *orders, *level_orders, *tape, *markets; /* tape: state.trades, market -> recent rows */
    Py_ssize_t tx_results; /* state.tx_results: the tx results ``remember`` keeps */
    PyObject *order_append, *order_popleft; /* tx_order's bound methods (popleft once needed) */
    /* level_changed's markets, by index (below LV_MARKETS): each side's book and sorted prices
     * (0 bids, 1 asks) and the market's entry in ``changed``, looked up once per block */
    lv_t lv[LV_MARKETS];
    int lv_set[LV_MARKETS], lv_n; /* the lv entries set */
    int ints; /* the block's seq and ts_ms are exact ints */
} caches_t;

static void
level_forget(caches_t *c)
{
    for (int i = 0; i < c->lv_n; i++) {
        lv_t *e = &c->lv[c->lv_set[i]];
        Py_CLEAR(e->book[0]);
        Py_CLEAR(e->book[1]);
        Py_CLEAR(e->prices[0]);
        Py_CLEAR(e->prices[1]);
        Py_CLEAR(e->changed);
    }
    c->lv_n = 0;
}

static void
caches_clear(caches_t *c)
{
    Py_CLEAR(c->bids);
    Py_CLEAR(c->asks);
    Py_CLEAR(c->bid_prices);
    Py_CLEAR(c->ask_prices);
    Py_CLEAR(c->accounts);
    Py_CLEAR(c->api_keys);
    Py_CLEAR(c->pending);
    Py_CLEAR(c->remember);
    Py_CLEAR(c->tx_order);
    Py_CLEAR(c->orders);
    Py_CLEAR(c->level_orders);
    Py_CLEAR(c->tape);
    Py_CLEAR(c->markets);
    Py_CLEAR(c->order_append);
    Py_CLEAR(c->order_popleft);
    level_forget(c);
}

static int
get_dict(PyObject *state, PyObject *name, PyObject **out)
{
    PyObject *v = PyObject_GetAttr(state, name);
    if (v == NULL) {
        return -1;
    }
    if (!PyDict_Check(v)) {
        Py_DECREF(v);
        PyErr_Format(PyExc_TypeError, "state.%U is not a dict", name);
        return -1;
    }
    *out = v;
    return 0;
}

static int
caches_load(caches_t *c, PyObject *state)
{
    memset(c, 0, sizeof(*c));
    c->state = state;
    if (get_dict(state, s_bids, &c->bids) < 0 || get_dict(state, s_asks, &c->asks) < 0
        || get_dict(state, s_accounts, &c->accounts) < 0
        || get_dict(state, s_api_keys, &c->api_keys) < 0
        || get_dict(state, s_pending, &c->pending) < 0
        || get_dict(state, s_orders, &c->orders) < 0
        || get_dict(state, s_level_orders, &c->level_orders) < 0
        || get_dict(state, s_trades, &c->tape) < 0 || get_dict(state, s_markets, &c->markets) < 0) {
        goto fail;
    }
    if (get_dict(state, s_txs, &c->remember) < 0) {
        goto fail;
    }
    c->tx_order = PyObject_GetAttr(state, s_tx_order);
    if (c->tx_order == NULL) {
        goto fail;
    }
    c->order_append = PyObject_GetAttr(c->tx_order, s_append);
    if (c->order_append == NULL) {
        goto fail;
    }
    PyObject *keep = PyObject_GetAttr(state, s_tx_results);
    if (keep == NULL) {
        goto fail;
    }
    c->tx_results = PyLong_AsSsize_t(keep);
    Py_DECREF(keep);
    if (c->tx_results == -1 && PyErr_Occurred()) {
        goto fail;
    }
    PyObject *prices = PyObject_GetAttr(state, s_prices);
    if (prices == NULL) {
        goto fail;
    }
    if (!PyTuple_Check(prices) || PyTuple_GET_SIZE(prices) != 2) {
        Py_DECREF(prices);
        PyErr_SetString(PyExc_TypeError, "state._prices is not a pair");
        goto fail;
    }
    c->bid_prices = Py_NewRef(PyTuple_GET_ITEM(prices, 0));
    c->ask_prices = Py_NewRef(PyTuple_GET_ITEM(prices, 1));
    Py_DECREF(prices);
    return 0;
fail:
    caches_clear(c);
    return -1;
}

/* d.get(key) (borrowed; NULL with an error set, or without: absent) and d[key] = v for a key
 * already hashed: CPython's KnownHash calls where this version exports them. */
static PyObject *
dict_get_hashed(PyObject *d, PyObject *key, Py_hash_t hash)
{
#if PY_VERSION_HEX < 0x030D0000
    return _PyDict_GetItem_KnownHash(d, key, hash);
#else
    (void)hash;
    return PyDict_GetItemWithError(d, key);
#endif
}

static int
dict_set_hashed(PyObject *d, PyObject *key, PyObject *v, Py_hash_t hash)
{
#if PY_VERSION_HEX < 0x030D0000
    return _PyDict_SetItem_KnownHash(d, key, v, hash);
#else
    (void)hash;
    return PyDict_SetItem(d, key, v);
#endif
}

/* d[key] as a borrowed reference; KeyError (like d[key]) when absent. */
static PyObject *
item(PyObject *d, PyObject *key)
{
    PyObject *v = PyDict_GetItemWithError(d, key);
    if (v == NULL && !PyErr_Occurred()) {
        PyObject *arg = PyTuple_Pack(1, key); /* KeyError(key), also for a tuple key */
        if (arg != NULL) {
            PyErr_SetObject(PyExc_KeyError, arg);
            Py_DECREF(arg);
        }
    }
    return v;
}

/* A record of class tp from n borrowed items (new reference, GC-tracked as tuple.__new__'s). */
static PyObject *
record(PyTypeObject *tp, PyObject *const *items, Py_ssize_t n)
{
    PyObject *t = tp->tp_alloc(tp, n);
    if (t == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyTuple_SET_ITEM(t, i, Py_NewRef(items[i]));
    }
    return t;
}

static int
untrack(PyObject *obj)
{
    PyObject *r = untrack_c != NULL ? untrack_c(untrack_self, obj)
                                    : PyObject_CallOneArg(untrack_fn, obj);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

/* A tuple, or a tuple subclass without instance storage of its own (what untrack accepts). */
static int
immutable_tuple(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    return tp == &PyTuple_Type || (PyTuple_Check(op) && tp->tp_dictoffset == 0
                                   && tp->tp_basicsize == PyTuple_Type.tp_basicsize);
}

/* untrack(rec) without the call where its outcome is plain: every item an atom (an int, bytes,
 * str, float, None) or an immutable tuple already untracked, which is what
 * observability/_untrack.c's rule then untracks; anything else goes through untrack(). Only
 * where untrack is that extension's (untrack_c): else the records stay as it leaves them. */
static int
untrack_fast(PyObject *rec)
{
    if (untrack_c == NULL || !immutable_tuple(rec)) {
        return untrack(rec);
    }
    Py_ssize_t n = PyTuple_GET_SIZE(rec);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyTuple_GET_ITEM(rec, i);
        PyTypeObject *t = Py_TYPE(o);
        if (t == &PyLong_Type || t == &PyBytes_Type || t == &PyUnicode_Type || o == Py_None
            || t == &PyBool_Type || t == &PyFloat_Type) {
            continue;
        }
        if (immutable_tuple(o) && !PyObject_GC_IsTracked(o)) {
            continue;
        }
        return untrack(rec);
    }
    PyObject_GC_UnTrack(rec);
    return 0;
}

/* Whether src is a record this loop may take items from without checking them: a tuple
 * subclass (a NamedTuple) that is untracked. Only raydex untracks those (the block decoder, the
 * untrack rule, this loop), each only when every item is an atom or such a record, so its items
 * need no check. (CPython's own rule untracks exact tuples only, and may leave in one a dict it
 * has untracked for now: exact tuples do not qualify.) */
static int
untracked_record(PyObject *src)
{
    return Py_TYPE(src) != &PyTuple_Type && immutable_tuple(src) && !PyObject_GC_IsTracked(src);
}

/* untrack_fast(rec) for a record whose items all come from a and b (b may be NULL) or are ints
 * made here: untracked directly when a and b are untracked records. */
static int
untrack_made(PyObject *rec, PyObject *a, PyObject *b)
{
    if (untrack_c != NULL && Py_TYPE(rec) != &PyTuple_Type && immutable_tuple(rec)
        && untracked_record(a) && (b == NULL || untracked_record(b))) {
        PyObject_GC_UnTrack(rec);
        return 0;
    }
    return untrack_fast(rec);
}

/* accounts.get(ai), else state._account(ai): a new reference. */
static PyObject *
account_of(caches_t *c, PyObject *ai)
{
    PyObject *acct = PyDict_GetItemWithError(c->accounts, ai);
    if (acct != NULL) {
        return Py_NewRef(acct);
    }
    if (PyErr_Occurred()) {
        return NULL;
    }
    return PyObject_CallMethodOneArg(c->state, s_account, ai);
}

/* The 0/1 side an is_ask value selects, as Python's tuple/list indexing would read it. */
static Py_ssize_t
side_of(PyObject *is_ask)
{
    Py_ssize_t k = PyNumber_AsSsize_t(is_ask, PyExc_IndexError);
    if (k == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (k < 0) {
        k += 2;
    }
    if (k < 0 || k > 1) {
        PyErr_SetString(PyExc_IndexError, "tuple index out of range");
        return -1;
    }
    return k;
}

/* AccountCache.index(r, sign). */
static int
acct_index(PyObject *acct, PyObject *r, int sign)
{
    int reduce_only = PyObject_IsTrue(PyTuple_GET_ITEM(r, 11));
    if (reduce_only < 0) {
        return -1;
    }
    if (!reduce_only) {
        PyObject *open_lots = acct_get(acct, A_OPEN_LOTS);
        if (open_lots == NULL) {
            return -1;
        }
        PyObject *mi = PyTuple_GET_ITEM(r, 0);
        PyObject *lots = PyDict_GetItemWithError(open_lots, mi); /* borrowed */
        if (lots == NULL) {
            if (PyErr_Occurred()) {
                Py_DECREF(open_lots);
                return -1;
            }
            lots = PyList_New(2);
            if (lots == NULL) {
                Py_DECREF(open_lots);
                return -1;
            }
            PyObject *zero = PyLong_FromLong(0);
            PyList_SET_ITEM(lots, 0, zero);
            PyList_SET_ITEM(lots, 1, Py_NewRef(zero));
            if (PyDict_SetItem(open_lots, mi, lots) < 0) {
                Py_DECREF(lots);
                Py_DECREF(open_lots);
                return -1;
            }
            Py_DECREF(lots); /* the dict holds it */
        }
        Py_INCREF(lots);
        int rc = -1;
        Py_ssize_t k = side_of(PyTuple_GET_ITEM(r, 4));
        if (k < 0 || !PyList_Check(lots) || PyList_GET_SIZE(lots) != 2) {
            if (k >= 0) {
                PyErr_SetString(PyExc_TypeError, "open_lots entry is not a 2-list");
            }
            goto lots_done;
        }
        PyObject *cur = PyList_GET_ITEM(lots, k);
        PyObject *amount = PyTuple_GET_ITEM(r, 7);
        PyObject *nv = sign > 0 ? PyNumber_Add(cur, amount) : PyNumber_Subtract(cur, amount);
        if (nv == NULL) {
            goto lots_done;
        }
        PyList_SetItem(lots, k, nv); /* steals nv */
        int a = PyObject_IsTrue(PyList_GET_ITEM(lots, 0));
        int b = a < 0 ? -1 : PyObject_IsTrue(PyList_GET_ITEM(lots, 1));
        if (a < 0 || b < 0) {
            goto lots_done;
        }
        if (!a && !b && PyDict_DelItem(open_lots, mi) < 0) {
            goto lots_done;
        }
        rc = 0;
    lots_done:
        Py_DECREF(lots);
        Py_DECREF(open_lots);
        if (rc < 0) {
            return -1;
        }
    }
    PyObject *coi = PyTuple_GET_ITEM(r, 3);
    int has_coi = PyObject_IsTrue(coi);
    if (has_coi < 0) {
        return -1;
    }
    if (has_coi) {
        PyObject *cois = acct_get(acct, A_COIS);
        if (cois == NULL) {
            return -1;
        }
        int rc = -1;
        PyObject *n = NULL;
        PyObject *cur = PyDict_GetItemWithError(cois, coi);
        if (cur == NULL && PyErr_Occurred()) {
            goto coi_done;
        }
        PyObject *step = PyLong_FromLong(sign);
        if (step == NULL) {
            goto coi_done;
        }
        if (cur == NULL) {
            n = step;
        } else {
            n = PyNumber_Add(cur, step);
            Py_DECREF(step);
            if (n == NULL) {
                goto coi_done;
            }
        }
        int nz = PyObject_IsTrue(n);
        if (nz < 0) {
            goto coi_done;
        }
        if (nz ? PyDict_SetItem(cois, coi, n) < 0 : PyDict_DelItem(cois, coi) < 0) {
            goto coi_done;
        }
        rc = 0;
    coi_done:
        Py_XDECREF(n);
        Py_DECREF(cois);
        return rc;
    }
    return 0;
}

/* AccountCache.reindex(old, r): acct_index(old, -1) then acct_index(r, 1), with one open-lots
 * update where both rest in the same market and side with the same reduce-only flag and client
 * order id. */
static int
acct_reindex(PyObject *acct, PyObject *old, PyObject *r)
{
    static const int fields[4] = {0, 4, 11, 3}; /* market, is_ask, reduce_only, coi */
    int same = 1;
    for (int i = 0; i < 4 && same > 0; i++) {
        same = PyObject_RichCompareBool(PyTuple_GET_ITEM(old, fields[i]),
                                        PyTuple_GET_ITEM(r, fields[i]), Py_EQ);
    }
    if (same < 0) {
        return -1;
    }
    if (same) {
        int reduce_only = PyObject_IsTrue(PyTuple_GET_ITEM(r, 11));
        if (reduce_only != 0) {
            return reduce_only < 0 ? -1 : 0;
        }
        PyObject *open_lots = acct_get(acct, A_OPEN_LOTS);
        if (open_lots == NULL) {
            return -1;
        }
        int rc = -1;
        PyObject *mi = PyTuple_GET_ITEM(r, 0);
        PyObject *lots = PyDict_GetItemWithError(open_lots, mi); /* borrowed */
        if (lots == NULL) {
            Py_DECREF(open_lots);
            if (PyErr_Occurred()) {
                return -1;
            }
            goto two_steps; /* not indexed as it should be: as the Python method does */
        }
        Py_INCREF(lots);
        Py_ssize_t k = side_of(PyTuple_GET_ITEM(r, 4));
        if (k < 0 || !PyList_Check(lots) || PyList_GET_SIZE(lots) != 2) {
            if (k >= 0) {
                PyErr_SetString(PyExc_TypeError, "open_lots entry is not a 2-list");
            }
            goto done;
        }
        PyObject *step = PyNumber_Subtract(PyTuple_GET_ITEM(r, 7), PyTuple_GET_ITEM(old, 7));
        PyObject *nv = step == NULL ? NULL : PyNumber_Add(PyList_GET_ITEM(lots, k), step);
        Py_XDECREF(step);
        if (nv == NULL) {
            goto done;
        }
        PyList_SetItem(lots, k, nv); /* steals nv */
        int a = PyObject_IsTrue(PyList_GET_ITEM(lots, 0));
        int b = a < 0 ? -1 : PyObject_IsTrue(PyList_GET_ITEM(lots, 1));
        if (a < 0 || b < 0 || (!a && !b && PyDict_DelItem(open_lots, mi) < 0)) {
            goto done;
        }
        rc = 0;
    done:
        Py_DECREF(lots);
        Py_DECREF(open_lots);
        return rc;
    }
two_steps:
    return acct_index(acct, old, -1) < 0 ? -1 : acct_index(acct, r, 1);
}

/* The level_orders side dict of record r (borrowed). */
static PyObject *
level_side(caches_t *c, PyObject *r)
{
    PyObject *pair = item(c->level_orders, PyTuple_GET_ITEM(r, 0));
    if (pair == NULL) {
        return NULL;
    }
    Py_ssize_t k = side_of(PyTuple_GET_ITEM(r, 4));
    if (k < 0) {
        return NULL;
    }
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
        PyErr_SetString(PyExc_TypeError, "level_orders entry is not a pair");
        return NULL;
    }
    PyObject *side = PyTuple_GET_ITEM(pair, k);
    if (!PyDict_Check(side)) {
        PyErr_SetString(PyExc_TypeError, "level_orders side is not a dict");
        return NULL;
    }
    return side;
}

/* ReplicaState._unlevel(r): r out of its level's order map (the level dropped when empty). */
static int
unlevel(caches_t *c, PyObject *r)
{
    PyObject *side = level_side(c, r);
    if (side == NULL) {
        return -1;
    }
    PyObject *price = PyTuple_GET_ITEM(r, 5);
    PyObject *level = item(side, price);
    if (level == NULL) {
        return -1;
    }
    if (!PyDict_Check(level)) {
        PyErr_SetString(PyExc_TypeError, "level is not a dict");
        return -1;
    }
    if (PyDict_DelItem(level, PyTuple_GET_ITEM(r, 1)) < 0) {
        return -1;
    }
    if (PyDict_GET_SIZE(level) == 0 && PyDict_DelItem(side, price) < 0) {
        return -1;
    }
    return 0;
}

/* ReplicaState._put_order(r). */
static int
put_order(caches_t *c, PyObject *r)
{
    PyObject *mi = PyTuple_GET_ITEM(r, 0), *oi = PyTuple_GET_ITEM(r, 1);
    PyObject *price = PyTuple_GET_ITEM(r, 5);
    PyObject *acct = account_of(c, PyTuple_GET_ITEM(r, 2));
    if (acct == NULL) {
        return -1;
    }
    int rc = -1;
    PyObject *old = PyDict_GetItemWithError(c->orders, oi);
    if (old == NULL) {
        if (PyErr_Occurred()) {
            goto done;
        }
        PyObject *counts = acct_get(acct, A_ORDER_COUNTS);
        if (counts == NULL) {
            goto done;
        }
        PyObject *cur = PyDict_GetItemWithError(counts, mi);
        PyObject *n = NULL;
        if (cur == NULL) {
            n = PyErr_Occurred() ? NULL : PyLong_FromLong(1);
        } else {
            PyObject *one = PyLong_FromLong(1);
            n = one == NULL ? NULL : PyNumber_Add(cur, one);
            Py_XDECREF(one);
        }
        int bad = n == NULL || PyDict_SetItem(counts, mi, n) < 0;
        Py_XDECREF(n);
        Py_DECREF(counts);
        if (bad) {
            goto done;
        }
    } else {
        Py_INCREF(old); /* until reindexed below (orders[oi] = r drops the dict's reference) */
        int moved = PyObject_RichCompareBool(PyTuple_GET_ITEM(old, 5), price, Py_NE);
        if (moved == 0) {
            moved =
                PyObject_RichCompareBool(PyTuple_GET_ITEM(old, 4), PyTuple_GET_ITEM(r, 4), Py_NE);
        }
        if (moved < 0 || (moved && unlevel(c, old) < 0)) {
            goto done;
        }
    }
    if (PyDict_SetItem(c->orders, oi, r) < 0) {
        goto done;
    }
    PyObject *side = level_side(c, r);
    if (side == NULL) {
        goto done;
    }
    PyObject *level = PyDict_GetItemWithError(side, price);
    if (level == NULL) {
        if (PyErr_Occurred()) {
            goto done;
        }
        PyObject *fresh = PyDict_New();
        if (fresh == NULL) {
            goto done;
        }
        int bad = PyDict_SetItem(fresh, oi, r) < 0 || PyDict_SetItem(side, price, fresh) < 0;
        Py_DECREF(fresh);
        if (bad) {
            goto done;
        }
    } else if (PyObject_SetItem(level, oi, r) < 0) {
        goto done;
    }
    PyObject *acct_orders = acct_get(acct, A_ORDERS);
    if (acct_orders == NULL) {
        goto done;
    }
    int bad = PyObject_SetItem(acct_orders, oi, r) < 0;
    Py_DECREF(acct_orders);
    if (bad || (old == NULL ? acct_index(acct, r, 1) : acct_reindex(acct, old, r)) < 0) {
        goto done;
    }
    rc = 0;
done:
    Py_XDECREF(old);
    Py_DECREF(acct);
    return rc;
}

/* ReplicaState._drop_order(oi). */
static int
drop_order(caches_t *c, PyObject *oi)
{
    PyObject *r = PyDict_GetItemWithError(c->orders, oi);
    if (r == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    Py_INCREF(r);
    int rc = -1;
    PyObject *acct = NULL;
    if (PyDict_DelItem(c->orders, oi) < 0 || unlevel(c, r) < 0) {
        goto done;
    }
    acct = item(c->accounts, PyTuple_GET_ITEM(r, 2));
    if (acct == NULL) {
        goto done;
    }
    Py_INCREF(acct);
    PyObject *acct_orders = acct_get(acct, A_ORDERS);
    if (acct_orders == NULL) {
        goto done;
    }
    int bad = PyObject_DelItem(acct_orders, oi) < 0;
    Py_DECREF(acct_orders);
    if (bad || acct_index(acct, r, -1) < 0) {
        goto done;
    }
    PyObject *counts = acct_get(acct, A_ORDER_COUNTS);
    if (counts == NULL) {
        goto done;
    }
    PyObject *mi = PyTuple_GET_ITEM(r, 0);
    PyObject *cur = item(counts, mi);
    PyObject *n = NULL;
    if (cur != NULL) {
        PyObject *one = PyLong_FromLong(1);
        n = one == NULL ? NULL : PyNumber_Subtract(cur, one);
        Py_XDECREF(one);
    }
    int nz = n == NULL ? -1 : PyObject_IsTrue(n);
    bad = nz < 0 || (nz ? PyDict_SetItem(counts, mi, n) < 0 : PyDict_DelItem(counts, mi) < 0);
    Py_XDECREF(n);
    Py_DECREF(counts);
    if (bad) {
        goto done;
    }
    rc = 0;
done:
    Py_XDECREF(acct);
    Py_DECREF(r);
    return rc;
}

/* bisect over an ascending list of prices: the first index whose item is > x (right) or >= x.
 * As C integers while x and the items probed are ints within 64 bits (a price always is; ~4x
 * fewer instructions than a rich comparison per probe), else by rich comparison from the start. */
static Py_ssize_t
bisect(PyObject *list, PyObject *x, int right)
{
    Py_ssize_t lo = 0, hi = PyList_GET_SIZE(list);
    int overflow = 0;
    long long xv = PyLong_CheckExact(x) ? PyLong_AsLongLongAndOverflow(x, &overflow) : 0;
    if (PyLong_CheckExact(x) && !overflow) {
        while (lo < hi) {
            Py_ssize_t mid = (lo + hi) / 2;
            PyObject *m = PyList_GET_ITEM(list, mid);
            long long mv = PyLong_CheckExact(m) ? PyLong_AsLongLongAndOverflow(m, &overflow) : 0;
            if (!PyLong_CheckExact(m) || overflow) {
                lo = 0;
                hi = PyList_GET_SIZE(list);
                goto generic;
            }
            if (right ? xv < mv : !(mv < xv)) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        return lo;
    }
generic:
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        PyObject *m = PyList_GET_ITEM(list, mid);
        int below = right ? PyObject_RichCompareBool(x, m, Py_LT)
                          : PyObject_RichCompareBool(m, x, Py_LT);
        if (below < 0) {
            return -1;
        }
        if (right ? below : !below) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    return lo;
}

/* Market mi's books and sorted prices per side (0 bids, 1 asks) and its ``changed`` entry (this
 * one created empty, as the Python loop does on the market's first level change in the block),
 * as borrowed references: from the block's level cache when mi is an int below LV_MARKETS. */
static int
level_market(caches_t *c, PyObject *mi, PyObject *changed, PyObject **book, PyObject **prices,
             PyObject **d)
{
    lv_t *e = NULL;
    if (PyLong_CheckExact(mi)) {
        int overflow = 0;
        long m = PyLong_AsLongAndOverflow(mi, &overflow);
        if (!overflow && m >= 0 && m < LV_MARKETS) {
            e = &c->lv[m];
            if (e->changed != NULL) {
                memcpy(book, e->book, sizeof(e->book));
                memcpy(prices, e->prices, sizeof(e->prices));
                *d = e->changed;
                return 0;
            }
        }
    }
    PyObject *books[2] = {c->bids, c->asks}, *lists[2] = {c->bid_prices, c->ask_prices};
    for (int k = 0; k < 2; k++) {
        book[k] = item(books[k], mi);
        prices[k] = book[k] == NULL ? NULL : item(lists[k], mi);
        if (prices[k] == NULL) {
            return -1;
        }
        if (!PyDict_Check(book[k]) || !PyList_Check(prices[k])) {
            PyErr_SetString(PyExc_TypeError, "a book is not a dict and a sorted list");
            return -1;
        }
    }
    PyObject *pair = PyDict_GetItemWithError(changed, mi);
    if (pair == NULL) {
        if (PyErr_Occurred()) {
            return -1;
        }
        PyObject *b = PyDict_New(), *a = PyDict_New();
        pair = (b == NULL || a == NULL) ? NULL : PyTuple_Pack(2, b, a);
        Py_XDECREF(b);
        Py_XDECREF(a);
        if (pair == NULL) {
            return -1;
        }
        int bad = PyDict_SetItem(changed, mi, pair) < 0;
        Py_DECREF(pair); /* changed holds it */
        if (bad) {
            return -1;
        }
    }
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2
        || !PyDict_Check(PyTuple_GET_ITEM(pair, 0)) || !PyDict_Check(PyTuple_GET_ITEM(pair, 1))) {
        PyErr_SetString(PyExc_TypeError, "a changed entry is not a pair of dicts");
        return -1;
    }
    *d = pair;
    if (e != NULL) {
        for (int k = 0; k < 2; k++) {
            e->book[k] = Py_NewRef(book[k]);
            e->prices[k] = Py_NewRef(prices[k]);
        }
        e->changed = Py_NewRef(pair);
        c->lv_set[c->lv_n++] = (int)(e - c->lv);
    }
    return 0;
}

static int
level_changed(caches_t *c, PyObject *ev, PyObject *changed)
{
    PyObject *mi = PyTuple_GET_ITEM(ev, 0), *is_ask = PyTuple_GET_ITEM(ev, 1);
    PyObject *price = PyTuple_GET_ITEM(ev, 2), *size = PyTuple_GET_ITEM(ev, 3);
    PyObject *books[2], *lists[2], *d;
    int ask = PyObject_IsTrue(is_ask);
    if (ask < 0 || level_market(c, mi, changed, books, lists, &d) < 0) {
        return -1;
    }
    PyObject *book = books[ask], *prices = lists[ask];
    int nonzero = PyObject_IsTrue(size);
    if (nonzero < 0) {
        return -1;
    }
    int has = PyDict_Contains(book, price);
    if (has < 0) {
        return -1;
    }
    if (nonzero) {
        if (!has) {
            Py_ssize_t at = bisect(prices, price, 1);
            if (at < 0 || PyList_Insert(prices, at, price) < 0) {
                return -1;
            }
        }
        if (PyDict_SetItem(book, price, size) < 0) {
            return -1;
        }
    } else if (has) {
        if (PyDict_DelItem(book, price) < 0) {
            return -1;
        }
        Py_ssize_t at = bisect(prices, price, 0);
        if (at < 0) {
            return -1;
        }
        if (at >= PyList_GET_SIZE(prices)) {
            PyErr_SetString(PyExc_IndexError, "list assignment index out of range");
            return -1;
        }
        if (PyList_SetSlice(prices, at, at + 1, NULL) < 0) {
            return -1;
        }
    }
    Py_ssize_t k = side_of(is_ask);
    if (k < 0) {
        return -1;
    }
    return PyDict_SetItem(PyTuple_GET_ITEM(d, k), price, size);
}

/* ReplicaState._clear_pending(ai, ki, nonce), with the (ai, ki) key already built. */
static int
clear_pending(caches_t *c, PyObject *key, PyObject *nonce)
{
    PyObject *per = PyDict_GetItemWithError(c->pending, key);
    if (per == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    if (!PyDict_Check(per)) {
        PyErr_SetString(PyExc_TypeError, "a pending entry is not a dict");
        return -1;
    }
    PyObject *count = PyDict_GetItemWithError(per, nonce);
    if (count == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    PyObject *one = PyLong_FromLong(1);
    if (one == NULL) {
        return -1;
    }
    int more = PyObject_RichCompareBool(count, one, Py_GT);
    int rc = -1;
    if (more > 0) {
        PyObject *n = PyNumber_Subtract(count, one);
        rc = n == NULL ? -1 : PyDict_SetItem(per, nonce, n);
        Py_XDECREF(n);
    } else if (more == 0) {
        rc = PyDict_DelItem(per, nonce);
        if (rc == 0 && PyDict_GET_SIZE(per) == 0) {
            rc = PyDict_DelItem(c->pending, key);
        }
    }
    Py_DECREF(one);
    return rc;
}

static int
tx_executed(caches_t *c, PyObject *ev, PyObject *seq, PyObject *ts_ms, PyObject *txs)
{
    PyObject *pos = PyLong_FromSsize_t(PyList_GET_SIZE(txs));
    if (pos == NULL) {
        return -1;
    }
    PyObject *items[10] = {
        PyTuple_GET_ITEM(ev, 0), PyTuple_GET_ITEM(ev, 1), PyTuple_GET_ITEM(ev, 2),
        PyTuple_GET_ITEM(ev, 3), PyTuple_GET_ITEM(ev, 4), PyTuple_GET_ITEM(ev, 5),
        seq, seq, ts_ms, pos,
    };
    PyObject *rec = record(cls[C_TX_RECORD], items, 10);
    Py_DECREF(pos);
    if (rec == NULL) {
        return -1;
    }
    /* seq and ts_ms: exact ints (checked once per block), pos made here */
    if ((c->ints ? untrack_made(rec, ev, NULL) : untrack_fast(rec)) < 0) {
        Py_DECREF(rec);
        return -1;
    }
    /* remember[tx_hash] = rec, a new hash queued on tx_order; the oldest dropped past keep */
    PyObject *h = PyTuple_GET_ITEM(ev, 0);
    int seen = PyDict_Contains(c->remember, h);
    int bad = seen < 0 || PyList_Append(txs, rec) < 0;
    if (!bad && !seen) {
        PyObject *r = PyObject_CallOneArg(c->order_append, h);
        bad = r == NULL;
        Py_XDECREF(r);
    }
    bad = bad || PyDict_SetItem(c->remember, h, rec) < 0;
    Py_DECREF(rec);
    if (bad) {
        return -1;
    }
    if (PyDict_GET_SIZE(c->remember) > c->tx_results) {
        if (c->order_popleft == NULL
            && (c->order_popleft = PyObject_GetAttr(c->tx_order, s_popleft)) == NULL) {
            return -1;
        }
        PyObject *old = PyObject_CallNoArgs(c->order_popleft);
        if (old == NULL) {
            return -1;
        }
        bad = PyDict_DelItem(c->remember, old) < 0;
        Py_DECREF(old);
        if (bad) {
            return -1;
        }
    }
    if (PyDict_GET_SIZE(c->pending) > 0) {
        PyObject *key = PyTuple_Pack(2, PyTuple_GET_ITEM(ev, 2), PyTuple_GET_ITEM(ev, 3));
        if (key == NULL) {
            return -1;
        }
        int rc = clear_pending(c, key, PyTuple_GET_ITEM(ev, 4));
        Py_DECREF(key);
        return rc;
    }
    return 0;
}

static int
nonce_updated(caches_t *c, PyObject *ev)
{
    PyObject *key = PyTuple_Pack(2, PyTuple_GET_ITEM(ev, 0), PyTuple_GET_ITEM(ev, 1));
    if (key == NULL) {
        return -1;
    }
    int rc = -1;
    /* the (ai, ki) key hashed once for the lookup and the store (a tuple's hash is not cached) */
    Py_hash_t hash = PyObject_Hash(key);
    if (hash == -1) {
        goto done;
    }
    PyObject *old = dict_get_hashed(c->api_keys, key, hash);
    if (old == NULL) {
        rc = PyErr_Occurred() ? -1 : 0;
        goto done;
    }
    if (!PyTuple_Check(old) || PyTuple_GET_SIZE(old) < 4) {
        PyErr_SetString(PyExc_TypeError, "an api key record is not a 4-tuple");
        goto done;
    }
    PyObject *items[4] = {
        PyTuple_GET_ITEM(ev, 0), PyTuple_GET_ITEM(ev, 1), PyTuple_GET_ITEM(ev, 2),
        PyTuple_GET_ITEM(old, 3),
    };
    PyObject *rec = record(cls[C_API_KEY_RECORD], items, 4);
    if (rec == NULL) {
        goto done;
    }
    /* untracked before the store: the store may free old, which untrack_made reads */
    rc = untrack_made(rec, ev, old) < 0 || dict_set_hashed(c->api_keys, key, rec, hash) < 0
        ? -1 : 0;
    Py_DECREF(rec);
done:
    Py_DECREF(key);
    return rc;
}

static int
order_updated(caches_t *c, PyObject *ev, PyObject *touched)
{
    int live = PyObject_RichCompareBool(PyTuple_GET_ITEM(ev, 12), active, Py_EQ);
    if (live > 0) {
        PyObject *remaining = PyTuple_GET_ITEM(ev, 7);
        if (PyLong_CheckExact(remaining)) {
            live = _PyLong_Sign(remaining) > 0;
        } else {
            PyObject *zero = PyLong_FromLong(0);
            if (zero == NULL) {
                return -1;
            }
            live = PyObject_RichCompareBool(remaining, zero, Py_GT);
            Py_DECREF(zero);
        }
    }
    if (live < 0) {
        return -1;
    }
    if (live) {
        /* OrderRecord: OrderUpdated's fields but its status (12): ..., priority, version */
        PyObject *items[14];
        for (int i = 0; i < 12; i++) {
            items[i] = PyTuple_GET_ITEM(ev, i);
        }
        items[12] = PyTuple_GET_ITEM(ev, 13);
        items[13] = PyTuple_GET_ITEM(ev, 14);
        PyObject *r = record(cls[C_ORDER_RECORD], items, 14);
        if (r == NULL) {
            return -1;
        }
        int bad = untrack_made(r, ev, NULL) < 0 || put_order(c, r) < 0;
        Py_DECREF(r);
        if (bad) {
            return -1;
        }
    } else if (drop_order(c, PyTuple_GET_ITEM(ev, 1)) < 0) {
        return -1;
    }
    return PySet_Add(touched, PyTuple_GET_ITEM(ev, 2));
}

static int
balance_changed(caches_t *c, PyObject *ev, PyObject *touched)
{
    PyObject *ai = PyTuple_GET_ITEM(ev, 0);
    PyObject *acct = account_of(c, ai);
    if (acct == NULL) {
        return -1;
    }
    int bad = acct_set(acct, A_COLLATERAL, PyTuple_GET_ITEM(ev, 1)) < 0;
    Py_DECREF(acct);
    return bad ? -1 : PySet_Add(touched, ai);
}

static int
position_changed(caches_t *c, PyObject *ev, PyObject *touched)
{
    PyObject *ai = PyTuple_GET_ITEM(ev, 0);
    PyObject *acct = account_of(c, ai);
    if (acct == NULL) {
        return -1;
    }
    int rc = -1;
    PyObject *positions = acct_get(acct, A_POSITIONS);
    if (positions == NULL) {
        goto done;
    }
    PyObject *rec = record(cls[C_POSITION_RECORD], ((PyTupleObject *)ev)->ob_item,
                           PyTuple_GET_SIZE(ev));
    if (rec != NULL) {
        rc = PyObject_SetItem(positions, PyTuple_GET_ITEM(ev, 1), rec) < 0
                || untrack_made(rec, ev, NULL) < 0
            ? -1 : 0;
        Py_DECREF(rec);
    }
    Py_DECREF(positions);
    if (rc == 0) {
        rc = PySet_Add(touched, ai);
    }
done:
    Py_DECREF(acct);
    return rc;
}

/* ReplicaState._apply_rare's TradeExecuted branch: the row on the market's tape and in the
 * block's ``trades``, both accounts touched (the day's stats are counted after the loop, from
 * ``trades``: ReplicaState._count_trades). */
static int
trade_executed(caches_t *c, PyObject *ev, PyObject *tx_hash, PyObject *seq, PyObject *ts_ms,
               PyObject *trades, PyObject *touched)
{
    PyObject *mi = PyTuple_GET_ITEM(ev, 0);
    PyObject *tape = item(c->tape, mi);
    if (tape == NULL) {
        return -1;
    }
    PyObject *items[4] = {ev, tx_hash, seq, ts_ms};
    PyObject *row = record(cls[C_TRADE_ROW], items, 4);
    if (row == NULL) {
        return -1;
    }
    int rc = -1;
    if (untrack_fast(row) < 0) {
        goto done;
    }
    PyObject *r = PyObject_CallMethodOneArg(tape, s_append, row);
    if (r == NULL) {
        goto done;
    }
    Py_DECREF(r);
    PyObject *rows = PyDict_GetItemWithError(trades, mi);
    if (rows == NULL) {
        if (PyErr_Occurred()) {
            goto done;
        }
        PyObject *fresh = PyList_New(1);
        if (fresh == NULL) {
            goto done;
        }
        PyList_SET_ITEM(fresh, 0, Py_NewRef(row));
        int bad = PyDict_SetItem(trades, mi, fresh) < 0;
        Py_DECREF(fresh);
        if (bad) {
            goto done;
        }
    } else if (PyList_Append(rows, row) < 0) {
        goto done;
    }
    if (PySet_Add(touched, PyTuple_GET_ITEM(ev, 4)) < 0
        || PySet_Add(touched, PyTuple_GET_ITEM(ev, 5)) < 0) {
        goto done;
    }
    rc = 0;
done:
    Py_DECREF(row);
    return rc;
}

/* ReplicaState._apply_rare's MarketStatsChanged branch: the market record with its new mark,
 * last trade price and open interest. */
static int
market_stats_changed(caches_t *c, PyObject *ev)
{
    PyObject *mi = PyTuple_GET_ITEM(ev, 0);
    PyObject *m = item(c->markets, mi);
    if (m == NULL) {
        return -1;
    }
    if (!PyTuple_Check(m) || PyTuple_GET_SIZE(m) != MARKET_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "a market record is not an 18-tuple");
        return -1;
    }
    PyObject *items[MARKET_FIELDS];
    for (int i = 0; i < 14; i++) {
        items[i] = PyTuple_GET_ITEM(m, i);
    }
    items[14] = PyTuple_GET_ITEM(ev, 1); /* mark_price */
    items[15] = PyTuple_GET_ITEM(m, 15);  /* status */
    items[16] = PyTuple_GET_ITEM(ev, 2); /* last_trade_price */
    items[17] = PyTuple_GET_ITEM(ev, 3); /* open_interest */
    PyObject *rec = record(cls[C_MARKET_RECORD], items, MARKET_FIELDS);
    if (rec == NULL) {
        return -1;
    }
    /* untracked before the store: the store may free m, which untrack_made reads */
    int rc = untrack_made(rec, ev, m) < 0 || PyDict_SetItem(c->markets, mi, rec) < 0 ? -1 : 0;
    Py_DECREF(rec);
    return rc;
}

/* A side's changed levels, price -> size, as the ((price, size), ...) tuple a BookDelta holds:
 * ascending, or descending for bids (``tuple(sorted(d.items(), reverse=...))``; prices are
 * unique, so sorting the keys sorts the items). Prices that are ints within 64 bits (all of a
 * block's, in practice) are sorted as C integers by an insertion sort (a block changes a few
 * levels per side), without the keys list, its sort's comparisons and a lookup per key; any
 * other price falls back to the list sort. */
#define SORT_INLINE 32
typedef struct {
    long long px;
    PyObject *price, *size; /* borrowed from the dict */
} level_t;

static PyObject *
sorted_levels_generic(PyObject *d, int descending)
{
    PyObject *keys = PyDict_Keys(d);
    if (keys == NULL) {
        return NULL;
    }
    PyObject *out = NULL;
    if (PyList_Sort(keys) < 0 || (descending && PyList_Reverse(keys) < 0)) {
        goto done;
    }
    Py_ssize_t n = PyList_GET_SIZE(keys);
    out = PyTuple_New(n);
    if (out == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyList_GET_ITEM(keys, i);
        PyObject *v = item(d, k);
        PyObject *pair = v == NULL ? NULL : PyTuple_Pack(2, k, v);
        if (pair == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyTuple_SET_ITEM(out, i, pair);
    }
done:
    Py_DECREF(keys);
    return out;
}

static PyObject *
sorted_levels(PyObject *d, int descending)
{
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "a changed side is not a dict");
        return NULL;
    }
    Py_ssize_t n = PyDict_GET_SIZE(d);
    if (n > SORT_INLINE) {
        return sorted_levels_generic(d, descending);
    }
    level_t lv[SORT_INLINE];
    Py_ssize_t pos = 0, m = 0;
    PyObject *k, *v;
    while (PyDict_Next(d, &pos, &k, &v)) {
        int overflow = 0;
        long long px = PyLong_CheckExact(k) ? PyLong_AsLongLongAndOverflow(k, &overflow) : 0;
        if (!PyLong_CheckExact(k) || overflow) {
            return sorted_levels_generic(d, descending);
        }
        /* insertion sort, ascending (prices are unique keys) */
        Py_ssize_t j = m++;
        while (j > 0 && lv[j - 1].px > px) {
            lv[j] = lv[j - 1];
            j--;
        }
        lv[j] = (level_t){px, k, v};
    }
    PyObject *out = PyTuple_New(m);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        level_t *e = &lv[descending ? m - 1 - i : i];
        PyObject *pair = PyTuple_Pack(2, e->price, e->size);
        if (pair == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, pair);
    }
    return out;
}

/* changed: market -> ({bid price: size}, {ask price: size}) becomes market -> BookDelta(market,
 * bid levels descending, ask levels ascending, seq, the seq of the market's previous change),
 * with nonces[market] moved to seq: the deltas ReplicaState.apply_block makes after the Python
 * loop (its ``_sort_changed`` and deltas loop). */
static int
make_deltas(PyObject *changed, PyObject *seq, PyObject *nonces)
{
    PyObject *mi, *pair;
    Py_ssize_t pos = 0;
    while (PyDict_Next(changed, &pos, &mi, &pair)) {
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "a changed entry is not a pair");
            return -1;
        }
        PyObject *begin = item(nonces, mi);
        if (begin == NULL) {
            return -1;
        }
        PyObject *b = sorted_levels(PyTuple_GET_ITEM(pair, 0), 1);
        PyObject *a = b == NULL ? NULL : sorted_levels(PyTuple_GET_ITEM(pair, 1), 0);
        PyObject *delta = NULL;
        if (a != NULL) {
            PyObject *items[5] = {mi, b, a, seq, begin};
            delta = record(cls[C_BOOK_DELTA], items, 5);
        }
        Py_XDECREF(b);
        Py_XDECREF(a);
        /* the keys are there: replacing their values does not resize the dicts (changed's under
         * PyDict_Next) */
        int bad = delta == NULL || PyDict_SetItem(nonces, mi, seq) < 0
                  || PyDict_SetItem(changed, mi, delta) < 0;
        Py_XDECREF(delta);
        if (bad) {
            return -1;
        }
    }
    return 0;
}

/* The fields each handled event kind must have (its NamedTuple's; MarketStatsChanged is
 * unpacked whole by the Python loop, so exactly its 4). */
static const Py_ssize_t min_fields[N_EVENTS] = {15, 4, 6, 3, 2, 8, 11, 4};

static PyObject *
apply_events(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError,
                        "apply_events(state, events, seq, ts_ms, changed, trades, touched, txs, "
                        "rare, nonces)");
        return NULL;
    }
    if (untrack_fn == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "apply_events before configure");
        return NULL;
    }
    PyObject *state = args[0], *seq = args[2], *ts_ms = args[3], *changed = args[4];
    PyObject *trades = args[5], *touched = args[6], *txs = args[7], *rare = args[8];
    PyObject *nonces = args[9];
    if (!PyDict_Check(changed) || !PySet_Check(touched) || !PyList_Check(txs)
        || !PyDict_Check(nonces)) {
        PyErr_SetString(PyExc_TypeError,
                        "changed, touched, txs, nonces: a dict, a set, a list, a dict");
        return NULL;
    }
    PyObject *events = PySequence_Fast(args[1], "events must be a sequence");
    if (events == NULL) {
        return NULL;
    }
    caches_t c;
    if (caches_load(&c, state) < 0) {
        Py_DECREF(events);
        return NULL;
    }
    c.ints = PyLong_CheckExact(seq) && PyLong_CheckExact(ts_ms);
    PyObject *tx_hash = PyBytes_FromStringAndSize(NULL, 0);
    PyObject *result = NULL;
    if (tx_hash == NULL) {
        goto done;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(events);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *ev = PySequence_Fast_GET_ITEM(events, i);
        PyTypeObject *t = Py_TYPE(ev);
        /* the block's events are kept (history): out of the collector's lists, as the Python
         * loop's caller does with untrack_all (the C decoder makes most of them untracked) */
        if (untrack_c != NULL && PyObject_GC_IsTracked(ev) && untrack_fast(ev) < 0) {
            goto done;
        }
        int kind = -1;
        for (int k = 0; k < N_EVENTS; k++) {
            if (t == cls[k]) {
                kind = k;
                break;
            }
        }
        if (kind >= 0 && (PyTuple_GET_SIZE(ev) < min_fields[kind]
                          || (kind == C_MARKET_STATS_CHANGED && PyTuple_GET_SIZE(ev) != 4))) {
            PyErr_Format(PyExc_ValueError, "%s with %zd fields", t->tp_name,
                         PyTuple_GET_SIZE(ev));
            goto done;
        }
        int rc;
        switch (kind) {
        case C_ORDER_UPDATED: rc = order_updated(&c, ev, touched); break;
        case C_LEVEL_CHANGED: rc = level_changed(&c, ev, changed); break;
        case C_TX_EXECUTED:
            rc = tx_executed(&c, ev, seq, ts_ms, txs);
            if (rc == 0) {
                Py_SETREF(tx_hash, Py_NewRef(PyTuple_GET_ITEM(ev, 0)));
            }
            break;
        case C_NONCE_UPDATED: rc = nonce_updated(&c, ev); break;
        case C_BALANCE_CHANGED: rc = balance_changed(&c, ev, touched); break;
        case C_POSITION_CHANGED: rc = position_changed(&c, ev, touched); break;
        case C_TRADE_EXECUTED:
            rc = trade_executed(&c, ev, tx_hash, seq, ts_ms, trades, touched);
            break;
        case C_MARKET_STATS_CHANGED: rc = market_stats_changed(&c, ev); break;
        default: {
            PyObject *call[6] = {ev, tx_hash, seq, ts_ms, trades, touched};
            PyObject *r = PyObject_Vectorcall(rare, call, 6, NULL);
            rc = r == NULL ? -1 : 0;
            Py_XDECREF(r);
            level_forget(&c); /* Python ran: the books it cached may have been replaced */
        }
        }
        if (rc < 0) {
            goto done;
        }
    }
    if (make_deltas(changed, seq, nonces) < 0) {
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(tx_hash);
    caches_clear(&c);
    Py_DECREF(events);
    return result;
}

static PyObject *
configure(PyObject *module, PyObject *args)
{
    PyObject *classes, *act, *untrack_obj, *account_cls;
    if (!PyArg_ParseTuple(args, "OOOO!", &classes, &act, &untrack_obj, &PyType_Type,
                          &account_cls)) {
        return NULL;
    }
    Py_ssize_t offs[N_ACCT];
    for (int f = 0; f < N_ACCT; f++) {
        /* the slot's offset where the class has a plain object member for it, else -1 */
        offs[f] = -1;
        PyObject *d = PyDict_GetItemWithError(((PyTypeObject *)account_cls)->tp_dict,
                                              acct_name[f]);
        if (d == NULL && PyErr_Occurred()) {
            return NULL;
        }
        if (d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type)) {
            PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
            if (m->type == T_OBJECT_EX && !(m->flags & READONLY)) {
                offs[f] = m->offset;
            }
        }
    }
    PyObject *fast = PySequence_Fast(classes, "classes must be a sequence");
    if (fast == NULL) {
        return NULL;
    }
    if (PySequence_Fast_GET_SIZE(fast) != N_CLASSES) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "expected %d classes", N_CLASSES);
        return NULL;
    }
    for (int k = 0; k < N_CLASSES; k++) {
        PyObject *tp = PySequence_Fast_GET_ITEM(fast, k);
        if (!PyType_Check(tp) || !PyType_IsSubtype((PyTypeObject *)tp, &PyTuple_Type)) {
            Py_DECREF(fast);
            PyErr_Format(PyExc_TypeError, "class %d is not a tuple subclass", k);
            return NULL;
        }
    }
    if (!PyCallable_Check(untrack_obj)) {
        Py_DECREF(fast);
        PyErr_SetString(PyExc_TypeError, "untrack must be callable");
        return NULL;
    }
    for (int k = 0; k < N_CLASSES; k++) {
        Py_XSETREF(cls[k], (PyTypeObject *)Py_NewRef(PySequence_Fast_GET_ITEM(fast, k)));
    }
    Py_DECREF(fast);
    Py_XSETREF(active, Py_NewRef(act));
    Py_XSETREF(untrack_fn, Py_NewRef(untrack_obj));
    Py_XSETREF(acct_cls, (PyTypeObject *)Py_NewRef(account_cls));
    memcpy(acct_off, offs, sizeof(acct_off));
    untrack_c = NULL;
    untrack_self = NULL;
    if (PyCFunction_Check(untrack_obj) && PyCFunction_GET_FLAGS(untrack_obj) == METH_O) {
        untrack_c = PyCFunction_GET_FUNCTION(untrack_obj);
        untrack_self = PyCFunction_GET_SELF(untrack_obj); /* its module: untrack_fn keeps it */
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)configure, METH_VARARGS,
     "configure(classes, active, untrack, account_class): see the module docstring."},
    {"apply_events", (PyCFunction)(void (*)(void))apply_events, METH_FASTCALL,
     "apply_events(state, events, seq, ts_ms, changed, trades, touched, txs, rare, nonces) "
     "-> None."},
    {NULL, NULL, 0, NULL},
};

static void
module_free(void *m)
{
    for (int k = 0; k < N_CLASSES; k++) {
        Py_CLEAR(cls[k]);
    }
    Py_CLEAR(active);
    Py_CLEAR(untrack_fn);
    Py_CLEAR(acct_cls);
    untrack_c = NULL;
    untrack_self = NULL;
}

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "raydex.actors.replica.cache._cacheloop", NULL, 0, methods,
    NULL, NULL, NULL, module_free,
};

#define INTERN(var, text)                                                                     \
    do {                                                                                      \
        if ((var) == NULL && ((var) = PyUnicode_InternFromString(text)) == NULL) {            \
            return NULL;                                                                      \
        }                                                                                     \
    } while (0)

PyMODINIT_FUNC
PyInit__cacheloop(void)
{
    INTERN(s_bids, "_bids");
    INTERN(s_asks, "_asks");
    INTERN(s_prices, "_prices");
    INTERN(s_accounts, "accounts");
    INTERN(s_api_keys, "api_keys");
    INTERN(s_pending, "_pending");
    INTERN(s_txs, "txs");
    INTERN(s_orders, "orders");
    INTERN(s_level_orders, "level_orders");
    INTERN(s_account, "_account");
    INTERN(s_tx_order, "_tx_order");
    INTERN(s_popleft, "popleft");
    for (int f = 0; f < N_ACCT; f++) {
        INTERN(acct_name[f], acct_names[f]);
    }
    INTERN(s_tx_results, "tx_results");
    INTERN(s_trades, "trades");
    INTERN(s_markets, "markets");
    INTERN(s_append, "append");
    return PyModule_Create(&module);
}
