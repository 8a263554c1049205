/* cache.c: the per-code cache stored in co_extra.
 *
 * Owns: the co_extra index (requested once, at module import), creation of a CodeExtra on
 * first use, the entry list (prepend, move-to-front on hit), and reset of all state.
 * Ownership: a CodeExtra holds strong references to its entries' guards and code objects.
 * Those references are invisible to the cyclic GC (code objects are not GC-tracked), so a
 * cycle through co_extra is only broken by reset() or by the code object dying; the
 * frontend must not store the original function in a guard (docs/internals.md).
 * The free function runs whenever a code object dies, on any thread holding the GIL and
 * possibly during finalisation: it accepts NULL, calls no Python code of ours, and only
 * DECREFs and frees.
 */
#include "cache.h"

Py_ssize_t pyjit_extra_index = -1;
/* 1 once module init verified pyjit_code_extra_mirror against the co_extra API. */
int pyjit_mirror_ok = 0;
#define extra_index pyjit_extra_index
#define mirror_ok pyjit_mirror_ok
/* Doubly linked registry of live CodeExtra structs; head sentinel-free (NULL = empty). */
static CodeExtra *registry = NULL;
static Py_ssize_t registry_count = 0;

static void free_entries(CacheEntry *e)
{
    while (e != NULL) {
        CacheEntry *next = e->next;
        Py_XDECREF(e->guard);
        Py_XDECREF(e->code);
        PyMem_Free(e);
        e = next;
    }
}

static void registry_unlink(CodeExtra *ex)
{
    if (ex->reg_prev != NULL) {
        ex->reg_prev->reg_next = ex->reg_next;
    }
    else {
        registry = ex->reg_next;
    }
    if (ex->reg_next != NULL) {
        ex->reg_next->reg_prev = ex->reg_prev;
    }
    ex->reg_prev = ex->reg_next = NULL;
    registry_count--;
}

/* co_extra free function: called with NULL for unset slots (code_dealloc calls it for every
 * slot below ce_size), so NULL must be accepted. */
static void extra_free(void *ptr)
{
    CodeExtra *ex = (CodeExtra *)ptr;
    if (ex == NULL) {
        return;
    }
    registry_unlink(ex);
    CacheEntry *entries = ex->head;
    PyObject *plain = ex->plain_types;
    ex->head = NULL;
    PyMem_Free(ex);
    /* DECREFs last: they may free other code objects, re-entering this function. */
    free_entries(entries);
    Py_XDECREF(plain);
}

/* Check the mirrored co_extra layout on a scratch code object (see compat.h): attach real
 * state through the API, read it back through the mirror; the code object's death frees it. */
static void verify_mirror(void)
{
    PyCodeObject *co = PyCode_NewEmpty("<pyjit-probe>", "probe", 1);
    if (co == NULL) {
        PyErr_Clear();
        return;
    }
    CodeExtra *ex = pyjit_extra_ensure(co); /* mirror_ok is still 0: goes through the API */
    if (ex == NULL) {
        PyErr_Clear();
    }
    else {
        pyjit_code_extra_mirror *holder = (pyjit_code_extra_mirror *)co->co_extra;
        mirror_ok = holder != NULL && holder->ce_size > extra_index &&
                    holder->ce_extras[extra_index] == (void *)ex;
    }
    Py_DECREF(co);
}

int pyjit_cache_init(void)
{
    if (extra_index >= 0) {
        return 0;
    }
    extra_index = PYJIT_RequestCodeExtraIndex(extra_free);
    if (extra_index < 0) {
        /* The interpreter has no free co_extra slot; it does not set an exception itself. */
        PyErr_SetString(PyExc_RuntimeError,
                        "pyjit._C: no free co_extra index (too many tools use code extras)");
        return -1;
    }
    verify_mirror();
    return 0;
}

CodeExtra *pyjit_extra_get_slow(PyCodeObject *co)
{
    void *ptr = NULL;
    if (PYJIT_Code_GetExtra((PyObject *)co, extra_index, &ptr) < 0) {
        PyErr_Clear();
        return NULL;
    }
    return (CodeExtra *)ptr;
}

CodeExtra *pyjit_extra_ensure(PyCodeObject *co)
{
    void *ptr = NULL;
    if (PYJIT_Code_GetExtra((PyObject *)co, extra_index, &ptr) < 0) {
        return NULL;
    }
    if (ptr != NULL) {
        return (CodeExtra *)ptr;
    }
    CodeExtra *ex = PyMem_Calloc(1, sizeof(CodeExtra));
    if (ex == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    /* The slot is empty here, so SetExtra cannot call extra_free on an old value. */
    if (PYJIT_Code_SetExtra((PyObject *)co, extra_index, ex) < 0) {
        PyMem_Free(ex);
        return NULL;
    }
    ex->reg_next = registry;
    if (registry != NULL) {
        registry->reg_prev = ex;
    }
    registry = ex;
    registry_count++;
    return ex;
}

int pyjit_cache_prepend(CodeExtra *ex, PyObject *guard, PyObject *code)
{
    CacheEntry *e = PyMem_Malloc(sizeof(CacheEntry));
    if (e == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (guard == Py_None) {
        guard = NULL;
    }
    Py_XINCREF(guard);
    Py_INCREF(code);
    e->guard = guard;
    e->code = code;
    e->next = ex->head;
    ex->head = e;
    ex->n_entries++;
    ex->version++;
    return 0;
}

void pyjit_cache_move_to_front(CodeExtra *ex, CacheEntry *prev, CacheEntry *e)
{
    if (prev == NULL) {
        return; /* already the head */
    }
    prev->next = e->next;
    e->next = ex->head;
    ex->head = e;
    ex->version++;
}

void pyjit_cache_reset_all(void)
{
    /* Detach everything first, DECREF afterwards: a DECREF may free a code object and so
     * unlink a CodeExtra from the registry we are walking. */
    CacheEntry *doomed = NULL;
    /* Plain marks are parked in a list (which keeps them alive) and released with it. */
    PyObject *doomed_plain = PyList_New(0);
    for (CodeExtra *ex = registry; ex != NULL; ex = ex->reg_next) {
        if (ex->plain_types != NULL) {
            if (doomed_plain == NULL || PyList_Append(doomed_plain, ex->plain_types) < 0) {
                PyErr_Clear(); /* out of memory: keep the mark rather than free it while walking */
            }
            else {
                Py_SETREF(ex->plain_types, NULL); /* the list holds it: no deallocation here */
            }
        }
        CacheEntry *e = ex->head;
        if (e != NULL) {
            CacheEntry *tail = e;
            while (tail->next != NULL) {
                tail = tail->next;
            }
            tail->next = doomed;
            doomed = e;
        }
        ex->head = NULL;
        ex->n_entries = 0;
        ex->version++;
        ex->skip = 0;
        ex->run_only = 0;
        ex->limit_reported = 0;
    }
    free_entries(doomed);
    Py_XDECREF(doomed_plain);
}

Py_ssize_t pyjit_cache_count_extras(void)
{
    return registry_count;
}
