/* compat.h: the only place that knows how CPython 3.11, 3.12 and 3.13 differ for pyjit._C.
 *
 * Owns: the internal-header includes (frame layout), accessor macros for frame fields whose
 * names changed between versions, the co_extra API names, and the frame clean-up that the
 * eval function owes the interpreter on 3.12+ (see docs/internals.md and
 * ../shared/notes/cpython-frames.md sections 2, 5 and 7).
 */
#ifndef PYJIT_COMPAT_H
#define PYJIT_COMPAT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000
#error "pyjit._C supports CPython 3.11, 3.12 and 3.13 only"
#endif

/* The frame struct lives in an internal header. Py_BUILD_CORE is defined only around it
 * (3.13 refuses internal headers without it) and never before Python.h, so our exported
 * symbols keep extension linkage. 3.12 also needs _PyGC_FINALIZED undefined (cpython#105268). */
#define Py_BUILD_CORE
#undef _PyGC_FINALIZED
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

#define PYJIT_PY311 (PY_VERSION_HEX < 0x030C0000)
#define PYJIT_PY312 (PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030D0000)
#define PYJIT_PY313 (PY_VERSION_HEX >= 0x030D0000)

/* Globals shared between our own translation units only: hidden, so that the hot path reads
 * them PC-relative instead of through the GOT (the module exports only PyInit__C). */
#if defined(__GNUC__)
#define PYJIT_INTERNAL __attribute__((visibility("hidden")))
#else
#define PYJIT_INTERNAL
#endif

/* Frame fields renamed between versions. */
#if PYJIT_PY311
#define PYJIT_FRAME_CODE(f) ((f)->f_code)
#define PYJIT_FRAME_FUNC(f) ((f)->f_func)
#elif PYJIT_PY312
#define PYJIT_FRAME_CODE(f) ((f)->f_code)
#define PYJIT_FRAME_FUNC(f) ((PyFunctionObject *)(f)->f_funcobj)
#else
#define PYJIT_FRAME_CODE(f) ((PyCodeObject *)(f)->f_executable)
#define PYJIT_FRAME_FUNC(f) ((PyFunctionObject *)(f)->f_funcobj)
#endif

/* co_extra: 3.12 renamed the exported functions to PyUnstable_*; the _Py names became
 * deprecated inline wrappers (which would warn under -Wall). */
#if PYJIT_PY311
#define PYJIT_RequestCodeExtraIndex _PyEval_RequestCodeExtraIndex
#define PYJIT_Code_GetExtra _PyCode_GetExtra
#define PYJIT_Code_SetExtra _PyCode_SetExtra
#else
#define PYJIT_RequestCodeExtraIndex PyUnstable_Eval_RequestCodeExtraIndex
#define PYJIT_Code_GetExtra PyUnstable_Code_GetExtra
#define PYJIT_Code_SetExtra PyUnstable_Code_SetExtra
#endif

/* Interpreter shutdown: no new compilation once finalisation started (modules are torn down). */
#if PYJIT_PY313
#define PYJIT_IsFinalizing Py_IsFinalizing
#else
#define PYJIT_IsFinalizing _Py_IsFinalizing
#endif

/* Hot-path read of co_extra without a call into libpython. The holder struct is private to
 * Objects/codeobject.c but has had this layout since 3.7 (3.7-3.13 identical); module init
 * verifies it against the API on a scratch code object and falls back to the API if not. */
typedef struct {
    Py_ssize_t ce_size;
    void *ce_extras[1];
} pyjit_code_extra_mirror;

/* Weak identity: a weakref's referent pointer, Py_None once the referent died. Reading the
 * field directly (public struct in cpython/weakrefobject.h) avoids the deprecated
 * PyWeakref_GET_OBJECT and any reference counting; we only ever compare the pointer. */
#define PYJIT_WEAK_TARGET(wr) (((PyWeakReference *)(wr))->wr_object)

/* Value of an exact int of at most one digit (every tensor size/stride below 2**30) without a
 * call into libpython: 1 and *out set, or 0 when the caller must use PyLong_AsLongLong.
 * 3.11 stores the sign and digit count in ob_size (ob_digit[0] always exists; its contents
 * do not matter when ob_size is 0); 3.12 made the representation private behind the
 * PyUnstable_Long_* inlines. */
static inline int pyjit_compact_int(PyObject *o, int64_t *out)
{
    if (!PyLong_CheckExact(o)) {
        return 0;
    }
#if PYJIT_PY311
    Py_ssize_t size = Py_SIZE(o);
    if (size < -1 || size > 1) {
        return 0;
    }
    *out = (int64_t)size * (int64_t)((PyLongObject *)o)->ob_digit[0];
    return 1;
#else
    if (!PyUnstable_Long_IsCompact((PyLongObject *)o)) {
        return 0;
    }
    *out = (int64_t)PyUnstable_Long_CompactValue((PyLongObject *)o);
    return 1;
#endif
}

/* A dict's version tag: globally unique per dict and changed by every modification (3.11:
 * PEP 509; 3.12 and 3.13 keep it, now also carrying watcher bits in its low bits, which only
 * makes it change more often). Deprecated for extensions since 3.12 (removal planned for
 * 3.14, which this module refuses at build time), hence the local pragma. */
static inline uint64_t pyjit_dict_version(PyObject *dict)
{
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
    return ((PyDictObject *)dict)->ma_version_tag;
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
}

/* Release an intercepted frame whose code we did not run (see compat.c). */
void pyjit_release_unrun_frame(PyThreadState *tstate, _PyInterpreterFrame *frame);

#endif /* PYJIT_COMPAT_H */
