/*
 * dataflow.jpeg._jpeg: region-of-interest JPEG decoding on libjpeg-turbo's own API.
 *
 * Two functions, wrapped by dataflow/jpeg.py (which validates the arguments and allocates the
 * output array):
 *
 *   header(data) -> (height, width, components, jpeg_color_space, orientation, progressive)
 *       reads the markers up to the first scan, no pixel is decoded; orientation is the EXIF
 *       orientation tag (1 when there is none).
 *
 *   decode(data, out, x, y, w, h, denom, color, strict) -> None
 *       decodes the w x h window at (x, y) of the image scaled by 1/denom (denom in 1, 2, 4, 8;
 *       the window is given in the scaled grid) into `out`, a writable uint8 buffer of shape
 *       (h, w, 3) (color 0: BGR, 1: RGB) or (h, w) (color 2: gray) whose pixels are contiguous
 *       (rows may be strided). Rows above the window are only entropy-decoded
 *       (jpeg_skip_scanlines), rows below are never read, and the columns outside the window
 *       skip the IDCT, the upsampling and the colour conversion (jpeg_crop_scanline). The GIL is
 *       released while it runs.
 *
 * Strictness: with strict set, any libjpeg warning (corrupt data that libjpeg would paper over,
 * e.g. a premature end of the data, which it fills with grey) is an error, and so is data with
 * no end-of-image marker after the start of the first scan (a truncated file whose missing
 * part lies below the window, which the decoder never reads). Errors raise
 * dataflow.jpeg._jpeg.DecodeError (a ValueError) with libjpeg's message.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "_jpeg.h"

#if !defined(LIBJPEG_TURBO_VERSION) || !defined(JCS_EXTENSIONS)
#error "dataflow.jpeg._jpeg needs libjpeg-turbo (jpeg_crop_scanline, jpeg_skip_scanlines, JCS_EXT_BGR)"
#endif

static PyObject *DecodeError;

#define MESSAGE_MAX (JMSG_LENGTH_MAX + 160)
#define MIN_WIDTH 32

/* libjpeg reports errors through these callbacks; ours jump back to the caller (libjpeg's
   default error_exit would exit the process). */
typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    int strict;
    char message[MESSAGE_MAX];
} ErrorManager;

static void on_error_exit(j_common_ptr cinfo) {
    ErrorManager *err = (ErrorManager *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->message);
    longjmp(err->jump, 1);
}

static void on_emit_message(j_common_ptr cinfo, int level) {
    ErrorManager *err = (ErrorManager *)cinfo->err;
    if (level >= 0) {
        return; /* trace messages */
    }
    /* a warning: the data is corrupt but libjpeg can go on */
    if (err->strict) {
        char text[JMSG_LENGTH_MAX];
        (*cinfo->err->format_message)(cinfo, text);
        snprintf(err->message, MESSAGE_MAX,
                 "%s (a libjpeg warning; pass strict=False to accept what libjpeg decodes)", text);
        longjmp(err->jump, 1);
    }
}

static void init_errors(struct jpeg_decompress_struct *cinfo, ErrorManager *err, int strict) {
    cinfo->err = jpeg_std_error(&err->pub);
    err->pub.error_exit = on_error_exit;
    err->pub.emit_message = on_emit_message;
    err->strict = strict;
    err->message[0] = '\0';
}

/* ---------------------------------------------------------------- EXIF orientation */
static unsigned read16(const JOCTET *p, int big_endian) {
    return big_endian ? (unsigned)(p[0] << 8 | p[1]) : (unsigned)(p[1] << 8 | p[0]);
}

static unsigned long read32(const JOCTET *p, int big_endian) {
    return big_endian ? ((unsigned long)p[0] << 24 | (unsigned long)p[1] << 16 |
                         (unsigned long)p[2] << 8 | p[3])
                      : ((unsigned long)p[3] << 24 | (unsigned long)p[2] << 16 |
                         (unsigned long)p[1] << 8 | p[0]);
}

