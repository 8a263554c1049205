/* tensor_check.h: tensor metadata match without torch headers (see tensor_check.c). */
#ifndef PYJIT_TENSOR_CHECK_H
#define PYJIT_TENSOR_CHECK_H

#include "compat.h"

/* Marks an unchecked (dynamic) size or stride. Real sizes/strides are never this value. */
#define PYJIT_DYN INT64_MIN

/* The cheapest ways to read one tensor type's metadata: C getters of its getset
 * descriptors and the C function of its `stride` method, found once per type. A NULL
 * getter means "fall back to generic attribute access" (e.g. a Python property). */
typedef struct TensorAccess {
    PyTypeObject *type; /* strong */
    getter get_dtype, get_device, get_requires_grad, get_shape, get_is_cpu;
    void *cl_dtype, *cl_device, *cl_requires_grad, *cl_shape, *cl_is_cpu;
    PyObject *stride_descr; /* strong; the `stride` attribute found on the type */
    PyCFunction stride_meth; /* NULL: call stride_descr generically */
    int stride_flags;
} TensorAccess;

/* What one tensor must look like. */
typedef struct TensorSpec {
    PyTypeObject *type;  /* strong; exact type */
    PyObject *dtype;     /* strong; compared by identity */
    PyObject *device;    /* strong; compared by ==, after a pointer fast path */
    int requires_grad;
    int device_is_cpu;   /* expected device is CPU: the allocation-free `is_cpu` getter decides */
    Py_ssize_t ndim;
    int64_t *sizes;      /* ndim values, PYJIT_DYN = not checked */
    int64_t *strides;    /* ndim values or NULL = none checked */
    const TensorAccess *acc;
} TensorSpec;

/* Build a spec from Python values (sizes/strides: tuples of int|None, strides may be None).
 * Returns NULL with an exception set on bad input. */
TensorSpec *pyjit_tensor_spec_new(PyObject *type, PyObject *dtype, PyObject *device,
                                  int requires_grad, PyObject *sizes, PyObject *strides);
void pyjit_tensor_spec_free(TensorSpec *spec);
/* 1: matches, 0: does not, -1: reading metadata raised (exception set; guards.c decides). */
int pyjit_tensor_match(const TensorSpec *spec, PyObject *value);
/* Python-visible description of a spec (a dict), for pretty printing and explanations. */
PyObject *pyjit_tensor_spec_describe(const TensorSpec *spec);
int pyjit_tensor_spec_traverse(TensorSpec *spec, visitproc visit, void *arg);

#endif /* PYJIT_TENSOR_CHECK_H */
