/* guards.h: the compiled guard tree evaluated on every frame entry (see guards.c). */
#ifndef PYJIT_GUARDS_H
#define PYJIT_GUARDS_H

#include "compat.h"

extern PyTypeObject PyjitGuardNode_Type;
extern PyTypeObject PyjitGuardTree_Type;

int pyjit_guards_ready(PyObject *module);

#define PYJIT_GUARD_ERROR (-2L)

/* Evaluate a GuardTree for a call of `func` with the frame's argument slots `args`.
 * Returns -1 when every check passes, else the id of the first failing check (depth-first,
 * in insertion order). An accessor or check raising an Exception counts as a failure of the
 * first check at or below it (the error is cleared). Only a BaseException that is not an
 * Exception (KeyboardInterrupt, SystemExit) stops evaluation: PYJIT_GUARD_ERROR with the
 * exception set, for the caller to propagate. */
long pyjit_guard_check(PyObject *tree, PyFunctionObject *func, PyObject *const *args,
                       Py_ssize_t nargs);

#endif /* PYJIT_GUARDS_H */
