/* tensor_check.c: tensor guards without torch headers.
 *
 * Owns: discovery of the cheapest metadata readers of a tensor type (the C getter behind
 * each getset descriptor `dtype`, `device`, `requires_grad`, `shape`, `is_cpu`, `is_<device>`,
 * and the C functions of the methods `stride`, `is_contiguous`, `get_device`), a small
 * process-wide table of them keyed by type, the choice of the cheapest exact comparison per
 * spec (strides, device), and the match of one tensor against a TensorSpec.
 *
 * Calling the getter directly skips the generic attribute lookup (MRO walk, descriptor
 * protocol, instance dict probe) that dominates `t.dtype`. What remains is torch's own cost
 * per call (error-handling scaffolding, __torch_function__ test: ~250 instructions), so the
 * rest of this file is about making fewer calls and cheaper ones: bool singletons instead of
 * new objects (`is_cpu` instead of `device`, `is_contiguous()` instead of `stride()` where
 * that is the same statement). Semantics are those of the Python attributes: a getter that
 * dispatches to __torch_function__ still does so. dtype is compared by identity (torch dtypes
 * are singletons). docs/internals.md ("Tensor checks without torch headers") lists the rules.
 */
#include "tensor_check.h"

/* Method signatures of METH_FASTCALL functions (their typedef names differ by version). */
typedef PyObject *(*fast_fn)(PyObject *, PyObject *const *, Py_ssize_t);
typedef PyObject *(*fast_kw_fn)(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);

#define MAX_TENSOR_TYPES 32
static TensorAccess *access_table[MAX_TENSOR_TYPES];
static int access_count = 0;
static PyObject *empty_tuple = NULL;

/* Borrowed descriptor `name` found on the type's MRO (no instance lookup), or NULL. */
static PyObject *lookup(PyTypeObject *type, const char *name)
{
    PyObject *name_obj = PyUnicode_InternFromString(name);
    if (name_obj == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *descr = _PyType_Lookup(type, name_obj); /* borrowed, never raises */
    Py_DECREF(name_obj);
    return descr;
}

static GetterRef find_getter(PyTypeObject *type, const char *name)
{
    GetterRef ref = {NULL, NULL};
    PyObject *descr = lookup(type, name);
    if (descr != NULL && Py_IS_TYPE(descr, &PyGetSetDescr_Type)) {
        PyGetSetDef *def = ((PyGetSetDescrObject *)descr)->d_getset;
        ref.get = def->get;
        ref.closure = def->closure;
    }
    return ref;
}

static MethodRef find_method(PyTypeObject *type, const char *name)
{
    MethodRef ref = {NULL, NULL, 0};
    PyObject *descr = lookup(type, name);
    if (descr == NULL) {
        return ref;
    }
    ref.descr = Py_NewRef(descr);
    if (Py_IS_TYPE(descr, &PyMethodDescr_Type)) {
        PyMethodDef *def = ((PyMethodDescrObject *)descr)->d_method;
        int flags = def->ml_flags & ~(METH_COEXIST | METH_STATIC | METH_CLASS);
        if (flags == (METH_VARARGS | METH_KEYWORDS) || flags == METH_NOARGS ||
            flags == METH_VARARGS || flags == METH_FASTCALL ||
            flags == (METH_FASTCALL | METH_KEYWORDS)) {
            ref.meth = def->ml_meth;
            ref.flags = flags;
        }
    }
    return ref;
}

/* torch._C._disabled_torch_function_impl (nn.Parameter's __torch_function__): torch then
 * skips Python dispatch entirely, so the getters read the tensor itself, as for torch.Tensor. */
static int is_disabled_torch_function(PyObject *tf)
{
    return tf != NULL && PyCFunction_Check(tf) &&
           strcmp(((PyCFunctionObject *)tf)->m_ml->ml_name, "_disabled_torch_function_impl") == 0;
}

/* Whether is_contiguous() may stand in for stride() on this type (TensorAccess comment).
 * The C base is the type that defines the `shape` getset (torch._C.TensorBase); the Python
 * class right above it in the MRO (torch.Tensor) is the reference for the overrides. */
static int contiguity_trusted(PyTypeObject *type, const TensorAccess *acc)
{
    PyObject *shape = lookup(type, "shape");
    if (acc->shape.get == NULL || acc->stride.meth == NULL || acc->is_contiguous.meth == NULL ||
        shape == NULL || !Py_IS_TYPE(shape, &PyGetSetDescr_Type)) {
        return 0;
    }
    PyTypeObject *base = PyDescr_TYPE(shape);
    /* torch's own methods, not a same-named method of some other C type. */
    if (PyDescr_TYPE(acc->stride.descr) != base || PyDescr_TYPE(acc->is_contiguous.descr) != base) {
        return 0;
    }
    if (type == base) {
        return 1;
    }
    PyObject *mro = type->tp_mro;
    if (mro == NULL || !PyTuple_Check(mro)) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); i++) {
        PyTypeObject *cls = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        if (cls->tp_base == base) {
            PyObject *tf = lookup(type, "__torch_function__");
            return (tf == lookup(cls, "__torch_function__") || is_disabled_torch_function(tf)) &&
                   lookup(type, "__torch_dispatch__") == lookup(cls, "__torch_dispatch__");
        }
    }
    return 0;
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
    /* Entries live for the whole process (types are few and usually immortal classes). */
    acc->type = (PyTypeObject *)Py_NewRef((PyObject *)type);
    acc->dtype = find_getter(type, "dtype");
    acc->device = find_getter(type, "device");
    acc->requires_grad = find_getter(type, "requires_grad");
    acc->shape = find_getter(type, "shape");
    acc->is_cpu = find_getter(type, "is_cpu");
    acc->stride = find_method(type, "stride");
    acc->is_contiguous = find_method(type, "is_contiguous");
    acc->get_device = find_method(type, "get_device");
    acc->contiguity_trusted = contiguity_trusted(type, acc);
    access_table[access_count++] = acc;
    return acc;
}

