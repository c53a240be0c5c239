/* raydex.cluster._hugearena: CPython's small-object arenas on transparent huge pages.
 *
 * pymalloc carves every object of <= 512 bytes (tuples, ints, small dicts: nearly all of a
 * replica's caches) out of 1 MiB arenas, each its own mmap of 4 KiB pages. A core that other
 * processes used since the last block has lost both the cache lines and the TLB entries of the
 * caches; every page the next block touches then costs a page walk (whose page-table lines miss
 * too) on top of its cache misses. On 2 MiB pages the same heap needs 512x fewer TLB entries.
 *
 * install() swaps the arena allocator (PyObject_SetArenaAllocator) for one that hands out arenas
 * from regions of REGION bytes, 2 MiB-aligned and madvise(MADV_HUGEPAGE)d (THP in "madvise" or
 * "always" mode backs them at first touch). A freed arena goes on a free list and is reused, not
 * returned to the kernel (returning 1 MiB would split its huge page): the process keeps its
 * arena peak. Arenas allocated before install() (and any request of another size, or past the
 * region limit) go to the previous allocator, and free() sends them back to it by address.
 *
 * Everything here runs under the GIL (pymalloc's callers hold it), so there is no locking.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)
#define REGION ((size_t)64 << 20)
#define MAX_REGIONS 256 /* 16 GiB of arenas */

typedef struct free_slot {
    struct free_slot *next;
} free_slot;

static PyObjectArenaAllocator prev_allocator;
static int installed;
static int advised_ok = 1; /* every madvise(MADV_HUGEPAGE) succeeded */
static size_t arena_size;  /* pymalloc's ARENA_SIZE: the size of the first request */
static char *regions[MAX_REGIONS];
static int n_regions;
static char *bump;       /* next never-used arena in the last region */
static char *bump_end;   /* end of the last region */
static free_slot *free_list;
static Py_ssize_t in_use; /* arenas handed out from the regions and not freed */
static Py_ssize_t n_free;
static Py_ssize_t fallbacks; /* requests served by the previous allocator */

static int
new_region(void)
{
    if (n_regions == MAX_REGIONS)
        return -1;
    /* over-map by one huge page so a 2 MiB-aligned REGION fits, then trim both ends */
    size_t span = REGION + HUGE_PAGE;
    char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
    if (raw == MAP_FAILED)
        return -1;
    char *base = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    size_t head = (size_t)(base - raw);
    if (head)
        munmap(raw, head);
    size_t tail = span - head - REGION;
    if (tail)
        munmap(base + REGION, tail);
#ifdef MADV_HUGEPAGE
    if (madvise(base, REGION, MADV_HUGEPAGE) != 0)
        advised_ok = 0;
#else
    advised_ok = 0;
#endif
    regions[n_regions++] = base;
    bump = base;
    bump_end = base + REGION;
    return 0;
}

static int
ours(void *ptr)
{
    for (int i = n_regions - 1; i >= 0; i--) {
        if ((char *)ptr >= regions[i] && (char *)ptr < regions[i] + REGION)
            return 1;
    }
    return 0;
}

static void *
arena_alloc(void *ctx, size_t size)
{
    (void)ctx;
    if (arena_size == 0 && size > 0 && size <= REGION && REGION % size == 0)
        arena_size = size;
    if (size == arena_size) {
        if (free_list != NULL) {
            free_slot *s = free_list;
            free_list = s->next;
            n_free--;
            in_use++;
            return s;
        }
        if ((bump == NULL || bump + size > bump_end) && new_region() != 0)
            goto fallback;
        void *p = bump;
        bump += size;
        in_use++;
        return p;
    }
fallback:
    fallbacks++;
    return prev_allocator.alloc(prev_allocator.ctx, size);
}

static void
arena_free(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    if (ptr != NULL && size == arena_size && ours(ptr)) {
        free_slot *s = (free_slot *)ptr;
        s->next = free_list;
        free_list = s;
        n_free++;
        in_use--;
        return;
    }
    prev_allocator.free(prev_allocator.ctx, ptr, size);
}

static PyObject *
install(PyObject *module, PyObject *unused)
{
    if (installed)
        Py_RETURN_FALSE;
    PyObjectArenaAllocator mine = {NULL, arena_alloc, arena_free};
    PyObject_GetArenaAllocator(&prev_allocator);
    PyObject_SetArenaAllocator(&mine);
    installed = 1;
    Py_RETURN_TRUE;
}

static PyObject *
stats(PyObject *module, PyObject *unused)
{
    PyObject *spans = PyList_New(n_regions);
    if (spans == NULL)
        return NULL;
    for (int i = 0; i < n_regions; i++) {
        PyObject *t = Py_BuildValue("(kn)", (unsigned long)(uintptr_t)regions[i], (Py_ssize_t)REGION);
        if (t == NULL) {
            Py_DECREF(spans);
            return NULL;
        }
        PyList_SET_ITEM(spans, i, t);
    }
    return Py_BuildValue("{s:O,s:n,s:n,s:n,s:n,s:n,s:O,s:N}", "installed",
                         installed ? Py_True : Py_False, "arena_size", (Py_ssize_t)arena_size,
                         "arenas_in_use", in_use, "arenas_free", n_free, "fallbacks", fallbacks,
                         "regions", (Py_ssize_t)n_regions, "advised", advised_ok ? Py_True : Py_False,
                         "spans", spans);
}

static PyMethodDef methods[] = {
    {"install", install, METH_NOARGS,
     "install() -> bool: serve pymalloc's arenas from 2 MiB-aligned MADV_HUGEPAGE regions from "
     "now on (False: already installed)."},
    {"stats", stats, METH_NOARGS,
     "stats() -> dict: installed, arena_size, arenas_in_use, arenas_free, fallbacks, regions, "
     "advised (every madvise succeeded) and spans [(start, size)] of the regions."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_hugearena",
    "CPython's small-object arenas from 2 MiB-aligned, MADV_HUGEPAGE regions.", -1, methods,
};

PyMODINIT_FUNC
PyInit__hugearena(void)
{
    return PyModule_Create(&module);
}
