/* guard_tree.h: private to the guard tree (guards.c evaluates, guard_api.c builds and
 * exposes it to Python). Not part of pyjit._C's C interface (that is guards.h). */
#ifndef PYJIT_GUARD_TREE_H
#define PYJIT_GUARD_TREE_H

#include "guards.h"
#include "tensor_check.h"
#include "shape_program.h"

typedef enum {
    ACC_ROOT, ACC_ARG, ACC_CLOSURE, ACC_GLOBAL, ACC_BUILTIN, ACC_FRAME_ARGS, ACC_CALL,
    ACC_ATTR, ACC_ITEM, ACC_LEN, ACC_TYPE, ACC_DICT_KEYS, ACC_DICT_VALUES,
} AccessorKind;

extern const char *const pyjit_accessor_names[];

typedef enum {
    CK_TYPE, CK_ID, CK_EQ, CK_TENSOR, CK_DICT_KEYS, CK_LEN, CK_NOT_NONE, CK_FN, CK_ODICT_KEYS,
    CK_CONTAINS,
} CheckKind;
/* Symbol checks (TreeShape.programs) are not Checks: they run after the walk, on the root. */

extern const char *const pyjit_check_names[];

typedef struct {
    CheckKind kind;
    long id;
    int weak;          /* obj is a weakref standing for the real target (identity checks) */
    PyObject *obj;     /* type / target / constant / keys tuple / (keys, keys) / callable; strong */
    Py_ssize_t n;      /* CK_LEN: the length; CK_CONTAINS: 1 if the key must be present */
    TensorSpec *tensor; /* CK_TENSOR; owned */
} Check;

/* The shape-guard state of a tree (on the root only, allocated on first use). */
typedef struct {
    uint8_t bound[PYJIT_MAX_SLOTS]; /* slot k is bound by some tensor check of the tree */
    Py_ssize_t n_slots;             /* 1 + the largest slot bound or read by a program */
    SymProgram *programs;           /* symbol checks, in insertion order */
    Py_ssize_t n_programs, cap_programs;
} TreeShape;

typedef struct GuardNode {
    PyObject_HEAD
    /* The tree's root (the root itself for the root), borrowed: set to NULL in every node
     * below a node that is cleared, so it never dangles. Used to register slot bindings. */
    struct GuardNode *root;
    TreeShape *shape;  /* root only; NULL until a binding or symbol check is added */
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
