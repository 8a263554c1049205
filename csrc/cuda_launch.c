/* Direct launches of compiled Triton kernels through the CUDA driver (pyjit._C.KernelLauncher).
 *
 * Triton's own launcher converts every argument on every call (a Python call of each tensor's
 * data_ptr, a driver query per pointer that it is device memory, its hooks and scratch
 * allocation) and reaches it through a Python wrapper: about 5.5 us a launch on the lent H200's
 * host, more with many tensors. A generated module's launch site passes the same kernel, grid,
 * block and argument types every call (runtime/fast_launch.py checks the rest), so this object
 * is built once per site with all of that fixed, and a call only reads the tensors' data
 * pointers and calls cuLaunchKernel.
 *
 * No CUDA headers or libraries at build time: libcuda is opened at first use (dlopen), and the
 * few driver types are declared here as the driver API defines them (opaque handles, int result).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "cuda_launch.h"

#if defined(__linux__) || defined(__APPLE__)
#include <dlfcn.h>
#define PYJIT_HAVE_DLOPEN 1
#endif

#define MAX_PARAMS 256
#define MAX_SCRATCH 4

typedef int cu_result;
typedef void *cu_handle;
typedef cu_result (*launch_fn)(cu_handle function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shared, cu_handle stream, void **params, void **extra);
typedef cu_result (*ctx_fn)(cu_handle *ctx);

static launch_fn cu_launch = NULL;
static ctx_fn cu_ctx_get_current = NULL;
static PyObject *str_data_ptr = NULL;

/* 0 when the driver entry points are loaded; -1 with RuntimeError set otherwise. */
static int load_driver(void)
{
    if (cu_launch != NULL) {
        return 0;
    }
#ifdef PYJIT_HAVE_DLOPEN
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
    }
    if (lib == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "KernelLauncher: libcuda (the CUDA driver) cannot be opened");
        return -1;
    }
    launch_fn launch = (launch_fn)dlsym(lib, "cuLaunchKernel");
    ctx_fn ctx = (ctx_fn)dlsym(lib, "cuCtxGetCurrent");
    if (launch == NULL || ctx == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "KernelLauncher: libcuda lacks cuLaunchKernel or cuCtxGetCurrent");
        return -1;
    }
    cu_ctx_get_current = ctx;
    cu_launch = launch;
    return 0;
#else
    PyErr_SetString(PyExc_RuntimeError, "KernelLauncher: not available on this platform");
    return -1;
#endif
}

typedef struct {
    PyObject_HEAD
    cu_handle function;
    unsigned grid[3];
    unsigned block;
    unsigned shared;
    Py_ssize_t nargs;
    int scratch;
    char kinds[MAX_PARAMS + 1];
} KernelLauncher;

/* Argument kinds: P a tensor's data pointer, i int32, I uint32, l int64, L uint64, f fp32,
 * d fp64, - an argument the compiled kernel does not take (specialised to a constant). */
static int valid_kinds(const char *kinds, Py_ssize_t n)
{
    if (n > MAX_PARAMS) {
        PyErr_Format(PyExc_ValueError, "KernelLauncher: at most %d arguments", MAX_PARAMS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (strchr("PiIlLfd-", kinds[i]) == NULL || kinds[i] == '\0') {
            PyErr_Format(PyExc_ValueError, "KernelLauncher: unknown argument kind '%c' at %zd", (int)kinds[i], i);
            return -1;
        }
    }
    return 0;
}

static PyObject *launcher_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"function", "grid", "block", "shared", "kinds", "scratch", NULL};
    unsigned long long function;
    unsigned gx, gy, gz, block, shared;
    const char *kinds;
    Py_ssize_t nkinds;
    int scratch;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "K(III)IIs#i:KernelLauncher", names, &function, &gx, &gy, &gz,
                                     &block, &shared, &kinds, &nkinds, &scratch)) {
        return NULL;
    }
    if (valid_kinds(kinds, nkinds) < 0) {
        return NULL;
    }
    if (scratch < 0 || scratch > MAX_SCRATCH) {
        PyErr_Format(PyExc_ValueError, "KernelLauncher: scratch must be 0-%d", MAX_SCRATCH);
        return NULL;
    }
    if (function == 0 || block == 0) {
        PyErr_SetString(PyExc_ValueError, "KernelLauncher: a null function or an empty block");
        return NULL;
    }
    if (load_driver() < 0) {
        return NULL;
    }
    KernelLauncher *self = (KernelLauncher *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->function = (cu_handle)(uintptr_t)function;
    self->grid[0] = gx;
    self->grid[1] = gy;
    self->grid[2] = gz;
    self->block = block;
    self->shared = shared;
    self->nargs = nkinds;
    self->scratch = scratch;
    memcpy(self->kinds, kinds, (size_t)nkinds);
    self->kinds[nkinds] = '\0';
    return (PyObject *)self;
}

