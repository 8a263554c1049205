/* guards.c: evaluation of a GuardTree on a frame's arguments (the hot path).
 *
 * Owns: constant comparison, the checks, the accessors and the depth-first walk that
 * returns the first failing check id. Construction and the Python methods live in
 * guard_api.c; the node structs in guard_tree.h. Semantics (docs/internals.md):
 * a node's checks run before its children, children in insertion order; an accessor or check
 * raising an Exception fails the first check below it; KeyboardInterrupt/SystemExit propagate.
 */
#include "guard_tree.h"

const char *const pyjit_accessor_names[] = {
    "root", "arg", "closure", "global", "builtin", "frame_args", "call",
    "attr", "item", "len", "type", "dict_keys", "dict_values",
};

const char *const pyjit_check_names[] = {
    "type", "id", "eq", "tensor", "dict_keys", "len", "not_none", "fn", "odict_keys", "contains",
};

/* ---------------------------------------------------------------- constants ----------- */

/* check_eq constants: None, bool, int, float, str, bytes and tuples of these take the C fast
 * paths below; any other object is accepted too and compared with exact type + `==`.
 * Equality that also requires the exact same type (1 == 1.0 == True would otherwise let a
 * float or bool reuse code specialised for an int), compares floats bit for bit (NaN equals
 * itself, -0.0 differs from 0.0), and recurses into tuples. 1 equal, 0 not, -1 error. */
int pyjit_const_equal(PyObject *value, PyObject *expected)
{
    if (value == expected) {
        return 1;
    }
    if (Py_TYPE(value) != Py_TYPE(expected)) {
        return 0;
    }
    if (PyFloat_CheckExact(value)) {
        double a = PyFloat_AS_DOUBLE(value), b = PyFloat_AS_DOUBLE(expected);
        return memcmp(&a, &b, sizeof(double)) == 0;
    }
    if (PyTuple_CheckExact(value)) {
        Py_ssize_t n = PyTuple_GET_SIZE(value);
        if (n != PyTuple_GET_SIZE(expected)) {
            return 0;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            int r = pyjit_const_equal(PyTuple_GET_ITEM(value, i), PyTuple_GET_ITEM(expected, i));
            if (r != 1) {
                return r;
            }
        }
        return 1;
    }
    if (value == Py_None || PyBool_Check(value)) {
        return 0; /* singletons: identity already failed */
    }
    return PyObject_RichCompareBool(value, expected, Py_EQ);
}

/* ---------------------------------------------------------------- checks -------------- */

/* CK_DICT_KEYS on a dict's storage (PyDict_Next: what dict iteration follows). */
static int dict_keys_in_storage_order(PyObject *v, PyObject *keys)
{
    Py_ssize_t n = PyTuple_GET_SIZE(keys);
    if (PyDict_GET_SIZE(v) != n) {
        return 0;
    }
    Py_ssize_t pos = 0, i = 0;
    PyObject *key, *val;
    while (PyDict_Next(v, &pos, &key, &val)) {
        if (i >= n) {
            return 0;
        }
        /* key is borrowed; a user __eq__ could mutate the dict, so hold it. */
        Py_INCREF(key);
        int r = pyjit_const_equal(key, PyTuple_GET_ITEM(keys, i));
        Py_DECREF(key);
        if (r != 1) {
            return r;
        }
        i++;
    }
    return i == n;
}

/* CK_DICT_KEYS on an OrderedDict: its keys in iteration order, through OrderedDict's own C
 * iterator (never a subclass's Python __iter__). The iterator raises if the dict changes
 * under it (a user __eq__): an error, i.e. a failure. */
static int dict_keys_in_odict_order(PyObject *v, PyObject *keys)
{
    Py_ssize_t n = PyTuple_GET_SIZE(keys);
    if (PyDict_GET_SIZE(v) != n) {
        return 0;
    }
    PyObject *it = PyODict_Type.tp_iter(v);
    if (it == NULL) {
        return -1;
    }
    Py_ssize_t i = 0;
    int r = 1;
    PyObject *key;
    while ((key = PyIter_Next(it)) != NULL) {
        r = i < n ? pyjit_const_equal(key, PyTuple_GET_ITEM(keys, i)) : 0;
        Py_DECREF(key);
        if (r != 1) {
            break;
        }
        i++;
    }
    Py_DECREF(it);
    if (r == 1 && PyErr_Occurred()) {
        return -1;
    }
    return r == 1 ? i == n : r;
}

