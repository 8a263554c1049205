/* guard_api.c: building GuardTrees from Python and exposing them as pyjit._C types.
 *
 * Owns: node allocation and deduplicated children (a shared accessor prefix is one node),
 * check construction (identity targets held weakly where possible), argument validation with
 * errors that say what to pass, describe(), GC support, and the GuardNode/GuardTree types.
 * Evaluation is in guards.c.
 */
#include "guard_tree.h"

/* ---------------------------------------------------------------- construction -------- */

static GuardNode *node_alloc(PyTypeObject *type, AccessorKind kind)
{
    GuardNode *n = PyObject_GC_New(GuardNode, type);
    if (n == NULL) {
        return NULL;
    }
    n->kind = kind;
    n->root = NULL;
    n->shape = NULL;
    n->index = 0;
    n->key_is_index = 0;
    n->key = NULL;
    n->children = NULL;
    n->n_children = n->cap_children = 0;
    n->checks = NULL;
    n->n_checks = n->cap_checks = 0;
    n->cache_dict = NULL;
    n->cache_version = 0;
    n->cache_value = NULL;
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
        int r = pyjit_const_equal(c->key, key);
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
    child->root = parent->root;
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

static PyObject *m_dict_keys(GuardNode *self, PyObject *Py_UNUSED(ignored))
{
    if (require_value_node(self, "dict_keys") == NULL) {
        return NULL;
    }
    return get_child(self, ACC_DICT_KEYS, 0, NULL);
}

static PyObject *m_dict_values(GuardNode *self, PyObject *Py_UNUSED(ignored))
{
    if (require_value_node(self, "dict_values") == NULL) {
        return NULL;
    }
    return get_child(self, ACC_DICT_VALUES, 0, NULL);
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

/* The root's shape state, allocated on first use; NULL with an exception if it cannot be. */
static TreeShape *tree_shape(GuardNode *root)
{
    if (root->shape == NULL) {
        root->shape = PyMem_Calloc(1, sizeof(TreeShape));
        if (root->shape == NULL) {
            PyErr_NoMemory();
        }
    }
    return root->shape;
}

static PyObject *m_check_tensor(GuardNode *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    Check c = {CK_TENSOR, 0, 0, NULL, 0, NULL};
    PyObject *bind = nargs > 7 ? args[7] : NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_CompareWithASCIIString(name, "bind") != 0 || bind != NULL) {
            PyErr_Format(PyExc_TypeError, "check_tensor() got an unexpected keyword argument %R", name);
            return NULL;
        }
        bind = args[nargs + i];
    }
    if (!check_nargs("check_tensor", nargs, 7, 8) || parse_id(args[6], &c.id) < 0) {
        return NULL;
    }
    int requires_grad = PyObject_IsTrue(args[3]);
    if (requires_grad < 0) {
        return NULL;
    }
    c.tensor = pyjit_tensor_spec_new(args[0], args[1], args[2], requires_grad, args[4], args[5], bind);
    if (c.tensor == NULL) {
        return NULL;
    }
    const TensorSpec *spec = c.tensor;
    TreeShape *shape = NULL;
    if (spec->n_bind > 0) {
        /* Each slot is bound by exactly one (what, dim) of one tensor check in a tree. */
        if (self->root == NULL) {
            PyErr_SetString(PyExc_RuntimeError,
                            "check_tensor(bind=...): this node's GuardTree no longer exists");
            check_release(&c);
            return NULL;
        }
        shape = tree_shape(self->root);
        if (shape == NULL) {
            check_release(&c);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < spec->n_bind; i++) {
            if (shape->bound[spec->bind[i].slot]) {
                PyErr_Format(PyExc_ValueError,
                             "check_tensor: slot %zd is already bound by another tensor check of this tree",
                             spec->bind[i].slot);
                check_release(&c);
                return NULL;
            }
        }
    }
    if (add_check(self, &c) < 0) {
        check_release(&c);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < spec->n_bind; i++) {
        Py_ssize_t slot = spec->bind[i].slot;
        shape->bound[slot] = 1;
        if (slot + 1 > shape->n_slots) {
            shape->n_slots = slot + 1;
        }
    }
    Py_RETURN_NONE;
}

