/* cache.h: per-code-object state kept in co_extra (cache entries, skip/run-only marks).
 * See cache.c for ownership rules. */
#ifndef PYJIT_CACHE_H
#define PYJIT_CACHE_H

#include "compat.h"

/* One compiled version of a code object: run `code` when `guard` passes. */
typedef struct CacheEntry {
    struct CacheEntry *next;
    PyObject *guard; /* strong; a GuardTree, or NULL meaning "always true" */
    PyObject *code;  /* strong; replacement code object with the flat signature */
} CacheEntry;

/* Everything pyjit stores about one code object. Lives until the code object dies
 * (freed by the co_extra free function) and is only ever emptied, never freed, by reset. */
typedef struct CodeExtra {
    struct CodeExtra *reg_prev, *reg_next; /* registry of every live CodeExtra (for reset) */
    CacheEntry *head;                      /* most recently hit first */
    int n_entries;
    uint32_t version;       /* bumped on every change of the entry list (iteration safety) */
    uint8_t skip;           /* never call back, never look at entries: default evaluator */
    uint8_t run_only;       /* use entries, never call back */
    uint8_t limit_reported; /* the limit callback already ran for this code object */
    /* Strong tuple of types, or NULL. A "plain" mark: a call whose every argument slot holds
     * an object of exactly one of these types runs natively with no callback (Python proved
     * such calls reach no tensor); any other call is looked up / called back as usual. */
    PyObject *plain_types;
} CodeExtra;

int pyjit_cache_init(void);
extern PYJIT_INTERNAL Py_ssize_t pyjit_extra_index;
extern PYJIT_INTERNAL int pyjit_mirror_ok;
CodeExtra *pyjit_extra_get_slow(PyCodeObject *co);

/* Borrowed, or NULL when the code object has no pyjit state. Never sets an exception.
 * Inline: it runs on every intercepted frame (see pyjit_code_extra_mirror in compat.h). */
static inline CodeExtra *pyjit_extra_get_mirrored(PyCodeObject *co) /* only if pyjit_mirror_ok */
{
    pyjit_code_extra_mirror *holder = (pyjit_code_extra_mirror *)co->co_extra;
    if (holder == NULL || pyjit_extra_index >= holder->ce_size) {
        return NULL;
    }
    return (CodeExtra *)holder->ce_extras[pyjit_extra_index];
}

static inline CodeExtra *pyjit_extra_get(PyCodeObject *co)
{
    return pyjit_mirror_ok ? pyjit_extra_get_mirrored(co) : pyjit_extra_get_slow(co);
}
/* Borrowed; creates the state on first use. NULL with an exception on failure. */
CodeExtra *pyjit_extra_ensure(PyCodeObject *co);
/* Prepend an entry (guard may be NULL or Py_None). Returns 0, or -1 with an exception. */
int pyjit_cache_prepend(CodeExtra *ex, PyObject *guard, PyObject *code);
/* Move `e` (whose predecessor is `prev`, NULL if head) to the front. */
void pyjit_cache_move_to_front(CodeExtra *ex, CacheEntry *prev, CacheEntry *e);
/* Drop every entry and every mark of every code object. */
void pyjit_cache_reset_all(void);
/* Number of code objects that carry pyjit state (for tests). */
Py_ssize_t pyjit_cache_count_extras(void);

#endif /* PYJIT_CACHE_H */
