/* eval_frame.c: the PEP 523 frame-evaluation hook.
 *
 * Owns: the per-thread state (callback, run-only mode, re-entrancy counter), installing the
 * hook interpreter-wide while at least one thread is enabled (chaining to the previous eval
 * function), the frame filter, cache lookup, the callback on a miss, the entry limit, and
 * running replacement code.
 *
 * Running replacement code (docs/internals.md, "flat-vector call"): a function is built from
 * the replacement code with the original function's globals and closure, and called with the
 * frame's argument slots (localsplus[0:nargs]) as positional arguments. The replacement's
 * own frame re-enters this hook and is recognised through `expected_code`. The original
 * frame never runs; it is released per version by pyjit_release_unrun_frame (compat.c).
 * Policy lives in Python: this file only stores and checks what the callback decided.
 */
#include "eval_frame.h"
#include "cache.h"
#include "guards.h"
#include <structmember.h>

typedef struct {
    PyObject *callback;          /* strong or NULL; the thread's callback */
    int run_only;                /* thread run-only mode: use entries, never call back */
    int enabled;                 /* callback != NULL || run_only */
    int busy;                    /* > 0 while our callback or guards run: default evaluator */
    PyCodeObject *expected_code; /* replacement code about to be entered by this thread */
} ThreadState;

/* Per-thread state lives on the heap, owned by a ThreadStateOwner object stored in the
 * thread's PyThreadState dict: when the thread ends, CPython clears that dict
 * (PyThreadState_Clear) and the owner releases the callback and, if the thread was still
 * enabled, its share of the installed hook. A thread that never enabled pyjit has no state
 * and reads `disabled_state` (all zero, never written: every writer is behind `enabled`). */
static ThreadState disabled_state;
static _Thread_local ThreadState *tls_state = NULL;

/* The last thread's state, keyed by PyThreadState.id (unique per interpreter, never reused,
 * so a dead thread's entry can never match): saves the __tls_get_addr call a shared object
 * pays per TLS access on the hot path while one thread runs. Reset whenever the current
 * thread's state pointer changes or a state is freed. Guarded by the GIL. */
static uint64_t cached_thread_id = 0;
static ThreadState *cached_thread_state = NULL;

#if defined(__GNUC__)
#define PYJIT_NOINLINE __attribute__((noinline))
#else
#define PYJIT_NOINLINE
#endif

/* What was the interpreter's eval function when the hook was installed: restored when the
 * last enabled thread disables (if we are still on top). pyjit's hook never *calls* it:
 * frames pyjit does not replace run in _PyEval_EvalFrameDefault (docs/internals.md,
 * "Coexisting with other frame hooks"). */
static _PyFrameEvalFunction restore_eval = NULL;
static Py_ssize_t active_threads = 0;
static int entry_limit = 8;
static PyObject *limit_callback = NULL; /* strong or NULL; interpreter-wide */

static PyObject *pyjit_eval_frame(PyThreadState *tstate, _PyInterpreterFrame *frame, int throwflag);

/* ------------------------------------------------------------ install / enable -------- */

static inline int hook_on_top(PyInterpreterState *interp)
{
    return _PyInterpreterState_GetEvalFrameFunc(interp) == pyjit_eval_frame;
}

static void install_hook(void)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
    if (current != pyjit_eval_frame) {
        restore_eval = current;
        _PyInterpreterState_SetEvalFrameFunc(interp, pyjit_eval_frame);
    }
}

static void uninstall_hook(void)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    /* Only restore if nobody replaced us meanwhile (their hook then keeps us as its previous
     * one; ours runs every frame of a non-enabled thread natively). */
    if (hook_on_top(interp)) {
        _PyInterpreterState_SetEvalFrameFunc(interp, restore_eval);
    }
}

static void update_enabled(ThreadState *t)
{
    int now = t->callback != NULL || t->run_only;
    if (now && !t->enabled) {
        if (active_threads++ == 0) {
            install_hook();
        }
    }
    else if (!now && t->enabled) {
        if (--active_threads == 0) {
            uninstall_hook();
        }
    }
    t->enabled = now;
}

