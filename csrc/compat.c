/* compat.c: frame clean-up per CPython version for frames whose original code never ran.
 *
 * When the hook runs replacement code instead of the frame it was handed, the frame's
 * argument slots, function and code references are still owned by that frame:
 *   3.11: _PyEval_Vector clears and pops the frame after the eval function returns: nothing to do.
 *   3.12: the eval function owns the frame; CPython's clear-and-pop helper is static, so it is
 *         reimplemented here from public struct fields (frame_obj is always NULL for an
 *         unlinked, never-run frame, so the "take ownership" branch cannot occur).
 *   3.13: the helper is exported as _PyEval_FrameClearAndPop.
 */
#include "compat.h"

#if PYJIT_PY313
/* Exported (PyAPI_FUNC) by libpython 3.13; declared in internal/pycore_ceval.h, which we do
 * not include because it drags in the whole interpreter-state headers. */
PyAPI_FUNC(void) _PyEval_FrameClearAndPop(PyThreadState *tstate, _PyInterpreterFrame *frame);
#endif

#if PYJIT_PY312
/* Pop `frame` off the thread's data stack; frees the stack chunk when the frame starts one
 * (the arena allocator is the public face of the hidden _PyObject_VirtualFree). */
static void pop_frame_312(PyThreadState *tstate, _PyInterpreterFrame *frame)
{
    PyObject **base = (PyObject **)frame;
    _PyStackChunk *chunk = tstate->datastack_chunk;
    if (base == &chunk->data[0]) {
        _PyStackChunk *previous = chunk->previous;
        PyObjectArenaAllocator arena;
        PyObject_GetArenaAllocator(&arena);
        tstate->datastack_top = &previous->data[previous->top];
        tstate->datastack_chunk = previous;
        tstate->datastack_limit = (PyObject **)(((char *)previous) + previous->size);
        arena.free(arena.ctx, chunk, chunk->size);
    }
    else {
        tstate->datastack_top = base;
    }
}
#endif

void pyjit_release_unrun_frame(PyThreadState *tstate, _PyInterpreterFrame *frame)
{
#if PYJIT_PY311
    (void)tstate;
    (void)frame;
#elif PYJIT_PY312
    /* The frame must be the top of the data stack; it was never linked as the current frame,
     * so finalizers run by the DECREFs below cannot see it (GH-99729). */
    tstate->c_recursion_remaining--;
    for (int i = 0; i < frame->stacktop; i++) {
        Py_XDECREF(frame->localsplus[i]);
    }
    Py_XDECREF(frame->frame_obj);
    Py_XDECREF(frame->f_locals);
    Py_DECREF(frame->f_funcobj);
    Py_DECREF(frame->f_code);
    tstate->c_recursion_remaining++;
    pop_frame_312(tstate, frame);
#else
    _PyEval_FrameClearAndPop(tstate, frame);
#endif
}
