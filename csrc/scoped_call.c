/* scoped_call.c: `ScopedCall`, the C base of pyjit.jit's and pyjit.disable's wrappers, and the
 * escape a jitted call takes while another frame hook (Dynamo) is on top of ours.
 *
 * Owns: the scoped call (set this thread's callback for one call, pyjit's hook on top while it
 * is set, restore both), the escape factory and its per-foreign-hook cache, `_scoped_call`.
 * Why (docs/internals.md, "Coexisting with other frame hooks"): entering a jitted call must
 * run no Python frame of pyjit's that another hook could trace, and must let Dynamo switch
 * itself off (its own bookkeeping) instead of fighting over the eval-function slot.
 */
#include "eval_frame.h"
#include "eval_frame_internal.h"
#include <structmember.h>
#if defined(__linux__) || defined(__APPLE__)
#include <dlfcn.h>
#define PYJIT_HAVE_DLADDR 1
#endif

/* `ScopedCall`: calling it runs `scoped_fn(*args, **kwargs)` with this thread's callback set
 * to `scoped_callback` (None: pyjit off for the call) and restores it afterwards. It is the
 * base of pyjit.jit's and pyjit.disable's wrappers, written in C so that entering a jitted
 * function runs no Python frame of pyjit's: another frame hook in front of ours (Dynamo
 * inside a torch.compile'd function) never sees pyjit's entry code. With a callback, pyjit's
 * hook is also put on top of the interpreter's eval function for the call when another hook
 * was installed over it, and that hook is put back afterwards: frames of a jitted function
 * called from a torch.compile'd one belong to pyjit (docs/internals.md). `scoped_fn` unset
 * or `scoped_callback` unset: a plain call. */
static PyTypeObject ScopedCall_Type;

typedef struct {
    PyObject_HEAD
    PyObject *fn;       /* strong or NULL */
    PyObject *callback; /* strong or NULL (unset); Py_None: disable for the call */
} ScopedCall;

static int scoped_traverse(PyObject *op, visitproc visit, void *arg)
{
    ScopedCall *self = (ScopedCall *)op;
    /* Not Py_TYPE(op): for Python subclasses of this static type, subtype_traverse and
     * subtype_dealloc already visit / release the heap type. */
    Py_VISIT(self->fn);
    Py_VISIT(self->callback);
    return 0;
}

static int scoped_clear(PyObject *op)
{
    ScopedCall *self = (ScopedCall *)op;
    Py_CLEAR(self->fn);
    Py_CLEAR(self->callback);
    return 0;
}

static void scoped_dealloc(PyObject *op)
{
    PyObject_GC_UnTrack(op);
    scoped_clear(op);
    Py_TYPE(op)->tp_free(op);
}

/* Entering a jitted call while another frame hook is on top (Dynamo, inside a
 * torch.compile'd function): the call goes through `escape(obj, args, kwargs)`, made once per
 * foreign hook by the Python factory set with set_escape_factory (pyjit: a
 * torch.compiler.disable wrapper of _scoped_call, so Dynamo switches itself off for the call
 * and keeps its own books). The factory runs with pyjit's hook on top and busy, so that the
 * foreign hook never sees the frames it runs. */
static PyObject *escape_factory = NULL;           /* strong or NULL */
static PyObject *escape_fn = NULL;                /* strong or NULL: the escape for escape_for */
static _PyFrameEvalFunction escape_for = NULL;    /* the foreign hook escape_fn was made for */

static inline int foreign_hook(_PyFrameEvalFunction top)
{
    return top != NULL && top != pyjit_eval_frame && top != _PyEval_EvalFrameDefault;
}

/* The file of the shared library that defines `fn` (a new str), or None where unknown. */
static PyObject *library_of(_PyFrameEvalFunction fn)
{
#ifdef PYJIT_HAVE_DLADDR
    Dl_info info;
    if (dladdr((void *)fn, &info) != 0 && info.dli_fname != NULL) {
        return PyUnicode_DecodeFSDefault(info.dli_fname);
    }
#endif
    (void)fn;
    Py_RETURN_NONE;
}

