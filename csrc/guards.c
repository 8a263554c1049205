/* guards.c: GuardTree, the compiled guard set of one cache entry.
 *
 * Owns: the accessor/check tree built from Python (pyjit/guards/tree.py is the sugar on
 * top), its evaluation in C on every frame entry, and its introspection (`describe`).
 * A tree is a root (no value) whose children read values from the call: an argument slot,
 * a closure cell, a global or builtin by name, the tuple of all argument slots, or the
 * result of a zero-argument callable. Any node below can read an attribute, an item, the
 * length or the type of its value. Checks sit on nodes and carry the integer id Python
 * gave them. Children are deduplicated on (kind, key), so a shared accessor prefix is
 * evaluated once per check. Evaluation is depth-first in insertion order; the first
 * failing check's id is returned, so Python can explain the failure.
 * Identity checks (check_id, check_type) hold a weak reference when the object allows it:
 * a dead object then fails the guard instead of being kept alive by it.
 */
#include "guards.h"
#include "tensor_check.h"

typedef enum {
    ACC_ROOT, ACC_ARG, ACC_CLOSURE, ACC_GLOBAL, ACC_BUILTIN, ACC_FRAME_ARGS, ACC_CALL,
    ACC_ATTR, ACC_ITEM, ACC_LEN, ACC_TYPE,
} AccessorKind;

static const char *const accessor_names[] = {
    "root", "arg", "closure", "global", "builtin", "frame_args", "call",
    "attr", "item", "len", "type",
};

typedef enum {
    CK_TYPE, CK_ID, CK_EQ, CK_TENSOR, CK_DICT_KEYS, CK_LEN, CK_NOT_NONE, CK_FN,
} CheckKind;

static const char *const check_names[] = {
    "type", "id", "eq", "tensor", "dict_keys", "len", "not_none", "fn",
};

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
} GuardNode;

#define IS_ROOT(n) ((n)->kind == ACC_ROOT)

/* ---------------------------------------------------------------- constants ----------- */

/* check_eq constants: None, bool, int, float, str, bytes and tuples of these take the C fast
 * paths below; any other object is accepted too and compared with exact type + `==`.
 * Equality that also requires the exact same type (1 == 1.0 == True would otherwise let a
 * float or bool reuse code specialised for an int), compares floats bit for bit (NaN equals
 * itself, -0.0 differs from 0.0), and recurses into tuples. 1 equal, 0 not, -1 error. */
static int const_equal(PyObject *value, PyObject *expected)
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
            int r = const_equal(PyTuple_GET_ITEM(value, i), PyTuple_GET_ITEM(expected, i));
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

static inline PyObject *identity_target(const Check *c)
{
    return c->weak ? PYJIT_WEAK_TARGET(c->obj) : c->obj;
}

