/* tensor_check.h: tensor metadata match without torch headers (see tensor_check.c). */
#ifndef PYJIT_TENSOR_CHECK_H
#define PYJIT_TENSOR_CHECK_H

#include "compat.h"
#include "shape_program.h"

/* Marks an unchecked (dynamic) size or stride. Real sizes/strides are never this value. */
#define PYJIT_DYN INT64_MIN

/* The C getter behind a getset descriptor; get == NULL: use generic attribute access. */
typedef struct {
    getter get;
    void *closure;
} GetterRef;

/* A no-argument method found on the type: its C function when it is a method descriptor
 * with a signature we can call directly, else the descriptor itself (called generically). */
typedef struct {
    PyObject *descr;  /* strong, or NULL when the type has no such attribute */
    PyCFunction meth; /* NULL: call generically */
    int flags;        /* ml_flags without METH_COEXIST/STATIC/CLASS */
} MethodRef;

/* The cheapest ways to read one tensor type's metadata, found once per type. */
typedef struct TensorAccess {
    PyTypeObject *type; /* strong */
    GetterRef dtype, device, requires_grad, shape, is_cpu;
    MethodRef stride, is_contiguous, get_device;
    /* is_contiguous() is torch's own C method and the type overrides neither
     * __torch_function__ (or only with torch's disabled impl, as nn.Parameter does) nor
     * __torch_dispatch__, relative to the first Python class above the C base (torch.Tensor):
     * its answer then follows from the sizes and strides that `shape` and `stride()` report,
     * so it may stand in for stride() (see match_strides). */
    int contiguity_trusted;
} TensorAccess;

/* How the device is compared (chosen once per spec from the expected device). */
typedef enum {
    DEV_GENERIC, /* `device` getter (a new torch.device per read) and == */
    DEV_CPU,     /* expected plain CPU: `is_cpu` (CPU tensors never carry a device index) */
    DEV_PROBE,   /* expected cuda/meta/xpu/mps: `is_<type>` getter and get_device() == index */
} DeviceMode;

/* How the strides are compared. */
typedef enum {
    STRIDES_NONE,       /* all dynamic: not read */
    STRIDES_EXACT,      /* stride() tuple against the expected values */
    STRIDES_CONTIGUOUS, /* expected = contiguous strides of static sizes all >= 2: is_contiguous() */
} StrideMode;

/* What one tensor must look like. */
typedef struct TensorSpec {
    PyTypeObject *type;  /* strong; exact type */
    PyObject *dtype;     /* strong; compared by identity */
    PyObject *device;    /* strong; compared by ==, after a pointer fast path */
    int requires_grad;
    DeviceMode device_mode;
    GetterRef device_probe; /* DEV_PROBE: the `is_<type>` getter */
    long device_index;      /* DEV_PROBE: expected get_device() (-1 for an index of None) */
    StrideMode stride_mode;
    Py_ssize_t ndim;
    int64_t *sizes;      /* ndim values, PYJIT_DYN = not checked */
    int64_t *strides;    /* ndim values or NULL = none checked */
    const TensorAccess *acc;
    /* Dynamic shapes: sizes/strides stored into symbol slots when the check passes. */
    SlotBind *bind;      /* n_bind entries (PyMem) or NULL */
    Py_ssize_t n_bind;
    int bind_strides;    /* some binding reads a stride: stride() is read even when unchecked */
} TensorSpec;

/* Build a spec from Python values (sizes/strides: tuples of int|None, strides may be None;
 * bind: NULL/None or a sequence of (what, dim, slot) int triples, what 0 = size, 1 = stride).
 * Returns NULL with an exception set on bad input. */
TensorSpec *pyjit_tensor_spec_new(PyObject *type, PyObject *dtype, PyObject *device,
                                  int requires_grad, PyObject *sizes, PyObject *strides,
                                  PyObject *bind);
void pyjit_tensor_spec_free(TensorSpec *spec);
/* 1: matches, 0: does not, -1: reading metadata raised (exception set; guards.c decides).
 * The spec's bindings are stored into `slots` (may be NULL) as the values are read; they
 * only count when the match returns 1 (otherwise the whole evaluation fails anyway). */
int pyjit_tensor_match(const TensorSpec *spec, PyObject *value, const SlotFrame *slots);
/* Python-visible description of a spec (a dict), for pretty printing and explanations. */
PyObject *pyjit_tensor_spec_describe(const TensorSpec *spec);
int pyjit_tensor_spec_traverse(TensorSpec *spec, visitproc visit, void *arg);

#endif /* PYJIT_TENSOR_CHECK_H */
