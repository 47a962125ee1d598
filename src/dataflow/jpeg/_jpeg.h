/*
 * Shared between _jpegmodule.c (decoding) and _jpegresize.c (the bilinear resize kernel) of the
 * dataflow.jpeg._jpeg extension.
 */
#ifndef DATAFLOW_JPEG_H
#define DATAFLOW_JPEG_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* One axis of a resize: output pixel i reads the source coordinate
   (float)((i + start + 0.5) * scale - 0.5 + shift) of a frame of `length` pixels (clamped to
   its edges), whose pixels the source buffer holds from `origin` on. */
typedef struct {
    double scale, shift;
    Py_ssize_t start, length, origin;
} Axis;

typedef struct {
    const unsigned char *src;
    Py_ssize_t src_stride, src_h, src_w;
    unsigned char *dst;
    Py_ssize_t dst_stride, out_h, out_w;
    int cn, flip_h, flip_v;
    const unsigned char *lut; /* 256 * cn entries (entry v * cn + channel), or NULL */
    int use_add;              /* add[k] to channel k, saturated (instead of a table) */
    int add[4];
    Axis ax, ay;
    int half; /* the whole resize is exactly 1/2 on both axes: a 2x2 average */
} ResizeJob;

/* Runs without the GIL: 0, -1 (the source does not hold the pixels needed) or -2 (memory). */
int run_resize(const ResizeJob *job);
/* Fill the axes and the offsets from Python objects (with the GIL); -1 with an exception. */
int resize_job_from(ResizeJob *job, PyObject *ax, PyObject *ay, PyObject *add);
/* Fill the output (and the table, held in *lut until released) of a job; -1 with an exception. */
int resize_dst_from(ResizeJob *job, Py_buffer *dst, int cn, PyObject *lut_obj, Py_buffer *lut);
/* Set the Python exception for a run_resize error code (with the GIL); returns rc. */
int resize_error(int rc);
PyObject *jpeg_resize(PyObject *self, PyObject *args);
void resize_init(void);

#endif
