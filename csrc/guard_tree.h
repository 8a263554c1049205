/* guard_tree.h: private to the guard tree (guards.c evaluates, guard_api.c builds and
 * exposes it to Python). Not part of pyjit._C's C interface (that is guards.h). */
#ifndef PYJIT_GUARD_TREE_H
#define PYJIT_GUARD_TREE_H

#include "guards.h"
#include "tensor_check.h"

typedef enum {
    ACC_ROOT, ACC_ARG, ACC_CLOSURE, ACC_GLOBAL, ACC_BUILTIN, ACC_FRAME_ARGS, ACC_CALL,
    ACC_ATTR, ACC_ITEM, ACC_LEN, ACC_TYPE,
} AccessorKind;

extern const char *const pyjit_accessor_names[];

typedef enum {
    CK_TYPE, CK_ID, CK_EQ, CK_TENSOR, CK_DICT_KEYS, CK_LEN, CK_NOT_NONE, CK_FN,
} CheckKind;

extern const char *const pyjit_check_names[];

typedef struct {
    CheckKind kind;
    long id;
    int weak;          /* obj is a weakref standing for the real target (identity checks) */
    PyObject *obj;     /* type / target / constant / keys tuple / callable; strong */
    Py_ssize_t n;      /* CK_LEN */
    TensorSpec *tensor; /* CK_TENSOR; owned */
} Check;

typedef struct GuardNode {
    PyObject_HEAD
    AccessorKind kind;
    Py_ssize_t index;  /* ACC_ARG slot, ACC_CLOSURE index, ACC_ITEM int key (if key_is_index) */
    int key_is_index;
    PyObject *key;     /* name, item key or callable; strong, may be NULL */
    struct GuardNode **children;
    Py_ssize_t n_children, cap_children;
    Check *checks;
    Py_ssize_t n_checks, cap_checks;
    /* ACC_GLOBAL/ACC_BUILTIN: the last successful lookup, valid while that dict (same
     * address, same version tag) is unchanged. Borrowed: only ever compared, and the value
     * is still held by that unchanged dict. Version tags are never reused (guards.c). */
    PyObject *cache_dict;
    uint64_t cache_version;
    PyObject *cache_value;
} GuardNode;

#define IS_ROOT(n) ((n)->kind == ACC_ROOT)

static inline PyObject *identity_target(const Check *c)
{
    return c->weak ? PYJIT_WEAK_TARGET(c->obj) : c->obj;
}

/* Exact-type equality used by check_eq, check_dict_keys and accessor deduplication. */
int pyjit_const_equal(PyObject *value, PyObject *expected);

#endif /* PYJIT_GUARD_TREE_H */