/* The owner of one thread's heap state (see ThreadState). */
typedef struct {
    PyObject_HEAD
    ThreadState *state;
    uint64_t owner_id; /* PyThreadState.id of the thread the state belongs to */
} ThreadStateOwner;

static void owner_dealloc(PyObject *op)
{
    ThreadStateOwner *self = (ThreadStateOwner *)op;
    ThreadState *t = self->state;
    self->state = NULL;
    PyObject *callback = NULL;
    if (t != NULL) {
        callback = t->callback;
        t->callback = NULL;
        t->run_only = 0;
        PyThreadState *ts = _PyThreadState_UncheckedGet();
        if (ts != NULL) {
            update_enabled(t); /* gives back this thread's share of the hook */
        }
        else if (t->enabled) {
            t->enabled = 0; /* no thread state to reach the interpreter: keep the hook */
            active_threads--;
        }
        if (cached_thread_state == t) {
            cached_thread_id = 0;
            cached_thread_state = NULL;
        }
        /* Normally the owning thread clears its own dict; at finalization another thread may
         * clear it, and then the owner's thread-local pointer is not ours to touch (that
         * thread never runs Python again). */
        if (ts != NULL && ts->id == self->owner_id && tls_state == t) {
            tls_state = NULL;
        }
        if (t->busy == 0 && t->expected_code == NULL) {
            PyMem_Free(t);
        } /* else: a frame of that thread is inside our hook; keep the struct (never reached
           * in practice: a thread state is cleared after its last frame). */
    }
    PyObject_Free(op);
    Py_XDECREF(callback); /* last: may run arbitrary code */
}

static PyTypeObject ThreadStateOwner_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyjit._C._ThreadStateOwner",
    .tp_basicsize = sizeof(ThreadStateOwner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = owner_dealloc,
    .tp_doc = "Owns one thread's pyjit state; freed with the thread's state dict.",
};

static PyObject *owner_key = NULL; /* interned key in PyThreadState dicts */

/* This thread's state, or the shared all-zero one. */
static inline ThreadState *current_state(void)
{
    ThreadState *t = tls_state;
    return t != NULL ? t : &disabled_state;
}

/* This thread's own state, created (with its owner in the thread-state dict) on first use.
 * NULL with an exception set on failure. */
static ThreadState *ensure_state(void)
{
    if (tls_state != NULL) {
        return tls_state;
    }
    PyObject *dict = PyThreadState_GetDict();
    if (dict == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "pyjit: this thread has no thread-state dict");
        return NULL;
    }
    ThreadState *t = PyMem_Calloc(1, sizeof(ThreadState));
    if (t == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    ThreadStateOwner *owner = PyObject_New(ThreadStateOwner, &ThreadStateOwner_Type);
    if (owner == NULL) {
        PyMem_Free(t);
        return NULL;
    }
    owner->state = t;
    owner->owner_id = PyThreadState_Get()->id;
    if (PyDict_SetItem(dict, owner_key, (PyObject *)owner) < 0) {
        owner->state = NULL;
        Py_DECREF(owner);
        PyMem_Free(t);
        return NULL;
    }
    Py_DECREF(owner); /* the dict holds it */
    tls_state = t;
    cached_thread_id = 0; /* the hook re-reads the thread-local pointer */
    return t;
}

/* ------------------------------------------------------------ helpers ---------------- */

static inline Py_ssize_t argument_slots(PyCodeObject *co)
{
    return co->co_argcount + co->co_kwonlyargcount + ((co->co_flags & CO_VARARGS) ? 1 : 0) +
           ((co->co_flags & CO_VARKEYWORDS) ? 1 : 0);
}

/* pyjit's hook is a terminal evaluator: it never calls another hook (two hooks that each
 * call "the one installed before me" form a cycle as soon as one re-installs itself over
 * the other, which Dynamo does: docs/internals.md, "Coexisting with other frame hooks"). */
static inline PyObject *run_original(PyThreadState *tstate, _PyInterpreterFrame *frame, int throwflag)
{
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
}

/* Call `code` as a function of the original's globals and closure with the frame's argument
 * slots, then release the unrun original frame. Returns the result or NULL (exception set). */
