/* eval_frame.c: the PEP 523 frame-evaluation hook.
 *
 * Owns: the per-thread state (callback, run-only mode, re-entrancy counter; owned by the
 * thread-state dict so that it dies with the thread), installing the hook interpreter-wide
 * while at least one thread is enabled (a terminal evaluator that steps aside when another hook
 * is on top), the frame filter, cache lookup, the callback on a miss, the entry limit, and
 * running replacement code. ScopedCall (jitted-call entry) lives in scoped_call.c.
 *
 * Running replacement code (docs/internals.md, "flat-vector call"): a function is built from
 * the replacement code with the original function's globals and closure, and called with the
 * frame's argument slots (localsplus[0:nargs]) as positional arguments. The replacement's
 * own frame re-enters this hook and is recognised through `expected_code`. The original
 * frame never runs; it is released per version by pyjit_release_unrun_frame (compat.c).
 * Policy lives in Python: this file only stores and checks what the callback decided.
 */
#include "eval_frame.h"
#include "eval_frame_internal.h"
#include <stddef.h>
#include "cache.h"
#include "guards.h"


/* Per-thread state lives on the heap, owned by a ThreadStateOwner object stored in the
 * thread's PyThreadState dict: when the thread ends, CPython clears that dict
 * (PyThreadState_Clear) and the owner releases the callback and, if the thread was still
 * enabled, its share of the installed hook. A thread that never enabled pyjit has no state
 * and reads `disabled_state` (all zero, never written: every writer is behind `enabled`). */
ThreadState pyjit_disabled_state;
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
/* Profiler ranges around a guarded cache lookup (pyjit/report/profiler.py): the dict holding the
 * profiler's "enabled" flag, the flag's key, and enter(code) -> handle / exit(handle). All
 * strong or NULL; while NULL (or the flag is not True) the lookup pays one pointer test. */
static PyObject *profile_flags = NULL;
static PyObject *profile_key = NULL;
static PyObject *profile_enter = NULL;
static PyObject *profile_exit = NULL;


/* ------------------------------------------------------------ install / enable -------- */

int pyjit_hook_on_top(PyInterpreterState *interp)
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
    if (pyjit_hook_on_top(interp)) {
        _PyInterpreterState_SetEvalFrameFunc(interp, restore_eval);
    }
}

void pyjit_update_enabled(ThreadState *t)
{
    int now = (t->callback != NULL || t->run_only) && !t->suspended;
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
            pyjit_update_enabled(t); /* gives back this thread's share of the hook */
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
ThreadState *pyjit_current_state(void)
{
    ThreadState *t = tls_state;
    return t != NULL ? t : &pyjit_disabled_state;
}

/* This thread's own state, created (with its owner in the thread-state dict) on first use.
 * NULL with an exception set on failure. */
ThreadState *pyjit_ensure_state(void)
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
            if (!pyjit_hook_on_top(interp)) {
                over = _PyInterpreterState_GetEvalFrameFunc(interp);
                _PyInterpreterState_SetEvalFrameFunc(interp, pyjit_eval_frame);
            }
            t->expected_code = code;
            /* No PY_VECTORCALL_ARGUMENTS_OFFSET: localsplus[-1] belongs to the frame header. */
            res = PyObject_Vectorcall(fn, frame->localsplus, (size_t)nargs, NULL);
            t->expected_code = NULL; /* normally consumed on entry; cleared on early failure */
            if (over != NULL && pyjit_hook_on_top(interp)) {
                _PyInterpreterState_SetEvalFrameFunc(interp, over);
            }
        }
        Py_DECREF(fn);
    }
    pyjit_release_unrun_frame(tstate, frame);
    return res;
}

/* Whether every argument slot holds an object whose exact type is in `types` (the plain mark,
 * CodeExtra.plain_types): a few pointer compares per argument, no Python calls. */
static inline int plain_call(PyObject *types, PyObject **slots, Py_ssize_t nargs)
{
    Py_ssize_t n = PyTuple_GET_SIZE(types);
    PyObject **items = ((PyTupleObject *)types)->ob_item;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyObject *slot = slots[i];
        if (slot == NULL) {
            return 0;
        }
        PyObject *tp = (PyObject *)Py_TYPE(slot);
        Py_ssize_t j = 0;
        while (j < n && items[j] != tp) {
            j++;
        }
        if (j == n) {
            return 0;
        }
    }
    return 1;
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

/* A profiler range around a guarded lookup, only while the profiler's flag is True; NULL
 * otherwise. Errors in the callbacks are dropped (a range must never change the program), and
 * an exception already set (a failed guard check) is kept across the exit call. */