/* 1 pass, 0 fail, -1 error (treated as fail by the caller). */
static int run_check(const Check *c, PyObject *v)
{
    switch (c->kind) {
    case CK_TYPE:
        return (PyObject *)Py_TYPE(v) == identity_target(c);
    case CK_ID:
        /* A dead weak target reads as Py_None; None itself is never held weakly. */
        return v == identity_target(c) && !(c->weak && v == Py_None);
    case CK_EQ:
        return const_equal(v, c->obj);
    case CK_NOT_NONE:
        return v != Py_None;
    case CK_TENSOR:
        return pyjit_tensor_match(c->tensor, v);
    case CK_LEN: {
        Py_ssize_t n;
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
        return n == c->n;
    }
    case CK_DICT_KEYS: {
        if (!PyDict_Check(v)) {
            return 0;
        }
        Py_ssize_t n = PyTuple_GET_SIZE(c->obj);
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
            int r = const_equal(key, PyTuple_GET_ITEM(c->obj, i));
            Py_DECREF(key);
            if (r != 1) {
                return r;
            }
            i++;
        }
        return i == n;
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
        PyObject *value = PyDict_GetItemWithError(dict, n->key);
        return value ? Py_NewRef(value) : NULL;
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

static long eval_node(GuardNode *n, PyObject *value, EvalCtx *ctx)
{
    /* Arrays are re-read every iteration and checks copied: a Python-level check may add
     * checks to this tree (realloc). Nodes and checks are never removed while it is alive. */
    for (Py_ssize_t i = 0; i < n->n_checks; i++) {
        Check c = n->checks[i];
        int r = run_check(&c, value);
        if (r != 1) {
            if (r < 0 && !swallow_error()) {
                return PYJIT_GUARD_ERROR;
            }
            return c.id;
        }
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
        long r = eval_node(child, child_value, ctx);
        Py_DECREF(child_value);
        if (r != -1) {
            return r; /* a failing id, or PYJIT_GUARD_ERROR */
        }
    }
    return -1;
}

long pyjit_guard_check(PyObject *tree, PyFunctionObject *func, PyObject *const *args,
                       Py_ssize_t nargs)
{
    EvalCtx ctx = {func, args, nargs, NULL};
    Py_INCREF(tree); /* a Python check may drop the last other reference (e.g. reset()) */
    long r = eval_node((GuardNode *)tree, NULL, &ctx);
    Py_XDECREF(ctx.args_tuple);
    Py_DECREF(tree);
    return r;
}

/* ---------------------------------------------------------------- construction -------- */

static GuardNode *node_alloc(PyTypeObject *type, AccessorKind kind)
{
    GuardNode *n = PyObject_GC_New(GuardNode, type);
    if (n == NULL) {
        return NULL;
    }
    n->kind = kind;
    n->index = 0;
    n->key_is_index = 0;
    n->key = NULL;
    n->children = NULL;
    n->n_children = n->cap_children = 0;
    n->checks = NULL;
    n->n_checks = n->cap_checks = 0;
    PyObject_GC_Track(n);
    return n;
}

/* Same (kind, key)? Keys compare by exact type and value (item 1 and item True differ). */
static int same_accessor(GuardNode *c, AccessorKind kind, Py_ssize_t index, PyObject *key)
{
    if (c->kind != kind) {
        return 0;
    }
    switch (kind) {
    case ACC_ARG:
    case ACC_CLOSURE:
        return c->index == index;
    case ACC_CALL:
        return c->key == key;
    case ACC_GLOBAL:
    case ACC_BUILTIN:
    case ACC_ATTR:
    case ACC_ITEM: {
        int r = const_equal(c->key, key);
        if (r < 0) {
            PyErr_Clear();
            return 0;
        }
        return r;
    }
    default:
        return 1;
    }
}

/* The (possibly existing) child of `parent` for (kind, index, key). New reference. */
static PyObject *get_child(GuardNode *parent, AccessorKind kind, Py_ssize_t index, PyObject *key)
{
    for (Py_ssize_t i = 0; i < parent->n_children; i++) {
        if (same_accessor(parent->children[i], kind, index, key)) {
            return Py_NewRef((PyObject *)parent->children[i]);
        }
    }
    if (parent->n_children == parent->cap_children) {
        Py_ssize_t cap = parent->cap_children ? 2 * parent->cap_children : 4;
        GuardNode **grown = PyMem_Realloc(parent->children, (size_t)cap * sizeof(GuardNode *));
        if (grown == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        parent->children = grown;
        parent->cap_children = cap;
    }
    GuardNode *child = node_alloc(&PyjitGuardNode_Type, kind);
    if (child == NULL) {
        return NULL;
    }
    child->index = index;
    child->key = Py_XNewRef(key);
    if (kind == ACC_ITEM && PyLong_CheckExact(key)) {
        Py_ssize_t i = PyLong_AsSsize_t(key);
        if (i == -1 && PyErr_Occurred()) {
            PyErr_Clear(); /* huge int key: use the generic item path */
        }
        else {
            child->index = i;
            child->key_is_index = 1;
        }
    }
    parent->children[parent->n_children++] = child;
    return Py_NewRef((PyObject *)child);
}

static int add_check(GuardNode *n, Check *c)
{
    if (IS_ROOT(n)) {
        PyErr_SetString(PyExc_TypeError,
                        "GuardTree root has no value to check; add checks to an accessor node "
                        "(tree.arg(i), tree.global_(name), ...)");
        return -1;
    }
    if (c->id < 0) {
        PyErr_SetString(PyExc_ValueError, "guard check ids must be >= 0");
        return -1;
    }
    if (n->n_checks == n->cap_checks) {
        Py_ssize_t cap = n->cap_checks ? 2 * n->cap_checks : 2;
        Check *grown = PyMem_Realloc(n->checks, (size_t)cap * sizeof(Check));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        n->checks = grown;
        n->cap_checks = cap;
    }
    n->checks[n->n_checks++] = *c;
    return 0;
}

static void check_release(Check *c)
{
    Py_CLEAR(c->obj);
    if (c->tensor != NULL) {
        pyjit_tensor_spec_free(c->tensor);
        c->tensor = NULL;
    }
}

/* Hold `obj` weakly when its type allows, else strongly. Returns 0 or -1. */
static int hold_identity(Check *c, PyObject *obj)
{
    if (PyType_SUPPORTS_WEAKREFS(Py_TYPE(obj))) {
        PyObject *wr = PyWeakref_NewRef(obj, NULL);
        if (wr != NULL) {
            c->obj = wr;
            c->weak = 1;
            return 0;
        }
        if (!PyErr_ExceptionMatches(PyExc_TypeError)) {
            return -1;
        }
        PyErr_Clear();
    }
    c->obj = Py_NewRef(obj);
    c->weak = 0;
    return 0;
}

/* ---------------------------------------------------------------- Python methods ------ */

static PyObject *require_root(GuardNode *self, const char *what)
{
    if (!IS_ROOT(self)) {
        PyErr_Format(PyExc_TypeError, "%s() is only available on the GuardTree root", what);
        return NULL;
    }
    return Py_None;
}

static PyObject *require_value_node(GuardNode *self, const char *what)
{
    if (IS_ROOT(self)) {
        PyErr_Format(PyExc_TypeError,
                     "%s() needs a value: call it on an accessor node, not on the GuardTree root",
                     what);
        return NULL;
    }
    return Py_None;
}

static PyObject *node_index_accessor(GuardNode *self, PyObject *arg, AccessorKind kind,
                                     const char *what)
{
    if (require_root(self, what) == NULL) {
        return NULL;
    }
    Py_ssize_t index = PyLong_AsSsize_t(arg);
    if (index == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (index < 0) {
        PyErr_Format(PyExc_ValueError, "%s(): index must be >= 0", what);
        return NULL;
    }
    return get_child(self, kind, index, NULL);
}

static PyObject *node_name_accessor(GuardNode *self, PyObject *arg, AccessorKind kind,
                                    const char *what)
{
    if ((kind == ACC_ATTR ? require_value_node(self, what) : require_root(self, what)) == NULL) {
        return NULL;
    }
    if (!PyUnicode_CheckExact(arg)) {
        PyErr_Format(PyExc_TypeError, "%s(): name must be a str", what);
        return NULL;
    }
    Py_INCREF(arg);
    PyUnicode_InternInPlace(&arg); /* identical names hit the dict pointer fast path */
    PyObject *res = get_child(self, kind, 0, arg);
    Py_DECREF(arg);
    return res;
}

static PyObject *m_arg(GuardNode *self, PyObject *arg) { return node_index_accessor(self, arg, ACC_ARG, "arg"); }
static PyObject *m_closure(GuardNode *self, PyObject *arg) { return node_index_accessor(self, arg, ACC_CLOSURE, "closure"); }
static PyObject *m_global(GuardNode *self, PyObject *arg) { return node_name_accessor(self, arg, ACC_GLOBAL, "global_"); }
static PyObject *m_builtin(GuardNode *self, PyObject *arg) { return node_name_accessor(self, arg, ACC_BUILTIN, "builtin"); }
static PyObject *m_attr(GuardNode *self, PyObject *arg) { return node_name_accessor(self, arg, ACC_ATTR, "attr"); }

static PyObject *m_frame_args(GuardNode *self, PyObject *Py_UNUSED(ignored))
{
    if (require_root(self, "frame_args") == NULL) {
        return NULL;
    }
    return get_child(self, ACC_FRAME_ARGS, 0, NULL);
}

static PyObject *m_call(GuardNode *self, PyObject *fn)
{
    if (require_root(self, "call") == NULL) {
        return NULL;
    }
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "call(): argument must be a zero-argument callable");
        return NULL;
    }
    return get_child(self, ACC_CALL, 0, fn);
}

static PyObject *m_item(GuardNode *self, PyObject *key)
{
    if (require_value_node(self, "item") == NULL) {
        return NULL;
    }
    if (PyObject_Hash(key) == -1) {
        return NULL; /* unhashable keys cannot be dict keys either */
    }
    return get_child(self, ACC_ITEM, 0, key);
}

static PyObject *m_len(GuardNode *self, PyObject *Py_UNUSED(ignored))
{
    if (require_value_node(self, "len") == NULL) {
        return NULL;
    }
    return get_child(self, ACC_LEN, 0, NULL);
}

static PyObject *m_type(GuardNode *self, PyObject *Py_UNUSED(ignored))
{
    if (require_value_node(self, "type") == NULL) {
        return NULL;
    }
    return get_child(self, ACC_TYPE, 0, NULL);
}

/* Argument-count check for METH_FASTCALL methods (the CPython helper is private in 3.13). */
static int check_nargs(const char *name, Py_ssize_t nargs, Py_ssize_t min, Py_ssize_t max)
{
    if (nargs < min || nargs > max) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, max, nargs);
        return 0;
    }
    return 1;
}