/* 1 pass, 0 fail, -1 error (treated as fail by the caller). `c` points into its node's
 * check array, which a Python-level check may grow (realloc): every field is read before any
 * Python code can run (objects it names stay alive: checks are never removed). */
static inline int run_check(const Check *c, PyObject *v, const SlotFrame *slots)
{
    switch (c->kind) {
    case CK_TYPE:
        return (PyObject *)Py_TYPE(v) == identity_target(c);
    case CK_ID:
        /* A dead weak target reads as Py_None; None itself is never held weakly. */
        return v == identity_target(c) && !(c->weak && v == Py_None);
    case CK_EQ:
        return pyjit_const_equal(v, c->obj);
    case CK_NOT_NONE:
        return v != Py_None;
    case CK_TENSOR:
        return pyjit_tensor_match(c->tensor, v, slots);
    case CK_LEN: {
        Py_ssize_t expected = c->n, n;
        if (PyList_CheckExact(v)) {
            n = PyList_GET_SIZE(v);
        }
        else if (PyTuple_CheckExact(v)) {
            n = PyTuple_GET_SIZE(v);
        }
        else if (PyDict_CheckExact(v)) {
            n = PyDict_GET_SIZE(v);
        }
        else {
            n = PyObject_Size(v);
            if (n < 0) {
                return -1;
            }
        }
        return n == expected;
    }
    case CK_DICT_KEYS:
        if (PyDict_CheckExact(v)) {
            return dict_keys_in_storage_order(v, c->obj);
        }
        if (!PyDict_Check(v)) {
            return 0;
        }
        if (PyODict_Check(v)) {
            /* An OrderedDict (or subclass) iterates its own linked list, which move_to_end and
             * popitem(last=False) reorder without touching the storage: both must match (a
             * trace may read either; one reordered when traced uses CK_ODICT_KEYS). */
            int r = dict_keys_in_odict_order(v, c->obj);
            return r == 1 ? dict_keys_in_storage_order(v, c->obj) : r;
        }
        /* Other dict subclasses iterate the storage (a Python __iter__/keys is traced). */
        return dict_keys_in_storage_order(v, c->obj);
    case CK_ODICT_KEYS: {
        /* obj = (keys in iteration order, keys in storage order): an OrderedDict traced while
         * reordered (the two orders differ). */
        if (!PyODict_Check(v)) {
            return 0;
        }
        int r = dict_keys_in_odict_order(v, PyTuple_GET_ITEM(c->obj, 0));
        return r == 1 ? dict_keys_in_storage_order(v, PyTuple_GET_ITEM(c->obj, 1)) : r;
    }
    case CK_CONTAINS: {
        /* `key in value` is (n != 0): a module's __dict__ not shadowing a parameter name.
         * An exact dict answers without Python code; anything else runs its __contains__. */
        int r = PyDict_CheckExact(v) ? PyDict_Contains(v, c->obj) : PySequence_Contains(v, c->obj);
        return r < 0 ? -1 : r == (c->n != 0);
    }
    case CK_FN: {
        PyObject *res = PyObject_CallOneArg(c->obj, v);
        if (res == NULL) {
            return -1;
        }
        int r = PyObject_IsTrue(res);
        Py_DECREF(res);
        return r;
    }
    }
    return 0;
}

/* ---------------------------------------------------------------- evaluation ---------- */

typedef struct {
    PyFunctionObject *func;
    PyObject *const *args;
    Py_ssize_t nargs;
    PyObject *args_tuple; /* built lazily for frame_args() */
    const SlotFrame *slots; /* this evaluation's symbol slots, NULL if the tree has none */
} EvalCtx;