/* The orientation tag (0x0112) of the first IFD of an APP1 "Exif" segment, or 1. */
static int exif_orientation(struct jpeg_decompress_struct *cinfo) {
    jpeg_saved_marker_ptr m;
    for (m = cinfo->marker_list; m != NULL; m = m->next) {
        const JOCTET *tiff;
        unsigned long len, ifd, entries, i;
        int big;
        if (m->marker != JPEG_APP0 + 1 || m->data_length < 14 ||
            memcmp(m->data, "Exif\0\0", 6) != 0) {
            continue;
        }
        tiff = m->data + 6;
        len = m->data_length - 6;
        if (tiff[0] == 'M' && tiff[1] == 'M') {
            big = 1;
        } else if (tiff[0] == 'I' && tiff[1] == 'I') {
            big = 0;
        } else {
            return 1;
        }
        ifd = read32(tiff + 4, big);
        if (ifd + 2 > len) {
            return 1;
        }
        entries = read16(tiff + ifd, big);
        for (i = 0; i < entries; i++) {
            const JOCTET *e = tiff + ifd + 2 + 12 * i;
            if (ifd + 2 + 12 * (i + 1) > len) {
                return 1;
            }
            if (read16(e, big) == 0x0112) {
                unsigned v = read16(e + 8, big);
                return (v >= 1 && v <= 8) ? (int)v : 1;
            }
        }
        return 1;
    }
    return 1;
}

/* ---------------------------------------------------------------- header */
static PyObject *jpeg_header(PyObject *self, PyObject *arg) {
    Py_buffer data;
    struct jpeg_decompress_struct cinfo;
    ErrorManager err;
    PyObject *result;
    int orientation;

    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    init_errors(&cinfo, &err, 0);
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&cinfo);
        PyBuffer_Release(&data);
        PyErr_SetString(DecodeError, err.message);
        return NULL;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, (const unsigned char *)data.buf, (unsigned long)data.len);
    jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(&cinfo, TRUE);
    orientation = exif_orientation(&cinfo);
    result = Py_BuildValue("(IIiiii)", cinfo.image_height, cinfo.image_width,
                           cinfo.num_components, (int)cinfo.jpeg_color_space, orientation,
                           (int)jpeg_has_multiple_scans(&cinfo));
    jpeg_destroy_decompress(&cinfo);
    PyBuffer_Release(&data);
    return result;
}

/* ---------------------------------------------------------------- decode */
typedef struct {
    const unsigned char *data;
    size_t size;
    unsigned char *out; /* NULL: decode into a new buffer of whole decoded rows (see wide) */
    Py_ssize_t row_stride;
    JDIMENSION x, y, w, h;
    int denom, color, strict;
    /* without `out`: the rows as libjpeg decodes them (wide_w columns, of which the window
       starts at column `skip`), in the calling thread's buffer (see thread_rows) */
    unsigned char *wide;
    JDIMENSION wide_w, skip;
    char message[MESSAGE_MAX];
} DecodeJob;

/* The decoded rows of decode_resize live in a buffer that each thread keeps for its next
   call (grown as needed, freed when the thread ends): a fresh allocation of this size would be
   mapped from the OS and page-faulted in at every image. */
static pthread_key_t rows_key;

typedef struct {
    unsigned char *buf;
    size_t size;
} RowsBuffer;

static void free_rows(void *p) {
    RowsBuffer *rb = (RowsBuffer *)p;
    free(rb->buf);
    free(rb);
}

/* A buffer of at least `size` bytes for this thread, or NULL (out of memory). */
static unsigned char *thread_rows(size_t size) {
    RowsBuffer *rb = (RowsBuffer *)pthread_getspecific(rows_key);
    if (rb == NULL) {
        rb = (RowsBuffer *)calloc(1, sizeof(RowsBuffer));
        if (rb == NULL || pthread_setspecific(rows_key, rb) != 0) {
            free(rb);
            return NULL;
        }
    }
    if (rb->size < size) {
        unsigned char *grown = (unsigned char *)realloc(rb->buf, size);
        if (grown == NULL) {
            return NULL;
        }
        rb->buf = grown;
        rb->size = size;
    }
    return rb->buf;
}