static PyObject *run_replacement(PyThreadState *tstate, _PyInterpreterFrame *frame,
                                 ThreadState *t, PyCodeObject *code, Py_ssize_t nargs)
{
    PyFunctionObject *func = PYJIT_FRAME_FUNC(frame);
    PyObject *res = NULL;
    PyObject *fn = PyFunction_New((PyObject *)code, func->func_globals);
    if (fn != NULL) {
        /* PyFunction_New derives builtins from globals["__builtins__"]; use the original's
         * so LOAD_GLOBAL falls back to exactly what the original would have seen. */
        PyFunctionObject *op = (PyFunctionObject *)fn;
        if (op->func_builtins != func->func_builtins) {
            Py_XSETREF(op->func_builtins, Py_NewRef(func->func_builtins));
        }
        if (func->func_closure == NULL || PyFunction_SetClosure(fn, func->func_closure) == 0) {
            /* Our replacement's frame must reach our hook, never another one: a hook that
             * went on top while our callback ran (Dynamo re-installs itself whenever torch
             * code toggles it) would otherwise compile pyjit's generated code. */
            PyInterpreterState *interp = tstate->interp;
            _PyFrameEvalFunction over = NULL;
            if (!hook_on_top(interp)) {
                over = _PyInterpreterState_GetEvalFrameFunc(interp);
                _PyInterpreterState_SetEvalFrameFunc(interp, pyjit_eval_frame);
            }
            t->expected_code = code;
            /* No PY_VECTORCALL_ARGUMENTS_OFFSET: localsplus[-1] belongs to the frame header. */
            res = PyObject_Vectorcall(fn, frame->localsplus, (size_t)nargs, NULL);
            t->expected_code = NULL; /* normally consumed on entry; cleared on early failure */
            if (over != NULL && hook_on_top(interp)) {
                _PyInterpreterState_SetEvalFrameFunc(interp, over);
            }
        }
        Py_DECREF(fn);
    }
    pyjit_release_unrun_frame(tstate, frame);
    return res;
}

/* Validate a replacement code object against the original (notes section 3). 0 or -1. */
static int validate_replacement(PyCodeObject *original, PyObject *code, Py_ssize_t nargs)
{
    if (!PyCode_Check(code)) {
        PyErr_Format(PyExc_TypeError,
                     "pyjit callback for %U (%U:%d) returned a non-code replacement (%.80s)",
                     original->co_qualname, original->co_filename, original->co_firstlineno,
                     Py_TYPE(code)->tp_name);
        return -1;
    }
    PyCodeObject *repl = (PyCodeObject *)code;
    const char *problem = NULL;
    if (repl->co_argcount != nargs || repl->co_kwonlyargcount != 0 ||
        (repl->co_flags & (CO_VARARGS | CO_VARKEYWORDS))) {
        problem = "must take exactly the original's argument slots as plain positional parameters";
    }
    else if (repl->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)) {
        problem = "must not be a generator or coroutine";
    }
    else if (!(repl->co_flags & CO_OPTIMIZED)) {
        problem = "must be function code (CO_OPTIMIZED)";
    }
    if (problem == NULL && repl->co_nfreevars == 0 && original->co_nfreevars == 0) {
        return 0;
    }
    /* The closure tuple is positional: the replacement's free variables must match exactly. */
    PyObject *want = PyCode_GetFreevars(original);
    PyObject *got = PyCode_GetFreevars(repl);
    int same = (want && got) ? PyObject_RichCompareBool(want, got, Py_EQ) : -1;
    if (same == 0 && problem == NULL) {
        problem = "must keep the original's free variables in order";
    }
    if (same >= 0 && problem != NULL) {
        PyErr_Format(PyExc_TypeError,
                     "pyjit: replacement code %U for %U (%U:%d) %s (expected %zd positional "
                     "parameters, freevars %R; got %d, freevars %R)",
                     repl->co_name, original->co_qualname, original->co_filename,
                     original->co_firstlineno, problem, nargs, want, repl->co_argcount, got);
    }
    Py_XDECREF(want);
    Py_XDECREF(got);
    return (same < 0 || problem != NULL) ? -1 : 0;
}

