/* tensor_check.c: tensor guards without torch headers.
 *
 * Owns: discovery of the cheapest metadata readers of a tensor type (the C getter behind
 * each getset descriptor `dtype`, `device`, `requires_grad`, `shape`, and the C function of
 * the `stride` method), a small process-wide table of them keyed by type, and the match of
 * one tensor against a TensorSpec. Calling the getter directly skips the generic attribute
 * lookup (MRO walk, descriptor protocol, instance dict probe) that dominates `t.dtype`.
 * Semantics are those of the Python attributes: a getter that dispatches to
 * __torch_function__ still does so. dtype is compared by identity (torch dtypes are
 * singletons), device by equality (getter returns a fresh object each time).
 */
#include "tensor_check.h"

/* Method signatures of METH_FASTCALL functions (their typedef names differ by version). */
typedef PyObject *(*fast_fn)(PyObject *, PyObject *const *, Py_ssize_t);
typedef PyObject *(*fast_kw_fn)(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);

#define MAX_TENSOR_TYPES 32
static TensorAccess *access_table[MAX_TENSOR_TYPES];
static int access_count = 0;
static PyObject *empty_tuple = NULL;

static void find_getter(PyTypeObject *type, const char *name, getter *get, void **closure)
{
    *get = NULL;
    *closure = NULL;
    PyObject *name_obj = PyUnicode_InternFromString(name);
    if (name_obj == NULL) {
        PyErr_Clear();
        return;
    }
    PyObject *descr = _PyType_Lookup(type, name_obj); /* borrowed, never raises */
    Py_DECREF(name_obj);
    if (descr != NULL && Py_IS_TYPE(descr, &PyGetSetDescr_Type)) {
        PyGetSetDef *def = ((PyGetSetDescrObject *)descr)->d_getset;
        *get = def->get;
        *closure = def->closure;
    }
}