/* True if an end-of-image marker (FF D9) lies in [begin, end): entropy-coded data stuffs every
   FF byte with a 00, so FF D9 there can only be a marker. Searched backwards: it is normally
   the last two bytes. */
static int has_eoi(const unsigned char *begin, const unsigned char *end) {
    const unsigned char *p;
    for (p = end - 2; p >= begin; p--) {
        if (p[0] == 0xFF && p[1] == 0xD9) {
            return 1;
        }
    }
    return 0;
}

/* Runs without the GIL. Returns 0, or -1 with job->message set. */
static int run_decode(DecodeJob *job) {
    struct jpeg_decompress_struct cinfo;
    ErrorManager err;
    unsigned char *volatile scratch = NULL;
    JDIMENSION xoff, cw, skip, r;
    int nc;

    init_errors(&cinfo, &err, job->strict);
    if (setjmp(err.jump)) {
        memcpy(job->message, err.message, MESSAGE_MAX);
        free(scratch);
        job->wide = NULL; /* the thread's buffer, kept */
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, job->data, (unsigned long)job->size);
    jpeg_read_header(&cinfo, TRUE);
    if (job->strict && !has_eoi(cinfo.src->next_input_byte,
                                cinfo.src->next_input_byte + cinfo.src->bytes_in_buffer)) {
        snprintf(err.message, MESSAGE_MAX,
                 "the data has no end-of-image marker after its first scan: the file is "
                 "truncated (pass strict=False to decode what is there)");
        longjmp(err.jump, 1);
    }
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
        snprintf(err.message, MESSAGE_MAX, "CMYK/YCCK JPEGs are not supported by this decoder");
        longjmp(err.jump, 1);
    }
    cinfo.out_color_space = job->color == 2 ? JCS_GRAYSCALE
                            : job->color == 1 ? JCS_EXT_RGB : JCS_EXT_BGR;
    nc = job->color == 2 ? 1 : 3;
    cinfo.scale_num = 1;
    cinfo.scale_denom = (unsigned)job->denom;
    cinfo.dct_method = JDCT_ISLOW; /* the default, and what cv2.imdecode uses */
    jpeg_start_decompress(&cinfo);
    if (job->x + job->w > cinfo.output_width || job->y + job->h > cinfo.output_height) {
        snprintf(err.message, MESSAGE_MAX,
                 "the window %ux%u at (%u, %u) does not fit the %ux%u image at scale 1/%d",
                 job->w, job->h, job->x, job->y, cinfo.output_width, cinfo.output_height,
                 job->denom);
        longjmp(err.jump, 1);
    }
    /* One column of margin on each side inside the image: libjpeg upsamples the chroma of
       the window's first and last columns as if they were the image's edges, so those two
       columns may differ from a full decode and are decoded but not kept. */
    xoff = job->x > 0 ? job->x - 1 : 0;
    cw = (job->x + job->w < cinfo.output_width ? job->x + job->w + 1 : cinfo.output_width) - xoff;
    /* At least MIN_WIDTH columns: for a component less than 2 samples wide libjpeg switches to
       plain (non-"fancy") upsampling, which would change every pixel of a narrow window. */
    if (cw < MIN_WIDTH && cw < cinfo.output_width) {
        JDIMENSION end = xoff + MIN_WIDTH < cinfo.output_width ? xoff + MIN_WIDTH
                                                               : cinfo.output_width;
        xoff = end > MIN_WIDTH ? end - MIN_WIDTH : 0;
        cw = end - xoff;
    }
    if (cw < cinfo.output_width) {
        /* moves xoff down to an iMCU boundary and widens cw to match */
        jpeg_crop_scanline(&cinfo, &xoff, &cw);
    }
    skip = job->x - xoff;
    if (job->out == NULL) { /* no copy: the caller reads the window from the decoded rows */
        job->wide = thread_rows((size_t)cw * nc * job->h);
        if (job->wide == NULL) {
            snprintf(err.message, MESSAGE_MAX, "out of memory");
            longjmp(err.jump, 1);
        }
        job->wide_w = cw;
        job->skip = skip;
    } else if (skip != 0 || cw != job->w) {
        scratch = (unsigned char *)malloc((size_t)cw * nc);
        if (scratch == NULL) {
            snprintf(err.message, MESSAGE_MAX, "out of memory");
            longjmp(err.jump, 1);
        }
    }
    if (job->y > 0 && jpeg_skip_scanlines(&cinfo, job->y) != job->y) {
        snprintf(err.message, MESSAGE_MAX, "could not skip %u rows", job->y);
        longjmp(err.jump, 1);
    }
    for (r = 0; r < job->h; r++) {
        unsigned char *dst = job->out != NULL ? job->out + (Py_ssize_t)r * job->row_stride
                                              : job->wide + (size_t)r * cw * nc;
        JSAMPROW row = scratch != NULL ? scratch : dst;
        if (jpeg_read_scanlines(&cinfo, &row, 1) != 1) {
            snprintf(err.message, MESSAGE_MAX, "libjpeg returned no row %u", job->y + r);
            longjmp(err.jump, 1);
        }
        if (scratch != NULL) {
            memcpy(dst, scratch + (size_t)skip * nc, (size_t)job->w * nc);
        }
    }
    if (cinfo.output_scanline == cinfo.output_height) {
        jpeg_finish_decompress(&cinfo); /* reads the rest up to the end-of-image marker */
    }
    free(scratch);
    scratch = NULL;
    jpeg_destroy_decompress(&cinfo);
    return 0;
}