/* New reference to attribute `name` of v, through the cached getter when there is one. */
static inline PyObject *read_attr(PyObject *v, GetterRef ref, const char *name)
{
    if (ref.get != NULL) {
        return ref.get(v, ref.closure);
    }
    return PyObject_GetAttrString(v, name);
}

/* New reference to v.name(), through the cached C function when there is one. */
static PyObject *call_method(const MethodRef *m, PyObject *v, const char *name)
{
    if (m->meth != NULL) {
        switch (m->flags) {
        case METH_VARARGS | METH_KEYWORDS:
            return ((PyCFunctionWithKeywords)(void (*)(void))m->meth)(v, empty_tuple, NULL);
        case METH_VARARGS:
            return m->meth(v, empty_tuple);
        case METH_NOARGS:
            return m->meth(v, NULL);
        case METH_FASTCALL:
            return ((fast_fn)(void (*)(void))m->meth)(v, NULL, 0);
        default:
            return ((fast_kw_fn)(void (*)(void))m->meth)(v, NULL, 0, NULL);
        }
    }
    if (m->descr != NULL && PyFunction_Check(m->descr)) {
        return PyObject_Vectorcall(m->descr, &v, 1, NULL); /* a plain Python method */
    }
    return PyObject_CallMethod(v, name, NULL); /* anything else: full attribute semantics */
}

/* One int of a metadata tuple; 1 ok, -1 error. */
static inline int read_int(PyObject *o, int64_t *out)
{
    if (pyjit_compact_int(o, out)) {
        return 1;
    }
    long long got = PyLong_AsLongLong(o);
    if (got == -1 && PyErr_Occurred()) {
        return -1;
    }
    *out = (int64_t)got;
    return 1;
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
        int64_t got;
        if (read_int(PyTuple_GET_ITEM(tup, i), &got) < 0) {
            return -1;
        }
        if (got != expected[i]) {
            return 0;
        }
    }
    return 1;
}

/* Strides, after the sizes matched. STRIDES_CONTIGUOUS: every size is static and >= 2 and
 * the expected strides are the contiguous ones, so "is_contiguous()" and "stride() equals
 * the expected strides" are the same statement (torch's contiguity only ignores the strides
 * of size-1 dimensions and of empty tensors), and is_contiguous() returns a bool singleton
 * instead of building a tuple of ints. */
static int match_strides(const TensorSpec *spec, PyObject *v)
{
    const TensorAccess *acc = spec->acc;
    PyObject *o;
    int ok;
    if (spec->stride_mode == STRIDES_CONTIGUOUS) {
        o = call_method(&acc->is_contiguous, v, "is_contiguous");
        if (o == NULL) {
            return -1;
        }
        ok = (o == Py_True);
    }
    else {
        o = call_method(&acc->stride, v, "stride");
        if (o == NULL) {
            return -1;
        }
        ok = match_ints(o, spec->strides, spec->ndim);
    }
    Py_DECREF(o);
    return ok;
}