/* The escape for foreign hook `top` (borrowed; NULL: none, call directly). The factory gets
 * the path of the library defining `top`, so Python can tell whose hook it is. */
static PyObject *escape_for_hook(PyInterpreterState *interp, _PyFrameEvalFunction top, ThreadState *t)
{
    if (escape_for == top) {
        return escape_fn;
    }
    Py_CLEAR(escape_fn);
    escape_for = top;
    if (escape_factory == NULL) {
        return NULL;
    }
    PyObject *factory = Py_NewRef(escape_factory);
    PyObject *library = library_of(top);
    if (library == NULL) {
        PyErr_WriteUnraisable(factory);
        Py_DECREF(factory);
        return NULL;
    }
    _PyInterpreterState_SetEvalFrameFunc(interp, pyjit_eval_frame);
    t->busy++;
    PyObject *made = PyObject_CallOneArg(factory, library);
    t->busy--;
    Py_DECREF(library);
    if (_PyInterpreterState_GetEvalFrameFunc(interp) == pyjit_eval_frame) {
        _PyInterpreterState_SetEvalFrameFunc(interp, top);
    }
    if (made == NULL) {
        PyErr_WriteUnraisable(factory); /* the call still runs, directly */
    }
    else if (made == Py_None) {
        Py_DECREF(made);
    }
    else {
        escape_fn = made;
    }
    Py_DECREF(factory);
    return escape_fn;
}

/* The scoped call itself: set the callback, make sure pyjit's hook is on top while it is
 * set, call, restore both. */
static PyObject *scoped_call_direct(ScopedCall *self, PyObject *args, PyObject *kwargs)
{
    PyObject *fn = Py_NewRef(self->fn);
    PyObject *cb = Py_NewRef(self->callback);
    ThreadState *t = cb == Py_None ? pyjit_current_state() : pyjit_ensure_state();
    if (t == NULL || t == &pyjit_disabled_state) {
        /* No state: pyjit is already off on this thread (None), or it could not be created. */
        PyObject *res = t == NULL ? NULL : PyObject_Call(fn, args, kwargs);
        Py_DECREF(fn);
        Py_DECREF(cb);
        return res;
    }
    PyObject *previous = t->callback; /* the reference moves back into t at the end */
    t->callback = cb == Py_None ? NULL : Py_NewRef(cb);
    pyjit_update_enabled(t);
    PyInterpreterState *interp = PyInterpreterState_Get();
    _PyFrameEvalFunction over = NULL;
    if (t->enabled && !pyjit_hook_on_top(interp)) {
        /* Already installed, but another hook went on top meanwhile (one whose owner keeps
         * it installed while idle): pyjit's hook goes on top for this call. */
        over = _PyInterpreterState_GetEvalFrameFunc(interp);
        _PyInterpreterState_SetEvalFrameFunc(interp, pyjit_eval_frame);
    }
    PyObject *res = PyObject_Call(fn, args, kwargs);
    PyObject *mine = t->callback;
    t->callback = previous;
    pyjit_update_enabled(t);
    if (over != NULL && pyjit_hook_on_top(interp)) {
        _PyInterpreterState_SetEvalFrameFunc(interp, over);
    }
    Py_XDECREF(mine);
    Py_DECREF(fn);
    Py_DECREF(cb);
    return res;
}

static PyObject *scoped_call(PyObject *op, PyObject *args, PyObject *kwargs)
{
    ScopedCall *self = (ScopedCall *)op;
    if (self->fn == NULL) {
        PyErr_Format(PyExc_TypeError, "%.80s object is not initialised (scoped_fn unset)", Py_TYPE(op)->tp_name);
        return NULL;
    }
    if (self->callback == NULL) {
        return PyObject_Call(self->fn, args, kwargs);
    }
    if (self->callback != Py_None) {
        PyInterpreterState *interp = PyInterpreterState_Get();
        _PyFrameEvalFunction top = _PyInterpreterState_GetEvalFrameFunc(interp);
        ThreadState *t = pyjit_current_state();
        if (foreign_hook(top) && !t->busy) {
            t = pyjit_ensure_state();
            if (t == NULL) {
                return NULL;
            }
            PyObject *escape = escape_for_hook(interp, top, t);
            if (escape != NULL) {
                PyObject *kw = kwargs != NULL ? Py_NewRef(kwargs) : PyDict_New();
                PyObject *esc = Py_NewRef(escape);
                PyObject *res = kw == NULL ? NULL : PyObject_CallFunctionObjArgs(esc, op, args, kw, NULL);
                Py_DECREF(esc);
                Py_XDECREF(kw);
                return res;
            }
        }
    }
    return scoped_call_direct(self, args, kwargs);
}