static void report_limit(ThreadState *t, CodeExtra *ex, PyCodeObject *co)
{
    if (ex->limit_reported) {
        return;
    }
    ex->limit_reported = 1;
    if (limit_callback == NULL) {
        return;
    }
    PyObject *cb = Py_NewRef(limit_callback);
    t->busy++;
    PyObject *r = PyObject_CallOneArg(cb, (PyObject *)co);
    t->busy--;
    if (r == NULL) {
        /* The frame still runs its original code; a logging failure must not break it. */
        PyErr_WriteUnraisable(cb);
    }
    Py_XDECREF(r);
    Py_DECREF(cb);
}

/* ------------------------------------------------------------ the hook -------------- */

/* Cache miss: call the thread's callback, install and run what it returns. */
static PyObject *handle_miss(PyThreadState *tstate, _PyInterpreterFrame *frame, ThreadState *t,
                             PyCodeObject *co, CodeExtra *ex, Py_ssize_t nargs)
{
    if (t->run_only || t->callback == NULL || (ex != NULL && ex->run_only) || PYJIT_IsFinalizing()) {
        return run_original(tstate, frame, 0);
    }
    if ((ex != NULL ? ex->n_entries : 0) >= entry_limit) {
        if (ex == NULL) {
            ex = pyjit_extra_ensure(co); /* to remember that the limit was reported */
            if (ex == NULL) {
                PyErr_Clear();
                return run_original(tstate, frame, 0);
            }
        }
        report_limit(t, ex, co);
        return run_original(tstate, frame, 0);
    }
    PyObject *args = PyTuple_New(nargs);
    if (args == NULL) {
        pyjit_release_unrun_frame(tstate, frame);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyTuple_SET_ITEM(args, i, Py_NewRef(frame->localsplus[i]));
    }
    PyObject *cb = Py_NewRef(t->callback);
    PyObject *cb_args[2] = {(PyObject *)PYJIT_FRAME_FUNC(frame), args};
    t->busy++;
    PyObject *result = PyObject_Vectorcall(cb, cb_args, 2, NULL);
    t->busy--;
    Py_DECREF(cb);
    Py_DECREF(args);
    if (result == NULL) {
        pyjit_release_unrun_frame(tstate, frame);
        return NULL;
    }
    if (result == Py_None) {
        Py_DECREF(result);
        return run_original(tstate, frame, 0);
    }
    PyObject *guard, *code;
    if (!PyTuple_Check(result) || PyTuple_GET_SIZE(result) != 2) {
        PyErr_Format(PyExc_TypeError,
                     "pyjit callback must return None or (guard, code), got %.80s",
                     Py_TYPE(result)->tp_name);
        goto error;
    }
    guard = PyTuple_GET_ITEM(result, 0);
    code = PyTuple_GET_ITEM(result, 1);
    if (guard != Py_None && !PyObject_TypeCheck(guard, &PyjitGuardTree_Type)) {
        PyErr_Format(PyExc_TypeError, "pyjit callback: guard must be a GuardTree or None, got %.80s",
                     Py_TYPE(guard)->tp_name);
        goto error;
    }
    if (validate_replacement(co, code, nargs) < 0) {
        goto error;
    }
    /* Re-fetch: the callback may have created, reset or marked the state meanwhile. */
    ex = pyjit_extra_ensure(co);
    if (ex == NULL || pyjit_cache_prepend(ex, guard, code) < 0) {
        goto error;
    }
    Py_INCREF(code); /* keep it alive across the call even if reset() runs inside */
    Py_DECREF(result);
    PyObject *res = run_replacement(tstate, frame, t, (PyCodeObject *)code, nargs);
    Py_DECREF(code);
    return res;
error:
    Py_DECREF(result);
    pyjit_release_unrun_frame(tstate, frame);
    return NULL;
}

/* Everything after the fast path: an enabled thread, no throw, code not marked skip (`ex` is
 * its state or NULL). Kept out of line so that the fast path below needs no stack frame. */