/* New reference to the value a root child reads, or NULL (exception possibly set). */
static PyObject *access_root_child(GuardNode *n, EvalCtx *ctx)
{
    switch (n->kind) {
    case ACC_ARG:
        if (n->index >= ctx->nargs || ctx->args[n->index] == NULL) {
            return NULL;
        }
        return Py_NewRef(ctx->args[n->index]);
    case ACC_CLOSURE: {
        PyObject *closure = ctx->func->func_closure;
        if (closure == NULL || n->index >= PyTuple_GET_SIZE(closure)) {
            return NULL;
        }
        PyObject *value = PyCell_GET(PyTuple_GET_ITEM(closure, n->index));
        return value ? Py_NewRef(value) : NULL; /* empty cell: fails */
    }
    case ACC_GLOBAL:
    case ACC_BUILTIN: {
        PyObject *dict = n->kind == ACC_GLOBAL ? ctx->func->func_globals : ctx->func->func_builtins;
        if (dict == NULL || !PyDict_Check(dict)) {
            return NULL;
        }
        /* Same dict, same version: nothing was stored or deleted since the last lookup, so
         * the value it returned is still there (a new dict never gets an old version). */
        uint64_t version = pyjit_dict_version(dict);
        if (dict == n->cache_dict && version == n->cache_version) {
            return Py_NewRef(n->cache_value);
        }
        PyObject *value = PyDict_GetItemWithError(dict, n->key);
        if (value == NULL) {
            return NULL;
        }
        /* Cached only if the lookup itself changed nothing (a colliding non-str key's
         * __eq__ is Python code and could). */
        if (pyjit_dict_version(dict) == version) {
            n->cache_dict = dict;
            n->cache_version = version;
            n->cache_value = value;
        }
        return Py_NewRef(value);
    }
    case ACC_FRAME_ARGS:
        if (ctx->args_tuple == NULL) {
            ctx->args_tuple = PyTuple_New(ctx->nargs);
            if (ctx->args_tuple == NULL) {
                return NULL;
            }
            for (Py_ssize_t i = 0; i < ctx->nargs; i++) {
                PyTuple_SET_ITEM(ctx->args_tuple, i, Py_NewRef(ctx->args[i]));
            }
        }
        return Py_NewRef(ctx->args_tuple);
    case ACC_CALL:
        return PyObject_CallNoArgs(n->key);
    default:
        return NULL;
    }
}

/* New reference to the value a non-root child reads from `parent`, or NULL. */
static PyObject *access_child(GuardNode *n, PyObject *parent)
{
    switch (n->kind) {
    case ACC_ATTR:
        return PyObject_GetAttr(parent, n->key);
    case ACC_ITEM:
        if (n->key_is_index) {
            Py_ssize_t i = n->index;
            if (PyList_CheckExact(parent)) {
                Py_ssize_t size = PyList_GET_SIZE(parent);
                if (i < 0) {
                    i += size;
                }
                return (i >= 0 && i < size) ? Py_NewRef(PyList_GET_ITEM(parent, i)) : NULL;
            }
            if (PyTuple_CheckExact(parent)) {
                Py_ssize_t size = PyTuple_GET_SIZE(parent);
                if (i < 0) {
                    i += size;
                }
                return (i >= 0 && i < size) ? Py_NewRef(PyTuple_GET_ITEM(parent, i)) : NULL;
            }
        }
        if (PyDict_CheckExact(parent)) {
            PyObject *value = PyDict_GetItemWithError(parent, n->key);
            return value ? Py_NewRef(value) : NULL;
        }
        return PyObject_GetItem(parent, n->key);
    case ACC_LEN: {
        Py_ssize_t size = PyObject_Size(parent);
        return size < 0 ? NULL : PyLong_FromSsize_t(size);
    }
    case ACC_TYPE:
        return Py_NewRef((PyObject *)Py_TYPE(parent));
    case ACC_DICT_KEYS:
    case ACC_DICT_VALUES:
        /* A dict's keys/values as a list in storage order (keys that are not constants, such
         * as tensors, are reached by position: `.dict_keys().item(i)`). */
        if (!PyDict_Check(parent)) {
            PyErr_SetString(PyExc_TypeError, "dict_keys/dict_values guard accessor on a non-dict");
            return NULL;
        }
        return n->kind == ACC_DICT_KEYS ? PyDict_Keys(parent) : PyDict_Values(parent);
    default:
        return NULL;
    }
}

/* Id reported when an accessor fails: the first check at or below it; -1 if none. */
static long first_id(GuardNode *n)
{
    if (n->n_checks > 0) {
        return n->checks[0].id;
    }
    for (Py_ssize_t i = 0; i < n->n_children; i++) {
        long id = first_id(n->children[i]);
        if (id >= 0) {
            return id;
        }
    }
    return -1;
}

