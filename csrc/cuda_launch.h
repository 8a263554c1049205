/* pyjit._C.KernelLauncher: direct cuLaunchKernel calls for compiled Triton kernels (cuda_launch.c). */
#ifndef PYJIT_CUDA_LAUNCH_H
#define PYJIT_CUDA_LAUNCH_H

#include <Python.h>

/* Adds the KernelLauncher type to the module; 0, or -1 with an exception set. */
int pyjit_cuda_launch_ready(PyObject *module);

#endif