static PYJIT_NOINLINE PyObject *eval_frame_enabled(PyThreadState *tstate, _PyInterpreterFrame *frame,
                                                   ThreadState *t, CodeExtra *ex)
{
    /* Another frame hook is installed over ours and handed us this frame (Dynamo inside a
     * torch.compile'd call): that hook owns the thread's frames now; step aside. */
    if (!hook_on_top(tstate->interp)) {
        return run_original(tstate, frame, 0);
    }
    PyCodeObject *co = PYJIT_FRAME_CODE(frame);
    /* Generators/coroutines (creation and resumption), class bodies, module and exec code,
     * frames already materialised, and frames run while tracing: default evaluator. */
    if (frame->owner != FRAME_OWNED_BY_THREAD ||
        (co->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_OPTIMIZED)) != CO_OPTIMIZED ||
        frame->f_locals != NULL || frame->frame_obj != NULL || tstate->tracing > 0) {
        return run_original(tstate, frame, 0);
    }
    if (co == t->expected_code) {
        t->expected_code = NULL; /* our replacement's own frame */
        return run_original(tstate, frame, 0);
    }
    Py_ssize_t nargs = argument_slots(co);
    if (ex != NULL && ex->head != NULL) {
        PyFunctionObject *func = PYJIT_FRAME_FUNC(frame);
        uint32_t version = ex->version;
        CacheEntry *prev = NULL;
        t->busy++;
        for (CacheEntry *e = ex->head; e != NULL; prev = e, e = e->next) {
            long failed = e->guard == NULL ? -1 : pyjit_guard_check(e->guard, func, frame->localsplus, nargs);
            if (failed == PYJIT_GUARD_ERROR) {
                /* KeyboardInterrupt/SystemExit raised inside a Python-level check. */
                t->busy--;
                pyjit_release_unrun_frame(tstate, frame);
                return NULL;
            }
            if (ex->version != version) {
                break; /* a Python-level check changed the list: `e` may be gone; miss */
            }
            if (failed < 0) {
                PyObject *code = Py_NewRef(e->code);
                pyjit_cache_move_to_front(ex, prev, e);
                t->busy--;
                PyObject *res = run_replacement(tstate, frame, t, (PyCodeObject *)code, nargs);
                Py_DECREF(code);
                return res;
            }
        }
        t->busy--;
    }
    return handle_miss(tstate, frame, t, co, ex, nargs);
}

/* The hook's rarely taken branches, out of line so that the fast path below is a leaf
 * function ending in tail calls (no registers saved per frame). */
static PYJIT_NOINLINE PyObject *eval_frame_switch_thread(PyThreadState *tstate, _PyInterpreterFrame *frame,
                                                         int throwflag)
{
    cached_thread_id = tstate->id; /* __tls_get_addr, once per thread switch */
    cached_thread_state = current_state();
    return pyjit_eval_frame(tstate, frame, throwflag);
}

static PYJIT_NOINLINE PyObject *eval_frame_unmirrored(PyThreadState *tstate, _PyInterpreterFrame *frame,
                                                      ThreadState *t)
{
    CodeExtra *ex = pyjit_extra_get_slow(PYJIT_FRAME_CODE(frame));
    if (ex != NULL && ex->skip) {
        return run_original(tstate, frame, 0);
    }
    return eval_frame_enabled(tstate, frame, t, ex);
}

/* The hook. Fast path, taken by every frame of a thread that has not enabled pyjit and by
 * every frame of code marked skip: a thread-id compare, two flag reads, one co_extra read, a
 * tail call. Checking skip before the frame filter is safe: every filtered frame runs its
 * original code too, and a skip-marked replacement code's `expected_code` is cleared by
 * run_replacement after the call. */
static PyObject *pyjit_eval_frame(PyThreadState *tstate, _PyInterpreterFrame *frame, int throwflag)
{
    if (tstate->id != cached_thread_id) {
        return eval_frame_switch_thread(tstate, frame, throwflag);
    }
    ThreadState *t = cached_thread_state;
    if (!t->enabled || t->busy || throwflag) {
        return run_original(tstate, frame, throwflag);
    }
    if (!pyjit_mirror_ok) {
        return eval_frame_unmirrored(tstate, frame, t);
    }
    CodeExtra *ex = pyjit_extra_get_mirrored(PYJIT_FRAME_CODE(frame));
    if (ex != NULL && ex->skip) {
        return run_original(tstate, frame, 0);
    }
    return eval_frame_enabled(tstate, frame, t, ex);
}