/* Parse the trailing id argument shared by every check_* method. */
static int parse_id(PyObject *arg, long *id)
{
    if (!PyLong_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "guard check id must be an int");
        return -1;
    }
    *id = PyLong_AsLong(arg);
    return (*id == -1 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *finish_check(GuardNode *self, Check *c)
{
    if (add_check(self, c) < 0) {
        check_release(c);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *m_check_type(GuardNode *self, PyObject *const *args, Py_ssize_t nargs)
{
    Check c = {CK_TYPE, 0, 0, NULL, 0, NULL};
    if (!check_nargs("check_type", nargs, 2, 2) || parse_id(args[1], &c.id) < 0) {
        return NULL;
    }
    if (!PyType_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "check_type(): expected a type");
        return NULL;
    }
    if (hold_identity(&c, args[0]) < 0) {
        return NULL;
    }
    return finish_check(self, &c);
}

static PyObject *m_check_id(GuardNode *self, PyObject *const *args, Py_ssize_t nargs)
{
    Check c = {CK_ID, 0, 0, NULL, 0, NULL};
    if (!check_nargs("check_id", nargs, 2, 2) || parse_id(args[1], &c.id) < 0) {
        return NULL;
    }
    if (hold_identity(&c, args[0]) < 0) {
        return NULL;
    }
    return finish_check(self, &c);
}

static PyObject *m_check_eq(GuardNode *self, PyObject *const *args, Py_ssize_t nargs)
{
    Check c = {CK_EQ, 0, 0, NULL, 0, NULL};
    if (!check_nargs("check_eq", nargs, 2, 2) || parse_id(args[1], &c.id) < 0) {
        return NULL;
    }
    c.obj = Py_NewRef(args[0]);
    return finish_check(self, &c);
}

static PyObject *m_check_tensor(GuardNode *self, PyObject *const *args, Py_ssize_t nargs)
{
    Check c = {CK_TENSOR, 0, 0, NULL, 0, NULL};
    if (!check_nargs("check_tensor", nargs, 7, 7) || parse_id(args[6], &c.id) < 0) {
        return NULL;
    }
    int requires_grad = PyObject_IsTrue(args[3]);
    if (requires_grad < 0) {
        return NULL;
    }
    c.tensor = pyjit_tensor_spec_new(args[0], args[1], args[2], requires_grad, args[4], args[5]);
    if (c.tensor == NULL) {
        return NULL;
    }
    return finish_check(self, &c);
}

static PyObject *m_check_dict_keys(GuardNode *self, PyObject *const *args, Py_ssize_t nargs)
{
    Check c = {CK_DICT_KEYS, 0, 0, NULL, 0, NULL};
    if (!check_nargs("check_dict_keys", nargs, 2, 2) || parse_id(args[1], &c.id) < 0) {
        return NULL;
    }
    if (!PyTuple_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "check_dict_keys(): keys must be a tuple, in dict order");
        return NULL;
    }
    c.obj = Py_NewRef(args[0]);
    return finish_check(self, &c);
}

static PyObject *m_check_len(GuardNode *self, PyObject *const *args, Py_ssize_t nargs)
{
    Check c = {CK_LEN, 0, 0, NULL, 0, NULL};
    if (!check_nargs("check_len", nargs, 2, 2) || parse_id(args[1], &c.id) < 0) {
        return NULL;
    }
    c.n = PyLong_AsSsize_t(args[0]);
    if (c.n == -1 && PyErr_Occurred()) {
        return NULL;
    }
    return finish_check(self, &c);
}

static PyObject *m_check_not_none(GuardNode *self, PyObject *id_arg)
{
    Check c = {CK_NOT_NONE, 0, 0, NULL, 0, NULL};
    if (parse_id(id_arg, &c.id) < 0) {
        return NULL;
    }
    return finish_check(self, &c);
}

static PyObject *m_check_fn(GuardNode *self, PyObject *const *args, Py_ssize_t nargs)
{
    Check c = {CK_FN, 0, 0, NULL, 0, NULL};
    if (!check_nargs("check_fn", nargs, 2, 2) || parse_id(args[1], &c.id) < 0) {
        return NULL;
    }
    if (!PyCallable_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "check_fn(): expected a callable taking the value");
        return NULL;
    }
    c.obj = Py_NewRef(args[0]);
    return finish_check(self, &c);
}

