/* dataflow.wrappers._stack: the fast path of BatchData's stacking.
 *
 * fill(out, values, first) copies the memory of each element of `values` into consecutive
 * slots of `out` (a new C-contiguous array of shape (len(values), *first.shape) and first's
 * dtype) and returns True, when every element is of first's exact type and exports a
 * C-contiguous buffer with first's format, item size and shape. Otherwise it copies nothing
 * more and returns False, and the caller stacks with NumPy (which promotes types, and raises
 * on ragged shapes with its own message). Only the buffer protocol is used, no NumPy headers.
 *
 * NumPy's own stacking of many small arrays discovers the shape and type of every element
 * anew; this is a type check, a buffer request and a memcpy per element.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

static int same_layout(const Py_buffer *a, const Py_buffer *b)
{
    if (a->len != b->len || a->itemsize != b->itemsize || a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return 0;
    const char *fa = a->format ? a->format : "B";
    const char *fb = b->format ? b->format : "B";
    return strcmp(fa, fb) == 0;
}

static PyObject *stack_fill(PyObject *self, PyObject *args)
{
    PyObject *out, *values, *first;
    if (!PyArg_ParseTuple(args, "OOO", &out, &values, &first))
        return NULL;
    PyObject *seq = PySequence_Fast(values, "values must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyTypeObject *type = Py_TYPE(first);
    Py_buffer dst, ref;
    int ok = 0;
    if (PyObject_GetBuffer(out, &dst, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        Py_DECREF(seq);
        return NULL;  /* the caller passes a fresh array: a failure here is a real error */
    }
    if (PyObject_GetBuffer(first, &ref, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();  /* not contiguous, or no buffer at all (object or datetime dtypes) */
        goto done;
    }
    /* object pointers must not be copied without their references */
    if (ref.format != NULL && strchr(ref.format, 'O') != NULL)
        goto release_ref;
    if (ref.len * n != dst.len)
        goto release_ref;
    char *pos = (char *)dst.buf;
    Py_ssize_t i;
    for (i = 0; i < n; i++) {
        PyObject *v = items[i];
        if (Py_TYPE(v) != type)
            break;
        Py_buffer b;
        if (PyObject_GetBuffer(v, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            PyErr_Clear();
            break;
        }
        int same = same_layout(&b, &ref);
        if (same)
            memcpy(pos, b.buf, (size_t)b.len);
        PyBuffer_Release(&b);
        if (!same)
            break;
        pos += ref.len;
    }
    ok = (i == n);
release_ref:
    PyBuffer_Release(&ref);
done:
    PyBuffer_Release(&dst);
    Py_DECREF(seq);
    return PyBool_FromLong(ok);
}

static PyMethodDef methods[] = {
    {"fill", stack_fill, METH_VARARGS,
     "fill(out, values, first) -> bool: copy equal-layout buffers into out (see the module)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dataflow.wrappers._stack",
    "The fast path of BatchData's stacking (see fill).", -1, methods,
};

PyMODINIT_FUNC PyInit__stack(void) { return PyModule_Create(&module); }