static PYJIT_NOINLINE PyObject *profile_range_enter(PyCodeObject *co)
{
    PyObject *flag = PyDict_GetItemWithError(profile_flags, profile_key); /* borrowed */
    if (flag != Py_True) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *handle = PyObject_CallOneArg(profile_enter, (PyObject *)co);
    if (handle == NULL) {
        PyErr_Clear();
    }
    return handle;
}

static void profile_range_exit(PyObject *handle)
{
    if (handle == NULL) {
        return;
    }
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *pending = PyErr_GetRaisedException();
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
#endif
    PyObject *r = PyObject_CallOneArg(profile_exit, handle);
    if (r == NULL) {
        PyErr_Clear();
    }
    Py_XDECREF(r);
    Py_DECREF(handle);
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(pending);
#else
    PyErr_Restore(type, value, tb);
#endif
}

/* Everything after the fast path: an enabled thread, no throw, code not marked skip (`ex` is
 * its state or NULL). Kept out of line so that the fast path below needs no stack frame. */
static PYJIT_NOINLINE PyObject *eval_frame_enabled(PyThreadState *tstate, _PyInterpreterFrame *frame,
                                                   ThreadState *t, CodeExtra *ex)
{
    /* Another frame hook is installed over ours and handed us this frame (Dynamo inside a
     * torch.compile'd call): that hook owns the thread's frames now; step aside. */
    if (!pyjit_hook_on_top(tstate->interp)) {
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
        PyObject *range = profile_flags != NULL ? profile_range_enter(co) : NULL;
        for (CacheEntry *e = ex->head; e != NULL; prev = e, e = e->next) {
            long failed = e->guard == NULL ? -1 : pyjit_guard_check(e->guard, func, frame->localsplus, nargs);
            if (failed == PYJIT_GUARD_ERROR) {
                /* KeyboardInterrupt/SystemExit raised inside a Python-level check. */
                profile_range_exit(range);
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
                profile_range_exit(range);
                t->busy--;
                PyObject *res = run_replacement(tstate, frame, t, (PyCodeObject *)code, nargs);
                Py_DECREF(code);
                return res;
            }
        }
        profile_range_exit(range);
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
    cached_thread_state = pyjit_current_state();
    return pyjit_eval_frame(tstate, frame, throwflag);
}

static PYJIT_NOINLINE PyObject *eval_frame_unmirrored(PyThreadState *tstate, _PyInterpreterFrame *frame,
                                                      ThreadState *t)
{
    PyCodeObject *co = PYJIT_FRAME_CODE(frame);
    CodeExtra *ex = pyjit_extra_get_slow(co);
    if (ex != NULL && (ex->skip || (ex->plain_types != NULL &&
                                    plain_call(ex->plain_types, frame->localsplus, argument_slots(co))))) {
        return run_original(tstate, frame, 0);
    }
    return eval_frame_enabled(tstate, frame, t, ex);
}

/* The hook. Fast path, taken by every frame of a thread that has not enabled pyjit, by every
 * frame of code marked skip and by every plain call (CodeExtra.plain_types): a thread-id
 * compare, two flag reads, one co_extra read (plus one type compare per argument for a plain
 * mark), a tail call. Checking the marks before the frame filter is safe: every filtered frame
 * runs its original code too, and a marked replacement code's `expected_code` is cleared by
 * run_replacement after the call. A skip mark stops only this code object's lookups and
 * callbacks: the frames it calls reach this hook as their own frames. */
PyObject *pyjit_eval_frame(PyThreadState *tstate, _PyInterpreterFrame *frame, int throwflag)
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
    PyCodeObject *co = PYJIT_FRAME_CODE(frame);
    CodeExtra *ex = pyjit_extra_get_mirrored(co);
    if (ex != NULL && (ex->skip || (ex->plain_types != NULL &&
                                    plain_call(ex->plain_types, frame->localsplus, argument_slots(co))))) {
        return run_original(tstate, frame, 0);
    }
    return eval_frame_enabled(tstate, frame, t, ex);
}

int pyjit_eval_frame_ready(PyObject *module)
{
    owner_key = PyUnicode_InternFromString("pyjit._C.thread_state");
    if (owner_key == NULL || PyType_Ready(&ThreadStateOwner_Type) < 0) {
        return -1;
    }
    return pyjit_scoped_call_ready(module);
}

/* ------------------------------------------------------------ Python functions ------ */

static PyObject *py_set_callback(PyObject *Py_UNUSED(m), PyObject *cb)
{
    if (cb != Py_None && !PyCallable_Check(cb)) {
        PyErr_SetString(PyExc_TypeError, "set_callback: expected a callable or None");
        return NULL;
    }
    ThreadState *t = cb == Py_None ? pyjit_current_state() : pyjit_ensure_state();
    if (t == NULL) {
        return NULL;
    }
    if (t == &pyjit_disabled_state) {
        Py_RETURN_NONE; /* disabling a thread that never enabled: nothing to do */
    }
    PyObject *previous = t->callback ? t->callback : Py_NewRef(Py_None);
    t->callback = cb == Py_None ? NULL : Py_NewRef(cb);
    pyjit_update_enabled(t);
    return previous; /* the reference the thread state held */
}