/* ------------------------------------------------------------ ScopedCall ------------ */

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

/* The escape for foreign hook `top` (borrowed; NULL: none, call directly). */
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
    _PyInterpreterState_SetEvalFrameFunc(interp, pyjit_eval_frame);
    t->busy++;
    PyObject *made = PyObject_CallNoArgs(factory);
    t->busy--;
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
    ThreadState *t = cb == Py_None ? current_state() : ensure_state();
    if (t == NULL || t == &disabled_state) {
        /* No state: pyjit is already off on this thread (None), or it could not be created. */
        PyObject *res = t == NULL ? NULL : PyObject_Call(fn, args, kwargs);
        Py_DECREF(fn);
        Py_DECREF(cb);
        return res;
    }
    PyObject *previous = t->callback; /* the reference moves back into t at the end */
    t->callback = cb == Py_None ? NULL : Py_NewRef(cb);
    update_enabled(t);
    PyInterpreterState *interp = PyInterpreterState_Get();
    _PyFrameEvalFunction over = NULL;
    if (t->enabled && !hook_on_top(interp)) {
        /* Already installed, but another hook went on top meanwhile (one whose owner keeps
         * it installed while idle): pyjit's hook goes on top for this call. */
        over = _PyInterpreterState_GetEvalFrameFunc(interp);
        _PyInterpreterState_SetEvalFrameFunc(interp, pyjit_eval_frame);
    }
    PyObject *res = PyObject_Call(fn, args, kwargs);
    PyObject *mine = t->callback;
    t->callback = previous;
    update_enabled(t);
    if (over != NULL && hook_on_top(interp)) {
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
        ThreadState *t = current_state();
        if (foreign_hook(top) && !t->busy) {
            t = ensure_state();
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

int pyjit_eval_frame_ready(PyObject *module)
{
    owner_key = PyUnicode_InternFromString("pyjit._C.thread_state");
    if (owner_key == NULL || PyType_Ready(&ThreadStateOwner_Type) < 0 || PyType_Ready(&ScopedCall_Type) < 0) {
        return -1;
    }
    Py_INCREF(&ScopedCall_Type);
    if (PyModule_AddObject(module, "ScopedCall", (PyObject *)&ScopedCall_Type) < 0) {
        Py_DECREF(&ScopedCall_Type);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ Python functions ------ */

static PyObject *py_set_callback(PyObject *Py_UNUSED(m), PyObject *cb)
{
    if (cb != Py_None && !PyCallable_Check(cb)) {
        PyErr_SetString(PyExc_TypeError, "set_callback: expected a callable or None");
        return NULL;
    }
    ThreadState *t = cb == Py_None ? current_state() : ensure_state();
    if (t == NULL) {
        return NULL;
    }
    if (t == &disabled_state) {
        Py_RETURN_NONE; /* disabling a thread that never enabled: nothing to do */
    }
    PyObject *previous = t->callback ? t->callback : Py_NewRef(Py_None);
    t->callback = cb == Py_None ? NULL : Py_NewRef(cb);
    update_enabled(t);
    return previous; /* the reference the thread state held */
}

static PyObject *py_get_callback(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    ThreadState *t = current_state();
    return Py_NewRef(t->callback ? t->callback : Py_None);
}

static PyObject *py_set_run_only_mode(PyObject *Py_UNUSED(m), PyObject *flag)
{
    int value = PyObject_IsTrue(flag);
    if (value < 0) {
        return NULL;
    }
    ThreadState *t = value ? ensure_state() : current_state();
    if (t == NULL) {
        return NULL;
    }
    PyObject *previous = PyBool_FromLong(t->run_only);
    if (t == &disabled_state) {
        return previous;
    }
    t->run_only = value;
    update_enabled(t);
    return previous;
}

static PyObject *py_get_run_only_mode(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyBool_FromLong(current_state()->run_only);
}

static PyObject *py_set_entry_limit(PyObject *Py_UNUSED(m), PyObject *arg)
{
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (n < 0 || n > 1 << 20) {
        PyErr_SetString(PyExc_ValueError, "set_entry_limit: expected 0 <= n <= 2**20");
        return NULL;
    }
    entry_limit = (int)n;
    Py_RETURN_NONE;
}

static PyObject *py_get_entry_limit(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyLong_FromLong(entry_limit);
}

static PyObject *py_set_limit_callback(PyObject *Py_UNUSED(m), PyObject *cb)
{
    if (cb != Py_None && !PyCallable_Check(cb)) {
        PyErr_SetString(PyExc_TypeError, "set_limit_callback: expected a callable or None");
        return NULL;
    }
    PyObject *old = limit_callback;
    limit_callback = cb == Py_None ? NULL : Py_NewRef(cb);
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

static PyObject *py_hook_installed(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    return PyBool_FromLong(_PyInterpreterState_GetEvalFrameFunc(interp) == pyjit_eval_frame);
}

/* A hook that does nothing but forward: the floor any PEP 523 hook pays (CPython stops
 * inlining Python-to-Python calls while one is installed). Benchmarks only. */
static PyObject *passthrough_eval_frame(PyThreadState *tstate, _PyInterpreterFrame *frame, int throwflag)
{
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
}

static PyObject *py_bench_passthrough(PyObject *Py_UNUSED(m), PyObject *flag)
{
    int on = PyObject_IsTrue(flag);
    if (on < 0) {
        return NULL;
    }
    PyInterpreterState *interp = PyInterpreterState_Get();
    _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
    if (on && current == _PyEval_EvalFrameDefault) {
        _PyInterpreterState_SetEvalFrameFunc(interp, passthrough_eval_frame);
    }
    else if (!on && current == passthrough_eval_frame) {
        _PyInterpreterState_SetEvalFrameFunc(interp, _PyEval_EvalFrameDefault);
    }
    else if (on || current != _PyEval_EvalFrameDefault) {
        PyErr_SetString(PyExc_RuntimeError, "_bench_passthrough: another eval function is installed");
        return NULL;
    }
    Py_RETURN_NONE;
}

PyMethodDef pyjit_eval_frame_methods[] = {
    {"_scoped_call", (PyCFunction)(void (*)(void))py_scoped_call, METH_FASTCALL,
     "_scoped_call(obj, args, kwargs): call a ScopedCall without the foreign-hook escape (the escape's target)."},
    {"set_escape_factory", py_set_escape_factory, METH_O,
     "set_escape_factory(fn() -> escape | None | None): makes the escape(obj, args, kwargs) a ScopedCall with a "
     "callback goes through while another frame hook is on top."},
    {"_bench_passthrough", py_bench_passthrough, METH_O,
     "_bench_passthrough(flag): install/remove a do-nothing PEP 523 hook (benchmark floor)."},
    {"set_callback", py_set_callback, METH_O,
     "set_callback(cb | None) -> previous: this thread's callback cb(func, args) -> None | (guard, code)."},
    {"get_callback", py_get_callback, METH_NOARGS, "get_callback() -> this thread's callback or None."},
    {"set_run_only_mode", py_set_run_only_mode, METH_O,
     "set_run_only_mode(flag) -> previous: this thread uses cache entries but never calls back."},
    {"get_run_only_mode", py_get_run_only_mode, METH_NOARGS, "get_run_only_mode() -> bool."},
    {"set_entry_limit", py_set_entry_limit, METH_O, "set_entry_limit(n): cache entries per code object (default 8)."},
    {"get_entry_limit", py_get_entry_limit, METH_NOARGS, "get_entry_limit() -> int."},
    {"set_limit_callback", py_set_limit_callback, METH_O,
     "set_limit_callback(fn(code) | None): called once per code object that reaches the entry limit."},
    {"_hook_installed", py_hook_installed, METH_NOARGS, "Whether pyjit's eval function is installed (tests)."},
    {NULL, NULL, 0, NULL},
};