static PyObject *py_scoped_call(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyObject_TypeCheck(args[0], &ScopedCall_Type) || !PyTuple_Check(args[1]) ||
        (args[2] != Py_None && !PyDict_Check(args[2]))) {
        PyErr_SetString(PyExc_TypeError, "_scoped_call(obj: ScopedCall, args: tuple, kwargs: dict | None)");
        return NULL;
    }
    ScopedCall *self = (ScopedCall *)args[0];
    if (self->fn == NULL || self->callback == NULL) {
        return scoped_call(args[0], args[1], args[2] == Py_None ? NULL : args[2]);
    }
    return scoped_call_direct(self, args[1], args[2] == Py_None ? NULL : args[2]);
}

static PyObject *py_set_escape_factory(PyObject *Py_UNUSED(m), PyObject *fn)
{
    if (fn != Py_None && !PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "set_escape_factory: expected a callable or None");
        return NULL;
    }
    Py_XSETREF(escape_factory, fn == Py_None ? NULL : Py_NewRef(fn));
    Py_CLEAR(escape_fn);
    escape_for = NULL;
    Py_RETURN_NONE;
}

static PyObject *scoped_new(PyTypeObject *type, PyObject *Py_UNUSED(args), PyObject *Py_UNUSED(kwargs))
{
    return type->tp_alloc(type, 0); /* subclasses take their own __init__ arguments */
}

static PyMemberDef scoped_members[] = {
    {"scoped_fn", T_OBJECT, offsetof(ScopedCall, fn), 0, "The callable run by a call."},
    {"scoped_callback", T_OBJECT, offsetof(ScopedCall, callback), 0,
     "This thread's callback during a call (None: pyjit off; unset: unchanged)."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject ScopedCall_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyjit._C.ScopedCall",
    .tp_basicsize = sizeof(ScopedCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "ScopedCall(): calling it runs scoped_fn(*args, **kwargs) with this thread's callback set to "
              "scoped_callback, pyjit's hook on top of the eval chain for the call (base of pyjit.jit wrappers).",
    .tp_new = scoped_new,
    .tp_call = scoped_call,
    .tp_traverse = scoped_traverse,
    .tp_clear = scoped_clear,
    .tp_dealloc = scoped_dealloc,
    .tp_members = scoped_members,
};

static PyMethodDef scoped_methods[] = {
    {"_scoped_call", (PyCFunction)(void (*)(void))py_scoped_call, METH_FASTCALL,
     "_scoped_call(obj, args, kwargs): call a ScopedCall without the foreign-hook escape (the escape's target)."},
    {"set_escape_factory", py_set_escape_factory, METH_O,
     "set_escape_factory(fn(library) -> escape | None | None): makes the escape(obj, args, kwargs) a ScopedCall with a "
     "callback goes through while another frame hook is on top."},
    {NULL, NULL, 0, NULL},
};

int pyjit_scoped_call_ready(PyObject *module)
{
    if (PyType_Ready(&ScopedCall_Type) < 0 || PyModule_AddFunctions(module, scoped_methods) < 0) {
        return -1;
    }
    Py_INCREF(&ScopedCall_Type);
    if (PyModule_AddObject(module, "ScopedCall", (PyObject *)&ScopedCall_Type) < 0) {
        Py_DECREF(&ScopedCall_Type);
        return -1;
    }
    return 0;
}
