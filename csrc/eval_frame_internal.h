/* eval_frame_internal.h: what eval_frame.c shares with scoped_call.c (private to csrc/). */
#ifndef PYJIT_EVAL_FRAME_INTERNAL_H
#define PYJIT_EVAL_FRAME_INTERNAL_H

#include "compat.h"

typedef struct {
    PyObject *callback;          /* strong or NULL; the thread's callback */
    int run_only;                /* thread run-only mode: use entries, never call back */
    int suspended;               /* every frame runs natively: no entry, no callback (force_eager) */
    int enabled;                 /* (callback != NULL || run_only) && !suspended */
    int busy;                    /* > 0 while our callback or guards run: default evaluator */
    PyCodeObject *expected_code; /* replacement code about to be entered by this thread */
} ThreadState;

/* The all-zero state of threads that never enabled pyjit (never written). */
extern ThreadState pyjit_disabled_state;

/* This thread's state, or &pyjit_disabled_state. */
ThreadState *pyjit_current_state(void);
/* This thread's own state, created on first use (owned by its thread-state dict); NULL + error. */
ThreadState *pyjit_ensure_state(void);
/* Recompute t->enabled; installs the hook for the first enabled thread, removes it after the last. */
void pyjit_update_enabled(ThreadState *t);
/* Whether pyjit's hook is the interpreter's eval function (on top of any other hook). */
int pyjit_hook_on_top(PyInterpreterState *interp);
/* The hook itself. */
PyObject *pyjit_eval_frame(PyThreadState *tstate, _PyInterpreterFrame *frame, int throwflag);
/* Module init of scoped_call.c: the ScopedCall type and its functions. 0 or -1. */
int pyjit_scoped_call_ready(PyObject *module);

#endif /* PYJIT_EVAL_FRAME_INTERNAL_H */