/* Store one argument's value for the kernel in *slot; 0, or -1 with an exception set. */
static int convert(char kind, PyObject *obj, uint64_t *slot)
{
    *slot = 0;
    if (kind == 'P') {
        PyObject *ptr = PyObject_CallMethodNoArgs(obj, str_data_ptr);
        if (ptr == NULL) {
            return -1;
        }
        unsigned long long v = PyLong_AsUnsignedLongLong(ptr);
        Py_DECREF(ptr);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) {
            return -1;
        }
        *slot = (uint64_t)v;
        return 0;
    }
    if (kind == 'f' || kind == 'd') {
        double v = PyFloat_AsDouble(obj);
        if (v == -1.0 && PyErr_Occurred()) {
            return -1;
        }
        if (kind == 'f') {
            float f = (float)v;
            memcpy(slot, &f, sizeof f);
        } else {
            memcpy(slot, &v, sizeof v);
        }
        return 0;
    }
    long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (kind == 'i' || kind == 'I') {
        if ((kind == 'i' && (v < INT32_MIN || v > INT32_MAX)) || (kind == 'I' && (v < 0 || v > (long long)UINT32_MAX))) {
            PyErr_Format(PyExc_OverflowError, "KernelLauncher: %lld does not fit a 32-bit parameter", v);
            return -1;
        }
        uint32_t u = (uint32_t)v;
        memcpy(slot, &u, sizeof u);
        return 0;
    }
    memcpy(slot, &v, sizeof v);
    return 0;
}

/* launcher(stream, args) -> True when launched; False when this thread has no current CUDA
 * context (the caller then launches through Triton, which makes one current). */
static PyObject *launcher_call(PyObject *op, PyObject *args, PyObject *kwds)
{
    KernelLauncher *self = (KernelLauncher *)op;
    PyObject *stream_obj, *values;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) != 0) {
        PyErr_SetString(PyExc_TypeError, "KernelLauncher takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "KernelLauncher", 2, 2, &stream_obj, &values)) {
        return NULL;
    }
    if (!PyTuple_Check(values) || PyTuple_GET_SIZE(values) != self->nargs) {
        PyErr_Format(PyExc_TypeError, "KernelLauncher: expected a tuple of %zd arguments", self->nargs);
        return NULL;
    }
    void *stream = PyLong_AsVoidPtr(stream_obj);
    if (stream == NULL && PyErr_Occurred()) {
        return NULL;
    }
    uint64_t storage[MAX_PARAMS + MAX_SCRATCH];
    void *params[MAX_PARAMS + MAX_SCRATCH];
    int n = 0;
    for (Py_ssize_t i = 0; i < self->nargs; i++) {
        char kind = self->kinds[i];
        if (kind == '-') {
            continue;
        }
        if (convert(kind, PyTuple_GET_ITEM(values, i), &storage[n]) < 0) {
            return NULL;
        }
        params[n] = &storage[n];
        n++;
    }
    /* Triton appends scratch pointers to every kernel's parameters; unused ones are null
     * (the binding only builds a launcher for kernels that need no scratch memory). */
    for (int s = 0; s < self->scratch; s++) {
        storage[n] = 0;
        params[n] = &storage[n];
        n++;
    }
    if (self->grid[0] == 0 || self->grid[1] == 0 || self->grid[2] == 0) {
        Py_RETURN_TRUE; /* nothing to run, as Triton's launcher does for an empty grid */
    }
    cu_handle ctx = NULL;
    if (cu_ctx_get_current(&ctx) != 0 || ctx == NULL) {
        Py_RETURN_FALSE;
    }
    cu_result r = cu_launch(self->function, self->grid[0], self->grid[1], self->grid[2], self->block, 1, 1,
                            self->shared, (cu_handle)stream, params, NULL);
    if (r != 0) {
        PyErr_Format(PyExc_RuntimeError, "cuLaunchKernel failed with CUDA error %d", r);
        return NULL;
    }
    Py_RETURN_TRUE;
}

static PyObject *launcher_kinds(PyObject *op, void *Py_UNUSED(closure))
{
    KernelLauncher *self = (KernelLauncher *)op;
    return PyUnicode_FromStringAndSize(self->kinds, self->nargs);
}

static PyGetSetDef launcher_getset[] = {
    {"kinds", launcher_kinds, NULL, "The argument kinds this launcher converts (see the module docstring).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject KernelLauncher_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyjit._C.KernelLauncher",
    .tp_basicsize = sizeof(KernelLauncher),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "KernelLauncher(function, grid, block, shared, kinds, scratch): launcher(stream, args) calls "
              "cuLaunchKernel for one compiled Triton kernel at a fixed grid; True when launched, False when "
              "this thread has no current CUDA context.",
    .tp_new = launcher_new,
    .tp_call = launcher_call,
    .tp_getset = launcher_getset,
};

int pyjit_cuda_launch_ready(PyObject *module)
{
    str_data_ptr = PyUnicode_InternFromString("data_ptr");
    if (str_data_ptr == NULL || PyType_Ready(&KernelLauncher_Type) < 0) {
        return -1;
    }
    Py_INCREF(&KernelLauncher_Type);
    if (PyModule_AddObject(module, "KernelLauncher", (PyObject *)&KernelLauncher_Type) < 0) {
        Py_DECREF(&KernelLauncher_Type);
        return -1;
    }
    return 0;
}