/* check_symbols(program, id): a relation over the bound slots, run after the walk passed. */
static PyObject *m_check_symbols(GuardNode *self, PyObject *const *args, Py_ssize_t nargs)
{
    long id;
    if (require_root(self, "check_symbols") == NULL || !check_nargs("check_symbols", nargs, 2, 2) ||
        parse_id(args[1], &id) < 0) {
        return NULL;
    }
    if (id < 0) {
        PyErr_SetString(PyExc_ValueError, "guard check ids must be >= 0");
        return NULL;
    }
    TreeShape *shape = tree_shape(self);
    if (shape == NULL) {
        return NULL;
    }
    SymProgram p = {0, NULL, NULL, 0, 0};
    if (pyjit_program_parse(args[0], &p) < 0) {
        return NULL;
    }
    p.id = id;
    if (shape->n_programs == shape->cap_programs) {
        Py_ssize_t cap = shape->cap_programs ? 2 * shape->cap_programs : 4;
        SymProgram *grown = PyMem_Realloc(shape->programs, (size_t)cap * sizeof(SymProgram));
        if (grown == NULL) {
            pyjit_program_release(&p);
            return PyErr_NoMemory();
        }
        shape->programs = grown;
        shape->cap_programs = cap;
    }
    shape->programs[shape->n_programs++] = p;
    if (p.n_slots > shape->n_slots) {
        shape->n_slots = p.n_slots;
    }
    Py_RETURN_NONE;
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

static PyObject *m_check_odict_keys(GuardNode *self, PyObject *const *args, Py_ssize_t nargs)
{
    Check c = {CK_ODICT_KEYS, 0, 0, NULL, 0, NULL};
    if (!check_nargs("check_odict_keys", nargs, 3, 3) || parse_id(args[2], &c.id) < 0) {
        return NULL;
    }
    if (!PyTuple_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "check_odict_keys(): keys must be tuples (iteration order, storage order)");
        return NULL;
    }
    c.obj = PyTuple_Pack(2, args[0], args[1]);
    if (c.obj == NULL) {
        return NULL;
    }
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

static PyObject *m_check_contains(GuardNode *self, PyObject *const *args, Py_ssize_t nargs)
{
    Check c = {CK_CONTAINS, 0, 0, NULL, 0, NULL};
    if (!check_nargs("check_contains", nargs, 3, 3) || parse_id(args[2], &c.id) < 0) {
        return NULL;
    }
    int expected = PyObject_IsTrue(args[1]);
    if (expected < 0) {
        return NULL;
    }
    if (PyObject_Hash(args[0]) == -1) {
        return NULL; /* an unhashable key could never be looked up */
    }
    c.n = expected;
    c.obj = Py_NewRef(args[0]);
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
    case CK_CONTAINS:
        payload = Py_BuildValue("(OO)", c->obj, c->n ? Py_True : Py_False);
        break;
    default:
        payload = Py_NewRef(c->obj);
    }
    if (payload == NULL) {
        return NULL;
    }
    return Py_BuildValue("(slN)", pyjit_check_names[c->kind], c->id, payload);
}

/* describe() -> {"kind", "key", "checks": [(kind, id, payload)], "children": [...]}; the root
 * also has "symbols": [("symbols", id, program)] (run after every other check). */
static PyObject *m_describe(GuardNode *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *checks = PyList_New(0), *children = PyList_New(0), *key = NULL, *symbols = NULL;
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
    if (IS_ROOT(self)) {
        symbols = PyList_New(0);
        if (symbols == NULL) {
            goto error;
        }
        Py_ssize_t n = self->shape ? self->shape->n_programs : 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            const SymProgram *p = &self->shape->programs[i];
            PyObject *d = Py_BuildValue("(slO)", "symbols", p->id, p->source);
            if (d == NULL || PyList_Append(symbols, d) < 0) {
                Py_XDECREF(d);
                goto error;
            }
            Py_DECREF(d);
        }
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
    PyObject *d = Py_BuildValue("{sssNsNsN}", "kind", pyjit_accessor_names[self->kind], "key", key,
                                "checks", checks, "children", children);
    if (d != NULL && symbols != NULL) {
        int r = PyDict_SetItemString(d, "symbols", symbols);
        Py_CLEAR(symbols);
        if (r < 0) {
            Py_CLEAR(d);
        }
    }
    Py_XDECREF(symbols);
    return d;
error:
    Py_XDECREF(checks);
    Py_XDECREF(children);
    Py_XDECREF(key);
    Py_XDECREF(symbols);
    return NULL;
}