/* An error inside a check or accessor: an ordinary Exception means "does not match" and is
 * cleared; anything else (KeyboardInterrupt, SystemExit) must reach the user. */
static inline int swallow_error(void)
{
    if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Clear();
        return 1;
    }
    return 0;
}

/* A node's own checks: -1 all pass, else the failing id or PYJIT_GUARD_ERROR. The array is
 * re-read every iteration: a Python-level check may add checks to this tree (realloc). */
static inline long run_checks(GuardNode *n, PyObject *value, const SlotFrame *slots)
{
    for (Py_ssize_t i = 0; i < n->n_checks; i++) {
        const Check *c = &n->checks[i];
        long id = c->id;
        int r = run_check(c, value, slots);
        if (r != 1) {
            if (r < 0 && !swallow_error()) {
                return PYJIT_GUARD_ERROR;
            }
            return id;
        }
    }
    return -1;
}

static long eval_node(GuardNode *n, PyObject *value, EvalCtx *ctx)
{
    /* Nodes and checks are never removed while the tree is alive; n_children is re-read. */
    long r = run_checks(n, value, ctx->slots);
    if (r != -1) {
        return r;
    }
    for (Py_ssize_t i = 0; i < n->n_children; i++) {
        GuardNode *child = n->children[i];
        PyObject *child_value = IS_ROOT(n) ? access_root_child(child, ctx) : access_child(child, value);
        if (child_value == NULL) {
            if (!swallow_error()) {
                return PYJIT_GUARD_ERROR;
            }
            long id = first_id(child);
            if (id >= 0) {
                return id;
            }
            continue;
        }
        /* Most nodes are leaves (an argument with its checks): no recursive call for them. */
        r = child->n_children == 0 ? run_checks(child, child_value, ctx->slots)
                                   : eval_node(child, child_value, ctx);
        Py_DECREF(child_value);
        if (r != -1) {
            return r; /* a failing id, or PYJIT_GUARD_ERROR */
        }
    }
    return -1;
}

/* The symbol checks, after every other check passed: -1 or the first failing id. Pure C:
 * no Python code runs, so the program array cannot change under the loop. */
static long run_programs(const TreeShape *shape, const SlotFrame *slots)
{
    for (Py_ssize_t i = 0; i < shape->n_programs; i++) {
        if (!pyjit_program_run(&shape->programs[i], slots)) {
            return shape->programs[i].id;
        }
    }
    return -1;
}

long pyjit_guard_check(PyObject *tree, PyFunctionObject *func, PyObject *const *args,
                       Py_ssize_t nargs)
{
    GuardNode *root = (GuardNode *)tree;
    EvalCtx ctx = {func, args, nargs, NULL, NULL};
    /* Slot values belong to this evaluation (re-entrant: a Python check may evaluate this
     * tree again): on the C stack for small trees, else on the heap. Sized once here; a
     * binding added meanwhile to a bigger slot is not stored (its programs then fail). */
    int64_t small_vals[PYJIT_SLOTS_ON_STACK];
    uint8_t small_set[PYJIT_SLOTS_ON_STACK];
    SlotFrame slots = {small_vals, small_set, 0};
    void *heap = NULL;
    if (root->shape != NULL && root->shape->n_slots > 0) {
        Py_ssize_t n = root->shape->n_slots;
        if (n > PYJIT_SLOTS_ON_STACK) {
            heap = PyMem_Malloc((size_t)n * (sizeof(int64_t) + 1));
            if (heap == NULL) {
                PyErr_NoMemory();
                return PYJIT_GUARD_ERROR;
            }
            slots.vals = heap;
            slots.set = (uint8_t *)(slots.vals + n);
        }
        slots.n = n;
        memset(slots.set, 0, (size_t)n);
        ctx.slots = &slots;
    }
    Py_INCREF(tree); /* a Python check may drop the last other reference (e.g. reset()) */
    long r = eval_node(root, NULL, &ctx);
    if (r == -1 && root->shape != NULL) {
        r = run_programs(root->shape, ctx.slots);
    }
    Py_XDECREF(ctx.args_tuple);
    Py_DECREF(tree);
    PyMem_Free(heap);
    return r;
}