static const TensorAccess *get_access(PyTypeObject *type)
{
    for (int i = 0; i < access_count; i++) {
        if (access_table[i]->type == type) {
            return access_table[i];
        }
    }
    if (access_count == MAX_TENSOR_TYPES) {
        PyErr_SetString(PyExc_RuntimeError,
                        "pyjit._C: too many distinct tensor types in tensor guards (max 32)");
        return NULL;
    }
    if (empty_tuple == NULL) {
        empty_tuple = PyTuple_New(0);
        if (empty_tuple == NULL) {
            return NULL;
        }
    }
    TensorAccess *acc = PyMem_Calloc(1, sizeof(TensorAccess));
    if (acc == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    Py_INCREF(type);
    acc->type = type;
    find_getter(type, "dtype", &acc->get_dtype, &acc->cl_dtype);
    find_getter(type, "device", &acc->get_device, &acc->cl_device);
    find_getter(type, "requires_grad", &acc->get_requires_grad, &acc->cl_requires_grad);
    find_getter(type, "shape", &acc->get_shape, &acc->cl_shape);
    find_getter(type, "is_cpu", &acc->get_is_cpu, &acc->cl_is_cpu);
    PyObject *name_obj = PyUnicode_InternFromString("stride");
    if (name_obj == NULL) {
        Py_DECREF(type);
        PyMem_Free(acc);
        return NULL;
    }
    PyObject *descr = _PyType_Lookup(type, name_obj);
    Py_DECREF(name_obj);
    if (descr != NULL) {
        Py_INCREF(descr);
        acc->stride_descr = descr;
        if (Py_IS_TYPE(descr, &PyMethodDescr_Type)) {
            PyMethodDef *def = ((PyMethodDescrObject *)descr)->d_method;
            int flags = def->ml_flags & ~(METH_COEXIST | METH_STATIC | METH_CLASS);
            if (flags == (METH_VARARGS | METH_KEYWORDS) || flags == METH_NOARGS ||
                flags == METH_VARARGS || flags == METH_FASTCALL ||
                flags == (METH_FASTCALL | METH_KEYWORDS)) {
                acc->stride_meth = def->ml_meth;
                acc->stride_flags = flags;
            }
        }
    }
    access_table[access_count++] = acc;
    return acc;
}

/* New reference to attribute `name` of v, through the cached getter when there is one. */
static inline PyObject *read_attr(PyObject *v, getter get, void *closure, const char *name)
{
    if (get != NULL) {
        return get(v, closure);
    }
    return PyObject_GetAttrString(v, name);
}

static PyObject *read_strides(const TensorAccess *acc, PyObject *v)
{
    if (acc->stride_meth != NULL) {
        switch (acc->stride_flags) {
        case METH_VARARGS | METH_KEYWORDS:
            return ((PyCFunctionWithKeywords)(void (*)(void))acc->stride_meth)(v, empty_tuple, NULL);
        case METH_VARARGS:
            return acc->stride_meth(v, empty_tuple);
        case METH_NOARGS:
            return acc->stride_meth(v, NULL);
        case METH_FASTCALL:
            return ((fast_fn)(void (*)(void))acc->stride_meth)(v, NULL, 0);
        default:
            return ((fast_kw_fn)(void (*)(void))acc->stride_meth)(v, NULL, 0, NULL);
        }
    }
    if (acc->stride_descr != NULL) {
        return PyObject_Vectorcall(acc->stride_descr, &v, 1, NULL);
    }
    return PyObject_CallMethod(v, "stride", NULL);
}

/* Compare a tuple of ints with expected values; 1 equal, 0 not, -1 error. */
static int match_ints(PyObject *tup, const int64_t *expected, Py_ssize_t n)
{
    if (!PyTuple_Check(tup) || PyTuple_GET_SIZE(tup) != n) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (expected[i] == PYJIT_DYN) {
            continue;
        }
        long long got = PyLong_AsLongLong(PyTuple_GET_ITEM(tup, i));
        if (got == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (got != expected[i]) {
            return 0;
        }
    }
    return 1;
}

int pyjit_tensor_match(const TensorSpec *spec, PyObject *v)
{
    if (Py_TYPE(v) != spec->type) {
        return 0;
    }
    const TensorAccess *acc = spec->acc;
    int ok;
    PyObject *o = read_attr(v, acc->get_dtype, acc->cl_dtype, "dtype");
    if (o == NULL) {
        goto error;
    }
    ok = (o == spec->dtype);
    Py_DECREF(o);
    if (!ok) {
        return 0;
    }
    o = read_attr(v, acc->get_requires_grad, acc->cl_requires_grad, "requires_grad");
    if (o == NULL) {
        goto error;
    }
    ok = ((o == Py_True) == (spec->requires_grad != 0));
    Py_DECREF(o);
    if (!ok) {
        return 0;
    }
    o = read_attr(v, acc->get_shape, acc->cl_shape, "shape");
    if (o == NULL) {
        goto error;
    }
    ok = match_ints(o, spec->sizes, spec->ndim);
    Py_DECREF(o);
    if (ok <= 0) {
        goto done;
    }
    if (spec->strides != NULL) {
        o = read_strides(acc, v);
        if (o == NULL) {
            goto error;
        }
        ok = match_ints(o, spec->strides, spec->ndim);
        Py_DECREF(o);
        if (ok <= 0) {
            goto done;
        }
    }
    if (spec->device_is_cpu) {
        /* `device` builds a new torch.device per read; `is_cpu` returns a bool singleton. */
        o = acc->get_is_cpu(v, acc->cl_is_cpu);
        if (o == NULL) {
            goto error;
        }
        ok = (o == Py_True);
        Py_DECREF(o);
        goto done;
    }
    o = read_attr(v, acc->get_device, acc->cl_device, "device");
    if (o == NULL) {
        goto error;
    }
    ok = (o == spec->device) ? 1 : PyObject_RichCompareBool(o, spec->device, Py_EQ);
    Py_DECREF(o);
done:
    return ok;
error:
    /* The caller decides: an Exception fails the check, a KeyboardInterrupt propagates. */
    return -1;
}

/* Parse a tuple of int|None into values (PYJIT_DYN for None). Returns 1 if any is static. */
static int parse_dims(PyObject *tup, Py_ssize_t n, int64_t *out, const char *what)
{
    int any_static = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(tup, i);
        if (item == Py_None) {
            out[i] = PYJIT_DYN;
            continue;
        }
        if (!PyLong_Check(item) || PyBool_Check(item)) {
            PyErr_Format(PyExc_TypeError, "check_tensor: %s[%zd] must be int or None, got %.80s",
                         what, i, Py_TYPE(item)->tp_name);
            return -1;
        }
        long long value = PyLong_AsLongLong(item);
        if (value == -1 && PyErr_Occurred()) {
            return -1;
        }
        out[i] = (int64_t)value;
        any_static = 1;
    }
    return any_static;
}

static TensorSpec *build_spec(PyTypeObject *type, PyObject *dtype, PyObject *device,
                              int requires_grad, PyObject *sizes, PyObject *strides);

TensorSpec *pyjit_tensor_spec_new(PyObject *type, PyObject *dtype, PyObject *device,
                                  int requires_grad, PyObject *sizes, PyObject *strides)
{
    if (!PyType_Check(type)) {
        PyErr_SetString(PyExc_TypeError, "check_tensor: tensor_type must be a type");
        return NULL;
    }
    /* Any sequence of int|None (tuple, list, torch.Size); strides may also be None. */
    PyObject *sizes_seq = PySequence_Fast(sizes, "check_tensor: sizes must be a sequence of int|None");
    if (sizes_seq == NULL) {
        return NULL;
    }
    PyObject *strides_seq = NULL;
    if (strides != Py_None) {
        strides_seq = PySequence_Fast(strides, "check_tensor: strides must be None or a sequence of int|None");
        if (strides_seq == NULL) {
            Py_DECREF(sizes_seq);
            return NULL;
        }
    }
    TensorSpec *spec = build_spec((PyTypeObject *)type, dtype, device, requires_grad, sizes_seq, strides_seq);
    Py_DECREF(sizes_seq);
    Py_XDECREF(strides_seq);
    return spec;
}