static PyObject *m_kind(GuardNode *self, void *Py_UNUSED(closure))
{
    return PyUnicode_FromString(pyjit_accessor_names[self->kind]);
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
    {"dict_keys", (PyCFunction)m_dict_keys, METH_NOARGS, "dict_keys() -> node: list of the dict's keys (storage order)."},
    {"dict_values", (PyCFunction)m_dict_values, METH_NOARGS, "dict_values() -> node: list of the dict's values (storage order)."},
    {"check_type", (PyCFunction)(void (*)(void))m_check_type, METH_FASTCALL, "check_type(t, id): type(value) is t."},
    {"check_id", (PyCFunction)(void (*)(void))m_check_id, METH_FASTCALL, "check_id(obj, id): value is obj (weakly held where possible)."},
    {"check_eq", (PyCFunction)(void (*)(void))m_check_eq, METH_FASTCALL, "check_eq(const, id): same type and equal value."},
    {"check_tensor", (PyCFunction)(void (*)(void))m_check_tensor, METH_FASTCALL | METH_KEYWORDS,
     "check_tensor(tensor_type, dtype, device, requires_grad, sizes, strides, id, bind=None): "
     "bind = ((what, dim, slot), ...), what 0 = size(dim), 1 = stride(dim), stored into symbol "
     "slot `slot` when the check passes."},
    {"check_dict_keys", (PyCFunction)(void (*)(void))m_check_dict_keys, METH_FASTCALL, "check_dict_keys(keys, id): dict with these keys in this order (an OrderedDict: in iteration and storage order)."},
    {"check_odict_keys", (PyCFunction)(void (*)(void))m_check_odict_keys, METH_FASTCALL, "check_odict_keys(keys, storage_keys, id): OrderedDict with these keys in iteration order, these in storage order."},
    {"check_len", (PyCFunction)(void (*)(void))m_check_len, METH_FASTCALL, "check_len(n, id): len(value) == n."},
    {"check_not_none", (PyCFunction)m_check_not_none, METH_O, "check_not_none(id): value is not None."},
    {"check_contains", (PyCFunction)(void (*)(void))m_check_contains, METH_FASTCALL,
     "check_contains(key, expected, id): (key in value) is expected."},
    {"check_fn", (PyCFunction)(void (*)(void))m_check_fn, METH_FASTCALL, "check_fn(fn, id): bool(fn(value))."},
    {"check_symbols", (PyCFunction)(void (*)(void))m_check_symbols, METH_FASTCALL,
     "check_symbols(program, id): a relation over the bound symbol slots (pyjit.guards.shape_program), "
     "run after every other check passed (root only)."},
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
    if (self->shape != NULL) {
        for (Py_ssize_t i = 0; i < self->shape->n_programs; i++) {
            Py_VISIT(self->shape->programs[i].source);
        }
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

/* Every node below `n` forgets its root (which is going away, or n is being torn down with
 * it). A node whose root is NULL has only such nodes below it, so the walk stops there. */
static void forget_root(GuardNode *n)
{
    for (Py_ssize_t i = 0; i < n->n_children; i++) {
        GuardNode *c = n->children[i];
        if (c->root != NULL) {
            c->root = NULL;
            forget_root(c);
        }
    }
}

static int node_clear(GuardNode *self)
{
    forget_root(self);
    self->root = NULL;
    TreeShape *shape = self->shape;
    self->shape = NULL;
    if (shape != NULL) {
        for (Py_ssize_t i = 0; i < shape->n_programs; i++) {
            pyjit_program_release(&shape->programs[i]);
        }
        PyMem_Free(shape->programs);
        PyMem_Free(shape);
    }
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
    GuardNode *root = node_alloc(type, ACC_ROOT);
    if (root != NULL) {
        root->root = root;
    }
    return (PyObject *)root;
}

PyTypeObject PyjitGuardNode_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyjit._C.GuardNode",
    .tp_doc = "An accessor in a GuardTree: reads a value, checks it, feeds child accessors.",
    .tp_basicsize = sizeof(GuardNode),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
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