static int match_device(const TensorSpec *spec, PyObject *v)
{
    const TensorAccess *acc = spec->acc;
    PyObject *o;
    int ok;
    switch (spec->device_mode) {
    case DEV_CPU:
        /* `device` builds a new torch.device per read; `is_cpu` returns a bool singleton. */
        o = acc->is_cpu.get(v, acc->is_cpu.closure);
        if (o == NULL) {
            return -1;
        }
        ok = (o == Py_True);
        Py_DECREF(o);
        return ok;
    case DEV_PROBE: {
        o = spec->device_probe.get(v, spec->device_probe.closure);
        if (o == NULL) {
            return -1;
        }
        ok = (o == Py_True);
        Py_DECREF(o);
        if (!ok) {
            return 0;
        }
        o = call_method(&acc->get_device, v, "get_device");
        if (o == NULL) {
            return -1;
        }
        int64_t index;
        ok = read_int(o, &index);
        Py_DECREF(o);
        return ok < 0 ? -1 : index == spec->device_index;
    }
    case DEV_GENERIC:
        break;
    }
    o = read_attr(v, acc->device, "device");
    if (o == NULL) {
        return -1;
    }
    ok = (o == spec->device) ? 1 : PyObject_RichCompareBool(o, spec->device, Py_EQ);
    Py_DECREF(o);
    return ok;
}

/* Store the spec's bindings of kind `what` read from `tup`, a metadata tuple that already
 * matched (a tuple of ndim items). 1 ok, -1 error (an item that is not an int). */
static int bind_from(const TensorSpec *spec, PyObject *tup, int what, const SlotFrame *slots)
{
    for (Py_ssize_t i = 0; i < spec->n_bind; i++) {
        const SlotBind *b = &spec->bind[i];
        if (b->what != what) {
            continue;
        }
        int64_t value;
        if (read_int(PyTuple_GET_ITEM(tup, b->dim), &value) < 0) {
            return -1;
        }
        pyjit_slot_store(slots, b->slot, value);
    }
    return 1;
}

/* Strides when some binding reads one: stride() is read whatever the stride mode (the
 * contiguity shortcut gives no values), compared where checked, then bound. */
static int match_and_bind_strides(const TensorSpec *spec, PyObject *v, const SlotFrame *slots)
{
    PyObject *o = call_method(&spec->acc->stride, v, "stride");
    if (o == NULL) {
        return -1;
    }
    int ok;
    if (spec->strides != NULL) {
        ok = match_ints(o, spec->strides, spec->ndim);
    }
    else {
        ok = PyTuple_Check(o) && PyTuple_GET_SIZE(o) == spec->ndim;
    }
    if (ok == 1) {
        ok = bind_from(spec, o, BIND_STRIDE, slots);
    }
    Py_DECREF(o);
    return ok;
}

/* Order: exact type (free), then the bool/singleton getters, then sizes (a tuple), strides,
 * device. A hit pays for all of them; a miss usually fails on dtype, requires_grad or sizes. */