static PyObject *m_check(GuardNode *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (require_root(self, "check") == NULL || !check_nargs("check", nargs, 2, 2)) {
        return NULL;
    }
    if (!PyFunction_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "check(func, args): expected a function and a tuple");
        return NULL;
    }
    PyObject *tup = args[1];
    long r = pyjit_guard_check((PyObject *)self, (PyFunctionObject *)args[0],
                               &PyTuple_GET_ITEM(tup, 0), PyTuple_GET_SIZE(tup));
    return r == PYJIT_GUARD_ERROR ? NULL : PyLong_FromLong(r);
}

static PyObject *describe_check(const Check *c)
{
    PyObject *payload;
    switch (c->kind) {
    case CK_TYPE:
    case CK_ID: {
        PyObject *target = identity_target(c);
        payload = Py_NewRef(target); /* Py_None once a weakly held object died */
        break;
    }
    case CK_TENSOR:
        payload = pyjit_tensor_spec_describe(c->tensor);
        break;
    case CK_LEN:
        payload = PyLong_FromSsize_t(c->n);
        break;
    case CK_NOT_NONE:
        payload = Py_NewRef(Py_None);
        break;
    default:
        payload = Py_NewRef(c->obj);
    }
    if (payload == NULL) {
        return NULL;
    }
    return Py_BuildValue("(slN)", check_names[c->kind], c->id, payload);
}