static TensorSpec *build_spec(PyTypeObject *type, PyObject *dtype, PyObject *device,
                              int requires_grad, PyObject *sizes, PyObject *strides)
{
    Py_ssize_t ndim = PySequence_Fast_GET_SIZE(sizes);
    if (strides != NULL && PySequence_Fast_GET_SIZE(strides) != ndim) {
        PyErr_Format(PyExc_ValueError, "check_tensor: %zd strides for %zd sizes",
                     PySequence_Fast_GET_SIZE(strides), ndim);
        return NULL;
    }
    const TensorAccess *acc = get_access(type);
    if (acc == NULL) {
        return NULL;
    }
    TensorSpec *spec = PyMem_Calloc(1, sizeof(TensorSpec));
    if (spec == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    /* One allocation for sizes and strides; +1 keeps it non-empty for 0-d tensors. */
    spec->sizes = PyMem_Calloc((size_t)(2 * ndim + 1), sizeof(int64_t));
    if (spec->sizes == NULL) {
        PyMem_Free(spec);
        PyErr_NoMemory();
        return NULL;
    }
    spec->ndim = ndim;
    spec->acc = acc;
    spec->requires_grad = requires_grad;
    Py_INCREF(type);
    spec->type = type;
    Py_INCREF(dtype);
    spec->dtype = dtype;
    Py_INCREF(device);
    spec->device = device;
    if (acc->get_is_cpu != NULL) {
        /* torch.device("cpu") has type "cpu" (and index None); anything else uses `device`. */
        PyObject *dev_type = PyObject_GetAttrString(device, "type");
        if (dev_type == NULL) {
            PyErr_Clear();
        }
        else {
            PyObject *index = PyObject_GetAttrString(device, "index");
            if (index == NULL) {
                PyErr_Clear();
            }
            spec->device_is_cpu = index == Py_None && PyUnicode_Check(dev_type) &&
                                  PyUnicode_CompareWithASCIIString(dev_type, "cpu") == 0;
            Py_XDECREF(index);
            Py_DECREF(dev_type);
        }
    }
    if (parse_dims(sizes, ndim, spec->sizes, "sizes") < 0) {
        pyjit_tensor_spec_free(spec);
        return NULL;
    }
    if (strides != NULL) {
        int64_t *st = spec->sizes + ndim;
        int any = parse_dims(strides, ndim, st, "strides");
        if (any < 0) {
            pyjit_tensor_spec_free(spec);
            return NULL;
        }
        /* All-dynamic strides cost a stride() call for nothing: skip them. */
        spec->strides = any ? st : NULL;
    }
    return spec;
}

void pyjit_tensor_spec_free(TensorSpec *spec)
{
    if (spec == NULL) {
        return;
    }
    Py_CLEAR(spec->type);
    Py_CLEAR(spec->dtype);
    Py_CLEAR(spec->device);
    PyMem_Free(spec->sizes);
    PyMem_Free(spec);
}

int pyjit_tensor_spec_traverse(TensorSpec *spec, visitproc visit, void *arg)
{
    Py_VISIT(spec->type);
    Py_VISIT(spec->dtype);
    Py_VISIT(spec->device);
    return 0;
}

static PyObject *dims_to_tuple(const int64_t *values, Py_ssize_t n)
{
    PyObject *tup = PyTuple_New(n);
    if (tup == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item;
        if (values[i] == PYJIT_DYN) {
            item = Py_NewRef(Py_None);
        }
        else {
            item = PyLong_FromLongLong(values[i]);
            if (item == NULL) {
                Py_DECREF(tup);
                return NULL;
            }
        }
        PyTuple_SET_ITEM(tup, i, item);
    }
    return tup;
}

PyObject *pyjit_tensor_spec_describe(const TensorSpec *spec)
{
    PyObject *sizes = dims_to_tuple(spec->sizes, spec->ndim);
    if (sizes == NULL) {
        return NULL;
    }
    PyObject *strides = spec->strides ? dims_to_tuple(spec->strides, spec->ndim) : Py_NewRef(Py_None);
    if (strides == NULL) {
        Py_DECREF(sizes);
        return NULL;
    }
    PyObject *d = Py_BuildValue("{sOsOsOsOsNsN}", "tensor_type", (PyObject *)spec->type,
                                "dtype", spec->dtype, "device", spec->device, "requires_grad",
                                spec->requires_grad ? Py_True : Py_False, "sizes", sizes,
                                "strides", strides);
    return d;
}