int pyjit_tensor_match(const TensorSpec *spec, PyObject *v, const SlotFrame *slots)
{
    if (Py_TYPE(v) != spec->type) {
        return 0;
    }
    const TensorAccess *acc = spec->acc;
    int ok;
    PyObject *o = read_attr(v, acc->dtype, "dtype");
    if (o == NULL) {
        return -1;
    }
    ok = (o == spec->dtype);
    Py_DECREF(o);
    if (!ok) {
        return 0;
    }
    o = read_attr(v, acc->requires_grad, "requires_grad");
    if (o == NULL) {
        return -1;
    }
    ok = ((o == Py_True) == (spec->requires_grad != 0));
    Py_DECREF(o);
    if (!ok) {
        return 0;
    }
    o = read_attr(v, acc->shape, "shape");
    if (o == NULL) {
        return -1;
    }
    ok = match_ints(o, spec->sizes, spec->ndim);
    if (ok == 1 && spec->n_bind > 0) {
        ok = bind_from(spec, o, BIND_SIZE, slots);
    }
    Py_DECREF(o);
    if (ok <= 0) {
        return ok;
    }
    if (spec->bind_strides) {
        ok = match_and_bind_strides(spec, v, slots);
        if (ok <= 0) {
            return ok;
        }
    }
    else if (spec->stride_mode != STRIDES_NONE) {
        ok = match_strides(spec, v);
        if (ok <= 0) {
            return ok;
        }
    }
    /* -1 (an error) goes to the caller: an Exception fails the check, KeyboardInterrupt
     * propagates (guards.c). */
    return match_device(spec, v);
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

/* One int field of a binding triple; -1 with an exception on a non-int or a huge value. */
static int bind_field(PyObject *triple, Py_ssize_t i, Py_ssize_t k, Py_ssize_t *out)
{
    static const char *const names[] = {"what", "dim", "slot"};
    PyObject *item = PySequence_Fast_GET_ITEM(triple, k);
    if (!PyLong_Check(item) || PyBool_Check(item)) {
        PyErr_Format(PyExc_TypeError, "check_tensor: bind[%zd].%s must be an int, got %.80s", i,
                     names[k], Py_TYPE(item)->tp_name);
        return -1;
    }
    *out = PyLong_AsSsize_t(item);
    if (*out == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "check_tensor: bind[%zd].%s is out of range", i, names[k]);
        return -1;
    }
    return 0;
}

/* Parse `bind` (None or a sequence of (what, dim, slot)) into the spec. 0 ok, -1 error. */
static int parse_bind(TensorSpec *spec, PyObject *bind)
{
    if (bind == NULL || bind == Py_None) {
        return 0;
    }
    PyObject *seq = PySequence_Fast(bind, "check_tensor: bind must be a tuple of (what, dim, slot) triples");
    if (seq == NULL) {
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n == 0) {
        Py_DECREF(seq);
        return 0;
    }
    spec->bind = PyMem_Calloc((size_t)n, sizeof(SlotBind));
    if (spec->bind == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *triple = PySequence_Fast(PySequence_Fast_GET_ITEM(seq, i),
                                           "check_tensor: each bind entry must be a (what, dim, slot) triple");
        if (triple == NULL) {
            goto error;
        }
        Py_ssize_t what, dim, slot;
        int bad = PySequence_Fast_GET_SIZE(triple) != 3;
        if (bad) {
            PyErr_Format(PyExc_ValueError, "check_tensor: bind[%zd] must be a (what, dim, slot) triple", i);
        }
        bad = bad || bind_field(triple, i, 0, &what) < 0 || bind_field(triple, i, 1, &dim) < 0 ||
              bind_field(triple, i, 2, &slot) < 0;
        Py_DECREF(triple);
        if (bad) {
            goto error;
        }
        if (what != BIND_SIZE && what != BIND_STRIDE) {
            PyErr_Format(PyExc_ValueError, "check_tensor: bind[%zd].what must be 0 (size) or 1 (stride), got %zd",
                         i, what);
            goto error;
        }
        if (dim < 0 || dim >= spec->ndim) {
            PyErr_Format(PyExc_ValueError, "check_tensor: bind[%zd].dim %zd out of range for %zd dims",
                         i, dim, spec->ndim);
            goto error;
        }
        if (slot < 0 || slot >= PYJIT_MAX_SLOTS) {
            PyErr_Format(PyExc_ValueError, "check_tensor: bind[%zd].slot %zd out of range [0, %d)", i,
                         slot, PYJIT_MAX_SLOTS);
            goto error;
        }
        for (Py_ssize_t j = 0; j < i; j++) {
            if (spec->bind[j].slot == slot) {
                PyErr_Format(PyExc_ValueError, "check_tensor: slot %zd is bound twice", slot);
                goto error;
            }
        }
        spec->bind[i].what = (int)what;
        spec->bind[i].dim = dim;
        spec->bind[i].slot = slot;
        spec->n_bind = i + 1;
        spec->bind_strides |= what == BIND_STRIDE;
    }
    Py_DECREF(seq);
    return 0;
error:
    Py_DECREF(seq);
    return -1;
}

TensorSpec *pyjit_tensor_spec_new(PyObject *type, PyObject *dtype, PyObject *device,
                                  int requires_grad, PyObject *sizes, PyObject *strides,
                                  PyObject *bind)
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
    if (spec != NULL && parse_bind(spec, bind) < 0) {
        pyjit_tensor_spec_free(spec);
        return NULL;
    }
    return spec;
}