/* describe() -> {"kind", "key", "checks": [(kind, id, payload)], "children": [...]} */
static PyObject *m_describe(GuardNode *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *checks = PyList_New(0), *children = PyList_New(0), *key = NULL;
    if (checks == NULL || children == NULL) {
        goto error;
    }
    for (Py_ssize_t i = 0; i < self->n_checks; i++) {
        PyObject *d = describe_check(&self->checks[i]);
        if (d == NULL || PyList_Append(checks, d) < 0) {
            Py_XDECREF(d);
            goto error;
        }
        Py_DECREF(d);
    }
    for (Py_ssize_t i = 0; i < self->n_children; i++) {
        PyObject *d = m_describe(self->children[i], NULL);
        if (d == NULL || PyList_Append(children, d) < 0) {
            Py_XDECREF(d);
            goto error;
        }
        Py_DECREF(d);
    }
    if (self->kind == ACC_ARG || self->kind == ACC_CLOSURE) {
        key = PyLong_FromSsize_t(self->index);
    }
    else {
        key = Py_NewRef(self->key ? self->key : Py_None);
    }
    if (key == NULL) {
        goto error;
    }
    return Py_BuildValue("{sssNsNsN}", "kind", accessor_names[self->kind], "key", key,
                         "checks", checks, "children", children);
error:
    Py_XDECREF(checks);
    Py_XDECREF(children);
    Py_XDECREF(key);
    return NULL;
}

