/* eval_frame.h: the PEP 523 hook and the per-thread state that drives it (eval_frame.c). */
#ifndef PYJIT_EVAL_FRAME_H
#define PYJIT_EVAL_FRAME_H

#include "compat.h"

/* Module-level functions implemented in eval_frame.c (set_callback, modes, limits). */
extern PyMethodDef pyjit_eval_frame_methods[];

/* Module init: the ScopedCall type and the per-thread state owner type. 0 or -1. */
int pyjit_eval_frame_ready(PyObject *module);

#endif /* PYJIT_EVAL_FRAME_H */