/* Device types whose `is_<type>` getter and get_device() together say exactly what
 * `tensor.device == torch.device(type, index)` says: the getter tests the tensor's device
 * type, get_device() returns its index (-1 when it has none). Others use `device` and ==. */
static const char *const probe_device_types[] = {"cuda", "meta", "xpu", "mps"};

static void choose_device_mode(TensorSpec *spec)
{
    const TensorAccess *acc = spec->acc;
    spec->device_mode = DEV_GENERIC;
    /* Only a real torch.device: another object could define == differently. */
    if (strcmp(Py_TYPE(spec->device)->tp_name, "torch.device") != 0) {
        return;
    }
    PyObject *dev_type = PyObject_GetAttrString(spec->device, "type");
    PyObject *index = dev_type ? PyObject_GetAttrString(spec->device, "index") : NULL;
    if (index == NULL || !PyUnicode_Check(dev_type)) {
        PyErr_Clear();
        Py_XDECREF(dev_type);
        Py_XDECREF(index);
        return;
    }
    long idx = -1;
    if (index != Py_None) {
        idx = PyLong_Check(index) ? PyLong_AsLong(index) : -2;
        if (idx == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            idx = -2;
        }
    }
    if (PyUnicode_CompareWithASCIIString(dev_type, "cpu") == 0) {
        /* CPU tensors never carry an index, so torch.device("cpu", 0) is left to ==. */
        if (index == Py_None && acc->is_cpu.get != NULL) {
            spec->device_mode = DEV_CPU;
        }
    }
    else if (idx >= -1 && acc->get_device.descr != NULL) {
        for (size_t i = 0; i < sizeof(probe_device_types) / sizeof(probe_device_types[0]); i++) {
            if (PyUnicode_CompareWithASCIIString(dev_type, probe_device_types[i]) != 0) {
                continue;
            }
            char name[16];
            snprintf(name, sizeof(name), "is_%s", probe_device_types[i]);
            GetterRef probe = find_getter(spec->type, name);
            if (probe.get != NULL) {
                spec->device_mode = DEV_PROBE;
                spec->device_probe = probe;
                spec->device_index = idx;
            }
            break;
        }
    }
    Py_DECREF(dev_type);
    Py_DECREF(index);
}

/* STRIDES_CONTIGUOUS when allowed (see match_strides), else EXACT; NONE without strides. */
static void choose_stride_mode(TensorSpec *spec)
{
    if (spec->strides == NULL) {
        spec->stride_mode = STRIDES_NONE;
        return;
    }
    spec->stride_mode = STRIDES_EXACT;
    if (!spec->acc->contiguity_trusted) {
        return;
    }
    uint64_t expected = 1; /* unsigned: a huge (never matching) spec must not overflow UB */
    for (Py_ssize_t i = spec->ndim - 1; i >= 0; i--) {
        if (spec->sizes[i] == PYJIT_DYN || spec->sizes[i] < 2 || spec->strides[i] == PYJIT_DYN ||
            (uint64_t)spec->strides[i] != expected) {
            return;
        }
        expected *= (uint64_t)spec->sizes[i];
    }
    spec->stride_mode = STRIDES_CONTIGUOUS;
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
    choose_stride_mode(spec);
    choose_device_mode(spec);
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
    PyMem_Free(spec->bind);
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
    PyObject *bind = PyTuple_New(spec->n_bind);
    if (bind == NULL) {
        Py_DECREF(sizes);
        Py_DECREF(strides);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < spec->n_bind; i++) {
        const SlotBind *b = &spec->bind[i];
        PyObject *triple = Py_BuildValue("(inn)", b->what, b->dim, b->slot);
        if (triple == NULL) {
            Py_DECREF(sizes);
            Py_DECREF(strides);
            Py_DECREF(bind);
            return NULL;
        }
        PyTuple_SET_ITEM(bind, i, triple);
    }
    PyObject *d = Py_BuildValue("{sOsOsOsOsNsNsN}", "tensor_type", (PyObject *)spec->type,
                                "dtype", spec->dtype, "device", spec->device, "requires_grad",
                                spec->requires_grad ? Py_True : Py_False, "sizes", sizes,
                                "strides", strides, "bind", bind);
    return d;
}