static PyObject *m_kind(GuardNode *self, void *Py_UNUSED(closure))
{
    return PyUnicode_FromString(accessor_names[self->kind]);
}

static PyMethodDef node_methods[] = {
    {"arg", (PyCFunction)m_arg, METH_O, "arg(slot) -> node: the frame's argument slot (root only)."},
    {"closure", (PyCFunction)m_closure, METH_O, "closure(i) -> node: contents of the function's i-th closure cell (root only)."},
    {"global_", (PyCFunction)m_global, METH_O, "global_(name) -> node: the function's global `name` (root only)."},
    {"builtin", (PyCFunction)m_builtin, METH_O, "builtin(name) -> node: the function's builtin `name` (root only)."},
    {"frame_args", (PyCFunction)m_frame_args, METH_NOARGS, "frame_args() -> node: tuple of all argument slots (root only)."},
    {"call", (PyCFunction)m_call, METH_O, "call(fn) -> node: result of fn() (root only)."},
    {"attr", (PyCFunction)m_attr, METH_O, "attr(name) -> node: getattr(value, name)."},
    {"item", (PyCFunction)m_item, METH_O, "item(key) -> node: value[key]."},
    {"len", (PyCFunction)m_len, METH_NOARGS, "len() -> node: len(value)."},
    {"type", (PyCFunction)m_type, METH_NOARGS, "type() -> node: type(value)."},
    {"check_type", (PyCFunction)(void (*)(void))m_check_type, METH_FASTCALL, "check_type(t, id): type(value) is t."},
    {"check_id", (PyCFunction)(void (*)(void))m_check_id, METH_FASTCALL, "check_id(obj, id): value is obj (weakly held where possible)."},
    {"check_eq", (PyCFunction)(void (*)(void))m_check_eq, METH_FASTCALL, "check_eq(const, id): same type and equal value."},
    {"check_tensor", (PyCFunction)(void (*)(void))m_check_tensor, METH_FASTCALL,
     "check_tensor(tensor_type, dtype, device, requires_grad, sizes, strides, id)."},
    {"check_dict_keys", (PyCFunction)(void (*)(void))m_check_dict_keys, METH_FASTCALL, "check_dict_keys(keys, id): dict with these keys in this order."},
    {"check_len", (PyCFunction)(void (*)(void))m_check_len, METH_FASTCALL, "check_len(n, id): len(value) == n."},
    {"check_not_none", (PyCFunction)m_check_not_none, METH_O, "check_not_none(id): value is not None."},
    {"check_fn", (PyCFunction)(void (*)(void))m_check_fn, METH_FASTCALL, "check_fn(fn, id): bool(fn(value))."},
    {"check", (PyCFunction)(void (*)(void))m_check, METH_FASTCALL, "check(func, args) -> -1 if all pass, else the failing id (root only)."},
    {"describe", (PyCFunction)m_describe, METH_NOARGS, "describe() -> nested dict of accessors and checks."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef node_getset[] = {
    {"kind", (getter)m_kind, NULL, "accessor kind of this node", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ---------------------------------------------------------------- type slots ---------- */

static int node_traverse(GuardNode *self, visitproc visit, void *arg)
{
    Py_VISIT(self->key);
    for (Py_ssize_t i = 0; i < self->n_children; i++) {
        Py_VISIT((PyObject *)self->children[i]);
    }
    for (Py_ssize_t i = 0; i < self->n_checks; i++) {
        Py_VISIT(self->checks[i].obj);
        if (self->checks[i].tensor != NULL) {
            int r = pyjit_tensor_spec_traverse(self->checks[i].tensor, visit, arg);
            if (r) {
                return r;
            }
        }
    }
    return 0;
}

static int node_clear(GuardNode *self)
{
    Py_CLEAR(self->key);
    GuardNode **children = self->children;
    Py_ssize_t n_children = self->n_children;
    Check *checks = self->checks;
    Py_ssize_t n_checks = self->n_checks;
    /* Detach first: DECREFs below may run code that looks at this node. */
    self->children = NULL;
    self->n_children = self->cap_children = 0;
    self->checks = NULL;
    self->n_checks = self->cap_checks = 0;
    for (Py_ssize_t i = 0; i < n_children; i++) {
        Py_DECREF((PyObject *)children[i]);
    }
    for (Py_ssize_t i = 0; i < n_checks; i++) {
        check_release(&checks[i]);
    }
    PyMem_Free(children);
    PyMem_Free(checks);
    return 0;
}

static void node_dealloc(GuardNode *self)
{
    PyObject_GC_UnTrack(self);
    node_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *tree_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "GuardTree() takes no arguments");
        return NULL;
    }
    return (PyObject *)node_alloc(type, ACC_ROOT);
}

PyTypeObject PyjitGuardNode_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyjit._C.GuardNode",
    .tp_doc = "An accessor in a GuardTree: reads a value, checks it, feeds child accessors.",
    .tp_basicsize = sizeof(GuardNode),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .tp_dealloc = (destructor)node_dealloc,
    .tp_traverse = (traverseproc)node_traverse,
    .tp_clear = (inquiry)node_clear,
    .tp_methods = node_methods,
    .tp_getset = node_getset,
};

PyTypeObject PyjitGuardTree_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyjit._C.GuardTree",
    .tp_doc = "Root of a compiled guard set; check(func, args) -> -1 or the failing id.",
    .tp_basicsize = sizeof(GuardNode),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)node_dealloc,
    .tp_traverse = (traverseproc)node_traverse,
    .tp_clear = (inquiry)node_clear,
    .tp_new = tree_new,
};

int pyjit_guards_ready(PyObject *module)
{
    PyjitGuardTree_Type.tp_base = &PyjitGuardNode_Type;
    if (PyType_Ready(&PyjitGuardNode_Type) < 0 || PyType_Ready(&PyjitGuardTree_Type) < 0) {
        return -1;
    }
    if (PyModule_AddObjectRef(module, "GuardNode", (PyObject *)&PyjitGuardNode_Type) < 0 ||
        PyModule_AddObjectRef(module, "GuardTree", (PyObject *)&PyjitGuardTree_Type) < 0) {
        return -1;
    }
    return 0;
}