static PyObject *py_get_callback(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    ThreadState *t = pyjit_current_state();
    return Py_NewRef(t->callback ? t->callback : Py_None);
}

/* Set one of the calling thread's mode flags (run-only, suspended) from a truth value and
 * return its previous value; a thread that never enabled pyjit keeps no state to change. */
static PyObject *swap_thread_flag(PyObject *flag, size_t field_offset)
{
    int value = PyObject_IsTrue(flag);
    if (value < 0) {
        return NULL;
    }
    ThreadState *t = value ? pyjit_ensure_state() : pyjit_current_state();
    if (t == NULL) {
        return NULL;
    }
    int *field = (int *)((char *)t + field_offset);
    PyObject *previous = PyBool_FromLong(*field);
    if (t == &pyjit_disabled_state) {
        return previous;
    }
    *field = value;
    pyjit_update_enabled(t);
    return previous;
}

static PyObject *py_set_run_only_mode(PyObject *Py_UNUSED(m), PyObject *flag)
{
    return swap_thread_flag(flag, offsetof(ThreadState, run_only));
}

static PyObject *py_get_run_only_mode(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyBool_FromLong(pyjit_current_state()->run_only);
}

static PyObject *py_set_suspended(PyObject *Py_UNUSED(m), PyObject *flag)
{
    return swap_thread_flag(flag, offsetof(ThreadState, suspended));
}

static PyObject *py_get_suspended(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyBool_FromLong(pyjit_current_state()->suspended);
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

static PyObject *py_set_profiler_hooks(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *flags, *key, *enter, *exit_fn;
    if (!PyArg_ParseTuple(args, "OOOO:set_profiler_hooks", &flags, &key, &enter, &exit_fn)) {
        return NULL;
    }
    if (flags != Py_None && (!PyDict_Check(flags) || !PyCallable_Check(enter) || !PyCallable_Check(exit_fn))) {
        PyErr_SetString(PyExc_TypeError, "set_profiler_hooks(flags: dict | None, key, enter, exit): "
                                         "expected a dict and two callables");
        return NULL;
    }
    Py_CLEAR(profile_flags);
    Py_CLEAR(profile_key);
    Py_CLEAR(profile_enter);
    Py_CLEAR(profile_exit);
    if (flags != Py_None) {
        profile_key = Py_NewRef(key);
        profile_enter = Py_NewRef(enter);
        profile_exit = Py_NewRef(exit_fn);
        profile_flags = Py_NewRef(flags); /* last: the hook tests this one */
    }
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
    {"_bench_passthrough", py_bench_passthrough, METH_O,
     "_bench_passthrough(flag): install/remove a do-nothing PEP 523 hook (benchmark floor)."},
    {"set_callback", py_set_callback, METH_O,
     "set_callback(cb | None) -> previous: this thread's callback cb(func, args) -> None | (guard, code)."},
    {"get_callback", py_get_callback, METH_NOARGS, "get_callback() -> this thread's callback or None."},
    {"set_run_only_mode", py_set_run_only_mode, METH_O,
     "set_run_only_mode(flag) -> previous: this thread uses cache entries but never calls back."},
    {"get_run_only_mode", py_get_run_only_mode, METH_NOARGS, "get_run_only_mode() -> bool."},
    {"set_suspended", py_set_suspended, METH_O,
     "set_suspended(flag) -> previous: this thread runs every frame natively (no cache entry, no callback)."},
    {"get_suspended", py_get_suspended, METH_NOARGS, "get_suspended() -> bool."},
    {"set_entry_limit", py_set_entry_limit, METH_O, "set_entry_limit(n): cache entries per code object (default 8)."},
    {"get_entry_limit", py_get_entry_limit, METH_NOARGS, "get_entry_limit() -> int."},
    {"set_limit_callback", py_set_limit_callback, METH_O,
     "set_limit_callback(fn(code) | None): called once per code object that reaches the entry limit."},
    {"set_profiler_hooks", py_set_profiler_hooks, METH_VARARGS,
     "set_profiler_hooks(flags, key, enter, exit): while flags[key] is True, a guarded cache lookup runs "
     "between enter(code) -> handle and exit(handle); flags None removes them."},
    {"_hook_installed", py_hook_installed, METH_NOARGS, "Whether pyjit's eval function is installed (tests)."},
    {NULL, NULL, 0, NULL},
};