/* What decode() and decode_resize() share: check the window and the mode, get the data and
   out buffers and fill `job` with the window. 0, or -1 with an exception set and no buffer held;
   on success the caller releases both buffers. */
static int decode_job_from(DecodeJob *job, PyObject *data_obj, Py_buffer *data, PyObject *out_obj,
                           Py_buffer *out, unsigned int x, unsigned int y, unsigned int w,
                           unsigned int h, int denom, int color, int strict) {
    if (denom != 1 && denom != 2 && denom != 4 && denom != 8) {
        PyErr_Format(PyExc_ValueError, "denom must be 1, 2, 4 or 8, got %d", denom);
        return -1;
    }
    if (color < 0 || color > 2 || w == 0 || h == 0) {
        PyErr_Format(PyExc_ValueError, "bad color %d or empty window %ux%u", color, w, h);
        return -1;
    }
    if (PyObject_GetBuffer(data_obj, data, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    if (PyObject_GetBuffer(out_obj, out, PyBUF_RECORDS) < 0) {
        PyBuffer_Release(data);
        return -1;
    }
    memset(job, 0, sizeof(*job));
    job->data = (const unsigned char *)data->buf;
    job->size = (size_t)data->len;
    job->x = x;
    job->y = y;
    job->w = w;
    job->h = h;
    job->denom = denom;
    job->color = color;
    job->strict = strict;
    return 0;
}

static PyObject *jpeg_decode(PyObject *self, PyObject *args) {
    PyObject *data_obj, *out_obj;
    Py_buffer data, out;
    unsigned int x, y, w, h;
    int denom, color, strict, rc, nc;
    DecodeJob job;

    if (!PyArg_ParseTuple(args, "OOIIIIiip", &data_obj, &out_obj, &x, &y, &w, &h, &denom,
                          &color, &strict) ||
        decode_job_from(&job, data_obj, &data, out_obj, &out, x, y, w, h, denom, color,
                        strict) < 0) {
        return NULL;
    }
    nc = color == 2 ? 1 : 3;
    if (out.itemsize != 1 || out.ndim != (nc == 1 ? 2 : 3) || out.shape[0] != (Py_ssize_t)h ||
        out.shape[1] != (Py_ssize_t)w || (nc == 3 && out.shape[2] != 3) ||
        out.strides[1] != nc || (nc == 3 && out.strides[2] != 1) || out.strides[0] < w * nc) {
        PyErr_Format(PyExc_ValueError,
                     "out must be a writable uint8 buffer of shape (%u, %u%s) with contiguous "
                     "pixels", h, w, nc == 3 ? ", 3" : "");
        PyBuffer_Release(&out);
        PyBuffer_Release(&data);
        return NULL;
    }
    job.out = (unsigned char *)out.buf;
    job.row_stride = out.strides[0];
    Py_BEGIN_ALLOW_THREADS
    rc = run_decode(&job);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&out);
    PyBuffer_Release(&data);
    if (rc != 0) {
        PyErr_SetString(DecodeError, job.message);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* decode_resize(data, out, x, y, w, h, denom, color, strict, x_axis, y_axis, flip_h, flip_v,
   lut, add, half) -> None: decode the window as decode() does, but into libjpeg's own rows
   (no copy), and resize it into `out` with the kernel of _jpegresize.c (the axes' origins are
   relative to the window's first column and row), all without the GIL. */
static PyObject *jpeg_decode_resize(PyObject *self, PyObject *args) {
    PyObject *data_obj, *out_obj, *ax, *ay, *lut_obj, *add_obj;
    Py_buffer data, out, lut;
    unsigned int x, y, w, h;
    int denom, color, strict, rc, rc2 = 0;
    DecodeJob job;
    ResizeJob rj;

    memset(&rj, 0, sizeof(rj));
    if (!PyArg_ParseTuple(args, "OOIIIIiipOOppOOp", &data_obj, &out_obj, &x, &y, &w, &h, &denom,
                          &color, &strict, &ax, &ay, &rj.flip_h, &rj.flip_v, &lut_obj, &add_obj,
                          &rj.half) ||
        resize_job_from(&rj, ax, ay, add_obj) < 0 ||
        decode_job_from(&job, data_obj, &data, out_obj, &out, x, y, w, h, denom, color,
                        strict) < 0) {
        return NULL;
    }
    if (resize_dst_from(&rj, &out, color == 2 ? 1 : 3, lut_obj, &lut) < 0) {
        PyBuffer_Release(&out);
        PyBuffer_Release(&data);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = run_decode(&job);
    if (rc == 0) {
        rj.src = job.wide;
        rj.src_stride = (Py_ssize_t)job.wide_w * rj.cn;
        rj.src_h = h;
        rj.src_w = job.wide_w;
        rj.ax.origin -= job.skip;
        rc2 = run_resize(&rj);
    }
    Py_END_ALLOW_THREADS
    if (rj.lut != NULL) {
        PyBuffer_Release(&lut);
    }
    PyBuffer_Release(&out);
    PyBuffer_Release(&data);
    if (rc != 0) {
        PyErr_SetString(DecodeError, job.message);
        return NULL;
    }
    if (resize_error(rc2) != 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"header", jpeg_header, METH_O,
     "header(data) -> (height, width, components, jpeg_color_space, orientation, progressive)"},
    {"decode", jpeg_decode, METH_VARARGS,
     "decode(data, out, x, y, w, h, denom, color, strict): decode a window into out"},
    {"decode_resize", jpeg_decode_resize, METH_VARARGS,
     "decode_resize(data, out, x, y, w, h, denom, color, strict, x_axis, y_axis, flip_h, "
     "flip_v, lut, add, half): decode a window and resize it into out (see _jpegresize.c)"},
    {"resize", jpeg_resize, METH_VARARGS,
     "resize(src, dst, x_axis, y_axis, flip_h, flip_v, lut, half): cv2.resize's bilinear "
     "uint8 resize of a window (see _jpegresize.c)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dataflow.jpeg._jpeg",
    "Region-of-interest JPEG decoding on libjpeg-turbo (see dataflow.jpeg).", -1, methods,
};

PyMODINIT_FUNC PyInit__jpeg(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    resize_init();
    if (pthread_key_create(&rows_key, free_rows) != 0) {
        Py_DECREF(m);
        PyErr_SetString(PyExc_OSError, "pthread_key_create failed");
        return NULL;
    }
    DecodeError = PyErr_NewException("dataflow.jpeg._jpeg.DecodeError", PyExc_ValueError, NULL);
    if (DecodeError == NULL || PyModule_AddObjectRef(m, "DecodeError", DecodeError) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddStringConstant(m, "LIBJPEG_TURBO_VERSION",
                                   Py_STRINGIFY(LIBJPEG_TURBO_VERSION)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
