/* module.c: the pyjit._C module: method table, per-code marks, cache inspection and init.
 *
 * pyjit._C is private; its Python surface is documented in docs/internals.md and typed in
 * pyjit/_C.pyi. Nothing here imports torch or any other Python module.
 */
#include "compat.h"
#include "cache.h"
#include "eval_frame.h"
#include "guards.h"
#include "cuda_launch.h"

static PyCodeObject *as_code(PyObject *arg, const char *what)
{
    if (!PyCode_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a code object, got %.80s", what,
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    return (PyCodeObject *)arg;
}

static PyObject *py_mark_skip(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "mark_skip(code, flag=True)");
        return NULL;
    }
    PyCodeObject *co = as_code(args[0], "mark_skip");
    int flag = nargs == 2 ? PyObject_IsTrue(args[1]) : 1;
    if (co == NULL || flag < 0) {
        return NULL;
    }
    CodeExtra *ex = pyjit_extra_ensure(co);
    if (ex == NULL) {
        return NULL;
    }
    ex->skip = (uint8_t)flag;
    Py_RETURN_NONE;
}

static PyObject *py_is_skip(PyObject *Py_UNUSED(m), PyObject *arg)
{
    PyCodeObject *co = as_code(arg, "is_skip");
    if (co == NULL) {
        return NULL;
    }
    CodeExtra *ex = pyjit_extra_get(co);
    return PyBool_FromLong(ex != NULL && ex->skip);
}

static PyObject *py_set_run_only(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "set_run_only(code, flag)");
        return NULL;
    }
    PyCodeObject *co = as_code(args[0], "set_run_only");
    int flag = PyObject_IsTrue(args[1]);
    if (co == NULL || flag < 0) {
        return NULL;
    }
    CodeExtra *ex = pyjit_extra_ensure(co);
    if (ex == NULL) {
        return NULL;
    }
    ex->run_only = (uint8_t)flag;
    Py_RETURN_NONE;
}

static PyObject *py_is_run_only(PyObject *Py_UNUSED(m), PyObject *arg)
{
    PyCodeObject *co = as_code(arg, "is_run_only");
    if (co == NULL) {
        return NULL;
    }
    CodeExtra *ex = pyjit_extra_get(co);
    return PyBool_FromLong(ex != NULL && ex->run_only);
}

/* set_plain(code, types | None): see CodeExtra.plain_types. */
static PyObject *py_set_plain(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "set_plain(code, types_tuple | None)");
        return NULL;
    }
    PyCodeObject *co = as_code(args[0], "set_plain");
    if (co == NULL) {
        return NULL;
    }
    PyObject *types = args[1];
    if (types != Py_None) {
        if (!PyTuple_CheckExact(types)) {
            PyErr_SetString(PyExc_TypeError, "set_plain: expected a tuple of types or None");
            return NULL;
        }
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(types); i++) {
            if (!PyType_Check(PyTuple_GET_ITEM(types, i))) {
                PyErr_SetString(PyExc_TypeError, "set_plain: expected a tuple of types or None");
                return NULL;
            }
        }
    }
    CodeExtra *ex = types == Py_None ? pyjit_extra_get(co) : pyjit_extra_ensure(co);
    if (ex == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    Py_XSETREF(ex->plain_types, types == Py_None ? NULL : Py_NewRef(types));
    Py_RETURN_NONE;
}

static PyObject *py_get_plain(PyObject *Py_UNUSED(m), PyObject *arg)
{
    PyCodeObject *co = as_code(arg, "get_plain");
    if (co == NULL) {
        return NULL;
    }
    CodeExtra *ex = pyjit_extra_get(co);
    return Py_NewRef(ex != NULL && ex->plain_types != NULL ? ex->plain_types : Py_None);
}

static PyObject *py_cache_entries(PyObject *Py_UNUSED(m), PyObject *arg)
{
    PyCodeObject *co = as_code(arg, "cache_entries");
    if (co == NULL) {
        return NULL;
    }
    PyObject *list = PyList_New(0);
    if (list == NULL) {
        return NULL;
    }
    CodeExtra *ex = pyjit_extra_get(co);
    for (CacheEntry *e = ex ? ex->head : NULL; e != NULL; e = e->next) {
        PyObject *item = PyTuple_Pack(2, e->guard ? e->guard : Py_None, e->code);
        if (item == NULL || PyList_Append(list, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(item);
    }
    return list;
}

static PyObject *py_reset(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    pyjit_cache_reset_all();
    Py_RETURN_NONE;
}

static PyObject *py_extra_count(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyLong_FromSsize_t(pyjit_cache_count_extras());
}

static PyMethodDef cache_methods[] = {
    {"mark_skip", (PyCFunction)(void (*)(void))py_mark_skip, METH_FASTCALL,
     "mark_skip(code, flag=True): never call back for this code object; always run it as is."},
    {"is_skip", py_is_skip, METH_O, "is_skip(code) -> bool."},
    {"set_run_only", (PyCFunction)(void (*)(void))py_set_run_only, METH_FASTCALL,
     "set_run_only(code, flag): use this code object's entries, never call back for it."},
    {"is_run_only", py_is_run_only, METH_O, "is_run_only(code) -> bool."},
    {"set_plain", (PyCFunction)(void (*)(void))py_set_plain, METH_FASTCALL,
     "set_plain(code, types | None): calls whose every argument's exact type is in `types` run as is, "
     "with no lookup and no callback."},
    {"get_plain", py_get_plain, METH_O, "get_plain(code) -> tuple of types or None."},
    {"cache_entries", py_cache_entries, METH_O,
     "cache_entries(code) -> [(guard | None, replacement_code)], most recently hit first."},
    {"reset", py_reset, METH_NOARGS, "reset(): drop every cache entry and mark of every code object."},
    {"_extra_count", py_extra_count, METH_NOARGS, "Number of code objects carrying pyjit state (tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pyjit._C",
    .m_doc = "pyjit's C core: PEP 523 frame hook, per-code cache, compiled guard trees (private).",
    .m_size = -1,
};

static int add_methods(PyObject *module, PyMethodDef *defs)
{
    return PyModule_AddFunctions(module, defs);
}

PyMODINIT_FUNC PyInit__C(void)
{
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    if (pyjit_cache_init() < 0 || add_methods(module, pyjit_eval_frame_methods) < 0 || pyjit_eval_frame_ready(module) < 0 ||
        add_methods(module, cache_methods) < 0 || pyjit_guards_ready(module) < 0 || pyjit_cuda_launch_ready(module) < 0 ||
        PyModule_AddIntConstant(module, "PASS", -1) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
